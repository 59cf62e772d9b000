/* The split-run client against a lying worker: a fake worker (a ZeroMQ
 * ROUTER in a thread) accepts the stage load and then answers each RUN
 * with tensors of the wrong shape, the wrong count or the wrong dtype, or
 * with an answer to a request never made. The client must refuse every
 * such answer with a one-line error naming the problem (or the task), and
 * return no outputs: never a wrong answer, never a hang. Stage 0 runs on
 * the client (/CPU:0), stage 1 on the fake worker. */
#include <pthread.h>
#include <setjmp.h>
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
#include "runtime/stage.h"

#define MODEL KC_TEST_DATA "/../apps/resnet50/model.keras"

typedef enum lie { LIE_SHAPE, LIE_COUNT, LIE_DTYPE, LIE_ID } lie;

static struct {
    void *ctx;
    char endpoint[64];
    lie how;
    volatile int ready;
} g_fake;

static void fake_answer(void *s, zmq_msg_t *identity, const kc_wire_msg *m)
{
    kc_wire_msg reply;
    kc_tensor *t[2] = {NULL, NULL};
    int64_t dims[2] = {m->n_tensors ? m->tensors[0].shape.dims[0] : 1, 10};
    if (m->type == KC_WIRE_LOAD_STAGE) {
        kc_msg_text(&reply, KC_WIRE_LOAD_REPLY, m->request_id, m->stage, "{\"ok\":true}");
    } else {
        if (g_fake.how == LIE_SHAPE)
            dims[1] = 7;
        kc_tensor_new(g_fake.how == LIE_DTYPE ? KC_I32 : KC_F32, 2, dims, &t[0]);
        kc_tensor_new(KC_F32, 2, dims, &t[1]);
        kc_msg_tensors(&reply, KC_WIRE_RESULT, m->request_id + (g_fake.how == LIE_ID ? 1000 : 0),
                       m->stage, t, g_fake.how == LIE_COUNT ? 2 : 1);
    }
    static unsigned char buf[1 << 16];
    size_t n = kc_wire_encode(&reply, buf, sizeof buf);
    zmq_send(s, zmq_msg_data(identity), zmq_msg_size(identity), ZMQ_SNDMORE);
    zmq_send(s, buf, n, 0);
    kc_tensor_free(t[0]);
    kc_tensor_free(t[1]);
}

static void *fake_worker(void *arg)
{
    (void)arg;
    void *s = zmq_socket(g_fake.ctx, ZMQ_ROUTER);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    assert_int_equal(zmq_bind(s, g_fake.endpoint), 0);
    g_fake.ready = 1;
    for (;;) {
        zmq_msg_t identity, body;
        zmq_msg_init(&identity);
        zmq_msg_init(&body);
        if (zmq_msg_recv(&identity, s, 0) < 0 || zmq_msg_recv(&body, s, 0) < 0) {
            zmq_msg_close(&identity);
            zmq_msg_close(&body);
            break; /* the context was terminated: the test is over */
        }
        kc_wire_msg m;
        if (kc_wire_decode(zmq_msg_data(&body), zmq_msg_size(&body), 1 << 30, &m) == KC_OK)
            fake_answer(s, &identity, &m);
        zmq_msg_close(&identity);
        zmq_msg_close(&body);
    }
    zmq_close(s);
    return NULL;
}

static kc_pipeline_options g_opts;

static void run_against(lie how, const char *want)
{
    int port = 43000 + (int)(getpid() % 1000) + (int)how;
    snprintf(g_fake.endpoint, sizeof g_fake.endpoint, "tcp://127.0.0.1:%d", port);
    g_fake.ctx = zmq_ctx_new();
    g_fake.how = how;
    g_fake.ready = 0;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fake_worker, NULL), 0);
    while (!g_fake.ready)
        usleep(1000);

    kc_model *model = NULL;
    assert_int_equal(kc_model_load(MODEL, NULL, &model), KC_OK);
    memset(&g_opts, 0, sizeof g_opts);
    char spec[64];
    snprintf(spec, sizeof spec, "worker=127.0.0.1:%d", port);
    assert_int_equal(kc_cluster_parse_inline(spec, &g_opts.cluster), KC_OK);
    g_opts.model_path = MODEL;
    g_opts.n_stages = 2;
    assert_int_equal(kc_model_find_cut(model, "conv4_block6_out", &g_opts.last_node[0]), KC_OK);
    g_opts.last_node[1] = kc_model_num_nodes(model) - 1;
    assert_int_equal(kc_devspec_parse("/CPU:0", &g_opts.place[0]), KC_OK);
    assert_int_equal(kc_devspec_parse("/job:worker/task:0", &g_opts.place[1]), KC_OK);
    g_opts.sec.insecure = 1;
    g_opts.deadline_ms = 300;
    g_opts.microbatch = 1;

    int64_t dims[4] = {2, 64, 64, 3};
    kc_tensor *in = NULL, *out = NULL;
    assert_int_equal(kc_tensor_new(KC_F32, 4, dims, &in), KC_OK);
    memset(kc_tensor_data(in), 0, (size_t)2 * 64 * 64 * 3 * sizeof(float));
    kc_status s = kc_pipeline_run(model, &g_opts, (const kc_tensor *const *)&in, 1, &out, 1);
    const char *err = kc_last_error();
    printf("lie %d: %s\n", (int)how, err);
    assert_int_not_equal(s, KC_OK);
    assert_null(out);
    if (!strstr(err, want) || strchr(err, '\n'))
        fail_msg("error '%s' lacks '%s'", err, want);

    kc_tensor_free(in);
    kc_model_free(model);
    zmq_ctx_shutdown(g_fake.ctx);
    pthread_join(th, NULL);
    zmq_ctx_term(g_fake.ctx);
}

static void test_wrong_shape(void **state)
{
    (void)state;
    run_against(LIE_SHAPE, "wrong dtype or shape");
}

static void test_wrong_count(void **state)
{
    (void)state;
    run_against(LIE_COUNT, "answered with 2 tensors, 1 expected");
}

static void test_wrong_dtype(void **state)
{
    (void)state;
    run_against(LIE_DTYPE, "wrong dtype or shape");
}

static void test_answer_to_nothing(void **state)
{
    (void)state;
    run_against(LIE_ID, "/job:worker/task:0 (127.0.0.1:");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrong_shape),
        cmocka_unit_test(test_wrong_count),
        cmocka_unit_test(test_wrong_dtype),
        cmocka_unit_test(test_answer_to_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
