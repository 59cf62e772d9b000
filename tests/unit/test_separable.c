/* SeparableConv1D/2D on the convolution kernels (kernels/separable.c)
 * against the plain path (a depthwise loop and a GEMM, taken when the
 * node has no state slot): strides, dilation, a depth multiplier, both
 * paddings, a bias and an activation; its buffer in the plan's spare
 * range and in the state's own, with the same bits. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/threads.h"
#include "kernels/kernel.h"
#include "ops/conv.h"
#include "ops/op.h"

static uint32_t g_seed = 777u;

static float rnd(void)
{
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)(g_seed >> 8) / (float)(1u << 24) - 0.5f;
}

static float *rand_buf(int64_t n)
{
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++)
        p[i] = rnd();
    return p;
}

typedef struct sep_case {
    const char *what;
    int spatial;
    int64_t n, size, c, dm, f, k, stride, dilation;
    int same, use_bias;
    const char *act;
} sep_case;

static int64_t out_len(const sep_case *c)
{
    int64_t keff = (c->k - 1) * c->dilation + 1;
    return c->same ? (c->size + c->stride - 1) / c->stride : (c->size - keff) / c->stride + 1;
}

/* One run; state NULL takes the plain path. */
static void run(kc_layer *layer, const float *x, const kc_shape *is, float *out,
                const kc_shape *os, kc_kernel_state **state, void *spare, size_t spare_bytes)
{
    const float *ins[1] = {x};
    float *outs[1] = {out};
    kc_exec_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.layer = layer;
    ctx.in = ins;
    ctx.in_shape = is;
    ctx.n_in = 1;
    ctx.out = outs;
    ctx.out_shape = os;
    ctx.n_out = 1;
    ctx.keras_major = 3;
    ctx.state = state;
    ctx.spare = spare;
    ctx.spare_bytes = spare_bytes;
    kc_threads_enter(2);
    assert_int_equal(kc_kernel_lookup(layer->def)(&ctx), KC_OK);
    kc_threads_enter(0);
}

static void check_case(const sep_case *c)
{
    const char *cls = c->spatial == 1 ? "SeparableConv1D" : "SeparableConv2D";
    int64_t o = out_len(c), mid = c->c * c->dm;
    kc_conv_attrs a = {.kind = KC_CONV_SEPARABLE, .spatial = c->spatial, .filters = c->f,
                       .padding = c->same, .groups = 1, .depth_multiplier = c->dm,
                       .use_bias = c->use_bias, .activation = c->act};
    for (int i = 0; i < 3; i++) {
        a.kernel[i] = i < c->spatial ? c->k : 1;
        a.strides[i] = i < c->spatial ? c->stride : 1;
        a.dilation[i] = i < c->spatial ? c->dilation : 1;
        a.output_padding[i] = -1;
    }
    kc_shape is, os;
    if (c->spatial == 1) {
        is = (kc_shape){.rank = 3, .dims = {c->n, c->size, c->c}};
        os = (kc_shape){.rank = 3, .dims = {c->n, o, c->f}};
    } else {
        is = (kc_shape){.rank = 4, .dims = {c->n, c->size, c->size, c->c}};
        os = (kc_shape){.rank = 4, .dims = {c->n, o, o, c->f}};
    }
    int64_t taps = c->spatial == 1 ? c->k : c->k * c->k;
    kc_weight w[3];
    memset(w, 0, sizeof w);
    w[0].data = rand_buf(taps * mid);
    w[1].data = rand_buf(mid * c->f);
    w[2].data = rand_buf(c->f);
    if (c->spatial == 1) {
        w[0].shape = (kc_shape){.rank = 3, .dims = {c->k, c->c, c->dm}};
        w[1].shape = (kc_shape){.rank = 3, .dims = {1, mid, c->f}};
    } else {
        w[0].shape = (kc_shape){.rank = 4, .dims = {c->k, c->k, c->c, c->dm}};
        w[1].shape = (kc_shape){.rank = 4, .dims = {1, 1, mid, c->f}};
    }
    w[2].shape = (kc_shape){.rank = 1, .dims = {c->f}};
    kc_layer layer = {.name = "sep", .class_name = (char *)cls, .attrs = &a, .weights = w,
                      .n_weights = c->use_bias ? 3 : 2, .n_calls = 1};
    layer.def = kc_op_lookup(NULL, cls);
    assert_non_null(layer.def);
    int64_t xn = 1, on = 1;
    for (int i = 0; i < is.rank; i++)
        xn *= is.dims[i];
    for (int i = 0; i < os.rank; i++)
        on *= os.dims[i];
    float *x = rand_buf(xn);
    float *plain = malloc((size_t)on * sizeof *plain), *own = malloc((size_t)on * sizeof *own);
    float *spared = malloc((size_t)on * sizeof *spared);
    run(&layer, x, &is, plain, &os, NULL, NULL, 0);
    kc_kernel_state *state = NULL;
    run(&layer, x, &is, own, &os, &state, NULL, 0);
    if (!state)
        fail_msg("%s: the separable kernel did not take the layer", c->what);
    size_t spare_bytes = (size_t)(xn * c->dm + on + 4096) * sizeof(float) * 4;
    void *spare = malloc(spare_bytes);
    run(&layer, x, &is, spared, &os, &state, (char *)spare + 4, spare_bytes - 4);
    if (memcmp(own, spared, (size_t)on * sizeof *own))
        fail_msg("%s: the buffer in the spare range changed the result", c->what);
    for (int64_t i = 0; i < on; i++) {
        double tol = 1e-5 * (1.0 + fabs(plain[i]));
        if (fabs(own[i] - plain[i]) > tol)
            fail_msg("%s: element %lld is %.9g, the plain path gives %.9g", c->what,
                     (long long)i, (double)own[i], (double)plain[i]);
    }
    state->free(state);
    free(spare);
    for (int i = 0; i < 3; i++)
        free(w[i].data);
    free(x);
    free(plain);
    free(own);
    free(spared);
}

static void test_separable_on_conv_kernels(void **state)
{
    (void)state;
    static const sep_case cases[] = {
        {"3x3 same, bias, relu (Xception's middle flow)", 2, 1, 19, 64, 1, 64, 3, 1, 1, 1, 1,
         "relu"},
        {"3x3 same stride 2, no bias, linear", 2, 2, 17, 24, 1, 40, 3, 2, 1, 1, 0, "linear"},
        {"3x3 valid, depth multiplier 2", 2, 1, 12, 8, 2, 20, 3, 1, 1, 0, 1, "linear"},
        {"5x5 same, dilation 2, swish", 2, 1, 15, 16, 1, 24, 5, 1, 2, 1, 1, "swish"},
        {"1-D, kernel 5, same", 1, 2, 40, 12, 1, 18, 5, 1, 1, 1, 1, "relu"},
        {"1-D valid stride 2, multiplier 3", 1, 1, 33, 5, 3, 7, 3, 2, 1, 0, 1, "tanh"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_separable_on_conv_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
