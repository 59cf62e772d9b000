/* ZeroMQ transport (see transport.h). */
#include "net/transport.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "base/mem.h"

_Static_assert(sizeof(zmq_msg_t) <= sizeof(((kc_net_rx *)0)->held),
               "kc_net_rx.held must hold a zmq_msg_t");

struct kc_net {
    void *ctx;
    kc_net_security sec;
    pthread_t zap_thread;
    int zap_running;
    void *zap_socket;
    atomic_uint_fast64_t refused;
    atomic_uint_fast64_t monitors;   /* names of the inproc monitor endpoints */
};

/* ------------------------------------------------------------ ZAP */

static void kc_zap_reply(void *sock, zmq_msg_t *frames, const char *code, const char *text)
{
    /* version, request id, status code, status text, user id, metadata */
    zmq_send(sock, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(sock, zmq_msg_data(&frames[1]), zmq_msg_size(&frames[1]), ZMQ_SNDMORE);
    zmq_send(sock, code, strlen(code), ZMQ_SNDMORE);
    zmq_send(sock, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(sock, "", 0, ZMQ_SNDMORE);
    zmq_send(sock, "", 0, 0);
}

/* Whether the n frames of a ZAP request (version, request id, domain,
 * address, identity, mechanism, credentials) come from a CURVE client
 * whose key is authorized, or from a NULL-mechanism client while running
 * insecure. */
static int kc_zap_authorized(const kc_net *net, zmq_msg_t *frames, int n)
{
    if (n < 6)
        return 0;
    const char *mech = zmq_msg_data(&frames[5]);
    size_t mlen = zmq_msg_size(&frames[5]);
    if (mlen == 5 && !memcmp(mech, "CURVE", 5) && n >= 7 && zmq_msg_size(&frames[6]) == 32) {
        char z85[KC_KEY_Z85_LEN + 1];
        zmq_z85_encode(z85, zmq_msg_data(&frames[6]), 32);
        return net->sec.authorized && kc_key_list_contains(net->sec.authorized, z85);
    }
    return mlen == 4 && !memcmp(mech, "NULL", 4) && net->sec.insecure;
}

/* One ZAP request, answered. */
static void kc_zap_handle(kc_net *net, void *sock)
{
    zmq_msg_t frames[8];
    int n = 0, more = 1;
    while (more && n < 8) {
        zmq_msg_init(&frames[n]);
        if (zmq_msg_recv(&frames[n], sock, 0) < 0) {
            zmq_msg_close(&frames[n]);
            break;
        }
        more = zmq_msg_more(&frames[n]);
        n++;
    }
    while (more) { /* drain an oversized request */
        zmq_msg_t extra;
        zmq_msg_init(&extra);
        if (zmq_msg_recv(&extra, sock, 0) < 0)
            more = 0;
        else
            more = zmq_msg_more(&extra);
        zmq_msg_close(&extra);
    }
    /* Every request with a request id is answered, a short one refused:
     * a REP socket that does not reply takes no further request, and
     * every later handshake would wait on it. */
    if (n >= 2) {
        int ok = kc_zap_authorized(net, frames, n);
        if (!ok)
            atomic_fetch_add(&net->refused, 1);
        kc_zap_reply(sock, frames, ok ? "200" : "400",
                     ok ? "OK" : n < 6 ? "malformed request" : "not authorized");
    }
    for (int i = 0; i < n; i++)
        zmq_msg_close(&frames[i]);
}

static void *kc_zap_main(void *arg)
{
    kc_net *net = arg;
    for (;;) {
        zmq_pollitem_t item = {net->zap_socket, 0, ZMQ_POLLIN, 0};
        int rc = zmq_poll(&item, 1, 200);
        if (!net->zap_running)
            break;
        if (rc < 0 && zmq_errno() == ETERM)
            break;
        if (rc > 0)
            kc_zap_handle(net, net->zap_socket);
    }
    return NULL;
}

kc_status kc_net_new(const kc_net_security *sec, kc_net **out)
{
    *out = NULL;
    if (!sec->insecure && !zmq_has("curve"))
        return kc_fail(KC_ERR_UNSUPPORTED, "this libzmq has no CURVE support");
    kc_net *net = kc_calloc(1, sizeof *net);
    if (!net)
        return KC_ERR_NOMEM;
    net->sec = *sec;
    net->ctx = zmq_ctx_new();
    net->zap_socket = net->ctx ? zmq_socket(net->ctx, ZMQ_REP) : NULL;
    if (!net->zap_socket || zmq_bind(net->zap_socket, "inproc://zeromq.zap.01") != 0) {
        kc_status st = kc_fail(KC_ERR_IO, "ZeroMQ: cannot start the authentication handler: %s",
                               zmq_strerror(zmq_errno()));
        kc_net_free(net);
        return st;
    }
    net->zap_running = 1;
    if (pthread_create(&net->zap_thread, NULL, kc_zap_main, net)) {
        net->zap_running = 0;
        kc_net_free(net);
        return kc_fail(KC_ERR_IO, "cannot start the authentication thread");
    }
    *out = net;
    return KC_OK;
}

void kc_net_free(kc_net *net)
{
    if (!net)
        return;
    if (net->zap_running) {
        net->zap_running = 0;
        pthread_join(net->zap_thread, NULL);
    }
    if (net->zap_socket)
        zmq_close(net->zap_socket);
    if (net->ctx)
        zmq_ctx_term(net->ctx);
    free(net);
}

uint64_t kc_net_refused(const kc_net *net) { return atomic_load(&((kc_net *)net)->refused); }

/* --------------------------------------------------------------- sockets */

static kc_status kc_check_plaintext(const kc_net *net, const kc_cluster_addr *addr)
{
    if (net->sec.insecure && !net->sec.insecure_allow_remote && !kc_cluster_is_loopback(addr))
        return kc_fail(KC_ERR_REFUSED,
                       "%s:%d is not a loopback address: plaintext (--insecure) is only allowed "
                       "on loopback unless --insecure-allow-remote is also given",
                       addr->host, addr->port);
    return KC_OK;
}

static void kc_common_options(void *s)
{
    int linger = 0, hwm = 1000, ivl = 1000, ttl = 10000, timeout = 5000;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
    /* ZMTP heartbeats: a dead peer's connection is dropped, not kept. */
    zmq_setsockopt(s, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(s, ZMQ_HEARTBEAT_TTL, &ttl, sizeof ttl);
    zmq_setsockopt(s, ZMQ_HEARTBEAT_TIMEOUT, &timeout, sizeof timeout);
}

/* A socket of `type` with the options every kerasc socket shares. */
static kc_status kc_net_socket(kc_net *net, const kc_cluster_addr *addr, int type, void **s)
{
    *s = NULL;
    KC_TRY(kc_check_plaintext(net, addr));
    *s = zmq_socket(net->ctx, type);
    if (!*s)
        return kc_fail(KC_ERR_IO, "ZeroMQ: %s", zmq_strerror(zmq_errno()));
    kc_common_options(*s);
    return KC_OK;
}

/* Bind or connect s to addr; on failure s is closed. */
static kc_status kc_net_attach(void *s, const kc_cluster_addr *addr, int bind, void **socket)
{
    char endpoint[KC_CLUSTER_HOST_MAX + 32];
    kc_cluster_endpoint(addr, endpoint, sizeof endpoint);
    if ((bind ? zmq_bind(s, endpoint) : zmq_connect(s, endpoint)) != 0) {
        kc_status st = kc_fail(KC_ERR_IO, "cannot %s %s: %s", bind ? "listen on" : "connect to",
                               endpoint, zmq_strerror(zmq_errno()));
        zmq_close(s);
        return st;
    }
    *socket = s;
    return KC_OK;
}

kc_status kc_net_bind(kc_net *net, const kc_cluster_addr *addr, void **socket)
{
    void *s = NULL;
    *socket = NULL;
    KC_TRY(kc_net_socket(net, addr, ZMQ_ROUTER, &s));
    int one = 1;
    const char *domain = "kerasc";
    zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, domain, strlen(domain));
    zmq_setsockopt(s, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    if (!net->sec.insecure) {
        zmq_setsockopt(s, ZMQ_CURVE_SERVER, &one, sizeof one);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, net->sec.own.secret_z85, KC_KEY_Z85_LEN);
    }
    return kc_net_attach(s, addr, 1, socket);
}

kc_status kc_net_connect(kc_net *net, const kc_cluster_addr *addr, void **socket)
{
    void *s = NULL;
    *socket = NULL;
    KC_TRY(kc_net_socket(net, addr, ZMQ_DEALER, &s));
    int reconnect = 200;
    zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &reconnect, sizeof reconnect);
    if (!net->sec.insecure) {
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, net->sec.server_public, KC_KEY_Z85_LEN);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, net->sec.own.public_z85, KC_KEY_Z85_LEN);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, net->sec.own.secret_z85, KC_KEY_Z85_LEN);
    }
    return kc_net_attach(s, addr, 0, socket);
}

void kc_net_close(void *socket)
{
    if (socket)
        zmq_close(socket);
}

kc_status kc_net_send(void *socket, const void *identity, size_t identity_len,
                      const kc_wire_msg *msg)
{
    size_t size = kc_wire_size(msg);
    zmq_msg_t m;
    if (zmq_msg_init_size(&m, size) != 0)
        return kc_fail(KC_ERR_NOMEM, "cannot allocate a %zu-byte message", size);
    if (kc_wire_encode(msg, zmq_msg_data(&m), size) != size) {
        zmq_msg_close(&m);
        return kc_fail(KC_ERR_ARG, "message cannot be encoded");
    }
    if (identity && zmq_send(socket, identity, identity_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return kc_fail(KC_ERR_IO, "send: %s", zmq_strerror(zmq_errno()));
    }
    /* Never block: a full queue or a vanished peer is an error the caller
     * reports (a worker must keep serving everyone else). */
    if (zmq_msg_send(&m, socket, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return kc_fail(KC_ERR_IO, "send: %s", zmq_strerror(zmq_errno()));
    }
    return KC_OK;
}

/* Drop the rest of a multi-frame message. */
static void kc_drain(void *socket)
{
    int more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, socket, ZMQ_DONTWAIT) < 0)
            more = 0;
        else
            more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
}

kc_status kc_net_recv(void *socket, int is_router, int timeout_ms, size_t max_bytes,
                      kc_net_rx *rx, int *got)
{
    *got = 0;
    zmq_pollitem_t item = {socket, 0, ZMQ_POLLIN, 0};
    int rc = zmq_poll(&item, 1, timeout_ms);
    if (rc < 0)
        return kc_fail(KC_ERR_IO, "poll: %s", zmq_strerror(zmq_errno()));
    if (rc == 0)
        return KC_OK;
    zmq_msg_t m;
    rx->identity_len = 0;
    rx->peer_key[0] = '\0';
    if (is_router) {
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, socket, 0) < 0) {
            zmq_msg_close(&m);
            return kc_fail(KC_ERR_IO, "receive: %s", zmq_strerror(zmq_errno()));
        }
        size_t n = zmq_msg_size(&m);
        int more = zmq_msg_more(&m);
        if (n <= sizeof rx->identity) {
            memcpy(rx->identity, zmq_msg_data(&m), n);
            rx->identity_len = n;
        }
        zmq_msg_close(&m);
        if (!more)
            return kc_fail(KC_ERR_FORMAT, "a message without a body");
    }
    /* The body is received straight into the held message. */
    zmq_msg_t *body = (zmq_msg_t *)(void *)rx->held;
    if (rx->holding)
        zmq_msg_close(body);
    rx->holding = 0;
    rx->buf = NULL;
    rx->len = 0;
    zmq_msg_init(body);
    if (zmq_msg_recv(body, socket, 0) < 0) {
        zmq_msg_close(body);
        return kc_fail(KC_ERR_IO, "receive: %s", zmq_strerror(zmq_errno()));
    }
    rx->holding = 1;
    int more = zmq_msg_more(body);
    size_t n = zmq_msg_size(body);
    if (more) {
        kc_drain(socket);
        return kc_fail(KC_ERR_FORMAT, "a message with extra frames");
    }
    if (n > max_bytes)
        return kc_fail(KC_ERR_LIMIT, "a %zu-byte message (limit %zu)", n, max_bytes);
    rx->buf = zmq_msg_data(body);
    rx->len = n;
    *got = 1;
    return KC_OK;
}

void kc_net_rx_free(kc_net_rx *rx)
{
    if (rx->holding)
        zmq_msg_close((zmq_msg_t *)(void *)rx->held);
    memset(rx, 0, sizeof *rx);
}

/* ------------------------------------------------------------ watching */

kc_status kc_net_watch(kc_net *net, void *socket, void **monitor)
{
    *monitor = NULL;
    char endpoint[64];
    snprintf(endpoint, sizeof endpoint, "inproc://kc-monitor-%llu",
             (unsigned long long)atomic_fetch_add(&net->monitors, 1));
    int events = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (zmq_socket_monitor(socket, endpoint, events) != 0)
        return kc_fail(KC_ERR_IO, "ZeroMQ monitor: %s", zmq_strerror(zmq_errno()));
    void *pair = zmq_socket(net->ctx, ZMQ_PAIR);
    int linger = 0;
    if (pair)
        zmq_setsockopt(pair, ZMQ_LINGER, &linger, sizeof linger);
    if (!pair || zmq_connect(pair, endpoint) != 0) {
        kc_status st = kc_fail(KC_ERR_IO, "ZeroMQ monitor: %s", zmq_strerror(zmq_errno()));
        if (pair)
            zmq_close(pair);
        zmq_socket_monitor(socket, NULL, 0);
        return st;
    }
    *monitor = pair;
    return KC_OK;
}

/* One event: [u16 event, u32 value][endpoint]. */
static int kc_read_event(void *monitor)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, monitor, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return 0;
    }
    uint16_t event = 0;
    if (zmq_msg_size(&m) >= 2)
        memcpy(&event, zmq_msg_data(&m), sizeof event);
    int more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    if (more)
        kc_drain(monitor);
    return event ? event : -1;
}

kc_net_event kc_net_watch_event(void *monitor)
{
    kc_net_event worst = KC_NET_FINE;
    for (int e; monitor && (e = kc_read_event(monitor)) != 0;) {
        if (e == ZMQ_EVENT_DISCONNECTED && worst == KC_NET_FINE)
            worst = KC_NET_DROPPED;
        else if (e > 0 && e != ZMQ_EVENT_DISCONNECTED)
            worst = KC_NET_REFUSED;
    }
    return worst;
}

void kc_net_unwatch(void *socket, void *monitor)
{
    if (!monitor)
        return;
    if (socket)
        zmq_socket_monitor(socket, NULL, 0);
    zmq_close(monitor);
}
