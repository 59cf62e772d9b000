/* A worker under hostile traffic: malformed bytes, a request for a stage it
 * was never given, a replayed request id and an unknown message type are
 * each answered with an error and counted, and the worker keeps serving
 * (its STATUS still answers and shows the counts). Runs the worker
 * in-process on loopback (plaintext: the CURVE handshake is covered by
 * tests/e2e/cluster.sh). */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <zmq.h>

#include "net/msg.h"
#include "net/pipeline.h"
#include "net/worker.h"

static kc_worker_options opts;
static int serve_rc = -1;

static void *serve_main(void *arg)
{
    (void)arg;
    serve_rc = kc_worker_serve(&opts);
    return NULL;
}

/* One raw request on a fresh DEALER; returns the decoded answer's type
 * (copying its text), or -1 on no answer. */
static int ask(void *ctx, const char *endpoint, const void *bytes, size_t len, char *text,
               size_t text_size, unsigned *stage)
{
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_connect(s, endpoint);
    zmq_send(s, bytes, len, 0);
    zmq_pollitem_t item = {s, 0, ZMQ_POLLIN, 0};
    int type = -1;
    if (zmq_poll(&item, 1, 5000) == 1) {
        static unsigned char buf[1 << 16];
        int n = zmq_recv(s, buf, sizeof buf, 0);
        kc_wire_msg m;
        if (n > 0 && kc_wire_decode(buf, (size_t)n, sizeof buf, &m) == KC_OK) {
            type = (int)m.type;
            snprintf(text, text_size, "%.*s", (int)m.text_len, m.text ? m.text : "");
            if (stage)
                *stage = m.stage;
        }
    }
    zmq_close(s);
    return type;
}

static size_t encode(const kc_wire_msg *m, unsigned char *buf, size_t size)
{
    size_t n = kc_wire_encode(m, buf, size);
    assert_true(n > 0);
    return n;
}

static void test_hostile_traffic(void **state)
{
    (void)state;
    int port = 41000 + (int)(getpid() % 2000); /* apart from e2e/cluster.sh (24000-40000) */
    char spec[64], endpoint[64];
    snprintf(spec, sizeof spec, "worker=127.0.0.1:%d", port);
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", port);
    assert_int_equal(kc_cluster_parse_inline(spec, &opts.cluster), KC_OK);
    opts.job = "worker";
    opts.task = 0;
    opts.model_dir = KC_TEST_TMP;
    opts.deadline_ms = 2000;
    opts.sec.insecure = 1;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, serve_main, NULL), 0);
    usleep(300000);

    void *ctx = zmq_ctx_new();
    char text[1024];
    unsigned char buf[4096];
    kc_wire_msg m;
    /* Ready once STATUS answers (its start-up GEMM probe is slow under
     * valgrind). */
    kc_msg_text(&m, KC_WIRE_STATUS, 1, 0, NULL);
    for (int tries = 0; tries < 24; tries++)
        if (ask(ctx, endpoint, buf, encode(&m, buf, sizeof buf), text, sizeof text, NULL) ==
            KC_WIRE_STATUS_REPLY)
            break;

    /* 1. garbage */
    assert_int_equal(ask(ctx, endpoint, "definitely not a kerasc message", 31, text, sizeof text,
                         NULL), KC_WIRE_ERROR);
    /* 2. a stage never loaded */
    float x[4] = {1, 2, 3, 4};
    kc_tensor *t = NULL;
    int64_t dims[2] = {1, 4};
    assert_int_equal(kc_tensor_new(KC_F32, 2, dims, &t), KC_OK);
    memcpy(kc_tensor_data(t), x, sizeof x);
    kc_msg_tensors(&m, KC_WIRE_RUN, 7, 3, &t, 1);
    assert_int_equal(ask(ctx, endpoint, buf, encode(&m, buf, sizeof buf), text, sizeof text,
                         NULL), KC_WIRE_ERROR);
    assert_non_null(strstr(text, "not loaded"));
    kc_tensor_free(t);
    /* 3. an unknown-but-valid type for a worker (a RESULT sent to it) */
    kc_msg_text(&m, KC_WIRE_RESULT, 9, 0, NULL);
    assert_int_equal(ask(ctx, endpoint, buf, encode(&m, buf, sizeof buf), text, sizeof text,
                         NULL), KC_WIRE_ERROR);
    /* 4. a replayed id on one connection */
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    zmq_connect(s, endpoint);
    kc_msg_text(&m, KC_WIRE_PING, 5, 0, NULL);
    size_t n = encode(&m, buf, sizeof buf);
    zmq_send(s, buf, n, 0);
    zmq_send(s, buf, n, 0); /* the same bytes again */
    int answers[2] = {-1, -1};
    for (int k = 0; k < 2; k++) {
        zmq_pollitem_t item = {s, 0, ZMQ_POLLIN, 0};
        if (zmq_poll(&item, 1, 5000) == 1) {
            static unsigned char rb[4096];
            int got = zmq_recv(s, rb, sizeof rb, 0);
            kc_wire_msg r;
            if (got > 0 && kc_wire_decode(rb, (size_t)got, sizeof rb, &r) == KC_OK)
                answers[k] = (int)r.type;
        }
    }
    zmq_close(s);
    assert_int_equal(answers[0], KC_WIRE_PONG);
    assert_int_equal(answers[1], KC_WIRE_ERROR);
    /* 5. still serving, and counting */
    kc_msg_text(&m, KC_WIRE_STATUS, 1, 0, NULL);
    assert_int_equal(ask(ctx, endpoint, buf, encode(&m, buf, sizeof buf), text, sizeof text,
                         NULL), KC_WIRE_STATUS_REPLY);
    printf("status after the abuse: %s\n", text);
    assert_non_null(strstr(text, "\"rejected\":4"));
    zmq_ctx_term(ctx);

    raise(SIGTERM); /* the worker drains and returns */
    pthread_join(th, NULL);
    assert_int_equal(serve_rc, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_traffic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
