/* Cluster options for the CLI (see net_args.h). */
#include "cli/net_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kc_cli_net_arg(const char *cmd, int argc, char **argv, int *i, kc_cli_net *n)
{
    const char *arg = argv[*i];
    if (!strcmp(arg, "--insecure")) {
        n->insecure = 1;
        return 1;
    }
    if (!strcmp(arg, "--insecure-allow-remote")) {
        n->insecure_remote = 1;
        return 1;
    }
    static const char *const valued[] = {"--cluster", "--key", "--worker-key",
                                         "--authorized-keys", "--deadline-ms", NULL};
    int k = 0;
    while (valued[k] && strcmp(arg, valued[k]))
        k++;
    if (!valued[k])
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "kerasc %s: %s needs a value\n", cmd, arg);
        return -1;
    }
    const char *v = argv[++*i];
    switch (k) {
    case 0: n->cluster = v; break;
    case 1: n->key = v; break;
    case 2: n->worker_key = v; break;
    case 3: n->authorized = v; break;
    default: {
        char *end;
        long ms = strtol(v, &end, 10);
        if (*end || ms < 10 || ms > 3600000) {
            fprintf(stderr, "kerasc %s: --deadline-ms takes 10 to 3600000\n", cmd);
            return -1;
        }
        n->deadline_ms = (int)ms;
    }
    }
    return 1;
}

kc_status kc_cli_net_setup(const kc_cli_net *n, int server, kc_cluster *cluster,
                           kc_net_security *sec, kc_key_list *auth)
{
    memset(sec, 0, sizeof *sec);
    if (!n->cluster)
        return kc_fail(KC_ERR_ARG, "--cluster is required");
    KC_TRY(kc_cluster_load(n->cluster, cluster));
    sec->insecure = n->insecure;
    sec->insecure_allow_remote = n->insecure_remote;
    if (n->insecure_remote && !n->insecure)
        return kc_fail(KC_ERR_ARG, "--insecure-allow-remote only makes sense with --insecure");
    if (n->insecure)
        return KC_OK;
    if (!n->key)
        return kc_fail(KC_ERR_ARG, "CURVE needs --key FILE (kerasc keygen NAME), or --insecure "
                       "on loopback");
    KC_TRY(kc_keypair_load(n->key, &sec->own));
    if (server) {
        if (!n->authorized)
            return kc_fail(KC_ERR_ARG, "a worker needs --authorized-keys FILE (the public keys "
                           "of its clients and of the other workers)");
        KC_TRY(kc_key_list_load(n->authorized, auth));
        sec->authorized = auth;
        memcpy(sec->server_public, sec->own.public_z85, sizeof sec->server_public);
        return KC_OK;
    }
    if (!n->worker_key)
        return kc_fail(KC_ERR_ARG, "a client needs --worker-key PUB (the workers' public key)");
    return kc_public_key_load(n->worker_key, sec->server_public);
}
