/* 3x3 stride-1 depthwise convolutions where oneDNN runs without AVX-512:
 * kerasc's own loop (dw_avx2.c), the output rows split between the
 * threads.
 *
 * Why: on the AVX2 Zen 3 of bench/results MobileNetV2's depthwise layers
 * took 15% of its batch-1 run on oneDNN's jit_dw:avx2, at ~48 GFLOP/s a
 * core (its 1x1 layers run at ~88); dw_avx2.c's blocks of two output
 * rows read each input row from L2 half as often: one thread, 56x56x144
 * 172 -> 138 us, 28x28x192 57 -> 48, 14x14x384 29 -> 23, 112x112x32
 * 147 -> 109. On 7x7 images (five interior columns) it lost, 16.5 ->
 * 22 us: those stay on oneDNN. So do stride-2 layers run alone: the
 * loop takes stride 2 too, but alone it was level or behind (MobileNetV2
 * batch 1, block_1: 0.16-0.17 against 0.14-0.17 ms); it runs them in the
 * fused 1x1 + depthwise pairs of a batch (dnnl_conv.c, own_dw), strip by
 * strip out of L2.
 *
 * The sums are jit_dw:avx2's (the bias, then the taps row by row, left
 * to right, the padding's skipped): its outputs equal oneDNN's bit for
 * bit (test_dw_layers, test_dw_fused), so a layer's output does not
 * depend on which of the two ran it. */
#include "kernels/dw.h"

#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/mem.h"
#include "base/threads.h"
#include "kernels/conv_geom.h"
#include "kernels/dnnl_common.h"
#include "kernels/isa.h"
#include "kernels/wino_tx.h"
#include "ops/conv.h"

/* At least this many output columns: below, the image's two edge columns
 * (one pixel at a time) outweigh the blocks (7x7: 0.74x oneDNN's speed). */
#define KC_DW_MIN_WIDTH 12
/* The largest stride of a layer run alone (not fused after its 1x1). */
#ifndef KC_DW_MAX_STRIDE_ALONE
#define KC_DW_MAX_STRIDE_ALONE 1
#endif

typedef struct kc_dw_state {
    kc_kernel_state base;
    kc_shape in_shape;
    kc_dw_geom g;
    float *w;               /* kc_dw_weights' blocks */
    float *bias;            /* c floats, zeros for a layer without */
} kc_dw_state;

/* A run: the state, the layer's input and output, and how many parts
 * (threads) all the images' output rows are cut into, evenly. */
typedef struct kc_dw_job {
    const kc_dw_state *st;
    const float *in;
    float *out;
    int parts;
} kc_dw_job;

kc_status kc_dw_weights(const float *keras, const float *bias, int64_t c, float **packed,
                        float **bias_out)
{
    *packed = kc_calloc_aligned((size_t)(9 * c), sizeof **packed);
    *bias_out = kc_calloc_aligned((size_t)c, sizeof **bias_out);
    if (!*packed || !*bias_out)
        return KC_ERR_NOMEM;
    for (int64_t ch = 0; ch < c; ch++)
        for (int t = 0; t < 9; t++)
            (*packed)[ch / 8 * 72 + t * 8 + ch % 8] = keras[t * c + ch];
    if (bias)
        memcpy(*bias_out, bias, (size_t)c * sizeof *bias);
    return KC_OK;
}

int kc_dw_geometry(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out,
                   int max_stride, kc_dw_geom *g)
{
    if (a->kind != KC_CONV_DEPTHWISE || a->spatial != 2 || a->depth_multiplier != 1 ||
        a->padding == 2 || a->accumulate || a->post_dw || a->post_pw || a->pre_pool ||
        in->rank != 4 || out->rank != 4 || out->dims[3] != in->dims[3] ||
        out->dims[0] != in->dims[0] || in->dims[3] % 8 || in->dims[3] < 8)
        return 0;
    for (int i = 0; i < 2; i++)
        if (a->kernel[i] != 3 || a->strides[i] != a->strides[0] || a->strides[i] < 1 ||
            a->strides[i] > max_stride || a->strides[i] > 2 || a->dilation[i] != 1 ||
            a->pad_before[i] < 0 || a->pad_after[i] < 0)
            return 0;
    int64_t dims[2], pad[2], s = a->strides[0];
    kc_conv_window_2d(a, in, out, dims, pad);
    /* at most one pixel of padding on each side, as oneDNN's jit_dw:avx2
     * runs the layer (with a wider folded ZeroPadding it summed
     * otherwise); a stride may leave the last row and column unread */
    for (int i = 0; i < 2; i++) {
        int64_t after = (out->dims[1 + i] - 1) * s + 3 - dims[i] - pad[i];
        if (pad[i] > 1 || after < 1 - s || after > 1)
            return 0;
    }
    if (dims[0] < 1 || dims[1] < 1 || out->dims[2] < KC_DW_MIN_WIDTH || out->dims[1] < 1)
        return 0;
    *g = (kc_dw_geom){dims[0], dims[1], in->dims[3], out->dims[1], out->dims[2], pad[0], pad[1],
                      kc_wino_act(a->activation), s};
    return 1;
}

int kc_dw_enabled(void)
{
    /* where oneDNN has AVX-512 its own depthwise kernel stays (and the
     * sums would not be its) */
    return !kc_env_off("KC_DW") && kc_isa() == KC_ISA_AVX2 && !kc_dnnl_avx512();
}

static void kc_dw_free(kc_kernel_state *s)
{
    kc_dw_state *st = (kc_dw_state *)s;
    free(st->w);
    free(st->bias);
    free(st);
}

int kc_dw_owns(const kc_kernel_state *state) { return state && state->free == kc_dw_free; }

static kc_status kc_dw_build(const kc_exec_ctx *ctx, const kc_dw_geom *g, kc_dw_state **out)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    const float *w, *bias;
    KC_TRY(kc_kernel_and_bias(ctx, a->use_bias, &w, &bias));
    kc_dw_state *st = kc_calloc(1, sizeof *st);
    if (!st)
        return KC_ERR_NOMEM;
    st->base.free = kc_dw_free;
    st->in_shape = ctx->in_shape[0];
    st->g = *g;
    if (kc_dw_weights(w, bias, g->c, &st->w, &st->bias) != KC_OK) {
        kc_dw_free(&st->base);
        return KC_ERR_NOMEM;
    }
    *out = st;
    return KC_OK;
}

/* One image's run of output rows. */
static void kc_dw_image_rows(void *arg, int64_t img, int64_t y0, int64_t y1)
{
    const kc_dw_job *job = arg;
    const kc_dw_state *st = job->st;
    const kc_dw_geom *g = &st->g;
    int64_t in_image = g->in_h * g->in_w * g->c, out_image = g->out_h * g->out_w * g->c;
    kc_dw_rows_avx2(g, job->in + img * in_image, st->w, st->bias, job->out + img * out_image, y0,
                    y1);
}

/* Part k's rows, image by image. */
static void kc_dw_part(void *arg, int k)
{
    const kc_dw_job *job = arg;
    int64_t rows = job->st->in_shape.dims[0] * job->st->g.out_h;
    kc_for_image_rows(rows * k / job->parts, rows * (k + 1) / job->parts, job->st->g.out_h,
                      kc_dw_image_rows, (void *)job);
}

kc_status kc_dw_conv(const kc_exec_ctx *ctx, int *handled, int *act_done)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    *handled = 0;
    *act_done = 0;
    /* every other convolution passes here first: no state of this
     * kernel can be theirs, and nothing to look up */
    if (!ctx->state || a->kind != KC_CONV_DEPTHWISE)
        return KC_OK;
    kc_dw_state *st = (kc_dw_state *)*ctx->state;
    int mine = kc_dw_owns(*ctx->state);
    /* streamed weights arrive fresh each run; under the residency manager
     * (ctx->whole) its copy thread needs a core: oneDNN's then (the same
     * bits), and a state of this kernel goes, not to be read as oneDNN's */
    if (ctx->w_ext || ctx->whole || !kc_dw_enabled()) {
        if (mine)
            kc_kernel_state_drop(ctx);
        return KC_OK;
    }
    if (!mine || !kc_shape_equal(&st->in_shape, &ctx->in_shape[0])) {
        kc_dw_geom g;
        int takes = kc_dw_geometry(a, &ctx->in_shape[0], &ctx->out_shape[0],
                                   KC_DW_MAX_STRIDE_ALONE, &g);
        /* as kc_pw_conv: another kernel's state goes only where this one
         * takes the layer */
        if (st && (mine || takes))
            kc_kernel_state_drop(ctx);
        if (!takes)
            return KC_OK;
        KC_TRY(kc_dw_build(ctx, &g, &st));
        *ctx->state = &st->base;
    }
    kc_dw_job job = {st, ctx->in[0], ctx->out[0], kc_parallel_width()};
    int64_t rows = st->in_shape.dims[0] * st->g.out_h;
    if (job.parts > rows)
        job.parts = (int)rows;
    kc_parallel(job.parts, kc_dw_part, &job);
    *handled = 1;
    *act_done = st->g.act != 3;
    return KC_OK;
}
