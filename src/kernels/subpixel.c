/* A 2-D transposed convolution whose kernel is a multiple of its stride,
 * as one convolution over its input.
 *
 * Along an axis, output o = s*m + a (a: its phase, 0..s-1) is the sum of
 * x[i] . W[k] over o = i*s + k - pad: k = r(a) + s*j with r(a) = (a + pad)
 * mod s, and i = m + q(a) - j with q(a) = (a + pad) div s, for j = 0..T-1
 * (T = k / s taps, the same for every phase when s divides k). Each
 * phase is then a T-tap correlation of the input, kernel tap t = W[r(a) +
 * s*(T-1-t)], and all s x s phases of a 2-D layer are one T_h x T_w
 * convolution with s_h*s_w times the filters (phase a*s_w + b's at
 * [(a*s_w + b) f, ...)), over the input padded by P = T-1-min q(a) before
 * (after: what the last output needs). Output (s*m + a, s*n + b) is its
 * pixel (m + off(a), n + off(b)), off(a) = q(a) - (T-1) + P, phase a*s_w
 * + b: one copy pass. Zero padding stands for input pixels no tap
 * reaches, as in the transposed convolution.
 *
 * transpose.c's path computes every tap's product per input pixel (4x4
 * stride 2: 16 x filters values a pixel, through memory) and sums four of
 * them per output pixel; here the sums stay in the convolution's
 * registers and the buffer holds an output's worth. A tfjs-built decoder's
 * 64x64x128 -> 128x128x64 4x4 stride-2 layer on the 2-core Zen 5: see
 * README (Performance). Its rounding differs from that path's by the
 * order of the sums only. */
#include "kernels/subpixel.h"

#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/error.h"
#include "base/mem.h"
#include "kernels/inner_conv.h"
#include "kernels/phase_grid.h"
#include "ops/conv.h"

/* Input pixels an image, at least (below: transpose.c's path). */
#define KC_SUBPIXEL_MIN_PIXELS 64

typedef struct kc_subpixel_state {
    kc_kernel_state base;
    kc_shape in_shape;
    kc_inner_conv phases;        /* (T_h, T_w, c, s_h s_w f) */
    kc_shape q_in, q_out;
    kc_phase_grid grid;          /* its phases on the output grid */
} kc_subpixel_state;

static void kc_subpixel_free(kc_kernel_state *s)
{
    kc_subpixel_state *st = (kc_subpixel_state *)s;
    kc_inner_conv_free(&st->phases);
    free(st);
}

/* One axis (g's index i): the phases' taps T, their r(a) in r, the
 * convolution's padding and output length, off; 0 where it does not
 * qualify. */
static int kc_subpixel_axis(const kc_geom *g, int i, kc_subpixel_state *st, int axis, int64_t *r,
                            int64_t *taps, int64_t *pad_before, int64_t *pad_after,
                            int64_t *q_len)
{
    int64_t s = g->s[i], k = g->k[i], len = g->in[i], out = g->out[i], pad = g->pad[i];
    if (g->d[i] != 1 || k % s || s > KC_PHASE_MAX || len < 1 || out < 1)
        return 0;
    int64_t t = k / s, qmin = -1;
    for (int64_t a = 0; a < s; a++) {
        r[a] = (a + pad) % s;
        int64_t q = (a + pad) / s;
        qmin = qmin < 0 || q < qmin ? q : qmin;
    }
    *pad_before = t - 1 - qmin;
    if (*pad_before < 0)
        return 0;
    *q_len = 0;
    for (int64_t a = 0; a < s; a++) {
        st->grid.off[axis][a] = (a + pad) / s - (t - 1) + *pad_before;
        if (a < out) { /* its last output: m = (out - 1 - a) / s */
            int64_t need = (out - 1 - a) / s + st->grid.off[axis][a] + 1;
            *q_len = need > *q_len ? need : *q_len;
        }
    }
    *pad_after = *q_len - len - *pad_before + t - 1;
    *taps = t;
    st->grid.s[axis] = s;
    return *pad_after >= 0;
}

/* The phases' kernel and bias from Keras's (k_h, k_w, f, c) kernel. */
static void kc_subpixel_kernel(kc_subpixel_state *st, const kc_geom *g, const int64_t *r_h,
                               const int64_t *r_w, const float *w, const float *bias)
{
    int64_t f = g->f, c = g->c, sh = st->grid.s[0], sw = st->grid.s[1], fs = sh * sw * f;
    int64_t th_n = st->phases.attrs.kernel[0], tw_n = st->phases.attrs.kernel[1];
    float *kin = st->phases.weights[0].data;
    for (int64_t a = 0; a < sh; a++)
        for (int64_t b = 0; b < sw; b++)
            for (int64_t th = 0; th < th_n; th++)
                for (int64_t tw = 0; tw < tw_n; tw++) {
                    int64_t kh = r_h[a] + sh * (th_n - 1 - th), kw = r_w[b] + sw * (tw_n - 1 - tw);
                    const float *from = w + (kh * g->k[2] + kw) * f * c;
                    for (int64_t ci = 0; ci < c; ci++)
                        for (int64_t fo = 0; fo < f; fo++)
                            kin[((th * tw_n + tw) * c + ci) * fs + (a * sw + b) * f + fo] =
                                from[fo * c + ci];
                }
    for (int64_t p = 0; bias && p < sh * sw; p++)
        memcpy(st->phases.weights[1].data + p * f, bias, (size_t)f * sizeof *bias);
}

static kc_status kc_subpixel_build(const kc_exec_ctx *ctx, const kc_geom *g,
                                   kc_subpixel_state **out)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    const float *w, *bias;
    KC_TRY(kc_kernel_and_bias(ctx, a->use_bias, &w, &bias));
    kc_subpixel_state *st = kc_calloc(1, sizeof *st);
    if (!st)
        return KC_ERR_NOMEM;
    st->base.free = kc_subpixel_free;
    st->in_shape = ctx->in_shape[0];
    st->grid.f = g->f;
    int64_t r[2][KC_PHASE_MAX], taps[2], pb[2], pa[2], q_len[2];
    kc_conv_attrs attrs = {.kind = KC_CONV_PLAIN, .spatial = 2, .strides = {1, 1, 1},
                           .dilation = {1, 1, 1}, .output_padding = {-1, -1, -1}, .groups = 1,
                           .use_bias = a->use_bias, .activation = a->activation};
    for (int i = 0; i < 2; i++) {
        kc_subpixel_axis(g, 1 + i, st, i, r[i], &taps[i], &pb[i], &pa[i], &q_len[i]);
        attrs.kernel[i] = taps[i];
        attrs.pad_before[i] = pb[i];
        attrs.pad_after[i] = pa[i];
    }
    attrs.filters = st->grid.s[0] * st->grid.s[1] * g->f;
    st->q_in = (kc_shape){4, {g->n, g->in[1] + pb[0] + pa[0], g->in[2] + pb[1] + pa[1], g->c}};
    st->q_out = (kc_shape){4, {g->n, q_len[0], q_len[1], attrs.filters}};
    const kc_shape kernel = {4, {taps[0], taps[1], g->c, attrs.filters}};
    kc_status s = kc_inner_conv_init(&st->phases, ctx->layer, &attrs, &kernel);
    if (s != KC_OK) {
        free(st);
        return s;
    }
    kc_subpixel_kernel(st, g, r[0], r[1], w, bias);
    st->base.weights_cached = 1; /* its own kernel is the one read now */
    *out = st;
    return KC_OK;
}

kc_status kc_subpixel_transpose(const kc_exec_ctx *ctx, const kc_geom *g, kc_kernel_fn conv,
                                int *handled)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    *handled = 0;
    kc_subpixel_state probe;
    int64_t r[KC_PHASE_MAX], t, pb, pa, q_len;
    /* on a few pixels (a generator's first 4x4 layer) the weights
     * dominate, and oneDNN's 1x1 kernel read them faster than its T x T
     * one (0.22 against 0.28 ms for 4x4x512 -> 8x8x256) */
    if (!ctx->state || ctx->w_ext || a->spatial != 2 || kc_env_off("KC_SUBPIXEL") ||
        g->in[1] * g->in[2] < KC_SUBPIXEL_MIN_PIXELS ||
        !kc_subpixel_axis(g, 1, &probe, 0, r, &t, &pb, &pa, &q_len) ||
        !kc_subpixel_axis(g, 2, &probe, 1, r, &t, &pb, &pa, &q_len))
        return KC_OK;
    kc_subpixel_state *st = (kc_subpixel_state *)*ctx->state;
    if (st && (st->base.free != kc_subpixel_free || !kc_shape_equal(&st->in_shape, &ctx->in_shape[0])))
        st = kc_kernel_state_drop(ctx);
    if (!st) {
        KC_TRY(kc_subpixel_build(ctx, g, &st));
        *ctx->state = &st->base;
    }
    void *rest;
    size_t rest_bytes;
    float *q = kc_inner_conv_buffer(&st->phases, ctx, (size_t)kc_count(&st->q_out) * sizeof(float),
                                    &rest, &rest_bytes);
    if (!q)
        return kc_fail(KC_ERR_NOMEM, "out of memory for a transposed convolution's buffer");
    KC_TRY(kc_inner_conv_run(&st->phases, ctx, conv, ctx->in[0], &st->q_in, q, &st->q_out, rest,
                             rest_bytes));
    kc_phase_grid_copy(&st->grid, q, &st->q_out, ctx->out[0], &ctx->out_shape[0]);
    *handled = 1;
    return KC_OK;
}
