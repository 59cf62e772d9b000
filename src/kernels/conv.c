/* Convolutions on NHWC float32: plain and grouped (im2col + GEMM),
 * depthwise (direct), separable (depthwise then a 1x1 GEMM; separable.c
 * runs it on the kernels below), transposed (transpose.c). 1-D and 3-D
 * convolutions use the same code with the missing spatial axes of size 1.
 * Padding follows TensorFlow: for "same" the extra pixel goes after
 * (bottom/right); "causal" pads only before. */
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_geom.h"
#include "kernels/dnnl_conv.h"
#include "kernels/kernel.h"
#include "kernels/dw.h"
#include "kernels/irb.h"
#include "kernels/pw.h"
#include "kernels/separable.h"
#include "kernels/narrow.h"
#include "kernels/stem.h"
#include "kernels/transpose.h"
#include "kernels/upconv.h"
#include "kernels/wino.h"
#include "ops/conv.h"

void kc_geom_init(const kc_exec_ctx *ctx, const kc_conv_attrs *a, kc_geom *g)
{
    const kc_shape *in = &ctx->in_shape[0], *out = &ctx->out_shape[0];
    int sp = a->spatial;
    memset(g, 0, sizeof *g);
    g->n = in->dims[0];
    g->c = in->dims[in->rank - 1];
    g->f = out->dims[out->rank - 1];
    int64_t dims[KC_MAX_RANK];
    memcpy(dims, in->dims, sizeof dims);
    kc_conv_data_shape(a, dims, in->rank);
    for (int i = 0; i < 3; i++) {
        int axis = i - (3 - sp); /* spatial axis index in the attrs, or < 0 */
        g->in[i] = axis >= 0 ? dims[1 + axis] : 1;
        g->out[i] = axis >= 0 ? out->dims[1 + axis] : 1;
        g->k[i] = axis >= 0 ? a->kernel[axis] : 1;
        g->s[i] = axis >= 0 ? a->strides[axis] : 1;
        g->d[i] = axis >= 0 ? a->dilation[axis] : 1;
        g->pad[i] = axis >= 0 && a->kind != KC_CONV_TRANSPOSE
                        ? kc_conv_pad_before(g->in[i], g->out[i], (g->k[i] - 1) * g->d[i] + 1,
                                             g->s[i], a->padding) +
                              a->pad_before[axis]
                        : 0;
    }
}

void kc_conv_window_2d(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out,
                       int64_t data[2], int64_t pad[2])
{
    int64_t dims[KC_MAX_RANK];
    memcpy(dims, in->dims, sizeof dims);
    kc_conv_data_shape(a, dims, in->rank);
    for (int i = 0; i < 2; i++) {
        data[i] = dims[1 + i];
        pad[i] = kc_conv_pad_before(in->dims[1 + i], out->dims[1 + i], a->kernel[i],
                                    a->strides[i], a->padding) +
                 a->pad_before[i];
    }
}

/* One image's patch rows [r0, r1) of the output, channels [c0, c0+cg). */
static void kc_im2col(const kc_geom *g, const float *img, int64_t r0, int64_t r1, int64_t c0,
                      int64_t cg, float *cols)
{
    int64_t kk = g->k[0] * g->k[1] * g->k[2] * cg;
    for (int64_t r = r0; r < r1; r++) {
        int64_t ox = r % g->out[2], oy = (r / g->out[2]) % g->out[1], oz = r / (g->out[2] * g->out[1]);
        float *row = cols + (r - r0) * kk;
        for (int64_t kz = 0; kz < g->k[0]; kz++)
            for (int64_t ky = 0; ky < g->k[1]; ky++)
                for (int64_t kx = 0; kx < g->k[2]; kx++, row += cg) {
                    int64_t iz = oz * g->s[0] + kz * g->d[0] - g->pad[0];
                    int64_t iy = oy * g->s[1] + ky * g->d[1] - g->pad[1];
                    int64_t ix = ox * g->s[2] + kx * g->d[2] - g->pad[2];
                    if (iz < 0 || iz >= g->in[0] || iy < 0 || iy >= g->in[1] || ix < 0 ||
                        ix >= g->in[2]) {
                        memset(row, 0, (size_t)cg * sizeof *row);
                        continue;
                    }
                    const float *px = img + ((iz * g->in[1] + iy) * g->in[2] + ix) * g->c + c0;
                    memcpy(row, px, (size_t)cg * sizeof *row);
                }
    }
}

static void kc_add_bias(float *y, const float *bias, int64_t rows, int64_t f)
{
    if (!bias)
        return;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < f; j++)
            y[r * f + j] += bias[j];
}

#define KC_IM2COL_BUDGET ((int64_t)2 << 20) /* floats of scratch per chunk */

static kc_status kc_conv_plain(const kc_exec_ctx *ctx, const kc_conv_attrs *a)
{
    kc_geom g;
    kc_geom_init(ctx, a, &g);
    int64_t groups = a->groups, cg = g.c / groups, fg = g.f / groups;
    int64_t kk = g.k[0] * g.k[1] * g.k[2] * cg;
    int64_t rows = g.out[0] * g.out[1] * g.out[2];
    int64_t in_img = g.in[0] * g.in[1] * g.in[2] * g.c;
    const float *w = kc_w(ctx, 0);
    const float *bias = a->use_bias ? kc_w(ctx, 1) : NULL;
    int pointwise = kk == g.c && groups == 1 && g.s[0] * g.s[1] * g.s[2] == 1 && rows * g.c == in_img;
    int64_t chunk = KC_IM2COL_BUDGET / (kk ? kk : 1);
    if (chunk < 1)
        chunk = 1;
    float *cols = pointwise ? NULL : kc_scratch((chunk < rows ? chunk : rows) * kk);
    if (!pointwise && !cols)
        return KC_ERR_NOMEM;
    for (int64_t b = 0; b < g.n; b++) {
        const float *img = ctx->in[0] + b * in_img;
        float *y = ctx->out[0] + b * rows * g.f;
        if (pointwise) {
            kc_gemm(rows, g.f, g.c, img, w, y, a->accumulate);
        } else {
            for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
                int64_t r1 = r0 + chunk < rows ? r0 + chunk : rows;
                for (int64_t gi = 0; gi < groups; gi++) {
                    kc_im2col(&g, img, r0, r1, gi * cg, cg, cols);
                    kc_gemm_ld(r1 - r0, fg, kk, cols, kk, w + gi * fg, g.f, 0,
                               y + r0 * g.f + gi * fg, g.f, a->accumulate);
                }
            }
        }
        kc_add_bias(y, bias, rows, g.f);
    }
    free(cols);
    return kc_activation_apply(a->activation, ctx->keras_major, ctx->out[0], g.n * rows * g.f,
                               g.f);
}

/* out[.., c*dm + m] = sum_k in[.., c] * K[k, c, m] (+ out if accumulate) */
static void kc_depthwise(const kc_geom *g, int64_t dm, const float *in, const float *w,
                         const float *bias, int accumulate, float *out)
{
    int64_t cout = g->c * dm;
    for (int64_t b = 0; b < g->n; b++)
        for (int64_t oy = 0; oy < g->out[1]; oy++)
            for (int64_t ox = 0; ox < g->out[2]; ox++) {
                float *o = out + ((b * g->out[1] + oy) * g->out[2] + ox) * cout;
                for (int64_t j = 0; j < cout; j++)
                    o[j] = (accumulate ? o[j] : 0.0f) + (bias ? bias[j] : 0.0f);
                for (int64_t ky = 0; ky < g->k[1]; ky++) {
                    int64_t iy = oy * g->s[1] + ky * g->d[1] - g->pad[1];
                    if (iy < 0 || iy >= g->in[1])
                        continue;
                    for (int64_t kx = 0; kx < g->k[2]; kx++) {
                        int64_t ix = ox * g->s[2] + kx * g->d[2] - g->pad[2];
                        if (ix < 0 || ix >= g->in[2])
                            continue;
                        const float *px = in + ((b * g->in[1] + iy) * g->in[2] + ix) * g->c;
                        const float *kw = w + (ky * g->k[2] + kx) * g->c * dm;
                        if (dm == 1)
                            for (int64_t c = 0; c < g->c; c++)
                                o[c] += px[c] * kw[c];
                        else
                            for (int64_t c = 0; c < g->c; c++)
                                for (int64_t m = 0; m < dm; m++)
                                    o[c * dm + m] += px[c] * kw[c * dm + m];
                    }
                }
            }
}

static kc_status kc_conv_depthwise(const kc_exec_ctx *ctx, const kc_conv_attrs *a)
{
    kc_geom g;
    kc_geom_init(ctx, a, &g);
    const float *bias = a->use_bias ? kc_w(ctx, 1) : NULL;
    kc_depthwise(&g, a->depth_multiplier, ctx->in[0], kc_w(ctx, 0), bias, a->accumulate,
                 ctx->out[0]);
    int64_t n = kc_count(&ctx->out_shape[0]);
    return kc_activation_apply(a->activation, ctx->keras_major, ctx->out[0], n, g.f);
}

static kc_status kc_conv_separable(const kc_exec_ctx *ctx, const kc_conv_attrs *a)
{
    kc_geom g;
    kc_geom_init(ctx, a, &g);
    int64_t mid_c = g.c * a->depth_multiplier;
    int64_t rows = g.n * g.out[1] * g.out[2];
    float *mid = kc_scratch(rows * mid_c);
    if (!mid)
        return KC_ERR_NOMEM;
    kc_depthwise(&g, a->depth_multiplier, ctx->in[0], kc_w(ctx, 0), NULL, 0, mid);
    kc_gemm(rows, g.f, mid_c, mid, kc_w(ctx, 1), ctx->out[0], 0);
    free(mid);
    kc_add_bias(ctx->out[0], a->use_bias ? kc_w(ctx, 2) : NULL, rows, g.f);
    return kc_activation_apply(a->activation, ctx->keras_major, ctx->out[0], rows * g.f, g.f);
}

static kc_status kc_conv(const kc_exec_ctx *ctx)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    int handled = 0, act_done = 0;
    if (a->post_pw) /* planned only where the block kernel takes it (fuse.c) */
        return kc_irb_conv(ctx);
    if (a->pre_upsample) /* planned only where kc_upconv_fusable (fuse.c) */
        return kc_upconv(ctx, kc_conv);
    if (a->post_pool) { /* planned only where the stem loop takes it (fuse.c) */
        KC_TRY(kc_stem_conv(ctx, &handled, &act_done));
        /* taken, it applied the activation too (kc_stem_pool_fusable) */
        return handled ? KC_OK
                       : kc_fail(KC_ERR_UNSUPPORTED,
                                 "the max pooling fused into this convolution needs kerasc's stem "
                                 "loop, which refused it");
    }
    if (a->post_head) { /* planned only where kc_pw_head_fusable (fuse.c) */
        KC_TRY(kc_pw_conv(ctx, &handled, &act_done));
        return handled ? KC_OK
                       : kc_fail(KC_ERR_UNSUPPORTED,
                                 "the pooling and Dense fused into this 1x1 convolution need "
                                 "kerasc's 1x1 kernel, which refused it");
    }
    if (a->kind == KC_CONV_SEPARABLE) {
        KC_TRY(kc_separable_conv(ctx, &handled));
        if (handled) /* the 1x1 part applied the activation */
            return KC_OK;
    }
    KC_TRY(kc_wino_conv(ctx, &handled, &act_done));
    if (!handled)
        KC_TRY(kc_wino_fly_conv(ctx, &handled, &act_done));
    if (!handled)
        KC_TRY(kc_pw_conv(ctx, &handled, &act_done));
    if (!handled)
        KC_TRY(kc_dw_conv(ctx, &handled, &act_done));
    if (!handled)
        KC_TRY(kc_stem_conv(ctx, &handled, &act_done));
    if (!handled)
        KC_TRY(kc_narrow_conv(ctx, &handled, &act_done));
    if (!handled)
        KC_TRY(kc_dnnl_conv(ctx, &handled, &act_done));
    if (handled && act_done)
        return KC_OK;
    if (a->post_dw) /* planned only where oneDNN runs the pair whole (fuse.c) */
        return kc_fail(KC_ERR_UNSUPPORTED,
                       "the depthwise layer fused into this one needs oneDNN, which refused it");
    if (a->pre_pool) /* planned only where oneDNN runs it (fuse.c); pw.c may first */
        return kc_fail(KC_ERR_UNSUPPORTED,
                       "the pooling moved after this convolution needs oneDNN, which refused it");
    if (handled) {
        int64_t n = kc_count(&ctx->out_shape[0]);
        const kc_shape *os = &ctx->out_shape[0];
        return kc_activation_apply(a->activation, ctx->keras_major, ctx->out[0], n,
                                   os->dims[os->rank - 1]);
    }
    switch (a->kind) {
    case KC_CONV_PLAIN: return kc_conv_plain(ctx, a);
    case KC_CONV_DEPTHWISE:
        if (a->spatial == 3)
            break;
        return kc_conv_depthwise(ctx, a);
    case KC_CONV_SEPARABLE: return kc_conv_separable(ctx, a);
    case KC_CONV_TRANSPOSE: return kc_conv_transpose(ctx, kc_conv);
    }
    return kc_fail(KC_ERR_UNSUPPORTED, "3-D depthwise convolution");
}

const kc_kernel_entry kc_kernels_conv[] = {
    {"Conv1D", 0, kc_conv},          {"Conv2D", 0, kc_conv},
    {"Conv3D", 0, kc_conv},          {"Convolution1D", 0, kc_conv},
    {"Convolution2D", 0, kc_conv},   {"Convolution3D", 0, kc_conv},
    {"AtrousConvolution1D", 0, kc_conv}, {"AtrousConvolution2D", 0, kc_conv},
    {"Conv1DTranspose", 0, kc_conv}, {"Conv2DTranspose", 0, kc_conv},
    {"Conv3DTranspose", 0, kc_conv}, {"Deconvolution2D", 0, kc_conv},
    {"DepthwiseConv1D", 0, kc_conv}, {"DepthwiseConv2D", 0, kc_conv},
    {"SeparableConv1D", 0, kc_conv}, {"SeparableConv2D", 0, kc_conv},
    {"SeparableConvolution2D", 0, kc_conv},
    {NULL, 0, NULL},
};
