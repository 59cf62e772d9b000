/* Convolutions with few output channels: a model's image-to-image head.
 *
 * Why: oneDNN 2.6 computes output channels in vectors of 16, so a layer
 * of one output channel does 16 times its work. A real denoising
 * autoencoder (shared/models/real/denoise_ae_upsample_k380.keras, 540 x
 * 540 images) ends in a 32 -> 1 3x3 convolution that took 8.9 of its 37
 * ms on oneDNN's brgconv on the 2-core Zen 5.
 *
 * How (narrow_simd.inc): each output value is a dot product of its
 * window with one output channel's taps. NHWC makes each window row
 * inside the image one contiguous run of kw * c floats, and the packed
 * kernel keeps each kernel row's taps in the same order, so a value is
 * a few runs of vector multiply-adds and one sum across the vector.
 * Blocks of pixels of a row x output channels share each load; the
 * threads take runs of output rows over the batch, cut where their
 * measured speeds even their times (kc_balance). */
#include "kernels/narrow.h"

#include <stdlib.h>
#include <string.h>

#include "base/balance.h"
#include "base/env.h"
#include "base/mem.h"
#include "base/threads.h"
#include "kernels/conv_geom.h"
#include "kernels/dnnl_common.h"
#include "kernels/isa.h"
#include "kernels/wino_tx.h"

/* With AVX2 at most this many output channels: its blocks of 3 or 4
 * channels hold one pixel (16 registers), and 16 -> 8 3x3 on 128 x 128
 * took 0.50 ms against oneDNN's AVX2 0.38 (the 2-core Zen 5 capped to
 * AVX2), where 64 -> 3 took 2.7 against 7.9 and 128 -> 4 0.30 against
 * 0.78. */
#define KC_NARROW_AVX2_FILTERS 4

typedef void (*kc_narrow_rows_fn)(const kc_narrow_geom *, const kc_narrow_kernel *,
                                  const float *, float *, int64_t, int64_t);

typedef struct kc_narrow_state {
    kc_kernel_state base;
    kc_shape in_shape;
    kc_narrow_geom g;
    kc_narrow_rows_fn rows;
    float *w, *bias;
    kc_balance cut; /* parts: runs of output rows over the batch */
    int width;      /* the threads the cut was made for */
} kc_narrow_state;

static void kc_narrow_free(kc_kernel_state *s)
{
    kc_narrow_state *st = (kc_narrow_state *)s;
    free(st->w);
    free(st->bias);
    free(st);
}

int kc_narrow_owns(const kc_kernel_state *state)
{
    return state && state->free == kc_narrow_free;
}

/* The geometry of layer a from input value shape `in` to `out` (NHWC),
 * into g; 0 when the layer does not qualify (narrow.h). */
static int kc_narrow_geometry(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out,
                              kc_narrow_geom *g)
{
    if (a->kind != KC_CONV_PLAIN || a->spatial != 2 || a->groups != 1 || a->padding == 2 ||
        a->accumulate || a->post_dw || a->post_pw || a->pre_pool || in->rank != 4 ||
        out->rank != 4 || out->dims[0] != in->dims[0] || in->dims[3] < 1 ||
        out->dims[3] < 1 || out->dims[3] > KC_NARROW_MAX_FILTERS)
        return 0;
    for (int i = 0; i < 2; i++)
        if (a->kernel[i] < 1 || a->strides[i] < 1 || a->dilation[i] != 1 ||
            a->pad_before[i] < 0 || a->pad_after[i] < 0)
            return 0;
    int64_t dims[2], pad[2];
    kc_conv_window_2d(a, in, out, dims, pad);
    if (dims[0] < 1 || dims[1] < 1 || out->dims[1] < 1 || out->dims[2] < 1)
        return 0;
    /* every output's window must overlap the image */
    for (int i = 0; i < 2; i++)
        if (pad[i] >= a->kernel[i] || (out->dims[1 + i] - 1) * a->strides[i] - pad[i] >= dims[i])
            return 0;
    *g = (kc_narrow_geom){.in_h = dims[0], .in_w = dims[1], .c = in->dims[3],
                          .out_h = out->dims[1], .out_w = out->dims[2], .f = out->dims[3],
                          .kh = a->kernel[0], .kw = a->kernel[1], .sy = a->strides[0],
                          .sx = a->strides[1], .pad_t = pad[0], .pad_l = pad[1],
                          .act = kc_wino_act(a->activation)};
    return 1;
}

/* Keras's (kh, kw, c, f) kernel as f channels of kh rows of kw * c taps,
 * the bias copied. */
static kc_status kc_narrow_pack(kc_narrow_state *st, const float *w, const float *bias)
{
    const kc_narrow_geom *g = &st->g;
    int64_t taps = g->kh * g->kw * g->c;
    if (!st->w)
        st->w = kc_calloc_aligned((size_t)(g->f * taps), sizeof *st->w);
    if (bias && !st->bias)
        st->bias = kc_calloc_aligned((size_t)g->f, sizeof *st->bias);
    if (!st->w || (bias && !st->bias))
        return KC_ERR_NOMEM;
    for (int64_t o = 0; o < g->f; o++)
        for (int64_t t = 0; t < taps; t++)
            st->w[o * taps + t] = w[t * g->f + o];
    if (bias)
        memcpy(st->bias, bias, (size_t)g->f * sizeof *bias);
    return KC_OK;
}

static kc_status kc_narrow_build(const kc_exec_ctx *ctx, const kc_narrow_geom *g,
                                 kc_isa_level isa, kc_narrow_state **out)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    const float *w, *bias;
    KC_TRY(kc_kernel_and_bias(ctx, a->use_bias, &w, &bias));
    kc_narrow_state *st = kc_calloc(1, sizeof *st);
    if (!st)
        return KC_ERR_NOMEM;
    st->base.free = kc_narrow_free;
    st->in_shape = ctx->in_shape[0];
    st->g = *g;
    st->rows = isa == KC_ISA_AVX512 ? kc_narrow_rows_avx512 : kc_narrow_rows_avx2;
    st->width = 0; /* the cut is made at the first run */
    if (kc_narrow_pack(st, w, bias) != KC_OK) {
        kc_narrow_free(&st->base);
        return KC_ERR_NOMEM;
    }
    /* the packed kernel (and bias copy) are what runs read, unless the
     * weights are streamed (ctx->w_ext): then packed again every run */
    st->base.weights_cached = !ctx->w_ext;
    *out = st;
    return KC_OK;
}

typedef struct kc_narrow_job {
    const kc_narrow_state *st;
    const float *in;
    float *out;
} kc_narrow_job;

/* One image's run of output rows. */
static void kc_narrow_image_rows(void *arg, int64_t img, int64_t y0, int64_t y1)
{
    const kc_narrow_job *job = arg;
    const kc_narrow_state *st = job->st;
    const kc_narrow_geom *g = &st->g;
    kc_narrow_kernel kernel = {st->w, st->bias};
    int64_t in_image = g->in_h * g->in_w * g->c, out_image = g->out_h * g->out_w * g->f;
    st->rows(g, &kernel, job->in + img * in_image, job->out + img * out_image, y0, y1);
}

/* Whether this loop may take layers here: with AVX2 or AVX-512 (with
 * AVX2 only up to KC_NARROW_AVX2_FILTERS output channels), unless
 * KC_NARROW=0. */
static int kc_narrow_wanted(kc_isa_level isa)
{
    return isa != KC_ISA_NONE && !kc_env_off("KC_NARROW");
}

kc_status kc_narrow_conv(const kc_exec_ctx *ctx, int *handled, int *act_done)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    *handled = 0;
    *act_done = 0;
    if (!ctx->state || a->kind != KC_CONV_PLAIN)
        return KC_OK;
    kc_narrow_state *st = (kc_narrow_state *)*ctx->state;
    int mine = kc_narrow_owns(*ctx->state);
    kc_isa_level isa = kc_isa(); /* KC_ISA may cap it below the CPU's */
    /* KC_DNNL=0 (kc_dnnl_ready) keeps the plain path, the tests'
     * reference. Streamed weights (ctx->w_ext) and the residency
     * manager's whole layers (ctx->whole) run here too, so that a layer
     * has the same bits on the host loop and through the scheduler (a
     * pipeline stage's output is compared bit for bit with a local run) */
    if (!kc_narrow_wanted(isa) || !kc_dnnl_ready()) {
        if (mine)
            kc_kernel_state_drop(ctx);
        return KC_OK;
    }
    if (!mine || !kc_shape_equal(&st->in_shape, &ctx->in_shape[0])) {
        kc_narrow_geom g;
        int takes = kc_narrow_geometry(a, &ctx->in_shape[0], &ctx->out_shape[0], &g) &&
                    (isa == KC_ISA_AVX512 || g.f <= KC_NARROW_AVX2_FILTERS);
        /* as kc_pw_conv: another kernel's state goes only where this one
         * takes the layer */
        if (st && (mine || takes))
            kc_kernel_state_drop(ctx);
        if (!takes)
            return KC_OK;
        st = NULL;
        KC_TRY(kc_narrow_build(ctx, &g, isa, &st));
        *ctx->state = &st->base;
    }
    if (ctx->w_ext) {
        const float *w, *bias;
        KC_TRY(kc_kernel_and_bias(ctx, a->use_bias, &w, &bias));
        KC_TRY(kc_narrow_pack(st, w, bias));
    }
    /* 1 in a lane of a batch; under the residency manager one part, on
     * this thread, leaving the copy thread a core */
    int width = ctx->whole ? 1 : kc_parallel_width();
    kc_narrow_job job = {st, ctx->in[0], ctx->out[0]};
    kc_balanced_image_rows(&st->cut, &st->width, width, st->in_shape.dims[0], st->g.out_h,
                           kc_narrow_image_rows, &job);
    *handled = 1;
    *act_done = st->g.act != 3;
    return KC_OK;
}
