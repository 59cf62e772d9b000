/* Options shared by the cluster commands (serve, run --cluster, status):
 *   --cluster FILE|INLINE  TF ClusterSpec (JSON file or worker=h1:2222,h2:2222)
 *   --key FILE             this process's CURVE key pair (kerasc keygen NAME)
 *   --worker-key PUB       the workers' public key (file or Z85); a worker's
 *                          own key pair is the cluster's server key
 *   --authorized-keys FILE public keys a worker accepts (clients and peers)
 *   --insecure             plaintext, loopback only
 *   --insecure-allow-remote  plaintext beyond loopback too
 *   --deadline-ms N        per request */
#ifndef KC_CLI_NET_ARGS_H
#define KC_CLI_NET_ARGS_H

#include "net/cluster.h"
#include "net/keys.h"
#include "net/transport.h"

typedef struct kc_cli_net {
    const char *cluster, *key, *worker_key, *authorized;
    int insecure, insecure_remote, deadline_ms;
} kc_cli_net;

#define KC_CLI_NET_USAGE                                                              \
    "--cluster SPEC [--key FILE --worker-key PUB | --insecure] [--deadline-ms N]"

/* 1 consumed, 0 not ours, -1 bad value (printed). */
int kc_cli_net_arg(const char *cmd, int argc, char **argv, int *i, kc_cli_net *n);
/* Load the cluster and keys into sec (server: also the authorized keys,
 * kept in *auth for the lifetime of sec). One-line errors. */
kc_status kc_cli_net_setup(const kc_cli_net *n, int server, kc_cluster *cluster,
                           kc_net_security *sec, kc_key_list *auth);

#endif
