/* Op families rnn, attention, preprocess, numpy (Keras 3 ops nodes) and
 * tfop (Keras 2 TFOpLambda): registry lookup, parse of hand-written
 * configs, shape inference with a symbolic batch, and the weight specs
 * (count, Keras 3 group, name, shape, trainability) the loader will check
 * against real files; bad configs fail with a message. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "base/error.h"
#include "base/tensor.h"
#include "graph/graph.h"
#include "kerasc.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/op.h"
#include "ops/preprocess.h"
#include "ops/rnn.h"

/* ------------------------------------------------------------ helpers */

#define KT "{\"class_name\": \"__keras_tensor__\", \"config\": {}}"
#define NP "keras.src.ops.numpy"

static kc_shape shape_of(const int64_t *dims, int rank)
{
    kc_shape s = {.rank = rank};
    memcpy(s.dims, dims, (size_t)rank * sizeof *dims);
    return s;
}

#define SH(...) \
    shape_of((const int64_t[]){__VA_ARGS__}, \
             (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define SCALAR ((kc_shape){.rank = 0})

/* One op under test: its JSON, a kc_layer and a call context. */
typedef struct op_case {
    cJSON *config;
    cJSON *kwargs;
    cJSON *args;
    kc_layer layer;
    kc_parse_env env;
    kc_op_ctx ctx;
    kc_shape in[8];
    kc_dtype in_dtype[8];
    char *roles[8];
    kc_const_arg consts[4];
    float const_data[4][8];
} op_case;

static kc_status op_open(op_case *t, const char *module, const char *cls, const char *config,
                         int keras_major)
{
    memset(t, 0, sizeof *t);
    t->config = cJSON_Parse(config);
    assert_non_null(t->config);
    t->env.keras_major = keras_major;
    t->layer.name = (char *)"layer_under_test";
    t->layer.class_name = (char *)cls;
    t->layer.module = (char *)module;
    t->layer.config = t->config;
    t->layer.trainable = 1;
    t->layer.def = kc_op_lookup(module, cls);
    assert_non_null(t->layer.def);
    assert_string_equal(t->layer.def->class_name, cls);
    kc_error_clear();
    return t->layer.def->parse ? t->layer.def->parse(&t->layer, &t->env) : KC_OK;
}

static void op_input(op_case *t, kc_shape shape, const char *role)
{
    t->in[t->ctx.n_in] = shape;
    t->roles[t->ctx.n_in] = (char *)role;
    t->ctx.n_in++;
}

static void op_const(op_case *t, int position, float value)
{
    kc_const_arg *c = &t->consts[t->ctx.n_consts];
    c->position = position;
    c->shape = SCALAR;
    c->data = t->const_data[t->ctx.n_consts];
    c->data[0] = value;
    t->ctx.n_consts++;
}

static void op_kwargs(op_case *t, const char *json)
{
    t->kwargs = cJSON_Parse(json);
    assert_non_null(t->kwargs);
}

static void op_args(op_case *t, const char *json)
{
    t->args = cJSON_Parse(json);
    assert_non_null(t->args);
}

static kc_status op_infer(op_case *t)
{
    kc_op_ctx *c = &t->ctx;
    c->layer = &t->layer;
    c->env = &t->env;
    c->in = t->in;
    c->in_dtype = t->in_dtype;
    c->in_roles = t->roles;
    c->consts = t->consts;
    c->call_kwargs = t->kwargs;
    c->call_args = t->args;
    c->first_call = !t->layer.specs_ready;
    c->n_out = 0;
    kc_error_clear();
    kc_status st = t->layer.def->infer(c);
    if (st == KC_OK)
        t->layer.specs_ready = 1;
    return st;
}

static void op_close(op_case *t)
{
    if (t->layer.def && t->layer.def->free_attrs)
        t->layer.def->free_attrs(t->layer.attrs);
    else
        free(t->layer.attrs);
    cJSON_Delete(t->config);
    cJSON_Delete(t->kwargs);
    cJSON_Delete(t->args);
}

static void assert_shape(kc_shape got, kc_shape want)
{
    char g[128], w[128];
    kc_shape_format(&got, g, sizeof g);
    kc_shape_format(&want, w, sizeof w);
    assert_string_equal(g, w);
}

static void assert_spec(const op_case *t, int i, const char *group, const char *name,
                        kc_shape shape)
{
    assert_true(i < t->layer.n_specs);
    assert_string_equal(t->layer.specs[i].group, group);
    assert_string_equal(t->layer.specs[i].name, name);
    assert_shape(t->layer.specs[i].shape, shape);
}

static void assert_failed(kc_status st, kc_status want)
{
    assert_int_equal(st, want);
    assert_true(strlen(kc_last_error()) > 0);
}

/* Parse must succeed, infer must fail with `want`. */
static void expect_infer_error(op_case *t, kc_status want)
{
    assert_failed(op_infer(t), want);
    op_close(t);
}

/* ---------------------------------------------------------------- RNN */

static void test_lstm_keras3(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, "keras.layers", "LSTM",
                             "{\"units\": 8, \"activation\": \"tanh\", "
                             "\"recurrent_activation\": \"sigmoid\", \"use_bias\": true}", 3),
                     KC_OK);
    op_input(&t, SH(-1, 5, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.ctx.n_out, 1);
    assert_shape(t.ctx.out[0], SH(-1, 8));
    assert_int_equal(t.layer.n_specs, 3);
    assert_spec(&t, 0, "cell", "kernel", SH(3, 32));
    assert_spec(&t, 1, "cell", "recurrent_kernel", SH(8, 32));
    assert_spec(&t, 2, "cell", "bias", SH(32));
    assert_true(t.layer.specs[0].trainable);
    const kc_rnn_attrs *a = t.layer.attrs;
    assert_string_equal(a->recurrent_activation, "sigmoid");
    assert_int_equal(a->n_states, 2);
    /* A second call adds no specs. */
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.layer.n_specs, 3);
    op_close(&t);
}

static void test_lstm_sequences_and_state(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, NULL, "LSTM",
                             "{\"units\": 4, \"return_sequences\": true, "
                             "\"return_state\": true}", 2),
                     KC_OK);
    op_input(&t, SH(-1, -1, 6), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.ctx.n_out, 3);
    assert_shape(t.ctx.out[0], SH(-1, -1, 4));
    assert_shape(t.ctx.out[1], SH(-1, 4));
    assert_shape(t.ctx.out[2], SH(-1, 4));
    /* Keras 2 default when the key is missing: standalone Keras's. */
    assert_string_equal(((kc_rnn_attrs *)t.layer.attrs)->recurrent_activation,
                        "hard_sigmoid");
    op_close(&t);
}

static void test_gru_bias_layouts(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, "keras.layers", "GRU", "{\"units\": 8}", 3), KC_OK);
    op_input(&t, SH(-1, 5, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.layer.n_specs, 3);
    assert_spec(&t, 0, "cell", "kernel", SH(3, 24));
    assert_spec(&t, 1, "cell", "recurrent_kernel", SH(8, 24));
    assert_spec(&t, 2, "cell", "bias", SH(2, 24));
    op_close(&t);

    /* Keras 2 file without the key (standalone Keras <= 2.2). */
    assert_int_equal(op_open(&t, NULL, "GRU", "{\"units\": 8}", 2), KC_OK);
    op_input(&t, SH(-1, 5, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_spec(&t, 2, "cell", "bias", SH(24));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "GRU",
                             "{\"units\": 8, \"reset_after\": true, \"return_state\": true}",
                             2),
                     KC_OK);
    op_input(&t, SH(-1, 5, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.ctx.n_out, 2);
    assert_spec(&t, 2, "cell", "bias", SH(2, 24));
    op_close(&t);
}

static void test_simple_rnn(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, "keras.layers", "SimpleRNN",
                             "{\"units\": 5, \"use_bias\": false, \"return_state\": true, "
                             "\"go_backwards\": true, \"stateful\": true}", 3),
                     KC_OK);
    op_input(&t, SH(2, 7, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.ctx.n_out, 2);
    assert_shape(t.ctx.out[0], SH(2, 5));
    assert_shape(t.ctx.out[1], SH(2, 5));
    assert_int_equal(t.layer.n_specs, 2);
    assert_spec(&t, 0, "cell", "kernel", SH(3, 5));
    assert_spec(&t, 1, "cell", "recurrent_kernel", SH(5, 5));
    op_close(&t);
}

static void test_rnn_initial_state(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, NULL, "LSTM", "{\"units\": 4}", 2), KC_OK);
    op_input(&t, SH(-1, 5, 3), NULL);
    op_input(&t, SH(-1, 4), "initial_state");
    op_input(&t, SH(-1, 4), "initial_state");
    assert_int_equal(op_infer(&t), KC_OK);
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "LSTM", "{\"units\": 4}", 2), KC_OK);
    op_input(&t, SH(-1, 5, 3), NULL);
    op_input(&t, SH(-1, 4), "initial_state");
    expect_infer_error(&t, KC_ERR_SHAPE);
}

static void test_rnn_keras1(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, NULL, "LSTM",
                             "{\"output_dim\": 6, \"inner_activation\": \"hard_sigmoid\", "
                             "\"consume_less\": \"gpu\"}", 1),
                     KC_OK);
    op_input(&t, SH(-1, 5, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.layer.n_specs, 3);
    assert_spec(&t, 0, "cell", "kernel", SH(3, 24));
    assert_spec(&t, 2, "cell", "bias", SH(24));
    op_close(&t);

    /* consume_less='cpu' stores per-gate arrays; the specs stay fused (the
     * legacy binder fuses the 12 arrays, see test_bind). */
    assert_int_equal(op_open(&t, NULL, "LSTM", "{\"output_dim\": 6, \"consume_less\": \"cpu\"}",
                             1),
                     KC_OK);
    op_input(&t, SH(-1, 5, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_spec(&t, 1, "cell", "recurrent_kernel", SH(6, 24));
    op_close(&t);

    /* SimpleRNN's W, U, b map onto kernel, recurrent_kernel, bias. */
    assert_int_equal(op_open(&t, NULL, "SimpleRNN", "{\"output_dim\": 6}", 1), KC_OK);
    op_input(&t, SH(-1, 5, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.layer.n_specs, 3);
    op_close(&t);
}

static void test_cudnn(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, NULL, "CuDNNLSTM", "{\"units\": 4, \"return_state\": true}", 2),
                     KC_OK);
    op_input(&t, SH(-1, 5, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.ctx.n_out, 3);
    assert_int_equal(t.layer.n_specs, 3);
    assert_spec(&t, 0, "", "kernel", SH(3, 16));
    assert_spec(&t, 1, "", "recurrent_kernel", SH(4, 16));
    assert_spec(&t, 2, "", "bias", SH(32));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "CuDNNGRU", "{\"units\": 4}", 2), KC_OK);
    op_input(&t, SH(-1, 5, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_spec(&t, 0, "", "kernel", SH(3, 12));
    assert_spec(&t, 2, "", "bias", SH(24));
    op_close(&t);
}

static void test_rnn_generic_cell(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, "keras.layers", "RNN",
                             "{\"return_sequences\": true, \"cell\": {\"module\": "
                             "\"keras.layers\", \"class_name\": \"GRUCell\", \"config\": "
                             "{\"units\": 3, \"reset_after\": false}}}", 3),
                     KC_OK);
    op_input(&t, SH(-1, 9, 2), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 9, 3));
    assert_spec(&t, 2, "cell", "bias", SH(9));
    op_close(&t);

    assert_failed(op_open(&t, NULL, "RNN",
                          "{\"cell\": {\"class_name\": \"StackedRNNCells\", \"config\": {}}}",
                          2),
                  KC_ERR_UNSUPPORTED);
    op_close(&t);
}

static void test_rnn_bad_configs(void **state)
{
    (void)state;
    op_case t;
    assert_failed(op_open(&t, NULL, "LSTM", "{\"units\": -3}", 3), KC_ERR_FORMAT);
    op_close(&t);
    assert_failed(op_open(&t, NULL, "GRU", "{\"units\": 0}", 3), KC_ERR_FORMAT);
    op_close(&t);
    assert_failed(op_open(&t, NULL, "LSTM", "{\"units\": 2.5}", 3), KC_ERR_FORMAT);
    op_close(&t);
    assert_failed(op_open(&t, NULL, "LSTM", "{\"units\": 4, \"time_major\": true}", 2),
                  KC_ERR_UNSUPPORTED);
    op_close(&t);
    assert_failed(op_open(&t, NULL, "LSTM", "{\"units\": 4, \"activation\": \"nope\"}", 2),
                  KC_ERR_REFUSED);
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "LSTM", "{\"units\": 4}", 2), KC_OK);
    op_input(&t, SH(-1, 5), NULL);
    expect_infer_error(&t, KC_ERR_SHAPE);
}

#define BIDI_LSTM(extra)                                                                  \
    "{\"layer\": {\"module\": \"keras.layers\", \"class_name\": \"LSTM\", \"config\": "  \
    "{\"name\": \"lstm\", \"units\": 8" extra "}}"

static void test_bidirectional_concat(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, "keras.layers", "Bidirectional",
                             BIDI_LSTM("") ", \"merge_mode\": \"concat\"}", 3),
                     KC_OK);
    op_input(&t, SH(-1, 5, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.ctx.n_out, 1);
    assert_shape(t.ctx.out[0], SH(-1, 16));
    assert_int_equal(t.layer.n_specs, 6);
    assert_spec(&t, 0, "forward_layer/cell", "kernel", SH(3, 32));
    assert_spec(&t, 1, "forward_layer/cell", "recurrent_kernel", SH(8, 32));
    assert_spec(&t, 2, "forward_layer/cell", "bias", SH(32));
    assert_spec(&t, 3, "backward_layer/cell", "kernel", SH(3, 32));
    assert_spec(&t, 5, "backward_layer/cell", "bias", SH(32));
    const kc_bidirectional_attrs *a = t.layer.attrs;
    assert_int_equal(a->n_forward_specs, 3);
    assert_false(a->fwd_attrs.go_backwards);
    assert_true(a->bwd_attrs.go_backwards);
    /* Shared layer: a second call keeps the specs. */
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.layer.n_specs, 6);
    op_close(&t);
}

static void test_bidirectional_states(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, NULL, "Bidirectional",
                             BIDI_LSTM(", \"return_sequences\": true, \"return_state\": true")
                             ", \"merge_mode\": null}", 2),
                     KC_OK);
    op_input(&t, SH(-1, 5, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    /* [fwd_out, bwd_out, fwd_h, fwd_c, bwd_h, bwd_c] */
    assert_int_equal(t.ctx.n_out, 6);
    assert_shape(t.ctx.out[0], SH(-1, 5, 8));
    assert_shape(t.ctx.out[1], SH(-1, 5, 8));
    for (int i = 2; i < 6; i++)
        assert_shape(t.ctx.out[i], SH(-1, 8));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "Bidirectional",
                             "{\"layer\": {\"class_name\": \"GRU\", \"config\": {\"units\": 4, "
                             "\"return_state\": true}}, \"merge_mode\": \"sum\"}", 2),
                     KC_OK);
    op_input(&t, SH(-1, 5, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.ctx.n_out, 3);
    assert_shape(t.ctx.out[0], SH(-1, 4));
    op_close(&t);
}

static void test_bidirectional_backward_layer(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, "keras.layers", "Bidirectional",
                             "{\"merge_mode\": \"ave\", \"layer\": {\"module\": \"keras.layers\", "
                             "\"class_name\": \"SimpleRNN\", \"config\": {\"name\": "
                             "\"forward_rnn\", \"units\": 4}}, \"backward_layer\": {\"module\": "
                             "\"keras.layers\", \"class_name\": \"SimpleRNN\", \"config\": "
                             "{\"name\": \"backward_rnn\", \"units\": 4, \"go_backwards\": "
                             "true}}}", 3),
                     KC_OK);
    op_input(&t, SH(-1, 5, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4));
    assert_int_equal(t.layer.n_specs, 6);
    assert_spec(&t, 3, "backward_layer/cell", "kernel", SH(3, 4));
    op_close(&t);

    /* Both directions going the same way is a broken file. */
    assert_failed(op_open(&t, NULL, "Bidirectional",
                          "{\"layer\": {\"class_name\": \"SimpleRNN\", \"config\": {\"units\": "
                          "4}}, \"backward_layer\": {\"class_name\": \"SimpleRNN\", \"config\": "
                          "{\"units\": 4}}}", 2),
                  KC_ERR_FORMAT);
    op_close(&t);
}

static void test_bidirectional_bad(void **state)
{
    (void)state;
    op_case t;
    assert_failed(op_open(&t, NULL, "Bidirectional", BIDI_LSTM("") ", \"merge_mode\": \"max\"}",
                          2),
                  KC_ERR_FORMAT);
    assert_non_null(strstr(kc_last_error(), "merge_mode"));
    op_close(&t);
    assert_failed(op_open(&t, NULL, "Bidirectional",
                          "{\"layer\": {\"class_name\": \"Dense\", \"config\": {\"units\": 4}}}",
                          2),
                  KC_ERR_UNSUPPORTED);
    op_close(&t);
    assert_failed(op_open(&t, NULL, "Bidirectional", "{\"merge_mode\": \"sum\"}", 2),
                  KC_ERR_FORMAT);
    op_close(&t);
}

static void test_time_distributed_dense(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, "keras.layers", "TimeDistributed",
                             "{\"layer\": {\"module\": \"keras.layers\", \"class_name\": "
                             "\"Dense\", \"config\": {\"name\": \"d\", \"units\": 10}}}", 3),
                     KC_OK);
    op_input(&t, SH(-1, 4, 6), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.ctx.n_out, 1);
    assert_shape(t.ctx.out[0], SH(-1, 4, 10));
    assert_int_equal(t.layer.n_specs, 2);
    assert_spec(&t, 0, "layer", "kernel", SH(6, 10));
    assert_spec(&t, 1, "layer", "bias", SH(10));
    const kc_time_distributed_attrs *a = t.layer.attrs;
    assert_string_equal(a->inner.name, "d");
    assert_non_null(a->inner.attrs);
    op_close(&t);
}

static void test_time_distributed_nested(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, NULL, "TimeDistributed",
                             "{\"layer\": {\"class_name\": \"Bidirectional\", \"config\": "
                             "{\"layer\": {\"class_name\": \"GRU\", \"config\": {\"units\": 2, "
                             "\"reset_after\": true}}}}}", 2),
                     KC_OK);
    op_input(&t, SH(-1, 3, 7, 5), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 3, 4));
    assert_int_equal(t.layer.n_specs, 6);
    assert_spec(&t, 0, "layer/forward_layer/cell", "kernel", SH(5, 6));
    assert_spec(&t, 5, "layer/backward_layer/cell", "bias", SH(2, 6));
    op_close(&t);

    assert_failed(op_open(&t, NULL, "TimeDistributed",
                          "{\"layer\": {\"class_name\": \"NoSuchLayer\", \"config\": {}}}", 2),
                  KC_ERR_UNSUPPORTED);
    op_close(&t);
    /* The inner layer's own errors surface, naming it. */
    assert_failed(op_open(&t, NULL, "TimeDistributed",
                          "{\"layer\": {\"class_name\": \"Dense\", \"config\": {\"name\": "
                          "\"inner\", \"units\": -1}}}", 2),
                  KC_ERR_FORMAT);
    assert_non_null(strstr(kc_last_error(), "inner"));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "TimeDistributed",
                             "{\"layer\": {\"class_name\": \"Dense\", \"config\": "
                             "{\"units\": 3}}}", 2),
                     KC_OK);
    op_input(&t, SH(-1, 4), NULL);
    expect_infer_error(&t, KC_ERR_SHAPE);
}

/* ---------------------------------------------------------- attention */

#define MHA_CFG(extra) "{\"num_heads\": 2, \"key_dim\": 4" extra "}"

static void test_mha_keras3(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, "keras.layers", "MultiHeadAttention",
                             MHA_CFG(", \"value_dim\": null, \"output_shape\": null, "
                                     "\"attention_axes\": null, \"use_bias\": true"), 3),
                     KC_OK);
    op_input(&t, SH(-1, 5, 16), NULL);
    op_input(&t, SH(-1, 7, 12), NULL);
    op_kwargs(&t, "{\"return_attention_scores\": true}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.ctx.n_out, 2);
    assert_shape(t.ctx.out[0], SH(-1, 5, 16));
    assert_shape(t.ctx.out[1], SH(-1, 2, 5, 7));
    assert_int_equal(t.layer.n_specs, 8);
    assert_spec(&t, 0, "query_dense", "kernel", SH(16, 2, 4));
    assert_spec(&t, 1, "query_dense", "bias", SH(2, 4));
    assert_spec(&t, 2, "key_dense", "kernel", SH(12, 2, 4));
    assert_spec(&t, 3, "key_dense", "bias", SH(2, 4));
    assert_spec(&t, 4, "value_dense", "kernel", SH(12, 2, 4));
    assert_spec(&t, 5, "value_dense", "bias", SH(2, 4));
    assert_spec(&t, 6, "output_dense", "kernel", SH(2, 4, 16));
    assert_spec(&t, 7, "output_dense", "bias", SH(16));
    op_close(&t);
}

static void test_mha_options(void **state)
{
    (void)state;
    op_case t;
    /* Keras 2 call form: query positional, value and key by keyword. */
    assert_int_equal(op_open(&t, NULL, "MultiHeadAttention",
                             MHA_CFG(", \"value_dim\": 6, \"output_shape\": 10, "
                                     "\"use_bias\": false, \"attention_axes\": [1]"), 2),
                     KC_OK);
    op_input(&t, SH(-1, 5, 16), NULL);
    op_input(&t, SH(-1, 7, 12), "value");
    op_input(&t, SH(-1, 7, 8), "key");
    op_input(&t, SH(-1, 5, 7), "attention_mask");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.ctx.n_out, 1);
    assert_shape(t.ctx.out[0], SH(-1, 5, 10));
    assert_int_equal(t.layer.n_specs, 4);
    assert_spec(&t, 0, "query_dense", "kernel", SH(16, 2, 4));
    assert_spec(&t, 1, "key_dense", "kernel", SH(8, 2, 4));
    assert_spec(&t, 2, "value_dense", "kernel", SH(12, 2, 6));
    assert_spec(&t, 3, "output_dense", "kernel", SH(2, 6, 10));
    op_close(&t);

    /* Rank-4 inputs attend over both inner axes; a list output_shape. */
    assert_int_equal(op_open(&t, NULL, "MultiHeadAttention",
                             MHA_CFG(", \"output_shape\": [3, 2]"), 3),
                     KC_OK);
    op_input(&t, SH(-1, 2, 3, 8), "query");
    op_input(&t, SH(-1, 4, 5, 8), "value");
    op_kwargs(&t, "{\"return_attention_scores\": true}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 2, 3, 3, 2));
    assert_shape(t.ctx.out[1], SH(-1, 2, 2, 3, 4, 5));
    assert_spec(&t, 6, "output_dense", "kernel", SH(2, 4, 3, 2));
    assert_spec(&t, 7, "output_dense", "bias", SH(3, 2));
    op_close(&t);
}

static void test_mha_bad(void **state)
{
    (void)state;
    op_case t;
    assert_failed(op_open(&t, NULL, "MultiHeadAttention", "{\"num_heads\": -2, \"key_dim\": 4}",
                          2),
                  KC_ERR_FORMAT);
    op_close(&t);
    assert_failed(op_open(&t, NULL, "MultiHeadAttention", "{\"num_heads\": 2}", 2),
                  KC_ERR_FORMAT);
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "MultiHeadAttention",
                             MHA_CFG(", \"attention_axes\": [2]"), 2),
                     KC_OK);
    op_input(&t, SH(-1, 2, 3, 8), NULL);
    op_input(&t, SH(-1, 2, 3, 8), NULL);
    assert_failed(op_infer(&t), KC_ERR_UNSUPPORTED);
    assert_non_null(strstr(kc_last_error(), "attention_axes"));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "MultiHeadAttention", MHA_CFG(""), 2), KC_OK);
    op_input(&t, SH(-1, 5, 16), NULL);
    expect_infer_error(&t, KC_ERR_FORMAT); /* no value */
}

static void test_dot_attention(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, "keras.layers", "Attention",
                             "{\"use_scale\": true, \"score_mode\": \"concat\", "
                             "\"dropout\": 0.1}", 3),
                     KC_OK);
    op_input(&t, SH(-1, 5, 8), NULL);
    op_input(&t, SH(-1, 7, 12), NULL);
    op_input(&t, SH(-1, 7, 8), NULL);
    op_input(&t, SH(-1, 5), "mask");
    op_input(&t, SH(-1, 7), "mask");
    op_kwargs(&t, "{\"return_attention_scores\": true, \"use_causal_mask\": false}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.ctx.n_out, 2);
    assert_shape(t.ctx.out[0], SH(-1, 5, 12));
    assert_shape(t.ctx.out[1], SH(-1, 5, 7));
    assert_int_equal(t.layer.n_specs, 2);
    assert_spec(&t, 0, "", "scale", SCALAR);
    assert_spec(&t, 1, "", "concat_score_weight", SCALAR);
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "Attention", "{}", 2), KC_OK);
    op_input(&t, SH(-1, 5, 8), NULL);
    op_input(&t, SH(-1, 7, 8), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.layer.n_specs, 0);
    op_close(&t);

    assert_failed(op_open(&t, NULL, "Attention", "{\"score_mode\": \"cosine\"}", 2),
                  KC_ERR_FORMAT);
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "Attention", "{}", 2), KC_OK);
    op_input(&t, SH(-1, 5, 8), NULL);
    op_input(&t, SH(-1, 7, 6), NULL); /* key = value: dims differ from query */
    expect_infer_error(&t, KC_ERR_SHAPE);
}

static void test_additive_attention(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, "keras.layers", "AdditiveAttention", "{}", 3), KC_OK);
    op_input(&t, SH(-1, 5, 8), NULL);
    op_input(&t, SH(-1, 7, 8), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 5, 8));
    assert_int_equal(t.layer.n_specs, 1);
    assert_spec(&t, 0, "", "scale", SH(8));
    op_close(&t);

    /* tf.keras sizes scale by the value; Keras 3 by the query. */
    assert_int_equal(op_open(&t, NULL, "AdditiveAttention", "{\"use_scale\": true}", 2), KC_OK);
    op_input(&t, SH(-1, 5, 8), NULL);
    op_input(&t, SH(-1, 7, 3), NULL);
    op_input(&t, SH(-1, 7, 8), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 5, 3));
    assert_spec(&t, 0, "", "scale", SH(3));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "AdditiveAttention", "{\"use_scale\": false}", 3),
                     KC_OK);
    op_input(&t, SH(-1, 5, 8), NULL);
    op_input(&t, SH(-1, 7, 8), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.layer.n_specs, 0);
    op_close(&t);
}

/* --------------------------------------------------------- preprocess */

static void test_rescaling(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, "keras.layers", "Rescaling",
                             "{\"scale\": 0.00392156862745098, \"offset\": 0.0}", 3),
                     KC_OK);
    op_input(&t, SH(-1, 8, 8, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 8, 8, 3));
    assert_int_equal(t.layer.n_specs, 0);
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "Rescaling", "{\"scale\": [1.0, 2.0, 4.0], "
                                                    "\"offset\": -1}", 3),
                     KC_OK);
    const kc_rescaling_attrs *a = t.layer.attrs;
    assert_int_equal(a->n_scale, 3);
    assert_true(a->scale[2] == 4.0f);
    assert_true(a->offset[0] == -1.0f);
    op_input(&t, SH(-1, 8, 8, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 8, 8, 3));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "Rescaling", "{\"scale\": [1.0, 2.0]}", 3), KC_OK);
    op_input(&t, SH(-1, 8, 8, 3), NULL);
    expect_infer_error(&t, KC_ERR_SHAPE);

    assert_failed(op_open(&t, NULL, "Rescaling", "{\"scale\": \"big\"}", 3), KC_ERR_FORMAT);
    op_close(&t);
}

static void test_resizing_and_crop(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, "keras.layers", "Resizing",
                             "{\"height\": 10, \"width\": 20, \"interpolation\": \"lanczos3\", "
                             "\"crop_to_aspect_ratio\": true, \"data_format\": "
                             "\"channels_last\"}", 3),
                     KC_OK);
    assert_int_equal(((kc_resizing_attrs *)t.layer.attrs)->interpolation, KC_INTERP_LANCZOS3);
    op_input(&t, SH(-1, 64, 48, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 10, 20, 3));
    op_close(&t);

    assert_failed(op_open(&t, NULL, "Resizing",
                          "{\"height\": 10, \"width\": 20, \"interpolation\": \"magic\"}", 3),
                  KC_ERR_UNSUPPORTED);
    op_close(&t);
    assert_failed(op_open(&t, NULL, "Resizing", "{\"height\": 0, \"width\": 20}", 3),
                  KC_ERR_FORMAT);
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "CenterCrop", "{\"height\": 4, \"width\": 5}", 3), KC_OK);
    op_input(&t, SH(9, 9, 2), NULL); /* unbatched */
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(4, 5, 2));
    op_close(&t);
}

static void test_normalization(void **state)
{
    (void)state;
    op_case t;
    /* Adapted (EfficientNet): state variables are non-trainable weights. */
    assert_int_equal(op_open(&t, "keras.layers", "Normalization",
                             "{\"axis\": -1, \"mean\": null, \"variance\": null, "
                             "\"invert\": false}", 3),
                     KC_OK);
    op_input(&t, SH(-1, 8, 8, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 8, 8, 3));
    assert_int_equal(t.layer.n_specs, 3);
    assert_spec(&t, 0, "", "mean", SH(3));
    assert_spec(&t, 1, "", "variance", SH(3));
    assert_spec(&t, 2, "", "count", SCALAR);
    for (int i = 0; i < 3; i++)
        assert_false(t.layer.specs[i].trainable);
    op_close(&t);

    /* Constants in the config (ConvNeXt): no weights. */
    assert_int_equal(op_open(&t, NULL, "Normalization",
                             "{\"axis\": -1, \"mean\": [123.675, 116.28, 103.53], "
                             "\"variance\": [3409.976, 3262.69, 3291.890]}", 3),
                     KC_OK);
    op_input(&t, SH(-1, 8, 8, 3), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.layer.n_specs, 0);
    const kc_normalization_attrs *a = t.layer.attrs;
    assert_int_equal(a->n_keep, 1);
    assert_int_equal(a->keep[0], 3);
    assert_true(a->mean[1] > 116.0f && a->mean[1] < 116.5f);
    op_close(&t);

    /* axis=None: one scalar statistic; several axes. */
    assert_int_equal(op_open(&t, NULL, "Normalization", "{\"axis\": null}", 3), KC_OK);
    op_input(&t, SH(-1, 4), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_spec(&t, 0, "", "mean", SCALAR);
    op_close(&t);
    assert_int_equal(op_open(&t, NULL, "Normalization", "{\"axis\": [1, 2]}", 2), KC_OK);
    op_input(&t, SH(-1, 4, 6), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_spec(&t, 1, "", "variance", SH(4, 6));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "Normalization", "{\"mean\": [1, 2], \"variance\": [1, 2]}",
                             3),
                     KC_OK);
    op_input(&t, SH(-1, 3), NULL);
    expect_infer_error(&t, KC_ERR_SHAPE);
    assert_failed(op_open(&t, NULL, "Normalization", "{\"mean\": 0.5}", 3), KC_ERR_FORMAT);
    op_close(&t);
}

static void test_application_helpers(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, "keras.src.applications.convnext", "LayerScale",
                             "{\"init_values\": 1e-06, \"projection_dim\": 96}", 3),
                     KC_OK);
    op_input(&t, SH(-1, 56, 56, 96), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 56, 56, 96));
    assert_int_equal(t.layer.n_specs, 1);
    assert_spec(&t, 0, "", "gamma", SH(96));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "LayerScale", "{\"init_values\": 1e-06, "
                                                     "\"projection_dim\": 96}", 2),
                     KC_OK);
    op_input(&t, SH(-1, 56, 56, 48), NULL);
    expect_infer_error(&t, KC_ERR_SHAPE);

    assert_int_equal(op_open(&t, NULL, "StochasticDepth", "{\"drop_path_rate\": 0.1}", 3),
                     KC_OK);
    assert_true(t.layer.def->flags & KC_OPF_IDENTITY);
    op_input(&t, SH(-1, 7, 7, 8), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 7, 7, 8));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "CustomScaleLayer", "{\"scale\": 0.17}", 3), KC_OK);
    op_input(&t, SH(-1, 35, 35, 320), NULL);
    op_input(&t, SH(-1, 35, 35, 320), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 35, 35, 320));
    op_close(&t);
}

/* ------------------------------------------------- Keras 3 ops nodes */

static void test_numpy_lookup(void **state)
{
    (void)state;
    const kc_op_def *op = kc_op_lookup(NP, "Add");
    assert_non_null(op);
    assert_true(op->flags & KC_OPF_OPS_NODE);
    const kc_op_def *nn = kc_op_lookup("keras.src.ops.nn", "Relu6");
    assert_non_null(nn);
    assert_true(nn->flags & KC_OPF_OPS_NODE);
    /* Ops classes are not layers. */
    assert_null(kc_op_lookup("keras.layers", "Matmul"));
    assert_null(kc_op_lookup(NP, "NoSuchOp"));
}

static void test_numpy_binary(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, NP, "Add", "{\"name\": \"add\"}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 1), NULL);
    op_input(&t, SH(1, 5), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4, 5));
    assert_int_equal(t.layer.n_specs, 0);
    op_close(&t);

    /* x * (1/6): the constant is argument 1. */
    assert_int_equal(op_open(&t, NP, "Multiply", "{\"name\": \"multiply\"}", 3), KC_OK);
    op_input(&t, SH(-1, 7, 7, 16), NULL);
    op_const(&t, 1, 1.0f / 6);
    op_args(&t, "[" KT ", 0.16666666]");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 7, 7, 16));
    const kc_top_attrs *a = t.layer.attrs;
    assert_int_equal(a->ew, KC_EW_MUL);
    assert_int_equal(a->operand[0].kind, KC_OPND_INPUT);
    assert_int_equal(a->operand[1].kind, KC_OPND_CONST);
    op_close(&t);

    /* 3.0 - x: the constant is argument 0. */
    assert_int_equal(op_open(&t, NP, "Subtract", "{}", 3), KC_OK);
    op_input(&t, SH(-1, 3), NULL);
    op_const(&t, 0, 3.0f);
    assert_int_equal(op_infer(&t), KC_OK);
    a = t.layer.attrs;
    assert_int_equal(a->operand[0].kind, KC_OPND_CONST);
    assert_int_equal(a->operand[1].kind, KC_OPND_INPUT);
    assert_shape(t.ctx.out[0], SH(-1, 3));
    op_close(&t);

    assert_int_equal(op_open(&t, NP, "Maximum", "{}", 3), KC_OK);
    op_input(&t, SH(-1, 3), NULL);
    op_input(&t, SH(-1, 4), NULL);
    expect_infer_error(&t, KC_ERR_SHAPE);
}

static void test_numpy_unary(void **state)
{
    (void)state;
    static const char *const names[] = {"Negative", "Absolute", "Sqrt", "Square", "Exp",
                                        "Log", "Tanh", "Reciprocal", "Erf", NULL};
    op_case t;
    for (int i = 0; names[i]; i++) {
        const char *module = strcmp(names[i], "Erf") == 0 ? "keras.src.ops.math" : NP;
        assert_int_equal(op_open(&t, module, names[i], "{}", 3), KC_OK);
        op_input(&t, SH(-1, 2, 3), NULL);
        assert_int_equal(op_infer(&t), KC_OK);
        assert_shape(t.ctx.out[0], SH(-1, 2, 3));
        op_close(&t);
    }
    static const char *const nn[] = {"Sigmoid", "Relu", "Relu6", "Silu", "HardSigmoid",
                                     "HardSilu", NULL};
    for (int i = 0; nn[i]; i++) {
        assert_int_equal(op_open(&t, "keras.src.ops.nn", nn[i], "{}", 3), KC_OK);
        op_input(&t, SH(-1, 6), NULL);
        assert_int_equal(op_infer(&t), KC_OK);
        assert_shape(t.ctx.out[0], SH(-1, 6));
        op_close(&t);
    }
    assert_int_equal(op_open(&t, "keras.src.ops.nn", "Gelu", "{\"approximate\": false}", 3),
                     KC_OK);
    op_input(&t, SH(-1, 6), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(((kc_top_attrs *)t.layer.attrs)->ew, KC_EW_GELU);
    op_close(&t);

    assert_int_equal(op_open(&t, "keras.src.ops.nn", "Softmax", "{\"axis\": 1}", 3), KC_OK);
    op_input(&t, SH(-1, 6, 2), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(((kc_top_attrs *)t.layer.attrs)->axis, 1);
    op_close(&t);

    assert_int_equal(op_open(&t, NP, "Clip", "{\"x_min\": 0, \"x_max\": 6}", 3), KC_OK);
    op_input(&t, SH(-1, 6), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_true(((kc_top_attrs *)t.layer.attrs)->clip_max == 6.0);
    op_close(&t);

    assert_int_equal(op_open(&t, "keras.src.ops.core", "Cast", "{\"dtype\": \"int32\"}", 3),
                     KC_OK);
    op_input(&t, SH(-1, 6), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.ctx.out_dtype[0], KC_I32);
    op_close(&t);

    assert_int_equal(op_open(&t, "keras.src.ops.core", "Cast", "{\"dtype\": \"complex64\"}", 3),
                     KC_OK);
    op_input(&t, SH(-1, 6), NULL);
    expect_infer_error(&t, KC_ERR_UNSUPPORTED);
}

static void test_numpy_reductions(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, NP, "Mean", "{\"axis\": 1, \"keepdims\": false}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 5));
    op_close(&t);

    assert_int_equal(op_open(&t, NP, "Sum", "{\"axis\": [-1, 1], \"keepdims\": true}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 1, 1));
    op_close(&t);

    assert_int_equal(op_open(&t, NP, "Max", "{\"axis\": null}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SCALAR);
    /* The executor gets the axes spelled out. */
    assert_int_equal(((kc_top_attrs *)t.layer.attrs)->n_axes, 3);
    op_close(&t);

    assert_int_equal(op_open(&t, NP, "Min", "{\"axis\": 3}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    expect_infer_error(&t, KC_ERR_SHAPE);
}

static void test_numpy_shape_ops(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, NP, "Reshape", "{\"newshape\": [-1, 20]}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 20));
    op_close(&t);

    assert_int_equal(op_open(&t, NP, "Reshape", "{\"newshape\": [-1, 10]}", 3), KC_OK);
    op_input(&t, SH(2, 4, 5), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(4, 10));
    op_close(&t);

    assert_int_equal(op_open(&t, NP, "Reshape", "{\"newshape\": [3, 7]}", 3), KC_OK);
    op_input(&t, SH(2, 4, 5), NULL);
    expect_infer_error(&t, KC_ERR_SHAPE);
    assert_int_equal(op_open(&t, NP, "Reshape", "{\"newshape\": [-1, -1]}", 3), KC_OK);
    op_input(&t, SH(2, 4, 5), NULL);
    expect_infer_error(&t, KC_ERR_FORMAT);

    assert_int_equal(op_open(&t, NP, "Transpose", "{\"axes\": [0, 2, 1]}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 5, 4));
    op_close(&t);

    assert_int_equal(op_open(&t, NP, "Transpose", "{\"axes\": [0, 1, 1]}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    expect_infer_error(&t, KC_ERR_FORMAT);

    assert_int_equal(op_open(&t, NP, "ExpandDims", "{\"axis\": -1}", 3), KC_OK);
    op_input(&t, SH(-1, 4), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4, 1));
    op_close(&t);

    assert_int_equal(op_open(&t, NP, "Squeeze", "{\"axis\": 1}", 3), KC_OK);
    op_input(&t, SH(-1, 1, 4), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4));
    op_close(&t);

    assert_int_equal(op_open(&t, NP, "Squeeze", "{\"axis\": null}", 3), KC_OK);
    op_input(&t, SH(-1, 1, 4, 1), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4));
    assert_int_equal(((kc_top_attrs *)t.layer.attrs)->n_axes, 2);
    assert_int_equal(((kc_top_attrs *)t.layer.attrs)->axes[1], 3);
    op_close(&t);

    assert_int_equal(op_open(&t, NP, "Concatenate", "{\"axis\": 0}", 3), KC_OK);
    op_input(&t, SH(2, 4), "xs");
    op_input(&t, SH(3, 4), "xs");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(5, 4));
    op_close(&t);

    /* A constant inside the list would be dropped by the builder. */
    assert_int_equal(op_open(&t, NP, "Concatenate", "{\"axis\": 0}", 3), KC_OK);
    op_input(&t, SH(2, 4), NULL);
    op_args(&t, "[[" KT ", [[1, 2, 3, 4]]]]");
    expect_infer_error(&t, KC_ERR_UNSUPPORTED);

    assert_int_equal(op_open(&t, NP, "Concatenate", "{\"axis\": -1}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_input(&t, SH(-1, 4, 3), NULL);
    op_args(&t, "[[" KT ", " KT "]]");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4, 8));
    op_close(&t);

    assert_int_equal(op_open(&t, NP, "Concatenate", "{\"axis\": 1}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_input(&t, SH(-1, 4, 3), NULL);
    expect_infer_error(&t, KC_ERR_SHAPE);

    assert_int_equal(op_open(&t, NP, "Matmul", "{}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_input(&t, SH(5, 6), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4, 6));
    op_close(&t);

    assert_int_equal(op_open(&t, NP, "Matmul", "{}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_input(&t, SH(5), NULL);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4));
    op_close(&t);

    assert_int_equal(op_open(&t, NP, "Matmul", "{}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_input(&t, SH(4, 6), NULL);
    expect_infer_error(&t, KC_ERR_SHAPE);
}

#define SLICE(a, b, c) \
    "{\"class_name\": \"__slice__\", \"config\": {\"start\": " #a ", \"stop\": " #b \
    ", \"step\": " #c "}}"
#define ELLIPSIS "{\"class_name\": \"__ellipsis__\", \"config\": {}}"

static void test_numpy_getitem(void **state)
{
    (void)state;
    op_case t;
    /* x[:, 0] */
    assert_int_equal(op_open(&t, NP, "GetItem", "{\"name\": \"get_item\"}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_args(&t, "[" KT ", [" SLICE(null, null, null) ", 0]]");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 5));
    const kc_top_attrs *a = t.layer.attrs;
    assert_int_equal(a->n_slices, 3);
    assert_int_equal(a->slices[1].kind, KC_SLICE_INDEX);
    assert_int_equal(a->slices[2].kind, KC_SLICE_RANGE);
    op_close(&t);

    /* x[..., None, 1:3] and x[:, -3:, ::2] */
    assert_int_equal(op_open(&t, NP, "GetItem", "{}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_args(&t, "[" KT ", [" ELLIPSIS ", null, " SLICE(1, 3, null) "]]");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4, 1, 2));
    op_close(&t);
    assert_int_equal(op_open(&t, NP, "GetItem", "{}", 3), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_args(&t, "[" KT ", [" SLICE(null, null, null) ", " SLICE(-3, null, null) ", "
            SLICE(null, null, 2) "]]");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 3, 3));
    op_close(&t);

    /* x[1] when the builder delivered the key as a numeric constant. */
    assert_int_equal(op_open(&t, NP, "GetItem", "{}", 3), KC_OK);
    op_input(&t, SH(3, 4), NULL);
    op_const(&t, 1, 1.0f);
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(4));
    op_close(&t);

    assert_int_equal(op_open(&t, NP, "GetItem", "{}", 3), KC_OK);
    op_input(&t, SH(-1, 4), NULL);
    op_args(&t, "[" KT ", [" SLICE(null, null, -1) "]]");
    expect_infer_error(&t, KC_ERR_UNSUPPORTED);
    assert_int_equal(op_open(&t, NP, "GetItem", "{}", 3), KC_OK);
    op_input(&t, SH(-1, 4), NULL);
    op_args(&t, "[" KT ", [0, 1, 2]]");
    expect_infer_error(&t, KC_ERR_SHAPE);
    assert_int_equal(op_open(&t, NP, "GetItem", "{}", 3), KC_OK);
    op_input(&t, SH(-1, 4), NULL);
    op_args(&t, "[" KT ", [" SLICE(null, null, null) ", 7]]");
    expect_infer_error(&t, KC_ERR_SHAPE);
}

/* ------------------------------------------------- Keras 2 TFOpLambda */

#define TF(fn) "{\"name\": \"tf." fn "\", \"trainable\": true, \"dtype\": \"float32\", " \
               "\"function\": \"" fn "\"}"

static void test_tfop_binary(void **state)
{
    (void)state;
    op_case t;
    /* x + 3.0 */
    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("__operators__.add"), 2), KC_OK);
    op_input(&t, SH(-1, 4), NULL);
    op_kwargs(&t, "{\"y\": 3.0, \"name\": null}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4));
    const kc_top_attrs *a = t.layer.attrs;
    assert_int_equal(a->kind, KC_TOP_BINARY);
    assert_int_equal(a->operand[1].kind, KC_OPND_SCALAR);
    assert_true(a->operand[1].scalar == 3.0);
    op_close(&t);

    /* 2.0 * y: the constant is the first argument, the tensor is "y". */
    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("math.multiply"), 2), KC_OK);
    op_const(&t, 0, 2.0f);
    op_input(&t, SH(-1, 4, 3), "y");
    op_kwargs(&t, "{\"name\": null}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4, 3));
    op_close(&t);

    /* A per-channel keyword list. */
    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("math.subtract"), 2), KC_OK);
    op_input(&t, SH(-1, 8, 8, 3), NULL);
    op_kwargs(&t, "{\"y\": [103.939, 116.779, 123.68], \"name\": null}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 8, 8, 3));
    a = t.layer.attrs;
    assert_int_equal(a->operand[1].kind, KC_OPND_INLINE);
    assert_true(a->inline_data[2] > 123.0f);
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("math.truediv"), 2), KC_OK);
    op_input(&t, SH(-1, 4, 1), NULL);
    op_input(&t, SH(-1, 1, 5), "y");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4, 5));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("math.maximum"), 2), KC_OK);
    op_input(&t, SH(-1, 4), NULL);
    expect_infer_error(&t, KC_ERR_FORMAT); /* no y */
}

static void test_tfop_unary_and_reduce(void **state)
{
    (void)state;
    static const char *const fns[] = {"math.negative", "math.sqrt", "math.square", "math.exp",
                                      "math.log", "math.tanh", "math.sigmoid", "nn.relu",
                                      "nn.relu6", "nn.silu", "nn.swish", "identity", NULL};
    op_case t;
    char cfg[256];
    for (int i = 0; fns[i]; i++) {
        snprintf(cfg, sizeof cfg, "{\"function\": \"%s\"}", fns[i]);
        assert_int_equal(op_open(&t, NULL, "TFOpLambda", cfg, 2), KC_OK);
        op_input(&t, SH(-1, 3), NULL);
        op_kwargs(&t, "{\"name\": null}");
        assert_int_equal(op_infer(&t), KC_OK);
        assert_shape(t.ctx.out[0], SH(-1, 3));
        op_close(&t);
    }
    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("nn.softmax"), 2), KC_OK);
    op_input(&t, SH(-1, 3, 4), NULL);
    op_kwargs(&t, "{\"axis\": 1}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(((kc_top_attrs *)t.layer.attrs)->axis, 1);
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("math.reduce_mean"), 2), KC_OK);
    op_input(&t, SH(-1, 7, 7, 32), NULL);
    op_kwargs(&t, "{\"axis\": [1, 2], \"keepdims\": true, \"name\": null}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 1, 1, 32));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("math.reduce_max"), 2), KC_OK);
    op_input(&t, SH(-1, 7, 32), NULL);
    op_kwargs(&t, "{\"axis\": -1}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 7));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("clip_by_value"), 2), KC_OK);
    op_input(&t, SH(-1, 7), NULL);
    op_kwargs(&t, "{\"clip_value_min\": 0.0, \"clip_value_max\": 1.0}");
    assert_int_equal(op_infer(&t), KC_OK);
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("cast"), 2), KC_OK);
    op_input(&t, SH(-1, 7), NULL);
    op_kwargs(&t, "{\"dtype\": \"float16\"}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_int_equal(t.ctx.out_dtype[0], KC_F16);
    op_close(&t);
}

static void test_tfop_shape_ops(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("reshape"), 2), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_kwargs(&t, "{\"shape\": [-1, 20], \"name\": null}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 20));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("compat.v1.transpose"), 2), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_kwargs(&t, "{\"perm\": [0, 2, 1]}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 5, 4));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("concat"), 2), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_input(&t, SH(-1, 4, 1), NULL);
    op_kwargs(&t, "{\"axis\": -1, \"name\": null}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4, 6));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("expand_dims"), 2), KC_OK);
    op_input(&t, SH(-1, 4), NULL);
    op_kwargs(&t, "{\"axis\": 1}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 1, 4));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("squeeze"), 2), KC_OK);
    op_input(&t, SH(-1, 1, 1, 4), NULL);
    op_kwargs(&t, "{\"axis\": [1, 2]}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("linalg.matmul"), 2), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_input(&t, SH(-1, 6, 5), "b");
    op_kwargs(&t, "{\"transpose_b\": true}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4, 6));
    op_close(&t);

    /* A tensor-valued shape would make the output data-dependent. */
    assert_int_equal(op_open(&t, NULL, "TFOpLambda", TF("reshape"), 2), KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_input(&t, SH(2), "shape");
    expect_infer_error(&t, KC_ERR_UNSUPPORTED);
}

static void test_tfop_getitem(void **state)
{
    (void)state;
    op_case t;
    assert_int_equal(op_open(&t, NULL, "SlicingOpLambda",
                             TF("__operators__.getitem"), 2),
                     KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_kwargs(&t, "{\"slice_spec\": [{\"start\": null, \"stop\": null, \"step\": null}, "
                  "{\"start\": 1, \"stop\": null, \"step\": null}, -1]}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 3));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "SlicingOpLambda", TF("__operators__.getitem"), 2),
                     KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_kwargs(&t, "{\"slice_spec\": [{\"class_name\": \"__ellipsis__\"}, 0]}");
    assert_int_equal(op_infer(&t), KC_OK);
    assert_shape(t.ctx.out[0], SH(-1, 4));
    op_close(&t);

    assert_int_equal(op_open(&t, NULL, "SlicingOpLambda", TF("__operators__.getitem"), 2),
                     KC_OK);
    op_input(&t, SH(-1, 4, 5), NULL);
    op_kwargs(&t, "{\"slice_spec\": [[0, 1]]}");
    expect_infer_error(&t, KC_ERR_UNSUPPORTED);
}

static void test_tfop_unknown(void **state)
{
    (void)state;
    op_case t;
    assert_failed(op_open(&t, NULL, "TFOpLambda", TF("image.resize"), 2), KC_ERR_UNSUPPORTED);
    assert_non_null(strstr(kc_last_error(), "TFOpLambda function 'image.resize' is not "
                                            "supported"));
    op_close(&t);
    assert_failed(op_open(&t, NULL, "TFOpLambda", "{\"name\": \"x\"}", 2), KC_ERR_FORMAT);
    op_close(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lstm_keras3),
        cmocka_unit_test(test_lstm_sequences_and_state),
        cmocka_unit_test(test_gru_bias_layouts),
        cmocka_unit_test(test_simple_rnn),
        cmocka_unit_test(test_rnn_initial_state),
        cmocka_unit_test(test_rnn_keras1),
        cmocka_unit_test(test_cudnn),
        cmocka_unit_test(test_rnn_generic_cell),
        cmocka_unit_test(test_rnn_bad_configs),
        cmocka_unit_test(test_bidirectional_concat),
        cmocka_unit_test(test_bidirectional_states),
        cmocka_unit_test(test_bidirectional_backward_layer),
        cmocka_unit_test(test_bidirectional_bad),
        cmocka_unit_test(test_time_distributed_dense),
        cmocka_unit_test(test_time_distributed_nested),
        cmocka_unit_test(test_mha_keras3),
        cmocka_unit_test(test_mha_options),
        cmocka_unit_test(test_mha_bad),
        cmocka_unit_test(test_dot_attention),
        cmocka_unit_test(test_additive_attention),
        cmocka_unit_test(test_rescaling),
        cmocka_unit_test(test_resizing_and_crop),
        cmocka_unit_test(test_normalization),
        cmocka_unit_test(test_application_helpers),
        cmocka_unit_test(test_numpy_lookup),
        cmocka_unit_test(test_numpy_binary),
        cmocka_unit_test(test_numpy_unary),
        cmocka_unit_test(test_numpy_reductions),
        cmocka_unit_test(test_numpy_shape_ops),
        cmocka_unit_test(test_numpy_getitem),
        cmocka_unit_test(test_tfop_binary),
        cmocka_unit_test(test_tfop_unary_and_reduce),
        cmocka_unit_test(test_tfop_shape_ops),
        cmocka_unit_test(test_tfop_getitem),
        cmocka_unit_test(test_tfop_unknown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
