/* A 3x3 convolution over a nearest-neighbour UpSampling2D by 2, run on
 * the upsampling's input.
 *
 * The upsampled image U repeats each input pixel in a 2x2 block, so an
 * output row y = 2i + a (a its parity) reads, through its three taps
 * dy, input rows floor((2i + a + dy - p) / 2) = i + floor((a + dy - p) / 2)
 * (p: the "same" padding's 1 or "valid"'s 0): two distinct rows, i + t(a)
 * and the one after, the taps landing on the same row adding up. Each of
 * the four parities (a, b) of an output pixel is then a 2x2 convolution
 * of the input with the 3x3 kernel's taps summed per input pixel, and the
 * four are one 2x2 convolution with 4x the filters (class 2a + b's at
 * filters [(2a + b) f, (2a + b + 1) f)) over the input padded by
 * -min t(a): 16 multiply-adds a filter and input channel per input pixel
 * where the 3x3 convolution over U makes 36. Its zero padding is the
 * upsampled image's (U's row -1 is the input's row -1). Output pixel
 * (2i + a, 2j + b) is then that convolution's pixel (i + off(a),
 * j + off(b)), class 2a + b: one copy pass, in place of the upsampling's
 * pass over the 4x larger image.
 *
 * The taps' sums are made once, in double, and rounded once: outputs move
 * by rounding only (the sums reassociate), so `exact` keeps the two
 * layers apart (runtime/fuse.c). The 2x2 convolution (bias and activation
 * with it) runs on the convolution kernel as any layer would (oneDNN, or
 * kerasc's narrow loop for up to 8 filters), its state kept in this one's;
 * its output in the arena's spare range where that has room.
 *
 * The real denoising autoencoder (denoise_ae_upsample_k380.keras,
 * 540x540: two UpSampling2D + 3x3 pairs, 64 -> 32 and 32 -> 1) on the
 * 2-core Zen 5, batch 1, alternating with KC_FUSE_UP=0: 15.3-16.2 ->
 * 11.8-12.0 ms a run; the 64 -> 32 pair 4.9 -> 3.8 ms (0.9 of it the
 * copy), the 32 -> 1 pair 3.9 -> 0.67. */
#include "kernels/upconv.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "kernels/inner_conv.h"
#include "kernels/phase_grid.h"

typedef struct kc_upconv_state {
    kc_kernel_state base;
    kc_shape in_shape;         /* the upsampled input shape it was built for */
    kc_inner_conv inner;       /* the 2x2 convolution: kernel (2, 2, c, 4f), bias (4f) */
    kc_shape q_in, q_out;      /* its input (padded, as a folded ZeroPadding's) and output */
    kc_phase_grid grid;        /* the four parities on the output grid (stride 2) */
    int64_t c;                 /* input channels (filters: grid.f) */
    int same;                  /* the 3x3 convolution's padding: 1 "same", 0 "valid" */
} kc_upconv_state;

int kc_upconv_fusable(const kc_conv_attrs *a, const kc_upsample_attrs *u, const kc_shape *in)
{
    if (!a || !u || a->kind != KC_CONV_PLAIN || a->spatial != 2 || a->groups != 1 ||
        a->padding > 1 || a->accumulate || a->post_dw || a->post_pw || a->pre_pool ||
        a->post_pool || u->spatial != 2 || !u->interpolation ||
        strcmp(u->interpolation, "nearest") != 0 || in->rank != 4)
        return 0;
    for (int i = 0; i < 2; i++)
        if (a->kernel[i] != 3 || a->strides[i] != 1 || a->dilation[i] != 1 || a->pad_before[i] ||
            a->pad_after[i] || u->size[i] != 2 || in->dims[1 + i] < 4)
            return 0;
    return 1;
}

/* floor(v / 2) for v >= -2 */
static int64_t kc_half_floor(int64_t v) { return v < 0 ? -1 : v / 2; }

/* The 2x2 tap (0 or 1) tap d of the 3x3 kernel lands on for parity a. */
static int64_t kc_upconv_tap(int64_t a, int64_t d, int p)
{
    return kc_half_floor(a + d - p) - kc_half_floor(a - p);
}

/* Axis `axis`: the input's len, the output's out_len: the 2x2
 * convolution's padding before and after and output length, and off. */
static int kc_upconv_axis(kc_upconv_state *st, int axis, int p, int64_t len, int64_t out_len,
                          int64_t *pad_before, int64_t *pad_after, int64_t *q_len)
{
    int64_t t0 = kc_half_floor(-p), t1 = kc_half_floor(1 - p);
    *pad_before = -(t0 < t1 ? t0 : t1);
    st->grid.off[axis][0] = t0 + *pad_before;
    st->grid.off[axis][1] = t1 + *pad_before;
    *q_len = 0;
    for (int64_t y = out_len - 2; y < out_len; y++) /* the last of each parity */
        if (y >= 0 && (y >> 1) + st->grid.off[axis][y & 1] + 1 > *q_len)
            *q_len = (y >> 1) + st->grid.off[axis][y & 1] + 1;
    *pad_after = *q_len - len - *pad_before + 1;
    return *q_len >= 1 && *pad_after >= 0 && out_len >= 1;
}

/* The 2x2 kernel and the bias repeated, from the 3x3 kernel k (Keras's
 * (3, 3, c, f)) and bias. */
static void kc_upconv_transform(const kc_upconv_state *st, const float *k, const float *bias)
{
    int64_t c = st->c, f = st->grid.f, f4 = 4 * f;
    int p = st->same;
    float *k2 = st->inner.weights[0].data;
    for (int64_t cls = 0; cls < 4; cls++) {
        int64_t a = cls >> 1, b = cls & 1;
        for (int64_t ty = 0; ty < 2; ty++)
            for (int64_t tx = 0; tx < 2; tx++)
                for (int64_t ci = 0; ci < c; ci++)
                    for (int64_t fo = 0; fo < f; fo++) {
                        double sum = 0;
                        for (int64_t dy = 0; dy < 3; dy++)
                            for (int64_t dx = 0; dx < 3; dx++)
                                if (kc_upconv_tap(a, dy, p) == ty && kc_upconv_tap(b, dx, p) == tx)
                                    sum += k[((dy * 3 + dx) * c + ci) * f + fo];
                        k2[((ty * 2 + tx) * c + ci) * f4 + cls * f + fo] = (float)sum;
                    }
    }
    for (int64_t cls = 0; bias && cls < 4; cls++)
        memcpy(st->inner.weights[1].data + cls * f, bias, (size_t)f * sizeof *bias);
}

static void kc_upconv_free(kc_kernel_state *s)
{
    kc_upconv_state *st = (kc_upconv_state *)s;
    kc_inner_conv_free(&st->inner);
    free(st);
}

static kc_status kc_upconv_build(const kc_exec_ctx *ctx, kc_upconv_state **out)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    const kc_shape *big = &ctx->in_shape[0], *os = &ctx->out_shape[0];
    kc_upconv_state *st = kc_calloc(1, sizeof *st);
    if (!st)
        return KC_ERR_NOMEM;
    st->base.free = kc_upconv_free;
    st->in_shape = *big;
    st->c = big->dims[3];
    st->grid.f = os->dims[3];
    st->grid.s[0] = st->grid.s[1] = 2;
    st->same = a->padding == 1;
    kc_conv_attrs attrs = *a;
    attrs.pre_upsample = NULL;
    attrs.filters = 4 * st->grid.f;
    attrs.padding = 0; /* padded as a folded ZeroPadding: pad_before/after */
    st->q_in = (kc_shape){.rank = 4, .dims = {big->dims[0], 0, 0, st->c}};
    st->q_out = (kc_shape){.rank = 4, .dims = {big->dims[0], 0, 0, 4 * st->grid.f}};
    int ok = big->rank == 4 && os->rank == 4 && big->dims[0] == os->dims[0];
    for (int i = 0; ok && i < 2; i++) {
        attrs.kernel[i] = 2;
        int64_t len = big->dims[1 + i] / 2;
        ok = big->dims[1 + i] == 2 * len &&
             kc_upconv_axis(st, i, a->padding, len, os->dims[1 + i], &attrs.pad_before[i],
                            &attrs.pad_after[i], &st->q_out.dims[1 + i]);
        st->q_in.dims[1 + i] = len + attrs.pad_before[i] + attrs.pad_after[i];
    }
    const kc_shape kernel = {4, {2, 2, st->c, 4 * st->grid.f}};
    kc_status s = ok ? kc_inner_conv_init(&st->inner, ctx->layer, &attrs, &kernel)
                     : kc_fail(KC_ERR_UNSUPPORTED,
                               "the upsampling fused into this convolution does not fit its shapes");
    if (s != KC_OK) {
        free(st);
        return s;
    }
    *out = st;
    return KC_OK;
}

kc_status kc_upconv(const kc_exec_ctx *ctx, kc_kernel_fn conv)
{
    if (!ctx->state)
        return kc_fail(KC_ERR_UNSUPPORTED, "the upsampling fused into this convolution needs its "
                                           "kernel state");
    kc_upconv_state *st = (kc_upconv_state *)*ctx->state;
    if (st && (st->base.free != kc_upconv_free || !kc_shape_equal(&st->in_shape, &ctx->in_shape[0])))
        st = kc_kernel_state_drop(ctx);
    if (!st || ctx->w_ext) { /* a run's own weights are derived afresh */
        const kc_conv_attrs *a = ctx->layer->attrs;
        const float *k, *bias;
        KC_TRY(kc_kernel_and_bias(ctx, a->use_bias, &k, &bias));
        if (!st) {
            KC_TRY(kc_upconv_build(ctx, &st));
            /* from here it reads only its own kernel: the layer's may go */
            st->base.weights_cached = !ctx->w_ext;
            *ctx->state = &st->base;
        }
        kc_upconv_transform(st, k, bias);
    }
    /* the 2x2 convolution's output: in the spare range where it fits */
    void *inner_spare;
    size_t inner_spare_bytes;
    float *q = kc_inner_conv_buffer(&st->inner, ctx, (size_t)kc_count(&st->q_out) * sizeof(float),
                                    &inner_spare, &inner_spare_bytes);
    if (!q)
        return kc_fail(KC_ERR_NOMEM, "out of memory for an upsampled convolution's buffer");
    KC_TRY(kc_inner_conv_run(&st->inner, ctx, conv, ctx->in[0], &st->q_in, q, &st->q_out,
                             inner_spare, inner_spare_bytes));
    kc_phase_grid_copy(&st->grid, q, &st->q_out, ctx->out[0], &ctx->out_shape[0]);
    return KC_OK;
}
