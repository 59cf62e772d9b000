/* The CPU session: input validation, any batch size, multiple outputs, and
 * the activation arena reusing memory by liveness. Models are weightless
 * JSON architectures written here, so the expected values are plain. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "kerasc.h"
#include "base/huge.h"
#include "kernels/dnnl_common.h"
#include "kernels/dw.h"
#include "kernels/isa.h"
#include "ops/conv.h"
#include "ops/pool.h"
#include "runtime/branches.h"
#include "runtime/plan_pack.h"
#include "runtime/session_internal.h"

/* x -> relu -> (a) ; a + x -> (b); concat(a, b) -> out0, b -> out1 */
static const char *kc_model_json =
    "{\"class_name\":\"Model\",\"config\":{\"name\":\"m\",\"layers\":["
    "{\"class_name\":\"InputLayer\",\"name\":\"x\",\"config\":{\"name\":\"x\",\"batch_input_shape\":[null,3]},\"inbound_nodes\":[]},"
    "{\"class_name\":\"Activation\",\"name\":\"a\",\"config\":{\"name\":\"a\",\"activation\":\"relu\"},\"inbound_nodes\":[[[\"x\",0,0,{}]]]},"
    "{\"class_name\":\"Add\",\"name\":\"b\",\"config\":{\"name\":\"b\"},\"inbound_nodes\":[[[\"a\",0,0,{}],[\"x\",0,0,{}]]]},"
    "{\"class_name\":\"Concatenate\",\"name\":\"c\",\"config\":{\"name\":\"c\",\"axis\":-1},\"inbound_nodes\":[[[\"a\",0,0,{}],[\"b\",0,0,{}]]]}],"
    "\"input_layers\":[[\"x\",0,0]],\"output_layers\":[[\"c\",0,0],[\"b\",0,0]]}}";

static kc_model *load_json(const char *text)
{
    char path[1024];
    mkdir(KC_TEST_TMP, 0777);
    snprintf(path, sizeof path, "%s/runtime_model.json", KC_TEST_TMP);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(path, NULL, &m), KC_OK);
    return m;
}

static kc_tensor *make_input(int64_t batch)
{
    kc_tensor *t = NULL;
    int64_t dims[2] = {batch, 3};
    assert_int_equal(kc_tensor_new(KC_F32, 2, dims, &t), KC_OK);
    float *p = kc_tensor_data(t);
    for (int64_t i = 0; i < batch * 3; i++)
        p[i] = (float)(i % 5) - 2.0f; /* -2..2 */
    return t;
}

/* x * x and x + x on values whose products or inputs are denormal: a
 * run computes as TensorFlow's kernels do (base/fpenv.h), denormal
 * results flushed to zero and denormal inputs read as zero, on the
 * calling thread (a batch of 1) and on the workers (a batch of 40001,
 * cut between the threads); the caller's floating-point state is its
 * own again after the run; KC_FLUSH_DENORMALS=0 keeps IEEE denormals. */
static const char *kc_denormal_json =
    "{\"class_name\":\"Model\",\"config\":{\"name\":\"d\",\"layers\":["
    "{\"class_name\":\"InputLayer\",\"name\":\"x\",\"config\":{\"name\":\"x\",\"batch_input_shape\":[null,4]},\"inbound_nodes\":[]},"
    "{\"class_name\":\"Multiply\",\"name\":\"sq\",\"config\":{\"name\":\"sq\"},\"inbound_nodes\":[[[\"x\",0,0,{}],[\"x\",0,0,{}]]]},"
    "{\"class_name\":\"Add\",\"name\":\"twice\",\"config\":{\"name\":\"twice\"},\"inbound_nodes\":[[[\"x\",0,0,{}],[\"x\",0,0,{}]]]}],"
    "\"input_layers\":[[\"x\",0,0]],\"output_layers\":[[\"sq\",0,0],[\"twice\",0,0]]}}";

static void denormal_run(kc_session *s, int64_t batch, int flushed)
{
    static const float row[4] = {1e-20f, 2.0f, 1e-40f, -3.0f};
    kc_tensor *in = NULL, *out[2] = {0};
    int64_t dims[2] = {batch, 4};
    assert_int_equal(kc_tensor_new(KC_F32, 2, dims, &in), KC_OK);
    float *x = kc_tensor_data(in);
    for (int64_t i = 0; i < batch * 4; i++)
        x[i] = row[i % 4];
#if defined(__x86_64__)
    unsigned before = __builtin_ia32_stmxcsr() & 0xffc0u; /* the control bits */
#endif
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&in, 1, out, 2), KC_OK);
#if defined(__x86_64__)
    assert_int_equal(__builtin_ia32_stmxcsr() & 0xffc0u, before);
#endif
    const float *sq = kc_tensor_cdata(out[0]), *twice = kc_tensor_cdata(out[1]);
    for (int64_t r = 0; r < batch; r += batch > 1 ? batch / 7 : 1) {
        const float *q = sq + r * 4, *t = twice + r * 4;
        if (flushed) {
            /* 1e-20 squared is 1e-40, below FLT_MIN: zero; 1e-40 read as zero */
            assert_true(q[0] == 0.0f && q[2] == 0.0f && t[2] == 0.0f);
        } else {
            assert_true(q[0] > 0.0f && q[0] < 1.2e-38f);
            assert_true(t[2] == row[2] * 2.0f && t[2] > 0.0f);
        }
        assert_true(q[1] == 4.0f && q[3] == 9.0f && t[0] == 2e-20f && t[1] == 4.0f &&
                    t[3] == -6.0f);
    }
    kc_tensor_free(in);
    kc_tensor_free(out[0]);
    kc_tensor_free(out[1]);
}

static void test_denormals_flushed_as_tensorflow(void **state)
{
    (void)state;
    kc_model *m = load_json(kc_denormal_json);
    kc_session *s = NULL;
    assert_int_equal(kc_session_new(m, NULL, &s), KC_OK);
    denormal_run(s, 1, 1);
    denormal_run(s, 40001, 1);
    setenv("KC_FLUSH_DENORMALS", "0", 1);
    denormal_run(s, 1, 0);
    denormal_run(s, 40001, 0);
    unsetenv("KC_FLUSH_DENORMALS");
    kc_session_free(s);
    kc_model_free(m);
}

static void test_run_values_and_batches(void **state)
{
    (void)state;
    kc_model *m = load_json(kc_model_json);
    kc_session *s = NULL;
    assert_int_equal(kc_session_new(m, NULL, &s), KC_OK);
    for (int64_t batch = 1; batch <= 4; batch += 3) {
        kc_tensor *in = make_input(batch), *out[2] = {0};
        assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&in, 1, out, 2), KC_OK);
        assert_int_equal(kc_tensor_dim(out[0], 0), batch);
        assert_int_equal(kc_tensor_dim(out[0], 1), 6);
        const float *x = kc_tensor_cdata(in), *c = kc_tensor_cdata(out[0]),
                    *b = kc_tensor_cdata(out[1]);
        for (int64_t r = 0; r < batch; r++)
            for (int j = 0; j < 3; j++) {
                float v = x[r * 3 + j], relu = v > 0 ? v : 0;
                assert_true(c[r * 6 + j] == relu);
                assert_true(c[r * 6 + 3 + j] == relu + v);
                assert_true(b[r * 3 + j] == relu + v);
            }
        kc_tensor_free(in);
        kc_tensor_free(out[0]);
        kc_tensor_free(out[1]);
    }
    kc_session_free(s);
    kc_model_free(m);
}

/* Each numeric input dtype reaches the model as the same float values
 * (one conversion loop per dtype in kc_to_f32). Values 0..4: exact in
 * every dtype, half floats included (0x0000, 0x3c00, 0x4000, 0x4200, 0x4400).
 * A batch of 2 is copied on one thread, one of 40001 (469 KiB of floats;
 * odd, so not cut into batch lanes) cut between the threads: every
 * element must arrive either way. */
static void test_input_dtypes_converted(void **state)
{
    (void)state;
    static const uint16_t halves[5] = {0x0000, 0x3c00, 0x4000, 0x4200, 0x4400};
    const kc_dtype types[] = {KC_F32, KC_F64, KC_F16, KC_I8,  KC_I16, KC_I32,
                              KC_I64, KC_U8,  KC_U16, KC_U32, KC_U64, KC_BOOL};
    kc_model *m = load_json(kc_model_json);
    kc_session *s = NULL;
    assert_int_equal(kc_session_new(m, NULL, &s), KC_OK);
    for (size_t kb = 0; kb < 2 * sizeof types / sizeof types[0]; kb++) {
        size_t k = kb / 2;
        int64_t dims[2] = {kb % 2 ? 40001 : 2, 3}, n = dims[0] * 3;
        kc_tensor *in = NULL, *out[2] = {0};
        assert_int_equal(kc_tensor_new(types[k], 2, dims, &in), KC_OK);
        void *p = kc_tensor_data(in);
        float *want = malloc((size_t)n * sizeof *want);
        assert_non_null(want);
        for (int64_t i = 0; i < n; i++) {
            /* shifted per dtype: a value left in the arena by the run before differs */
            int v = types[k] == KC_BOOL ? (i + k) % 2 : (i + k) % 5;
            want[i] = (float)v;
            switch (types[k]) {
            case KC_F32: ((float *)p)[i] = (float)v; break;
            case KC_F64: ((double *)p)[i] = v; break;
            case KC_F16: ((uint16_t *)p)[i] = halves[v]; break;
            case KC_I8: ((int8_t *)p)[i] = (int8_t)v; break;
            case KC_I16: ((int16_t *)p)[i] = (int16_t)v; break;
            case KC_I32: ((int32_t *)p)[i] = v; break;
            case KC_I64: ((int64_t *)p)[i] = v; break;
            case KC_U8: case KC_BOOL: ((uint8_t *)p)[i] = (uint8_t)v; break;
            case KC_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
            case KC_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
            case KC_U64: ((uint64_t *)p)[i] = (uint64_t)v; break;
            default: fail();
            }
        }
        assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&in, 1, out, 2), KC_OK);
        const float *b = kc_tensor_cdata(out[1]); /* relu(x) + x = 2x for x >= 0 */
        for (int64_t i = 0; i < n; i++)
            if (b[i] != 2 * want[i])
                fail_msg("dtype %d batch %lld element %lld: %g, want %g", (int)types[k],
                         (long long)dims[0], (long long)i, b[i], 2 * want[i]);
        free(want);
        kc_tensor_free(in);
        kc_tensor_free(out[0]);
        kc_tensor_free(out[1]);
    }
    kc_session_free(s);
    kc_model_free(m);
}

static void test_bad_inputs(void **state)
{
    (void)state;
    kc_model *m = load_json(kc_model_json);
    kc_session *s = NULL;
    assert_int_equal(kc_session_new(m, NULL, &s), KC_OK);
    kc_tensor *out[2] = {0}, *wrong = NULL;
    int64_t dims[2] = {2, 4};
    assert_int_equal(kc_tensor_new(KC_F32, 2, dims, &wrong), KC_OK);
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&wrong, 1, out, 2), KC_ERR_SHAPE);
    assert_non_null(strstr(kc_last_error(), "input 0 'x' has shape (2, 4)"));
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&wrong, 0, out, 2), KC_ERR_ARG);
    kc_tensor *in = make_input(2);
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&in, 1, out, 1), KC_ERR_ARG);
    assert_null(out[0]);
    kc_tensor_free(in);
    kc_tensor_free(wrong);
    kc_session_free(s);
    kc_model_free(m);
}

/* A chain of 40 element-wise layers: liveness lets the arena hold the
 * input, the output and one intermediate at a time, not forty copies. */
static void test_long_chain(void **state)
{
    (void)state;
    char *json = malloc(1 << 16);
    assert_non_null(json);
    size_t n = (size_t)sprintf(json, "{\"class_name\":\"Sequential\",\"config\":{\"name\":\"s\",\"layers\":["
                                     "{\"class_name\":\"InputLayer\",\"config\":{\"batch_input_shape\":[null,1024]}}");
    for (int i = 0; i < 40; i++)
        n += (size_t)sprintf(json + n, ",{\"class_name\":\"Activation\",\"config\":{\"name\":\"act%d\",\"activation\":\"%s\"}}",
                             i, i % 2 ? "relu" : "linear");
    sprintf(json + n, "]}}");
    kc_model *m = load_json(json);
    free(json);
    kc_session *s = NULL;
    assert_int_equal(kc_session_new(m, NULL, &s), KC_OK);
    kc_tensor *in = NULL, *out = NULL;
    int64_t dims[2] = {4096, 1024};
    assert_int_equal(kc_tensor_new(KC_F32, 2, dims, &in), KC_OK);
    float *p = kc_tensor_data(in);
    for (int64_t i = 0; i < 4096 * 1024; i++)
        p[i] = (i % 2) ? 1.0f : -1.0f;
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&in, 1, &out, 1), KC_OK);
    const float *o = kc_tensor_cdata(out);
    assert_true(o[0] == 0.0f && o[1] == 1.0f);
    size_t one = (size_t)4096 * 1024 * sizeof(float);
    assert_true(kc_session_arena_bytes(s) <= 3 * one + 4096);
    kc_tensor_free(in);
    kc_tensor_free(out);
    kc_session_free(s);
    kc_model_free(m);
}

/* The arena lies on huge pages of its own where they are on (base/huge.h):
 * 2 MiB aligned, its whole pages its own, and it runs as on kc_calloc's. */
static void test_arena_on_huge_pages(void **state)
{
    (void)state;
    kc_model *m = load_json(kc_model_json);
    kc_session *s = NULL;
    assert_int_equal(kc_session_new(m, NULL, &s), KC_OK);
    kc_tensor *in = make_input(3), *out[2] = {NULL, NULL};
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&in, 1, out, 2), KC_OK);
    assert_non_null(s->arena);
    assert_int_equal(s->arena_huge, kc_huge_maps_on());
    if (s->arena_huge)
        assert_int_equal((uintptr_t)s->arena % ((size_t)2 << 20), 0);
    const float *c = kc_tensor_cdata(out[0]);
    assert_true(c[0] == 0.0f && c[3] == -2.0f); /* relu(-2), then -2 + relu(-2) */
    kc_tensor_free(in);
    kc_tensor_free(out[0]);
    kc_tensor_free(out[1]);
    kc_session_free(s);
    kc_model_free(m);
}

/* Folding BN into the convolution and fusing activations changes the
 * arithmetic order only: outputs agree with the unfused run. */
static void test_fusion_matches_unfused(void **state)
{
    (void)state;
    const char *path = KC_TEST_DATA "/../zoo/batchnorm_conv/model.keras";
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(path, NULL, &m), KC_OK);
    kc_tensor *in = NULL, *fused_out = NULL, *plain_out = NULL;
    assert_int_equal(kc_tensor_load_npy(KC_TEST_DATA "/../zoo/batchnorm_conv/input_0.npy", &in),
                     KC_OK);
    kc_session *fused = NULL, *plain = NULL;
    assert_int_equal(kc_session_new(m, NULL, &fused), KC_OK);
    assert_true(kc_session_fused_nodes(fused) > 0);
    setenv("KC_FUSE", "0", 1);
    assert_int_equal(kc_session_new(m, NULL, &plain), KC_OK);
    unsetenv("KC_FUSE");
    assert_int_equal(kc_session_fused_nodes(plain), 0);
    assert_int_equal(kc_session_run(fused, (const kc_tensor *const *)&in, 1, &fused_out, 1), KC_OK);
    assert_int_equal(kc_session_run(plain, (const kc_tensor *const *)&in, 1, &plain_out, 1), KC_OK);
    const float *a = kc_tensor_cdata(fused_out), *b = kc_tensor_cdata(plain_out);
    for (int64_t i = 0; i < kc_tensor_count(plain_out); i++)
        assert_true(fabsf(a[i] - b[i]) <= 1e-5f * fmaxf(1.0f, fabsf(b[i])));
    kc_tensor_free(in);
    kc_tensor_free(fused_out);
    kc_tensor_free(plain_out);
    kc_session_free(fused);
    kc_session_free(plain);
    kc_model_free(m);
}

/* An identity layer (Dropout) absorbed into its input's slot, its output
 * read by a BatchNormalization and by another convolution: the
 * BatchNormalization must not fold into the convolution before the
 * Dropout (the other reader would see its output). Without that check the
 * fused run was off by 3.4; the NumPy reference came with the model
 * (tools/apps/appgraph.py). */
/* The node of the layer named `name`. */
static int kc_node_named(const kc_session *s, const char *name)
{
    for (int i = 0; i < s->graph->n_nodes; i++)
        if (!strcmp(s->graph->nodes[i].layer->name, name))
            return i;
    fail_msg("no layer %s", name);
    return -1;
}

/* Two sessions of model m with options o (NULL: defaults): *on as the
 * environment has it, *without made with switch `off`=0 (read when a
 * session is created). */
static void new_with_and_without(kc_model *m, const kc_session_options *o, const char *off,
                                 kc_session **on, kc_session **without)
{
    assert_int_equal(kc_session_new(m, o, on), KC_OK);
    setenv(off, "0", 1);
    assert_int_equal(kc_session_new(m, o, without), KC_OK);
    unsetenv(off);
}

/* A model run fused and with one fusion switch off (KC_FUSE=0: all), one
 * run each on its input. */
#define KC_PAIR_OUTPUTS 8
typedef struct fused_pair {
    kc_model *m;
    kc_session *fused, *plain;
    kc_tensor *in, *got[KC_PAIR_OUTPUTS], *plain_out[KC_PAIR_OUTPUTS];
    int n_out;
} fused_pair;

/* Load model and input (paths under KC_TEST_DATA), make both sessions
 * with options o (the plain one with `off`=0 set) and run each once. */
static void fused_pair_run_with(fused_pair *p, const char *model, const char *input, int n_out,
                                const char *off, const kc_session_options *o)
{
    char path[1024];
    memset(p, 0, sizeof *p);
    p->n_out = n_out;
    snprintf(path, sizeof path, "%s/%s", KC_TEST_DATA, model);
    assert_int_equal(kc_model_load(path, NULL, &p->m), KC_OK);
    snprintf(path, sizeof path, "%s/%s", KC_TEST_DATA, input);
    assert_int_equal(kc_tensor_load_npy(path, &p->in), KC_OK);
    new_with_and_without(p->m, o, off, &p->fused, &p->plain);
    const kc_tensor *const *in = (const kc_tensor *const *)&p->in;
    assert_int_equal(kc_session_run(p->fused, in, 1, p->got, n_out), KC_OK);
    assert_int_equal(kc_session_run(p->plain, in, 1, p->plain_out, n_out), KC_OK);
}

static void fused_pair_run(fused_pair *p, const char *model, const char *input, int n_out,
                           const char *off)
{
    fused_pair_run_with(p, model, input, n_out, off, NULL);
}

/* Output o of both runs against the reference file (under KC_TEST_DATA):
 * each within ref_tol of max(1, |ref|) of it, within pair_tol of each
 * other (0: the same bits). */
static void fused_pair_expect(const fused_pair *p, int o, const char *expected, float ref_tol,
                              float pair_tol)
{
    char path[1024];
    kc_tensor *want = NULL;
    snprintf(path, sizeof path, "%s/%s", KC_TEST_DATA, expected);
    assert_int_equal(kc_tensor_load_npy(path, &want), KC_OK);
    int64_t n = kc_tensor_count(want);
    assert_int_equal(kc_tensor_count(p->got[o]), n);
    const float *a = kc_tensor_cdata(p->got[o]), *b = kc_tensor_cdata(p->plain_out[o]);
    const float *w = kc_tensor_cdata(want);
    if (pair_tol == 0 && memcmp(a, b, (size_t)n * sizeof *a))
        fail_msg("output %d: the fused run's bits differ from the unfused run's", o);
    for (int64_t i = 0; i < n; i++) {
        float scale = fmaxf(1.0f, fabsf(w[i]));
        if (fabsf(a[i] - b[i]) > pair_tol * scale || fabsf(a[i] - w[i]) > ref_tol * scale ||
            fabsf(b[i] - w[i]) > ref_tol * scale)
            fail_msg("output %d, element %lld: fused %g, unfused %g, reference %g", o,
                     (long long)i, a[i], b[i], w[i]);
    }
    kc_tensor_free(want);
}

/* Whether session s skips the node of layer `name` (fused into another). */
static int fused_away(const kc_session *s, const char *name)
{
    return s->fused.skip[kc_node_named(s, name)];
}

static void fused_pair_free(fused_pair *p)
{
    kc_tensor_free(p->in);
    for (int o = 0; o < p->n_out; o++) {
        kc_tensor_free(p->got[o]);
        kc_tensor_free(p->plain_out[o]);
    }
    kc_session_free(p->fused);
    kc_session_free(p->plain);
    kc_model_free(p->m);
}

static void test_identity_layers_absorbed(void **state)
{
    (void)state;
    fused_pair p;
    fused_pair_run(&p, "fusion/identity_branch.keras", "fusion/identity_branch_input.npy", 1,
                   "KC_FUSE");
    assert_true(fused_away(p.fused, "drop")); /* no copy runs */
    fused_pair_expect(&p, 0, "fusion/identity_branch_expected.npy", 1e-4f, 2e-4f);
    fused_pair_free(&p);
}

/* A LayerScale after a Dense (ConvNeXt's blocks) folds into the Dense's
 * kernel and bias: no LayerScale node runs, and the output stays within
 * rounding of the unfused run's and of the reference that came with the
 * model (tests/apps: keras.applications.ConvNeXtTiny's graph). */
static void test_layer_scale_folded(void **state)
{
    (void)state;
    fused_pair p;
    fused_pair_run(&p, "../apps/convnext_tiny/model.keras", "../apps/convnext_tiny/input_0.npy",
                   1, "KC_FUSE");
    int scales = 0, folded = 0;
    for (int i = 0; i < p.fused->graph->n_nodes; i++)
        if (!strcmp(p.fused->graph->nodes[i].layer->class_name, "LayerScale")) {
            scales++;
            folded += p.fused->fused.skip[i];
        }
    assert_true(scales > 0);
    assert_int_equal(folded, scales);
    fused_pair_expect(&p, 0, "../apps/convnext_tiny/expected_0.npy", 1e-4f, 1e-5f);
    fused_pair_free(&p);
}

/* A max pooling that alone reads a stem-sized convolution (3 input
 * channels, relu) runs inside it (kernels/stem.c, where the stem loop
 * runs): its node skipped, every output the bits of the unfused run
 * (KC_FUSE_POOL=0; max is exact) and within 1e-4 of the NumPy reference.
 * A swish before the pooling and overlapping windows keep theirs
 * (tools/apps/make_fusion_fixtures.py). */
static void test_maxpool_fused_in_stem(void **state)
{
    (void)state;
    fused_pair p;
    fused_pair_run(&p, "fusion/conv_maxpool.keras", "fusion/conv_maxpool_input.npy", 3,
                   "KC_FUSE_POOL");
    int stem = kc_isa() == KC_ISA_AVX512 && kc_dnnl_ready(); /* where the stem loop runs */
    assert_int_equal(fused_away(p.fused, "p1"), stem);
    assert_false(fused_away(p.fused, "p2")); /* swish */
    assert_false(fused_away(p.fused, "p3")); /* overlapping */
    assert_false(fused_away(p.plain, "p1"));
    static const char *const expected[3] = {"fusion/conv_maxpool_expected_0.npy",
                                            "fusion/conv_maxpool_expected_1.npy",
                                            "fusion/conv_maxpool_expected_2.npy"};
    for (int o = 0; o < 3; o++)
        fused_pair_expect(&p, o, expected[o], 1e-4f, 0.0f);
    fused_pair_free(&p);
}

/* ResNet50's stem: conv1_pad, the 7x7 stride-2 conv1 (its
 * BatchNormalization and ReLU folded), pool1_pad and the overlapping 3x3
 * stride-2 pool1 (not fused); and a 7x7 "same" convolution whose 2x2 max
 * pooling runs inside it. Both 7x7 layers run on the stem's wide loop
 * (kernels/stem.c) where it runs (AVX-512), and then the model makes no
 * heap allocation in a run (tests/alloc/steady_state.sh); the paddings
 * fold; every output the bits of the run without the pooling fused,
 * within 1e-4 of the NumPy reference. */
static void test_resnet_stem(void **state)
{
    (void)state;
    fused_pair p;
    fused_pair_run(&p, "fusion/resnet_stem.keras", "fusion/resnet_stem_input.npy", 2,
                   "KC_FUSE_POOL");
    int stem = kc_isa() == KC_ISA_AVX512 && kc_dnnl_ready();
    assert_true(fused_away(p.fused, "conv1_pad"));
    assert_true(fused_away(p.fused, "pool1_pad"));
    assert_false(fused_away(p.fused, "pool1_pool")); /* overlapping */
    assert_int_equal(fused_away(p.fused, "p2"), stem);
    assert_false(fused_away(p.plain, "p2"));
    fused_pair_expect(&p, 0, "fusion/resnet_stem_expected_0.npy", 1e-4f, 0.0f);
    fused_pair_expect(&p, 1, "fusion/resnet_stem_expected_1.npy", 1e-4f, 0.0f);
    fused_pair_free(&p);
}

/* A global average pooling and the Dense after it run inside the 1x1
 * convolution before them (kernels/pw_head.c, MobileNetV2's classifier)
 * at batch 1 where kerasc's 1x1 kernel runs (AVX-512): both nodes
 * skipped, also after a folded BatchNormalization and ReLU(6) and
 * through a Dropout; every output the bits of the layers run apart
 * (KC_FUSE_HEAD=0), on the session's threads and on one, and within 1e-4
 * of the NumPy reference. A pooling that is also an output of the model
 * keeps its node (tools/apps/make_fusion_fixtures.py). */
static void test_head_fused(void **state)
{
    (void)state;
    static const char *const expected[4] = {
        "fusion/conv_gap_dense_expected_0.npy", "fusion/conv_gap_dense_expected_1.npy",
        "fusion/conv_gap_dense_expected_2.npy", "fusion/conv_gap_dense_expected_3.npy"};
    int takes = kc_isa() == KC_ISA_AVX512 && kc_dnnl_avx512(); /* where pw.c runs */
    for (int one = 0; one <= 1; one++) {
        kc_session_options o = {.threads = one};
        fused_pair p;
        fused_pair_run_with(&p, "fusion/conv_gap_dense.keras", "fusion/conv_gap_dense_input.npy",
                            4, "KC_FUSE_HEAD", &o);
        assert_int_equal(p.fused->fused.n_head_on, 2 * takes);
        assert_int_equal(fused_away(p.fused, "g1"), takes);
        assert_int_equal(fused_away(p.fused, "d1"), takes);
        assert_int_equal(fused_away(p.fused, "d2"), takes);
        assert_false(fused_away(p.fused, "g3")); /* an output */
        assert_false(fused_away(p.fused, "d3"));
        assert_int_equal(p.plain->fused.n_head_on, 0);
        for (int out = 0; out < 4; out++)
            fused_pair_expect(&p, out, expected[out], 1e-4f, 0.0f);
        fused_pair_free(&p);
    }
}

/* A head's session that releases the arrays it packed (the Dense's
 * kernel and bias go with the convolution's) runs batch 1, then the
 * image twice as a batch of 2 (no head: the layers apart, their arrays
 * read back from the file), then batch 1 again (the head rebuilt): every
 * run gives the image the bits of the first. */
static void test_head_fused_released(void **state)
{
    (void)state;
    char path[1024];
    kc_model *m = NULL;
    kc_tensor *one = NULL, *two = NULL;
    snprintf(path, sizeof path, "%s/fusion/conv_gap_dense.keras", KC_TEST_DATA);
    assert_int_equal(kc_model_load(path, NULL, &m), KC_OK);
    snprintf(path, sizeof path, "%s/fusion/conv_gap_dense_input.npy", KC_TEST_DATA);
    assert_int_equal(kc_tensor_load_npy(path, &one), KC_OK);
    int64_t n = kc_tensor_count(one), dims[4];
    for (int i = 0; i < 4; i++)
        dims[i] = kc_tensor_dim(one, i);
    dims[0] = 2;
    assert_int_equal(kc_tensor_new(KC_F32, 4, dims, &two), KC_OK);
    float *both = kc_tensor_data(two);
    memcpy(both, kc_tensor_cdata(one), (size_t)n * sizeof(float));
    memcpy(both + n, kc_tensor_cdata(one), (size_t)n * sizeof(float));
    kc_session_options o = {.release_packed_weights = 1};
    kc_session *s = NULL;
    assert_int_equal(kc_session_new(m, &o, &s), KC_OK);
    kc_tensor *first[4] = {0}, *got[4] = {0};
    const kc_tensor *in1[1] = {one}, *in2[1] = {two};
    assert_int_equal(kc_session_run(s, in1, 1, first, 4), KC_OK);
    assert_int_equal(s->fused.n_head_on, 2 * (kc_isa() == KC_ISA_AVX512 && kc_dnnl_avx512()));
    for (int round = 0; round < 2; round++) {
        const kc_tensor *const *in = round == 0 ? in2 : in1;
        assert_int_equal(kc_session_run(s, in, 1, got, 4), KC_OK);
        for (int o_ = 0; o_ < 4; o_++) {
            int64_t k = kc_tensor_count(first[o_]);
            for (int img = 0; img < (round == 0 ? 2 : 1); img++)
                if (memcmp((const float *)kc_tensor_cdata(got[o_]) + img * k,
                           kc_tensor_cdata(first[o_]), (size_t)k * sizeof(float)))
                    fail_msg("round %d, output %d, image %d: not the first run's bits", round,
                             o_, img);
            kc_tensor_free(got[o_]);
            got[o_] = NULL;
        }
    }
    for (int o_ = 0; o_ < 4; o_++)
        kc_tensor_free(first[o_]);
    kc_tensor_free(one);
    kc_tensor_free(two);
    kc_session_free(s);
    kc_model_free(m);
}

/* A Rescaling with no offset that one convolution alone reads folds into
 * its kernel (a "same" 3x3 one: its zero padding stays zero); one with an
 * offset, and one read by two (a Dense and the model's output), stay
 * layers. Within rounding of the unfused run (KC_FUSE=0) and 1e-4 of the
 * NumPy reference (tools/apps/make_fusion_fixtures.py). */
static void test_rescaling_folded(void **state)
{
    (void)state;
    fused_pair p;
    fused_pair_run(&p, "fusion/rescale_conv.keras", "fusion/rescale_conv_input.npy", 2,
                   "KC_FUSE");
    assert_true(fused_away(p.fused, "r1"));
    assert_false(fused_away(p.fused, "r2")); /* an offset */
    assert_false(fused_away(p.fused, "r3")); /* two readers */
    fused_pair_expect(&p, 0, "fusion/rescale_conv_expected_0.npy", 1e-4f, 1e-5f);
    fused_pair_expect(&p, 1, "fusion/rescale_conv_expected_1.npy", 1e-4f, 1e-5f);
    fused_pair_free(&p);
}

/* x -> relu -> a; outputs a and x itself (gathered from x's slot) */
static const char *kc_input_output_json =
    "{\"class_name\":\"Model\",\"config\":{\"name\":\"io\",\"layers\":["
    "{\"class_name\":\"InputLayer\",\"name\":\"x\",\"config\":{\"name\":\"x\",\"batch_input_shape\":[null,3]},\"inbound_nodes\":[]},"
    "{\"class_name\":\"Activation\",\"name\":\"a\",\"config\":{\"name\":\"a\",\"activation\":\"relu\"},\"inbound_nodes\":[[[\"x\",0,0,{}]]]}],"
    "\"input_layers\":[[\"x\",0,0]],\"output_layers\":[[\"a\",0,0],[\"x\",0,0]]}}";

/* Model m run twice on input `in` in a session reading float32 inputs in
 * place where it may and once in one that copies them (KC_INPUT_DIRECT=0):
 * the same bits on each of its n_out outputs, the caller's tensor
 * unchanged; returns how many inputs the first session read in place. */
static int direct_against_copied(kc_model *m, const kc_tensor *in, int n_out, const char *what)
{
    kc_session *on = NULL, *off = NULL;
    new_with_and_without(m, NULL, "KC_INPUT_DIRECT", &on, &off);
    int64_t n = kc_tensor_count(in);
    float *before = malloc((size_t)n * sizeof *before);
    memcpy(before, kc_tensor_cdata(in), (size_t)n * sizeof *before);
    kc_tensor *a[KC_PAIR_OUTPUTS] = {0}, *b[KC_PAIR_OUTPUTS] = {0};
    assert_int_equal(kc_session_run(off, &in, 1, b, n_out), KC_OK);
    for (int round = 0; round < 2; round++) { /* the second on the same plan */
        assert_int_equal(kc_session_run(on, &in, 1, a, n_out), KC_OK);
        assert_memory_equal(before, kc_tensor_cdata(in), (size_t)n * sizeof *before);
        for (int o = 0; o < n_out; o++) {
            int64_t k = kc_tensor_count(a[o]);
            assert_int_equal(kc_tensor_count(b[o]), k);
            if (memcmp(kc_tensor_cdata(a[o]), kc_tensor_cdata(b[o]), (size_t)k * sizeof(float)))
                fail_msg("%s: output %d differs read in place and copied", what, o);
            kc_tensor_free(a[o]);
            a[o] = NULL;
        }
    }
    int direct = on->n_direct_last;
    assert_int_equal(off->n_direct_last, 0);
    for (int o = 0; o < n_out; o++)
        kc_tensor_free(b[o]);
    free(before);
    kc_session_free(on);
    kc_session_free(off);
    return direct;
}

/* A float32 model input is read where the caller's tensor holds it (no
 * copy into the arena: session.c's kc_session_direct_ok) where only
 * kernels read it, through views of it (an absorbed Rescaling or
 * Dropout) too; copied where it is a model output. The same bits either
 * way. One image (a batch runs in lanes, which copy their share). */
static void test_inputs_read_in_place(void **state)
{
    (void)state;
    static const struct {
        const char *model, *input;
        int n_out, direct;
    } cases[] = {
        {"fusion/rescale_conv.keras", "fusion/rescale_conv_input.npy", 2, 1}, /* a view */
        {"fusion/identity_branch.keras", "fusion/identity_branch_input.npy", 1, 1},
        {"fusion/bn_forward.keras", "fusion/bn_forward_input.npy", 8, 1},
    };
    char path[1024];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kc_model *m = NULL;
        kc_tensor *batch = NULL, *one = NULL;
        snprintf(path, sizeof path, "%s/%s", KC_TEST_DATA, cases[c].model);
        assert_int_equal(kc_model_load(path, NULL, &m), KC_OK);
        snprintf(path, sizeof path, "%s/%s", KC_TEST_DATA, cases[c].input);
        assert_int_equal(kc_tensor_load_npy(path, &batch), KC_OK);
        int64_t dims[KC_MAX_RANK];
        int rank = kc_tensor_rank(batch);
        for (int d = 0; d < rank; d++)
            dims[d] = kc_tensor_dim(batch, d);
        dims[0] = 1;
        assert_int_equal(kc_tensor_new(KC_F32, rank, dims, &one), KC_OK);
        memcpy(kc_tensor_data(one), kc_tensor_cdata(batch),
               (size_t)kc_tensor_count(one) * sizeof(float));
        int direct = direct_against_copied(m, one, cases[c].n_out, cases[c].model);
        if (direct != cases[c].direct)
            fail_msg("%s: %d inputs read in place, expected %d", cases[c].model, direct,
                     cases[c].direct);
        kc_tensor_free(one);
        kc_tensor_free(batch);
        kc_model_free(m);
    }
    /* the input is itself a model output: copied; x -> relu, relu + x
     * (the Add may write over x's slot): right either way */
    kc_model *m = load_json(kc_input_output_json);
    kc_tensor *in = make_input(1);
    assert_int_equal(direct_against_copied(m, in, 2, "input as output"), 0);
    kc_model_free(m);
    m = load_json(kc_model_json);
    direct_against_copied(m, in, 2, "relu + x");
    kc_model_free(m);
    kc_tensor_free(in);
}

/* A BatchNormalization after a relu folds into the layer after it
 * (runtime/fuse.c's kc_fold_bn_forward): through a max pooling and a
 * Dropout into a "valid" convolution, through global average poolings
 * (negative scales too) and a Flatten into Dense layers; negative scales
 * before a max pooling, a "same" convolution after and a pooling that is
 * also an output keep theirs. Within rounding of the unfused run
 * (KC_BN_FORWARD=0) and 1e-4 of the NumPy reference
 * (tools/apps/make_fusion_fixtures.py). */
static void test_bn_folded_forward(void **state)
{
    (void)state;
    fused_pair p;
    fused_pair_run(&p, "fusion/bn_forward.keras", "fusion/bn_forward_input.npy", 8,
                   "KC_BN_FORWARD");
    static const char *const folded[] = {"b1", "b2", "neg4", "b7"};
    static const char *const kept[] = {"neg3", "b5", "b9"};
    for (size_t i = 0; i < sizeof folded / sizeof folded[0]; i++) {
        if (!fused_away(p.fused, folded[i]))
            fail_msg("%s not folded", folded[i]);
        assert_false(fused_away(p.plain, folded[i]));
    }
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        if (fused_away(p.fused, kept[i]))
            fail_msg("%s folded", kept[i]);
    for (int o = 0; o < 8; o++) {
        char expected[64];
        snprintf(expected, sizeof expected, "fusion/bn_forward_expected_%d.npy", o);
        fused_pair_expect(&p, o, expected, 1e-4f, 1e-5f);
    }
    fused_pair_free(&p);
}

/* A residual Add after a Dense runs inside it (kc_dense_attrs.accumulate):
 * Keras 3's ops add over 600 tokens (oneDNN's matmul, in row parts, its
 * sum post-op) and an Add layer and ReLU after a one-row Dense (kerasc's
 * own loop). Both Add nodes skipped, the input left as it was, the bits
 * of the unfused run (KC_FUSE=0: the sum after the bias, as the Add) and
 * within 1e-4 of the NumPy reference; the plain path (KC_DNNL=0) too
 * (tools/apps/make_fusion_fixtures.py). */
static void test_dense_residual_fused(void **state)
{
    (void)state;
    fused_pair p;
    fused_pair_run(&p, "fusion/dense_residual.keras", "fusion/dense_residual_input.npy", 2,
                   "KC_FUSE");
    assert_true(fused_away(p.fused, "add"));
    assert_true(fused_away(p.fused, "av"));
    assert_true(fused_away(p.fused, "rv")); /* the Dense's activation */
    fused_pair_expect(&p, 0, "fusion/dense_residual_expected_0.npy", 1e-4f, 0.0f);
    fused_pair_expect(&p, 1, "fusion/dense_residual_expected_1.npy", 1e-4f, 0.0f);
    kc_tensor *again = NULL;
    char path[1024];
    snprintf(path, sizeof path, "%s/fusion/dense_residual_input.npy", KC_TEST_DATA);
    assert_int_equal(kc_tensor_load_npy(path, &again), KC_OK);
    if (memcmp(kc_tensor_cdata(again), kc_tensor_cdata(p.in),
               (size_t)kc_tensor_count(again) * sizeof(float)))
        fail_msg("the fused run wrote into its input");
    kc_tensor_free(again);
    fused_pair_free(&p);
    setenv("KC_DNNL", "0", 1);
    fused_pair_run(&p, "fusion/dense_residual.keras", "fusion/dense_residual_input.npy", 2,
                   "KC_FUSE");
    unsetenv("KC_DNNL");
    fused_pair_expect(&p, 0, "fusion/dense_residual_expected_0.npy", 1e-4f, 1e-5f);
    fused_pair_expect(&p, 1, "fusion/dense_residual_expected_1.npy", 1e-4f, 1e-5f);
    fused_pair_free(&p);
}

/* A nearest UpSampling2D(2) that a 3x3 convolution alone reads runs as
 * that convolution's 2x2 one on its input (kernels/upconv.c): "same" with
 * a relu (oneDNN), then "valid" with one filter (the narrow loop); a
 * bilinear upsampling, one by 3 and one read by two convolutions stay
 * layers. Within 1e-5 of the unfused run (KC_FUSE_UP=0: the taps' sums
 * reassociate) and 1e-4 of the NumPy reference; a second run (the kernel
 * state reused, the layer's own 3x3 kernel released after the first)
 * gives the first's bits; the same on the plain path (KC_DNNL=0)
 * (tools/apps/make_fusion_fixtures.py). */
static void upsample_conv_check(void)
{
    static const char *const expected[5] = {
        "fusion/upsample_conv_expected_0.npy", "fusion/upsample_conv_expected_1.npy",
        "fusion/upsample_conv_expected_2.npy", "fusion/upsample_conv_expected_3.npy",
        "fusion/upsample_conv_expected_4.npy"};
    fused_pair p;
    fused_pair_run(&p, "fusion/upsample_conv.keras", "fusion/upsample_conv_input.npy", 5,
                   "KC_FUSE_UP");
    assert_true(fused_away(p.fused, "u1"));
    assert_true(fused_away(p.fused, "u2"));
    assert_false(fused_away(p.fused, "u3")); /* bilinear */
    assert_false(fused_away(p.fused, "u4")); /* two readers */
    assert_false(fused_away(p.fused, "u5")); /* by 3 */
    assert_false(fused_away(p.plain, "u1"));
    for (int o = 0; o < 5; o++)
        fused_pair_expect(&p, o, expected[o], 1e-4f, 1e-5f);
    kc_tensor *again[5] = {NULL};
    const kc_tensor *const *in = (const kc_tensor *const *)&p.in;
    assert_int_equal(kc_session_run(p.fused, in, 1, again, 5), KC_OK);
    for (int o = 0; o < 5; o++) {
        if (memcmp(kc_tensor_cdata(again[o]), kc_tensor_cdata(p.got[o]),
                   (size_t)kc_tensor_count(again[o]) * sizeof(float)))
            fail_msg("output %d: the second run's bits differ from the first's", o);
        kc_tensor_free(again[o]);
    }
    fused_pair_free(&p);
}

static void test_upsample_conv_fused(void **state)
{
    (void)state;
    upsample_conv_check();
    setenv("KC_DNNL", "0", 1);
    upsample_conv_check();
    unsetenv("KC_DNNL");
}

/* Transposed convolutions (kernels/transpose.c: the taps' product as a
 * 1x1 convolution through the dispatch, then the gather by output rows;
 * kernels/subpixel.c: a kernel a multiple of its stride as one
 * convolution over the input): 1-D "same" stride 2 with a relu, 2-D 3x3
 * stride 2 "valid" (overlapping taps), 2x2 stride 2 "same" relu (no
 * overlap), 3x3 dilated by 2, 4x4 stride 2 "same" relu, (3, 2) strides
 * (1, 2) "valid", 3-D (2, 3, 2) strides (2, 1, 2); within 1e-5 of the
 * NumPy reference, a second run (the state kept, the layer's kernel
 * released) with the first one's bits; on oneDNN, on the plain path
 * (KC_DNNL=0) and with the 2-D ones all on the gather (KC_SUBPIXEL=0)
 * (tools/apps/make_fusion_fixtures.py). */
static void conv_transpose_check(const char *name, int n_out)
{
    char model[256], input[256], expected[256];
    snprintf(model, sizeof model, "fusion/%s.keras", name);
    snprintf(input, sizeof input, "fusion/%s_input.npy", name);
    fused_pair p;
    fused_pair_run(&p, model, input, n_out, "KC_FUSE");
    kc_tensor *again[KC_PAIR_OUTPUTS] = {NULL};
    const kc_tensor *const *in = (const kc_tensor *const *)&p.in;
    assert_int_equal(kc_session_run(p.fused, in, 1, again, n_out), KC_OK);
    for (int o = 0; o < n_out; o++) {
        if (n_out == 1)
            snprintf(expected, sizeof expected, "fusion/%s_expected.npy", name);
        else
            snprintf(expected, sizeof expected, "fusion/%s_expected_%d.npy", name, o);
        fused_pair_expect(&p, o, expected, 1e-5f, 1e-5f);
        if (memcmp(kc_tensor_cdata(again[o]), kc_tensor_cdata(p.got[o]),
                   (size_t)kc_tensor_count(again[o]) * sizeof(float)))
            fail_msg("%s output %d: the second run's bits differ from the first's", name, o);
        kc_tensor_free(again[o]);
    }
    fused_pair_free(&p);
}

static void test_conv_transpose(void **state)
{
    (void)state;
    static const char *const off[3] = {NULL, "KC_DNNL", "KC_SUBPIXEL"};
    for (int k = 0; k < 3; k++) {
        if (off[k])
            setenv(off[k], "0", 1);
        conv_transpose_check("transpose_1d", 1);
        conv_transpose_check("transpose_2d", 5);
        conv_transpose_check("transpose_3d", 1);
        if (off[k])
            unsetenv(off[k]);
    }
}

/* A BatchNormalization and a ReLU after a transposed convolution without
 * bias (a DCGAN generator's block) fold into it: its kernel scaled along
 * its output channels (the second to last axis), a bias made; within
 * 1e-5 of the unfused run (KC_FUSE=0) and of NumPy
 * (tools/apps/make_fusion_fixtures.py). */
static void test_conv_transpose_folds(void **state)
{
    (void)state;
    fused_pair p;
    fused_pair_run(&p, "fusion/transpose_bn.keras", "fusion/transpose_bn_input.npy", 1, "KC_FUSE");
    assert_true(fused_away(p.fused, "bn"));
    assert_true(fused_away(p.fused, "act"));
    assert_false(fused_away(p.plain, "bn"));
    fused_pair_expect(&p, 0, "fusion/transpose_bn_expected.npy", 1e-5f, 1e-5f);
    fused_pair_free(&p);
}

/* A transposed convolution on images of any size: the reference size,
 * then 1x1, empty images of no rows and of no columns (no input pixel:
 * each output its bias, then the relu) and the reference again, whose bits must be the first run's
 * (the kernel state rebuilt for each shape). */
static void test_conv_transpose_shapes(void **state)
{
    (void)state;
    fused_pair p;
    fused_pair_run(&p, "fusion/transpose_dyn.keras", "fusion/transpose_dyn_input.npy", 1, "KC_FUSE");
    fused_pair_expect(&p, 0, "fusion/transpose_dyn_expected.npy", 1e-5f, 1e-5f);
    static const int64_t sizes[3][2] = {{1, 1}, {0, 3}, {3, 0}};
    for (int k = 0; k < 3; k++) {
        int64_t dims[4] = {1, sizes[k][0], sizes[k][1], 4};
        kc_tensor *x = NULL, *y = NULL;
        assert_int_equal(kc_tensor_new(KC_F32, 4, dims, &x), KC_OK);
        for (int64_t i = 0; i < kc_tensor_count(x); i++)
            ((float *)kc_tensor_data(x))[i] = 0.5f;
        const kc_tensor *const xs[1] = {x};
        assert_int_equal(kc_session_run(p.fused, xs, 1, &y, 1), KC_OK);
        assert_int_equal(kc_tensor_dim(y, 1), 2 * sizes[k][0]);
        assert_int_equal(kc_tensor_dim(y, 2), 2 * sizes[k][1]);
        for (int64_t i = 0; i < kc_tensor_count(y); i++)
            assert_true(((const float *)kc_tensor_cdata(y))[i] >= 0.0f); /* the relu ran */
        kc_tensor_free(x);
        kc_tensor_free(y);
    }
    kc_tensor *again = NULL;
    const kc_tensor *const *in = (const kc_tensor *const *)&p.in;
    assert_int_equal(kc_session_run(p.fused, in, 1, &again, 1), KC_OK);
    if (memcmp(kc_tensor_cdata(again), kc_tensor_cdata(p.got[0]),
               (size_t)kc_tensor_count(again) * sizeof(float)))
        fail_msg("the reference size's bits changed after other sizes ran");
    kc_tensor_free(again);
    fused_pair_free(&p);
}

/* options.profile: per-layer mean times from the third run on (the first
 * two on a plan are warm-ups, each reported until the next replaces it),
 * a new plan starts over, fused layers are not listed, and without the
 * option the host loop reports nothing. */
static void test_profile_per_layer(void **state)
{
    (void)state;
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(KC_TEST_DATA "/../zoo/batchnorm_conv/model.keras", NULL, &m),
                     KC_OK);
    kc_tensor *in = NULL, *out = NULL;
    assert_int_equal(kc_tensor_load_npy(KC_TEST_DATA "/../zoo/batchnorm_conv/input_0.npy", &in),
                     KC_OK);
    kc_session *plain = NULL, *timed = NULL;
    kc_session_options o = {0};
    assert_int_equal(kc_session_new(m, &o, &plain), KC_OK);
    o.profile = 1;
    assert_int_equal(kc_session_new(m, &o, &timed), KC_OK);
    assert_int_equal(kc_session_run(plain, (const kc_tensor *const *)&in, 1, &out, 1), KC_OK);
    kc_tensor_free(out);
    assert_string_equal(kc_session_stats(plain), "");
    assert_non_null(strstr(kc_session_stats(timed), "over 0 run(s)"));
    assert_int_equal(kc_session_run(timed, (const kc_tensor *const *)&in, 1, &out, 1), KC_OK);
    kc_tensor_free(out);
    assert_non_null(strstr(kc_session_stats(timed), "warm-up run 1 of 2 on this plan"));
    assert_int_equal(kc_session_run(timed, (const kc_tensor *const *)&in, 1, &out, 1), KC_OK);
    kc_tensor_free(out);
    assert_non_null(strstr(kc_session_stats(timed), "warm-up run 2 of 2 on this plan"));
    assert_int_equal(kc_session_run(timed, (const kc_tensor *const *)&in, 1, &out, 1), KC_OK);
    kc_tensor_free(out);
    assert_non_null(strstr(kc_session_stats(timed), "over 1 run(s)"));
    assert_int_equal(kc_session_run(timed, (const kc_tensor *const *)&in, 1, &out, 1), KC_OK);
    kc_tensor_free(out);
    const char *report = kc_session_stats(timed);
    assert_non_null(strstr(report, "over 2 run(s)"));
    assert_non_null(strstr(report, "Conv2D"));
    assert_non_null(strstr(report, "by class:"));
    assert_non_null(strstr(report, "idle ms\n")); /* the column of thread time at joins */
    assert_non_null(strstr(report, "\nidle: "));
    assert_null(strstr(report, "batch_normalization ")); /* folded into the conv */
    assert_non_null(strstr(report, "batch_normalization_1 ")); /* after the activation */
    /* another batch size: a new plan, counted afresh */
    kc_tensor *two = NULL;
    int64_t dims[KC_MAX_RANK];
    for (int d = 0; d < kc_tensor_rank(in); d++)
        dims[d] = kc_tensor_dim(in, d);
    dims[0] += 1;
    assert_int_equal(kc_tensor_new(KC_F32, kc_tensor_rank(in), dims, &two), KC_OK);
    assert_int_equal(kc_session_run(timed, (const kc_tensor *const *)&two, 1, &out, 1), KC_OK);
    kc_tensor_free(out);
    const char *again = kc_session_stats(timed);
    if (!strstr(again, "warm-up run 1 of 2 on this plan"))
        fail_msg("after a new plan: %s", again);
    kc_tensor_free(two);
    kc_tensor_free(in);
    kc_session_free(plain);
    kc_session_free(timed);
    kc_model_free(m);
}

/* Run app `name` fused and unfused on its golden input; outputs agree. */
static int kc_app_fused_count(const char *name)
{
    char path[512], input[512];
    snprintf(path, sizeof path, KC_TEST_DATA "/../apps/%s/model.keras", name);
    snprintf(input, sizeof input, KC_TEST_DATA "/../apps/%s/input_0.npy", name);
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(path, NULL, &m), KC_OK);
    kc_tensor *in = NULL, *a_out = NULL, *b_out = NULL;
    assert_int_equal(kc_tensor_load_npy(input, &in), KC_OK);
    kc_session *fused = NULL, *plain = NULL;
    new_with_and_without(m, NULL, "KC_FUSE", &fused, &plain);
    int n = kc_session_fused_nodes(fused);
    assert_int_equal(kc_session_run(fused, (const kc_tensor *const *)&in, 1, &a_out, 1), KC_OK);
    assert_int_equal(kc_session_run(plain, (const kc_tensor *const *)&in, 1, &b_out, 1), KC_OK);
    const float *a = kc_tensor_cdata(a_out), *b = kc_tensor_cdata(b_out);
    for (int64_t i = 0; i < kc_tensor_count(b_out); i++)
        assert_true(fabsf(a[i] - b[i]) <= 1e-4f * fmaxf(1.0f, fabsf(b[i])));
    /* run_into writes the same values into the caller's tensor */
    memset(kc_tensor_data(a_out), 0, (size_t)kc_tensor_count(a_out) * sizeof(float));
    assert_int_equal(kc_session_run_into(fused, (const kc_tensor *const *)&in, 1, &a_out, 1),
                     KC_OK);
    for (int64_t i = 0; i < kc_tensor_count(b_out); i++)
        assert_true(fabsf(a[i] - b[i]) <= 1e-4f * fmaxf(1.0f, fabsf(b[i])));
    kc_tensor_free(in);
    kc_tensor_free(a_out);
    kc_tensor_free(b_out);
    kc_session_free(fused);
    kc_session_free(plain);
    kc_model_free(m);
    return n;
}

/* Residual Adds fuse into the convolution before them (oneDNN sum
 * post-op), with the ReLU after the Add, and ZeroPadding into the valid
 * convolution after it: ResNet50 (reduced) has 53 BN folds, 33 conv ReLUs,
 * 16 Adds and 16 ReLUs after them, its 2 ZeroPaddings (one before a
 * conv, one before the MaxPooling of conv1's ReLU output); MobileNetV2 52 BN folds, 35 ReLU6, 10 Adds
 * (linear bottlenecks, no activation) and 4 ZeroPaddings before stride-2
 * depthwise convolutions. Fused outputs equal unfused ones (1e-4). */
static void test_residual_add_fusion(void **state)
{
    (void)state;
    assert_int_equal(kc_app_fused_count("resnet50"), 53 + 33 + 16 + 16 + 2);
    assert_int_equal(kc_app_fused_count("mobilenet_v2"), 52 + 35 + 10 + 4);
}

/* A float32 batch of n images, its image i the float32 batch's image
 * i mod that batch's count: a test input at another batch size. */
static kc_tensor *cycled_images(const kc_tensor *batch, int64_t n)
{
    int rank = kc_tensor_rank(batch);
    int64_t dims[KC_MAX_RANK];
    for (int a = 0; a < rank; a++)
        dims[a] = kc_tensor_dim(batch, a);
    int64_t have = dims[0];
    size_t image = (size_t)(kc_tensor_count(batch) / have);
    dims[0] = n;
    kc_tensor *t = NULL;
    assert_int_equal(kc_tensor_new(KC_F32, rank, dims, &t), KC_OK);
    float *to = kc_tensor_data(t);
    const float *from = kc_tensor_cdata(batch);
    for (int64_t i = 0; i < n; i++)
        memcpy(to + i * image, from + (i % have) * image, image * sizeof(float));
    return t;
}

/* Two sessions of m on `threads` threads: *fused with the per-plan
 * fusions, *plain with none (KC_FUSE_DW=0 while it is made). */
static void new_fused_and_plain(kc_model *m, int threads, kc_session **fused, kc_session **plain)
{
    kc_session_options o = {.threads = threads};
    new_with_and_without(m, &o, "KC_FUSE_DW", fused, plain);
}

/* Outputs of two sessions on one input, within the fidelity tolerance. */
static void assert_close_runs(kc_session *a, kc_session *b, const kc_tensor *in)
{
    kc_tensor *a_out = NULL, *b_out = NULL;
    assert_int_equal(kc_session_run(a, &in, 1, &a_out, 1), KC_OK);
    assert_int_equal(kc_session_run(b, &in, 1, &b_out, 1), KC_OK);
    const float *x = kc_tensor_cdata(a_out), *y = kc_tensor_cdata(b_out);
    assert_int_equal(kc_tensor_count(a_out), kc_tensor_count(b_out));
    for (int64_t i = 0; i < kc_tensor_count(b_out); i++)
        assert_true(fabsf(x[i] - y[i]) <= 1e-4f * fmaxf(1.0f, fabsf(y[i])));
    kc_tensor_free(a_out);
    kc_tensor_free(b_out);
}

/* With the block kernel off (KC_IRB=0): MobileNetV2's 16 expand +
 * depthwise pairs run as one oneDNN primitive each when the batch has
 * several images; for one image on 2 threads, where the depthwise loop
 * runs (kc_dw_enabled), the pairs whose rows it cuts between the threads
 * (at 64x64: block_1's and block_2's, 16 output rows of 16+ columns), the
 * others as two layers (KC_DW_ROWS=0: all); the choice follows each new
 * plan, both ways, and KC_FUSE_DW=0 turns it off. Outputs equal the
 * unfused session's at either batch. */
static void run_pair(kc_session *a, kc_session *b, const kc_tensor *in, int want_fused)
{
    assert_close_runs(a, b, in);
    assert_int_equal(a->fused.n_dw_on, want_fused);
    assert_int_equal(b->fused.n_dw_on, 0);
    assert_int_equal(a->fused.n_irb_on + b->fused.n_irb_on, 0);
}

static void test_depthwise_fusion_per_plan(void **state)
{
    (void)state;
    if (!kc_dnnl_ready())
        skip();
    setenv("KC_IRB", "0", 1);
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(KC_TEST_DATA "/../apps/mobilenet_v2/model.keras", NULL, &m),
                     KC_OK);
    kc_tensor *two = NULL;
    assert_int_equal(kc_tensor_load_npy(KC_TEST_DATA "/../apps/mobilenet_v2/input_0.npy", &two),
                     KC_OK);
    kc_tensor *one = cycled_images(two, 1);
    kc_session *fused = NULL, *plain = NULL;
    new_fused_and_plain(m, 2, &fused, &plain);
    int by_rows = kc_dw_enabled() ? 2 : 0;
    run_pair(fused, plain, two, 16);
    run_pair(fused, plain, one, by_rows);
    run_pair(fused, plain, two, 16);
    setenv("KC_DW_ROWS", "0", 1); /* read when a plan is made */
    run_pair(fused, plain, one, 0);
    unsetenv("KC_DW_ROWS");
    run_pair(fused, plain, two, 16);
    run_pair(fused, plain, one, by_rows);
    unsetenv("KC_IRB");
    kc_tensor_free(one);
    kc_tensor_free(two);
    kc_session_free(fused);
    kc_session_free(plain);
    kc_model_free(m);
}

/* A session's outputs on `in` equal the unfused session's, with n_irb
 * blocks run whole; and again on a second run (the kernels' states,
 * built in the first, kept). */
static void run_blocks_pairs(kc_session *a, kc_session *b, const kc_tensor *in, int n_irb,
                             int n_dw)
{
    assert_close_runs(a, b, in);
    assert_int_equal(a->fused.n_irb_on, n_irb);
    assert_int_equal(a->fused.n_dw_on, n_dw);
    assert_int_equal(b->fused.n_irb_on, 0);
    assert_close_runs(a, b, in);
}

static void run_blocks(kc_session *a, kc_session *b, const kc_tensor *in, int n_irb)
{
    run_blocks_pairs(a, b, in, n_irb, 0);
}

/* MobileNetV2's 16 inverted-residual blocks (expansion, depthwise,
 * projection, the 10 residual sums) run as one kernel each (kernels/
 * irb.c) at any batch: one image cut into row parts (3 threads: the
 * in-place blocks' parts read rows their neighbours overwrite), two in
 * batch lanes (lane 0 builds the states in a first run of its own), three
 * cut by images; the choice follows each new plan, and KC_FUSE_DW=0 turns
 * it off. Its first block's depthwise layer follows a 3x3 convolution,
 * not a 1x1: it and its projection run as a block without expansion on
 * the depthwise node (17 blocks in all). Outputs equal the unfused
 * session's every time. With
 * KC_IRB=1, to cover its paths on AVX2 too; unset, AVX2 keeps the three
 * layers (irb.c: not faster there). */
static void test_block_fusion_per_plan(void **state)
{
    (void)state;
    if (kc_isa() == KC_ISA_NONE)
        skip();
    setenv("KC_IRB", "1", 1);
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(KC_TEST_DATA "/../apps/mobilenet_v2/model.keras", NULL, &m),
                     KC_OK);
    kc_tensor *two = NULL;
    assert_int_equal(kc_tensor_load_npy(KC_TEST_DATA "/../apps/mobilenet_v2/input_0.npy", &two),
                     KC_OK);
    kc_tensor *one = cycled_images(two, 1), *three = cycled_images(two, 3);
    static const int threads[] = {3, 2};
    for (int t = 0; t < 2; t++) {
        kc_session *fused = NULL, *plain = NULL;
        new_fused_and_plain(m, threads[t], &fused, &plain);
        run_blocks(fused, plain, one, 17);
        run_blocks(fused, plain, two, 17);
        run_blocks(fused, plain, three, 17);
        run_blocks(fused, plain, one, 17);
        kc_session_free(fused);
        kc_session_free(plain);
    }
    unsetenv("KC_IRB");
    kc_session *by_default = NULL, *plain = NULL;
    new_fused_and_plain(m, 2, &by_default, &plain);
    /* on AVX2 the pairs of block_1 and block_2 cut by rows instead
     * (test_depthwise_fusion_per_plan) */
    if (kc_isa() == KC_ISA_AVX512)
        run_blocks(by_default, plain, one, 17);
    else
        run_blocks_pairs(by_default, plain, one, 0, kc_dw_enabled() ? 2 : 0);
    kc_session_free(by_default);
    kc_session_free(plain);
    kc_tensor_free(one);
    kc_tensor_free(two);
    kc_tensor_free(three);
    kc_model_free(m);
}

/* MobileNetV1's chain (tests/zoo/mobilenet_v1_chain: 1x1, depthwise,
 * 1x1, depthwise, 1x1, depthwise, 1x1, none widening): its second 1x1 is
 * the first block's projection and would be the second block's
 * expansion. A block or pair is never fused on a node an earlier block
 * absorbed (such a session refused to run: the projection the first
 * block was given carried a block of its own), nor a block without
 * expansion whose projection carries one: blocks on the first and third
 * 1x1, the second depthwise layer alone. One and two images, 1 and 2
 * threads, with KC_IRB=1 (so an AVX2 machine runs it too); outputs equal
 * the unfused session's. */
static void test_block_chain_per_plan(void **state)
{
    (void)state;
    if (kc_isa() == KC_ISA_NONE)
        skip();
    setenv("KC_IRB", "1", 1);
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(KC_TEST_DATA "/../zoo/mobilenet_v1_chain/model.keras", NULL, &m),
                     KC_OK);
    kc_tensor *two = NULL;
    assert_int_equal(kc_tensor_load_npy(KC_TEST_DATA "/../zoo/mobilenet_v1_chain/input_0.npy",
                                        &two),
                     KC_OK);
    kc_tensor *one = cycled_images(two, 1);
    for (int threads = 1; threads <= 2; threads++) {
        kc_session *fused = NULL, *plain = NULL;
        new_fused_and_plain(m, threads, &fused, &plain);
        run_blocks(fused, plain, one, 2);
        run_blocks(fused, plain, two, 2);
        run_blocks(fused, plain, one, 2);
        kc_session_free(fused);
        kc_session_free(plain);
    }
    unsetenv("KC_IRB");
    kc_tensor_free(one);
    kc_tensor_free(two);
    kc_model_free(m);
}

/* Winograd by default on 3x3 layers of 64 channels or more, everywhere
 * eligible with KC_WINOGRAD=1, direct convolutions with options.exact (and
 * with KC_WINOGRAD=0, which must give the same bits as exact): they differ
 * in rounding only, within the fidelity tolerance. The reduced ResNet50's
 * 3x3 layers have 5 to 41 channels: by default they run direct, the same
 * bits as exact. */
static void test_exact_convolutions(void **state)
{
    (void)state;
    if (!kc_dnnl_ready() || !kc_dnnl_avx512())
        skip(); /* KC_WINOGRAD=1 forces oneDNN's Winograd, AVX-512 only in 2.6 */
    const char *path = KC_TEST_DATA "/../apps/resnet50/model.keras";
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(path, NULL, &m), KC_OK);
    kc_tensor *in = NULL, *out[4] = {0};
    assert_int_equal(kc_tensor_load_npy(KC_TEST_DATA "/../apps/resnet50/input_0.npy", &in),
                     KC_OK);
    kc_session_options fast = {0}, exact = {.exact = 1};
    kc_session *s[4] = {0};
    static const char *const winograd_env[4] = {"1", NULL, "0", NULL};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(kc_session_new(m, i == 1 ? &exact : &fast, &s[i]), KC_OK);
        /* primitives are chosen at a session's first run */
        if (winograd_env[i])
            setenv("KC_WINOGRAD", winograd_env[i], 1);
        else
            unsetenv("KC_WINOGRAD");
        assert_int_equal(kc_session_run(s[i], (const kc_tensor *const *)&in, 1, &out[i], 1),
                         KC_OK);
    }
    unsetenv("KC_WINOGRAD");
    const float *w = kc_tensor_cdata(out[0]), *e = kc_tensor_cdata(out[1]);
    int64_t n = kc_tensor_count(out[1]);
    assert_memory_equal(e, kc_tensor_cdata(out[2]), (size_t)n * sizeof(float));
    assert_memory_equal(e, kc_tensor_cdata(out[3]), (size_t)n * sizeof(float));
    float worst = 0, scale = 1;
    for (int64_t i = 0; i < n; i++)
        scale = fmaxf(scale, fabsf(e[i]));
    for (int64_t i = 0; i < n; i++)
        worst = fmaxf(worst, fabsf(w[i] - e[i]));
    assert_true(worst > 0);              /* Winograd really ran */
    assert_true(worst <= 1e-4f * scale); /* and stays inside the tolerance */
    for (int i = 0; i < 4; i++) {
        kc_tensor_free(out[i]);
        kc_session_free(s[i]);
    }
    kc_tensor_free(in);
    kc_model_free(m);
}

static kc_tensor *kc_app_input(const char *name, int64_t batch);

/* options.winograd_memory bounds what Winograd may add: with 1 byte no
 * layer can pay for its transformed kernel, so every one runs direct (the
 * same bits as exact); without a bound they take Winograd (KC_WINOGRAD=1:
 * the reduced ResNet50's layers are narrow). */
static void test_winograd_memory_bound(void **state)
{
    (void)state;
    if (!kc_dnnl_ready() || !kc_dnnl_avx512())
        skip(); /* as test_exact_convolutions */
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(KC_TEST_DATA "/../apps/resnet50/model.keras", NULL, &m), KC_OK);
    kc_tensor *in = NULL, *out[3] = {0};
    assert_int_equal(kc_tensor_load_npy(KC_TEST_DATA "/../apps/resnet50/input_0.npy", &in),
                     KC_OK);
    kc_session_options opts[3] = {{.exact = 1}, {.winograd_memory = 1}, {0}};
    kc_session *s[3] = {0};
    setenv("KC_WINOGRAD", "1", 1);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(kc_session_new(m, &opts[i], &s[i]), KC_OK);
        assert_int_equal(kc_session_run(s[i], (const kc_tensor *const *)&in, 1, &out[i], 1),
                         KC_OK);
    }
    unsetenv("KC_WINOGRAD");
    size_t bytes = (size_t)kc_tensor_count(out[0]) * sizeof(float);
    assert_memory_equal(kc_tensor_cdata(out[0]), kc_tensor_cdata(out[1]), bytes);
    assert_true(s[1]->wino_budget.left == 1); /* nothing was paid */
    assert_true(memcmp(kc_tensor_cdata(out[0]), kc_tensor_cdata(out[2]), bytes) != 0);
    for (int i = 0; i < 3; i++) {
        kc_tensor_free(out[i]);
        kc_session_free(s[i]);
    }
    kc_tensor_free(in);
    kc_model_free(m);
}

/* The plan's spare range of every node lies inside the arena and clear of
 * every value live while the node runs (defined at or before it, read at
 * or after it): kernels write scratch there (Winograd's buffers). */
/* Per value of s's graph, the node that makes it (*def; -1: a model
 * input) and the last that reads it (*last; the node count for a model
 * output); by_root: an alias's life counted in its root's. */
static void value_lives(const kc_session *s, int by_root, int **def_out, int **last_out)
{
    const kc_graph *g = s->graph;
    int *def = calloc((size_t)g->n_values, sizeof *def);
    int *last = calloc((size_t)g->n_values, sizeof *last);
    assert_non_null(def);
    assert_non_null(last);
    for (int v = 0; v < g->n_values; v++)
        def[v] = -1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_outputs; j++)
            if (def[g->nodes[i].outputs[j]] < 0)
                def[g->nodes[i].outputs[j]] = i;
    kc_plan_last_reads(g, last);
    for (int v = 0; by_root && v < g->n_values; v++) {
        int r = kc_plan_root(s->fused.alias, v);
        if (r == v)
            continue;
        if (last[v] > last[r])
            last[r] = last[v];
        if (def[v] >= 0 && (def[r] < 0 || def[v] < def[r]) && g->values[r].producer >= 0)
            def[r] = def[v];
    }
    *def_out = def;
    *last_out = last;
}

static void test_plan_spare_is_free(void **state)
{
    (void)state;
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(KC_TEST_DATA "/../apps/inception_v3/model.keras", NULL, &m),
                     KC_OK);
    kc_tensor *in = kc_app_input("inception_v3", 2), *out = NULL;
    kc_session *s = NULL;
    assert_int_equal(kc_session_new(m, NULL, &s), KC_OK);
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&in, 1, &out, 1), KC_OK);
    const kc_graph *g = s->graph;
    const kc_plan *p = &s->plan;
    int *def = NULL, *last = NULL;
    value_lives(s, 0, &def, &last);
    int with_spare = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        size_t lo = p->spare_offset[i], hi = lo + p->spare_floats[i];
        assert_true(hi <= p->arena_floats);
        with_spare += p->spare_floats[i] > 0;
        for (int v = 0; v < g->n_values && hi > lo; v++) {
            int end = last[v] < def[v] ? def[v] : last[v];
            if (def[v] > i || end < i)
                continue;
            size_t vlo = p->offset[v], vhi = vlo + (size_t)kc_shape_count(&p->shape[v]);
            if (vlo < hi && lo < vhi)
                fail_msg("node %d (%s): spare [%zu, %zu) overlaps value %d [%zu, %zu)", i,
                         g->nodes[i].layer->name, lo, hi, v, vlo, vhi);
        }
    }
    assert_true(with_spare > g->n_nodes / 2);
    free(def);
    free(last);
    kc_tensor_free(in);
    kc_tensor_free(out);
    kc_session_free(s);
    kc_model_free(m);
}

/* The input batch `batch` of app `name`'s golden input (image 0 repeated). */
static kc_tensor *kc_app_input(const char *name, int64_t batch)
{
    char path[512];
    snprintf(path, sizeof path, KC_TEST_DATA "/../apps/%s/input_0.npy", name);
    kc_tensor *one = NULL, *t = NULL;
    assert_int_equal(kc_tensor_load_npy(path, &one), KC_OK);
    int64_t dims[KC_MAX_RANK];
    int rank = kc_tensor_rank(one);
    for (int d = 0; d < rank; d++)
        dims[d] = kc_tensor_dim(one, d);
    size_t image = (size_t)(kc_tensor_count(one) / dims[0]) * sizeof(float);
    dims[0] = batch;
    assert_int_equal(kc_tensor_new(KC_F32, rank, dims, &t), KC_OK);
    for (int64_t b = 0; b < batch; b++)
        memcpy((char *)kc_tensor_data(t) + (size_t)b * image, kc_tensor_cdata(one), image);
    kc_tensor_free(one);
    return t;
}

/* InceptionV3's nine branch_pool average poolings run after their 1x1
 * convolutions, at any batch, by default; not with KC_FUSE_POOL=0 nor
 * with options.exact (which keeps Keras's order of operations), and the
 * results agree within the tolerance. */
static void test_pooling_fusion_per_plan(void **state)
{
    (void)state;
    if (!kc_dnnl_ready())
        skip();
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(KC_TEST_DATA "/../apps/inception_v3/model.keras", NULL, &m),
                     KC_OK);
    kc_session_options exact = {.exact = 1};
    kc_session *fused = NULL, *plain = NULL, *ordered = NULL;
    assert_int_equal(kc_session_new(m, NULL, &fused), KC_OK);
    assert_int_equal(kc_session_new(m, &exact, &ordered), KC_OK);
    setenv("KC_FUSE_POOL", "0", 1);
    assert_int_equal(kc_session_new(m, NULL, &plain), KC_OK);
    unsetenv("KC_FUSE_POOL");
    for (int64_t batch = 1; batch <= 2; batch++) {
        kc_tensor *in = kc_app_input("inception_v3", batch);
        assert_close_runs(fused, plain, in);
        assert_close_runs(fused, ordered, in);
        assert_int_equal(fused->fused.n_pool_on, 9);
        assert_int_equal(plain->fused.n_pool_on, 0);
        assert_int_equal(ordered->fused.n_pool_on, 0);
        kc_tensor_free(in);
    }
    kc_session_free(fused);
    kc_session_free(plain);
    kc_session_free(ordered);
    kc_model_free(m);
}

/* How many of a session's rewritten layers only the host's kernels run:
 * convolutions with a residual sum or a folded ZeroPadding, poolings with
 * a folded ZeroPadding. */
static int kc_host_rewrites(const kc_session *s)
{
    int n = 0;
    for (int i = 0; i < s->graph->n_nodes; i++) {
        const kc_layer *l = s->fused.shadow[i];
        if (!l)
            continue;
        if (!strncmp(l->class_name, "MaxPool", 7)) {
            const kc_pool_attrs *p = l->attrs;
            n += p->pad_before[0] || p->pad_before[1] || p->pad_after[0] || p->pad_after[1];
        } else if (strcmp(l->class_name, "Dense")) {
            const kc_conv_attrs *c = l->attrs;
            n += c->accumulate || c->pad_before[0] || c->pad_before[1] || c->pad_after[0] ||
                 c->pad_after[1];
        }
    }
    return n;
}

/* A session through the scheduler gets only the rewrites every backend
 * runs as they are: the CUDA plugin's convolution writes its output
 * (a fused residual sum would be lost) and reads the padded shape (a
 * folded ZeroPadding would be misread). On the host the reduced ResNet50
 * has 16 residual sums and 2 folded paddings (conv1_pad, pool1_pad); on a
 * stand-in GPU none, with the same results. */
static void test_scheduled_sessions_get_portable_rewrites(void **state)
{
    (void)state;
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(KC_TEST_DATA "/../apps/resnet50/model.keras", NULL, &m),
                     KC_OK);
    kc_session *host = NULL, *gpu = NULL;
    assert_int_equal(kc_session_new(m, NULL, &host), KC_OK);
    setenv("KC_FAKE_GPUS", "1", 1);
    kc_session_options o = {.device = "/GPU:0"};
    assert_int_equal(kc_session_new(m, &o, &gpu), KC_OK);
    kc_tensor *in = kc_app_input("resnet50", 2);
    assert_close_runs(host, gpu, in);
    unsetenv("KC_FAKE_GPUS");
    assert_int_equal(kc_host_rewrites(host), 16 + 2);
    assert_int_equal(kc_host_rewrites(gpu), 0);
    assert_true(kc_session_fused_nodes(gpu) > 0); /* BatchNorm folds and activations */
    kc_tensor_free(in);
    kc_session_free(host);
    kc_session_free(gpu);
    kc_model_free(m);
}

/* Once oneDNN has packed a folded convolution's kernel, the session's
 * folded copy is freed (one resident copy per session, not two); a new
 * batch size rebuilds the primitives from a fresh fold, and every run
 * still equals a fresh session's. */
static void test_folded_kernels_released_after_packing(void **state)
{
    (void)state;
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(KC_TEST_DATA "/../apps/resnet50/model.keras", NULL, &m),
                     KC_OK);
    kc_session *s = NULL;
    assert_int_equal(kc_session_new(m, NULL, &s), KC_OK);
    kc_tensor *out[3] = {0};
    for (int i = 0; i < 3; i++) {
        int64_t batch = i == 1 ? 2 : 1;
        kc_tensor *in = kc_app_input("resnet50", batch);
        assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&in, 1, &out[i], 1), KC_OK);
        int released = 0;
        for (int n = 0; n < s->graph->n_nodes; n++)
            if (s->fused.shadow[n] && s->fused.shadow[n]->n_weights &&
                !s->fused.shadow[n]->weights[0].data) {
                assert_non_null(s->state[n]);
                assert_true(s->state[n]->weights_cached);
                released++;
            }
        if (kc_dnnl_ready())
            assert_true(released >= 53); /* every BN-folded convolution */
        kc_session *fresh = NULL;
        kc_tensor *want = NULL;
        assert_int_equal(kc_session_new(m, NULL, &fresh), KC_OK);
        assert_int_equal(kc_session_run(fresh, (const kc_tensor *const *)&in, 1, &want, 1), KC_OK);
        assert_memory_equal(kc_tensor_cdata(out[i]), kc_tensor_cdata(want),
                            (size_t)kc_tensor_count(want) * sizeof(float));
        kc_tensor_free(want);
        kc_session_free(fresh);
        kc_tensor_free(in);
    }
    for (int i = 0; i < 3; i++)
        kc_tensor_free(out[i]);
    kc_session_free(s);
    kc_model_free(m);
}

/* run_into checks the caller's tensors. */
static void test_run_into_checks(void **state)
{
    (void)state;
    const char *path = KC_TEST_DATA "/../zoo/dense_relu/model.keras";
    kc_model *m = NULL;
    kc_session *s = NULL;
    assert_int_equal(kc_model_load(path, NULL, &m), KC_OK);
    assert_int_equal(kc_session_new(m, NULL, &s), KC_OK);
    int64_t dims[KC_MAX_RANK];
    int rank = kc_model_input_shape(m, 0, dims);
    dims[0] = 2;
    kc_tensor *in = NULL, *bad = NULL;
    assert_int_equal(kc_tensor_new(KC_F32, rank, dims, &in), KC_OK);
    memset(kc_tensor_data(in), 0, (size_t)kc_tensor_count(in) * sizeof(float));
    int64_t bad_dims[2] = {3, 1};
    assert_int_equal(kc_tensor_new(KC_F32, 2, bad_dims, &bad), KC_OK);
    assert_int_equal(kc_session_run_into(s, (const kc_tensor *const *)&in, 1, &bad, 1),
                     KC_ERR_SHAPE);
    kc_tensor *none = NULL;
    assert_int_equal(kc_session_run_into(s, (const kc_tensor *const *)&in, 1, &none, 1),
                     KC_ERR_ARG);
    kc_tensor_free(in);
    kc_tensor_free(bad);
    kc_session_free(s);
    kc_model_free(m);
}

/* Batch lanes: a batch of 4 on 2 threads runs as two lanes of 2 images,
 * each through the whole model on one thread, with the outputs of the
 * same model run as one batch (KC_LANES=0), run after run (the first run
 * of a plan builds the kernel states, later ones run the lanes side by
 * side), across a change of plan and back. Batch 3 (2 does not divide
 * it) and KC_LANES=0 run as one batch. A profiled session runs in lanes
 * too, as an unprofiled one would, and profiles lane 0: every layer the
 * unprofiled run runs, the head's (image-major) ones included, and no
 * layer twice (its times would then add up to more than the run's). */
static kc_tensor *batch_of(const kc_tensor *two, int64_t n)
{
    const kc_shape *sh = &two->shape;
    int64_t dims[KC_MAX_RANK];
    for (int d = 0; d < sh->rank; d++)
        dims[d] = sh->dims[d];
    dims[0] = n;
    kc_tensor *t = NULL;
    assert_int_equal(kc_tensor_new(KC_F32, sh->rank, dims, &t), KC_OK);
    int64_t per = kc_tensor_count(two) / sh->dims[0];
    float *x = kc_tensor_data(t);
    const float *from = kc_tensor_cdata(two);
    for (int64_t i = 0; i < n; i++) /* the images again, scaled per copy */
        for (int64_t j = 0; j < per; j++)
            x[i * per + j] = from[(i % sh->dims[0]) * per + j] * (1.0f - 0.2f * (float)(i / 2));
    return t;
}

/* The profile of a laned session: it says whose times they are, counts
 * the runs after the warm-ups, and lists every node that runs (not
 * absorbed), once; their total is no more than a run's. */
static void assert_profile_laned(const kc_session *s, int lanes, int images)
{
    const char *report = kc_session_stats(s);
    char want[128];
    snprintf(want, sizeof want, "in %d batch lanes: lane 0's times, its %d image(s)", lanes,
             images);
    assert_non_null(strstr(report, want));
    assert_non_null(strstr(report, "over 2 run(s)"));
    int listed = 0;
    for (int i = 0; i < s->graph->n_nodes; i++) {
        char line[256];
        snprintf(line, sizeof line, "\n  %s ", s->graph->nodes[i].layer->name);
        const char *at = strstr(report, line);
        if (s->fused.skip[i]) {
            assert_null(at);
            continue;
        }
        assert_non_null(at);
        assert_null(strstr(at + 1, line));
        listed++;
    }
    assert_true(listed > 10);
}

static void test_batch_lanes(void **state)
{
    (void)state;
    static const char *const apps[] = {"mobilenet_v2", "resnet50", "inception_v3"};
    for (int a = 0; a < 3; a++) {
        char path[512], input[512];
        snprintf(path, sizeof path, KC_TEST_DATA "/../apps/%s/model.keras", apps[a]);
        snprintf(input, sizeof input, KC_TEST_DATA "/../apps/%s/input_0.npy", apps[a]);
        kc_model *m = NULL;
        kc_tensor *two = NULL;
        assert_int_equal(kc_model_load(path, NULL, &m), KC_OK);
        assert_int_equal(kc_tensor_load_npy(input, &two), KC_OK);
        kc_tensor *four = batch_of(two, 4), *three = batch_of(two, 3);
        kc_session_options o = {.threads = 2}, prof = {.threads = 2, .profile = 1};
        kc_session *laned = NULL, *whole = NULL, *profiled = NULL;
        assert_int_equal(kc_session_new(m, &o, &laned), KC_OK);
        assert_int_equal(kc_session_new(m, &prof, &profiled), KC_OK);
        setenv("KC_LANES", "0", 1);
        assert_int_equal(kc_session_new(m, &o, &whole), KC_OK);
        unsetenv("KC_LANES");
        const kc_tensor *order[] = {four, four, four, three, four, four};
        const int want[] = {2, 2, 2, 1, 2, 2};
        for (int r = 0; r < 6; r++) {
            assert_close_runs(laned, whole, order[r]);
            assert_int_equal(kc_session_lanes(laned), want[r]);
            assert_int_equal(kc_session_lanes(whole), 1);
        }
        for (int r = 0; r < 4; r++) /* two warm-ups, then runs counted */
            assert_close_runs(profiled, whole, four);
        assert_int_equal(kc_session_lanes(profiled), 2);
        assert_profile_laned(profiled, 2, 2);
        /* with an image-major head of 12 nodes (these small models have
         * none of their own): its layers listed too, once each */
        kc_session *headed = NULL;
        assert_int_equal(kc_session_new(m, &prof, &headed), KC_OK);
        setenv("KC_HEAD", "12", 1); /* read when the plan is made */
        for (int r = 0; r < 4; r++)
            assert_close_runs(headed, whole, four);
        unsetenv("KC_HEAD");
        assert_int_equal(headed->head_nodes, 12);
        assert_profile_laned(headed, 2, 2);
        kc_session_free(headed);
        kc_session_free(laned);
        kc_session_free(whole);
        kc_session_free(profiled);
        kc_tensor_free(four);
        kc_tensor_free(three);
        kc_tensor_free(two);
        kc_model_free(m);
    }
}

/* Placing the largest values first (plan_pack.c): a long-lived value
 * made beside a short one no longer pushes a later, larger one above
 * both (node order: 16 floats; largest first: 12), and values whose
 * lives overlap never share memory. */
static void test_plan_pack_greedy(void **state)
{
    (void)state;
    /* A: 4 floats, nodes 0-1; B: 4, 0-3; C: 8, 2-3 */
    const size_t size[3] = {4, 4, 8};
    const int from[3] = {0, 0, 2}, to[3] = {1, 3, 3};
    size_t offset[3], peak = 0;
    assert_int_equal(kc_plan_pack(3, size, from, to, offset, &peak), 0);
    assert_int_equal(peak, 12);
    for (int a = 0; a < 3; a++)
        for (int b = a + 1; b < 3; b++)
            if (from[a] <= to[b] && from[b] <= to[a])
                assert_true(offset[a] + size[a] <= offset[b] || offset[b] + size[b] <= offset[a]);
}

/* Whole plans of the tests/apps models, at batch 1 and 3 on one thread:
 * packed offline (the default) their arenas are no larger than placed in
 * node order (KC_PACK=0 when the plan is made), MobileNetV3-Small's and
 * Xception's smaller (115 KB against 164, 111 against 136 at batch 1; on
 * every instruction set); no two values live at once share memory;
 * outputs as the node-order session's. MobileNetV2's was smaller where
 * its inverted-residual blocks were fused (131 KB against 180) until its
 * first block (depthwise + projection) was fused too: 115 KB either way. */
static void assert_no_live_overlap(const kc_session *s)
{
    const kc_graph *g = s->graph;
    const kc_plan *p = &s->plan;
    int *def = NULL, *last = NULL;
    value_lives(s, 1, &def, &last);
    for (int a = 0; a < g->n_values; a++)
        for (int b = a + 1; b < g->n_values; b++) {
            if (kc_plan_root(s->fused.alias, a) != a || kc_plan_root(s->fused.alias, b) != b)
                continue;
            int a_end = last[a] < def[a] ? def[a] : last[a];
            int b_end = last[b] < def[b] ? def[b] : last[b];
            if (def[a] > b_end || def[b] > a_end)
                continue;
            size_t alo = p->offset[a], ahi = alo + (size_t)kc_shape_count(&p->shape[a]);
            size_t blo = p->offset[b], bhi = blo + (size_t)kc_shape_count(&p->shape[b]);
            if (alo < bhi && blo < ahi)
                fail_msg("values %d [%zu, %zu) and %d [%zu, %zu) live together", a, alo, ahi, b,
                         blo, bhi);
        }
    free(def);
    free(last);
}

static void test_arena_packed(void **state)
{
    (void)state;
    static const char *const apps[] = {"mobilenet_v2", "resnet50", "inception_v3",
                                       "mobilenet_v3_small", "xception"};
    for (int a = 0; a < 5; a++) {
        char path[512];
        snprintf(path, sizeof path, KC_TEST_DATA "/../apps/%s/model.keras", apps[a]);
        kc_model *m = NULL;
        assert_int_equal(kc_model_load(path, NULL, &m), KC_OK);
        kc_session_options o = {.threads = 1};
        kc_session *packed = NULL, *ordered = NULL;
        assert_int_equal(kc_session_new(m, &o, &packed), KC_OK);
        assert_int_equal(kc_session_new(m, &o, &ordered), KC_OK);
        for (int64_t batch = 1; batch <= 3; batch += 2) {
            kc_tensor *in = kc_app_input(apps[a], batch), *out = NULL;
            setenv("KC_PACK", "0", 1);
            assert_int_equal(kc_session_run(ordered, (const kc_tensor *const *)&in, 1, &out, 1),
                             KC_OK);
            unsetenv("KC_PACK");
            kc_tensor_free(out);
            assert_close_runs(packed, ordered, in);
            size_t p_bytes = kc_session_arena_bytes(packed);
            size_t o_bytes = kc_session_arena_bytes(ordered);
            assert_true(p_bytes <= o_bytes);
            if (a >= 3)
                assert_true(p_bytes < o_bytes);
            assert_no_live_overlap(packed);
            kc_tensor_free(in);
        }
        kc_session_free(packed);
        kc_session_free(ordered);
        kc_model_free(m);
    }
}

/* The values a branch region's nodes (its join included) read or write,
 * and each lane's part of the region's spare range, share no memory:
 * the lanes run them in any order side by side. */
static void assert_region_disjoint(const kc_session *s, const kc_branch_region *r)
{
    const kc_graph *g = s->graph;
    const kc_plan *p = &s->plan;
    size_t lo[512], hi[512];
    int n = 0;
    for (int i = r->first; i <= r->last + 1; i++) {
        const kc_node *node = &g->nodes[i];
        for (int j = 0; j < node->n_inputs + node->n_outputs; j++) {
            int v = j < node->n_inputs ? node->inputs[j] : node->outputs[j - node->n_inputs];
            int root = kc_plan_root(s->fused.alias, v);
            size_t a = p->offset[root], b = a + (size_t)kc_shape_count(&p->shape[root]);
            int seen = 0;
            for (int k = 0; k < n; k++)
                seen |= lo[k] == a && hi[k] == b;
            if (!seen) {
                assert_true(n < 512);
                lo[n] = a;
                hi[n++] = b;
            }
        }
    }
    size_t part = p->spare_floats[r->first] / 2 / 16 * 16;
    for (int lane = 0; lane < 2 && part; lane++) {
        lo[n] = p->spare_offset[r->first] + (size_t)lane * part;
        hi[n] = lo[n] + part;
        n++;
    }
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            if (lo[a] < hi[b] && lo[b] < hi[a])
                fail_msg("region %d..%d: [%zu, %zu) overlaps [%zu, %zu)", r->first, r->last,
                         lo[a], hi[a], lo[b], hi[b]);
}

static int regions_of(const kc_session *s)
{
    return s->branches ? s->branches->n_regions : 0;
}

/* Branch lanes: InceptionV3 at batch 1 on 2 threads runs its blocks'
 * towers side by side, with the outputs of the same model run layer by
 * layer (KC_BRANCHES=0), run after run (the first builds the kernel
 * states node by node), with its joins run whole (KC_BRANCH_JOIN=0) or
 * copied by the lanes; the regions' values and spare parts share no
 * memory. Batch 2 (batch lanes), one thread, a profiled session and
 * ResNet50 (its one parallel branch too small to pay) have none; batch 3
 * (no batch lanes) has them. The models of tests/apps are small: any
 * region's work pays here (KC_BRANCH_MIN_FLOPS=0). */
static void test_branch_lanes(void **state)
{
    (void)state;
    setenv("KC_BRANCH_MIN_FLOPS", "0", 1);
    kc_model *m = NULL, *r50 = NULL;
    assert_int_equal(kc_model_load(KC_TEST_DATA "/../apps/inception_v3/model.keras", NULL, &m),
                     KC_OK);
    assert_int_equal(kc_model_load(KC_TEST_DATA "/../apps/resnet50/model.keras", NULL, &r50),
                     KC_OK);
    kc_tensor *one = kc_app_input("inception_v3", 1), *two = kc_app_input("inception_v3", 2);
    kc_tensor *three = kc_app_input("inception_v3", 3), *r50_in = kc_app_input("resnet50", 1);
    kc_session_options o = {.threads = 2}, single = {.threads = 1},
                       prof = {.threads = 2, .profile = 1};
    kc_session *br = NULL, *nojoin = NULL, *whole = NULL, *s1 = NULL, *sp = NULL, *sr = NULL,
               *wr = NULL;
    assert_int_equal(kc_session_new(m, &o, &br), KC_OK);
    setenv("KC_BRANCH_JOIN", "0", 1);
    assert_int_equal(kc_session_new(m, &o, &nojoin), KC_OK);
    setenv("KC_BRANCHES", "0", 1);
    assert_int_equal(kc_session_new(m, &o, &whole), KC_OK);
    assert_int_equal(kc_session_new(r50, &o, &wr), KC_OK);
    unsetenv("KC_BRANCHES");
    assert_int_equal(kc_session_new(m, &single, &s1), KC_OK);
    assert_int_equal(kc_session_new(m, &prof, &sp), KC_OK);
    assert_int_equal(kc_session_new(r50, &o, &sr), KC_OK);
    const kc_tensor *order[] = {one, one, one, two, one, three, three, one};
    for (int r = 0; r < 8; r++) {
        assert_close_runs(br, whole, order[r]);
        int64_t batch = order[r]->shape.dims[0];
        assert_int_equal(regions_of(whole), 0);
        if (batch == 2) {
            assert_int_equal(regions_of(br), 0);
            continue;
        }
        assert_true(regions_of(br) >= 3);
        for (int k = 0; k < regions_of(br); k++)
            assert_region_disjoint(br, &br->branches->region[k]);
        if (batch == 1) {
            assert_close_runs(nojoin, whole, order[r]);
            int joined = 0;
            for (int k = 0; k < regions_of(br); k++) {
                joined += br->branches->region[k].lane_join;
                assert_int_equal(nojoin->branches->region[k].lane_join, 0);
            }
            assert_true(joined >= 3);
        }
    }
    assert_close_runs(s1, whole, one);
    assert_close_runs(sp, whole, one);
    assert_int_equal(regions_of(s1), 0);
    assert_int_equal(regions_of(sp), 0);
    assert_close_runs(sr, wr, r50_in);
    assert_close_runs(sr, wr, r50_in);
    assert_int_equal(regions_of(sr), 0);
    kc_session *all[] = {br, nojoin, whole, s1, sp, sr, wr};
    for (int k = 0; k < 7; k++)
        kc_session_free(all[k]);
    kc_tensor *ins[] = {one, two, three, r50_in};
    for (int k = 0; k < 4; k++)
        kc_tensor_free(ins[k]);
    kc_model_free(m);
    kc_model_free(r50);
    unsetenv("KC_BRANCH_MIN_FLOPS");
}

/* kc_branches_deal: the split whose longer lane is shortest up to 16
 * branches (longest first onto the less loaded lane would give 3 + 2 + 2
 * against 3 + 2 here: 7 / 5 rather than 6 / 6), longest first beyond. */
static void test_branch_deal(void **state)
{
    (void)state;
    int lane[KC_BRANCH_MAX_DEAL];
    const double t[] = {3, 3, 2, 2, 2};
    assert_true(fabs(kc_branches_deal(t, 5, lane) - 6.0) < 1e-12);
    double sum[2] = {0};
    for (int b = 0; b < 5; b++)
        sum[lane[b]] += t[b];
    assert_true(fabs(sum[0] - 6.0) < 1e-12 && fabs(sum[1] - 6.0) < 1e-12);
    assert_int_equal(lane[0], 0); /* branch 0 on lane 0: mirrors are one deal */
    const double one[] = {2.5};
    assert_true(fabs(kc_branches_deal(one, 1, lane) - 2.5) < 1e-12);
    assert_int_equal(lane[0], 0);
    double many[20];
    for (int b = 0; b < 20; b++)
        many[b] = b % 2 ? 1.0 : 3.0; /* ten of 3, ten of 1: longest first is even */
    assert_true(fabs(kc_branches_deal(many, 20, lane) - 20.0) < 1e-12);
    int on0 = 0;
    for (int b = 0; b < 20; b++)
        on0 += lane[b] == 0;
    assert_int_equal(on0, 10);
}

/* kc_branches_rebalance over made-up times: three runs of the first
 * deal; a new deal tried where it gains 3% or more, timed over three
 * runs, kept where its longer lane ends sooner, else the first deal
 * back; then the deal stays. */
static void feed_runs(kc_branch_region *r, const double *t, int runs)
{
    for (int k = 0; k < runs; k++) {
        memcpy(r->run_seconds, t, (size_t)r->n_branches * sizeof *t);
        kc_branches_rebalance(r);
    }
}

static void test_branch_rebalance(void **state)
{
    (void)state;
    int lane_of[4], lane_first[4];
    double seconds[4], run_seconds[4];
    kc_branch_region r = {.n_branches = 4, .lane_of = lane_of, .lane_first = lane_first,
                          .seconds = seconds, .run_seconds = run_seconds};
    const double dealt[] = {5, 3, 3, 1}, noisy[] = {5.5, 3, 3.4, 1};
    const double worse[] = {6, 4, 4, 2}; /* the new deal's lanes 8 and 8 */
    for (int keep = 0; keep < 2; keep++) {
        const int first[] = {0, 1, 1, 1}; /* lanes 5 and 7 */
        memcpy(lane_of, first, sizeof first);
        r.phase = r.measured = r.moved = 0;
        feed_runs(&r, noisy, 1);
        feed_runs(&r, dealt, 1);
        assert_int_equal(r.phase, 0);
        feed_runs(&r, noisy, 1); /* each branch's least: dealt[] */
        assert_int_equal(r.phase, 1);
        assert_memory_equal(lane_first, first, sizeof first);
        assert_true(fabs(r.span_first - 7.0) < 1e-12); /* the least run: 5 | 7 */
        double lane[2] = {0};
        for (int b = 0; b < 4; b++)
            lane[lane_of[b]] += dealt[b];
        assert_true(fabs(lane[0] - 6.0) < 1e-12 && fabs(lane[1] - 6.0) < 1e-12);
        int tried[4];
        memcpy(tried, lane_of, sizeof tried);
        feed_runs(&r, keep ? dealt : worse, 3);
        assert_int_equal(r.phase, 2);
        assert_int_equal(r.moved, keep);
        assert_memory_equal(lane_of, keep ? tried : first, sizeof first);
    }
    /* no deal gains: the first stays at once */
    const int even[] = {0, 0, 1, 1};
    const double four[] = {4, 4, 4, 4};
    memcpy(lane_of, even, sizeof even);
    r.phase = r.measured = r.moved = 0;
    feed_runs(&r, four, 3);
    assert_int_equal(r.phase, 2);
    assert_int_equal(r.moved, 0);
    assert_memory_equal(lane_of, even, sizeof even);
}

/* The deal measured and settled in a session: InceptionV3 (tests/apps)
 * at batch 1 on 2 threads, eight runs; every region's deal settles by
 * the seventh run (one to build, three to time the first deal, three a
 * new one), and every run's outputs equal, bit for bit, those of a
 * session that keeps the first deal (KC_BRANCH_REBALANCE=0), whose
 * regions never time their branches and never move one. */
static void test_branch_rebalance_session(void **state)
{
    (void)state;
    setenv("KC_BRANCH_MIN_FLOPS", "0", 1);
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(KC_TEST_DATA "/../apps/inception_v3/model.keras", NULL, &m),
                     KC_OK);
    kc_tensor *one = kc_app_input("inception_v3", 1);
    kc_session_options o = {.threads = 2};
    kc_session *dealt = NULL, *kept = NULL;
    assert_int_equal(kc_session_new(m, &o, &dealt), KC_OK);
    setenv("KC_BRANCH_REBALANCE", "0", 1);
    assert_int_equal(kc_session_new(m, &o, &kept), KC_OK);
    unsetenv("KC_BRANCH_REBALANCE");
    for (int run = 0; run < 8; run++) {
        kc_tensor *a = NULL, *b = NULL;
        assert_int_equal(kc_session_run(dealt, (const kc_tensor *const *)&one, 1, &a, 1), KC_OK);
        assert_int_equal(kc_session_run(kept, (const kc_tensor *const *)&one, 1, &b, 1), KC_OK);
        assert_int_equal(kc_tensor_count(a), kc_tensor_count(b));
        assert_memory_equal(kc_tensor_cdata(a), kc_tensor_cdata(b),
                            (size_t)kc_tensor_count(a) * sizeof(float));
        kc_tensor_free(a);
        kc_tensor_free(b);
    }
    assert_true(regions_of(dealt) >= 3);
    assert_int_equal(regions_of(kept), regions_of(dealt));
    for (int k = 0; k < regions_of(dealt); k++) {
        assert_int_equal(dealt->branches->region[k].phase, 2);
        assert_int_equal(kept->branches->region[k].phase, 2);
        assert_int_equal(kept->branches->region[k].moved, 0);
    }
    assert_int_equal(kc_session_branch_moved(kept), 0);
    assert_true(kc_session_branch_moved(dealt) <= regions_of(dealt));
    kc_session_free(dealt);
    kc_session_free(kept);
    kc_tensor_free(one);
    kc_model_free(m);
    unsetenv("KC_BRANCH_MIN_FLOPS");
}

/* A model with an Embedding layer (Keras masks, which lanes do not
 * carry) runs as one batch. */
static void test_batch_lanes_refused(void **state)
{
    (void)state;
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(KC_TEST_DATA "/../zoo/embedding/model.keras", NULL, &m), KC_OK);
    kc_session_options o = {.threads = 2};
    kc_session *s = NULL;
    assert_int_equal(kc_session_new(m, &o, &s), KC_OK);
    int64_t dims[2] = {4, 0};
    const kc_shape *want = &s->graph->values[s->graph->inputs[0]].shape;
    dims[1] = want->dims[1] > 0 ? want->dims[1] : 5;
    kc_tensor *in = NULL, *out = NULL;
    assert_int_equal(kc_tensor_new(KC_F32, 2, dims, &in), KC_OK);
    memset(kc_tensor_data(in), 0, (size_t)kc_tensor_count(in) * sizeof(float));
    const kc_tensor *ins[1] = {in};
    assert_int_equal(kc_session_run(s, ins, 1, &out, 1), KC_OK);
    assert_int_equal(kc_session_lanes(s), 1);
    kc_tensor_free(out);
    kc_tensor_free(in);
    kc_session_free(s);
    kc_model_free(m);
}

/* ---------------------------------------------- image-major head */

/* Where value v of a split plan part lives, in node indices: [def, last]
 * (roots only; an alias's reads keep its root); def -1: before any node,
 * -2: not laid out by this part. */
typedef struct { int def, last; } live_span;

static void split_spans(const kc_session *s, int head, int tail, live_span *span)
{
    const kc_graph *g = s->graph;
    for (int v = 0; v < g->n_values; v++)
        span[v] = (live_span){g->values[v].producer, -1};
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++) {
            int r = kc_plan_root(s->fused.alias, g->nodes[i].inputs[j]);
            if (span[r].last < i)
                span[r].last = i;
        }
    for (int i = 0; i < g->n_outputs; i++) {
        span[kc_plan_root(s->fused.alias, g->outputs[i])].last = g->n_nodes;
    }
    for (int v = 0; v < g->n_values; v++) {
        live_span *sp = &span[v];
        if (s->fused.alias[v] >= 0) {
            sp->def = -2;
            continue;
        }
        if (sp->last < sp->def)
            sp->last = sp->def;
        int crosses = sp->def < head && sp->last >= head;
        if (!tail && sp->def >= head)
            sp->def = -2; /* the head lays out its own nodes' values */
        else if (!tail && crosses)
            sp->last = head;
        else if (tail && sp->def < head && !crosses)
            sp->def = -2; /* made and read inside the head */
        else if (tail && sp->def < head)
            sp->def = -1; /* in place before the tail's first node */
    }
}

/* Nothing live at a node of the part overlaps anything else live then,
 * nor the node's spare range; all inside the arena. */
static void assert_split_layout(const kc_session *s, const kc_plan *p, int head, int tail)
{
    const kc_graph *g = s->graph;
    live_span *span = calloc((size_t)g->n_values, sizeof *span);
    int *live = calloc((size_t)g->n_values, sizeof *live);
    assert_non_null(span);
    assert_non_null(live);
    split_spans(s, head, tail, span);
    for (int i = tail ? head : 0; i < (tail ? g->n_nodes : head); i++) {
        int n = 0;
        for (int v = 0; v < g->n_values; v++)
            if (span[v].def != -2 && span[v].def <= i && span[v].last >= i)
                live[n++] = v;
        size_t lo = p->spare_offset[i], hi = lo + p->spare_floats[i];
        assert_true(hi <= p->arena_floats);
        for (int a = 0; a < n; a++) {
            size_t alo = p->offset[live[a]], ahi = alo + (size_t)kc_shape_count(&p->shape[live[a]]);
            assert_true(ahi <= p->arena_floats);
            if (alo < hi && lo < ahi)
                fail_msg("node %d: spare overlaps value %d", i, live[a]);
            for (int b = a + 1; b < n; b++) {
                size_t blo = p->offset[live[b]];
                size_t bhi = blo + (size_t)kc_shape_count(&p->shape[live[b]]);
                if (alo < bhi && blo < ahi)
                    fail_msg("%s plan, head %d, node %d: values %d and %d overlap",
                             tail ? "tail" : "head", head, i, live[a], live[b]);
            }
        }
    }
    free(span);
    free(live);
}

/* Image-major head (runtime/head.c): each lane runs nodes [0, K) one
 * image at a time on an arena planned for one image, then the rest on
 * its batch. For every K of MobileNetV2, ResNet50 and InceptionV3 (fused
 * expand + depthwise pairs, fused paddings, residual sums, branches and
 * concatenations on either side of the cut): both plans lay nothing live
 * over anything else live, and the outputs equal the whole batch's on a
 * plan's first run and a later one. Two slots hold less per image than
 * their root value's shape, and copying them by that shape put later
 * images' rows in the wrong place: a fused pair's (its depthwise output
 * in its 1x1 output's slot: MobileNetV2, K inside block_1) and a fused
 * ZeroPadding's (the unpadded rows under the padded shape: ResNet50,
 * K = 2..5, the cut between conv1 and pool1). Also on small models with
 * two inputs (one read only after the cut), a shared layer, and outputs
 * made before the cut. */
/* Every output of a and b on these inputs agrees within the tolerance. */
static void assert_close_runs_io(kc_session *a, kc_session *b, const kc_tensor *const *in,
                                 int n_in, int n_out)
{
    kc_tensor *x[8] = {0}, *y[8] = {0};
    assert_true(n_out <= 8);
    assert_int_equal(kc_session_run(a, in, n_in, x, n_out), KC_OK);
    assert_int_equal(kc_session_run(b, in, n_in, y, n_out), KC_OK);
    for (int o = 0; o < n_out; o++) {
        const float *p = kc_tensor_cdata(x[o]), *q = kc_tensor_cdata(y[o]);
        assert_int_equal(kc_tensor_count(x[o]), kc_tensor_count(y[o]));
        for (int64_t i = 0; i < kc_tensor_count(y[o]); i++)
            assert_true(fabsf(p[i] - q[i]) <= 1e-4f * fmaxf(1.0f, fabsf(q[i])));
        kc_tensor_free(x[o]);
        kc_tensor_free(y[o]);
    }
}

/* Model `path` with every split point K as its head, 4 images on 2
 * threads (lanes of 2): see test_batch_head_split_points. */
static void sweep_head_split_points(const char *path)
{
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(path, NULL, &m), KC_OK);
    int n_in = kc_model_num_inputs(m), n_out = kc_model_num_outputs(m);
    kc_tensor *in[8] = {0};
    assert_true(n_in <= 8);
    for (int i = 0; i < n_in; i++) {
        int64_t dims[KC_MAX_RANK];
        int rank = kc_model_input_shape(m, i, dims);
        dims[0] = 4;
        assert_int_equal(kc_tensor_new(KC_F32, rank, dims, &in[i]), KC_OK);
        float *x = kc_tensor_data(in[i]);
        for (int64_t j = 0; j < kc_tensor_count(in[i]); j++)
            x[j] = (float)((j * 7919 + i * 104729) % 2001) / 1000.0f - 1.0f;
    }
    const kc_tensor *const *ins = (const kc_tensor *const *)in;
    kc_session_options o = {.threads = 2};
    kc_session *whole = NULL;
    setenv("KC_LANES", "0", 1);
    assert_int_equal(kc_session_new(m, &o, &whole), KC_OK);
    unsetenv("KC_LANES");
    int n_nodes = whole->graph->n_nodes, tried = 0;
    for (int k = 1; k <= n_nodes; k++) {
        char text[16];
        snprintf(text, sizeof text, "%d", k);
        setenv("KC_HEAD", text, 1);
        kc_session *laned = NULL;
        assert_int_equal(kc_session_new(m, &o, &laned), KC_OK);
        assert_close_runs_io(laned, whole, ins, n_in, n_out); /* the plan's first run */
        assert_close_runs_io(laned, whole, ins, n_in, n_out);
        assert_int_equal(kc_session_lanes(laned), 2);
        assert_int_equal(laned->head_nodes, k);
        assert_split_layout(laned, &laned->head_plan, k, 0);
        assert_split_layout(laned, &laned->plan, k, 1);
        kc_session_free(laned);
        tried++;
    }
    unsetenv("KC_HEAD");
    assert_int_equal(tried, n_nodes);
    kc_session_free(whole);
    for (int i = 0; i < n_in; i++)
        kc_tensor_free(in[i]);
    kc_model_free(m);
}

static void test_batch_head_split_points(void **state)
{
    (void)state;
    static const char *const models[] = {
        "apps/mobilenet_v2", "apps/resnet50", "apps/inception_v3",
        "zoo/shared_layer",      /* two inputs, the second read late; a shared layer */
        "zoo/multi_output",      /* an output the tail reads on */
        "zoo/nested_functional", /* an output made inside a nested model */
    };
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char path[512];
        snprintf(path, sizeof path, KC_TEST_DATA "/../%s/model.keras", models[i]);
        sweep_head_split_points(path);
    }
}

/* By default the head is chosen where it pays: on the real nsfwjs
 * MobileNetV2 at 224x224, 4 images on 2 threads (lanes of 2), up to the
 * first layer whose weights outweigh one image's activations; the
 * arena shrinks (the lane arenas no longer hold the early layers' batch
 * activations), outputs equal the whole batch's, and a second plan (3
 * images: no lanes) and back keep both right. KC_HEAD=0 turns it off;
 * one image per lane takes none. */
static void test_batch_head_default(void **state)
{
    (void)state;
    const char *path = KC_NSFWJS_DIR "/mobilenet_v2/model.min.js";
    struct stat st;
    if (stat(path, &st) != 0)
        skip();
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(path, NULL, &m), KC_OK);
    int64_t dims[4] = {4, 224, 224, 3};
    kc_tensor *four = NULL, *three = NULL, *two = NULL;
    assert_int_equal(kc_tensor_new(KC_F32, 4, dims, &four), KC_OK);
    float *x = kc_tensor_data(four);
    for (int64_t i = 0; i < kc_tensor_count(four); i++)
        x[i] = (float)((i * 7919) % 1000) / 1000.0f;
    dims[0] = 3;
    assert_int_equal(kc_tensor_new(KC_F32, 4, dims, &three), KC_OK);
    memcpy(kc_tensor_data(three), x, (size_t)kc_tensor_count(three) * sizeof(float));
    dims[0] = 2;
    assert_int_equal(kc_tensor_new(KC_F32, 4, dims, &two), KC_OK);
    memcpy(kc_tensor_data(two), x, (size_t)kc_tensor_count(two) * sizeof(float));
    kc_session_options o = {.threads = 2};
    kc_session *laned = NULL, *whole = NULL, *off = NULL;
    assert_int_equal(kc_session_new(m, &o, &laned), KC_OK);
    setenv("KC_LANES", "0", 1);
    assert_int_equal(kc_session_new(m, &o, &whole), KC_OK);
    unsetenv("KC_LANES");
    setenv("KC_HEAD", "0", 1);
    assert_int_equal(kc_session_new(m, &o, &off), KC_OK);
    assert_close_runs(off, whole, four);
    unsetenv("KC_HEAD");
    assert_int_equal(off->head_nodes, 0);
    const kc_tensor *order[] = {four, four, three, four, two};
    const int lanes[] = {2, 2, 1, 2, 2};
    for (int r = 0; r < 5; r++) {
        assert_close_runs(laned, whole, order[r]);
        assert_int_equal(kc_session_lanes(laned), lanes[r]);
        if (r < 2 || r == 3) {
            assert_true(laned->head_nodes > 10);
            assert_true(laned->head_nodes < laned->graph->n_nodes);
            assert_true(kc_session_arena_bytes(laned) < kc_session_arena_bytes(off));
        } else
            assert_int_equal(laned->head_nodes, 0); /* no lanes; one image per lane */
    }
    kc_session_free(laned);
    kc_session_free(whole);
    kc_session_free(off);
    kc_tensor_free(four);
    kc_tensor_free(three);
    kc_tensor_free(two);
    kc_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_values_and_batches),
        cmocka_unit_test(test_denormals_flushed_as_tensorflow),
        cmocka_unit_test(test_input_dtypes_converted),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_long_chain),
        cmocka_unit_test(test_arena_on_huge_pages),
        cmocka_unit_test(test_fusion_matches_unfused),
        cmocka_unit_test(test_identity_layers_absorbed),
        cmocka_unit_test(test_residual_add_fusion),
        cmocka_unit_test(test_depthwise_fusion_per_plan),
        cmocka_unit_test(test_block_fusion_per_plan),
        cmocka_unit_test(test_block_chain_per_plan),
        cmocka_unit_test(test_pooling_fusion_per_plan),
        cmocka_unit_test(test_scheduled_sessions_get_portable_rewrites),
        cmocka_unit_test(test_run_into_checks),
        cmocka_unit_test(test_profile_per_layer),
        cmocka_unit_test(test_exact_convolutions),
        cmocka_unit_test(test_winograd_memory_bound),
        cmocka_unit_test(test_plan_spare_is_free),
        cmocka_unit_test(test_folded_kernels_released_after_packing),
        cmocka_unit_test(test_layer_scale_folded),
        cmocka_unit_test(test_maxpool_fused_in_stem),
        cmocka_unit_test(test_resnet_stem),
        cmocka_unit_test(test_head_fused),
        cmocka_unit_test(test_head_fused_released),
        cmocka_unit_test(test_rescaling_folded),
        cmocka_unit_test(test_inputs_read_in_place),
        cmocka_unit_test(test_bn_folded_forward),
        cmocka_unit_test(test_dense_residual_fused),
        cmocka_unit_test(test_upsample_conv_fused),
        cmocka_unit_test(test_conv_transpose),
        cmocka_unit_test(test_conv_transpose_folds),
        cmocka_unit_test(test_conv_transpose_shapes),
        cmocka_unit_test(test_batch_lanes),
        cmocka_unit_test(test_batch_lanes_refused),
        cmocka_unit_test(test_branch_lanes),
        cmocka_unit_test(test_branch_deal),
        cmocka_unit_test(test_branch_rebalance),
        cmocka_unit_test(test_branch_rebalance_session),
        cmocka_unit_test(test_plan_pack_greedy),
        cmocka_unit_test(test_arena_packed),
        cmocka_unit_test(test_batch_head_split_points),
        cmocka_unit_test(test_batch_head_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
