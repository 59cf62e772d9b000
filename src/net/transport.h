/* ZeroMQ sockets for the cluster, CURVE-secured by default.
 *
 * A worker's ROUTER socket is a CURVE server: only clients and peers whose
 * public keys are in its authorized list get through (a ZAP handler in the
 * same ZeroMQ context checks every connection). Clients and peers connect
 * with DEALER sockets as CURVE clients with their own key pair and the
 * worker's public key. Plaintext only when asked (--insecure), and then
 * only on loopback unless remote plaintext is explicitly allowed. */
#ifndef KC_TRANSPORT_H
#define KC_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "net/cluster.h"
#include "net/keys.h"
#include "net/wire.h"

typedef struct kc_net_security {
    int insecure;                /* plaintext */
    int insecure_allow_remote;   /* plaintext beyond loopback */
    kc_keypair own;              /* this process's key pair (CURVE) */
    char server_public[KC_KEY_Z85_LEN + 1]; /* workers' public key (clients, peers) */
    const kc_key_list *authorized; /* server side */
} kc_net_security;

typedef struct kc_net kc_net;    /* a ZeroMQ context + the ZAP handler */

kc_status kc_net_new(const kc_net_security *sec, kc_net **out);
void kc_net_free(kc_net *net);
/* Authentication failures the ZAP handler refused so far. */
uint64_t kc_net_refused(const kc_net *net);

/* Worker side: a ROUTER bound to addr. */
kc_status kc_net_bind(kc_net *net, const kc_cluster_addr *addr, void **socket);
/* Client / peer side: a DEALER connected to addr. */
kc_status kc_net_connect(kc_net *net, const kc_cluster_addr *addr, void **socket);
void kc_net_close(void *socket);

/* Send one encoded message (DEALER: [payload]; ROUTER: [identity][payload]). */
kc_status kc_net_send(void *socket, const void *identity, size_t identity_len,
                      const kc_wire_msg *msg);
/* Receive one frame set within timeout_ms (-1: block). *got = 0 on
 * timeout. The message stays where ZeroMQ received it (no copy): `buf`
 * is valid until the next receive on `rx` or kc_net_rx_free. */
typedef struct kc_net_rx {
    unsigned char identity[256];
    size_t identity_len;
    const unsigned char *buf;
    size_t len;
    char peer_key[KC_KEY_Z85_LEN + 1]; /* the sender's CURVE key (ROUTER), or "" */
    _Alignas(8) unsigned char held[64]; /* the zmq_msg_t behind buf */
    int holding;
} kc_net_rx;
kc_status kc_net_recv(void *socket, int is_router, int timeout_ms, size_t max_bytes,
                      kc_net_rx *rx, int *got);
void kc_net_rx_free(kc_net_rx *rx);

/* Watching a DEALER's connection, so a peer that dies (its kernel closes
 * the connection; or ZMTP heartbeats stop: link down) or refuses our key
 * is noticed at once instead of at a deadline. `monitor` is a socket to
 * poll for ZMQ_POLLIN alongside `socket`. */
typedef enum kc_net_event {
    KC_NET_FINE = 0,
    KC_NET_DROPPED,     /* an established connection was lost */
    KC_NET_REFUSED,     /* the handshake failed: key not authorized */
} kc_net_event;
kc_status kc_net_watch(kc_net *net, void *socket, void **monitor);
/* What happened since the last call (drains the monitor). */
kc_net_event kc_net_watch_event(void *monitor);
/* Stop watching (before closing socket). */
void kc_net_unwatch(void *socket, void *monitor);

#endif
