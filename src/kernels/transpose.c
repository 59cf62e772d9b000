/* Transposed convolutions (Conv1D/2D/3DTranspose).
 *
 * cols = x . W^T (W is Keras's (k..., f, c) = (K*f, c)): per input pixel
 * every tap's contribution to every filter, run as a 1x1 convolution
 * (c -> taps x filters) through the convolution dispatch; then each
 * output pixel is the sum of the values its taps reach (out[o = i*s +
 * k*d - pad]), gathered by output rows over the threads. pad is what the
 * forward convolution of `out` would use (TensorFlow's conv2d_transpose).
 *
 * This file is built with the element-wise loops' vectorisation flags
 * (CMakeLists.txt): the gather's adds are vector adds. */
#include "kernels/transpose.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "base/threads.h"
#include "kernels/conv_geom.h"
#include "kernels/inner_conv.h"
#include "kernels/subpixel.h"
#include "ops/conv.h"

/* One image of a transposed convolution: its GEMM's rows (kernel taps x
 * filters per input pixel), the output, and each output column's taps
 * along the last axis (kc_transpose_taps: x_n[ox] of them at
 * x_tap/x_from[ox * k]). */
typedef struct kc_transpose_job {
    const kc_geom *g;
    const float *cols, *bias;
    float *y;
    int64_t kf;
    const int64_t *x_tap, *x_from;
    const int *x_n;
} kc_transpose_job;

/* The input pixels and taps along one axis that reach output index o:
 * i * s + k * d - pad = o. Taps from the last down, so that the input
 * indices come in increasing order. */
static int kc_transpose_taps(int64_t o, int64_t in, int64_t k, int64_t s, int64_t d, int64_t pad,
                             int64_t *taps, int64_t *from)
{
    int n = 0;
    for (int64_t t = k - 1; t >= 0; t--) {
        int64_t num = o + pad - t * d;
        if (num < 0 || num % s || num / s >= in)
            continue;
        taps[n] = t;
        from[n++] = num / s;
    }
    return n;
}

/* One tap's values into output pixel o: o = 0 + col for the first, o +=
 * col after; the last one adds the bias (or NULL) in the same pass: the
 * sums the former scatter made into a zeroed output, the bias after. */
static void kc_transpose_add(float *restrict o, const float *restrict col,
                             const float *restrict bias, int64_t f, int first, int last)
{
    if (first && last && bias)
        for (int64_t c = 0; c < f; c++)
            o[c] = (0.0f + col[c]) + bias[c];
    else if (last && bias)
        for (int64_t c = 0; c < f; c++)
            o[c] = (o[c] + col[c]) + bias[c];
    else if (first)
        for (int64_t c = 0; c < f; c++)
            o[c] = 0.0f + col[c];
    else
        for (int64_t c = 0; c < f; c++)
            o[c] += col[c];
}

/* Output rows [lo, hi) over (depth, row) of one image: each output pixel
 * gathers its taps' GEMM values, summed in increasing input pixel order
 * (the order the former scatter added them in, input row by input row:
 * the same bits), then the bias. Rows are independent, so the threads
 * split them. */
static void kc_transpose_rows(void *arg, int64_t lo, int64_t hi)
{
    const kc_transpose_job *j = arg;
    const kc_geom *g = j->g;
    int64_t f = g->f, kx = g->k[2];
    int64_t tz[64], fz[64], ty[64], fy[64];
    for (int64_t r = lo; r < hi; r++) {
        int64_t oz = r / g->out[1], oy = r % g->out[1];
        int nz = kc_transpose_taps(oz, g->in[0], g->k[0], g->s[0], g->d[0], g->pad[0], tz, fz);
        int ny = kc_transpose_taps(oy, g->in[1], g->k[1], g->s[1], g->d[1], g->pad[1], ty, fy);
        float *o = j->y + r * g->out[2] * f;
        for (int64_t ox = 0; ox < g->out[2]; ox++, o += f) {
            const int64_t *tx = j->x_tap + ox * kx, *fx = j->x_from + ox * kx;
            int taps = nz * ny * j->x_n[ox], t = 0;
            for (int a = 0; a < nz; a++)
                for (int b = 0; b < ny; b++) {
                    int64_t row = (fz[a] * g->in[1] + fy[b]) * g->in[2];
                    int64_t tap = (tz[a] * g->k[1] + ty[b]) * kx;
                    for (int e = 0; e < j->x_n[ox]; e++, t++)
                        kc_transpose_add(o, j->cols + (row + fx[e]) * j->kf + (tap + tx[e]) * f,
                                         j->bias, f, t == 0, t == taps - 1);
                }
            if (!taps) { /* no tap reaches it: 0, then the bias */
                memset(o, 0, (size_t)f * sizeof *o);
                if (j->bias)
                    kc_transpose_add(o, j->bias, NULL, f, 0, 0);
            }
        }
    }
}

/* A transposed convolution's kernel as a 1x1 convolution's, c -> taps x
 * filters (Keras's (k..., f, c) transposed), run through the dispatch on
 * one image (oneDNN's brgconv 1x1: a decoder's 32x32 256 -> 9 x 128
 * product 3.1 -> 1.6 ms against dnnl_sgemm's transposed GEMM), and the
 * gather's
 * per-column taps; built once per input shape. */
typedef struct kc_transpose_state {
    kc_kernel_state base;
    kc_shape in_shape;
    kc_inner_conv gemm;
    kc_shape gemm_in, gemm_out;  /* one image as (1, depth x rows, columns, c) -> taps x filters */
    int64_t *x_tap, *x_from;     /* output column ox's taps at [ox * k] */
    int *x_n;
} kc_transpose_state;

static void kc_transpose_free(kc_kernel_state *s)
{
    kc_transpose_state *st = (kc_transpose_state *)s;
    kc_inner_conv_free(&st->gemm);
    free(st->x_tap);
    free(st->x_n);
    free(st);
}

/* Each output column's taps along the last axis (t->x_tap, x_from, x_n);
 * the caller frees x_tap and x_n. */
static kc_status kc_transpose_columns(const kc_geom *g, kc_transpose_state *t)
{
    t->x_tap = kc_calloc((size_t)(2 * g->out[2] * g->k[2]), sizeof *t->x_tap);
    t->x_n = kc_calloc((size_t)g->out[2], sizeof *t->x_n);
    if (!t->x_tap || !t->x_n)
        return KC_ERR_NOMEM;
    t->x_from = t->x_tap + g->out[2] * g->k[2];
    for (int64_t ox = 0; ox < g->out[2]; ox++)
        t->x_n[ox] = kc_transpose_taps(ox, g->in[2], g->k[2], g->s[2], g->d[2], g->pad[2],
                                       t->x_tap + ox * g->k[2], t->x_from + ox * g->k[2]);
    return KC_OK;
}

static kc_status kc_transpose_build(const kc_exec_ctx *ctx, const kc_geom *g, const float *w,
                                    kc_transpose_state **out)
{
    int64_t kf = g->k[0] * g->k[1] * g->k[2] * g->f, pixels = g->in[0] * g->in[1] * g->in[2];
    kc_transpose_state *st = kc_calloc(1, sizeof *st);
    if (!st)
        return KC_ERR_NOMEM;
    st->base.free = kc_transpose_free;
    st->in_shape = ctx->in_shape[0];
    kc_conv_attrs attrs = {.kind = KC_CONV_PLAIN, .spatial = 2, .filters = kf,
                           .kernel = {1, 1, 1}, .strides = {1, 1, 1}, .dilation = {1, 1, 1},
                           .output_padding = {-1, -1, -1}, .groups = 1, .activation = "linear"};
    const kc_shape kernel = {4, {1, 1, g->c, kf}};
    st->gemm_in = (kc_shape){4, {1, pixels / g->in[2], g->in[2], g->c}};
    st->gemm_out = (kc_shape){4, {1, pixels / g->in[2], g->in[2], kf}};
    kc_status s = kc_transpose_columns(g, st);
    if (s == KC_OK)
        s = kc_inner_conv_init(&st->gemm, ctx->layer, &attrs, &kernel);
    if (s != KC_OK) {
        free(st->x_tap);
        free(st->x_n);
        free(st);
        return s;
    }
    float *wt = st->gemm.weights[0].data;
    for (int64_t j = 0; j < kf; j++)
        for (int64_t c = 0; c < g->c; c++)
            wt[c * kf + j] = w[j * g->c + c];
    st->base.weights_cached = 1; /* the transposed copy is the one read now */
    *out = st;
    return KC_OK;
}

/* Transposed: cols = x · W^T (W is (k..., f, c) = (K*f, c)), each
 * output pixel then the sum of the values its taps reach
 * (out[o = i*s + k*d - pad]). pad is what the forward conv of `out`
 * would use (TensorFlow's conv2d_transpose). The product runs as a 1x1
 * convolution (kc_transpose_state), the gather by output rows over the
 * threads; both were one thread's scatter after dnnl_sgemm before: a
 * decoder's 32x32x256 -> 64x64x128 3x3 stride-2 layer took 3.7 ms on the
 * 2-core Zen 5, a 128x128x64 -> 256x256x32 2x2 one 3.1 ms. oneDNN 2.6's
 * deconvolution (its strided backward-data kernels) took 10 and 34 ms
 * there, NHWC or blocked. Without a state (or with a run's own weights)
 * the product stays on kc_gemm_ld; the sums are the same either way up to
 * the product's rounding. */
kc_status kc_conv_transpose(const kc_exec_ctx *ctx, kc_kernel_fn conv)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    kc_geom g;
    kc_geom_init(ctx, a, &g);
    for (int i = 0; i < 3; i++) {
        int64_t keff = (g.k[i] - 1) * g.d[i] + 1;
        int64_t total = (g.in[i] - 1) * g.s[i] + keff - g.out[i];
        g.pad[i] = a->padding == 1 && total > 0 ? total / 2 : 0;
        if (g.k[i] > 64)
            return kc_fail(KC_ERR_LIMIT, "a transposed convolution's kernel of %lld taps on an axis "
                                         "(at most 64)", (long long)g.k[i]);
    }
    int64_t kf = g.k[0] * g.k[1] * g.k[2] * g.f;
    int64_t in_rows = g.in[0] * g.in[1] * g.in[2];
    int64_t out_img = g.out[0] * g.out[1] * g.out[2] * g.f;
    if (in_rows == 0 || out_img == 0) { /* no input pixel: each output is its bias */
        const float *bias = a->use_bias ? kc_w(ctx, 1) : NULL;
        for (int64_t i = 0; i < g.n * out_img; i++)
            ctx->out[0][i] = bias ? bias[i % g.f] : 0.0f;
        return kc_activation_apply(a->activation, ctx->keras_major, ctx->out[0], g.n * out_img,
                                   g.f);
    }
    int phased = 0; /* a kernel a multiple of its stride: one convolution (subpixel.c) */
    KC_TRY(kc_subpixel_transpose(ctx, &g, conv, &phased));
    if (phased)
        return KC_OK;
    kc_transpose_state *st = ctx->state ? (kc_transpose_state *)*ctx->state : NULL;
    if (st && (st->base.free != kc_transpose_free || !kc_shape_equal(&st->in_shape, &ctx->in_shape[0])))
        st = kc_kernel_state_drop(ctx);
    const float *w = kc_w(ctx, 0);
    if (!st && ctx->state && !ctx->w_ext) {
        if (!w)
            return kc_fail(KC_ERR_UNSUPPORTED, "the transposed convolution's kernel is gone");
        KC_TRY(kc_transpose_build(ctx, &g, w, &st));
        *ctx->state = &st->base;
    }
    kc_transpose_job job = {&g, NULL, a->use_bias ? kc_w(ctx, 1) : NULL, NULL, kf, NULL, NULL, NULL};
    kc_transpose_state plain = {0};
    float *cols_owned = NULL;
    void *rest = NULL;
    size_t rest_bytes = 0;
    if (st) {
        job.cols = kc_inner_conv_buffer(&st->gemm, ctx, (size_t)(in_rows * kf) * sizeof(float),
                                        &rest, &rest_bytes);
    } else { /* no state to keep: this call's own tables and product */
        kc_status s = w ? kc_transpose_columns(&g, &plain)
                        : kc_fail(KC_ERR_UNSUPPORTED, "the transposed convolution's kernel is gone");
        job.cols = cols_owned = s == KC_OK ? kc_scratch(in_rows * kf) : NULL;
        if (s != KC_OK) {
            free(plain.x_tap);
            free(plain.x_n);
            return s;
        }
    }
    const kc_transpose_state *tables = st ? st : &plain;
    job.x_tap = tables->x_tap;
    job.x_from = tables->x_from;
    job.x_n = tables->x_n;
    kc_status s = job.cols ? KC_OK : KC_ERR_NOMEM;
    for (int64_t b = 0; b < g.n && s == KC_OK; b++) {
        const float *x = ctx->in[0] + b * in_rows * g.c;
        if (st)
            s = kc_inner_conv_run(&st->gemm, ctx, conv, x, &st->gemm_in, (float *)job.cols,
                                  &st->gemm_out, rest, rest_bytes);
        else
            kc_gemm_ld(in_rows, kf, g.c, x, g.c, w, g.c, 1, (float *)job.cols, kf, 0);
        job.y = ctx->out[0] + b * out_img;
        if (s == KC_OK)
            kc_parallel_for(g.out[0] * g.out[1], (in_rows * kf + out_img) * (int64_t)sizeof(float),
                            1, kc_transpose_rows, &job);
    }
    free(plain.x_tap);
    free(plain.x_n);
    free(cols_owned);
    KC_TRY(s);
    return kc_activation_apply(a->activation, ctx->keras_major, ctx->out[0], g.n * out_img, g.f);
}

