/* Layers cut into parts, one per thread (kernels/dnnl_common.h): every
 * cut convolution must equal the plain im2col + GEMM path (KC_DNNL=0)
 * over the geometries where a cut's edges are easy to get wrong: "same"
 * padding split between parts, strides that leave input rows unread,
 * dilation, causal 1-D padding, a folded ZeroPadding, more threads than
 * rows, batches that do not divide, Winograd, a fused residual sum; and
 * poolings cut the same way. Also here, on the same harness: a 1x1
 * convolution with a 3x3 depthwise one fused after it (post_dw) must
 * equal the two layers run one after the other on the plain paths; and
 * ZeroPadding / Cropping, written a run of output rows per thread, and
 * global pooling, split by image and channel block, must equal plain
 * references. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/balance.h"
#include "base/clock.h"
#include "base/help.h"
#include "base/mem.h"
#include "base/threads.h"
#include "kernels/dense.h"
#include "kernels/dnnl_common.h"
#include "kernels/dnnl_conv.h"
#include "kernels/dnnl_matmul.h"
#include "kernels/dnnl_order.h"
#include "kernels/dnnl_pool.h"
#include "kernels/dw.h"
#include "kernels/irb.h"
#include "kernels/isa.h"
#include "kernels/kernel.h"
#include "kernels/maxpool_nhwc.h"
#include "kernels/pw.h"
#include "kernels/residual.h"
#include "kernels/narrow.h"
#include "kernels/stem.h"
#include "kernels/touch.h"
#include "kernels/wino.h"
#include "kernels/wino_tx.h"
#include "ops/conv.h"
#include "ops/core.h"
#include "ops/merge.h"
#include "ops/op.h"
#include "ops/pool.h"
#include "ops/reshape.h"

typedef struct conv_case {
    const char *what;
    const char *cls;
    kc_conv_kind kind;
    int spatial;
    int64_t n, h, w, c, f; /* f: filters, or the depth multiplier */
    int64_t k, s, d;
    int padding;           /* 0 valid, 1 same, 2 causal */
    int64_t zero_pad;      /* a folded ZeroPadding on every spatial side */
    int accumulate;
    const char *act;
    int whole;             /* weights outweigh the data: never cut */
    int64_t kw;            /* 2-D: the kernel's width when not k (a (k, kw) kernel) */
} conv_case;

/* Fail naming the first element of got that is further than tol from
 * want's, after the context printf-style fmt describes. */
static void expect_close(const float *got, const float *want, int64_t n, float tol,
                         const char *fmt, ...)
{
    for (int64_t i = 0; i < n; i++)
        if (fabsf(got[i] - want[i]) > tol) {
            char what[256];
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(what, sizeof what, fmt, ap);
            va_end(ap);
            fail_msg("%s: element %lld is %g, want %g", what, (long long)i, got[i], want[i]);
        }
}

/* Runs body once for each instruction set kerasc's own vector kernels
 * have on this CPU (KC_ISA: AVX-512, then AVX2), so that an AVX-512
 * machine checks the AVX2 build too; skips where there is none. States
 * keep the set they were built with, and each body builds its own. */
static void each_isa(void (*body)(void))
{
    int runs = 0;
    for (int level = KC_ISA_AVX512; level >= KC_ISA_AVX2; level--) {
        setenv("KC_ISA", kc_isa_name((kc_isa_level)level), 1);
        if (kc_isa() != (kc_isa_level)level)
            continue;
        body();
        runs++;
    }
    unsetenv("KC_ISA");
    if (!runs)
        skip();
}

/* max(1, max|v|): the scale of the fidelity tolerance 1e-4 * peak. */
static float peak_of(const float *v, int64_t n)
{
    float peak = 1.0f;
    for (int64_t i = 0; i < n; i++)
        peak = fmaxf(peak, fabsf(v[i]));
    return peak;
}

static uint32_t g_seed = 12345;

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

/* The kernel's length along spatial axis i. */
static int64_t kernel_len(const conv_case *c, int i)
{
    return c->kw && c->spatial == 2 && i == 1 ? c->kw : c->k;
}

static int64_t out_len(int64_t len, const conv_case *c, int i)
{
    int64_t keff = (kernel_len(c, i) - 1) * c->d + 1;
    if (c->padding == 0)
        return (len + 2 * c->zero_pad - keff) / c->s + 1;
    return (len + c->s - 1) / c->s;
}

typedef struct conv_run {
    kc_conv_attrs a;
    kc_layer layer;
    kc_weight weights[2];
    kc_shape in_shape, out_shape;
    float *x, *residual;
    int64_t out_count;
} conv_run;

static void setup(const conv_case *c, conv_run *r)
{
    memset(r, 0, sizeof *r);
    kc_conv_attrs *a = &r->a;
    a->kind = c->kind;
    a->spatial = c->spatial;
    a->filters = c->kind == KC_CONV_DEPTHWISE ? 0 : c->f;
    a->depth_multiplier = c->kind == KC_CONV_DEPTHWISE ? c->f : 1;
    a->groups = 1;
    a->padding = c->padding;
    a->use_bias = 1;
    a->activation = c->act;
    a->accumulate = c->accumulate;
    for (int i = 0; i < 3; i++) {
        a->kernel[i] = i < c->spatial ? kernel_len(c, i) : 1;
        a->strides[i] = a->dilation[i] = 1;
        a->output_padding[i] = -1;
    }
    int64_t wn = 0, fo = c->kind == KC_CONV_DEPTHWISE ? c->c * c->f : c->f, xn = 0, on = 0;
    /* Widen (the last spatial axis) until the layer has enough data to be
     * cut at all (KC_DNNL_CUT_MIN_BYTES), unless it is meant to run whole. */
    for (int64_t width = c->w;; width += c->w) {
        int64_t sp_in[3] = {c->h, width, width}, sp_out[3];
        r->in_shape.rank = r->out_shape.rank = c->spatial + 2;
        r->in_shape.dims[0] = r->out_shape.dims[0] = c->n;
        xn = c->n * c->c;
        on = c->n * fo;
        wn = c->c * c->f;
        for (int i = 0; i < c->spatial; i++) {
            a->strides[i] = c->s;
            a->dilation[i] = c->d;
            a->pad_before[i] = a->pad_after[i] = c->zero_pad;
            int64_t len = c->spatial == 1 ? width : sp_in[i];
            sp_out[i] = out_len(len, c, i);
            /* a folded ZeroPadding: the value has the padded shape */
            r->in_shape.dims[1 + i] = len + 2 * c->zero_pad;
            r->out_shape.dims[1 + i] = sp_out[i];
            xn *= len;
            on *= sp_out[i];
            wn *= kernel_len(c, i);
        }
        if (c->whole || (xn + on) * 4 >= KC_DNNL_CUT_MIN_BYTES * 3 / 2)
            break;
    }
    r->in_shape.dims[c->spatial + 1] = c->c;
    r->out_shape.dims[c->spatial + 1] = fo;
    r->x = rand_buf(xn);
    r->residual = c->accumulate ? rand_buf(on) : NULL;
    r->out_count = on;
    r->weights[0].data = rand_buf(wn);
    r->weights[1].data = rand_buf(fo);
    r->layer.name = (char *)c->what;
    r->layer.class_name = (char *)c->cls;
    r->layer.def = kc_op_lookup(NULL, c->cls);
    r->layer.attrs = a;
    r->layer.weights = r->weights;
    r->layer.n_weights = 2;
}

/* setup, the layer without its bias where use_bias is 0. */
static void setup_biased(const conv_case *c, int use_bias, conv_run *r)
{
    setup(c, r);
    if (!use_bias) {
        r->a.use_bias = 0;
        r->layer.n_weights = 1;
    }
}

static void teardown(conv_run *r)
{
    free(r->x);
    free(r->residual);
    free(r->weights[0].data);
    free(r->weights[1].data);
}

/* One run of the CPU kernel; returns the parts its oneDNN state used. */
/* One run of layer's CPU kernel on ins (shapes is) into out (shape os);
 * returns the parts its oneDNN state used, read by parts_of. */
/* The arena's free range exec_kernel offers the kernel (none by default). */
static void *spare_range;
static size_t spare_range_bytes;

/* One run of layer's CPU kernel with `slot` as its node's state, kept
 * there for the next run (or the caller to free). */
static void exec_in_slot(const kc_layer *layer, const float *const *ins, const kc_shape *is,
                         int n_in, float *out, const kc_shape *os, int exact, int whole,
                         kc_kernel_state **slot)
{
    float *outs[1] = {out};
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
    ctx.state = slot;
    ctx.exact = exact;
    ctx.whole = whole;
    ctx.spare = spare_range;
    ctx.spare_bytes = spare_range_bytes;
    kc_kernel_fn fn = kc_kernel_lookup(layer->def);
    assert_non_null(fn);
    assert_int_equal(fn(&ctx), KC_OK);
}

static int exec_kernel(const kc_layer *layer, const float *const *ins, const kc_shape *is,
                       int n_in, float *out, const kc_shape *os, int exact, int whole,
                       int (*parts_of)(const kc_kernel_state *))
{
    kc_kernel_state *state = NULL;
    exec_in_slot(layer, ins, is, n_in, out, os, exact, whole, &state);
    int parts = parts_of ? parts_of(state) : 0;
    if (state)
        state->free(state);
    return parts;
}

static int run(conv_run *r, int exact, int whole, float *out)
{
    const float *ins[1] = {r->x};
    if (r->residual)
        memcpy(out, r->residual, (size_t)r->out_count * sizeof *out);
    return exec_kernel(&r->layer, ins, &r->in_shape, 1, out, &r->out_shape, exact, whole,
                       kc_dnnl_conv_parts);
}

/* r's layer on the plain path (no oneDNN), one thread: the reference. */
static float *plain_output(conv_run *r)
{
    float *want = malloc((size_t)r->out_count * sizeof *want);
    setenv("KC_DNNL", "0", 1);
    kc_threads_enter(1);
    assert_int_equal(run(r, 1, 0, want), 0);
    unsetenv("KC_DNNL");
    return want;
}

static void check_case(const conv_case *c)
{
    conv_run r;
    setup(c, &r);
    float *want = plain_output(&r);
    float *got = malloc((size_t)r.out_count * sizeof *got);
    float peak = peak_of(want, r.out_count);
    static const int threads[] = {1, 2, 3, 5};
    for (int t = 0; t < 4; t++)
        for (int exact = 0; exact < 2; exact++) {
            kc_threads_enter(threads[t]);
            int parts = run(&r, exact, 0, got);
            int64_t along = c->n > 1 ? c->n : r.out_shape.dims[1];
            int expect = c->whole ? 1 : threads[t] < along ? threads[t] : (int)along;
            if (parts != expect)
                fail_msg("%s, %d threads: %d parts, expected %d", c->what, threads[t], parts,
                         expect);
            expect_close(got, want, r.out_count, 1e-4f * peak, "%s, %d threads%s", c->what,
                         threads[t], exact ? ", exact" : "");
        }
    /* Under the residency manager (ctx.whole) no layer is cut. */
    kc_threads_enter(3);
    if (run(&r, 1, 1, got) != 1)
        fail_msg("%s: cut although told to run whole", c->what);
    expect_close(got, want, r.out_count, 1e-4f * peak, "%s, whole", c->what);
    kc_threads_enter(0);
    free(want);
    free(got);
    teardown(&r);
}

/* Parts of r's layer run with `mib` MiB of arena free range (0: none),
 * counted by parts_of; the output checked against want. */
static int run_with_spare(conv_run *r, size_t mib, const float *want, float peak,
                          int (*parts_of)(const kc_kernel_state *), const char *what)
{
    float *got = malloc((size_t)r->out_count * sizeof *got);
    const float *ins[1] = {r->x};
    spare_range_bytes = mib << 20;
    spare_range = mib ? malloc(spare_range_bytes) : NULL;
    int n = exec_kernel(&r->layer, ins, &r->in_shape, 1, got, &r->out_shape, 0, 0, parts_of);
    free(spare_range);
    spare_range = NULL;
    spare_range_bytes = 0;
    expect_close(got, want, r->out_count, 1e-4f * peak, "%s", what);
    free(got);
    return n;
}

static void pack_wino(const float *w, void *spare, size_t spare_bytes, float **packed,
                      size_t *packed_bytes);

/* Whether oneDNN has a Winograd convolution on this CPU: 2.6's is
 * AVX-512 only (an AVX2 AMD EPYC Zen 3 has none). */
static int onednn_has_winograd(void)
{
    float *w = calloc(64 * 64 * 9, sizeof *w), *packed = NULL;
    size_t bytes = 0;
    assert_non_null(w);
    pack_wino(w, NULL, 0, &packed, &bytes);
    int has = packed != NULL;
    free(w);
    kc_free_weights(packed); /* kc_dnnl_pack's: the weights heap's */
    return has;
}
/* Winograd on a 3x3 128 -> 128 layer needs 100 output pixels in an image
 * (its parts run one image at a time), whatever the batch: below that its
 * transformed weights cost more memory than the time they save is worth.
 * A narrow layer (ic*oc/(ic+oc) < 64) puts at most 16 MiB of buffers
 * outside the arena (dnnl_conv.c): 64 -> 64 on 10x10 takes Winograd;
 * 96 -> 96 on 48x48 images wants oneDNN's F(4x4) kernel, whose buffers
 * (2 x ~9 MB) take that only from the arena, and otherwise takes F(2x2)
 * where oneDNN offers that kernel on the CPU at hand (else direct);
 * 80 -> 192 on 71x71 is direct unless the arena holds its buffers.
 * KC_WINOGRAD=1 takes Winograd anyway, exact never. Every variant must
 * still equal the plain path. */
static void test_winograd_map_size(void **state)
{
    (void)state;
    static const conv_case cases[6] = {
        {"3x3 128 -> 128 on one 8x8 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 8, 8, 128, 128, 3, 1,
         1, 1, 0, 0, "relu", 1},
        {"3x3 128 -> 128 on two 8x8 images", "Conv2D", KC_CONV_PLAIN, 2, 2, 8, 8, 128, 128, 3, 1,
         1, 1, 0, 0, "relu", 1},
        {"3x3 128 -> 128 on one 10x10 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 10, 10, 128, 128, 3,
         1, 1, 1, 0, 0, "relu", 1},
        {"3x3 64 -> 64 on one 10x10 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 10, 10, 64, 64, 3, 1,
         1, 1, 0, 0, "relu", 1},
        {"3x3 96 -> 96 on two 48x48 images", "Conv2D", KC_CONV_PLAIN, 2, 2, 48, 48, 96, 96, 3, 1,
         1, 1, 0, 0, "relu", 1},
        {"3x3 80 -> 192 on one 71x71 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 73, 73, 80, 192, 3, 1,
         1, 0, 0, 0, "relu", 1},
    };
    if (!kc_dnnl_ready() || !onednn_has_winograd())
        skip();
    /* oneDNN's Winograd kernels: kerasc's own (test_wino2d_layers) would
     * take some of these layers first */
    setenv("KC_WINO2D", "0", 1);
    kc_threads_enter(2);
    int offers_2x2 = 0;
    for (int i = 0; i < 6; i++) {
        conv_run r;
        setup(&cases[i], &r);
        const char *what = cases[i].what;
        float *want = malloc((size_t)r.out_count * sizeof *want);
        float *got = malloc((size_t)r.out_count * sizeof *got);
        const float *ins[1] = {r.x};
        exec_kernel(&r.layer, ins, &r.in_shape, 1, want, &r.out_shape, 1, 0, NULL);
        float peak = peak_of(want, r.out_count);
        for (int force = 0; force < 2; force++) {
            if (force)
                setenv("KC_WINOGRAD", "1", 1);
            int wino = run_with_spare(&r, 0, want, peak, kc_dnnl_conv_wino_parts, what);
            unsetenv("KC_WINOGRAD");
            /* 96 -> 96 on 48x48 (i == 4) takes F(2x2) where oneDNN offers it
             * for one such image, which depends on the CPU (an Intel Xeon
             * does, an AMD EPYC does not), else runs direct */
            if (i == 4 && !force) {
                offers_2x2 = wino > 0;
                continue;
            }
            if ((wino > 0) != (force || i == 2 || i == 3))
                fail_msg("%s%s: %d Winograd parts", what, force ? ", KC_WINOGRAD=1" : "", wino);
        }
        assert_int_equal(exec_kernel(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 1, 0,
                                     kc_dnnl_conv_wino_parts),
                         0);
        if (i == 4 && run_with_spare(&r, 0, want, peak, kc_dnnl_conv_wino_f4_parts, what) != 0)
            fail_msg("%s: F(4x4) with its buffers outside the arena", what);
        if (i >= 4) { /* room in the arena: F(4x4), unless told otherwise */
            if (run_with_spare(&r, 64, want, peak, kc_dnnl_conv_wino_f4_parts, what) == 0)
                fail_msg("%s: not oneDNN's F(4x4) kernel with room in the arena", what);
            setenv("KC_WINOGRAD_F4", "0", 1);
            int f4 = run_with_spare(&r, 64, want, peak, kc_dnnl_conv_wino_f4_parts, what);
            unsetenv("KC_WINOGRAD_F4");
            /* oneDNN's first choice: F(2x2) where it offers that */
            if (f4 != 0 && (i != 4 || offers_2x2))
                fail_msg("%s: F(4x4) although KC_WINOGRAD_F4=0", what);
        }
        free(want);
        free(got);
        teardown(&r);
    }
    unsetenv("KC_WINO2D");
    kc_threads_enter(0);
}

static void test_conv2d_cuts(void **state)
{
    (void)state;
    static const conv_case cases[] = {
        {"3x3 same s1 (Winograd when not exact), 7 rows", "Conv2D", KC_CONV_PLAIN, 2,
         1, 7, 20, 5, 6, 3, 1, 1, 1, 0, 0, "relu", 0},
        {"3x3 same s1 64 -> 64 (Winograd when not exact), 8 rows", "Conv2D", KC_CONV_PLAIN, 2,
         1, 8, 160, 64, 64, 3, 1, 1, 1, 0, 0, "relu", 0},
        {"3x3 same s1 64 -> 64, 3 images (Winograd one image at a time)", "Conv2D",
         KC_CONV_PLAIN, 2, 3, 8, 40, 64, 64, 3, 1, 1, 1, 0, 0, "relu", 0},
        {"3x3 same s1 64 -> 64, 3 images, relu6 (no Winograd: direct on whole parts)",
         "Conv2D", KC_CONV_PLAIN, 2, 3, 8, 40, 64, 64, 3, 1, 1, 1, 0, 0, "relu6", 0},
        /* activations no post-op runs: applied to each part's output as
         * the part ends (once: twice or never is off by far more) */
        {"1x1 32 -> 48 swish, by rows", "Conv2D", KC_CONV_PLAIN, 2, 1, 24, 60, 32, 48, 1, 1, 1,
         1, 0, 0, "swish", 0},
        {"3x3 same 16 -> 24 tanh, 3 images", "Conv2D", KC_CONV_PLAIN, 2, 3, 12, 30, 16, 24, 3,
         1, 1, 1, 0, 0, "tanh", 0},
        {"1x1 8 -> 16 sigmoid on 4x40: run whole", "Conv2D", KC_CONV_PLAIN, 2, 1, 4, 40, 8, 16,
         1, 1, 1, 1, 0, 0, "sigmoid", 1},
        {"3x3 64 -> 64 on 4x40: weights outweigh data, run whole", "Conv2D", KC_CONV_PLAIN, 2,
         1, 4, 40, 64, 64, 3, 1, 1, 1, 0, 0, NULL, 1},
        {"3x3 on 6x6x3: too little data to be worth waking a thread, run whole", "Conv2D",
         KC_CONV_PLAIN, 2, 1, 6, 6, 3, 4, 3, 1, 1, 1, 0, 0, "relu", 1},
        {"3x3 same s2, even rows", "Conv2D", KC_CONV_PLAIN, 2, 1, 10, 30, 3, 4, 3, 2, 1, 1, 0,
         0, NULL},
        {"3x3 same s2, odd rows", "Conv2D", KC_CONV_PLAIN, 2, 1, 11, 31, 3, 4, 3, 2, 1, 1, 0, 0,
         "relu6"},
        {"3x3 valid s2, last row unread", "Conv2D", KC_CONV_PLAIN, 2, 1, 8, 30, 4, 5, 3, 2, 1, 0,
         0, 0, NULL},
        {"5x5 same dilation 2", "Conv2D", KC_CONV_PLAIN, 2, 1, 12, 30, 3, 4, 5, 1, 2, 1, 0, 0,
         NULL},
        {"7x7 same s1, pad 3 reaching past a part", "Conv2D", KC_CONV_PLAIN, 2, 1, 6, 40, 2, 3, 7,
         1, 1, 1, 0, 0, NULL},
        {"1x1, 2 rows (fewer rows than threads)", "Conv2D", KC_CONV_PLAIN, 2, 1, 2, 5, 8, 16, 1,
         1, 1, 0, 0, 0, "relu"},
        {"folded ZeroPadding 1 then valid 3x3 s2", "Conv2D", KC_CONV_PLAIN, 2, 1, 9, 30, 3, 8, 3,
         2, 1, 0, 1, 0, "relu"},
        {"residual sum fused, 1x1", "Conv2D", KC_CONV_PLAIN, 2, 1, 9, 4, 6, 6, 1, 1, 1, 1, 0, 1,
         NULL},
        {"residual sum fused, 1x1 64 -> 256 on 8 images of 56x56 (parts of 8 MB and more "
         "take oneDNN's direct kernel)", "Conv2D", KC_CONV_PLAIN, 2, 8, 56, 56, 64, 256, 1, 1,
         1, 1, 0, 1, "relu"},
        {"batch 3 (parts of 1 and 2 images)", "Conv2D", KC_CONV_PLAIN, 2, 3, 6, 6, 4, 4, 3, 1, 1,
         1, 0, 0, "relu"},
        {"depthwise 3x3 same s1", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 1, 9, 9, 16, 1, 3, 1,
         1, 1, 0, 0, "relu6"},
        {"depthwise 3x3 s2 multiplier 2", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 1, 8, 9, 4,
         2, 3, 2, 1, 1, 0, 0, NULL},
        {"depthwise batch 5, residual", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 5, 5, 5, 8, 1,
         3, 1, 1, 1, 0, 1, NULL},
    };
    /* oneDNN's cuts, its Winograd kernels' too: kerasc's own 2-D
     * Winograd (test_wino2d_layers) would take the 64 -> 64 layers, its
     * own depthwise loop (test_dw_layers) the stride-1 depthwise one, its
     * narrow-output loop (test_narrow_layers) those of few filters, its
     * 1x1 loop by pixels (test_pw_layers) the 56x56 residual one */
    setenv("KC_WINO2D", "0", 1);
    setenv("KC_DW", "0", 1);
    setenv("KC_NARROW", "0", 1);
    setenv("KC_PW_ROWS", "0", 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i]);
    unsetenv("KC_PW_ROWS");
    unsetenv("KC_NARROW");
    unsetenv("KC_DW");
    unsetenv("KC_WINO2D");
}

/* Parts whose oneDNN kernel is the older direct one ("jit:"), times 100,
 * plus the number of parts. */
static int direct_parts(const kc_kernel_state *state)
{
    int n = kc_dnnl_conv_parts(state), direct = 0;
    for (int k = 0; k < n; k++) {
        const char *impl = kc_dnnl_conv_impl(state, k);
        direct += impl && !strncmp(impl, "jit:", 4);
    }
    return direct * 100 + n;
}

/* Case c's layer on `threads` threads, its output (the residual first,
 * when it sums one) checked against the plain path's; returns count_of
 * of its state. note: what the failure message adds to c->what. */
static int run_sum_case(const conv_case *c, int threads, int (*count_of)(const kc_kernel_state *),
                        const char *note)
{
    conv_run r;
    setup(c, &r);
    float *want = plain_output(&r);
    float *got = malloc((size_t)r.out_count * sizeof *got);
    kc_threads_enter(threads);
    const float *ins[1] = {r.x};
    if (r.residual)
        memcpy(got, r.residual, (size_t)r.out_count * sizeof *got);
    int n = exec_kernel(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 0, 0, count_of);
    expect_close(got, want, r.out_count, 1e-4f * peak_of(want, r.out_count), "%s%s", c->what,
                 note);
    free(want);
    free(got);
    teardown(&r);
    kc_threads_enter(0);
    return n;
}

/* Case c on `threads` threads as is and with environment switch `env`
 * at 0: count_of's parts (the `counted` kind) must be `want`, then 0;
 * outputs as the plain path's either way (run_sum_case). */
static void expect_switched_parts(const conv_case *c, int threads, int want, const char *env,
                                  int (*count_of)(const kc_kernel_state *), const char *counted)
{
    for (int off = 0; off < 2; off++) {
        char note[64] = "";
        if (off) {
            setenv(env, "0", 1);
            snprintf(note, sizeof note, ", %s=0", env);
        }
        int n = run_sum_case(c, threads, count_of, note);
        unsetenv(env);
        if (n != (off ? 0 : want))
            fail_msg("%s, %d threads%s: %d parts %s, expected %d", c->what, threads, note, n,
                     counted, off ? 0 : want);
    }
}

/* A fused residual sum on a 1x1 convolution of at most 64 input channels
 * takes oneDNN's older direct kernel from 1 MB of output a part, not
 * brgconv's (whose sum costs more there): ResNet50's conv2_block*_3 one
 * image at a time (a lane's image-major head) and in half-image parts
 * (batch 1 on 2 threads); not with 128 input channels under 8 MB, small
 * outputs, or no sum. Every variant equals the plain path. With the sum
 * inside oneDNN, that is: KC_ADD_AFTER=0 (these images are large enough
 * for the add after the convolution, test_residual_add_after). */
static void test_wide_sum_kernel(void **state)
{
    (void)state;
    setenv("KC_ADD_AFTER", "0", 1);
    setenv("KC_PW_ROWS", "0", 1); /* oneDNN's, not kerasc's 1x1 loop by pixels */
    static const struct {
        conv_case c;
        int threads, want;
    } cases[] = {
        {{"1x1 64 -> 256 + sum, one 56x56 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 56, 56, 64, 256,
          1, 1, 1, 1, 0, 1, "relu"}, 1, 101},
        {{"1x1 64 -> 256 + sum, one 56x56 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 56, 56, 64, 256,
          1, 1, 1, 1, 0, 1, "relu"}, 2, 202},
        {{"1x1 128 -> 512 + sum, one 28x28 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 28, 28, 128,
          512, 1, 1, 1, 1, 0, 1, "relu"}, 1, 1},
        {{"1x1 64 -> 256 + sum, one 8x8 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 8, 8, 64, 256, 1,
          1, 1, 1, 0, 1, "relu"}, 1, 1},
        {{"1x1 64 -> 256, no sum, one 56x56 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 56, 56, 64,
          256, 1, 1, 1, 1, 0, 0, "relu"}, 1, 1},
    };
    if (!kc_dnnl_ready())
        skip();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int parts = run_sum_case(&cases[i].c, cases[i].threads, direct_parts, "");
        if (parts != cases[i].want)
            fail_msg("%s, %d threads: %d direct-kernel parts of %d, expected %d of %d",
                     cases[i].c.what, cases[i].threads, parts / 100, parts % 100,
                     cases[i].want / 100, cases[i].want % 100);
    }
    unsetenv("KC_PW_ROWS");
    unsetenv("KC_ADD_AFTER");
    kc_threads_enter(0);
}

/* A residual sum whose part writes 1 MB or more, 256 KB or more an image,
 * runs after the convolution (kc_residual_add), one image at a time
 * through a per-thread buffer: ResNet50's expansions into its residuals,
 * whole, in
 * half-image parts (batch 1 on 2 threads), several images a part (a lane
 * of batch 8: a part once fell back to one primitive over its images
 * while still adding a single image's buffer, and images 2..n came out
 * wrong) and an image a part; relu, relu6 and linear; a 3x3 kernel too.
 * Not under 1 MB a part (one 14x14 image of 1024 channels) or 256 KB an
 * image (7x7 ones), with an activation the pass does not apply,
 * without a sum, or with KC_ADD_AFTER=0. By default only where oneDNN
 * runs without AVX-512 (kc_dnnl_add_after), KC_ADD_AFTER=1 everywhere.
 * Every variant equals the plain path. */
static void test_residual_add_after(void **state)
{
    (void)state;
    static const struct {
        conv_case c;
        int threads, want;
    } cases[] = {
        {{"1x1 64 -> 256 + sum, one 56x56 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 56, 56, 64, 256,
          1, 1, 1, 1, 0, 1, "relu"}, 1, 1},
        {{"1x1 64 -> 256 + sum, one 56x56 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 56, 56, 64, 256,
          1, 1, 1, 1, 0, 1, "relu"}, 2, 2},
        {{"1x1 128 -> 512 + sum, four 28x28 images", "Conv2D", KC_CONV_PLAIN, 2, 4, 28, 28, 128,
          512, 1, 1, 1, 1, 0, 1, "relu6"}, 1, 1},
        {{"1x1 128 -> 512 + sum, four 28x28 images", "Conv2D", KC_CONV_PLAIN, 2, 4, 28, 28, 128,
          512, 1, 1, 1, 1, 0, 1, "relu6"}, 2, 2},
        {{"1x1 128 -> 512 + sum, three 28x28 images", "Conv2D", KC_CONV_PLAIN, 2, 3, 28, 28, 128,
          512, 1, 1, 1, 1, 0, 1, "linear"}, 3, 3},
        {{"3x3 64 -> 64 + sum, two 56x56 images", "Conv2D", KC_CONV_PLAIN, 2, 2, 56, 56, 64, 64, 3,
          1, 1, 1, 0, 1, "relu"}, 1, 1},
        {{"1x1 256 -> 1024 + sum, four 14x14 images", "Conv2D", KC_CONV_PLAIN, 2, 4, 14, 14, 256,
          1024, 1, 1, 1, 1, 0, 1, "relu", 1}, 1, 1},
        {{"1x1 256 -> 1024 + sum, one 14x14 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 14, 14, 256,
          1024, 1, 1, 1, 1, 0, 1, "relu", 1}, 2, 0},
        {{"1x1 256 -> 1024 + sum, eight 7x7 images", "Conv2D", KC_CONV_PLAIN, 2, 8, 7, 7, 256,
          1024, 1, 1, 1, 1, 0, 1, "relu", 1}, 1, 0},
        {{"1x1 64 -> 256 + sum, sigmoid, one 56x56 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 56, 56,
          64, 256, 1, 1, 1, 1, 0, 1, "sigmoid"}, 1, 0},
        {{"1x1 64 -> 256, no sum, one 56x56 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 56, 56, 64,
          256, 1, 1, 1, 1, 0, 0, "relu"}, 1, 0},
    };
    if (!kc_dnnl_ready())
        skip();
    setenv("KC_PW_ROWS", "0", 1); /* oneDNN's, not kerasc's 1x1 loop by pixels */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("KC_ADD_AFTER", "1", 1); /* then "0" (expect_switched_parts) */
        expect_switched_parts(&cases[i].c, cases[i].threads, cases[i].want, "KC_ADD_AFTER",
                              kc_dnnl_conv_add_after_parts, "add after");
        int want = kc_dnnl_avx512() ? 0 : cases[i].want;
        int n = run_sum_case(&cases[i].c, cases[i].threads, kc_dnnl_conv_add_after_parts,
                             ", by default");
        if (n != want)
            fail_msg("%s, %d threads, by default: %d parts add after, expected %d",
                     cases[i].c.what, cases[i].threads, n, want);
    }
    unsetenv("KC_PW_ROWS");
}

/* kc_residual_add's vector loops against the plain formula, bit for bit:
 * lengths that are whole vectors of either set and ones with a tail,
 * values below 0 and above 6, each activation. On AVX2 the add once ran
 * scalar (the only vector loop was AVX-512's). */
static void residual_add_isa(void)
{
    static const int64_t lengths[] = {1, 7, 8, 16, 17, 40, 1000, 4099};
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
        for (int act = 0; act <= 2; act++) {
            int64_t n = lengths[li];
            float *dst = malloc((size_t)(n + 1) * sizeof *dst);
            float *add = malloc((size_t)n * sizeof *add);
            float *want = malloc((size_t)n * sizeof *want);
            assert_non_null(dst);
            assert_non_null(add);
            assert_non_null(want);
            for (int64_t i = 0; i < n; i++) {
                dst[i] = (float)((i * 37) % 23) - 9.5f;
                add[i] = (float)((i * 11) % 9) * 0.75f - 2.0f;
                float v = dst[i] + add[i];
                v = act && v < 0.0f ? 0.0f : v;
                want[i] = act == 2 && v > 6.0f ? 6.0f : v;
            }
            dst[n] = 123.0f; /* past the end: must stay */
            kc_residual_add(dst, add, n, act);
            assert_memory_equal(dst, want, (size_t)n * sizeof *dst);
            assert_true(dst[n] == 123.0f);
            free(dst);
            free(add);
            free(want);
        }
}

static void test_residual_add_vectors(void **state)
{
    (void)state;
    each_isa(residual_add_isa);
}

/* A strided 1x1 convolution of 512 input channels or more and at least
 * twice as many outputs runs on its input subsampled first (ResNet50's
 * conv4_block1_0 and conv5_block1_0): whole, in row parts (one image on
 * 2 threads), several images a part; odd sizes (the last row and column
 * read); not narrower, not with fewer outputs (unless oneDNN runs
 * without AVX-512: then every strided 1x1), not 3x3, not with
 * KC_GATHER=0. Every variant equals the plain path. With KC_PW=0: on 2
 * threads kc_pw_conv takes these sizes (test_pw_layers). */
static void test_strided_gather(void **state)
{
    (void)state;
    static const struct {
        conv_case c;
        int threads, want;
    } cases[] = {
        {{"1x1/2 512 -> 1024, one 28x28 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 28, 28, 512, 1024,
          1, 2, 1, 0, 0, 0, "relu", 1}, 1, 1},
        {{"1x1/2 512 -> 1024, one 28x28 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 28, 28, 512, 1024,
          1, 2, 1, 0, 0, 0, "linear"}, 2, 2},
        {{"1x1/2 512 -> 1024, four 15x15 images", "Conv2D", KC_CONV_PLAIN, 2, 4, 15, 15, 512, 1024,
          1, 2, 1, 1, 0, 0, "relu", 1}, 2, 2},
        {{"1x1/3 512 -> 1024 + sum, two 9x9 images", "Conv2D", KC_CONV_PLAIN, 2, 2, 9, 9, 512, 1024,
          1, 3, 1, 0, 0, 1, "relu", 1}, 1, 1},
        {{"1x1/2 256 -> 1024, one 28x28 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 28, 28, 256, 1024,
          1, 2, 1, 0, 0, 0, "relu", 1}, 1, 0},
        {{"1x1/2 512 -> 512, one 28x28 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 28, 28, 512, 512,
          1, 2, 1, 0, 0, 0, "relu", 1}, 1, 0},
        {{"3x3/2 512 -> 1024, one 14x14 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 14, 14, 512, 1024,
          3, 2, 1, 1, 0, 0, "relu", 1}, 1, 0},
    };
    if (!kc_dnnl_ready())
        skip();
    setenv("KC_PW", "0", 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int narrow = i == 4 || i == 5;
        int want = narrow && !kc_dnnl_avx512() ? 1 : cases[i].want;
        expect_switched_parts(&cases[i].c, cases[i].threads, want, "KC_GATHER",
                              kc_dnnl_conv_gather_parts, "gather");
    }
    unsetenv("KC_PW");
}

/* 1 when every part of a layer runs on its im2col buffer, 0 when none
 * does, -1 when some do (they share one weights' descriptor). */
static int im2col_all(const kc_kernel_state *state)
{
    int n = kc_dnnl_conv_parts(state), cols = kc_dnnl_conv_im2col_parts(state);
    return cols == 0 ? 0 : cols == n ? 1 : -1;
}

/* Where oneDNN runs without AVX-512, a (1, k) or (k, 1) convolution on a
 * small image runs as a 1x1 convolution over its taps side by side
 * (InceptionV3's 8x8 (1, 3) and (3, 1) layers): "same" and "valid"
 * padding, a folded ZeroPadding, a kernel wider than the image, one
 * image whole or cut into row parts, several images a part; not a
 * stride-1 square kernel, a large image or a fused sum. So does a
 * strided kernel on 64+ input channels (InceptionV3's Mixed_7a 3x3
 * stride-2 layers), "same" (padded on one side only) and "valid", in
 * row parts (each part's rows of taps start mid-image); not on 32
 * channels or where one image's buffer passes 512 KiB. Every
 * variant equals the plain path, and so with KC_IM2COL=0. */
static void test_im2col_kernel(void **state)
{
    (void)state;
    static const struct {
        conv_case c;
        int threads, want;
    } cases[] = {
        {{"(1, 3) 384 -> 384 same, one 8x8 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 8, 8, 384, 384,
          1, 1, 1, 1, 0, 0, "relu", 1, 3}, 1, 1},
        {{"(3, 1) 384 -> 384 same, one 8x8 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 8, 8, 384, 384,
          3, 1, 1, 1, 0, 0, "relu", 0, 1}, 2, 1},
        {{"(3, 1) 96 -> 32 same, one 16x16 image in row parts", "Conv2D", KC_CONV_PLAIN, 2, 1, 16,
          16, 96, 32, 3, 1, 1, 1, 0, 0, "linear", 1, 1}, 3, 1},
        {{"(1, 3) 24 -> 40 valid, three 7x9 images", "Conv2D", KC_CONV_PLAIN, 2, 3, 7, 9, 24, 40,
          1, 1, 1, 0, 0, 0, "relu6", 1, 3}, 2, 1},
        {{"(1, 7) 16 -> 8 same, two 6x5 images", "Conv2D", KC_CONV_PLAIN, 2, 2, 6, 5, 16, 8, 1, 1,
          1, 1, 0, 0, "relu", 1, 7}, 1, 1},
        {{"(3, 1) 16 -> 8 valid after a ZeroPadding of 1", "Conv2D", KC_CONV_PLAIN, 2, 1, 6, 6, 16,
          8, 3, 1, 1, 0, 1, 0, "linear", 1, 1}, 1, 1},
        {{"3x3 384 -> 384 same, one 8x8 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 8, 8, 384, 384, 3,
          1, 1, 1, 0, 0, "relu", 1}, 1, 0},
        {{"(1, 3)/2 64 -> 64 same, one 8x8 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 8, 8, 64, 64, 1,
          2, 1, 1, 0, 0, "relu", 1, 3}, 1, 1},
        {{"3x3/2 96 -> 40 valid, one 17x17 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 17, 17, 96, 40,
          3, 2, 1, 0, 0, 0, "relu", 1}, 1, 1},
        {{"3x3/2 64 -> 24 valid, one 29x29 image in row parts", "Conv2D", KC_CONV_PLAIN, 2, 1, 29,
          29, 64, 24, 3, 2, 1, 0, 0, 0, "linear", 1}, 3, 1},
        {{"3x3/2 64 -> 16 same, two 16x14 images", "Conv2D", KC_CONV_PLAIN, 2, 2, 16, 14, 64, 16, 3,
          2, 1, 1, 0, 0, "relu", 1}, 2, 1},
        {{"(3, 5)/2 120 -> 8 same, one 13x13 image in row parts", "Conv2D", KC_CONV_PLAIN, 2, 1, 13,
          13, 120, 8, 3, 2, 1, 1, 0, 0, "relu6", 1, 5}, 2, 1},
        {{"3x3/2 32 -> 32 valid, one 17x17 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 17, 17, 32, 32, 3,
          2, 1, 0, 0, 0, "relu", 1}, 1, 0},
        {{"3x3/2 288 -> 8 valid, one 35x35 image (a 3 MB buffer)", "Conv2D", KC_CONV_PLAIN, 2, 1, 35,
          35, 288, 8, 3, 2, 1, 0, 0, 0, "relu", 1}, 1, 0},
        {{"3x3/2 96 -> 24 valid, one 35x35 image (a 1 MB buffer)", "Conv2D", KC_CONV_PLAIN, 2, 1, 35,
          35, 96, 24, 3, 2, 1, 0, 0, 0, "relu", 1}, 1, 0},
        {{"(1, 3) 64 -> 64 same, one 20x20 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 20, 20, 64, 64,
          1, 1, 1, 1, 0, 0, "relu", 1, 3}, 1, 0},
        {{"(1, 3) 64 -> 64 same + sum, one 8x8 image", "Conv2D", KC_CONV_PLAIN, 2, 1, 8, 8, 64, 64,
          1, 1, 1, 1, 0, 1, "relu", 1, 3}, 1, 0},
    };
    if (!kc_dnnl_ready())
        skip();
    setenv("KC_WINO1D", "0", 1); /* oneDNN's layer, whatever the size */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_switched_parts(&cases[i].c, cases[i].threads,
                              kc_dnnl_avx512() ? 0 : cases[i].want, "KC_IM2COL", im2col_all,
                              "on im2col");
    unsetenv("KC_WINO1D");
}

/* r's layer (case c) on 1 to 3 threads: on the own loop `owns`
 * recognises exactly when `want` (named `loop` in messages), within the
 * fidelity tolerance of the plain path `plain`, and, but for activation
 * `inexact` (applied after the loop by the caller), bit-equal to `exact`:
 * the loop's sums written out in scalars. */
static void expect_own_loop(const conv_case *c, conv_run *r, int want, const float *plain,
                            const float *exact, int (*owns)(const kc_kernel_state *),
                            const char *loop, const char *inexact)
{
    float peak = peak_of(plain, r->out_count);
    float *got = malloc((size_t)r->out_count * sizeof *got);
    assert_non_null(got);
    const float *ins[1] = {r->x};
    for (int threads = 1; threads <= 3; threads++) {
        if (r->residual)
            memcpy(got, r->residual, (size_t)r->out_count * sizeof *got);
        kc_threads_enter(threads);
        int mine = exec_kernel(&r->layer, ins, &r->in_shape, 1, got, &r->out_shape, 0, 0, owns);
        kc_threads_enter(0);
        if (mine != want)
            fail_msg("%s, %d threads: %s kerasc's %s loop", c->what, threads,
                     mine ? "ran on" : "not on", loop);
        expect_close(got, plain, r->out_count, 1e-4f * peak, "%s, %d threads", c->what, threads);
        if (mine && strcmp(c->act, inexact))
            for (int64_t e = 0; e < r->out_count; e++)
                if (memcmp(&got[e], &exact[e], sizeof got[e]))
                    fail_msg("%s, %d threads: element %lld is %.9g, the sum in order %.9g",
                             c->what, threads, (long long)e, got[e], exact[e]);
    }
    free(got);
}

/* Under the residency manager (ctx->whole: one part) and with streamed
 * weights (ctx->w_ext, packed again every run: a second run with other
 * weights gives their sums) the own loop `owns` recognises (`loop`) runs
 * too, with the same bits as on the host loop: a pipeline stage through
 * the scheduler is compared bit for bit with a local run. */
static void own_whole_and_streamed(const conv_case *c, conv_run *r, const float *exact,
                                   int (*owns)(const kc_kernel_state *), const char *loop)
{
    float *got = malloc((size_t)r->out_count * sizeof *got);
    assert_non_null(got);
    const float *ins[1] = {r->x};
    kc_threads_enter(3);
    if (!exec_kernel(&r->layer, ins, &r->in_shape, 1, got, &r->out_shape, 0, 1, owns))
        fail_msg("%s: not on kerasc's %s loop under the residency manager", c->what, loop);
    if (memcmp(got, exact, (size_t)r->out_count * sizeof *got))
        fail_msg("%s: other bits under the residency manager", c->what);
    /* streamed: the layer's weights travel beside it, its own arrays unread */
    float *outs[1] = {got};
    const float *w_ext[2] = {r->weights[0].data, r->weights[1].data};
    kc_kernel_state *state = NULL;
    kc_exec_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.layer = &r->layer;
    ctx.in = ins;
    ctx.in_shape = &r->in_shape;
    ctx.n_in = 1;
    ctx.out = outs;
    ctx.out_shape = &r->out_shape;
    ctx.n_out = 1;
    ctx.keras_major = 3;
    ctx.state = &state;
    ctx.w_ext = w_ext;
    kc_kernel_fn fn = kc_kernel_lookup(r->layer.def);
    assert_int_equal(fn(&ctx), KC_OK);
    if (!owns(state) || state->weights_cached)
        fail_msg("%s: streamed weights not on the %s loop, or cached", c->what, loop);
    if (memcmp(got, exact, (size_t)r->out_count * sizeof *got))
        fail_msg("%s: other bits with streamed weights", c->what);
    /* the next run's weights, all doubled: every product and sum doubles
     * exactly (bias too), so every output before its activation does */
    size_t w_count = (size_t)c->c * (size_t)c->f * (size_t)c->k * (size_t)(c->kw ? c->kw : c->k);
    float *w2 = malloc(w_count * sizeof *w2), *b2 = malloc((size_t)c->f * sizeof *b2);
    for (size_t e = 0; e < w_count; e++)
        w2[e] = 2.0f * r->weights[0].data[e];
    for (int64_t e = 0; e < c->f; e++)
        b2[e] = 2.0f * r->weights[1].data[e];
    const float *w_next[2] = {w2, b2};
    ctx.w_ext = w_next;
    assert_int_equal(fn(&ctx), KC_OK);
    int clamps = !strcmp(c->act, "relu6");
    for (int64_t e = 0; e < r->out_count && !clamps; e++)
        if (got[e] != 2.0f * exact[e])
            fail_msg("%s: streamed weights doubled, element %lld is %.9g, want %.9g", c->what,
                     (long long)e, got[e], 2.0f * exact[e]);
    state->free(state);
    kc_threads_enter(0);
    free(w2);
    free(b2);
    free(got);
}

/* A 2-D case's window for the scalar references: the image without a
 * folded ZeroPadding, the output, the kernel, and the padding before
 * (TensorFlow's "same" split, plus the folded ZeroPadding). */
typedef struct ref_window {
    int64_t in_h, in_w, out_h, out_w, kh, kw, pad[2];
} ref_window;

static ref_window ref_window_of(const conv_case *c, const conv_run *r)
{
    ref_window g = {.in_h = r->in_shape.dims[1] - 2 * c->zero_pad,
                    .in_w = r->in_shape.dims[2] - 2 * c->zero_pad,
                    .out_h = r->out_shape.dims[1], .out_w = r->out_shape.dims[2],
                    .kh = c->k, .kw = c->kw ? c->kw : c->k,
                    .pad = {c->zero_pad, c->zero_pad}};
    int64_t ext[2] = {g.kh, g.kw}, len[2] = {g.in_h, g.in_w}, olen[2] = {g.out_h, g.out_w};
    for (int i = 0; i < 2 && c->padding == 1; i++) {
        int64_t total = (olen[i] - 1) * c->s + ext[i] - len[i];
        g.pad[i] = (total > 0 ? total / 2 : 0) + c->zero_pad;
    }
    return g;
}

/* A reference's sum for output channel fo finished as the own loops do:
 * the bias, then relu / relu6 (others are the caller's). */
static float ref_finish(const conv_case *c, const conv_run *r, float sum, int64_t fo)
{
    float v = r->a.use_bias ? sum + r->weights[1].data[fo] : sum;
    if (!strcmp(c->act, "relu") || !strcmp(c->act, "relu6"))
        v = v < 0.0f ? 0.0f : v;
    if (!strcmp(c->act, "relu6"))
        v = v > 6.0f ? 6.0f : v;
    return v;
}

/* ----------------- convolutions over few input channels (kernels/stem) */

static int stem_owns(const kc_kernel_state *state) { return kc_stem_owns(state); }

/* The sum stem_simd.inc makes, in scalars: per output, the taps inside
 * the image in order (row, column, input channel), one fmaf each from
 * zero, then the bias, then relu / relu6 (others: the caller's, as the
 * kernel leaves them). Padding as TensorFlow's, from the case alone. */
static void stem_reference(const conv_case *c, const conv_run *r, float *out)
{
    ref_window g = ref_window_of(c, r);
    const float *x = r->x, *w = r->weights[0].data;
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t oy = 0; oy < g.out_h; oy++)
            for (int64_t ox = 0; ox < g.out_w; ox++)
                for (int64_t fo = 0; fo < c->f; fo++) {
                    float acc = 0.0f;
                    for (int64_t ky = 0; ky < g.kh; ky++)
                        for (int64_t kx = 0; kx < g.kw; kx++)
                            for (int64_t ci = 0; ci < c->c; ci++) {
                                int64_t iy = oy * c->s - g.pad[0] + ky, ix = ox * c->s - g.pad[1] + kx;
                                if (iy < 0 || iy >= g.in_h || ix < 0 || ix >= g.in_w)
                                    continue;
                                acc = fmaf(x[((n * g.in_h + iy) * g.in_w + ix) * c->c + ci],
                                           w[((ky * g.kw + kx) * c->c + ci) * c->f + fo], acc);
                            }
                    out[((n * g.out_h + oy) * g.out_w + ox) * c->f + fo] = ref_finish(c, r, acc, fo);
                }
}

/* A plain convolution of at most 4 input channels, 16 output channels or
 * more and a kernel of at most 3x3 runs on kerasc's own loop (stem.c) on
 * every instruction set, 1 to 3 threads: MobileNetV2's stem, "same" and
 * "valid", strides 1 to 3, a folded ZeroPadding, images cut across, a
 * last vector part zeros (24, 40), an odd number of vectors (48), a
 * (3, 2) and a 1x1 kernel, no bias, an activation applied after (tanh).
 * Its outputs within the fidelity tolerance of the plain path and, but
 * for tanh, equal to the scalar sum in its order (stem_reference): the
 * same bits on any threads and instruction set, under the residency
 * manager and with streamed weights too. Kernels up to 11x11 run on the
 * wide loop (ResNet50's 7x7 conv1, AlexNet's 11x11 stride 4, a 5x5 of 40
 * filters, a (7, 5) kernel): every tap read from rows padded with zeros,
 * the same bits as the taps inside alone. Not a 13x13, 5 input channels,
 * 8 filters, dilation, a fused sum or KC_STEM=0. */
static void stem_layers_isa(void)
{
    static const struct {
        conv_case c;
        int use_bias, want;
    } cases[] = {
        /* MobileNetV2's geometry on a smaller image: at 224x224 the plain
         * path's reference (one OpenBLAS sgemm of 12544 x 27 x 32) left
         * OpenBLAS 0.3 (Haswell kernels) to crash in a later small sgemm
         * under ASan (test_irb_fused), not without it */
        {{"MobileNetV2's Conv1 geometry: same stride 2, 3 -> 32 relu6, 56x60", "Conv2D",
          KC_CONV_PLAIN, 2, 1, 56, 60, 3, 32, 3, 2, 1, 1, 0, 0, "relu6", 1, 0}, 1, 1},
        {{"same stride 1, 1 -> 16 relu, two 13x17 images", "Conv2D", KC_CONV_PLAIN, 2, 2, 13, 17,
          1, 16, 3, 1, 1, 1, 0, 0, "relu", 1, 0}, 1, 1},
        {{"valid stride 2, 3 -> 32 linear, 31x29 (InceptionV3's stem)", "Conv2D", KC_CONV_PLAIN,
          2, 1, 31, 29, 3, 32, 3, 2, 1, 0, 0, 0, "linear", 1, 0}, 1, 1},
        {{"valid after a ZeroPadding of 1, stride 2, 4 -> 24 relu6, three 12x15 images", "Conv2D",
          KC_CONV_PLAIN, 2, 3, 12, 15, 4, 24, 3, 2, 1, 0, 1, 0, "relu6", 1, 0}, 1, 1},
        {{"same stride 2, 3 -> 48 tanh (applied after), 9x10", "Conv2D", KC_CONV_PLAIN, 2, 1, 9,
          10, 3, 48, 3, 2, 1, 1, 0, 0, "tanh", 1, 0}, 1, 1},
        {{"same stride 3, 2 -> 40 relu, no bias, 20x11", "Conv2D", KC_CONV_PLAIN, 2, 2, 20, 11, 2,
          40, 3, 3, 1, 1, 0, 0, "relu", 1, 0}, 0, 1},
        {{"valid (3, 2) kernel, 3 -> 16, 7x9", "Conv2D", KC_CONV_PLAIN, 2, 1, 7, 9, 3, 16, 3, 1, 1,
          0, 0, 0, "linear", 1, 2}, 1, 1},
        {{"1x1, 3 -> 16, 5x6", "Conv2D", KC_CONV_PLAIN, 2, 1, 5, 6, 3, 16, 1, 1, 1, 1, 0, 0,
          "relu", 1, 0}, 1, 1},
        /* kernels wider than 3x3: the wide loop (stem.h), rows padded */
        {{"7x7 stride 2 after a ZeroPadding of 3 (ResNet50's conv1)", "Conv2D", KC_CONV_PLAIN, 2, 1,
          32, 32, 3, 64, 7, 2, 1, 0, 3, 0, "relu", 1, 0}, 1, 1},
        {{"7x7 stride 2 same, 3 -> 128 relu6, two 23x19 images", "Conv2D", KC_CONV_PLAIN, 2, 2, 23,
          19, 3, 128, 7, 2, 1, 1, 0, 0, "relu6", 1, 0}, 1, 1},
        {{"5x5 same stride 1, 3 -> 40 (a vector and a half past 64), no bias, 9x14", "Conv2D",
          KC_CONV_PLAIN, 2, 1, 9, 14, 3, 40, 5, 1, 1, 1, 0, 0, "linear", 1, 0}, 0, 1},
        {{"11x11 valid stride 4, 3 -> 96 relu (AlexNet's), 39x43", "Conv2D", KC_CONV_PLAIN, 2, 1,
          39, 43, 3, 96, 11, 4, 1, 0, 0, 0, "relu", 1, 0}, 1, 1},
        {{"(7, 5) kernel valid stride 2, 1 -> 16 tanh (applied after), 15x12", "Conv2D",
          KC_CONV_PLAIN, 2, 1, 15, 12, 1, 16, 7, 2, 1, 0, 0, 0, "tanh", 1, 5}, 1, 1},
        {{"13x13: past the wide loop's 11", "Conv2D", KC_CONV_PLAIN, 2, 1, 20, 20, 3, 16, 13, 1, 1,
          1, 0, 0, "relu", 1, 0}, 1, 0},
        {{"5 input channels", "Conv2D", KC_CONV_PLAIN, 2, 1, 12, 12, 5, 32, 3, 1, 1, 1, 0, 0,
          "relu", 1, 0}, 1, 0},
        {{"8 filters", "Conv2D", KC_CONV_PLAIN, 2, 1, 12, 12, 3, 8, 3, 1, 1, 1, 0, 0, "relu", 1,
          0}, 1, 0},
        {{"dilation 2", "Conv2D", KC_CONV_PLAIN, 2, 1, 12, 12, 3, 16, 3, 1, 2, 1, 0, 0, "relu", 1,
          0}, 1, 0},
        {{"residual sum fused", "Conv2D", KC_CONV_PLAIN, 2, 1, 12, 12, 3, 16, 3, 1, 1, 1, 0, 1,
          "relu", 1, 0}, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const conv_case *c = &cases[i].c;
        conv_run r;
        setup_biased(c, cases[i].use_bias, &r);
        float *want = plain_output(&r);
        float *exact = malloc((size_t)r.out_count * sizeof *exact);
        float *got = malloc((size_t)r.out_count * sizeof *got);
        assert_non_null(exact);
        assert_non_null(got);
        stem_reference(c, &r, exact);
        expect_own_loop(c, &r, cases[i].want, want, exact, stem_owns, "stem", "tanh");
        const float *ins[1] = {r.x};
        if (cases[i].want) {
            setenv("KC_STEM", "0", 1);
            if (exec_kernel(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 0, 0, stem_owns))
                fail_msg("%s: on kerasc's stem loop with KC_STEM=0", c->what);
            setenv("KC_STEM", "1", 1); /* as test_stem_layers runs this */
            if (strcmp(c->act, "tanh"))
                own_whole_and_streamed(c, &r, exact, stem_owns, "stem");
        }
        free(want);
        free(exact);
        free(got);
        teardown(&r);
    }
}

/* KC_STEM=1 takes the loop on AVX2 too, so that both builds are checked;
 * by default it runs with AVX-512 only (its AVX2 build was slower than
 * oneDNN's there), and KC_ISA=avx2 leaves the layer to oneDNN. */
static void test_stem_layers(void **state)
{
    (void)state;
    if (!kc_dnnl_ready())
        skip();
    setenv("KC_STEM", "1", 1);
    each_isa(stem_layers_isa);
    unsetenv("KC_STEM");
    static const conv_case mobilenet = {"MobileNetV2's stem, by default", "Conv2D",
                                        KC_CONV_PLAIN, 2, 1, 24, 24, 3, 32, 3, 2, 1, 1, 0, 0,
                                        "relu6", 1, 0};
    conv_run r;
    setup(&mobilenet, &r);
    float *got = malloc((size_t)r.out_count * sizeof *got);
    assert_non_null(got);
    const float *ins[1] = {r.x};
    for (int level = KC_ISA_AVX512; level >= KC_ISA_AVX2; level--) {
        setenv("KC_ISA", kc_isa_name((kc_isa_level)level), 1);
        if (kc_isa() != (kc_isa_level)level)
            continue;
        int mine = exec_kernel(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 0, 0, stem_owns);
        if (mine != (level == KC_ISA_AVX512))
            fail_msg("%s, KC_ISA=%s: %s kerasc's stem loop", mobilenet.what,
                     kc_isa_name((kc_isa_level)level), mine ? "ran on" : "not on");
    }
    unsetenv("KC_ISA");
    free(got);
    teardown(&r);
}

/* ------------ convolutions with few output channels (kernels/narrow) */

static int narrow_owns(const kc_kernel_state *state) { return kc_narrow_owns(state); }

/* The sum narrow_simd.inc makes, in scalars: per output, each window row
 * inside the image a run of taps (column, input channel) whose i-th
 * product goes into lane i mod 16 by fmaf, the lanes added pairwise
 * (i + 8, + 4, + 2, + 1), then the bias, then relu / relu6 (others: the
 * caller's). Padding as TensorFlow's, from the case alone. */
static void narrow_reference(const conv_case *c, const conv_run *r, float *out)
{
    ref_window g = ref_window_of(c, r);
    const float *x = r->x, *w = r->weights[0].data;
    for (int64_t n = 0; n < c->n; n++)
        for (int64_t oy = 0; oy < g.out_h; oy++)
            for (int64_t ox = 0; ox < g.out_w; ox++)
                for (int64_t fo = 0; fo < c->f; fo++) {
                    float lane[16] = {0};
                    for (int64_t ky = 0; ky < g.kh; ky++) {
                        int64_t iy = oy * c->s - g.pad[0] + ky, i = 0;
                        if (iy < 0 || iy >= g.in_h)
                            continue;
                        for (int64_t kx = 0; kx < g.kw; kx++) {
                            int64_t ix = ox * c->s - g.pad[1] + kx;
                            if (ix < 0 || ix >= g.in_w)
                                continue;
                            for (int64_t ci = 0; ci < c->c; ci++, i++)
                                lane[i % 16] =
                                    fmaf(x[((n * g.in_h + iy) * g.in_w + ix) * c->c + ci],
                                         w[((ky * g.kw + kx) * c->c + ci) * c->f + fo],
                                         lane[i % 16]);
                        }
                    }
                    for (int half = 8; half >= 1; half /= 2)
                        for (int i = 0; i < half; i++)
                            lane[i] = lane[i] + lane[i + half];
                    out[((n * g.out_h + oy) * g.out_w + ox) * c->f + fo] =
                        ref_finish(c, r, lane[0], fo);
                }
}

/* A plain 2-D convolution of at most 8 output channels runs on kerasc's
 * own loop (narrow.c) with AVX-512 and with AVX2 (there up to 4), 1 to 3 threads: the
 * denoising autoencoder's 32 -> 1 head, "same" and "valid", strides 1 to
 * 3, a folded ZeroPadding, window rows longer and shorter than 16 taps
 * and not a multiple of them (masked tails), 1 to 8 channels (blocks of 4
 * and the rest), a (3, 2) and a 1x1 kernel, images narrower than the
 * kernel's reach, no bias, an activation applied after (sigmoid). Its
 * outputs within the fidelity tolerance of the plain path and, but for
 * sigmoid, equal to the scalar sum in its order (narrow_reference): the
 * same bits on any threads and instruction set, under the residency
 * manager and with streamed weights too. Not 16 channels, dilation, a
 * fused sum or KC_NARROW=0. */
static void narrow_layers_isa(void)
{
    static const struct {
        conv_case c;
        int use_bias, want;
    } cases[] = {
        {{"same 3x3, 32 -> 1 linear (the denoiser's head), 40x36", "Conv2D", KC_CONV_PLAIN, 2, 1,
          40, 36, 32, 1, 3, 1, 1, 1, 0, 0, "linear", 1, 0}, 1, 1},
        {{"same 3x3, 64 -> 3 sigmoid (applied after), two 13x17 images", "Conv2D", KC_CONV_PLAIN,
          2, 2, 13, 17, 64, 3, 3, 1, 1, 1, 0, 0, "sigmoid", 1, 0}, 1, 1},
        {{"valid 5x5 stride 2, 17 -> 8 relu, 23x21", "Conv2D", KC_CONV_PLAIN, 2, 1, 23, 21, 17, 8,
          5, 2, 1, 0, 0, 0, "relu", 1, 0}, 1, 1},
        {{"valid after a ZeroPadding of 1, stride 3, 5 -> 6 relu6, 19x14", "Conv2D",
          KC_CONV_PLAIN, 2, 1, 19, 14, 5, 6, 3, 3, 1, 0, 1, 0, "relu6", 1, 0}, 1, 1},
        {{"same (3, 2) kernel, 3 -> 2, no bias, 9x11", "Conv2D", KC_CONV_PLAIN, 2, 3, 9, 11, 3, 2,
          3, 1, 1, 1, 0, 0, "linear", 1, 2}, 0, 1},
        {{"1x1, 48 -> 5, 6x7", "Conv2D", KC_CONV_PLAIN, 2, 1, 6, 7, 48, 5, 1, 1, 1, 1, 0, 0,
          "relu", 1, 0}, 1, 1},
        {{"same 7x7 on a 3x2 image, 16 -> 1", "Conv2D", KC_CONV_PLAIN, 2, 1, 3, 2, 16, 1, 7, 1, 1,
          1, 0, 0, "linear", 1, 0}, 1, 1},
        {{"16 output channels", "Conv2D", KC_CONV_PLAIN, 2, 1, 12, 12, 8, 16, 3, 1, 1, 1, 0, 0,
          "relu", 1, 0}, 1, 0},
        {{"dilation 2", "Conv2D", KC_CONV_PLAIN, 2, 1, 12, 12, 8, 1, 3, 1, 2, 1, 0, 0, "relu", 1,
          0}, 1, 0},
        {{"residual sum fused", "Conv2D", KC_CONV_PLAIN, 2, 1, 12, 12, 8, 1, 3, 1, 1, 1, 0, 1,
          "relu", 1, 0}, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const conv_case *c = &cases[i].c;
        conv_run r;
        setup_biased(c, cases[i].use_bias, &r);
        float *want = plain_output(&r);
        float *exact = malloc((size_t)r.out_count * sizeof *exact);
        float *got = malloc((size_t)r.out_count * sizeof *got);
        assert_non_null(exact);
        assert_non_null(got);
        narrow_reference(c, &r, exact);
        int takes = cases[i].want && (c->f <= 4 || kc_isa() == KC_ISA_AVX512);
        expect_own_loop(c, &r, takes, want, exact, narrow_owns, "narrow", "sigmoid");
        const float *ins[1] = {r.x};
        if (takes) {
            setenv("KC_NARROW", "0", 1);
            if (exec_kernel(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 0, 0, narrow_owns))
                fail_msg("%s: on kerasc's narrow loop with KC_NARROW=0", c->what);
            unsetenv("KC_NARROW");
            if (strcmp(c->act, "sigmoid"))
                own_whole_and_streamed(c, &r, exact, narrow_owns, "narrow");
        }
        free(want);
        free(exact);
        free(got);
        teardown(&r);
    }
}

static void test_narrow_layers(void **state)
{
    (void)state;
    if (!kc_dnnl_ready())
        skip();
    each_isa(narrow_layers_isa);
}

/* ----------------- 3x3 stride-1 depthwise convolutions (kernels/dw) */

/* A layer of kerasc's own depthwise loop: its state (kc_dw_owns) or not. */
static int dw_own_parts(const kc_kernel_state *state) { return kc_dw_owns(state); }

/* r's layer on `threads` threads into got; 1 when kerasc's own
 * depthwise loop ran it. */
static int run_dw(conv_run *r, int threads, float *got)
{
    const float *ins[1] = {r->x};
    kc_threads_enter(threads);
    return exec_kernel(&r->layer, ins, &r->in_shape, 1, got, &r->out_shape, 0, 0, dw_own_parts);
}

/* Where oneDNN runs without AVX-512, a 3x3 stride-1 depthwise layer of
 * 8k channels on an image of 12+ columns runs on kerasc's own loop
 * (MobileNetV2's stride-1 depthwise layers): "same", "valid", a folded
 * ZeroPadding of 1, one or two
 * or an odd number of rows (rows without a partner), 8 channels past the
 * last 16, several images cut across, relu / relu6 / linear / an
 * activation applied after (tanh), no bias. On 1, 2, 3 and 5 threads its
 * output equals oneDNN's bit for bit (the same sums in the same order)
 * and the plain path's within the fidelity tolerance. Not a stride-2,
 * dilated, 5x5, depth-multiplier-2 or summing layer, 12 channels, a
 * 7x7 image or a wider folded ZeroPadding (3: oneDNN sums those layers
 * in another order); nor with KC_DW=0 or under the residency manager
 * (ctx->whole). */
static void test_dw_layers(void **state)
{
    (void)state;
    static const struct {
        conv_case c;
        int use_bias, want;
    } cases[] = {
        {{"same relu6, one 56x56x144 image (MobileNetV2's block_2)", "DepthwiseConv2D",
          KC_CONV_DEPTHWISE, 2, 1, 56, 56, 144, 1, 3, 1, 1, 1, 0, 0, "relu6", 1}, 1, 1},
        {{"same relu, three 14x14x24 images", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 3, 14, 14,
          24, 1, 3, 1, 1, 1, 0, 0, "relu", 1}, 1, 1},
        {{"same linear, no bias, 13x12x16 (an odd row)", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2,
          1, 13, 12, 16, 1, 3, 1, 1, 1, 0, 0, "linear", 1}, 0, 1},
        {{"valid after a ZeroPadding of 1, 12x15x8", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 2,
          12, 15, 8, 1, 3, 1, 1, 0, 1, 0, "relu6", 1}, 1, 1},
        {{"valid after a ZeroPadding of 3, 12x12x40", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 1,
          12, 12, 40, 1, 3, 1, 1, 0, 3, 0, "relu", 1}, 1, 0},
        {{"valid, 16x16x32", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 1, 16, 16, 32, 1, 3, 1, 1, 0,
          0, 0, "relu6", 1}, 1, 1},
        {{"same tanh (applied after), 12x21x16", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 1, 12,
          21, 16, 1, 3, 1, 1, 1, 0, 0, "tanh", 1}, 1, 1},
        {{"same, one row of 20x16", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 2, 1, 20, 16, 1, 3,
          1, 1, 1, 0, 0, "relu6", 1}, 1, 1},
        {{"same, two rows of 14x8", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 1, 2, 14, 8, 1, 3, 1,
          1, 1, 0, 0, "relu", 1}, 1, 1},
        {{"7x7x960 same (too narrow)", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 1, 7, 7, 960, 1,
          3, 1, 1, 1, 0, 0, "relu6", 1}, 1, 0},
        {{"stride 2, 16x16x32", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 1, 16, 16, 32, 1, 3, 2,
          1, 1, 0, 0, "relu6", 1}, 1, 0},
        {{"12 channels", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 1, 14, 14, 12, 1, 3, 1, 1, 1, 0,
          0, "relu6", 1}, 1, 0},
        {{"5x5", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 1, 14, 14, 16, 1, 5, 1, 1, 1, 0, 0,
          "relu6", 1}, 1, 0},
        {{"dilation 2", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 1, 14, 14, 16, 1, 3, 1, 2, 1, 0,
          0, "relu6", 1}, 1, 0},
        {{"depth multiplier 2", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 1, 14, 14, 16, 2, 3, 1,
          1, 1, 0, 0, "relu6", 1}, 1, 0},
        {{"residual sum fused", "DepthwiseConv2D", KC_CONV_DEPTHWISE, 2, 1, 14, 14, 16, 1, 3, 1, 1,
          1, 0, 1, "relu6", 1}, 1, 0},
    };
    if (!kc_dnnl_ready())
        skip();
    int own = kc_isa() == KC_ISA_AVX2 && !kc_dnnl_avx512();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const conv_case *c = &cases[i].c;
        conv_run r;
        setup_biased(c, cases[i].use_bias, &r);
        float *want = plain_output(&r);
        float peak = peak_of(want, r.out_count);
        float *got = malloc((size_t)r.out_count * sizeof *got);
        float *onednn = malloc((size_t)r.out_count * sizeof *onednn);
        static const int threads[] = {1, 2, 3, 5};
        for (int t = 0; t < 4; t++) {
            if (r.residual) {
                memcpy(got, r.residual, (size_t)r.out_count * sizeof *got);
                memcpy(onednn, r.residual, (size_t)r.out_count * sizeof *got);
            }
            int mine = run_dw(&r, threads[t], got);
            if (mine != (own && cases[i].want))
                fail_msg("%s, %d threads: %s kerasc's depthwise loop", c->what, threads[t],
                         mine ? "ran on" : "not on");
            expect_close(got, want, r.out_count, 1e-4f * peak, "%s, %d threads", c->what,
                         threads[t]);
            setenv("KC_DW", "0", 1);
            if (run_dw(&r, threads[t], onednn))
                fail_msg("%s: on kerasc's depthwise loop with KC_DW=0", c->what);
            unsetenv("KC_DW");
            if (mine && memcmp(got, onednn, (size_t)r.out_count * sizeof *got))
                expect_close(got, onednn, r.out_count, 0.0f, "%s, %d threads, against oneDNN",
                             c->what, threads[t]);
            const float *ins[1] = {r.x};
            if (exec_kernel(&r.layer, ins, &r.in_shape, 1, onednn, &r.out_shape, 0, 1,
                            dw_own_parts))
                fail_msg("%s: on kerasc's depthwise loop under the residency manager", c->what);
        }
        /* a node's state of this kernel, then a run under the residency
         * manager: oneDNN's kernel takes over the slot (a regression: the
         * state stayed and oneDNN read it as its own) */
        if (own && cases[i].want && !r.residual) {
            kc_kernel_state *slot = NULL;
            const float *ins[1] = {r.x};
            kc_threads_enter(2);
            exec_in_slot(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 0, 0, &slot);
            assert_true(kc_dw_owns(slot));
            exec_in_slot(&r.layer, ins, &r.in_shape, 1, onednn, &r.out_shape, 0, 1, &slot);
            if (kc_dw_owns(slot))
                fail_msg("%s: kerasc's depthwise state kept under the residency manager", c->what);
            expect_close(onednn, got, r.out_count, 0.0f, "%s, whole after own", c->what);
            if (slot)
                slot->free(slot);
        }
        kc_threads_enter(0);
        free(want);
        free(got);
        free(onednn);
        teardown(&r);
    }
}

static void test_conv1d_cuts(void **state)
{
    (void)state;
    static const conv_case cases[] = {
        {"Conv1D causal dilation 2", "Conv1D", KC_CONV_PLAIN, 1, 1, 1, 40, 3, 4, 3, 1, 2, 2, 0, 0,
         NULL, 0},
        {"Conv1D same s3", "Conv1D", KC_CONV_PLAIN, 1, 1, 1, 60, 3, 4, 4, 3, 1, 1, 0, 0, "relu"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i]);
}

/* kerasc's own Winograd (kernels/wino.c), 1-D. First the transforms themselves, in
 * double: at · ((g · w) ⊙ (bt · d)) must be the correlation of d with w
 * for every tile the kernel may pick. */
static void test_wino_transforms(void **state)
{
    (void)state;
    for (int r = 3; r <= 7; r++)
        for (int m = 2; m + r - 1 <= 10; m++) {
            int alpha = m + r - 1;
            double at[12 * 12], g[12 * 12], bt[12 * 12], d[12], w[12], gw[12], btd[12];
            assert_int_equal(kc_wino_transforms(m, r, at, g, bt), 0);
            for (int i = 0; i < alpha; i++)
                d[i] = rnd();
            for (int k = 0; k < r; k++)
                w[k] = rnd();
            for (int x = 0; x < alpha; x++) {
                gw[x] = btd[x] = 0.0;
                for (int k = 0; k < r; k++)
                    gw[x] += g[x * r + k] * w[k];
                for (int j = 0; j < alpha; j++)
                    btd[x] += bt[x * alpha + j] * d[j];
            }
            for (int i = 0; i < m; i++) {
                double y = 0.0, want = 0.0;
                for (int x = 0; x < alpha; x++)
                    y += at[i * alpha + x] * gw[x] * btd[x];
                for (int k = 0; k < r; k++)
                    want += d[i + k] * w[k];
                if (fabs(y - want) > 1e-9)
                    fail_msg("F(%d, %d) output %d: %.12g, want %.12g", m, r, i, y, want);
            }
        }
    double at[12 * 12], g[12 * 12], bt[12 * 12];
    assert_int_not_equal(kc_wino_transforms(8, 7, at, g, bt), 0); /* alpha 14: too many */
}

typedef struct w1_case {
    const char *what;
    int spatial, axis;          /* the kernel's spatial axis */
    int64_t n, h, w, c, f, k;   /* h unused for Conv1D */
    int padding;
    const char *act;
    int want_tile;              /* the tile m kc_wino_conv picks, 0: none */
} w1_case;

static void w1_setup(const w1_case *c, conv_run *r)
{
    memset(r, 0, sizeof *r);
    kc_conv_attrs *a = &r->a;
    a->kind = KC_CONV_PLAIN;
    a->spatial = c->spatial;
    a->filters = c->f;
    a->depth_multiplier = 1;
    a->groups = 1;
    a->padding = c->padding;
    a->use_bias = 1;
    a->activation = c->act;
    int64_t sp_in[2] = {c->spatial == 2 ? c->h : c->w, c->w}, xn = c->n * c->c, on = c->n * c->f;
    r->in_shape.rank = r->out_shape.rank = c->spatial + 2;
    r->in_shape.dims[0] = r->out_shape.dims[0] = c->n;
    for (int i = 0; i < 3; i++) {
        a->kernel[i] = i == c->axis ? c->k : 1;
        a->strides[i] = a->dilation[i] = 1;
        a->output_padding[i] = -1;
    }
    for (int i = 0; i < c->spatial; i++) {
        int64_t len = sp_in[i], out = i == c->axis && c->padding == 0 ? len - c->k + 1 : len;
        r->in_shape.dims[1 + i] = len;
        r->out_shape.dims[1 + i] = out;
        xn *= len;
        on *= out;
    }
    r->in_shape.dims[c->spatial + 1] = c->c;
    r->out_shape.dims[c->spatial + 1] = c->f;
    r->x = rand_buf(xn);
    r->out_count = on;
    r->weights[0].data = rand_buf(c->k * c->c * c->f);
    r->weights[1].data = rand_buf(c->f);
    r->layer.name = (char *)c->what;
    r->layer.class_name = c->spatial == 1 ? "Conv1D" : "Conv2D";
    r->layer.def = kc_op_lookup(NULL, r->layer.class_name);
    r->layer.attrs = a;
    r->layer.weights = r->weights;
    r->layer.n_weights = 2;
}

static int w1_run(conv_run *r, int exact, float *out)
{
    const float *ins[1] = {r->x};
    return exec_kernel(&r->layer, ins, &r->in_shape, 1, out, &r->out_shape, exact, 0,
                       kc_wino_tile);
}

/* Then the kernel: on (1, 7), (7, 1), (1, 3) and Conv1D layers, with
 * "same", "valid" and causal padding, channel counts that are not a
 * multiple of 16, partial last tiles, the activations it runs itself and
 * one it leaves to the caller (elu), on 1, 2 and 3 threads, it must take
 * the tile expected and equal the plain im2col + GEMM path within the
 * fidelity tolerance; --exact and KC_WINO1D=0 must keep it out, and so
 * must an image of under 100 outputs or a layer of under 32 channels.
 * Its products (kerasc's own since 12-05) give the bits of oneDNN's
 * batched matmul (KC_WINO_OWN=0), which they replaced, where oneDNN runs
 * with AVX-512. */
static void wino1d_layers_isa(void)
{
    static const w1_case cases[] = {
        {"(1, 7) 128 -> 160 same on 17x17", 2, 1, 1, 17, 17, 128, 160, 7, 1, "relu", 4},
        {"(7, 1) 160 -> 192 same on two 17x17", 2, 0, 2, 17, 17, 160, 192, 7, 1, NULL, 4},
        {"(1, 3) 40 -> 56 valid on 12x14", 2, 1, 1, 12, 14, 40, 56, 3, 0, "relu6", 6},
        {"(5, 1) 48 -> 33 same on 23x9, elu", 2, 0, 1, 23, 9, 48, 33, 5, 1, "elu", 4},
        {"Conv1D k7 64 -> 48 causal, 150 long", 1, 0, 3, 0, 150, 64, 48, 7, 2, "relu", 4},
        {"(1, 3) 384 -> 384 on 8x8: too few outputs", 2, 1, 1, 8, 8, 384, 384, 3, 1, "relu", 0},
        {"(1, 7) 16 -> 160 on 17x17: too few channels", 2, 1, 1, 17, 17, 16, 160, 7, 1, NULL, 0},
    };
    if (!kc_dnnl_ready())
        skip();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const w1_case *c = &cases[i];
        conv_run r;
        w1_setup(c, &r);
        float *want = malloc((size_t)r.out_count * sizeof *want);
        float *got = malloc((size_t)r.out_count * sizeof *got);
        setenv("KC_DNNL", "0", 1);
        kc_threads_enter(1);
        assert_int_equal(w1_run(&r, 1, want), 0);
        unsetenv("KC_DNNL");
        float peak = peak_of(want, r.out_count);
        static const int threads[] = {1, 2, 3};
        for (int t = 0; t < 3; t++) {
            kc_threads_enter(threads[t]);
            int tile = w1_run(&r, 0, got);
            if (tile != c->want_tile)
                fail_msg("%s, %d threads: tile %d, expected %d", c->what, threads[t], tile,
                         c->want_tile);
            expect_close(got, want, r.out_count, 1e-4f * peak, "%s, %d threads", c->what,
                         threads[t]);
        }
        kc_threads_enter(2);
        if (c->want_tile && kc_dnnl_avx512()) {
            float *onednn = malloc((size_t)r.out_count * sizeof *onednn);
            w1_run(&r, 0, got);
            setenv("KC_WINO_OWN", "0", 1);
            if (w1_run(&r, 0, onednn) != c->want_tile)
                fail_msg("%s: no 1-D Winograd with KC_WINO_OWN=0", c->what);
            unsetenv("KC_WINO_OWN");
            if (memcmp(got, onednn, (size_t)r.out_count * sizeof *got))
                fail_msg("%s: kerasc's products differ from oneDNN's batched matmul", c->what);
            free(onednn);
        }
        if (w1_run(&r, 1, got) != 0)
            fail_msg("%s: 1-D Winograd although exact", c->what);
        setenv("KC_WINO1D", "0", 1);
        if (w1_run(&r, 0, got) != 0)
            fail_msg("%s: 1-D Winograd although KC_WINO1D=0", c->what);
        unsetenv("KC_WINO1D");
        expect_close(got, want, r.out_count, 1e-4f * peak, "%s, direct", c->what);
        kc_threads_enter(0);
        free(want);
        free(got);
        teardown(&r);
    }
}

static void test_wino1d_layers(void **state)
{
    (void)state;
    each_isa(wino1d_layers_isa);
}

/* One state slot across runs that change hands: a layer run with
 * kerasc's Winograd, then exact (oneDNN's direct kernel must not read the
 * Winograd state as its own: kc_wino_conv drops it), then not exact
 * again; each run must equal the plain path. */
static void wino_state_handover_isa(void)
{
    static const w1_case c = {"(1, 7) 128 -> 160 same on 17x17", 2, 1, 1, 17, 17, 128, 160, 7, 1,
                              "relu", 4};
    if (!kc_dnnl_ready())
        skip();
    conv_run r;
    w1_setup(&c, &r);
    float *want = malloc((size_t)r.out_count * sizeof *want);
    float *got = malloc((size_t)r.out_count * sizeof *got);
    setenv("KC_DNNL", "0", 1);
    kc_threads_enter(1);
    w1_run(&r, 1, want);
    unsetenv("KC_DNNL");
    float peak = peak_of(want, r.out_count);
    kc_threads_enter(2);
    kc_kernel_state *slot = NULL;
    const float *ins[1] = {r.x};
    static const int exact[3] = {0, 1, 0};
    for (int i = 0; i < 3; i++) {
        memset(got, 0, (size_t)r.out_count * sizeof *got);
        exec_in_slot(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, exact[i], 0, &slot);
        /* run 2 may stay on oneDNN (its state is the slot's now; a
         * session's exact never changes): the output is what matters */
        if (i < 2 &&
            ((kc_wino_tile(slot) != 0) == exact[i] || (kc_dnnl_conv_parts(slot) > 0) != exact[i]))
            fail_msg("run %d (exact %d): the wrong kernel's state", i, exact[i]);
        expect_close(got, want, r.out_count, 1e-4f * peak, "run %d (exact %d)", i, exact[i]);
    }
    slot->free(slot);
    kc_threads_enter(0);
    free(want);
    free(got);
    teardown(&r);
}

static void test_wino_state_handover(void **state)
{
    (void)state;
    each_isa(wino_state_handover_isa);
}

/* 2-D, F(4x4, 3x3) and F(2x2, 5x5): "same" and "valid", partial tiles at
 * the right and bottom edges, channels that are not a multiple of 16,
 * relu6 and elu, 1 to 3 threads, with the own products and with oneDNN's
 * (KC_WINO_OWN=0, the state built again each time: the states differ),
 * against the plain path, also 32 -> 64 (oneDNN would run it direct) and
 * 64 -> 64 (oneDNN's F(4x4) was slower); 16 channels, under 512 outputs
 * an image, stride 2, --exact and KC_WINO2D=0 keep it out. */
static void wino2d_layers_isa(void)
{
    static const conv_case cases[] = {
        {"3x3 80 -> 192 same on 26x26", "Conv2D", KC_CONV_PLAIN, 2, 1, 26, 26, 80, 192, 3, 1, 1,
         1, 0, 0, "relu", 1},
        {"3x3 96 -> 96 valid on two 30x30", "Conv2D", KC_CONV_PLAIN, 2, 2, 30, 30, 96, 96, 3, 1,
         1, 0, 0, 0, NULL, 1},
        {"3x3 72 -> 88 same on 25x23, relu6", "Conv2D", KC_CONV_PLAIN, 2, 1, 25, 23, 72, 88, 3,
         1, 1, 1, 0, 0, "relu6", 1},
        {"3x3 96 -> 80 same on 24x24, elu", "Conv2D", KC_CONV_PLAIN, 2, 1, 24, 24, 96, 80, 3, 1,
         1, 1, 0, 0, "elu", 1},
        {"3x3 32 -> 64 valid on 40x40", "Conv2D", KC_CONV_PLAIN, 2, 1, 40, 40, 32, 64, 3, 1, 1,
         0, 0, 0, "relu", 1},
        {"5x5 48 -> 64 same on 35x35", "Conv2D", KC_CONV_PLAIN, 2, 1, 35, 35, 48, 64, 5, 1, 1, 1,
         0, 0, "relu", 1},
        {"5x5 40 -> 56 valid on two 29x27, relu6", "Conv2D", KC_CONV_PLAIN, 2, 2, 29, 27, 40,
         56, 5, 1, 1, 0, 0, 0, "relu6", 1},
        {"3x3 64 -> 64 same on 32x32", "Conv2D", KC_CONV_PLAIN, 2, 1, 32, 32, 64, 64, 3, 1, 1, 1,
         0, 0, "relu", 1},
        {"3x3 16 -> 64 same on 32x32", "Conv2D", KC_CONV_PLAIN, 2, 1, 32, 32, 16, 64, 3, 1, 1, 1,
         0, 0, "relu", 1},
        {"3x3 128 -> 128 same on 20x20", "Conv2D", KC_CONV_PLAIN, 2, 1, 20, 20, 128, 128, 3, 1,
         1, 1, 0, 0, "relu", 1},
        {"3x3 128 -> 128 same stride 2 on 64x64", "Conv2D", KC_CONV_PLAIN, 2, 1, 64, 64, 128,
         128, 3, 2, 1, 1, 0, 0, "relu", 1},
    };
    static const int want_dims[] = {2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0};
    if (!kc_dnnl_ready())
        skip();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const conv_case *c = &cases[i];
        conv_run r;
        setup(c, &r);
        const float *ins[1] = {r.x};
        float *want = malloc((size_t)r.out_count * sizeof *want);
        float *got = malloc((size_t)r.out_count * sizeof *got);
        setenv("KC_DNNL", "0", 1);
        kc_threads_enter(1);
        exec_kernel(&r.layer, ins, &r.in_shape, 1, want, &r.out_shape, 1, 0, NULL);
        unsetenv("KC_DNNL");
        float peak = peak_of(want, r.out_count);
        for (int t = 1; t <= 3; t++) {
            kc_threads_enter(t);
            int dims = exec_kernel(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 0, 0,
                                   kc_wino_dims);
            if (dims != want_dims[i])
                fail_msg("%s, %d threads: Winograd on %d axes, expected %d", c->what, t, dims,
                         want_dims[i]);
            expect_close(got, want, r.out_count, 1e-4f * peak, "%s, %d threads", c->what, t);
            int own = exec_kernel(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 0, 0,
                                  kc_wino_own);
            if (own != (want_dims[i] == 2))
                fail_msg("%s, %d threads: own products %d", c->what, t, own);
            setenv("KC_WINO_OWN", "0", 1); /* oneDNN's batched matmul */
            own = exec_kernel(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 0, 0,
                              kc_wino_own);
            unsetenv("KC_WINO_OWN");
            if (own)
                fail_msg("%s, %d threads: own products although KC_WINO_OWN=0", c->what, t);
            expect_close(got, want, r.out_count, 1e-4f * peak, "%s, %d threads, KC_WINO_OWN=0",
                         c->what, t);
        }
        kc_threads_enter(2);
        if (exec_kernel(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 1, 0, kc_wino_dims))
            fail_msg("%s: kerasc's Winograd although exact", c->what);
        setenv("KC_WINO2D", "0", 1);
        if (exec_kernel(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 0, 0, kc_wino_dims))
            fail_msg("%s: kerasc's Winograd although KC_WINO2D=0", c->what);
        unsetenv("KC_WINO2D");
        expect_close(got, want, r.out_count, 1e-4f * peak, "%s, other kernels", c->what);
        setenv("KC_WINO1D", "0", 1); /* the 1-D kind's switch: not this one's */
        int dims = exec_kernel(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 0, 0,
                               kc_wino_dims);
        unsetenv("KC_WINO1D");
        if (dims != want_dims[i])
            fail_msg("%s, KC_WINO1D=0: Winograd on %d axes, expected %d", c->what, dims,
                     want_dims[i]);
        kc_threads_enter(0);
        free(want);
        free(got);
        teardown(&r);
    }
}

static void test_wino2d_layers(void **state)
{
    (void)state;
    each_isa(wino2d_layers_isa);
}

/* r's layer on `threads` threads into got (holding r's residual first,
 * when it sums one): what count_of reads from its state (`counted`, e.g.
 * "parts") must be `expected`, the outputs within the fidelity tolerance
 * of want's. */
static void expect_count_close(conv_run *r, const float *want, float *got, float peak,
                               int threads, int (*count_of)(const kc_kernel_state *),
                               int expected, const char *counted, const char *what)
{
    const float *ins[1] = {r->x};
    kc_threads_enter(threads);
    if (r->residual)
        memcpy(got, r->residual, (size_t)r->out_count * sizeof *got);
    int count = exec_kernel(&r->layer, ins, &r->in_shape, 1, got, &r->out_shape, 0, 0, count_of);
    if (count != expected)
        fail_msg("%s, %d threads: %d %s, expected %d", what, threads, count, counted, expected);
    expect_close(got, want, r->out_count, 1e-4f * peak, "%s, %d threads", what, threads);
}

/* Every cut of b as far toward the first parts as it goes: each part but
 * the last at its least units, the last with the rest (where a slow
 * first thread would have sent them). */
static void skew_cut(kc_balance *b)
{
    for (int k = 1; k < b->parts; k++)
        b->lo[k] = b->min_units * k;
}

/* r's layer on `threads` threads twice on one state, the second time cut
 * where skew_cut puts it (the state's kc_balance, read by balance_of):
 * both outputs within the fidelity tolerance of want's. */
static void expect_skewed_close(conv_run *r, const float *want, float *got, float peak,
                                int threads, kc_balance *(*balance_of)(kc_kernel_state *),
                                const char *what)
{
    const float *ins[1] = {r->x};
    kc_kernel_state *state = NULL;
    kc_threads_enter(threads);
    for (int round = 0; round < 2; round++) {
        if (r->residual)
            memcpy(got, r->residual, (size_t)r->out_count * sizeof *got);
        exec_in_slot(&r->layer, ins, &r->in_shape, 1, got, &r->out_shape, 0, 0, &state);
        expect_close(got, want, r->out_count, 1e-4f * peak, "%s, %d threads%s", what, threads,
                     round ? ", skewed cut" : "");
        kc_balance *b = balance_of(state);
        if (!b)
            fail_msg("%s, %d threads: no cut", what, threads);
        if (!round)
            skew_cut(b);
    }
    state->free(state);
}

/* r's layer on 1, 2 and 3 threads: parts_of's count of its state must be
 * want[t - 1] (expect_count_close), and where it has 2+ parts the run
 * again with the cut skewed (expect_skewed_close). */
static void expect_parts_1_to_3(conv_run *r, const float *want, float *got, float peak,
                                int (*parts_of)(const kc_kernel_state *),
                                kc_balance *(*balance_of)(kc_kernel_state *),
                                const int want_parts[3], const char *what)
{
    for (int t = 1; t <= 3; t++) {
        expect_count_close(r, want, got, peak, t, parts_of, want_parts[t - 1], "parts", what);
        if (want_parts[t - 1] > 1)
            expect_skewed_close(r, want, got, peak, t, balance_of, what);
    }
}

/* 1 where a Winograd state's block rows are a multiple of 4 KB apart
 * (every row a transform writes at once in one cache set), else 0. */
static int rows_in_one_cache_set(const kc_kernel_state *state)
{
    return kc_wino_row_floats(state) % 1024 == 0;
}

/* A transformed kernel larger than the L2-sized block (128 -> 128: 2.4
 * MB) sets the block size instead: ResNet50's 28x28 layers run each
 * part's tiles in one block, reading that kernel once rather than once
 * per block; a narrow layer keeps L2-sized blocks. Outputs as the plain
 * path's either way. */
static void wino2d_blocks_isa(void)
{
    static const conv_case cases[] = {
        {"3x3 128 -> 128 same on 28x28", "Conv2D", KC_CONV_PLAIN, 2, 1, 28, 28, 128, 128, 3, 1,
         1, 1, 0, 0, "relu", 1},
        {"3x3 32 -> 64 same on 64x64", "Conv2D", KC_CONV_PLAIN, 2, 1, 64, 64, 32, 64, 3, 1, 1,
         1, 0, 0, "relu", 1},
        {"3x3 128 -> 128 same on 32x32", "Conv2D", KC_CONV_PLAIN, 2, 1, 32, 32, 128, 128, 3, 1,
         1, 1, 0, 0, "relu", 1},
    };
    /* 1 and 2 threads: 49 and 25 tiles a part (128 channels); 256 and
     * 128 (32 -> 64, 36 x 96 floats a tile: 53 a block); 64 and 32 (one
     * block each: rows of 64 x 128 and 40 x 128 floats, multiples of 4
     * KB, kept a cache line more apart: wino.c's kc_w1_ldv) */
    static const int want_blocks[3][2] = {{1, 1}, {5, 3}, {1, 1}};
    if (!kc_dnnl_ready())
        skip();
    setenv("KC_BALANCE", "0", 1); /* the even cut stays */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        conv_run r;
        setup(&cases[i], &r);
        float *want = plain_output(&r);
        float *got = malloc((size_t)r.out_count * sizeof *got);
        float peak = peak_of(want, r.out_count);
        for (int t = 1; t <= 2; t++) {
            expect_count_close(&r, want, got, peak, t, kc_wino_blocks, want_blocks[i][t - 1],
                               "blocks", cases[i].what);
            expect_count_close(&r, want, got, peak, t, rows_in_one_cache_set, 0,
                               "(rows a multiple of 4 KB apart)", cases[i].what);
        }
        kc_threads_enter(0);
        free(want);
        free(got);
        teardown(&r);
    }
    unsetenv("KC_BALANCE");
}

/* kc_wino_simd's product with its rows fetched ahead (KC_WINO2D_ROWS_AHEAD,
 * after) and without, a run of lines fetched spread or in a lead
 * (KC_WINO2D_LINES_LEAD; more lines than two a step, and fewer): the same
 * bits, and the sums right, for block counts of one to four, rows that
 * start mid-line, with and without a next call's rows, on each
 * instruction set; KC_WINO_FETCH_ROWS=0 turns the fetch off. */
static void wino_product_fetch_isa(void)
{
    const kc_wino_simd *simd = kc_wino_simd_pick();
    assert_non_null(simd);
    static const int64_t tile_counts[] = {1, 5, 8, 16, 25};
    static const int64_t depths[] = {7, 64};
    for (size_t ti = 0; ti < sizeof tile_counts / sizeof *tile_counts; ti++)
        for (size_t di = 0; di < sizeof depths / sizeof *depths; di++)
            for (int nv = 1; nv <= KC_WINO2D_NV; nv++) {
                int64_t tiles = tile_counts[ti], k = depths[di], lda = k + 3, width = 16 * nv;
                float *a = rand_buf(tiles * lda), *after = rand_buf(tiles * lda);
                float *b = rand_buf(k * width);
                float *plain = calloc((size_t)(tiles * width), sizeof *plain);
                float *fetched = calloc((size_t)(tiles * width), sizeof *fetched);
                assert_non_null(plain);
                assert_non_null(fetched);
                kc_wino2d_lines none = {NULL, 0};
                simd->product(a + 1, lda, b, k, plain, width, tiles, nv, 1, none, 0, NULL);
                for (int with_after = 0; with_after < 2; with_after++) {
                    memset(fetched, 0, (size_t)(tiles * width) * sizeof *fetched);
                    simd->product(a + 1, lda, b, k, fetched, width, tiles, nv, 1, none,
                                  KC_WINO2D_ROWS_AHEAD, with_after ? after + 1 : NULL);
                    assert_memory_equal(plain, fetched, (size_t)(tiles * width) * sizeof *plain);
                }
                /* the lines of `after` as the run: 5 x k of them (more than
                 * two a step) and k / 2 */
                for (int lines = 0; lines < 2; lines++)
                    for (int flags = 0; flags < 4; flags++) {
                        kc_wino2d_lines run = {(const char *)after, lines ? k / 2 : 5 * k};
                        if (run.n * 64 > tiles * lda * (int64_t)sizeof(float))
                            run.n = tiles * lda * (int64_t)sizeof(float) / 64;
                        memset(fetched, 0, (size_t)(tiles * width) * sizeof *fetched);
                        simd->product(a + 1, lda, b, k, fetched, width, tiles, nv, 1, run, flags,
                                      after + 1);
                        assert_memory_equal(plain, fetched,
                                            (size_t)(tiles * width) * sizeof *plain);
                    }
                for (int64_t t = 0; t < tiles; t++)
                    for (int64_t f = 0; f < width; f++) {
                        double want = 0.0;
                        for (int64_t kk = 0; kk < k; kk++)
                            want += (double)a[1 + t * lda + kk] * b[kk * width + f];
                        if (fabs(plain[t * width + f] - want) > 1e-4 * (1.0 + fabs(want)))
                            fail_msg("%s: %lld tiles, k %lld, nv %d: tile %lld channel %lld "
                                     "%g, want %g", simd->name, (long long)tiles, (long long)k, nv,
                                     (long long)t, (long long)f, plain[t * width + f], want);
                    }
                free(a);
                free(after);
                free(b);
                free(plain);
                free(fetched);
            }
}

/* kc_wino_simd's input transform with its cells and rows fetched ahead
 * and without: the same bits, for channel counts around the fetch's
 * reach (two lines), padding cells (NULL) among them, alpha 6 and 4. */
static void wino_in2d_fetch_isa(void)
{
    const kc_wino_simd *simd = kc_wino_simd_pick();
    assert_non_null(simd);
    static const int64_t channel_counts[] = {16, 33, 48, 64, 100};
    for (int alpha = 4; alpha <= 6; alpha += 2) {
        float at[24], bt[36], g[18];
        assert_int_equal(kc_wino2d_f3(alpha - 2, at, bt, g), 0);
        for (size_t ci = 0; ci < sizeof channel_counts / sizeof *channel_counts; ci++) {
            int64_t c = channel_counts[ci], ldv = c + 16, cells = alpha * alpha;
            float *in = rand_buf(cells * c);
            const float *d[36];
            for (int j = 0; j < cells; j++)
                d[j] = j % 7 == 3 ? NULL : in + j * c; /* some cells in the padding */
            float *plain = calloc((size_t)(cells * ldv), sizeof *plain);
            float *fetched = calloc((size_t)(cells * ldv), sizeof *fetched);
            assert_non_null(plain);
            assert_non_null(fetched);
            simd->in2d(alpha, bt, c, d, plain, ldv, 0);
            simd->in2d(alpha, bt, c, d, fetched, ldv, 1);
            assert_memory_equal(plain, fetched, (size_t)(cells * ldv) * sizeof *plain);
            free(in);
            free(plain);
            free(fetched);
        }
    }
}

static void test_wino_fetch_rows(void **state)
{
    (void)state;
    unsetenv("KC_WINO_FETCH_ROWS");
    assert_true(kc_wino2d_fetch_rows_wanted());
    setenv("KC_WINO_FETCH_ROWS", "0", 1);
    assert_false(kc_wino2d_fetch_rows_wanted());
    unsetenv("KC_WINO_FETCH_ROWS");
    each_isa(wino_product_fetch_isa);
    each_isa(wino_in2d_fetch_isa);
}

static void test_wino2d_blocks(void **state)
{
    (void)state;
    each_isa(wino2d_blocks_isa);
}

/* kc_wino_conv's parts follow the threads' speeds (kc_balance): run once
 * (the even cut; the run's times recorded in the cut), then with the cut
 * skewed (skew_cut: every part but the last at its least tiles) the last
 * part runs its tiles in more blocks, and the outputs keep their bits (a
 * tile's sums do not depend on the part or block that runs it). 2-D
 * F(4x4) and 1-D F(4, 7), on 2 and 3 threads. (wino2d_blocks counts
 * blocks on the even cut, KC_BALANCE=0: a run's times move the cut.) */
static void wino_balanced_cut_isa(void)
{
    static const conv_case cases[] = {
        {"3x3 128 -> 128 same on 28x28", "Conv2D", KC_CONV_PLAIN, 2, 1, 28, 28, 128, 128, 3, 1,
         1, 1, 0, 0, "relu", 1},
        {"(1, 7) 160 -> 160 same on 17x17", "Conv2D", KC_CONV_PLAIN, 2, 1, 17, 17, 160, 160, 1,
         1, 1, 1, 0, 0, "relu", 1, 7},
    };
    /* the largest part's blocks, even then skewed: 2 threads, 49 tiles
     * cut 25 + 24 (one block, up to 31 tiles), skewed 8 + 41 (two); 3
     * threads 17 + 16 + 16 (up to 21), skewed 8 + 8 + 33 (two). 1-D, 85
     * tiles: 43 + 42 (up to 53), skewed 8 + 77 (two); 29 + 28 + 28 (up to
     * 36), skewed 8 + 8 + 69 (two) */
    static const int want_blocks[2][2][2] = {{{1, 2}, {1, 2}}, {{1, 2}, {1, 2}}};
    if (!kc_dnnl_ready())
        skip();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        conv_run r;
        setup(&cases[i], &r);
        float *want = plain_output(&r);
        float *even = malloc((size_t)r.out_count * sizeof *even);
        float *skewed = malloc((size_t)r.out_count * sizeof *skewed);
        float peak = peak_of(want, r.out_count);
        const float *ins[1] = {r.x};
        for (int t = 2; t <= 3; t++) {
            kc_kernel_state *state = NULL;
            kc_threads_enter(t);
            exec_in_slot(&r.layer, ins, &r.in_shape, 1, even, &r.out_shape, 0, 0, &state);
            kc_balance *b = kc_wino_balance(state);
            if (!b || b->parts != t)
                fail_msg("%s, %d threads: not cut in %d parts", cases[i].what, t, t);
            for (int k = 0; k < b->parts; k++)
                if (!(b->per_unit[k] > 0.0))
                    fail_msg("%s, %d threads: part %d's time not kept", cases[i].what, t, k);
            expect_close(even, want, r.out_count, 1e-4f * peak, "%s, %d threads", cases[i].what,
                         t);
            /* that run's times moved the cut (by how busy this machine
             * is): back to the even one to count its blocks */
            for (int k = 0; k <= b->parts; k++)
                b->lo[k] = b->units * k / b->parts;
            if (kc_wino_blocks(state) != want_blocks[i][t - 2][0])
                fail_msg("%s, %d threads: %d blocks, expected %d", cases[i].what, t,
                         kc_wino_blocks(state), want_blocks[i][t - 2][0]);
            skew_cut(b);
            if (kc_wino_blocks(state) != want_blocks[i][t - 2][1])
                fail_msg("%s, %d threads, skewed: %d blocks, expected %d", cases[i].what, t,
                         kc_wino_blocks(state), want_blocks[i][t - 2][1]);
            exec_in_slot(&r.layer, ins, &r.in_shape, 1, skewed, &r.out_shape, 0, 0, &state);
            for (int64_t e = 0; e < r.out_count; e++)
                if (memcmp(&even[e], &skewed[e], sizeof *even))
                    fail_msg("%s, %d threads: element %lld is %.9g cut skewed, %.9g even",
                             cases[i].what, t, (long long)e, skewed[e], even[e]);
            state->free(state);
        }
        kc_threads_enter(0);
        free(want);
        free(even);
        free(skewed);
        teardown(&r);
    }
}

static void test_wino_balanced_cut(void **state)
{
    (void)state;
    each_isa(wino_balanced_cut_isa);
}

/* F(4x4, 3x3) with the kernel transformed as the layer runs
 * (wino_fly.c): the small images kerasc's kept-kernel Winograd leaves
 * (under 512 outputs), from 16 tiles over the batch; F(2x2, 3x3) where
 * 4x4 tiles are fewer than 16 and 2x2 ones are not (one 7x7 or 8x8
 * image), on one thread or more; each thread transforming the inputs
 * itself or sharing them (KC_WINOFLY_ALONE=1 / 0; by default itself where
 * that fits L2), the next piece of kernel fetched ahead or not
 * (KC_WINOFLY_PREFETCH=0); output channels that are not whole vectors,
 * input channels that are not whole pieces of 64, partial tiles at the edges, "valid",
 * relu6 and elu (the caller's activation), 1 to 3 threads (parts of at
 * least two vectors), against the plain path. 4 tiles of 2x2, 48
 * channels, stride 2, --exact, KC_WINOFLY=0 and KC_WINO2D=0 keep it out
 * (KC_WINOFLY_F2=0 the 2x2 tiles); 576 outputs go to the kept kernel.
 * With AVX-512, one image of up to four 4x4 tiles and 16 outputs or more
 * (7x7, 8x8, 4x4, 4x8, a "valid" 4x12) takes F(4x4) with the kernel
 * transformed inside the products instead (expect_fused), 9 outputs
 * nothing.
 * The state reads its own copy of the kernel: a second run with the
 * layer's array spoiled gives the same outputs. */
/* r's layer on `threads` threads on kc_pw_conv and on oneDNN (KC_PW=0):
 * the same bits, so that no output depends on which ran it (kc_pw_conv
 * runs on one thread, in a lane of a batch or a pipeline stage by
 * pixels). */
static void expect_same_as_onednn(conv_run *r, int threads, const char *what)
{
    float *mine = malloc((size_t)r->out_count * sizeof *mine);
    float *onednn = malloc((size_t)r->out_count * sizeof *onednn);
    kc_threads_enter(threads);
    run(r, 0, 0, mine);
    setenv("KC_PW", "0", 1);
    run(r, 0, 0, onednn);
    unsetenv("KC_PW");
    for (int64_t i = 0; i < r->out_count; i++)
        if (memcmp(&mine[i], &onednn[i], sizeof *mine))
            fail_msg("%s, %d threads: element %lld is %.9g, oneDNN's %.9g", what, threads,
                     (long long)i, mine[i], onednn[i]);
    free(mine);
    free(onednn);
}

/* Each case on kc_pw_conv: the parts expected on 1 to 3 threads
 * (want_parts; 0: not taken), outputs as the plain path's, on 1 and 2
 * threads equal to oneDNN's bit for bit; then for the first case
 * `first`'s checks of what keeps the kernel off. */
static void check_pw_cases(const conv_case *cases, size_t n, const int (*want_parts)[3],
                           void (*first)(conv_run *, const float *, float *, float))
{
    for (size_t i = 0; i < n; i++) {
        const conv_case *c = &cases[i];
        conv_run r;
        setup(c, &r);
        float *want = plain_output(&r);
        float *got = malloc((size_t)r.out_count * sizeof *got);
        float peak = peak_of(want, r.out_count);
        expect_parts_1_to_3(&r, want, got, peak, kc_pw_parts, kc_pw_balance, want_parts[i],
                            c->what);
        for (int t = 1; t <= 2; t++)
            if (want_parts[i][t - 1] > 0)
                expect_same_as_onednn(&r, t, c->what);
        if (i == 0)
            first(&r, want, got, peak);
        kc_threads_enter(0);
        free(want);
        free(got);
        teardown(&r);
    }
}

/* KC_PW=0, KC_ISA=avx2 and a whole run keep r's 1x1 layer off kc_pw_conv. */
static void pw_kept_off(conv_run *r, const float *want, float *got, float peak)
{
    const char *what = r->layer.name;
    setenv("KC_PW", "0", 1);
    expect_count_close(r, want, got, peak, 2, kc_pw_parts, 0, "parts, KC_PW=0", what);
    unsetenv("KC_PW");
    /* its sums equal oneDNN's AVX-512 ones: not under kerasc's AVX2 */
    setenv("KC_ISA", "avx2", 1);
    expect_count_close(r, want, got, peak, 2, kc_pw_parts, 0, "parts, KC_ISA=avx2", what);
    unsetenv("KC_ISA");
    kc_threads_enter(2);
    if (run(r, 0, 1, got) != 1) /* oneDNN's, whole */
        fail_msg("%s: not run whole when told to", what);
    expect_close(got, want, r->out_count, 1e-4f * peak, "%s, whole", what);
}

/* r's 1x1 layer on 2 threads: each part's next panel of weights is
 * fetched into L2 in software by default where the CPU is Intel's
 * (faster there, slower on the Zen 5: kc_pw_build), with KC_PW_PREFETCH=1
 * anywhere and never with =0; the same output bits every way. */
static void pw_panel_fetch(conv_run *r, const float *want, float *got, float peak)
{
    const char *what = r->layer.name;
    float *plain = malloc((size_t)r->out_count * sizeof *plain);
    float *fetched = malloc((size_t)r->out_count * sizeof *fetched);
    setenv("KC_PW_PREFETCH", "0", 1);
    expect_count_close(r, want, plain, peak, 2, kc_pw_fetches_panels, 0,
                       "panels fetched, KC_PW_PREFETCH=0", what);
    setenv("KC_PW_PREFETCH", "1", 1);
    expect_count_close(r, want, fetched, peak, 2, kc_pw_fetches_panels, 1,
                       "panels fetched, KC_PW_PREFETCH=1", what);
    /* the lines two a step over a block's first steps (by default on
     * Intel's CPUs), or spread over all its steps */
    for (int lead = 0; lead < 2; lead++) {
        setenv("KC_PW_FETCH_LEAD", lead ? "1" : "0", 1);
        expect_count_close(r, want, got, peak, 2, kc_pw_fetch_leads, lead,
                           lead ? "leads, KC_PW_FETCH_LEAD=1" : "leads, KC_PW_FETCH_LEAD=0", what);
        if (memcmp(got, plain, (size_t)r->out_count * sizeof *plain))
            fail_msg("%s: other outputs with KC_PW_FETCH_LEAD=%d", what, lead);
    }
    unsetenv("KC_PW_FETCH_LEAD");
    unsetenv("KC_PW_PREFETCH");
    int intel = kc_isa_vendor() == KC_CPU_INTEL;
    expect_count_close(r, want, got, peak, 2, kc_pw_fetches_panels, intel,
                       "panels fetched by default", what);
    expect_count_close(r, want, got, peak, 2, kc_pw_fetch_leads, intel, "leads by default", what);
    if (memcmp(fetched, plain, (size_t)r->out_count * sizeof *plain) ||
        memcmp(got, plain, (size_t)r->out_count * sizeof *plain))
        fail_msg("%s: other outputs with the panels fetched", what);
    free(fetched);
    free(plain);
}

/* By pixels over many input channels in passes (kc_pw_panel_passes):
 * passes of 128 by default only on Intel's CPUs and kernels of 512 KB or
 * more, of KC_PW_PASS channels anywhere (0: none), never alone (one
 * thread) or where the sums run in chunks (over 1280 channels); the
 * outputs equal oneDNN's bit for bit every way: a last pass shorter than
 * the others, a residual sum, a last vector partly zeros. */
static void test_pw_passes(void **state)
{
    (void)state;
    static const conv_case cases[] = {
        {"1x1 1024 -> 256 on one 14x14 (1 MB)", "Conv2D", KC_CONV_PLAIN, 2, 1, 14, 14, 1024,
         256, 1, 1, 1, 1, 0, 0, "relu", 1},
        {"1x1 200 -> 1032 + sum on one 13x13 (825 KB)", "Conv2D", KC_CONV_PLAIN, 2, 1, 13, 13,
         200, 1032, 1, 1, 1, 1, 0, 1, "relu", 1},
        {"1x1 256 -> 64 on one 28x28 (64 KB)", "Conv2D", KC_CONV_PLAIN, 2, 1, 28, 28, 256, 64, 1,
         1, 1, 1, 0, 0, "relu", 1},
        {"1x1 1296 -> 64 on one 12x12: sums in chunks", "Conv2D", KC_CONV_PLAIN, 2, 1, 12, 12,
         1296, 64, 1, 1, 1, 1, 0, 0, "relu", 1},
    };
    /* passes by default, with KC_PW_PASS=96, on one thread with it */
    int intel = kc_isa_vendor() == KC_CPU_INTEL;
    const int want[][3] = {
        {intel ? 128 : 0, 96, 0}, {intel ? 128 : 0, 96, 0}, {0, 96, 0}, {0, 0, 0}};
    if (kc_isa() != KC_ISA_AVX512 || !kc_dnnl_avx512())
        skip();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        conv_run r;
        setup(&cases[i], &r);
        float *want_out = plain_output(&r);
        float *got = malloc((size_t)r.out_count * sizeof *got);
        float peak = peak_of(want_out, r.out_count);
        const char *what = cases[i].what;
        expect_count_close(&r, want_out, got, peak, 2, kc_pw_pass_channels, want[i][0],
                           "channels a pass, by default", what);
        expect_same_as_onednn(&r, 2, what);
        setenv("KC_PW_PASS", "96", 1);
        expect_count_close(&r, want_out, got, peak, 2, kc_pw_pass_channels, want[i][1],
                           "channels a pass, KC_PW_PASS=96", what);
        expect_same_as_onednn(&r, 2, what);
        expect_count_close(&r, want_out, got, peak, 1, kc_pw_pass_channels, want[i][2],
                           "channels a pass alone, KC_PW_PASS=96", what);
        setenv("KC_PW_PASS", "0", 1);
        expect_count_close(&r, want_out, got, peak, 2, kc_pw_pass_channels, 0,
                           "channels a pass, KC_PW_PASS=0", what);
        unsetenv("KC_PW_PASS");
        kc_threads_enter(0);
        free(want_out);
        free(got);
        teardown(&r);
    }
}

/* The first case's checks: what keeps it off kc_pw_conv, the panels'
 * fetch. */
static void pw_first_checks(conv_run *r, const float *want, float *got, float peak)
{
    pw_kept_off(r, want, got, peak);
    pw_panel_fetch(r, want, got, peak);
}

/* KC_PW_TAPS=0 keeps r's layer of several taps off kc_pw_conv. */
static void pw_taps_kept_off(conv_run *r, const float *want, float *got, float peak)
{
    setenv("KC_PW_TAPS", "0", 1);
    expect_count_close(r, want, got, peak, 2, kc_pw_parts, 0, "parts, KC_PW_TAPS=0",
                       r->layer.name);
    unsetenv("KC_PW_TAPS");
}

/* 1x1 layers of at most 64 output pixels (256 strided), 64+ input
 * channels (beyond 1280 summed in chunks of 1280, as oneDNN does) and
 * 64+ output channels (16+ on larger images) run on kc_pw_conv when cut
 * between 2+ threads (one thread, or a lane of a batch, too, by
 * pixels), the output
 * vectors split into parts of at least 4: bias, relu / relu6 /
 * linear, a residual sum, output channels that are not whole vectors, an
 * activation the caller applies (elu), strides 2 and 3 on even and odd
 * sizes; larger images by pixels (parts own runs of pixels; on one
 * thread too), with a residual sum
 * in the order of the oneDNN kernel the whole layer would take; a
 * residual sum whose order is not known, fewer than 64 input channels,
 * KC_PW=0, KC_ISA=avx2 and whole runs keep the other kernels (and it
 * skips where oneDNN runs without AVX-512). Outputs as the plain
 * path's, also with the parts' cut moved as far as it goes (kc_balance),
 * and equal to oneDNN's bit for bit; the next panel's fetch by default
 * on Intel's CPUs, and as KC_PW_PREFETCH says, the same bits. */
static void test_pw_layers(void **state)
{
    (void)state;
    static const conv_case cases[] = {
        {"1x1 1024 -> 256 on one 8x8", "Conv2D", KC_CONV_PLAIN, 2, 1, 8, 8, 1024, 256, 1, 1,
         1, 1, 0, 0, "relu", 1},
        {"1x1 256 -> 1024 + sum on one 7x7", "Conv2D", KC_CONV_PLAIN, 2, 1, 7, 7, 256, 1024,
         1, 1, 1, 1, 0, 1, "relu", 1},
        {"1x1 512 -> 2048 on one 7x7, linear", "Conv2D", KC_CONV_PLAIN, 2, 1, 7, 7, 512, 2048, 1,
         1, 1, 0, 0, 0, "linear", 1},
        {"1x1 100 -> 200 + sum on two 5x6, relu6", "Conv2D", KC_CONV_PLAIN, 2, 2, 5, 6, 100, 200,
         1, 1, 1, 1, 0, 1, "relu6", 1},
        {"1x1 64 -> 72 on 3x5, elu", "Conv2D", KC_CONV_PLAIN, 2, 1, 3, 5, 64, 72, 1, 1, 1, 1, 0,
         0, "elu", 1},
        {"1x1 256 -> 256 on one 9x9: 81 pixels", "Conv2D", KC_CONV_PLAIN, 2, 1, 9, 9, 256, 256,
         1, 1, 1, 1, 0, 0, "relu", 1},
        {"1x1 48 -> 64 on 8x8: 48 channels in", "Conv2D", KC_CONV_PLAIN, 2, 1, 8, 8, 48, 64, 1,
         1, 1, 1, 0, 0, "relu", 1},
        {"1x1 2048 -> 512 on one 7x7: 2048 channels in", "Conv2D", KC_CONV_PLAIN, 2, 1, 7, 7,
         2048, 512, 1, 1, 1, 1, 0, 0, "relu", 1},
        {"1x1 1280 -> 384 on one 8x8", "Conv2D", KC_CONV_PLAIN, 2, 1, 8, 8, 1280, 384, 1, 1, 1,
         1, 0, 0, "relu", 1},
        {"1x1 64 -> 64 stride 2 on 34x34: 289 pixels out", "Conv2D", KC_CONV_PLAIN, 2, 1, 34,
         34, 64, 64, 1, 2, 1, 1, 0, 0, "relu", 1},
        /* strided: the input's pixels gathered first */
        {"1x1 1024 -> 2048 stride 2 on one 14x14", "Conv2D", KC_CONV_PLAIN, 2, 1, 14, 14, 1024,
         2048, 1, 2, 1, 1, 0, 0, "linear", 1},
        {"1x1 128 -> 136 stride 2 + sum on two odd 15x13, same", "Conv2D", KC_CONV_PLAIN, 2, 2,
         15, 13, 128, 136, 1, 2, 1, 1, 0, 1, "relu", 1},
        {"1x1 96 -> 128 stride 3 on 10x11, valid", "Conv2D", KC_CONV_PLAIN, 2, 1, 10, 11, 96,
         128, 1, 3, 1, 0, 0, 0, "relu6", 1},
        /* more than 1280 input channels: summed in chunks of 1280, as oneDNN */
        {"1x1 4096 -> 256 on one 4x4: chunks of 1280, 1280, 1280, 256", "Conv2D",
         KC_CONV_PLAIN, 2, 1, 4, 4, 4096, 256, 1, 1, 1, 1, 0, 0, "relu", 1},
        {"1x1 1296 -> 64 on one 6x6: a last chunk of 16", "Conv2D", KC_CONV_PLAIN, 2, 1, 6, 6,
         1296, 64, 1, 1, 1, 1, 0, 0, "relu", 1},
        {"1x1 3000 -> 100 stride 2 + sum on one 9x9: a last chunk of 440", "Conv2D",
         KC_CONV_PLAIN, 2, 1, 9, 9, 3000, 100, 1, 2, 1, 1, 0, 1, "relu", 1},
        /* larger images: parts own runs of pixels, a chunk against every
         * panel in turn; alone (one thread, a lane) too */
        {"1x1 256 -> 64 on one 28x28", "Conv2D", KC_CONV_PLAIN, 2, 1, 28, 28, 256, 64, 1, 1, 1,
         1, 0, 0, "relu", 1},
        {"1x1 1024 -> 256 on one 14x14, relu6", "Conv2D", KC_CONV_PLAIN, 2, 1, 14, 14, 1024,
         256, 1, 1, 1, 1, 0, 0, "relu6", 1},
        {"1x1 256 -> 520 stride 2 on one 56x56: chunks gathered", "Conv2D", KC_CONV_PLAIN, 2, 1,
         56, 56, 256, 520, 1, 2, 1, 0, 0, 0, "linear", 1},
        {"1x1 2048 -> 512 on four 7x7: chunks of 1280, alone too", "Conv2D", KC_CONV_PLAIN, 2,
         4, 7, 7, 2048, 512, 1, 1, 1, 1, 0, 0, "relu", 1},
        {"1x1 320 -> 1280 on four 7x7, relu6 (MobileNetV2's last, a lane at batch 8)",
         "Conv2D", KC_CONV_PLAIN, 2, 4, 7, 7, 320, 1280, 1, 1, 1, 0, 0, 0, "relu6", 1},
        /* a residual sum on a larger image by pixels too, in the order of
         * the oneDNN kernel the whole layer would take: brgconv_1x1 the
         * bias first; its direct kernel (a wide sum, ResNet50's 56x56
         * 64 -> 256) the residual first; over more than 64 input
         * channels the direct kernel's order is not known: oneDNN's */
        {"1x1 64 -> 256 + sum on one 28x28", "Conv2D", KC_CONV_PLAIN, 2, 1, 28, 28, 64, 256, 1,
         1, 1, 1, 0, 1, "relu", 1},
        {"1x1 128 -> 512 + sum on one 28x28: brgconv_1x1's order", "Conv2D", KC_CONV_PLAIN, 2,
         1, 28, 28, 128, 512, 1, 1, 1, 1, 0, 1, "relu", 1},
        {"1x1 64 -> 256 + sum on one 56x56: the direct kernel's order", "Conv2D",
         KC_CONV_PLAIN, 2, 1, 56, 56, 64, 256, 1, 1, 1, 1, 0, 1, "relu", 1},
        {"1x1 128 -> 1024 + sum on one 48x48: a direct kernel over 128 in", "Conv2D",
         KC_CONV_PLAIN, 2, 1, 48, 48, 128, 1024, 1, 1, 1, 1, 0, 1, "relu", 1},
        /* by pixels from 16 output channels (InceptionV3's 48-filter
         * reductions); by vectors from 64 */
        {"1x1 192 -> 48 on one 35x35: 48 filters", "Conv2D", KC_CONV_PLAIN, 2, 1, 35, 35, 192,
         48, 1, 1, 1, 1, 0, 0, "relu", 1},
        {"1x1 288 -> 20 on one 12x12: 20 filters", "Conv2D", KC_CONV_PLAIN, 2, 1, 12, 12, 288,
         20, 1, 1, 1, 1, 0, 0, "relu6", 1},
        {"1x1 256 -> 48 on one 7x7: 48 filters on few pixels", "Conv2D", KC_CONV_PLAIN, 2, 1, 7,
         7, 256, 48, 1, 1, 1, 1, 0, 0, "relu", 1},
        /* by pixels, panels of 4 vectors in blocks of 6 pixels, the last
         * five vectors as 3 + 2 (kc_pw_panel_width): 9 vectors, the last
         * one partly zeros, a residual sum; 5 vectors */
        {"1x1 96 -> 136 + sum on one 13x11: panels of 4, 3 and 2", "Conv2D", KC_CONV_PLAIN, 2,
         1, 13, 11, 96, 136, 1, 1, 1, 1, 0, 1, "relu", 1},
        {"1x1 128 -> 80 on two 9x9: panels of 3 and 2", "Conv2D", KC_CONV_PLAIN, 2, 2, 9, 9,
         128, 80, 1, 1, 1, 1, 0, 0, "relu6", 1},
    };
    static const int want_parts[][3] = {{1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {1, 2, 3},
                                        {1, 1, 1}, {1, 2, 3}, {0, 0, 0}, {1, 2, 3},
                                        {1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {1, 2, 2},
                                        {1, 2, 2}, {1, 2, 3}, {1, 1, 1}, {1, 1, 1},
                                        {1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {1, 2, 3},
                                        {1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {1, 2, 3},
                                        {0, 0, 0}, {1, 2, 3}, {1, 2, 3}, {0, 0, 0},
                                        {1, 2, 3}, {1, 2, 3}};
    if (kc_isa() != KC_ISA_AVX512 || !kc_dnnl_avx512())
        skip();
    _Static_assert(sizeof cases / sizeof cases[0] == sizeof want_parts / sizeof want_parts[0],
                   "a want_parts row per case");
    check_pw_cases(cases, sizeof cases / sizeof cases[0], want_parts, pw_first_checks);
}

/* A 1x1 layer by pixels with a residual sum (ResNet50's 28x28 128 -> 512):
 * the fetch policies' case (test_pw_residual_fetch, test_pw_claim_outputs). */
static const conv_case pw_sum_28 = {"1x1 128 -> 512 + sum on one 28x28", "Conv2D", KC_CONV_PLAIN,
                                    2, 1, 28, 28, 128, 512, 1, 1, 1, 1, 0, 1, "relu", 1, 0};

/* Case c's layer (a state of kc_pw_conv) counted by count_of as fetching
 * (1) on `on` threads and not (0) on `off` threads, nor on `on` threads
 * with the environment variable `env` set to 0; the outputs with and
 * without the fetch the same bits, all within the fidelity tolerance. */
static void expect_pw_fetch_policy(const conv_case *c, int (*count_of)(const kc_kernel_state *),
                                   int on, int off, const char *env, const char *counted)
{
    conv_run r;
    setup(c, &r);
    float *want = plain_output(&r);
    float *fetched = malloc((size_t)r.out_count * sizeof *fetched);
    float *unfetched = malloc((size_t)r.out_count * sizeof *unfetched);
    float peak = peak_of(want, r.out_count);
    char what[160];
    expect_count_close(&r, want, fetched, peak, on, count_of, 1, counted, c->what);
    expect_count_close(&r, want, unfetched, peak, off, count_of, 0, counted, c->what);
    setenv(env, "0", 1);
    snprintf(what, sizeof what, "%s, %s=0", c->what, env);
    expect_count_close(&r, want, unfetched, peak, on, count_of, 0, counted, what);
    unsetenv(env);
    if (memcmp(fetched, unfetched, (size_t)r.out_count * sizeof *fetched))
        fail_msg("%s: other outputs with %s", c->what, counted);
    kc_threads_enter(0);
    free(want);
    free(fetched);
    free(unfetched);
    teardown(&r);
}

/* Case c's layer counted by count_of as not fetching on `threads` threads. */
static void expect_pw_no_fetch(const conv_case *c, int (*count_of)(const kc_kernel_state *),
                               int threads, const char *counted)
{
    conv_run r;
    setup(c, &r);
    float *want = plain_output(&r);
    float *got = malloc((size_t)r.out_count * sizeof *got);
    expect_count_close(&r, want, got, peak_of(want, r.out_count), threads, count_of, 0, counted,
                       c->what);
    kc_threads_enter(0);
    free(want);
    free(got);
    teardown(&r);
}

/* A 1x1 layer with a residual sum, alone (one thread, as in a batch
 * lane): each block fetches the next block's sums (kc_pw_build), with
 * the same output bits as without (KC_PW_RESIDUAL_FETCH=0); on two
 * threads, and without a sum, no such fetch. */
static void test_pw_residual_fetch(void **state)
{
    (void)state;
    static const conv_case plain = {"1x1 128 -> 512 on one 28x28", "Conv2D", KC_CONV_PLAIN, 2, 1,
                                    28, 28, 128, 512, 1, 1, 1, 1, 0, 0, "relu", 1, 0};
    if (kc_isa() != KC_ISA_AVX512 || !kc_dnnl_avx512())
        skip();
    expect_pw_fetch_policy(&pw_sum_28, kc_pw_fetches_residual, 1, 2, "KC_PW_RESIDUAL_FETCH",
                           "sums fetched");
    expect_pw_no_fetch(&plain, kc_pw_fetches_residual, 1, "sums fetched without a sum");
}

/* A 1x1 layer by pixels on two threads asks for each block's output lines
 * for writing first (kc_pw_build: claim_outputs), with the same output
 * bits as without (KC_PW_PREFETCHW=0); alone (one thread, a lane) and by
 * vectors (7x7) it does not. */
static void test_pw_claim_outputs(void **state)
{
    (void)state;
    static const conv_case small = {"1x1 512 -> 256 on one 7x7", "Conv2D", KC_CONV_PLAIN, 2, 1,
                                    7, 7, 512, 256, 1, 1, 1, 1, 0, 0, "relu", 1, 0};
    if (kc_isa() != KC_ISA_AVX512 || !kc_dnnl_avx512())
        skip();
    expect_pw_fetch_policy(&pw_sum_28, kc_pw_claims_outputs, 2, 1, "KC_PW_PREFETCHW",
                           "outputs claimed");
    expect_pw_no_fetch(&small, kc_pw_claims_outputs, 2, "outputs claimed by vectors");
}

/* By pixels the parts' cut is in pixels, not in blocks of 8: a 14x14
 * image (196 pixels, ResNet50's conv4 1x1 layers) on two threads is cut
 * 98 + 98, and a cut on an odd pixel (37 + 159: blocks evened out, the
 * 159 as chunks of 53 over 1024 channels) gives the same bits. */
static void test_pw_pixel_cut(void **state)
{
    (void)state;
    static const conv_case c = {"1x1 1024 -> 256 on one 14x14", "Conv2D", KC_CONV_PLAIN, 2, 1,
                                14, 14, 1024, 256, 1, 1, 1, 1, 0, 0, "relu", 1, 0};
    if (kc_isa() != KC_ISA_AVX512 || !kc_dnnl_avx512())
        skip();
    setenv("KC_BALANCE", "0", 1); /* the cut stays where it is put */
    conv_run r;
    setup(&c, &r);
    float *want = plain_output(&r);
    float *even = malloc((size_t)r.out_count * sizeof *even);
    float *odd = malloc((size_t)r.out_count * sizeof *odd);
    const float *ins[1] = {r.x};
    kc_kernel_state *st = NULL;
    kc_threads_enter(2);
    exec_in_slot(&r.layer, ins, &r.in_shape, 1, even, &r.out_shape, 0, 0, &st);
    kc_balance *b = kc_pw_balance(st);
    assert_non_null(b);
    assert_int_equal(b->units, 196);
    assert_int_equal(b->parts, 2);
    assert_int_equal(b->lo[1], 98);
    expect_close(even, want, r.out_count, 1e-4f * peak_of(want, r.out_count), "%s", c.what);
    b->lo[1] = 37;
    exec_in_slot(&r.layer, ins, &r.in_shape, 1, odd, &r.out_shape, 0, 0, &st);
    if (memcmp(even, odd, (size_t)r.out_count * sizeof *even))
        fail_msg("%s: other outputs cut at pixel 37", c.what);
    unsetenv("KC_BALANCE");
    st->free(st);
    kc_threads_enter(0);
    free(want);
    free(even);
    free(odd);
    teardown(&r);
}

/* Help between batch lanes (base/help.h): a layer run alone in lane 0,
 * lane 1 done and idle, is cut into two parts and lane 1 runs some of
 * its pieces; the outputs are those of the layer run alone without
 * help, bit for bit. For kc_pw_conv by pixels (a residual sum; strided
 * pixels gathered) and kc_wino_fly_conv (pieces of transformed kernel;
 * one 7x7 image's F(4x4) fused). */
typedef struct help_kernel {
    conv_run *r;
    kc_help_board board;
    float *out;
    int idle_seen;
} help_kernel;

static void help_kernel_lanes(void *arg, int lane)
{
    help_kernel *h = arg;
    kc_help_enter(&h->board, lane);
    double start = kc_now();
    while (atomic_load(&h->board.started) < 2 && kc_now() - start < 2.0)
        ;
    if (lane == 0) {
        while (atomic_load(&h->board.idle) < 1 && kc_now() - start < 2.0)
            ;
        h->idle_seen = atomic_load(&h->board.idle) == 1;
        if (h->idle_seen) /* lane 0 is the calling thread: cmocka's asserts hold */
            run(h->r, 0, 0, h->out);
    }
    kc_help_finish();
}

static void test_lane_help_kernels(void **state)
{
    (void)state;
    static const conv_case cases[] = {
        {"1x1 128 -> 512 + sum on two 28x28", "Conv2D", KC_CONV_PLAIN, 2, 2, 28, 28, 128, 512, 1,
         1, 1, 1, 0, 1, "relu", 1, 0},
        {"1x1 256 -> 512 stride 2 on four 28x28", "Conv2D", KC_CONV_PLAIN, 2, 4, 28, 28, 256, 512,
         1, 2, 1, 0, 0, 0, "relu", 1, 0},
        {"3x3 256 -> 256 same on two 14x14", "Conv2D", KC_CONV_PLAIN, 2, 2, 14, 14, 256, 256, 3,
         1, 1, 1, 0, 0, "relu", 1, 0},
        {"3x3 512 -> 512 same on one 7x7 (fused)", "Conv2D", KC_CONV_PLAIN, 2, 1, 7, 7, 512, 512,
         3, 1, 1, 1, 0, 0, "relu", 1, 0},
    };
    /* two lanes need two CPUs for help (base/help.c) */
    if (kc_isa() != KC_ISA_AVX512 || !kc_dnnl_avx512() || kc_threads_cpus() < 2)
        skip();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        conv_run r;
        setup(&cases[i], &r);
        float *alone = malloc((size_t)r.out_count * sizeof *alone);
        float *helped = malloc((size_t)r.out_count * sizeof *helped);
        kc_threads_enter(1);
        run(&r, 0, 0, alone);
        /* the helper takes pieces only if its thread runs while the
         * owner still has some: on a loaded machine (ctest -j) it may
         * not, so the owner waits after posting until the helper has
         * taken its part (wait_for_helper); the helper may still lose
         * every piece of its part to the owner, so up to 20 tries */
        long ran = 0;
        for (int tries = 0; tries < 20 && ran < 1; tries++) {
            help_kernel h = {&r, {0}, helped, 0};
            kc_threads_enter(2);
            kc_help_board_init(&h.board, 2);
            h.board.wait_for_helper = 1;
            kc_parallel(2, help_kernel_lanes, &h);
            if (!h.idle_seen)
                fail_msg("%s: lane 1 never became idle", cases[i].what);
            if (memcmp(alone, helped, (size_t)r.out_count * sizeof *alone))
                fail_msg("%s: other outputs with a lane helping", cases[i].what);
            ran = kc_help_helped(&h.board);
        }
        if (ran < 1)
            fail_msg("%s: the idle lane ran none of the layer in 20 runs", cases[i].what);
        kc_threads_enter(0);
        free(alone);
        free(helped);
        teardown(&r);
    }
}

/* kc_dnnl_taps_run, asked of oneDNN for InceptionV3's Mixed_6a (288 ->
 * 384, 3x3 stride 2 onto 17x17): a run of whole vectors of channels, or
 * all 288 (one chain); the same answer asked again (kept for the
 * process). A residual sum, whose order it does not learn, or a dilated
 * kernel: 0. Where oneDNN runs without AVX-512 (no brgconv): 0 too. */
static void test_dnnl_taps_run(void **state)
{
    (void)state;
    static const conv_case mixed_6a = {"Mixed_6a", "Conv2D", KC_CONV_PLAIN, 2, 1, 35, 35, 288,
                                       384, 3, 2, 1, 0, 0, 0, "relu", 1, 0};
    conv_run r;
    setup(&mixed_6a, &r);
    int64_t run = kc_dnnl_taps_run(&r.a, &r.in_shape, &r.out_shape);
    if (!kc_dnnl_avx512())
        assert_int_equal(run, 0);
    else if (run != 288 && (run < 16 || run > 288 || run % 16))
        fail_msg("Mixed_6a: runs of %lld channels", (long long)run);
    assert_int_equal(kc_dnnl_taps_run(&r.a, &r.in_shape, &r.out_shape), run);
    r.a.accumulate = 1;
    assert_int_equal(kc_dnnl_taps_run(&r.a, &r.in_shape, &r.out_shape), 0);
    r.a.accumulate = 0;
    r.a.dilation[0] = 2;
    assert_int_equal(kc_dnnl_taps_run(&r.a, &r.in_shape, &r.out_shape), 0);
    teardown(&r);
}

/* Kernels of several taps on small images that no Winograd kernel
 * takes (strided, or (1, k) and (k, 1) below its 100
 * pixels) run on kc_pw_conv as the 1x1 convolution over their taps laid
 * side by side, each output pixel's taps gathered into a row (zeros
 * outside the image): "same" and "valid", strides 1 to 3, one to four
 * images (one thread, a lane, by pixels), padding folded in from a
 * ZeroPadding, (1, 3), (3, 1), 3x3, 5x5 and 2x2 kernels, 64 to 1024
 * input channels, output channels that are not whole vectors, an
 * activation the caller applies (elu). Outputs as the plain path's and
 * equal to oneDNN's bit for bit (its brgconv sums every tap and channel
 * in one chain, or over 192 channels on larger images a chain per run of
 * channels, the runs asked of it), so that no output depends on which of
 * the two ran it. Up to 64 output pixels an image over up to 384
 * channels (1-D: 1024), up to 289 over up to 384 (strided).
 * KC_PW_TAPS=0 keeps them on oneDNN, and a 2-D kernel over more channels
 * (oneDNN sums those otherwise: 512 onto 4x4), a residual sum, fewer than
 * 64 input channels, more than 289 pixels an image, more than 64
 * unstrided or a 2-D kernel of stride 1 (the Winograd kernels') keep
 * them off. */
static void test_pw_taps_layers(void **state)
{
    (void)state;
    static const conv_case cases[] = {
        {"(1, 3) 384 -> 384 same on one 8x8 (InceptionV3's Mixed_7b)", "Conv2D",
         KC_CONV_PLAIN, 2, 1, 8, 8, 384, 384, 1, 1, 1, 1, 0, 0, "relu", 1, 3},
        {"(3, 1) 384 -> 384 same on one 8x8", "Conv2D", KC_CONV_PLAIN, 2, 1, 8, 8, 384, 384, 3,
         1, 1, 1, 0, 0, "relu", 1, 1},
        {"3x3 192 -> 320 stride 2 valid on one 17x17 (Mixed_7a)", "Conv2D", KC_CONV_PLAIN, 2, 1,
         17, 17, 192, 320, 3, 2, 1, 0, 0, 0, "relu", 1, 0},
        {"3x3 288 -> 120 stride 2 same on two 14x14", "Conv2D", KC_CONV_PLAIN, 2, 2, 14, 14, 288,
         120, 3, 2, 1, 1, 0, 0, "relu6", 1, 0},
        {"3x3 384 -> 128 stride 2 valid on one 9x9: 3456 taps", "Conv2D", KC_CONV_PLAIN, 2, 1,
         9, 9, 384, 128, 3, 2, 1, 0, 0, 0, "linear", 1, 0},
        {"(1, 3) 1024 -> 136 same on one 8x8: 3072 taps", "Conv2D", KC_CONV_PLAIN, 2, 1, 8, 8,
         1024, 136, 1, 1, 1, 1, 0, 0, "linear", 1, 3},
        {"5x5 64 -> 136 stride 3 same on one 20x17, elu", "Conv2D", KC_CONV_PLAIN, 2, 1, 20, 17,
         64, 136, 5, 3, 1, 1, 0, 0, "elu", 1, 0},
        {"2x2 96 -> 128 stride 2 valid on four 8x8", "Conv2D", KC_CONV_PLAIN, 2, 4, 8, 8, 96,
         128, 2, 2, 1, 0, 0, 0, "relu", 1, 0},
        {"3x3 128 -> 128 stride 2, a ZeroPadding of 1 folded in, on one 13x13", "Conv2D",
         KC_CONV_PLAIN, 2, 1, 13, 13, 128, 128, 3, 2, 1, 0, 1, 0, "relu", 1, 0},
        {"(1, 7) 160 -> 192 same on one 7x7", "Conv2D", KC_CONV_PLAIN, 2, 1, 7, 7, 160, 192, 1,
         1, 1, 1, 0, 0, "relu", 1, 7},
        /* larger images over at most 192 channels: by pixels from 257 */
        {"3x3 96 -> 96 stride 2 valid on one 35x35 (Mixed_6a): 289 pixels", "Conv2D",
         KC_CONV_PLAIN, 2, 1, 35, 35, 96, 96, 3, 2, 1, 0, 0, 0, "relu", 1, 0},
        {"3x3 192 -> 136 stride 2 same on one 33x33: 289 pixels", "Conv2D", KC_CONV_PLAIN, 2, 1,
         33, 33, 192, 136, 3, 2, 1, 1, 0, 0, "relu6", 1, 0},
        {"3x3 64 -> 128 stride 2 valid on two 21x21: 100 pixels an image", "Conv2D",
         KC_CONV_PLAIN, 2, 2, 21, 21, 64, 128, 3, 2, 1, 0, 0, 0, "relu", 1, 0},
        /* 192 to 384 channels on larger images: in oneDNN's runs, asked
         * of it (kc_dnnl_taps_run; on the Zen 5 Mixed_6a's 272 + 16
         * channels, with 96 filters 256 + 32) */
        {"3x3 288 -> 384 stride 2 valid on one 35x35 (InceptionV3's Mixed_6a)", "Conv2D",
         KC_CONV_PLAIN, 2, 1, 35, 35, 288, 384, 3, 2, 1, 0, 0, 0, "relu", 1, 0},
        {"3x3 288 -> 96 stride 2 valid on one 35x35: 288 channels onto 17x17", "Conv2D",
         KC_CONV_PLAIN, 2, 1, 35, 35, 288, 96, 3, 2, 1, 0, 0, 0, "relu", 1, 0},
        {"3x3 384 -> 128 stride 2 same on one 20x20: 100 pixels", "Conv2D", KC_CONV_PLAIN, 2, 1,
         20, 20, 384, 128, 3, 2, 1, 1, 0, 0, "relu6", 1, 0},
        {"3x3 320 -> 200 stride 2 same on one 29x29, elu", "Conv2D", KC_CONV_PLAIN, 2, 1, 29, 29,
         320, 200, 3, 2, 1, 1, 0, 0, "elu", 1, 0},
        /* kept off: a 2-D kernel over more than 384 channels (oneDNN sums
         * those in another order); a residual sum; 48 channels in; 81
         * pixels; a 2-D kernel of stride 1 (Winograd's, or --exact's) */
        {"3x3 512 -> 128 stride 2 valid on one 9x9: 512 channels in", "Conv2D", KC_CONV_PLAIN,
         2, 1, 9, 9, 512, 128, 3, 2, 1, 0, 0, 0, "linear", 1, 0},
        {"3x3 416 -> 96 stride 2 valid on one 35x35: 416 channels onto 17x17", "Conv2D",
         KC_CONV_PLAIN, 2, 1, 35, 35, 416, 96, 3, 2, 1, 0, 0, 0, "relu", 1, 0},
        {"3x3 96 -> 96 stride 2 valid on one 37x37: 324 pixels", "Conv2D", KC_CONV_PLAIN, 2, 1,
         37, 37, 96, 96, 3, 2, 1, 0, 0, 0, "relu", 1, 0},
        {"3x3 128 -> 128 stride 2 + sum on one 16x16", "Conv2D", KC_CONV_PLAIN, 2, 1, 16, 16,
         128, 128, 3, 2, 1, 1, 0, 1, "relu", 1, 0},
        {"(1, 3) 48 -> 64 same on one 8x8: 48 channels in", "Conv2D", KC_CONV_PLAIN, 2, 1, 8, 8,
         48, 64, 1, 1, 1, 1, 0, 0, "relu", 1, 3},
        {"(1, 3) 128 -> 128 same on one 9x9: 81 pixels, stride 1", "Conv2D", KC_CONV_PLAIN, 2,
         1, 9, 9, 128, 128, 1, 1, 1, 1, 0, 0, "relu", 1, 3},
        {"3x3 128 -> 128 same on one 8x8: stride 1", "Conv2D", KC_CONV_PLAIN, 2, 1, 8, 8, 128, 128,
         3, 1, 1, 1, 0, 0, "relu", 1, 0},
    };
    static const int want_parts[][3] = {{1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {1, 2, 2}, {1, 2, 2},
                                        {1, 2, 2}, {1, 2, 2}, {1, 2, 2}, {1, 2, 2}, {1, 2, 3},
                                        {1, 2, 3}, {1, 2, 3}, {1, 2, 2}, {1, 2, 3}, {1, 2, 3},
                                        {1, 2, 2}, {1, 2, 3}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0},
                                        {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
    if (kc_isa() != KC_ISA_AVX512 || !kc_dnnl_avx512())
        skip();
    _Static_assert(sizeof cases / sizeof cases[0] == sizeof want_parts / sizeof want_parts[0],
                   "a want_parts row per case");
    check_pw_cases(cases, sizeof cases / sizeof cases[0], want_parts, pw_taps_kept_off);
}

/* A state of kc_pw_conv built for the team is built again when the
 * layer runs on one thread (a lane of a batch, whose image has the shape
 * of a batch of one), and the reverse: a strided layer's team state
 * gathers its pixels into one buffer, which two lanes would write at
 * once. The same bits each way. */
static void test_pw_state_follows_width(void **state)
{
    (void)state;
    static const conv_case c = {"1x1 64 -> 64 stride 2 on 34x34", "Conv2D", KC_CONV_PLAIN, 2, 1,
                                34, 34, 64, 64, 1, 2, 1, 1, 0, 0, "relu", 1};
    if (kc_isa() != KC_ISA_AVX512 || !kc_dnnl_avx512())
        skip();
    conv_run r;
    setup(&c, &r);
    float *team = malloc((size_t)r.out_count * sizeof *team);
    float *got = malloc((size_t)r.out_count * sizeof *got);
    const float *ins[1] = {r.x};
    kc_kernel_state *slot = NULL;
    static const int threads[3] = {2, 1, 2};
    for (int i = 0; i < 3; i++) {
        kc_threads_enter(threads[i]);
        exec_in_slot(&r.layer, ins, &r.in_shape, 1, i ? got : team, &r.out_shape, 0, 0, &slot);
        if (kc_pw_parts(slot) != threads[i])
            fail_msg("run %d on %d threads: a state of %d parts", i, threads[i],
                     kc_pw_parts(slot));
        if (i && memcmp(got, team, (size_t)r.out_count * sizeof *got))
            fail_msg("run %d on %d threads: not the team's bits", i, threads[i]);
    }
    slot->free(slot);
    kc_threads_enter(0);
    free(team);
    free(got);
    teardown(&r);
}

/* Two threads each transforming the inputs for itself first read all
 * of the input in address order, once a run each (kernels/touch.c);
 * sharing one buffer of transformed inputs, on one thread, or with
 * KC_TOUCH=0 (read as the state is built), neither reads it so. The
 * outputs the same either way. */
static void expect_fly_touches(conv_run *r, const float *want, float *got, float peak,
                               const char *what)
{
    int64_t lines = (kc_shape_count(&r->in_shape) * (int64_t)sizeof(float) + 63) / 64;
    static const struct {
        const char *alone, *touch;
        int threads, touches;
    } ways[] = {{"1", NULL, 2, 1}, {"1", "0", 2, 0}, {"0", NULL, 2, 0}, {"1", NULL, 1, 0}};
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
        setenv("KC_WINOFLY_ALONE", ways[w].alone, 1);
        if (ways[w].touch)
            setenv("KC_TOUCH", ways[w].touch, 1);
        int64_t before = kc_touch_lines();
        expect_count_close(r, want, got, peak, ways[w].threads, kc_wino_fly_touches,
                           ways[w].touches, "touching its input", what);
        int64_t read = kc_touch_lines() - before;
        /* each of the two parts every line once (one more where the
         * input does not start at a line) */
        int64_t least = ways[w].touches ? 2 * lines : 0, most = ways[w].touches ? 2 * lines + 2 : 0;
        if (read < least || read > most)
            fail_msg("%s, KC_WINOFLY_ALONE=%s%s, %d threads: %lld lines touched, expected %lld "
                     "to %lld", what, ways[w].alone, ways[w].touch ? ", KC_TOUCH=0" : "",
                     ways[w].threads, (long long)read, (long long)least, (long long)most);
        unsetenv("KC_TOUCH");
        unsetenv("KC_WINOFLY_ALONE");
    }
}

/* The next rows of transformed inputs fetched ahead (kc_wf_fetch_rows_wanted):
 * on one thread (a lane) always, on a team except on Intel's CPUs,
 * anywhere as KC_WINO_FETCH_ROWS=1 / =0 says; the same bits every way. */
static void expect_fly_fetch_rows(conv_run *r, const float *want, float *got, float peak,
                                  const char *what)
{
    static const struct {
        const char *env;
        int threads, fetches; /* fetches -1: not on Intel's CPUs */
    } ways[] = {{NULL, 2, -1}, {NULL, 1, 1}, {"1", 2, 1}, {"0", 2, 0}, {"0", 1, 0}};
    float *first = malloc((size_t)r->out_count * sizeof *first);
    assert_non_null(first);
    for (size_t w = 0; w < sizeof ways / sizeof ways[0]; w++) {
        if (ways[w].env)
            setenv("KC_WINO_FETCH_ROWS", ways[w].env, 1);
        int fetches = ways[w].fetches < 0 ? kc_isa_vendor() != KC_CPU_INTEL : ways[w].fetches;
        expect_count_close(r, want, w ? got : first, peak, ways[w].threads,
                           kc_wino_fly_fetches_rows, fetches, "fetching rows ahead", what);
        unsetenv("KC_WINO_FETCH_ROWS");
        if (w && memcmp(got, first, (size_t)r->out_count * sizeof *got))
            fail_msg("%s: other bits with KC_WINO_FETCH_ROWS=%s on %d threads", what,
                     ways[w].env ? ways[w].env : "(unset)", ways[w].threads);
    }
    free(first);
}

/* A layer kc_wf_fused takes (its parts claiming one vector at a time,
 * through the pieces three): the same bits as F(4x4) through the pieces
 * of transformed kernel and the products (KC_WINOFLY_FUSED=pieces), on
 * 1 to 3 threads and without the kernel fetched ahead; KC_WINOFLY_FUSED=0
 * leaves it to F(2x2) where that has 16 tiles (f2) or else to other
 * kernels, outputs within the tolerance either way. */
static void expect_fused(conv_run *r, const float *want, float *got, float peak, int f2,
                         const char *what)
{
    const float *ins[1] = {r->x};
    float *pieces = malloc((size_t)r->out_count * sizeof *pieces);
    for (int t = 1; t <= 3; t++) {
        kc_threads_enter(t);
        setenv("KC_WINOFLY_FUSED", "pieces", 1);
        int most = exec_kernel(&r->layer, ins, &r->in_shape, 1, pieces, &r->out_shape, 0, 0,
                               kc_wino_fly_claim_most);
        unsetenv("KC_WINOFLY_FUSED");
        if (most != KC_WINO2D_NV)
            fail_msg("%s, %d threads, through the pieces: claims of %d vectors", what, t, most);
        /* each vector runs on its own: a part claims one at a time */
        most = exec_kernel(&r->layer, ins, &r->in_shape, 1, got, &r->out_shape, 0, 0,
                           kc_wino_fly_claim_most);
        if (most != 1)
            fail_msg("%s, %d threads: claims of %d vectors, not 1", what, t, most);
        for (int fetch = 0; fetch < 2; fetch++) {
            if (!fetch)
                setenv("KC_WINOFLY_PREFETCH", "0", 1);
            int tile = exec_kernel(&r->layer, ins, &r->in_shape, 1, got, &r->out_shape, 0, 0,
                                   kc_wino_fly_tile);
            unsetenv("KC_WINOFLY_PREFETCH");
            if (tile != 4)
                fail_msg("%s, %d threads: tiles of %d, not the fused 4x4", what, t, tile);
            for (int64_t i = 0; i < r->out_count; i++)
                if (memcmp(&got[i], &pieces[i], sizeof *got))
                    fail_msg("%s, %d threads%s: element %lld is %.9g, through the pieces %.9g",
                             what, t, fetch ? "" : ", no fetch", (long long)i, got[i],
                             pieces[i]);
        }
        expect_close(pieces, want, r->out_count, 1e-4f * peak, "%s, pieces", what);
    }
    kc_threads_enter(2);
    setenv("KC_WINOFLY_FUSED", "0", 1);
    int tile = exec_kernel(&r->layer, ins, &r->in_shape, 1, got, &r->out_shape, 0, 0,
                           kc_wino_fly_tile);
    unsetenv("KC_WINOFLY_FUSED");
    if (tile != (f2 ? 2 : 0))
        fail_msg("%s, KC_WINOFLY_FUSED=0: tiles of %d, expected %d", what, tile, f2 ? 2 : 0);
    expect_close(got, want, r->out_count, 1e-4f * peak, "%s, KC_WINOFLY_FUSED=0", what);
    kc_threads_enter(0);
    free(pieces);
}

static void wino_fly_layers_isa(void)
{
    static const conv_case cases[] = {
        {"3x3 256 -> 256 same on 14x14", "Conv2D", KC_CONV_PLAIN, 2, 1, 14, 14, 256, 256, 3, 1,
         1, 1, 0, 0, "relu", 1},
        {"3x3 96 -> 72 same on four 7x7, relu6", "Conv2D", KC_CONV_PLAIN, 2, 4, 7, 7, 96, 72, 3,
         1, 1, 1, 0, 0, "relu6", 1},
        {"3x3 80 -> 64 valid on two 11x13, elu", "Conv2D", KC_CONV_PLAIN, 2, 2, 11, 13, 80, 64,
         3, 1, 1, 0, 0, 0, "elu", 1},
        {"3x3 128 -> 128 same on one 7x7: 2x2 tiles", "Conv2D", KC_CONV_PLAIN, 2, 1, 7, 7, 128,
         128, 3, 1, 1, 1, 0, 0, "relu", 1},
        {"3x3 200 -> 136 same on one 8x8: 2x2 tiles, relu6", "Conv2D", KC_CONV_PLAIN, 2, 1, 8,
         8, 200, 136, 3, 1, 1, 1, 0, 0, "relu6", 1},
        {"3x3 72 -> 96 valid on three 5x7: 2x2 tiles, elu", "Conv2D", KC_CONV_PLAIN, 2, 3, 5,
         7, 72, 96, 3, 1, 1, 0, 0, 0, "elu", 1},
        {"3x3 128 -> 128 same on one 4x4: 4 tiles of 2x2", "Conv2D", KC_CONV_PLAIN, 2, 1, 4, 4,
         128, 128, 3, 1, 1, 1, 0, 0, "relu", 1},
        {"3x3 48 -> 64 same on 14x14: 48 channels", "Conv2D", KC_CONV_PLAIN, 2, 1, 14, 14, 48,
         64, 3, 1, 1, 1, 0, 0, "relu", 1},
        {"3x3 64 -> 64 same on 24x24: 576 outputs", "Conv2D", KC_CONV_PLAIN, 2, 1, 24, 24, 64,
         64, 3, 1, 1, 1, 0, 0, "relu", 1},
        {"3x3 256 -> 256 same stride 2 on 28x28", "Conv2D", KC_CONV_PLAIN, 2, 1, 28, 28, 256,
         256, 3, 2, 1, 1, 0, 0, "relu", 1},
        {"3x3 96 -> 80 same on one 4x8: 2 tiles of 4x4, relu6", "Conv2D", KC_CONV_PLAIN, 2, 1,
         4, 8, 96, 80, 3, 1, 1, 1, 0, 0, "relu6", 1},
        {"3x3 72 -> 64 valid on one 6x14: 3 tiles of 4x4, elu", "Conv2D", KC_CONV_PLAIN, 2, 1,
         6, 14, 72, 64, 3, 1, 1, 0, 0, 0, "elu", 1},
        {"3x3 128 -> 128 same on one 3x3: 9 outputs", "Conv2D", KC_CONV_PLAIN, 2, 1, 3, 3, 128,
         128, 3, 1, 1, 1, 0, 0, "relu", 1},
    };
    static const int want_parts[][3] = {{1, 2, 3}, {1, 2, 2}, {1, 2, 2}, {1, 2, 3}, {1, 2, 3},
                                        {1, 2, 3}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0},
                                        {0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
    /* the output tile each takes: 4x4, or 2x2 where 4x4 has too few */
    static const int want_tile[] = {4, 4, 4, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0};
    /* where the instruction set has kc_wino_simd's fused4, the cases of
     * one image of up to four 4x4 tiles and 16 outputs or more take F(4x4)
     * with the kernel transformed inside the products (kc_wf_fused) */
    static const int fused_case[] = {0, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1, 0};
    /* parts of at least two output vectors: 8 and 9 vectors, 4 and 5 */
    static const int fused_parts[][3] = {{1, 2, 3}, {1, 2, 2}};
    const kc_wino_simd *simd = kc_wino_simd_pick();
    int fused = simd && simd->fused4;
    if (!kc_dnnl_ready())
        skip();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const conv_case *c = &cases[i];
        conv_run r;
        setup(c, &r);
        const float *ins[1] = {r.x};
        float *want = plain_output(&r);
        float *got = malloc((size_t)r.out_count * sizeof *got);
        float peak = peak_of(want, r.out_count);
        int is_fused = fused && fused_case[i];
        const int *parts_wanted = want_parts[i];
        if (is_fused)
            parts_wanted = fused_parts[c->f > 80 ? 0 : 1];
        int tile_wanted = is_fused ? 4 : want_tile[i];
        expect_parts_1_to_3(&r, want, got, peak, kc_wino_fly_parts, kc_wino_fly_balance,
                            parts_wanted, c->what);
        if (is_fused)
            expect_fused(&r, want, got, peak, fused_case[i] && want_tile[i] == 2, c->what);
        /* the threads sharing one buffer of transformed inputs, each
         * making its own; no kernel fetched ahead */
        static const char *const ways[3][2] = {{"KC_WINOFLY_ALONE", "0"},
                                               {"KC_WINOFLY_ALONE", "1"},
                                               {"KC_WINOFLY_PREFETCH", "0"}};
        for (int w = 0; w < 3; w++) {
            setenv(ways[w][0], ways[w][1], 1);
            for (int t = 1 + (w < 2); t <= 3; t++) {
                expect_count_close(&r, want, got, peak, t, kc_wino_fly_parts,
                                   parts_wanted[t - 1], ways[w][0], c->what);
                if (w < 2 && parts_wanted[t - 1] > 1)
                    expect_count_close(&r, want, got, peak, t, kc_wino_fly_alone,
                                       ways[w][1][0] == '1', "alone", c->what);
            }
            unsetenv(ways[w][0]);
        }
        if (parts_wanted[1] > 1) {
            expect_fly_touches(&r, want, got, peak, c->what);
            expect_fly_fetch_rows(&r, want, got, peak, c->what);
        }
        /* by default, each its own where its inputs and piece of kernel
         * fit the core's L2 (kc_wf_alone_fits): the one 7x7 image of 128
         * channels (131 + 197 KB) on any L2 of 512 KB or more */
        if (i == 3)
            expect_count_close(&r, want, got, peak, 2, kc_wino_fly_alone, 1, "alone", c->what);
        for (int t = 1; t <= 2; t++)
            expect_count_close(&r, want, got, peak, t, kc_wino_fly_tile, tile_wanted, "tile",
                               c->what);
        if (want_tile[i] == 2 && !is_fused) {
            setenv("KC_WINOFLY_F2", "0", 1);
            int tile = exec_kernel(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 0, 0,
                                   kc_wino_fly_tile);
            unsetenv("KC_WINOFLY_F2");
            if (tile)
                fail_msg("%s: tiles of %d although KC_WINOFLY_F2=0", c->what, tile);
            expect_close(got, want, r.out_count, 1e-4f * peak, "%s, KC_WINOFLY_F2=0", c->what);
        }
        kc_threads_enter(2);
        if (exec_kernel(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 1, 0,
                        kc_wino_fly_parts))
            fail_msg("%s: Winograd although exact", c->what);
        static const char *const off[2] = {"KC_WINOFLY", "KC_WINO2D"};
        for (int k = 0; k < 2; k++) {
            setenv(off[k], "0", 1);
            int parts = exec_kernel(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 0, 0,
                                    kc_wino_fly_parts);
            unsetenv(off[k]);
            if (parts)
                fail_msg("%s: the kernel transformed as it runs although %s=0", c->what,
                         off[k]);
            expect_close(got, want, r.out_count, 1e-4f * peak, "%s, %s=0", c->what, off[k]);
        }
        if (parts_wanted[0]) {
            kc_threads_enter(parts_wanted[1] ? 2 : 1);
            kc_kernel_state *slot = NULL;
            exec_in_slot(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 0, 0, &slot);
            int64_t wn = 9 * c->c * c->f;
            for (int64_t k = 0; k < wn; k++)
                r.weights[0].data[k] = NAN;
            memset(got, 0, (size_t)r.out_count * sizeof *got);
            exec_in_slot(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 0, 0, &slot);
            expect_close(got, want, r.out_count, 1e-4f * peak, "%s, its own copy", c->what);
            slot->free(slot);
        }
        kc_threads_enter(0);
        free(want);
        free(got);
        teardown(&r);
    }
}

/* Forty 14x14 images of 64 channels make two blocks of tiles (640 tiles,
 * 455 at most a block): each part claims its output vectors anew in each
 * block, never taking vectors twice, whether the parts share the
 * transformed inputs or make their own (KC_WINOFLY_ALONE=1, where each
 * part claims from a copy of the runs no other part sees: with stealing
 * there it ran every vector, twice the work). The parts' runs together
 * (kc_balance.ran) are the 4 vectors once per block. */
static void wino_fly_blocks_claimed_isa(void)
{
    static const conv_case c = {"3x3 64 -> 64 same on forty 14x14", "Conv2D", KC_CONV_PLAIN, 2,
                                40, 14, 14, 64, 64, 3, 1, 1, 1, 0, 0, "relu", 1};
    if (!kc_dnnl_ready())
        skip();
    conv_run r;
    setup(&c, &r);
    const float *ins[1] = {r.x};
    float *want = plain_output(&r);
    float *got = malloc((size_t)r.out_count * sizeof *got);
    float peak = peak_of(want, r.out_count);
    static const char *const alone[2] = {"0", "1"};
    kc_threads_enter(2);
    for (int w = 0; w < 2; w++) {
        setenv("KC_WINOFLY_ALONE", alone[w], 1);
        kc_kernel_state *slot = NULL;
        exec_in_slot(&r.layer, ins, &r.in_shape, 1, got, &r.out_shape, 0, 0, &slot);
        unsetenv("KC_WINOFLY_ALONE");
        expect_close(got, want, r.out_count, 1e-4f * peak, "%s, alone %s", c.what, alone[w]);
        kc_balance *b = kc_wino_fly_balance(slot);
        if (!b || b->parts != 2)
            fail_msg("%s, alone %s: not cut in two", c.what, alone[w]);
        if (b->ran[0] + b->ran[1] != 2 * 4)
            fail_msg("%s, alone %s: the parts ran %lld + %lld vectors, expected 8 in all", c.what,
                     alone[w], (long long)b->ran[0], (long long)b->ran[1]);
        slot->free(slot);
    }
    kc_threads_enter(0);
    free(want);
    free(got);
    teardown(&r);
}

static void test_wino_fly_blocks_claimed(void **state)
{
    (void)state;
    each_isa(wino_fly_blocks_claimed_isa);
}

static void test_wino_fly_layers(void **state)
{
    (void)state;
    each_isa(wino_fly_layers_isa);
}

/* Pooling, cut the same way: "same" average pooling divides by the real
 * cells of each window, so a part's edge must not count as padding. */
typedef struct pool_case {
    const char *what;
    const char *cls;
    kc_pool_kind kind;
    int64_t n, h, w, c, k, s;
    int padding;
} pool_case;

static int run_pool(kc_layer *layer, const float *x, const kc_shape *is, const kc_shape *os,
                    float *out)
{
    const float *ins[1] = {x};
    return exec_kernel(layer, ins, is, 1, out, os, 0, 0, kc_dnnl_pool_parts);
}

static void check_pool(const pool_case *c)
{
    kc_pool_attrs a;
    memset(&a, 0, sizeof a);
    a.kind = c->kind;
    a.spatial = 2;
    a.pool[0] = a.pool[1] = c->k;
    a.strides[0] = a.strides[1] = c->s;
    a.padding = c->padding;
    kc_layer layer;
    memset(&layer, 0, sizeof layer);
    layer.name = (char *)c->what;
    layer.class_name = (char *)c->cls;
    layer.def = kc_op_lookup(NULL, c->cls);
    layer.attrs = &a;
    int64_t oh = c->padding ? (c->h + c->s - 1) / c->s : (c->h - c->k) / c->s + 1, ow = 0, w;
    for (w = c->w;; w += c->w) { /* wide enough to be cut (see setup) */
        ow = c->padding ? (w + c->s - 1) / c->s : (w - c->k) / c->s + 1;
        if ((c->h * w + oh * ow) * c->n * c->c * 4 >= KC_DNNL_CUT_MIN_BYTES * 3 / 2)
            break;
    }
    kc_shape is = {.rank = 4, .dims = {c->n, c->h, w, c->c}};
    kc_shape os = {.rank = 4, .dims = {c->n, oh, ow, c->c}};
    int64_t on = c->n * oh * ow * c->c;
    float *x = rand_buf(c->n * c->h * w * c->c);
    float *want = malloc((size_t)on * sizeof *want), *got = malloc((size_t)on * sizeof *got);
    setenv("KC_DNNL", "0", 1);
    assert_int_equal(run_pool(&layer, x, &is, &os, want), 0);
    unsetenv("KC_DNNL");
    static const int threads[] = {1, 2, 3, 5};
    for (int t = 0; t < 4; t++) {
        kc_threads_enter(threads[t]);
        int parts = run_pool(&layer, x, &is, &os, got);
        int64_t along = c->n > 1 ? c->n : oh;
        int expect = threads[t] < along ? threads[t] : (int)along;
        if (parts != expect)
            fail_msg("%s, %d threads: %d parts, expected %d", c->what, threads[t], parts, expect);
        expect_close(got, want, on, 1e-5f, "%s, %d threads", c->what, threads[t]);
    }
    kc_threads_enter(0);
    free(x);
    free(want);
    free(got);
}

static void test_pool_cuts(void **state)
{
    (void)state;
    static const pool_case cases[] = {
        {"average 3x3 same s1 (Inception)", "AveragePooling2D", KC_POOL_AVG, 1, 9, 7, 5, 3, 1, 1},
        {"max 3x3 valid s2 (Inception)", "MaxPooling2D", KC_POOL_MAX, 1, 11, 9, 4, 3, 2, 0},
        {"max 3x3 same s2, odd rows", "MaxPooling2D", KC_POOL_MAX, 1, 7, 7, 3, 3, 2, 1},
        {"average 2x2 valid s2, batch 3", "AveragePooling2D", KC_POOL_AVG, 3, 6, 6, 4, 2, 2, 0},
        {"max 3x3 valid s2, 70 channels", "MaxPooling2D", KC_POOL_MAX, 2, 9, 9, 70, 3, 2, 0},
        {"max 3x3 same s2, 192 channels", "MaxPooling2D", KC_POOL_MAX, 1, 9, 7, 192, 3, 2, 1},
        {"max 2x2 valid s2, 17 channels", "MaxPooling2D", KC_POOL_MAX, 3, 6, 6, 17, 2, 2, 0},
        {"max 9x9 same s1 (past 64 cells), 20 channels", "MaxPooling2D", KC_POOL_MAX, 1, 12, 5,
         20, 9, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_pool(&cases[i]);
}

/* On an AVX-512 or AVX2 CPU every cut part of a 2-D max pooling runs kerasc's own
 * loop (maxpool_nhwc.c) instead of oneDNN's kernel, with the same bits as
 * the plain path: whole 64-channel blocks, 16-channel blocks and masked
 * tails, "same" windows cut at the input's edges, windows of more cells
 * than it gathers at once. */
static void maxpool_hand_isa(void)
{
    if (!kc_dnnl_ready() || !kc_maxpool_nhwc_available())
        skip();
    static const int64_t channels[] = {3, 16, 70, 192, 40};
    static const int64_t windows[][3] = {{3, 2, 0}, {3, 2, 1}, {9, 1, 1}}; /* k, s, same */
    kc_threads_enter(2);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            int64_t n = 2, h = 13, w = 11, c = channels[i], k = windows[j][0], st = windows[j][1];
            int same = (int)windows[j][2];
            int64_t oh = same ? (h + st - 1) / st : (h - k) / st + 1;
            int64_t ow = same ? (w + st - 1) / st : (w - k) / st + 1;
            kc_pool_attrs a = {.kind = KC_POOL_MAX, .spatial = 2, .pool = {k, k, 1},
                               .strides = {st, st, 1}, .padding = same};
            kc_layer layer = {.name = "pool", .class_name = "MaxPooling2D", .attrs = &a};
            layer.def = kc_op_lookup(NULL, "MaxPooling2D");
            kc_shape is = {.rank = 4, .dims = {n, h, w, c}};
            kc_shape os = {.rank = 4, .dims = {n, oh, ow, c}};
            int64_t on = n * oh * ow * c;
            float *x = rand_buf(n * h * w * c);
            float *want = malloc((size_t)on * sizeof *want), *got = malloc((size_t)on * sizeof *got);
            const float *ins[1] = {x};
            setenv("KC_DNNL", "0", 1);
            exec_kernel(&layer, ins, &is, 1, want, &os, 0, 0, NULL);
            unsetenv("KC_DNNL");
            int hand = exec_kernel(&layer, ins, &is, 1, got, &os, 0, 0, kc_dnnl_pool_hand_parts);
            if (hand < 1)
                fail_msg("max %ldx%ld s%ld, %ld channels: no part ran the AVX-512 loop", (long)k,
                         (long)k, (long)st, (long)c);
            if (memcmp(got, want, (size_t)on * sizeof *got))
                fail_msg("max %ldx%ld s%ld%s, %ld channels: differs from the plain path", (long)k,
                         (long)k, (long)st, same ? " same" : "", (long)c);
            free(x);
            free(want);
            free(got);
        }
    kc_threads_enter(0);
}

static void test_maxpool_hand(void **state)
{
    (void)state;
    each_isa(maxpool_hand_isa);
}

/* A ZeroPadding folded into a "valid" max pooling (pad_before/after,
 * runtime/fuse.c) of non-negative values: oneDNN's pooling and the plain
 * loops, cut by rows and images, must equal padding with zeros and then
 * pooling. */
static void check_pool_folded_pad(int64_t n, int64_t h, int64_t w, int64_t pb, int64_t pa,
                                  int64_t k, int64_t st)
{
    int64_t c = 16, ph = h + pb + pa, pw = w + pb + pa;
    int64_t oh = (ph - k) / st + 1, ow = (pw - k) / st + 1;
    kc_pool_attrs a = {.kind = KC_POOL_MAX, .spatial = 2, .pool = {k, k, 1},
                       .strides = {st, st, 1}};
    kc_layer layer = {.name = "pool", .class_name = "MaxPooling2D", .attrs = &a};
    layer.def = kc_op_lookup(NULL, "MaxPooling2D");
    kc_shape is = {.rank = 4, .dims = {n, ph, pw, c}}, os = {.rank = 4, .dims = {n, oh, ow, c}};
    float *x = rand_buf(n * h * w * c), *padded = calloc((size_t)(n * ph * pw * c), sizeof(float));
    for (int64_t i = 0; i < n * h * w * c; i++)
        x[i] = fabsf(x[i]); /* a relu's output */
    for (int64_t b = 0; b < n; b++)
        for (int64_t y = 0; y < h; y++)
            memcpy(padded + ((b * ph + y + pb) * pw + pb) * c, x + (b * h + y) * w * c,
                   (size_t)(w * c) * sizeof(float));
    int64_t on = n * oh * ow * c;
    float *want = malloc((size_t)on * sizeof *want), *got = malloc((size_t)on * sizeof *got);
    setenv("KC_DNNL", "0", 1);
    kc_threads_enter(1);
    run_pool(&layer, padded, &is, &os, want);
    for (int i = 0; i < 2; i++) {
        a.pad_before[i] = pb;
        a.pad_after[i] = pa;
    }
    run_pool(&layer, x, &is, &os, got); /* the plain loops */
    expect_close(got, want, on, 0.0f, "max pooling, ZeroPadding (%lld, %lld) folded, plain",
                 (long long)pb, (long long)pa);
    unsetenv("KC_DNNL");
    static const int threads[] = {1, 2, 3};
    for (int t = 0; t < 3; t++) {
        kc_threads_enter(threads[t]);
        memset(got, 0, (size_t)on * sizeof *got);
        run_pool(&layer, x, &is, &os, got);
        expect_close(got, want, on, 0.0f, "max pooling %lldx%lld, ZeroPadding (%lld, %lld) "
                     "folded, %lld images, %d threads", (long long)h, (long long)w,
                     (long long)pb, (long long)pa, (long long)n, threads[t]);
    }
    kc_threads_enter(0);
    free(x);
    free(padded);
    free(want);
    free(got);
}

static void test_pool_folded_pad(void **state)
{
    (void)state;
    check_pool_folded_pad(1, 112, 112, 1, 1, 3, 2); /* ResNet50's pool1_pad + pool1_pool */
    check_pool_folded_pad(3, 21, 40, 1, 1, 3, 2);   /* cut by images */
    check_pool_folded_pad(1, 30, 31, 0, 1, 3, 2);   /* after only; odd width */
    check_pool_folded_pad(1, 25, 64, 2, 1, 3, 1);   /* more before than the window needs */
}

/* Concatenate, cut by images or rows: every element lands where the
 * uncut copy puts it, for any thread count and axis. */
static void check_concat(int64_t n, int64_t h, int64_t w, int axis)
{
    kc_merge_attrs a = {.kind = KC_MERGE_CONCAT, .axis = axis};
    kc_layer layer;
    memset(&layer, 0, sizeof layer);
    layer.name = layer.class_name = (char *)"Concatenate";
    layer.def = kc_op_lookup(NULL, "Concatenate");
    layer.attrs = &a;
    int64_t ch[3] = {5, 16, 3};
    kc_shape is[3], os = {.rank = 4, .dims = {n, h, w, 0}};
    int ax = axis < 0 ? axis + 4 : axis;
    const float *ins[3];
    float *bufs[3];
    for (int k = 0; k < 3; k++) {
        is[k] = (kc_shape){.rank = 4, .dims = {n, h, w, 8}};
        is[k].dims[ax] = ch[k];
        bufs[k] = rand_buf(is[k].dims[0] * is[k].dims[1] * is[k].dims[2] * is[k].dims[3]);
        ins[k] = bufs[k];
    }
    os = is[0];
    os.dims[ax] = ch[0] + ch[1] + ch[2];
    int64_t on = os.dims[0] * os.dims[1] * os.dims[2] * os.dims[3];
    float *want = malloc((size_t)on * sizeof *want), *got = malloc((size_t)on * sizeof *got);
    /* the reference: element by element */
    int64_t idx[4];
    for (idx[0] = 0; idx[0] < os.dims[0]; idx[0]++)
        for (idx[1] = 0; idx[1] < os.dims[1]; idx[1]++)
            for (idx[2] = 0; idx[2] < os.dims[2]; idx[2]++)
                for (idx[3] = 0; idx[3] < os.dims[3]; idx[3]++) {
                    int k = 0;
                    int64_t j[4] = {idx[0], idx[1], idx[2], idx[3]};
                    while (j[ax] >= ch[k])
                        j[ax] -= ch[k++];
                    const kc_shape *s = &is[k];
                    int64_t o = ((idx[0] * os.dims[1] + idx[1]) * os.dims[2] + idx[2]) *
                                    os.dims[3] + idx[3];
                    want[o] = ins[k][((j[0] * s->dims[1] + j[1]) * s->dims[2] + j[2]) *
                                         s->dims[3] + j[3]];
                }
    static const int threads[] = {1, 2, 3, 5};
    for (int t = 0; t < 4; t++) {
        kc_threads_enter(threads[t]);
        memset(got, 0, (size_t)on * sizeof *got);
        exec_kernel(&layer, ins, is, 3, got, &os, 0, 0, NULL);
        if (memcmp(got, want, (size_t)on * sizeof *got))
            fail_msg("concat n=%lld h=%lld axis %d, %d threads differs", (long long)n,
                     (long long)h, axis, threads[t]);
    }
    kc_threads_enter(0);
    for (int k = 0; k < 3; k++)
        free(bufs[k]);
    free(want);
    free(got);
}

/* More inputs than the copy gathers at once (KC_CONCAT_GROUP, 64): 70
 * inputs of 1 to 3 channels each, each cell its input's number and
 * channel, so a misplaced block shows. */
static void check_concat_many(void)
{
    enum { N_IN = 70 };
    kc_merge_attrs a = {.kind = KC_MERGE_CONCAT, .axis = -1};
    kc_layer layer = {.name = "concat", .class_name = "Concatenate", .attrs = &a};
    layer.def = kc_op_lookup(NULL, "Concatenate");
    kc_shape is[N_IN], os = {.rank = 4, .dims = {2, 5, 40, 0}};
    const float *ins[N_IN];
    float *bufs[N_IN];
    for (int k = 0; k < N_IN; k++) {
        is[k] = (kc_shape){.rank = 4, .dims = {2, 5, 40, 1 + k % 3}};
        int64_t count = 2 * 5 * 40 * is[k].dims[3];
        bufs[k] = malloc((size_t)count * sizeof(float));
        for (int64_t i = 0; i < count; i++)
            bufs[k][i] = (float)(k * 10 + i % is[k].dims[3]);
        ins[k] = bufs[k];
        os.dims[3] += is[k].dims[3];
    }
    int64_t pixels = 2 * 5 * 40, on = pixels * os.dims[3];
    float *got = calloc((size_t)on, sizeof *got);
    kc_threads_enter(2);
    exec_kernel(&layer, ins, is, N_IN, got, &os, 0, 0, NULL);
    kc_threads_enter(0);
    for (int64_t px = 0; px < pixels; px++) {
        int64_t c = 0;
        for (int k = 0; k < N_IN; k++)
            for (int64_t j = 0; j < is[k].dims[3]; j++, c++)
                if (got[px * os.dims[3] + c] != (float)(k * 10 + j))
                    fail_msg("concat of %d inputs: pixel %lld channel %lld is %g, want %g", N_IN,
                             (long long)px, (long long)c, got[px * os.dims[3] + c],
                             (double)(k * 10 + j));
    }
    for (int k = 0; k < N_IN; k++)
        free(bufs[k]);
    free(got);
}

static void test_concat_cuts(void **state)
{
    (void)state;
    check_concat(1, 9, 40, -1); /* one image: cut by rows */
    check_concat(3, 5, 40, 3);  /* three images: cut by images */
    check_concat(1, 7, 40, 1);  /* along the rows: runs whole */
    check_concat(2, 7, 40, 2);  /* along the columns, two images */
    check_concat_many();
}

/* ------------------------------ 1x1 + depthwise 3x3 fused (post_dw) */

/* Each fusable pair equals its two layers run on the plain paths, on 1,
 * 2 and 3 threads. Where kerasc's depthwise loop runs (kc_dw_enabled),
 * the stride-1 pairs of 12+ columns run their depthwise layer on it,
 * after oneDNN's 1x1 (own_dw), every part of them, and equal oneDNN's
 * fused pair (KC_DW=0) bit for bit; the others none. */

typedef struct dw_case {
    const char *what;
    int64_t n, h, w, c, f;   /* images, rows, columns, in and expanded channels */
    int64_t k, s, d, mult;   /* the depthwise kernel, stride, dilation, multiplier */
    int padding;             /* the depthwise layer's: 0 valid, 1 same */
    int64_t pad_b, pad_a;    /* a ZeroPadding folded into it, before / after */
    const char *act1, *act2;
    int bias1, bias2;
    int fusable;             /* kc_dnnl_conv_dw_fusable must say so */
    int own;                 /* where kc_dw_enabled: the depthwise layer on dw.c's loop */
} dw_case;

typedef struct dw_run {
    kc_conv_attrs pa, da;
    kc_layer pl, dl;
    kc_weight pw[2], dw[2];
    kc_shape in, mid, dw_in, out;
    float *x;
    int64_t mid_count, out_count;
} dw_run;

static void dw_setup(const dw_case *c, dw_run *r)
{
    memset(r, 0, sizeof *r);
    r->pa.kind = KC_CONV_PLAIN;
    r->da.kind = KC_CONV_DEPTHWISE;
    r->pa.spatial = r->da.spatial = 2;
    r->pa.filters = c->f;
    r->pa.groups = r->da.groups = r->pa.depth_multiplier = 1;
    r->da.depth_multiplier = c->mult;
    r->pa.use_bias = c->bias1;
    r->da.use_bias = c->bias2;
    r->pa.activation = c->act1;
    r->da.activation = c->act2;
    r->da.padding = c->padding;
    r->in = (kc_shape){.rank = 4, .dims = {c->n, c->h, c->w, c->c}};
    r->mid = (kc_shape){.rank = 4, .dims = {c->n, c->h, c->w, c->f}};
    r->dw_in = r->mid; /* the value's shape: padded by a folded ZeroPadding */
    r->out = r->mid;
    r->out.dims[3] = c->f * c->mult;
    for (int i = 0; i < 3; i++) {
        r->pa.kernel[i] = r->pa.strides[i] = r->pa.dilation[i] = 1;
        r->da.kernel[i] = i < 2 ? c->k : 1;
        r->da.strides[i] = i < 2 ? c->s : 1;
        r->da.dilation[i] = i < 2 ? c->d : 1;
        r->pa.output_padding[i] = r->da.output_padding[i] = -1;
    }
    for (int i = 0; i < 2; i++) {
        r->da.pad_before[i] = c->pad_b;
        r->da.pad_after[i] = c->pad_a;
        r->dw_in.dims[1 + i] += c->pad_b + c->pad_a;
        r->out.dims[1 + i] =
            kc_conv_out_len(r->dw_in.dims[1 + i], (c->k - 1) * c->d + 1, c->s, 1, c->padding);
    }
    r->x = rand_buf(c->n * c->h * c->w * c->c);
    r->pw[0].data = rand_buf(c->c * c->f);
    r->pw[1].data = rand_buf(c->f);
    r->dw[0].data = rand_buf(c->k * c->k * c->f * c->mult);
    r->dw[1].data = rand_buf(c->f * c->mult);
    r->mid_count = kc_count(&r->mid);
    r->out_count = kc_count(&r->out);
    r->pl = (kc_layer){.name = "expand", .class_name = "Conv2D", .attrs = &r->pa,
                       .weights = r->pw, .n_weights = 2};
    r->dl = (kc_layer){.name = "depthwise", .class_name = "DepthwiseConv2D", .attrs = &r->da,
                       .weights = r->dw, .n_weights = 2};
    r->pl.def = kc_op_lookup(NULL, "Conv2D");
    r->dl.def = kc_op_lookup(NULL, "DepthwiseConv2D");
}

static void dw_teardown(dw_run *r)
{
    free(r->x);
    for (int i = 0; i < 2; i++) {
        free(r->pw[i].data);
        free(r->dw[i].data);
    }
}

/* Pair r (r->pa.post_dw set) run once from ins[0] into out; returns
 * count_of of its state. */
static int run_pair(dw_run *r, const float **ins, float *out,
                                     int (*count_of)(const kc_kernel_state *))
{
    return exec_kernel(&r->pl, ins, &r->in, 1, out, &r->mid, 0, 0, count_of);
}

static void check_dw_case(const dw_case *c)
{
    dw_run r;
    dw_setup(c, &r);
    float *mid = malloc((size_t)r.mid_count * sizeof *mid);
    float *want = malloc((size_t)r.out_count * sizeof *want);
    float *got = malloc((size_t)r.out_count * sizeof *got);
    /* the reference: both layers, one after the other, plain paths */
    setenv("KC_DNNL", "0", 1);
    kc_threads_enter(1);
    const float *ins[1] = {r.x};
    exec_kernel(&r.pl, ins, &r.in, 1, mid, &r.mid, 1, 0, NULL);
    ins[0] = mid;
    exec_kernel(&r.dl, ins, &r.dw_in, 1, want, &r.out, 1, 0, NULL);
    unsetenv("KC_DNNL");
    int fusable = kc_dnnl_conv_dw_fusable(&r.pa, &r.dl, &r.in, &r.mid);
    if (fusable != c->fusable)
        fail_msg("%s: fusable %d, expected %d", c->what, fusable, c->fusable);
    float peak = peak_of(want, r.out_count);
    static const int threads[] = {1, 2, 3};
    float *onednn = malloc((size_t)r.out_count * sizeof *onednn);
    int own = c->own && kc_dw_enabled();
    for (int t = 0; fusable && t < 3; t++) {
        kc_threads_enter(threads[t]);
        r.pa.post_dw = &r.dl;
        memset(got, 0, (size_t)r.out_count * sizeof *got);
        ins[0] = r.x;
        int parts = run_pair(&r, ins, got, kc_dnnl_conv_parts);
        int owned = run_pair(&r, ins, got, kc_dnnl_conv_own_dw_parts);
        if (owned != (own ? parts : 0))
            fail_msg("%s, %d threads: %d of %d parts on kerasc's depthwise loop, expected %s",
                     c->what, threads[t], owned, parts, own ? "all" : "none");
        /* one image on 2+ threads: its output rows cut between them, and
         * fused at batch 1 only then (kc_fuse_dw_plan) */
        int rows_want = own && c->n == 1 && threads[t] > 1 ? threads[t] : 0;
        int rows = run_pair(&r, ins, got, kc_dnnl_conv_row_parts);
        int rows_plan = kc_dnnl_conv_dw_row_parts(&r.pa, &r.dl, &r.in, &r.mid);
        if (rows != rows_want || rows_plan != rows_want)
            fail_msg("%s, %d threads: rows cut in %d (planned %d), expected %d", c->what,
                     threads[t], rows, rows_plan, rows_want);
        if (rows_want) {
            float *whole = malloc((size_t)r.out_count * sizeof *whole);
            setenv("KC_DW_ROWS", "0", 1);
            if (run_pair(&r, ins, whole, kc_dnnl_conv_row_parts) ||
                kc_dnnl_conv_dw_row_parts(&r.pa, &r.dl, &r.in, &r.mid))
                fail_msg("%s: rows cut with KC_DW_ROWS=0", c->what);
            unsetenv("KC_DW_ROWS");
            expect_close(got, whole, r.out_count, 0.0f, "%s, %d threads, against one part",
                         c->what, threads[t]);
            free(whole);
        }
        /* the loop's sums are oneDNN's: the same bits as its fused pair */
        setenv("KC_DW", "0", 1);
        if (run_pair(&r, ins, onednn, kc_dnnl_conv_own_dw_parts))
            fail_msg("%s: on kerasc's depthwise loop with KC_DW=0", c->what);
        unsetenv("KC_DW");
        r.pa.post_dw = NULL;
        expect_close(got, want, r.out_count, 1e-4f * peak, "%s, %d threads", c->what,
                     threads[t]);
        expect_close(got, onednn, r.out_count, 0.0f, "%s, %d threads, against oneDNN's pair",
                     c->what, threads[t]);
    }
    free(onednn);
    kc_threads_enter(0);
    free(mid);
    free(want);
    free(got);
    dw_teardown(&r);
}

static void test_dw_fused(void **state)
{
    (void)state;
    static const dw_case cases[] = {
        {"s1 same, relu6 both (MobileNetV2's stride-1 blocks)", 2, 14, 14, 24, 144, 3, 1, 1, 1,
         1, 0, 0, "relu6", "relu6", 1, 1, 1, 1},
        {"s2 valid after ZeroPadding (0, 1), even size (its stride-2 blocks)", 2, 16, 16, 16,
         96, 3, 2, 1, 1, 0, 0, 1, "relu6", "relu6", 1, 1, 1},
        {"s2 same, odd size: one pad each side", 3, 15, 15, 8, 32, 3, 2, 1, 1, 1, 0, 0, "relu",
         "relu", 1, 1, 1},
        {"s2 same, even size: the extra pad after", 2, 10, 12, 8, 48, 3, 2, 1, 1, 1, 0, 0,
         NULL, "relu6", 1, 1, 1},
        {"s1 same, linear, no biases", 2, 9, 11, 5, 40, 3, 1, 1, 1, 1, 0, 0, "linear", NULL,
         0, 0, 1},
        {"s1 valid after a ZeroPadding of 1 each side", 3, 7, 7, 16, 64, 3, 1, 1, 1, 0, 1, 1,
         "relu", "linear", 1, 0, 1},
        {"one image", 1, 12, 12, 16, 64, 3, 1, 1, 1, 1, 0, 0, "relu6", "relu6", 1, 1, 1, 1},
        {"s1 same, linear 1x1, no depthwise bias, 3 images of 13x16x40", 3, 13, 16, 8, 40, 3, 1,
         1, 1, 1, 0, 0, NULL, "relu", 1, 0, 1, 1},
        /* sizes where oneDNN 2.6 prefers its broken jit_1x1 fusion (wrong
         * values on all of these before kerasc took the generic one only) */
        {"one big image, s2 valid after ZeroPadding (0, 1)", 1, 112, 112, 8, 48, 3, 2, 1, 1, 0,
         0, 1, "relu6", "relu6", 1, 1, 1, 1},
        {"two 57x31 images, s2 same (one pad each side)", 2, 57, 31, 16, 32, 3, 2, 1,
         1, 1, 0, 0, "relu", "relu6", 1, 1, 1, 1},
        {"one big image, s1 same", 1, 112, 112, 16, 48, 3, 1, 1, 1, 1, 0, 0, "relu6", "relu6",
         1, 1, 1, 1},
        {"two 56x56 images, s1 same, 24 -> 144", 2, 56, 56, 24, 144, 3, 1, 1, 1, 1, 0, 0,
         "relu6", "relu6", 1, 1, 1, 1},
        /* not fusable: run as two layers */
        {"s1 valid: oneDNN's post-op keeps the size at stride 1", 2, 9, 11, 5, 40, 3, 1, 1, 1,
         0, 0, 0, "relu", "relu", 1, 1, 0},
        {"5x5 depthwise", 2, 12, 12, 8, 32, 5, 1, 1, 1, 1, 0, 0, "relu", "relu", 1, 1, 0},
        {"dilated depthwise", 2, 12, 12, 8, 32, 3, 1, 2, 1, 1, 0, 0, "relu", "relu", 1, 1, 0},
        {"depth multiplier 2", 2, 12, 12, 8, 32, 3, 1, 1, 2, 1, 0, 0, "relu", "relu", 1, 1, 0},
        {"an activation oneDNN does not run (tanh)", 2, 12, 12, 8, 32, 3, 1, 1, 1, 1, 0, 0,
         "relu", "tanh", 1, 1, 0},
        {"unequal pads before (a ZeroPadding of 2 then 'valid')", 2, 12, 12, 8, 32, 3, 1, 1, 1,
         0, 3, 0, "relu", "relu", 1, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_dw_case(&cases[i]);
}

/* ------------- the inverted-residual block as one kernel (kernels/irb) */

typedef struct irb_case {
    const char *what;
    int64_t n, h, w, c, f, o;  /* images, rows, columns, in, expanded, out channels */
    int64_t k, s, d, mult;     /* the depthwise kernel, stride, dilation, multiplier */
    int padding;               /* the depthwise layer's: 0 valid, 1 same */
    int64_t pad_b, pad_a;      /* a ZeroPadding folded into it */
    const char *act1, *act2, *act3;
    int bias;                  /* all three layers with biases */
    int residual;              /* 1 in place over the input, 2 into another buffer */
    int fusable;
} irb_case;

/* The three layers on the plain paths, one thread, and the residual
 * added before the projection's activation (relu, relu6 or linear):
 * the reference. */
static float *irb_reference(const dw_run *r, const kc_layer *pl, const kc_shape *out,
                            const float *residual)
{
    int64_t mid_n = r->mid_count, dw_n = r->out_count, out_n = kc_count(out);
    float *mid = malloc((size_t)mid_n * sizeof *mid), *dw = malloc((size_t)dw_n * sizeof *dw);
    float *want = malloc((size_t)out_n * sizeof *want);
    setenv("KC_DNNL", "0", 1);
    kc_threads_enter(1);
    const float *ins[1] = {r->x};
    exec_kernel(&r->pl, ins, &r->in, 1, mid, &r->mid, 1, 0, NULL);
    ins[0] = mid;
    exec_kernel(&r->dl, ins, &r->dw_in, 1, dw, &r->out, 1, 0, NULL);
    ins[0] = dw;
    /* a fused sum comes before the projection's activation */
    kc_conv_attrs *pa = (kc_conv_attrs *)pl->attrs;
    const char *act = pa->activation;
    pa->activation = residual ? "linear" : act;
    exec_kernel(pl, ins, &r->out, 1, want, out, 1, 0, NULL);
    pa->activation = act;
    unsetenv("KC_DNNL");
    for (int64_t i = 0; residual && i < out_n; i++) {
        want[i] += residual[i];
        if (act && strcmp(act, "linear"))
            want[i] = fmaxf(want[i], 0.0f);
        if (act && !strcmp(act, "relu6"))
            want[i] = fminf(want[i], 6.0f);
    }
    free(mid);
    free(dw);
    return want;
}

/* A block case's projection weights and its dw_run freed. */
static void irb_teardown(kc_weight qw[2], dw_run *r)
{
    free(qw[0].data);
    free(qw[1].data);
    dw_teardown(r);
}

/* After a run of a block on state st: it holds the block's state; after
 * the first round its rows' cut goes as far as it goes (kc_balance). */
static void irb_skew_after(kc_kernel_state *st, const char *what, int round)
{
    kc_balance *b = kc_irb_balance(st);
    if (!b)
        fail_msg("%s: no state", what);
    if (!round)
        skew_cut(b);
}

static void check_irb_case(const irb_case *c)
{
    dw_case dc = {c->what, c->n, c->h, c->w, c->c, c->f, c->k, c->s, c->d, c->mult,
                  c->padding, c->pad_b, c->pad_a, c->act1, c->act2, c->bias, c->bias, 0};
    dw_run r;
    dw_setup(&dc, &r);
    kc_conv_attrs qa = r.pa;
    qa.filters = c->o;
    qa.activation = c->act3;
    /* the projection reads the depthwise layer's f * mult channels */
    int64_t proj_in = c->f * c->mult;
    kc_weight qw[2] = {{.data = rand_buf(proj_in * c->o)}, {.data = rand_buf(c->o)}};
    qw[0].shape = (kc_shape){.rank = 4, .dims = {1, 1, proj_in, c->o}};
    r.dw[0].shape = (kc_shape){.rank = 4, .dims = {c->k, c->k, c->f, c->mult}};
    kc_layer ql = {.name = "project", .class_name = "Conv2D", .attrs = &qa, .weights = qw,
                   .n_weights = 2, .def = kc_op_lookup(NULL, "Conv2D")};
    kc_shape out = r.out;
    out.dims[3] = c->o;
    int64_t out_n = kc_count(&out);
    float *other = c->residual == 2 ? rand_buf(out_n) : NULL;
    const float *residual = c->residual == 1 ? r.x : other;
    float *want = irb_reference(&r, &ql, &out, residual);
    int fusable = kc_irb_fusable(&r.pa, &r.dl, &ql, &r.in);
    if (fusable != c->fusable)
        fail_msg("%s: fusable %d, expected %d", c->what, fusable, c->fusable);
    float peak = peak_of(want, out_n);
    float *got = malloc((size_t)(out_n > r.mid_count ? out_n : r.mid_count) * sizeof *got);
    static const int threads[] = {1, 2, 3};
    for (int t = 0; fusable && t < 3; t++) {
        kc_threads_enter(threads[t]);
        qa.accumulate = c->residual != 0;
        r.pa.post_dw = &r.dl;
        r.pa.post_pw = &ql;
        const float *ins[1] = {r.x};
        if (c->residual == 1) { /* in place: the input is the output buffer */
            memcpy(got, r.x, (size_t)out_n * sizeof *got);
            ins[0] = got;
        } else if (c->residual == 2)
            memcpy(got, other, (size_t)out_n * sizeof *got);
        exec_kernel(&r.pl, ins, &r.in, 1, got, &r.mid, 0, 0, NULL);
        r.pa.post_dw = r.pa.post_pw = NULL;
        qa.accumulate = 0;
        expect_close(got, want, out_n, 1e-4f * peak, "%s, %d threads", c->what, threads[t]);
    }
    /* one image on 2 and 3 threads, run again on one state with the
     * parts' rows cut as far as they go (kc_balance): in place, the border
     * rows follow the cut; a block cut by channels keeps its even cut */
    for (int t = 2; fusable && c->n == 1 && t <= 3; t++) {
        kc_threads_enter(t);
        kc_kernel_state *st = NULL;
        for (int round = 0; round < 2; round++) {
            qa.accumulate = c->residual != 0;
            r.pa.post_dw = &r.dl;
            r.pa.post_pw = &ql;
            const float *ins[1] = {r.x};
            if (c->residual == 1) {
                memcpy(got, r.x, (size_t)out_n * sizeof *got);
                ins[0] = got;
            } else if (c->residual == 2)
                memcpy(got, other, (size_t)out_n * sizeof *got);
            exec_in_slot(&r.pl, ins, &r.in, 1, got, &r.mid, 0, 0, &st);
            r.pa.post_dw = r.pa.post_pw = NULL;
            qa.accumulate = 0;
            expect_close(got, want, out_n, 1e-4f * peak, "%s, %d threads%s", c->what, t,
                         round ? ", skewed cut" : "");
            irb_skew_after(st, c->what, round); /* no parts: nothing moves */
            /* one image cut by channels where the weights weigh 9/10 of the
             * expanded image or more (the cases named "wide"), else by rows */
            int narrow = kc_isa() == KC_ISA_AVX512 && kc_isa_vec_bits() == 256;
            if (kc_irb_narrow(st) != narrow)
                fail_msg("%s: narrow products on the 256-bit build %d, expected %d", c->what,
                         kc_irb_narrow(st), narrow);
            int by_channel = kc_irb_balance(st)->parts == 0;
            if (by_channel != (strstr(c->what, "wide") != NULL))
                fail_msg("%s, %d threads: cut by %s", c->what, t,
                         by_channel ? "channels" : "rows");
        }
        st->free(st);
    }
    kc_threads_enter(0);
    free(got);
    free(want);
    free(other);
    irb_teardown(qw, &r);
}

/* The block kernel must equal the three layers run one after another on
 * the plain paths: strides 1 and 2, "same" padding on odd and even
 * sizes, folded ZeroPaddings, channels that are not whole vectors or
 * blocks, the residual in place (rows cut between threads read rows
 * their neighbours overwrite) or into another buffer, several images,
 * bands of rows (a large image); blocks it cannot run are refused. */
static void irb_fused_isa(void)
{
    static const irb_case cases[] = {
        {"s1 same, residual in place (MobileNetV2's stride-1 blocks)", 1, 14, 14, 24, 144, 24,
         3, 1, 1, 1, 1, 0, 0, "relu6", "relu6", "linear", 1, 1, 1},
        {"s1 same, residual in place, odd channels, 3 images", 3, 9, 11, 20, 72, 20, 3, 1, 1, 1,
         1, 0, 0, "relu6", "relu6", NULL, 1, 1, 1},
        {"s1 same, residual into another buffer", 2, 7, 7, 16, 96, 16, 3, 1, 1, 1, 1, 0, 0,
         "relu", "relu6", "linear", 1, 2, 1},
        {"s2 valid after ZeroPadding (0, 1), even size", 1, 16, 16, 16, 96, 24, 3, 2, 1, 1, 0,
         0, 1, "relu6", "relu6", "linear", 1, 0, 1},
        {"s2 same, odd size", 2, 15, 13, 8, 40, 12, 3, 2, 1, 1, 1, 0, 0, "relu", "relu",
         "relu", 1, 0, 1},
        {"s1 valid after a ZeroPadding of 1 each side, no biases", 1, 10, 10, 32, 200, 32, 3, 1,
         1, 1, 0, 1, 1, "linear", NULL, "linear", 0, 1, 1},
        /* weights outweighing the image: cut by channels, partial sums */
        {"wide: 160 -> 960 -> 320 on 7x7", 1, 7, 7, 160, 960, 320, 3, 1, 1, 1, 1, 0, 0, "relu6",
         "relu6", "linear", 1, 0, 1},
        {"wide, residual in place, relu after the sum", 1, 5, 5, 96, 584, 96, 3, 1, 1, 1, 1, 0,
         0, "relu6", "relu6", "relu", 1, 1, 1},
        {"wide, s2 same on 6x6 into 3x3, no biases", 1, 6, 6, 128, 400, 72, 3,
         2, 1, 1, 1, 0, 0, "relu", "linear", "linear", 0, 0, 1},
        /* MobileNetV2's 14x14 blocks 11 and 12: weights 0.98 times the
         * image (the "s1 valid" 10x10 one above: 0.64, by rows) */
        {"wide enough: 96 -> 576 -> 96 on 14x14, residual in place", 1, 14, 14, 96, 576, 96, 3,
         1, 1, 1, 1, 0, 0, "relu6", "relu6", "linear", 1, 1, 1},
        {"one big image in bands, in place", 1, 112, 112, 16, 96, 16, 3, 1, 1, 1, 1, 0, 0,
         "relu6", "relu6", "linear", 1, 1, 1},
        {"one row", 1, 1, 9, 8, 32, 8, 3, 1, 1, 1, 1, 0, 0, "relu6", "relu6", "linear", 1, 1, 1},
        {"two columns, s2 same: no column clear of both edges", 2, 6, 2, 8, 32, 8, 3, 2, 1, 1, 1,
         0, 0, "relu6", "relu6", "linear", 1, 0, 1},
        /* on AVX2, 8k expanded channels and 12+ columns: the depthwise
         * rows on dw.h's loop, each band's rows seen as an image of their
         * own; 200 channels: panels of 16 and a last one of 8 */
        {"s2 same, bands of 3 rows, dw loop", 1, 50, 50, 16, 200, 24, 3, 2, 1, 1, 1, 0, 0,
         "relu6", "relu6", "linear", 1, 0, 1},
        {"s2 same, 2 images whole, dw loop", 2, 24, 24, 8, 32, 8, 3, 2, 1, 1, 1, 0, 0, "relu",
         "relu6", "linear", 1, 0, 1},
        {"s1 valid after ZeroPadding (1, 1), bands, dw loop, in place", 1, 30, 30, 24, 240, 24,
         3, 1, 1, 1, 0, 1, 1, "relu6", "relu", "relu6", 1, 1, 1},
        /* refused: the block kernel knows 3x3, undilated, multiplier 1,
         * relu / relu6 / linear */
        {"5x5 depthwise", 1, 12, 12, 8, 32, 8, 5, 1, 1, 1, 1, 0, 0, "relu", "relu", "linear", 1,
         0, 0},
        {"dilated depthwise", 1, 12, 12, 8, 32, 8, 3, 1, 2, 1, 1, 0, 0, "relu", "relu",
         "linear", 1, 0, 0},
        {"depth multiplier 2", 1, 12, 12, 8, 32, 8, 3, 1, 1, 2, 1, 0, 0, "relu", "relu",
         "linear", 1, 0, 0},
        {"tanh after the depthwise layer", 1, 12, 12, 8, 32, 8, 3, 1, 1, 1, 1, 0, 0, "relu",
         "tanh", "linear", 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_irb_case(&cases[i]);
}

/* A block without expansion (the depthwise layer reads the input, its
 * node carries the projection: MobileNetV2's first block): the two
 * layers on the plain paths, one thread, are the reference; the block
 * on 1 to 3 threads, and one image again on one state with its rows'
 * cut moved as far as it goes, must equal them. c->c is the depthwise
 * layer's channels (c->f unused); c->residual 1: the projection adds a
 * residual, which such a block refuses. */
static void check_irb_identity_case(const irb_case *c)
{
    dw_case dc = {c->what, c->n, c->h, c->w, c->c, c->c, c->k, c->s, c->d, c->mult,
                  c->padding, c->pad_b, c->pad_a, c->act1, c->act2, c->bias, c->bias, 0};
    dw_run r;
    dw_setup(&dc, &r);
    kc_conv_attrs qa = r.pa;
    qa.filters = c->o;
    qa.activation = c->act3;
    qa.use_bias = c->bias;
    qa.accumulate = c->residual != 0;
    int64_t proj_in = c->c * c->mult; /* the depthwise layer's channels */
    kc_weight qw[2] = {{.data = rand_buf(proj_in * c->o)}, {.data = rand_buf(c->o)}};
    qw[0].shape = (kc_shape){.rank = 4, .dims = {1, 1, proj_in, c->o}};
    r.dw[0].shape = (kc_shape){.rank = 4, .dims = {c->k, c->k, c->c, c->mult}};
    kc_layer ql = {.name = "project", .class_name = "Conv2D", .attrs = &qa, .weights = qw,
                   .n_weights = 2, .def = kc_op_lookup(NULL, "Conv2D")};
    int fusable = kc_irb_fusable(NULL, &r.dl, &ql, &r.dw_in);
    if (fusable != c->fusable)
        fail_msg("%s: fusable %d, expected %d", c->what, fusable, c->fusable);
    kc_shape out = r.out;
    out.dims[3] = c->o;
    int64_t out_n = kc_count(&out);
    float *dw = malloc((size_t)r.out_count * sizeof *dw);
    float *want = malloc((size_t)out_n * sizeof *want), *got = malloc((size_t)out_n * sizeof *got);
    setenv("KC_DNNL", "0", 1);
    kc_threads_enter(1);
    const float *ins[1] = {r.x};
    exec_kernel(&r.dl, ins, &r.dw_in, 1, dw, &r.out, 1, 0, NULL);
    ins[0] = dw;
    qa.accumulate = 0;
    exec_kernel(&ql, ins, &r.out, 1, want, &out, 1, 0, NULL);
    unsetenv("KC_DNNL");
    float peak = peak_of(want, out_n);
    for (int t = 1; fusable && t <= 3; t++) {
        kc_threads_enter(t);
        kc_kernel_state *st = NULL;
        for (int round = 0; round < 2; round++) {
            r.da.post_pw = &ql;
            ins[0] = r.x;
            memset(got, 0, (size_t)out_n * sizeof *got);
            exec_in_slot(&r.dl, ins, &r.dw_in, 1, got, &r.out, 0, 0, &st);
            r.da.post_pw = NULL;
            expect_close(got, want, out_n, 1e-4f * peak, "%s, %d threads%s", c->what, t,
                         round ? ", skewed cut" : "");
            if (c->n == 1 && t > 1)
                irb_skew_after(st, c->what, round);
        }
        st->free(st);
    }
    kc_threads_enter(0);
    free(dw);
    free(want);
    free(got);
    irb_teardown(qw, &r);
}

/* Blocks without expansion: "same" padding on even and odd sizes,
 * strides 1 and 2, a folded ZeroPadding (the input value counts it in),
 * channels that are not whole vectors, a projection narrower and wider
 * than a vector, several images (whole together or band by band), a
 * large image in bands; refused: a residual sum, a 5x5 kernel, a depth
 * multiplier. */
static void irb_identity_isa(void)
{
    static const irb_case cases[] = {
        {"no expansion: 32 -> 16, s1 same (MobileNetV2's first block)", 1, 56, 56, 32, 0, 16, 3,
         1, 1, 1, 1, 0, 0, NULL, "relu6", "linear", 1, 0, 1},
        {"no expansion: odd size and channels, 3 images", 3, 9, 11, 20, 0, 36, 3, 1, 1, 1, 1, 0,
         0, NULL, "relu", "relu6", 1, 0, 1},
        {"no expansion: s2 same, odd size, no biases", 2, 15, 13, 40, 0, 72, 3, 2, 1, 1, 1, 0, 0,
         NULL, "linear", "relu", 0, 0, 1},
        {"no expansion: s2 valid after ZeroPadding (0, 1)", 1, 16, 16, 24, 0, 64, 3, 2, 1, 1, 0,
         0, 1, NULL, "relu6", "linear", 1, 0, 1},
        {"no expansion: s1 valid after ZeroPadding (1, 1), 2 images", 2, 12, 12, 16, 0, 16, 3,
         1, 1, 1, 0, 1, 1, NULL, "relu", "linear", 1, 0, 1},
        {"no expansion: one big image in bands", 1, 112, 112, 32, 0, 16, 3, 1, 1, 1, 1, 0, 0,
         NULL, "relu6", "linear", 1, 0, 1},
        {"no expansion: one row", 1, 1, 9, 8, 0, 8, 3, 1, 1, 1, 1, 0, 0, NULL, "relu6",
         "linear", 1, 0, 1},
        /* refused */
        {"no expansion, the projection adds a residual", 1, 8, 8, 16, 0, 16, 3, 1, 1, 1, 1, 0,
         0, NULL, "relu6", "linear", 1, 1, 0},
        {"no expansion, 5x5 depthwise", 1, 12, 12, 8, 0, 8, 5, 1, 1, 1, 1, 0, 0, NULL, "relu",
         "linear", 1, 0, 0},
        {"no expansion, depth multiplier 2", 1, 12, 12, 8, 0, 8, 3, 1, 1, 2, 1, 0, 0, NULL,
         "relu", "linear", 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_irb_identity_case(&cases[i]);
}

/* KC_VEC_BITS says which width AVX-512's multiply-adds run at; anything
 * else leaves the CPU's (256 on AMD's family 0x19, the Zen 4; 512
 * elsewhere). */
static void test_vec_bits(void **state)
{
    (void)state;
    unsetenv("KC_VEC_BITS");
    int cpu = kc_isa_vec_bits();
    assert_true(cpu == 256 || cpu == 512);
    setenv("KC_VEC_BITS", "256", 1);
    assert_int_equal(kc_isa_vec_bits(), 256);
    setenv("KC_VEC_BITS", "512", 1);
    assert_int_equal(kc_isa_vec_bits(), 512);
    setenv("KC_VEC_BITS", "128", 1);
    assert_int_equal(kc_isa_vec_bits(), cpu);
    unsetenv("KC_VEC_BITS");
}

/* A block whose expansion is a stem (a convolution over few input
 * channels on stem.h's loop: MobileNetV2's 3x3 stride-2 Conv1 from RGB,
 * then its first depthwise layer and projection). */
typedef struct irb_stem_case {
    const char *what;
    int64_t n, h, w, c;       /* images, the image's rows, columns, channels */
    int64_t ks, ss, spad;     /* the stem's kernel, stride, padding (1 same, 0 valid) */
    int64_t f, o;             /* the stem's and the projection's filters */
    int64_t s;                /* the depthwise layer's stride ("same") */
    const char *act1, *act2, *act3;
    int fusable;
    int64_t pad_b, pad_a;     /* a ZeroPadding folded into the stem */
} irb_stem_case;

/* The three layers on the plain paths, one thread, are the reference;
 * the block on 1 to 3 threads, and one image again on one state with its
 * rows' cut moved as far as it goes, must equal them. Cases it refuses:
 * run as layers. */
static void check_irb_stem_case(const irb_stem_case *c)
{
    dw_case dc = {c->what, c->n, c->h, c->w, c->c, c->f, 3, c->s, 1, 1,
                  1, 0, 0, c->act1, c->act2, 1, 1, 0};
    dw_run r;
    dw_setup(&dc, &r);
    /* the expansion becomes the stem: its kernel, stride and padding, the
     * shapes after it */
    free(r.pw[0].data);
    r.pw[0].data = rand_buf(c->ks * c->ks * c->c * c->f);
    r.pw[0].shape = (kc_shape){.rank = 4, .dims = {c->ks, c->ks, c->c, c->f}};
    r.pa.padding = (int)c->spad;
    for (int i = 0; i < 2; i++) {
        r.pa.kernel[i] = c->ks;
        r.pa.strides[i] = c->ss;
        /* the value counts the folded padding in; its buffer the data */
        r.pa.pad_before[i] = c->pad_b;
        r.pa.pad_after[i] = c->pad_a;
        r.in.dims[1 + i] += c->pad_b + c->pad_a;
        r.mid.dims[1 + i] = kc_conv_out_len(r.in.dims[1 + i], c->ks, c->ss, 1, (int)c->spad);
        r.out.dims[1 + i] = kc_conv_out_len(r.mid.dims[1 + i], 3, c->s, 1, 1);
    }
    r.dw_in = r.mid;
    r.out.dims[3] = c->f;
    r.mid_count = kc_count(&r.mid);
    r.out_count = kc_count(&r.out);
    kc_conv_attrs qa = r.pa; /* the projection: 1x1, unpadded */
    memset(qa.kernel, 0, sizeof qa.kernel);
    memset(qa.pad_before, 0, sizeof qa.pad_before);
    memset(qa.pad_after, 0, sizeof qa.pad_after);
    for (int i = 0; i < 3; i++)
        qa.kernel[i] = qa.strides[i] = 1;
    qa.padding = 1;
    qa.filters = c->o;
    qa.activation = c->act3;
    kc_weight qw[2] = {{.data = rand_buf(c->f * c->o)}, {.data = rand_buf(c->o)}};
    qw[0].shape = (kc_shape){.rank = 4, .dims = {1, 1, c->f, c->o}};
    r.dw[0].shape = (kc_shape){.rank = 4, .dims = {3, 3, c->f, 1}};
    kc_layer ql = {.name = "project", .class_name = "Conv2D", .attrs = &qa, .weights = qw,
                   .n_weights = 2, .def = kc_op_lookup(NULL, "Conv2D")};
    kc_shape out = r.out;
    out.dims[3] = c->o;
    int64_t out_n = kc_count(&out);
    float *want = irb_reference(&r, &ql, &out, NULL);
    int fusable = kc_irb_fusable(&r.pa, &r.dl, &ql, &r.in);
    if (fusable != c->fusable)
        fail_msg("%s: fusable %d, expected %d", c->what, fusable, c->fusable);
    float peak = peak_of(want, out_n);
    float *got = malloc((size_t)out_n * sizeof *got);
    for (int t = 1; fusable && t <= 3; t++) {
        kc_threads_enter(t);
        kc_kernel_state *st = NULL;
        for (int round = 0; round < (c->n == 1 && t > 1 ? 2 : 1); round++) {
            r.pa.post_dw = &r.dl;
            r.pa.post_pw = &ql;
            const float *ins[1] = {r.x};
            memset(got, 0, (size_t)out_n * sizeof *got);
            exec_in_slot(&r.pl, ins, &r.in, 1, got, &r.mid, 0, 0, &st);
            r.pa.post_dw = r.pa.post_pw = NULL;
            expect_close(got, want, out_n, 1e-4f * peak, "%s, %d threads%s", c->what, t,
                         round ? ", skewed cut" : "");
            if (c->n == 1 && t > 1)
                irb_skew_after(st, c->what, round);
        }
        st->free(st);
    }
    kc_threads_enter(0);
    free(got);
    free(want);
    irb_teardown(qw, &r);
}

/* Stems: 3x3 stride 2 "same" on even and odd sizes (the extra pixel
 * after), "valid", stride 1, a 2x2 kernel, 1 and 4 channels, several
 * images, a stem wider than a vector and not whole vectors, depthwise
 * strides 1 and 2, a large image in bands; refused: a stem with more
 * input channels than the loop takes (then a plain block would need a
 * 1x1). KC_STEM=1: the stem loop on AVX2 too. */
static void irb_stem_isa(void)
{
    static const irb_stem_case cases[] = {
        {"stem 3x3 s2 same, 32 -> 16 (MobileNetV2's Conv1 and first block)", 1, 64, 64, 3, 3,
         2, 1, 32, 16, 1, "relu6", "relu6", "linear", 1},
        {"stem on an odd size, 3 images", 3, 15, 13, 3, 3, 2, 1, 24, 40, 1, "relu", "relu6",
         "relu", 1},
        {"stem valid s2, depthwise s2", 1, 33, 31, 3, 3, 2, 0, 16, 8, 2, "relu6", "linear",
         "linear", 1},
        {"stem 3x3 s1, one channel", 2, 12, 12, 1, 3, 1, 1, 20, 24, 1, "linear", "relu",
         "relu6", 1},
        {"stem 2x2 s2, 4 channels", 1, 20, 18, 4, 2, 2, 1, 48, 16, 2, "relu6", "relu6",
         "linear", 1},
        {"one big image in bands", 1, 224, 224, 3, 3, 2, 1, 32, 16, 1, "relu6", "relu6",
         "linear", 1},
        {"5 input channels: no stem loop", 1, 16, 16, 5, 3, 2, 1, 32, 16, 1, "relu6", "relu6",
         "linear", 0},
        {"ZeroPadding (0, 1) folded, then 3x3 s2 valid (Keras 2's MobileNetV2, nsfwjs's)", 2,
         32, 32, 3, 3, 2, 0, 32, 16, 1, "relu6", "relu6", "linear", 1, 0, 1},
        {"ZeroPadding (1, 1) folded, odd size, 3 images", 3, 17, 15, 3, 3, 2, 0, 24, 16, 1,
         "relu", "relu6", "linear", 1, 1, 1},
    };
    setenv("KC_STEM", "1", 1);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_irb_stem_case(&cases[i]);
    unsetenv("KC_STEM");
}

/* Both builds of irb_simd.inc where the CPU has both; KC_IRB=1: with
 * AVX2 too (by default the kernel runs with AVX-512 only). */
static void test_irb_fused(void **state)
{
    (void)state;
    if (kc_isa() == KC_ISA_NONE)
        skip();
    setenv("KC_IRB", "1", 1);
    /* AVX-512 at both widths: 256 runs the narrow 1x1 products on its
     * 256-bit build (irb_simd_avx512y.c) */
    static const char *const widths[] = {"512", "256"};
    for (int w = 0; w < 2; w++) {
        setenv("KC_VEC_BITS", widths[w], 1);
        each_isa(irb_fused_isa);
        each_isa(irb_identity_isa);
        each_isa(irb_stem_isa);
    }
    unsetenv("KC_VEC_BITS");
    unsetenv("KC_IRB");
}

/* ------------------------------- average pooling moved after a 1x1 */

typedef struct pool_conv_case {
    const char *what;
    int64_t n, h, w, c, f, k; /* k: the pooling's window */
    int64_t ks, stride;       /* the convolution's kernel, the pooling's stride */
    int padding;              /* the pooling's: 1 same, 0 valid */
    kc_pool_kind kind;
    const char *act;
    int bias, fusable;
} pool_conv_case;

/* A 1x1 convolution with a "same" stride-1 average pooling before it
 * (kc_conv_attrs.pre_pool) must equal the pooling then the convolution on
 * the plain paths, whatever the cut (images, rows, more threads than
 * rows); pairs it cannot take are refused. On oneDNN's cuts (KC_PW=0),
 * and from 64 input channels on kerasc's 1x1 kernel (pw.c: the product,
 * then its own pooling), which must give oneDNN's bits. */
static void check_pool_conv_case(const pool_conv_case *c)
{
    kc_pool_attrs pa = {.kind = c->kind, .spatial = 2, .pool = {c->k, c->k, 1},
                        .strides = {c->stride, c->stride, 1}, .padding = c->padding};
    kc_conv_attrs ca;
    memset(&ca, 0, sizeof ca);
    ca.kind = KC_CONV_PLAIN;
    ca.spatial = 2;
    ca.filters = c->f;
    ca.groups = ca.depth_multiplier = 1;
    ca.use_bias = c->bias;
    ca.activation = c->act;
    ca.padding = 1;
    for (int i = 0; i < 3; i++) {
        ca.kernel[i] = i < 2 ? c->ks : 1;
        ca.strides[i] = ca.dilation[i] = 1;
        ca.output_padding[i] = -1;
    }
    kc_weight w[2] = {{.data = rand_buf(c->ks * c->ks * c->c * c->f)}, {.data = rand_buf(c->f)}};
    const char *pool_cls = c->kind == KC_POOL_AVG ? "AveragePooling2D" : "MaxPooling2D";
    kc_layer pl = {.name = "pool", .class_name = (char *)pool_cls, .attrs = &pa};
    kc_layer cl = {.name = "conv", .class_name = "Conv2D", .attrs = &ca, .weights = w,
                   .n_weights = 2};
    pl.def = kc_op_lookup(NULL, pool_cls);
    cl.def = kc_op_lookup(NULL, "Conv2D");
    kc_shape in = {.rank = 4, .dims = {c->n, c->h, c->w, c->c}};
    kc_shape out = {.rank = 4, .dims = {c->n, c->h, c->w, c->f}};
    int fusable = kc_dnnl_ready() && kc_dnnl_conv_pool_fusable(&ca, &pl, &in);
    if (kc_dnnl_ready() && fusable != c->fusable)
        fail_msg("%s: fusable %d, expected %d", c->what, fusable, c->fusable);
    if (!fusable) { /* the shapes below are a fusable pair's */
        free(w[0].data);
        free(w[1].data);
        return;
    }
    float *x = rand_buf(kc_count(&in));
    float *pooled = malloc((size_t)kc_count(&in) * sizeof *pooled);
    float *want = malloc((size_t)kc_count(&out) * sizeof *want);
    float *got = malloc((size_t)kc_count(&out) * sizeof *got);
    float *mine = malloc((size_t)kc_count(&out) * sizeof *mine);
    setenv("KC_DNNL", "0", 1);
    kc_threads_enter(1);
    const float *ins[1] = {x};
    exec_kernel(&pl, ins, &in, 1, pooled, &in, 1, 0, NULL);
    ins[0] = pooled;
    exec_kernel(&cl, ins, &in, 1, want, &out, 1, 0, NULL);
    unsetenv("KC_DNNL");
    float peak = peak_of(want, kc_count(&out));
    static const int threads[] = {1, 2, 3, 5};
    for (int t = 0; t < 4; t++) {
        kc_threads_enter(threads[t]);
        ca.pre_pool = &pl;
        memset(got, 0, (size_t)kc_count(&out) * sizeof *got);
        ins[0] = x;
        setenv("KC_PW", "0", 1);
        int parts = exec_kernel(&cl, ins, &in, 1, got, &out, 0, 0, kc_dnnl_conv_parts);
        unsetenv("KC_PW");
        int64_t along = c->n > 1 ? c->n : c->h;
        /* (one 8x8 image is too little to cut: oneDNN runs it whole) */
        if (c->n * c->h * c->w > 64 && parts != (threads[t] < along ? threads[t] : (int)along))
            fail_msg("%s, %d threads: %d parts", c->what, threads[t], parts);
        expect_close(got, want, kc_count(&out), 1e-5f * peak, "%s, %d threads", c->what,
                     threads[t]);
        int pw = exec_kernel(&cl, ins, &in, 1, mine, &out, 0, 0, kc_pw_parts);
        ca.pre_pool = NULL;
        int pw_takes = c->c >= 64 && kc_isa() == KC_ISA_AVX512 && kc_dnnl_avx512();
        if ((pw > 0) != pw_takes)
            fail_msg("%s, %d threads: %d parts on kerasc's 1x1 kernel", c->what, threads[t], pw);
        if (pw > 0 && memcmp(mine, got, (size_t)kc_count(&out) * sizeof *got))
            fail_msg("%s, %d threads: kerasc's 1x1 kernel and pooling differ from oneDNN's",
                     c->what, threads[t]);
    }
    kc_threads_enter(0);
    free(x);
    free(pooled);
    free(want);
    free(got);
    free(mine);
    free(w[0].data);
    free(w[1].data);
}

static void test_pool_conv_fused(void **state)
{
    (void)state;
    static const pool_conv_case cases[] = {
        {"3x3 on 35x35, relu (InceptionV3's branch_pool)", 1, 35, 35, 48, 16, 3, 1, 1, 1,
         KC_POOL_AVG, "relu", 1, 1},
        {"3 images (cut by images), relu6", 3, 17, 17, 40, 16, 3, 1, 1, 1, KC_POOL_AVG, "relu6",
         1, 1},
        {"2x2 window: the extra cell after; linear, no bias", 1, 20, 21, 32, 12, 2, 1, 1, 1,
         KC_POOL_AVG, "linear", 0, 1},
        {"5x5 window reaching two parts away, odd rows", 1, 23, 19, 48, 8, 5, 1, 1, 1,
         KC_POOL_AVG, "relu", 1, 1},
        {"3 rows, more threads than rows", 1, 3, 80, 64, 16, 3, 1, 1, 1, KC_POOL_AVG, "relu", 1,
         1},
        {"192 -> 32 on 35x35, relu (InceptionV3's mixed0: kerasc's 1x1 kernel by pixels)", 1,
         35, 35, 192, 32, 3, 1, 1, 1, KC_POOL_AVG, "relu", 1, 1},
        {"256 -> 80 on two 8x8, relu6 (by pixels; one 8x8 by channels)", 2, 8, 8, 256, 80, 3, 1,
         1, 1, KC_POOL_AVG, "relu6", 1, 1},
        {"256 -> 80 on one 8x8, linear (kerasc's 1x1 kernel by channels)", 1, 8, 8, 256, 80, 3,
         1, 1, 1, KC_POOL_AVG, "linear", 1, 1},
        /* refused: run as two layers */
        {"an activation oneDNN does not run (tanh)", 1, 9, 9, 8, 4, 3, 1, 1, 1, KC_POOL_AVG,
         "tanh", 1, 0},
        {"a 3x3 convolution", 1, 9, 9, 8, 4, 3, 3, 1, 1, KC_POOL_AVG, "relu", 1, 0},
        {"a stride-2 pooling", 1, 9, 9, 8, 4, 3, 1, 2, 1, KC_POOL_AVG, "relu", 1, 0},
        {"a valid pooling", 1, 9, 9, 8, 4, 3, 1, 1, 0, KC_POOL_AVG, "relu", 1, 0},
        {"max pooling", 1, 9, 9, 8, 4, 3, 1, 1, 1, KC_POOL_MAX, "relu", 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_pool_conv_case(&cases[i]);
}

/* ------------------------------------------ ZeroPadding and Cropping */

/* out = in shifted by +before (padding) or -before (cropping) on every
 * spatial axis, zeros where nothing lands: one element at a time. */
static void pad_reference(const kc_shape *is, const kc_shape *os, const float *in, float *out,
                          const int64_t *shift)
{
    int rank = os->rank;
    int64_t count = kc_count(os);
    for (int64_t e = 0; e < count; e++) {
        int64_t rest = e, src = 0, stride = 1, inside = 1;
        for (int d = rank - 1; d >= 0; d--) {
            int64_t o = rest % os->dims[d], i = o - shift[d];
            rest /= os->dims[d];
            inside &= i >= 0 && i < is->dims[d];
            src += i * stride;
            stride *= is->dims[d];
        }
        out[e] = inside ? in[src] : 0.0f;
    }
}

static void check_pad(const char *cls, int spatial, int64_t n, int64_t len, int64_t c,
                      int64_t before, int64_t after)
{
    int crop = strstr(cls, "Cropping") != NULL;
    kc_pad_attrs a = {.spatial = spatial};
    kc_shape is = {.rank = spatial + 2}, os = is;
    int64_t shift[KC_MAX_RANK] = {0};
    is.dims[0] = os.dims[0] = n;
    is.dims[spatial + 1] = os.dims[spatial + 1] = c;
    for (int i = 0; i < spatial; i++) {
        a.before[i] = before + i; /* unequal on every axis */
        a.after[i] = after;
        is.dims[1 + i] = len + i;
        os.dims[1 + i] = len + i + (crop ? -1 : 1) * (a.before[i] + a.after[i]);
        shift[1 + i] = crop ? -a.before[i] : a.before[i];
    }
    kc_layer layer = {.name = (char *)cls, .class_name = (char *)cls, .attrs = &a};
    layer.def = kc_op_lookup(NULL, cls);
    float *x = rand_buf(kc_count(&is));
    int64_t on = kc_count(&os);
    float *want = malloc((size_t)on * sizeof *want), *got = malloc((size_t)on * sizeof *got);
    pad_reference(&is, &os, x, want, shift);
    static const int threads[] = {1, 2, 3, 5};
    for (int t = 0; t < 4; t++) {
        kc_threads_enter(threads[t]);
        for (int64_t i = 0; i < on; i++)
            got[i] = 99.0f; /* every element must be written, zeros included */
        const float *ins[1] = {x};
        exec_kernel(&layer, ins, &is, 1, got, &os, 0, 0, NULL);
        for (int64_t i = 0; i < on; i++)
            if (got[i] != want[i])
                fail_msg("%s %dD, %lld images, %d threads: element %lld is %g, want %g", cls,
                         spatial, (long long)n, threads[t], (long long)i, got[i], want[i]);
    }
    kc_threads_enter(0);
    free(x);
    free(want);
    free(got);
}

static void test_pad_crop(void **state)
{
    (void)state;
    /* ResNet50's pool1_pad at a smaller size, and big enough to be cut */
    check_pad("ZeroPadding2D", 2, 3, 112, 64, 1, 1);
    check_pad("ZeroPadding2D", 2, 1, 40, 48, 2, 0);
    check_pad("ZeroPadding2D", 2, 2, 5, 3, 0, 3); /* small: one part */
    check_pad("ZeroPadding1D", 1, 4, 3000, 32, 2, 5);
    check_pad("ZeroPadding3D", 3, 2, 20, 16, 1, 2);
    check_pad("Cropping2D", 2, 2, 90, 40, 3, 1);
    check_pad("Cropping1D", 1, 3, 50, 8, 2, 2);
    check_pad("Cropping3D", 3, 1, 24, 8, 2, 1);
}

/* ----------------------------------------------------- global pooling */

/* Global average and max pooling, split over threads by (image, block of
 * 256 channels): full blocks and a tail, against a plain loop. */
static void check_global_pool(const char *cls, int max, int64_t n, int64_t cells, int64_t c)
{
    kc_pool_attrs a = {.kind = max ? KC_POOL_MAX : KC_POOL_AVG, .spatial = 2, .global = 1};
    kc_shape is = {.rank = 4, .dims = {n, cells, 1, c}}, os = {.rank = 2, .dims = {n, c}};
    kc_layer layer = {.name = (char *)cls, .class_name = (char *)cls, .attrs = &a};
    layer.def = kc_op_lookup(NULL, cls);
    float *x = rand_buf(n * cells * c), *want = malloc((size_t)(n * c) * sizeof *want);
    float *got = malloc((size_t)(n * c) * sizeof *got);
    for (int64_t b = 0; b < n; b++)
        for (int64_t j = 0; j < c; j++) {
            float acc = max ? -INFINITY : 0.0f;
            for (int64_t i = 0; i < cells; i++) {
                float v = x[(b * cells + i) * c + j];
                acc = max ? fmaxf(acc, v) : acc + v;
            }
            want[b * c + j] = max ? acc : acc / (float)cells;
        }
    static const int threads[] = {1, 2, 3};
    for (int t = 0; t < 3; t++) {
        kc_threads_enter(threads[t]);
        const float *ins[1] = {x};
        exec_kernel(&layer, ins, &is, 1, got, &os, 0, 0, NULL);
        /* the sums in cell order, then the division: the same bits */
        for (int64_t i = 0; i < n * c; i++)
            if (memcmp(&got[i], &want[i], sizeof *got))
                fail_msg("%s, %lld images of %lld channels, %d threads, KC_ISA=%s: element %lld "
                         "is %.9g, want %.9g", cls, (long long)n, (long long)c, threads[t],
                         kc_isa_name(kc_isa()), (long long)i, got[i], want[i]);
    }
    kc_threads_enter(0);
    free(x);
    free(want);
    free(got);
}

/* A windowed pooling of `pool` cells a side on a side x side image,
 * valid; returns the parts of the oneDNN state it left (0: none) and
 * checks the output against the sums in cell order: bit for bit where
 * the window is the whole image (run as global pooling), within 1e-5
 * otherwise. */
static int check_window_pool(const char *cls, int max, int64_t n, int64_t side, int64_t pool,
                             int64_t c)
{
    kc_pool_attrs a = {.kind = max ? KC_POOL_MAX : KC_POOL_AVG, .spatial = 2,
                       .pool = {pool, pool, 1}, .strides = {pool, pool, 1}};
    int64_t out = side / pool;
    kc_shape is = {.rank = 4, .dims = {n, side, side, c}}, os = {.rank = 4, .dims = {n, out, out, c}};
    kc_layer layer = {.name = (char *)cls, .class_name = (char *)cls, .attrs = &a};
    layer.def = kc_op_lookup(NULL, cls);
    float *x = rand_buf(n * side * side * c);
    float *want = malloc((size_t)(n * out * out * c) * sizeof *want);
    float *got = malloc((size_t)(n * out * out * c) * sizeof *got);
    for (int64_t b = 0; b < n; b++)
        for (int64_t oy = 0; oy < out; oy++)
            for (int64_t ox = 0; ox < out; ox++)
                for (int64_t j = 0; j < c; j++) {
                    float acc = max ? -INFINITY : 0.0f;
                    for (int64_t y = oy * pool; y < (oy + 1) * pool; y++)
                        for (int64_t x0 = ox * pool; x0 < (ox + 1) * pool; x0++) {
                            float v = x[((b * side + y) * side + x0) * c + j];
                            acc = max ? fmaxf(acc, v) : acc + v;
                        }
                    want[((b * out + oy) * out + ox) * c + j] =
                        max ? acc : acc / (float)(pool * pool);
                }
    kc_threads_enter(2);
    const float *ins[1] = {x};
    int parts = exec_kernel(&layer, ins, &is, 1, got, &os, 0, 0, kc_dnnl_pool_parts);
    kc_threads_enter(0);
    expect_close(got, want, n * out * out * c, pool == side ? 0.0f : 1e-5f,
                 "%s %lld on %lldx%lld, %lld images", cls, (long long)pool, (long long)side,
                 (long long)side, (long long)n);
    free(x);
    free(want);
    free(got);
    return parts;
}

/* Global pooling on the vector loops of the instruction set (AVX-512,
 * AVX2: gpool_simd.inc) and on the plain one: channels that are not
 * whole vectors or runs of four, blocks split over threads. */
static void global_pool_sizes(void)
{
    check_global_pool("GlobalAveragePooling2D", 0, 3, 49, 1280 + 17); /* split over threads */
    check_global_pool("GlobalMaxPooling2D", 1, 3, 49, 1280 + 17);
    check_global_pool("GlobalAveragePooling2D", 0, 2, 5, 100); /* small: one part */
    check_global_pool("GlobalMaxPooling2D", 1, 1, 64, 2048);
    check_global_pool("GlobalAveragePooling2D", 0, 1, 7, 5); /* under a vector */
}

static void test_global_pool(void **state)
{
    (void)state;
    setenv("KC_ISA", "none", 1);
    global_pool_sizes();
    unsetenv("KC_ISA");
    each_isa(global_pool_sizes);
    /* a window the whole image (nsfwjs's MobileNetV2 ends in
     * AveragePooling2D(7) on 7x7) runs as global pooling, no oneDNN state:
     * its calls allocate (tests/alloc); a smaller window stays on oneDNN */
    if (check_window_pool("AveragePooling2D", 0, 2, 7, 7, 1280))
        fail_msg("AveragePooling2D(7) on 7x7: on oneDNN, not as global pooling");
    if (check_window_pool("MaxPooling2D", 1, 1, 5, 5, 40))
        fail_msg("MaxPooling2D(5) on 5x5: on oneDNN, not as global pooling");
    int small = check_window_pool("AveragePooling2D", 0, 2, 8, 2, 64);
    if (kc_dnnl_ready() && !small)
        fail_msg("AveragePooling2D(2) on 8x8: not on oneDNN");
}

/* The activation dense_exec's layers take ("linear" unless a test sets
 * it; want stays the plain sum). */
static const char *g_dense_act = "linear";

/* One Dense run on `threads` threads over (batch, in_units), or with
 * rows > 0 over (batch, rows, in_units) (a Dense over pixels or tokens);
 * returns what probe says of its oneDNN state, the output in got and the
 * plain sum in want. */
static int dense_exec(int64_t in_units, int64_t units, int64_t batch, int64_t rows, int threads,
                      int (*probe)(const kc_kernel_state *), float *got, float *want)
{
    int64_t n_rows = batch * (rows > 0 ? rows : 1);
    kc_dense_attrs a = {units, 1, g_dense_act};
    kc_weight w[2];
    memset(w, 0, sizeof w);
    float *kernel = malloc((size_t)(in_units * units) * sizeof *kernel);
    float *bias = malloc((size_t)units * sizeof *bias);
    float *x = malloc((size_t)(n_rows * in_units) * sizeof *x);
    assert_non_null(kernel);
    assert_non_null(bias);
    assert_non_null(x);
    for (int64_t i = 0; i < in_units * units; i++)
        kernel[i] = (float)((i * 7919) % 13) / 13.0f - 0.5f;
    for (int64_t j = 0; j < units; j++)
        bias[j] = (float)(j % 5) * 0.1f;
    for (int64_t i = 0; i < n_rows * in_units; i++)
        x[i] = (float)(i % 11) / 11.0f;
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t j = 0; j < units; j++) {
            double acc = bias[j];
            for (int64_t i = 0; i < in_units; i++)
                acc += (double)x[r * in_units + i] * kernel[i * units + j];
            want[r * units + j] = (float)acc;
        }
    w[0].data = kernel;
    w[1].data = bias;
    kc_layer layer;
    memset(&layer, 0, sizeof layer);
    layer.name = "dense";
    layer.class_name = "Dense";
    layer.def = kc_op_lookup(NULL, "Dense");
    layer.attrs = &a;
    layer.weights = w;
    layer.n_weights = 2;
    kc_shape in = {2, {batch, in_units}}, out = {2, {batch, units}};
    if (rows > 0) {
        in = (kc_shape){3, {batch, rows, in_units}};
        out = (kc_shape){3, {batch, rows, units}};
    }
    const float *ins[1] = {x};
    kc_threads_enter(threads);
    int said = exec_kernel(&layer, ins, &in, 1, got, &out, 0, 0, probe);
    kc_threads_enter(0);
    free(kernel);
    free(bias);
    free(x);
    return said;
}

/* dense_exec over (batch, in_units). */
static int dense_run(int64_t in_units, int64_t units, int64_t batch, int threads,
                     int (*probe)(const kc_kernel_state *), float *got, float *want)
{
    return dense_exec(in_units, units, batch, 0, threads, probe, got, want);
}

/* Runs Dense in -> out on `batch` rows and checks what probe says of its
 * state against `expect` and the output against the plain sum. */
static void check_dense(int64_t in_units, int64_t units, int64_t batch,
                        int (*probe)(const kc_kernel_state *), int expect, const char *what)
{
    float *got = malloc((size_t)(batch * units) * sizeof *got);
    float *want = malloc((size_t)(batch * units) * sizeof *want);
    assert_non_null(got);
    assert_non_null(want);
    int said = dense_run(in_units, units, batch, 2, probe, got, want);
    if (said != expect)
        fail_msg("Dense %lld -> %lld, batch %lld: %s %d, expected %d", (long long)in_units,
                 (long long)units, (long long)batch, what, said, expect);
    expect_close(got, want, batch * units, 1e-3f, "Dense %lld -> %lld, batch %lld",
                 (long long)in_units, (long long)units, (long long)batch);
    free(got);
    free(want);
}

/* A small Dense layer runs on the calling thread alone; one reading more
 * weight bytes than a core's L2 holds (ResNet50's 2048 -> 1000
 * classifier, 8 MB) runs on the pool even at batch 1, where it is bound
 * by memory bandwidth. Both equal the plain sum. */
static void test_dense_solo_by_weight_bytes(void **state)
{
    (void)state;
    setenv("KC_DENSE_OWN", "0", 1); /* oneDNN's Dense (test_dense_own: kerasc's) */
    check_dense(64, 10, 1, kc_dnnl_dense_solo, 1, "solo");
    check_dense(2048, 1000, 1, kc_dnnl_dense_solo, 0, "solo");
    check_dense(1024, 256, 1, kc_dnnl_dense_solo, 1, "solo");
    unsetenv("KC_DENSE_OWN");
}

/* From 8 rows on, Dense reads its own copy of the kernel in the layout
 * oneDNN picks, packed once; below, Keras's array in place. Equal results
 * either way, on both sides of the rule and with a row count that is no
 * multiple of oneDNN's blocks. */
static void test_dense_packs_from_eight_rows(void **state)
{
    (void)state;
    /* oneDNN 2.6's AVX2 matmul (gemm:jit) reads W in Keras's layout: no
     * layout to pack into, on any row count */
    int blocked = kc_dnnl_avx512(); /* oneDNN's own ISA (ONEDNN_MAX_CPU_ISA caps it) */
    setenv("KC_DENSE_OWN", "0", 1);
    check_dense(2048, 1000, 1, kc_dnnl_dense_packed, 0, "packed");
    check_dense(2048, 1000, 8, kc_dnnl_dense_packed, blocked, "packed");
    check_dense(300, 77, 13, kc_dnnl_dense_packed, blocked, "packed");
    check_dense(300, 77, 7, kc_dnnl_dense_packed, 0, "packed");
    unsetenv("KC_DENSE_OWN");
}

/* The sum dense_simd.inc makes, in scalars: the inputs in blocks of 16,
 * each block's sum a chain from zero in input order with one rounding a
 * multiply-add (fmaf), the blocks' sums added in order to a total from
 * zero, then the bias (kernels/pw_head.c sums so too). The inputs and
 * weights of dense_run. */
static void dense_chains(int64_t k, int64_t n, int64_t batch, float *out)
{
    for (int64_t r = 0; r < batch; r++)
        for (int64_t j = 0; j < n; j++) {
            float total = 0.0f;
            for (int64_t b0 = 0; b0 < k; b0 += 16) {
                float block = 0.0f;
                for (int64_t i = b0; i < k && i < b0 + 16; i++) {
                    float x = (float)((r * k + i) % 11) / 11.0f;
                    float w = (float)((i * n + j) * 7919 % 13) / 13.0f - 0.5f;
                    block = fmaf(x, w, block);
                }
                total += block;
            }
            out[r * n + j] = total + (float)(j % 5) * 0.1f;
        }
}

/* Dense runs on kerasc's own loop (dense.c) by default, on each
 * instruction set there is (AVX2 one row a pass, AVX-512 four). Outputs
 * as the plain sum, and every row's bits those of the blocks' sum
 * (dense_chains) at batch 1 and at batch B, on 1 to 3 threads: a row's
 * bits depend neither on the rows beside it nor on the cut, so a lane of
 * one image and a whole batch agree (oneDNN's AVX2 gemv and gemm did not:
 * test_stage). Batches of 1 to 13 rows (four-row passes and every
 * remainder), partial last panels, fewer than 16 units, fewer than four
 * inputs. */
static void dense_own_isa(void)
{
    /* from 16 rows on, AVX-512 takes panels in pairs over blocks of rows
     * (kc_dense_panel2): an odd panel left in a part, a partial last one,
     * inputs under one chain step, more rows than one block */
    static const int64_t shapes[][3] = {{64, 10, 1},   {2048, 1000, 3}, {300, 77, 13},
                                        {1280, 1000, 8}, {3, 33, 2},    {129, 40, 6},
                                        {17, 16, 5},   {96, 384, 40},   {300, 77, 19},
                                        {3072, 50, 17}, {3, 33, 100},   {97, 160, 200}};
    if (!kc_dnnl_ready())
        skip();
    unsetenv("KC_DENSE_OWN"); /* the default takes it */
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t k = shapes[i][0], n = shapes[i][1], batch = shapes[i][2];
        float *one = malloc((size_t)n * sizeof *one), *want1 = malloc((size_t)n * sizeof *one);
        float *got = malloc((size_t)(batch * n) * sizeof *got);
        float *want = malloc((size_t)(batch * n) * sizeof *want);
        assert_non_null(one);
        assert_non_null(want1);
        assert_non_null(got);
        assert_non_null(want);
        if (dense_run(k, n, 1, 2, kc_dense_own_state, one, want1) != 1)
            fail_msg("Dense %lld -> %lld: not on kerasc's loop", (long long)k, (long long)n);
        expect_close(one, want1, n, 1e-3f, "Dense %lld -> %lld, batch 1", (long long)k,
                     (long long)n);
        for (int threads = 1; threads <= 3; threads++) {
            if (dense_run(k, n, batch, threads, kc_dense_own_state, got, want) != 1)
                fail_msg("Dense %lld -> %lld, batch %lld: not on kerasc's loop", (long long)k,
                         (long long)n, (long long)batch);
            expect_close(got, want, batch * n, 1e-3f, "Dense %lld -> %lld, batch %lld",
                         (long long)k, (long long)n, (long long)batch);
            if (memcmp(got, one, (size_t)n * sizeof *got))
                fail_msg("Dense %lld -> %lld, %d threads: row 0 at batch %lld differs from batch 1",
                         (long long)k, (long long)n, threads, (long long)batch);
            dense_chains(k, n, batch, want);
            for (int64_t i = 0; i < batch * n; i++)
                if (memcmp(&got[i], &want[i], sizeof *got))
                    fail_msg("Dense %lld -> %lld, batch %lld, %d threads: row %lld unit %lld "
                             "%.9g, the blocks' sum %.9g",
                             (long long)k, (long long)n, (long long)batch, threads,
                             (long long)(i / n), (long long)(i % n), got[i], want[i]);
        }
        free(one);
        free(want1);
        free(got);
        free(want);
    }
    setenv("KC_DENSE_OWN", "0", 1); /* and =0 leaves it to oneDNN */
    float *got = malloc(10 * sizeof *got), *want = malloc(10 * sizeof *want);
    assert_non_null(got);
    assert_non_null(want);
    if (dense_run(64, 10, 1, 2, kc_dense_own_state, got, want) != 0)
        fail_msg("KC_DENSE_OWN=0: Dense still on kerasc's loop");
    free(got);
    free(want);
    unsetenv("KC_DENSE_OWN");
}

static void test_dense_own(void **state)
{
    (void)state;
    each_isa(dense_own_isa);
}

/* From 32 rows an image, with AVX-512, a Dense is oneDNN's matmul
 * (dense.c, kc_dense_gemm_shape), one call for all rows: an image's
 * outputs must not depend on the images beside it (a batch split into
 * lanes or micro-batches gives the bits of the whole). Shapes of
 * ConvNeXtTiny's pointwise layers and a transformer's. */
static void test_dense_many_rows(void **state)
{
    (void)state;
    if (!kc_dnnl_ready() || !kc_dnnl_avx512() || kc_isa() != KC_ISA_AVX512)
        skip();
    static const int64_t shapes[][3] = {{3136, 96, 384}, {196, 1536, 384}, {49, 768, 3072},
                                        {128, 768, 768}, {32, 40, 33}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int64_t rows = shapes[i][0], k = shapes[i][1], units = shapes[i][2];
        int64_t n1 = rows * units;
        float *one = malloc((size_t)n1 * sizeof *one), *want1 = malloc((size_t)n1 * sizeof *one);
        float *three = malloc((size_t)(3 * n1) * sizeof *three);
        float *want3 = malloc((size_t)(3 * n1) * sizeof *want3);
        assert_non_null(one);
        assert_non_null(want1);
        assert_non_null(three);
        assert_non_null(want3);
        if (dense_exec(k, units, 1, rows, 2, kc_dense_own_state, one, want1) != 0)
            fail_msg("Dense %lld x %lld -> %lld: still on kerasc's loop", (long long)rows,
                     (long long)k, (long long)units);
        assert_int_equal(dense_exec(k, units, 3, rows, 2, kc_dense_own_state, three, want3), 0);
        expect_close(one, want1, n1, 1e-3f, "Dense %lld x %lld -> %lld", (long long)rows,
                     (long long)k, (long long)units);
        if (memcmp(one, three, (size_t)n1 * sizeof *one))
            fail_msg("Dense %lld x %lld -> %lld: image 0 of three differs from it alone",
                     (long long)rows, (long long)k, (long long)units);
        free(one);
        free(want1);
        free(three);
        free(want3);
    }
}

/* With AVX-512, a Dense over 512 rows or more whose activations outweigh
 * its weights runs as row parts, one per thread, each applying the
 * activation to its rows (dnnl_matmul.c): ConvNeXtTiny's 56x56 and 28x28
 * pointwise layers. The bits of the uncut layer (KC_CUT=0), GELU
 * included; its 14x14 layer (weights heavier than its 196 rows) and a
 * 300-row one stay uncut. */
static void test_dense_row_parts(void **state)
{
    (void)state;
    if (!kc_dnnl_ready() || !kc_dnnl_avx512() || kc_isa() != KC_ISA_AVX512)
        skip();
    static const struct {
        int64_t rows, k, units;
        int parts;
        const char *act;
    } cases[] = {{3136, 96, 384, 2, "gelu"}, {784, 768, 192, 2, "linear"},
                 {1001, 40, 33, 2, "relu"}, {196, 384, 1536, 1, "gelu"},
                 {300, 40, 33, 1, "linear"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t n = cases[i].rows * cases[i].units;
        float *cut = malloc((size_t)n * sizeof *cut), *whole = malloc((size_t)n * sizeof *whole);
        float *want = malloc((size_t)n * sizeof *want);
        assert_non_null(cut);
        assert_non_null(whole);
        assert_non_null(want);
        g_dense_act = cases[i].act;
        int parts = dense_exec(cases[i].k, cases[i].units, 1, cases[i].rows, 2,
                               kc_dnnl_dense_parts, cut, want);
        setenv("KC_CUT", "0", 1);
        int uncut = dense_exec(cases[i].k, cases[i].units, 1, cases[i].rows, 2,
                               kc_dnnl_dense_parts, whole, want);
        unsetenv("KC_CUT");
        g_dense_act = "linear";
        if (parts != cases[i].parts || uncut != 1)
            fail_msg("Dense %lld x %lld -> %lld: %d parts (KC_CUT=0: %d), expected %d",
                     (long long)cases[i].rows, (long long)cases[i].k, (long long)cases[i].units,
                     parts, uncut, cases[i].parts);
        if (memcmp(cut, whole, (size_t)n * sizeof *cut))
            fail_msg("Dense %lld x %lld -> %lld (%s): the parts' bits differ from the whole's",
                     (long long)cases[i].rows, (long long)cases[i].k, (long long)cases[i].units,
                     cases[i].act);
        if (!strcmp(cases[i].act, "linear"))
            expect_close(cut, want, n, 1e-3f, "Dense %lld x %lld -> %lld",
                         (long long)cases[i].rows, (long long)cases[i].k,
                         (long long)cases[i].units);
        free(cut);
        free(whole);
        free(want);
    }
}

/* kc_dnnl_pack puts the reorder's scratchpad in the spare range it is
 * given when it fits (oneDNN's Winograd weight reorder books the whole
 * transformed kernel as scratch: that transient set ResNet50's peak RSS
 * at batch 8), else in a buffer of its own; the packed kernel is the same
 * bytes either way. */
static void pack_wino(const float *w, void *spare, size_t spare_bytes, float **packed,
                      size_t *packed_bytes)
{
    dnnl_memory_desc_t src, wei_any, dst, keras;
    dnnl_dims_t act = {1, 64, 16, 16}, wd = {64, 64, 3, 3}, hwio = {64, 64, 3, 3};
    dnnl_dims_t one = {1, 1}, pad = {1, 1};
    assert_int_equal(dnnl_memory_desc_init_by_tag(&src, 4, act, dnnl_f32, dnnl_nChw16c), 0);
    assert_int_equal(dnnl_memory_desc_init_by_tag(&dst, 4, act, dnnl_f32, dnnl_nChw16c), 0);
    assert_int_equal(dnnl_memory_desc_init_by_tag(&wei_any, 4, wd, dnnl_f32, dnnl_format_tag_any),
                     0);
    assert_int_equal(dnnl_memory_desc_init_by_tag(&keras, 4, hwio, dnnl_f32, dnnl_hwio), 0);
    dnnl_convolution_desc_t desc;
    assert_int_equal(dnnl_convolution_forward_desc_init(&desc, dnnl_forward_inference,
                                                        dnnl_convolution_winograd, &src, &wei_any,
                                                        NULL, &dst, one, pad, pad),
                     0);
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_primitive_desc_create(&pd, &desc, NULL, kc_dnnl_engine(), NULL) != dnnl_success) {
        *packed = NULL; /* no Winograd on this CPU */
        return;
    }
    dnnl_memory_desc_t to = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_primitive_desc_destroy(pd);
    *packed_bytes = dnnl_memory_desc_get_size(&to);
    assert_int_equal(kc_dnnl_pack(&keras, &to, w, spare, spare_bytes, packed), KC_OK);
}

static int all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return 0;
    return 1;
}

static void test_pack_scratch_in_spare(void **state)
{
    (void)state;
    if (!kc_dnnl_ready())
        skip();
    enum { N = 64 * 64 * 9, SPARE = 4 << 20, SMALL = 1024 };
    float *w = malloc(N * sizeof *w);
    for (int i = 0; i < N; i++)
        w[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    float *alone = NULL, *in_spare = NULL, *beside = NULL;
    size_t bytes = 0;
    pack_wino(w, NULL, 0, &alone, &bytes);
    if (!alone) {
        free(w);
        skip();
    }
    unsigned char *spare = malloc(SPARE + 64), *small = malloc(SMALL);
    memset(spare, 0xA5, SPARE + 64);
    memset(small, 0xA5, SMALL);
    pack_wino(w, spare + 1, SPARE, &in_spare, &bytes); /* unaligned: it aligns */
    pack_wino(w, small, SMALL, &beside, &bytes);
    assert_memory_equal(in_spare, alone, bytes);
    assert_memory_equal(beside, alone, bytes);
    if (all_bytes(spare, SPARE + 64, 0xA5))
        fail_msg("the Winograd weight reorder's scratchpad did not go in the spare range");
    if (spare[0] != 0xA5)
        fail_msg("kc_dnnl_pack wrote before the spare range");
    if (!all_bytes(small, SMALL, 0xA5))
        fail_msg("kc_dnnl_pack wrote in a spare range too small for its scratchpad");
    kc_free_weights(alone);
    kc_free_weights(in_spare);
    kc_free_weights(beside);
    free(spare);
    free(small);
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv2d_cuts),
        cmocka_unit_test(test_winograd_map_size),
        cmocka_unit_test(test_wide_sum_kernel),
        cmocka_unit_test(test_residual_add_after),
        cmocka_unit_test(test_residual_add_vectors),
        cmocka_unit_test(test_strided_gather),
        cmocka_unit_test(test_im2col_kernel),
        cmocka_unit_test(test_dw_layers),
        cmocka_unit_test(test_stem_layers),
        cmocka_unit_test(test_narrow_layers),
        cmocka_unit_test(test_conv1d_cuts),
        cmocka_unit_test(test_wino_transforms),
        cmocka_unit_test(test_wino1d_layers),
        cmocka_unit_test(test_wino2d_layers),
        cmocka_unit_test(test_pw_layers),
        cmocka_unit_test(test_pw_residual_fetch),
        cmocka_unit_test(test_pw_claim_outputs),
        cmocka_unit_test(test_pw_pixel_cut),
        cmocka_unit_test(test_lane_help_kernels),
        cmocka_unit_test(test_dnnl_taps_run),
        cmocka_unit_test(test_pw_taps_layers),
        cmocka_unit_test(test_pw_state_follows_width),
        cmocka_unit_test(test_wino_fly_layers),
        cmocka_unit_test(test_wino_fly_blocks_claimed),
        cmocka_unit_test(test_wino2d_blocks),
        cmocka_unit_test(test_wino_fetch_rows),
        cmocka_unit_test(test_pw_passes),
        cmocka_unit_test(test_wino_balanced_cut),
        cmocka_unit_test(test_wino_state_handover),
        cmocka_unit_test(test_pool_cuts),
        cmocka_unit_test(test_maxpool_hand),
        cmocka_unit_test(test_pool_folded_pad),
        cmocka_unit_test(test_concat_cuts),
        cmocka_unit_test(test_dw_fused),
        cmocka_unit_test(test_irb_fused),
        cmocka_unit_test(test_vec_bits),
        cmocka_unit_test(test_pool_conv_fused),
        cmocka_unit_test(test_pad_crop),
        cmocka_unit_test(test_global_pool),
        cmocka_unit_test(test_dense_solo_by_weight_bytes),
        cmocka_unit_test(test_pack_scratch_in_spare),
        cmocka_unit_test(test_dense_packs_from_eight_rows),
        cmocka_unit_test(test_dense_own),
        cmocka_unit_test(test_dense_many_rows),
        cmocka_unit_test(test_dense_row_parts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
