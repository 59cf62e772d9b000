/* The element-wise layers cut over the threads (kc_parallel_for): merges
 * with every broadcast pattern, BatchNormalization on the last axis and
 * on another, activations, the ops nodes' binary ops, Rescaling,
 * LayerScale, Normalization and LayerNormalization. Each runs on two
 * threads on a tensor large enough to be cut (past 256 KiB) and on a
 * small one, and must give the bits of a plain per-element loop written
 * here from the layer's formula. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/threads.h"
#include "kernels/isa.h"
#include "kernels/kernel.h"
#include "ops/core.h"
#include "ops/elementwise.h"
#include "ops/merge.h"
#include "ops/norm.h"
#include "ops/op.h"
#include "ops/preprocess.h"
#include "ops/reshape.h"

static uint32_t g_seed = 12345u;

static float rnd(void)
{
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)(g_seed >> 8) / (float)(1u << 24) - 0.5f;
}

static float *rand_buf(int64_t n, float scale)
{
    float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    for (int64_t i = 0; i < n; i++)
        p[i] = rnd() * scale;
    return p;
}

static int64_t count(const kc_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dims[i];
    return n;
}

/* layer's kernel on ins into out, on two threads. */
static void run_layer(kc_layer *layer, const float *const *ins, const kc_shape *is, int n_in,
                      float *out, const kc_shape *os)
{
    float *outs[1] = {out};
    kc_kernel_state *state = NULL;
    kc_exec_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.layer = layer;
    ctx.in = ins;
    ctx.in_shape = is;
    ctx.n_in = n_in;
    ctx.out = outs;
    ctx.out_shape = os;
    ctx.n_out = 1;
    ctx.keras_major = 3;
    ctx.state = &state;
    kc_kernel_fn fn = kc_kernel_lookup(layer->def);
    assert_non_null(fn);
    kc_threads_enter(2);
    assert_int_equal(fn(&ctx), KC_OK);
    kc_threads_enter(0);
    if (state && state->free)
        state->free(state);
}

/* Offset of output element o in an input of shape s broadcast to os. */
static int64_t bcast_at(const kc_shape *s, const kc_shape *os, int64_t o)
{
    int64_t off = 0, stride = 1;
    for (int i = os->rank - 1; i >= 0; i--) {
        int64_t coord = o % os->dims[i];
        o /= os->dims[i];
        int si = i - (os->rank - s->rank);
        if (si < 0)
            continue;
        if (s->dims[si] != 1)
            off += coord * stride;
        stride *= s->dims[si];
    }
    return off;
}

static void expect_same(const float *got, const float *want, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof *got))
            fail_msg("%s: element %lld is %.9g, want %.9g", what, (long long)i, (double)got[i],
                     (double)want[i]);
}

/* ------------------------------------------------------------- merges */

typedef struct merge_case {
    const char *what, *cls;
    kc_merge_kind kind;
    int n_in;
    kc_shape in[3], out;
} merge_case;

static float merge_ref(kc_merge_kind kind, float acc, float v)
{
    switch (kind) {
    case KC_MERGE_ADD: case KC_MERGE_AVERAGE: return acc + v;
    case KC_MERGE_SUBTRACT: return acc - v;
    case KC_MERGE_MULTIPLY: return acc * v;
    case KC_MERGE_MAXIMUM: return v > acc ? v : acc;
    case KC_MERGE_MINIMUM: return v < acc ? v : acc;
    default: return acc;
    }
}

static void check_merge(const merge_case *c)
{
    float *ins[3] = {NULL};
    for (int i = 0; i < c->n_in; i++)
        ins[i] = rand_buf(count(&c->in[i]), 4.0f);
    int64_t n = count(&c->out);
    float *got = malloc((size_t)n * sizeof *got), *want = malloc((size_t)n * sizeof *want);
    for (int64_t o = 0; o < n; o++) {
        float acc = ins[0][bcast_at(&c->in[0], &c->out, o)];
        for (int i = 1; i < c->n_in; i++)
            acc = merge_ref(c->kind, acc, ins[i][bcast_at(&c->in[i], &c->out, o)]);
        if (c->kind == KC_MERGE_AVERAGE)
            acc /= (float)c->n_in;
        want[o] = acc;
    }
    kc_merge_attrs a = {.kind = c->kind};
    kc_layer layer = {.name = "merge", .class_name = (char *)c->cls, .attrs = &a};
    layer.def = kc_op_lookup(NULL, c->cls);
    run_layer(&layer, (const float *const *)ins, c->in, c->n_in, got, &c->out);
    expect_same(got, want, n, c->what);
    for (int i = 0; i < c->n_in; i++)
        free(ins[i]);
    free(got);
    free(want);
}

#define S4(a, b, c, d) {.rank = 4, .dims = {a, b, c, d}}
#define S1(a) {.rank = 1, .dims = {a}}

static void test_merge_broadcasts(void **state)
{
    (void)state;
    static const merge_case cases[] = {
        {"Add, one shape, cut", "Add", KC_MERGE_ADD, 2,
         {S4(2, 40, 40, 64), S4(2, 40, 40, 64)}, S4(2, 40, 40, 64)},
        {"Multiply by per-image channels (squeeze-excite), cut", "Multiply", KC_MERGE_MULTIPLY, 2,
         {S4(2, 40, 40, 72), S4(2, 1, 1, 72)}, S4(2, 40, 40, 72)},
        {"Subtract one value per pixel, cut", "Subtract", KC_MERGE_SUBTRACT, 2,
         {S4(2, 40, 40, 48), S4(2, 40, 40, 1)}, S4(2, 40, 40, 48)},
        {"Subtract from one value per pixel, cut", "Subtract", KC_MERGE_SUBTRACT, 2,
         {S4(2, 40, 40, 1), S4(2, 40, 40, 48)}, S4(2, 40, 40, 48)},
        {"Add a lower-rank input, cut", "Add", KC_MERGE_ADD, 2,
         {S4(1, 60, 60, 40), S1(40)}, S4(1, 60, 60, 40)},
        {"Average of three broadcasts, cut", "Average", KC_MERGE_AVERAGE, 3,
         {S4(1, 50, 50, 40), S4(1, 50, 1, 40), S4(1, 1, 50, 40)}, S4(1, 50, 50, 40)},
        {"Maximum across rows, cut", "Maximum", KC_MERGE_MAXIMUM, 3,
         {S4(1, 50, 50, 40), S4(1, 1, 50, 1), S4(1, 50, 50, 40)}, S4(1, 50, 50, 40)},
        {"Minimum, small", "Minimum", KC_MERGE_MINIMUM, 2,
         {S4(1, 3, 5, 7), S4(1, 3, 1, 7)}, S4(1, 3, 5, 7)},
        {"Multiply, odd sizes, small", "Multiply", KC_MERGE_MULTIPLY, 2,
         {S4(3, 1, 5, 1), S4(3, 7, 1, 3)}, S4(3, 7, 5, 3)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_merge(&cases[i]);
}

/* ----------------------------------------------- BatchNormalization */

static void check_batchnorm(const kc_shape *s, int axis, const char *what)
{
    int64_t n = count(s), c = s->dims[axis], inner = 1;
    for (int i = axis + 1; i < s->rank; i++)
        inner *= s->dims[i];
    float *x = rand_buf(n, 6.0f), *gamma = rand_buf(c, 2.0f), *beta = rand_buf(c, 2.0f);
    float *mean = rand_buf(c, 1.0f), *var = rand_buf(c, 1.0f);
    for (int64_t i = 0; i < c; i++)
        var[i] = fabsf(var[i]) + 0.01f;
    kc_norm_attrs a = {.axes = {axis}, .n_axes = 1, .epsilon = 1e-3, .center = 1, .scale = 1};
    kc_weight w[4] = {{.data = gamma}, {.data = beta}, {.data = mean}, {.data = var}};
    kc_layer layer = {.name = "bn", .class_name = "BatchNormalization", .attrs = &a,
                      .weights = w, .n_weights = 4};
    layer.def = kc_op_lookup(NULL, "BatchNormalization");
    float *got = malloc((size_t)n * sizeof *got), *want = malloc((size_t)n * sizeof *want);
    for (int64_t i = 0; i < n; i++) {
        int64_t ch = i / inner % c;
        double scale = gamma[ch] / sqrt((double)var[ch] + a.epsilon);
        double shift = beta[ch] - mean[ch] * scale;
        want[i] = (float)(x[i] * scale + shift);
    }
    const float *ins[1] = {x};
    run_layer(&layer, ins, s, 1, got, s);
    expect_same(got, want, n, what);
    free(x);
    free(gamma);
    free(beta);
    free(mean);
    free(var);
    free(got);
    free(want);
}

static void test_batchnorm_cut(void **state)
{
    (void)state;
    kc_shape wide = S4(1, 20, 20, 600); /* two blocks of channels, cut by pixels */
    kc_shape last = S4(2, 30, 30, 64);
    kc_shape first = S4(2, 24, 30, 30); /* axis 1: cut by planes */
    kc_shape small = S4(1, 3, 3, 5);
    check_batchnorm(&wide, 3, "BatchNormalization, 600 channels last");
    check_batchnorm(&last, 3, "BatchNormalization, 64 channels last");
    check_batchnorm(&first, 1, "BatchNormalization on axis 1");
    check_batchnorm(&small, 3, "BatchNormalization, small");
}

/* -------------------------------------------------------- activations */

static const char *const g_isas[] = {"avx512", "avx2", "none"};

/* Whether this CPU has instruction set isa (g_isas' names). */
static int have_isa(const char *isa)
{
    setenv("KC_ISA", isa, 1);
    int have = !strcmp(kc_isa_name(kc_isa()), isa);
    unsetenv("KC_ISA");
    return have;
}

/* kc_isa_vendor names the maker /proc/cpuinfo's vendor_id names (pw.c's
 * fetch of the next panel is on by default on Intel's CPUs only). */
static void test_cpu_vendor(void **state)
{
    (void)state;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        skip();
    char line[256], vendor[64] = "";
    while (fgets(line, sizeof line, f) && !vendor[0])
        if (!strncmp(line, "vendor_id", 9))
            sscanf(strchr(line, ':') + 1, "%63s", vendor);
    fclose(f);
    kc_cpu_vendor want = !strcmp(vendor, "GenuineIntel")   ? KC_CPU_INTEL
                         : !strcmp(vendor, "AuthenticAMD") ? KC_CPU_AMD
                                                           : KC_CPU_OTHER;
    assert_int_equal(kc_isa_vendor(), want);
}

/* `name` over x[0, n) in place on instruction set isa (act_simd.inc's
 * vector loops, or with "none" fastmath.h's scalar functions), outside
 * any parallel region. */
static void act_on(const char *isa, const char *name, float *x, int64_t n)
{
    setenv("KC_ISA", isa, 1);
    assert_int_equal(kc_activation_apply(name, 3, x, n, n), KC_OK);
    unsetenv("KC_ISA");
}

/* Each activation over two threads (the layer) and in place (as a fused
 * activation runs), on instruction set isa: the bits of one uncut pass on
 * that set. The AVX-512 and AVX2 loops give the same bits (act_simd.inc:
 * the same operations, masked tails): the first vector set's passes are
 * kept in vector_bits, and a later one's must match them. The scalar
 * loop differs from them by rounding only (the accuracy tests below). */
static void check_activation_cut(const char *isa, float *vector_bits[2][4])
{
    static const char *const names[] = {"relu", "gelu", "swish", "tanh"};
    kc_shape shapes[2] = {S4(1, 70, 70, 32), S4(1, 1, 3, 7)};
    int vector = strcmp(isa, "none") != 0;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++) {
            int64_t n = count(&shapes[k]);
            g_seed = 777u + (uint32_t)k;
            float *x = rand_buf(n, 10.0f);
            float *got = malloc((size_t)n * sizeof *got), *want = malloc((size_t)n * sizeof *want);
            memcpy(want, x, (size_t)n * sizeof *want);
            act_on(isa, names[i], want, n);
            if (vector && vector_bits[k][i])
                expect_same(want, vector_bits[k][i], n, "AVX2 against AVX-512");
            kc_activation_attrs a = {.activation = names[i]};
            kc_layer layer = {.name = "act", .class_name = "Activation", .attrs = &a};
            layer.def = kc_op_lookup(NULL, "Activation");
            const float *ins[1] = {x};
            setenv("KC_ISA", isa, 1);
            run_layer(&layer, ins, &shapes[k], 1, got, &shapes[k]);
            expect_same(got, want, n, names[i]);
            kc_threads_enter(2);
            assert_int_equal(kc_activation_apply(names[i], 3, x, n, shapes[k].dims[3]), KC_OK);
            kc_threads_enter(0);
            unsetenv("KC_ISA");
            expect_same(x, want, n, "in place");
            if (vector && !vector_bits[k][i])
                vector_bits[k][i] = want;
            else
                free(want);
            free(x);
            free(got);
        }
}

static void test_activation_cut(void **state)
{
    (void)state;
    float *vector_bits[2][4] = {{NULL}};
    for (int i = 0; i < 3; i++)
        if (have_isa(g_isas[i]))
            check_activation_cut(g_isas[i], vector_bits);
    for (int k = 0; k < 2; k++)
        for (int a = 0; a < 4; a++)
            free(vector_bits[k][a]);
}

/* The sweep x = i * step for |i| <= half through `name` on isa. */
static float *act_sweep(const char *isa, const char *name, int64_t half, float step)
{
    int64_t n = 2 * half + 1;
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(i - half) * step;
    act_on(isa, name, x, n);
    return x;
}

static double ref_tanh(double x) { return tanh(x); }
static double ref_gelu(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }
static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_swish(double x) { return x * ref_sigmoid(x); }

/* `name` on isa against ref in double over act_sweep's values: fails
 * when an error passes bound · max(1, |ref|). */
static void expect_sweep(const char *isa, const char *name, double (*ref)(double), int64_t half,
                         float step, double bound)
{
    float *y = act_sweep(isa, name, half, step);
    for (int64_t i = 0; i <= 2 * half; i++) {
        double x = (double)((float)(i - half) * step), want = ref(x);
        double err = fabs((double)y[i] - want) / fmax(1.0, fabs(want));
        if (err > bound)
            fail_msg("%s (%s) off by %.3g at %.6f", name, isa, err, x);
    }
    free(y);
}

/* The special values through `name` on isa, in place. */
#define KC_SPECIALS 5
static void act_specials(const char *isa, const char *name, float out[KC_SPECIALS])
{
    const float in[KC_SPECIALS] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN};
    memcpy(out, in, sizeof in);
    act_on(isa, name, out, KC_SPECIALS);
}

/* tanh against double on every instruction set (fastmath.h's scalar
 * function, act_simd.inc's vectors), every 1e-4 over [-12, 12]: within
 * 3e-7; every 1e-6 below 1/16 (the polynomial's range): within 3e-7 of
 * tanh itself. +-1 at the infinities, -0 for -0, NaN for NaN. */
static void test_tanh_accuracy(void **state)
{
    (void)state;
    for (int s = 0; s < 3; s++) {
        if (!have_isa(g_isas[s]))
            continue;
        expect_sweep(g_isas[s], "tanh", ref_tanh, 120000, 1e-4f, 3e-7);
        float *y = act_sweep(g_isas[s], "tanh", 62500, 1e-6f);
        for (int64_t i = 62501; i < 125000; i++) { /* the polynomial's range: relative */
            float x = (float)(i - 62500) * 1e-6f;
            double rel = fabs((double)y[i] - tanh((double)x)) / tanh((double)x);
            if (rel > 3e-7)
                fail_msg("tanh (%s) off by %.3g relative at %.7f", g_isas[s], rel, x);
        }
        free(y);
        float sp[KC_SPECIALS];
        act_specials(g_isas[s], "tanh", sp);
        assert_true(sp[1] == 0.0f && signbit(sp[1]) && sp[0] == 0.0f && !signbit(sp[0]));
        assert_true(sp[2] == 1.0f && sp[3] == -1.0f && isnan(sp[4]));
    }
}

/* GELU's erf against erf in double on every instruction set, every 1e-4
 * over [-12, 12]: within 1e-6 of max(1, |GELU|) (the fidelity bound is
 * 1e-4), and signed zeros, infinities and NaN as the erff form gives them. */
static void test_gelu_accuracy(void **state)
{
    (void)state;
    for (int s = 0; s < 3; s++) {
        if (!have_isa(g_isas[s]))
            continue;
        expect_sweep(g_isas[s], "gelu", ref_gelu, 120000, 1e-4f, 1e-6);
        float sp[KC_SPECIALS];
        act_specials(g_isas[s], "gelu", sp);
        assert_true(sp[0] == 0.0f && !signbit(sp[0]) && sp[1] == 0.0f && signbit(sp[1]));
        assert_true(isinf(sp[2]) && sp[2] > 0 && isnan(sp[4]));
        float far = -30.0f;
        act_on(g_isas[s], "gelu", &far, 1);
        assert_true(far == 0.0f);
    }
}

/* The sigmoid behind sigmoid and swish against double on every
 * instruction set, every 1e-3 over [-120, 120]: within 1e-6 of max(1,
 * |ref|); 0 and 1 at the infinities, so swish(-inf) is NaN as x *
 * sigmoid(x) is in Keras. */
static void test_sigmoid_accuracy(void **state)
{
    (void)state;
    for (int s = 0; s < 3; s++) {
        if (!have_isa(g_isas[s]))
            continue;
        expect_sweep(g_isas[s], "sigmoid", ref_sigmoid, 120000, 1e-3f, 1e-6);
        expect_sweep(g_isas[s], "swish", ref_swish, 120000, 1e-3f, 1e-6);
        float sp[KC_SPECIALS];
        act_specials(g_isas[s], "sigmoid", sp);
        assert_true(sp[0] == 0.5f && sp[2] == 1.0f && sp[3] == 0.0f && isnan(sp[4]));
        act_specials(g_isas[s], "swish", sp);
        assert_true(isnan(sp[3]) && sp[2] == INFINITY);
    }
}

/* ------------------------------------------------- ops nodes' binaries */

static void check_top_binary(kc_ew_op op, const kc_shape *xs, const kc_shape *ys,
                             const kc_shape *os, const char *what)
{
    int64_t n = count(os);
    float *x = rand_buf(count(xs), 4.0f), *y = rand_buf(count(ys), 4.0f);
    for (int64_t i = 0; i < count(ys); i++)
        y[i] += y[i] >= 0 ? 0.5f : -0.5f; /* no division by ~0 */
    float *got = malloc((size_t)n * sizeof *got), *want = malloc((size_t)n * sizeof *want);
    for (int64_t o = 0; o < n; o++) {
        float a = x[bcast_at(xs, os, o)], b = y[bcast_at(ys, os, o)];
        want[o] = op == KC_EW_ADD ? a + b : op == KC_EW_SUB ? a - b
                : op == KC_EW_MUL ? a * b : op == KC_EW_DIV ? a / b : (a > b ? a : b);
    }
    kc_top_attrs a = {.kind = KC_TOP_BINARY, .ew = op, .op_name = "op", .n_operands = 2};
    a.operand[0] = (kc_operand){.kind = KC_OPND_INPUT, .index = 0, .shape = *xs};
    a.operand[1] = (kc_operand){.kind = KC_OPND_INPUT, .index = 1, .shape = *ys};
    kc_layer layer = {.name = "op", .class_name = "Add", .attrs = &a};
    layer.def = kc_op_lookup("keras.src.ops.numpy", "Add");
    const float *ins[2] = {x, y};
    kc_shape is[2] = {*xs, *ys};
    run_layer(&layer, ins, is, 2, got, os);
    expect_same(got, want, n, what);
    free(x);
    free(y);
    free(got);
    free(want);
}

static void test_top_binary_cut(void **state)
{
    (void)state;
    kc_shape big = S4(1, 56, 56, 96), chans = S1(96), pix = S4(1, 56, 56, 1);
    kc_shape small = S4(2, 3, 1, 5), col = S4(2, 1, 4, 1), small_out = S4(2, 3, 4, 5);
    check_top_binary(KC_EW_ADD, &big, &big, &big, "ops.Add, one shape");
    check_top_binary(KC_EW_MUL, &big, &chans, &big, "ops.Multiply by channels");
    check_top_binary(KC_EW_DIV, &pix, &big, &big, "ops.Divide one value per pixel");
    check_top_binary(KC_EW_SUB, &small, &col, &small_out, "ops.Subtract, both broadcast");
    check_top_binary(KC_EW_MAX, &col, &small, &small_out, "ops.Maximum, both broadcast");
}

/* -------------------------- Rescaling, LayerScale, Normalization, LN */

/* The sum of a row's values (sq 0) or of their squares about mean (sq
 * 1) in double, in 8 chains (value i in chain i mod 8) added pairwise:
 * norm.c's order. */
static double ln_ref_sum(const float *x, int64_t n, double mean, int sq)
{
    double acc[8] = {0};
    for (int64_t i = 0; i < n; i++) {
        double d = sq ? x[i] - mean : x[i];
        acc[i % 8] += sq ? d * d : d;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* LayerNormalization over the channels on instruction set isa (its
 * ln_simd.inc row, or the plain one): the bits of the formula in norm.c's
 * order (statistics in double, the output in float), and within 1e-5 of
 * max(1, |ref|) of it all in double. */
static void check_layernorm(const char *isa, const float *x, const float *gamma,
                            const float *beta, const kc_shape *s, float *got, float *want)
{
    int64_t n = count(s), c = s->dims[3];
    kc_norm_attrs la = {.axes = {-1}, .n_axes = 1, .epsilon = 1e-6, .center = 1, .scale = 1};
    kc_weight lw[2] = {{.data = (float *)gamma}, {.data = (float *)beta}};
    kc_layer ll = {.name = "ln", .class_name = "LayerNormalization", .attrs = &la, .weights = lw,
                   .n_weights = 2};
    ll.def = kc_op_lookup(NULL, "LayerNormalization");
    for (int64_t r = 0; r < n / c; r++) {
        const float *xr = x + r * c;
        double mean = ln_ref_sum(xr, c, 0.0, 0) / (double)c;
        double var = ln_ref_sum(xr, c, mean, 1) / (double)c;
        float mf = (float)mean, inv = (float)(1.0 / sqrt(var + la.epsilon));
        for (int64_t i = 0; i < c; i++) {
            want[r * c + i] = (xr[i] - mf) * inv * gamma[i] + beta[i];
            double exact = (xr[i] - mean) / sqrt(var + la.epsilon) * gamma[i] + beta[i];
            if (fabs(want[r * c + i] - exact) > 1e-5 * fmax(1.0, fabs(exact)))
                fail_msg("LayerNormalization: %.9g, in double %.9g", (double)want[r * c + i],
                         exact);
        }
    }
    const float *ins[1] = {x};
    setenv("KC_ISA", isa, 1);
    run_layer(&ll, ins, s, 1, got, s);
    unsetenv("KC_ISA");
    expect_same(got, want, n, isa);
}

/* Rows of up to 32 values (an RGB image's 3) run as one flat loop over
 * tiled parameters, longer ones row by row: both, cut and not, a row
 * count that is no multiple of the tiles' 16 rows, Normalization both
 * ways. */
static void check_channel_affine(kc_shape s)
{
    int64_t n = count(&s), c = s.dims[3];
    float *x = rand_buf(n, 8.0f), *p = rand_buf(c, 2.0f), *q = rand_buf(c, 2.0f);
    float *got = calloc((size_t)n, sizeof *got), *want = calloc((size_t)n, sizeof *want);
    const float *ins[1] = {x};

    kc_rescaling_attrs ra = {.n_scale = c, .n_offset = 1, .scale = p, .offset = q};
    kc_layer rl = {.name = "rescale", .class_name = "Rescaling", .attrs = &ra};
    rl.def = kc_op_lookup(NULL, "Rescaling");
    for (int64_t i = 0; i < n; i++)
        want[i] = x[i] * p[i % c] + q[0];
    run_layer(&rl, ins, &s, 1, got, &s);
    expect_same(got, want, n, "Rescaling");

    kc_weight gw[1] = {{.data = p}};
    kc_layer sl = {.name = "scale", .class_name = "LayerScale", .weights = gw, .n_weights = 1};
    sl.def = kc_op_lookup(NULL, "LayerScale");
    for (int64_t i = 0; i < n; i++)
        want[i] = x[i] * p[i % c];
    run_layer(&sl, ins, &s, 1, got, &s);
    expect_same(got, want, n, "LayerScale");

    for (int64_t i = 0; i < c; i++)
        q[i] = fabsf(q[i]) + 0.05f;
    kc_normalization_attrs na = {.n_keep = 1, .keep = {3}};
    kc_weight nw[2] = {{.data = p}, {.data = q}};
    kc_layer nl = {.name = "norm", .class_name = "Normalization", .attrs = &na, .weights = nw,
                   .n_weights = 2};
    nl.def = kc_op_lookup(NULL, "Normalization");
    for (int64_t i = 0; i < n; i++)
        want[i] = (x[i] - p[i % c]) / fmaxf(sqrtf(q[i % c]), 1e-7f);
    run_layer(&nl, ins, &s, 1, got, &s);
    expect_same(got, want, n, "Normalization per channel");
    na.invert = 1;
    for (int64_t i = 0; i < n; i++)
        want[i] = x[i] * fmaxf(sqrtf(q[i % c]), 1e-7f) + p[i % c];
    run_layer(&nl, ins, &s, 1, got, &s);
    expect_same(got, want, n, "Normalization(invert=True) per channel");

    for (int i = 0; i < 3; i++)
        if (have_isa(g_isas[i]))
            check_layernorm(g_isas[i], x, p, q, &s, got, want);
    free(x);
    free(p);
    free(q);
    free(got);
    free(want);
}

static void test_channel_affine_cut(void **state)
{
    (void)state;
    check_channel_affine((kc_shape)S4(1, 64, 64, 24));
    check_channel_affine((kc_shape)S4(1, 224, 224, 3));
    check_channel_affine((kc_shape)S4(2, 5, 7, 3));
    check_channel_affine((kc_shape)S4(1, 64, 33, 40));
    check_channel_affine((kc_shape)S4(1, 1, 3, 32));
}

/* ------------------------------------------------------- UpSampling */

/* Output element o of nearest upsampling (spatial axes 1..sp of shape
 * os, channels last): the input element at each coordinate / size. */
static int64_t upsample_src(const kc_shape *is, const kc_shape *os, const int64_t *size, int sp,
                            int64_t o)
{
    int64_t coord[KC_MAX_RANK];
    for (int d = os->rank - 1; d >= 0; d--) {
        coord[d] = o % os->dims[d];
        o /= os->dims[d];
    }
    for (int d = 1; d <= sp; d++)
        coord[d] /= size[d - 1];
    int64_t at = 0;
    for (int d = 0; d < is->rank; d++)
        at = at * is->dims[d] + coord[d];
    return at;
}

/* UpSampling1D/2D/3D nearest and 2D bilinear by output rows over two
 * threads (large enough to be cut, and small), against per-element
 * loops: nearest copies its input value, bilinear blends the four as
 * Keras's resize does (the kernel's arithmetic, written out here). */
static void test_upsampling_cut(void **state)
{
    (void)state;
    static const struct {
        int sp;
        int64_t size[3];
        kc_shape is;
    } cases[] = {
        {2, {2, 2, 1}, {.rank = 4, .dims = {1, 135, 135, 64}}},
        {2, {2, 3, 1}, {.rank = 4, .dims = {2, 33, 17, 5}}},
        {2, {3, 1, 1}, {.rank = 4, .dims = {1, 4, 3, 1}}},
        {1, {3, 1, 1}, {.rank = 3, .dims = {2, 4000, 24}}},
        {3, {2, 1, 2}, {.rank = 5, .dims = {1, 6, 20, 30, 16}}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        kc_shape is = cases[k].is, os = is;
        for (int d = 1; d <= cases[k].sp; d++)
            os.dims[d] *= cases[k].size[d - 1];
        int64_t n_in = count(&is), n = count(&os);
        float *x = rand_buf(n_in, 4.0f), *got = calloc((size_t)n, sizeof *got);
        float *want = calloc((size_t)n, sizeof *want);
        const float *ins[1] = {x};
        kc_upsample_attrs a = {.spatial = cases[k].sp, .interpolation = "nearest"};
        memcpy(a.size, cases[k].size, sizeof a.size);
        static const char *const cls[] = {"", "UpSampling1D", "UpSampling2D", "UpSampling3D"};
        kc_layer layer = {.name = "up", .class_name = (char *)cls[a.spatial], .attrs = &a};
        layer.def = kc_op_lookup(NULL, cls[a.spatial]);
        for (int64_t o = 0; o < n; o++)
            want[o] = x[upsample_src(&is, &os, a.size, a.spatial, o)];
        run_layer(&layer, ins, &is, 1, got, &os);
        expect_same(got, want, n, cls[a.spatial]);
        if (a.spatial == 2) {
            a.interpolation = "bilinear";
            int64_t ih = is.dims[1], iw = is.dims[2], oh = os.dims[1], ow = os.dims[2];
            int64_t c = is.dims[3];
            for (int64_t o = 0; o < n; o++) {
                int64_t ch = o % c, px = o / c, xo = px % ow, yo = px / ow % oh, b = px / ow / oh;
                float fy = ((float)yo + 0.5f) * (float)ih / (float)oh - 0.5f;
                float fx = ((float)xo + 0.5f) * (float)iw / (float)ow - 0.5f;
                fy = fy < 0 ? 0 : fy;
                fx = fx < 0 ? 0 : fx;
                int64_t y0 = (int64_t)floorf(fy), x0 = (int64_t)floorf(fx);
                y0 = y0 > ih - 1 ? ih - 1 : y0;
                x0 = x0 > iw - 1 ? iw - 1 : x0;
                int64_t y1 = y0 + 1 < ih ? y0 + 1 : ih - 1, x1 = x0 + 1 < iw ? x0 + 1 : iw - 1;
                float ty = fy - (float)y0, tx = fx - (float)x0;
                const float *base = x + b * ih * iw * c + ch;
                float p00 = base[(y0 * iw + x0) * c], p01 = base[(y0 * iw + x1) * c];
                float p10 = base[(y1 * iw + x0) * c], p11 = base[(y1 * iw + x1) * c];
                float top = p00 + (p01 - p00) * tx, bot = p10 + (p11 - p10) * tx;
                want[o] = top + (bot - top) * ty;
            }
            run_layer(&layer, ins, &is, 1, got, &os);
            expect_same(got, want, n, "UpSampling2D bilinear");
        }
        free(x);
        free(got);
        free(want);
    }
}

/* ---------------------------------------------------------- Resizing */

/* Output value o of resizing the (y0, x0, hh x ww) window of the images
 * of `is` to `os`, as TensorFlow's half-pixel bilinear / nearest do (the
 * kernel's arithmetic, written out per value). */
static float resize_ref(const float *x, const kc_shape *is, const kc_shape *os, int64_t y0,
                        int64_t x0, int64_t hh, int64_t ww, int nearest, int64_t o)
{
    int64_t c = is->dims[3], ih = is->dims[1], iw = is->dims[2], oh = os->dims[1],
            ow = os->dims[2];
    int64_t k = o % c, xo = o / c % ow, yo = o / c / ow % oh, b = o / c / ow / oh;
    const float *in = x + b * ih * iw * c + k;
    if (nearest) {
        int64_t ny = (int64_t)floorf(((float)yo + 0.5f) * (float)hh / (float)oh);
        int64_t nx = (int64_t)floorf(((float)xo + 0.5f) * (float)ww / (float)ow);
        ny = ny < hh ? ny : hh - 1;
        nx = nx < ww ? nx : ww - 1;
        return in[((y0 + ny) * iw + x0 + nx) * c];
    }
    float sy = ((float)yo + 0.5f) * (float)hh / (float)oh - 0.5f;
    float sx = ((float)xo + 0.5f) * (float)ww / (float)ow - 0.5f;
    sy = sy < 0 ? 0 : sy;
    sx = sx < 0 ? 0 : sx;
    int64_t ya = (int64_t)sy, xa = (int64_t)sx;
    ya = ya < hh - 1 ? ya : hh - 1;
    xa = xa < ww - 1 ? xa : ww - 1;
    int64_t yb = ya + 1 < hh ? ya + 1 : hh - 1, xb = xa + 1 < ww ? xa + 1 : ww - 1;
    float ty = sy - (float)ya, tx = sx - (float)xa;
    float p00 = in[((y0 + ya) * iw + x0 + xa) * c], p01 = in[((y0 + ya) * iw + x0 + xb) * c];
    float p10 = in[((y0 + yb) * iw + x0 + xa) * c], p11 = in[((y0 + yb) * iw + x0 + xb) * c];
    float top = p00 + (p01 - p00) * tx, bot = p10 + (p11 - p10) * tx;
    return top + (bot - top) * ty;
}

/* Resizing by output rows over two threads: bilinear and nearest, up and
 * down, with crop_to_aspect_ratio, against the per-value formula; an
 * image already of the target size is returned as it is (infinities
 * too, as TensorFlow's resize does; the formula would make NaN). */
static void test_resizing_cut(void **state)
{
    (void)state;
    static const struct {
        kc_shape is;
        int64_t oh, ow;
        int nearest, crop;
    } cases[] = {
        {{.rank = 4, .dims = {2, 300, 200, 3}}, 224, 224, 0, 0},
        {{.rank = 4, .dims = {2, 300, 200, 3}}, 224, 224, 1, 0},
        {{.rank = 4, .dims = {1, 300, 200, 3}}, 160, 240, 0, 1},
        {{.rank = 4, .dims = {3, 17, 9, 5}}, 40, 30, 0, 0},
        {{.rank = 4, .dims = {3, 17, 9, 5}}, 40, 30, 1, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        kc_shape is = cases[k].is, os = is;
        os.dims[1] = cases[k].oh;
        os.dims[2] = cases[k].ow;
        int64_t n = count(&os), ih = is.dims[1], iw = is.dims[2], hh = ih, ww = iw, y0 = 0, x0 = 0;
        if (cases[k].crop) {
            double target = (double)cases[k].ow / (double)cases[k].oh;
            if ((double)iw / (double)ih > target)
                ww = (int64_t)((double)ih * target);
            else
                hh = (int64_t)((double)iw / target);
            y0 = (ih - hh) / 2;
            x0 = (iw - ww) / 2;
        }
        float *x = rand_buf(count(&is), 4.0f), *got = calloc((size_t)n, sizeof *got);
        float *want = calloc((size_t)n, sizeof *want);
        for (int64_t o = 0; o < n; o++)
            want[o] = resize_ref(x, &is, &os, y0, x0, hh, ww, cases[k].nearest, o);
        kc_resizing_attrs a = {.height = cases[k].oh, .width = cases[k].ow,
                               .interpolation = cases[k].nearest ? KC_INTERP_NEAREST
                                                                 : KC_INTERP_BILINEAR,
                               .crop_to_aspect_ratio = cases[k].crop};
        kc_layer layer = {.name = "resize", .class_name = "Resizing", .attrs = &a};
        layer.def = kc_op_lookup(NULL, "Resizing");
        const float *ins[1] = {x};
        run_layer(&layer, ins, &is, 1, got, &os);
        expect_same(got, want, n, "Resizing");
        free(x);
        free(got);
        free(want);
    }
    kc_shape same = {.rank = 4, .dims = {2, 64, 48, 3}};
    int64_t n = count(&same);
    float *x = rand_buf(n, 4.0f), *got = calloc((size_t)n, sizeof *got);
    x[7] = INFINITY;
    x[100] = -INFINITY;
    kc_resizing_attrs a = {.height = 64, .width = 48, .interpolation = KC_INTERP_BILINEAR};
    kc_layer layer = {.name = "resize", .class_name = "Resizing", .attrs = &a};
    layer.def = kc_op_lookup(NULL, "Resizing");
    const float *ins[1] = {x};
    run_layer(&layer, ins, &same, 1, got, &same);
    expect_same(got, x, n, "Resizing to the size it has");
    free(x);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_broadcasts),
        cmocka_unit_test(test_batchnorm_cut),
        cmocka_unit_test(test_activation_cut),
        cmocka_unit_test(test_gelu_accuracy),
        cmocka_unit_test(test_sigmoid_accuracy),
        cmocka_unit_test(test_tanh_accuracy),
        cmocka_unit_test(test_cpu_vendor),
        cmocka_unit_test(test_top_binary_cut),
        cmocka_unit_test(test_channel_affine_cut),
        cmocka_unit_test(test_upsampling_cut),
        cmocka_unit_test(test_resizing_cut),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
