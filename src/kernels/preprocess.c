/* In-model preprocessing: Rescaling, Normalization, Resizing, CenterCrop;
 * and keras.applications' LayerScale and CustomScaleLayer. */
#include <math.h>
#include <string.h>

#include "base/threads.h"
#include "kernels/kernel.h"
#include "ops/preprocess.h"

/* v[i] for a parameter broadcast against x: scalar or per last axis. */
static kc_status kc_param_mode(int64_t count, int64_t channels, const char *what)
{
    if (count == 1 || count == channels)
        return KC_OK;
    return kc_fail(KC_ERR_UNSUPPORTED, "%s with %lld values for %lld channels", what,
                   (long long)count, (long long)channels);
}

/* A per-channel (last axis) affine map over rows of `c` values, cut
 * over the threads by rows: Rescaling, LayerScale, and Normalization
 * with statistics per channel or one for all. Each value's arithmetic
 * is the layer's own, in the same order, on any cut. */
typedef enum { KC_ROWS_RESCALE, KC_ROWS_SCALE, KC_ROWS_NORMALIZE } kc_rows_kind;

typedef struct kc_rows_job {
    kc_rows_kind kind;
    const float *x;
    float *y;
    int64_t c;
    const float *p0, *p1; /* scale and offset; gamma; mean and variance */
    int64_t n0, n1;       /* their counts: 1 (shared) or c */
    int invert;           /* Normalization(invert=True) */
} kc_rows_job;

/* Rows of at most this many values run as one flat loop (kc_rows_short). */
#define KC_ROWS_SHORT 32
#define KC_ROWS_PERIOD (16 * KC_ROWS_SHORT)

/* Rows [lo, hi) of c <= KC_ROWS_SHORT values (an RGB image's 3 channels)
 * as one flat run, each value against tables of its parameters repeated
 * over 16 rows: a loop per row of 3 ran the switch, a square root and a
 * division per value (EfficientNetB0's Rescaling and Normalization took
 * 0.3 ms of a 5.3 ms run). The same operations on the same operands, so
 * the same bits. */
static void kc_rows_short(const kc_rows_job *j, int64_t lo, int64_t hi)
{
    float a[KC_ROWS_PERIOD], b[KC_ROWS_PERIOD];
    int64_t c = j->c, period = 16 * c, s0 = j->n0 == 1 ? 0 : 1, s1 = j->n1 == 1 ? 0 : 1;
    for (int64_t i = 0; i < period; i++) {
        int64_t ch = i % c;
        a[i] = j->p0[ch * s0];
        if (j->kind == KC_ROWS_RESCALE)
            b[i] = j->p1[ch * s1];
        else if (j->kind == KC_ROWS_NORMALIZE)
            b[i] = fmaxf(sqrtf(j->p1[ch * s1]), 1e-7f);
    }
    const float *x = j->x + lo * c;
    float *y = j->y + lo * c;
    for (int64_t left = (hi - lo) * c; left > 0; left -= period, x += period, y += period) {
        int64_t n = left < period ? left : period;
        switch (j->kind) {
        case KC_ROWS_SCALE:
            for (int64_t i = 0; i < n; i++)
                y[i] = x[i] * a[i];
            break;
        case KC_ROWS_RESCALE:
            for (int64_t i = 0; i < n; i++)
                y[i] = x[i] * a[i] + b[i];
            break;
        case KC_ROWS_NORMALIZE:
            if (j->invert)
                for (int64_t i = 0; i < n; i++)
                    y[i] = x[i] * b[i] + a[i];
            else
                for (int64_t i = 0; i < n; i++)
                    y[i] = (x[i] - a[i]) / b[i];
            break;
        }
    }
}

/* The kind's loop over rows [lo, hi), the parameters' strides (0: one
 * value for all) chosen once, not per value. */
static void kc_rows_range(void *arg, int64_t lo, int64_t hi)
{
    const kc_rows_job *j = arg;
    if (j->c <= KC_ROWS_SHORT) {
        kc_rows_short(j, lo, hi);
        return;
    }
    int64_t c = j->c, s0 = j->n0 == 1 ? 0 : 1, s1 = j->n1 == 1 ? 0 : 1;
    const float *p0 = j->p0, *p1 = j->p1;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = j->x + r * c;
        float *y = j->y + r * c;
        switch (j->kind) {
        case KC_ROWS_SCALE:
            for (int64_t i = 0; i < c; i++)
                y[i] = x[i] * p0[i * s0];
            break;
        case KC_ROWS_RESCALE:
            for (int64_t i = 0; i < c; i++)
                y[i] = x[i] * p0[i * s0] + p1[i * s1];
            break;
        case KC_ROWS_NORMALIZE:
            for (int64_t i = 0; i < c; i++) {
                float sd = fmaxf(sqrtf(p1[i * s1]), 1e-7f);
                y[i] = j->invert ? x[i] * sd + p0[i * s0] : (x[i] - p0[i * s0]) / sd;
            }
            break;
        }
    }
}

static void kc_rows_run(const kc_exec_ctx *ctx, kc_rows_job *j)
{
    const kc_shape *s = &ctx->in_shape[0];
    int64_t n = kc_count(s);
    j->x = ctx->in[0];
    j->y = ctx->out[0];
    j->c = s->rank ? s->dims[s->rank - 1] : 1;
    if (j->c < 1)
        return;
    kc_parallel_for(n / j->c, 2 * n * (int64_t)sizeof(float), 1, kc_rows_range, j);
}

static kc_status kc_rescaling(const kc_exec_ctx *ctx)
{
    const kc_rescaling_attrs *a = ctx->layer->attrs;
    const kc_shape *s = &ctx->in_shape[0];
    int64_t c = s->dims[s->rank - 1];
    KC_TRY(kc_param_mode(a->n_scale, c, "Rescaling scale"));
    KC_TRY(kc_param_mode(a->n_offset, c, "Rescaling offset"));
    kc_rows_job j = {.kind = KC_ROWS_RESCALE, .p0 = a->scale, .p1 = a->offset,
                     .n0 = a->n_scale, .n1 = a->n_offset};
    kc_rows_run(ctx, &j);
    return KC_OK;
}

/* Index of element i's mean/variance: its coordinates on the kept axes. */
static int64_t kc_norm_param_index(const kc_normalization_attrs *a, const kc_shape *s, int64_t i)
{
    int64_t coord[KC_MAX_RANK];
    for (int d = s->rank - 1; d >= 0; d--) {
        coord[d] = i % s->dims[d];
        i /= s->dims[d];
    }
    int64_t idx = 0;
    for (int k = 0; k < a->n_keep; k++)
        idx = idx * s->dims[a->keep[k]] + coord[a->keep[k]];
    return idx;
}

static kc_status kc_normalization(const kc_exec_ctx *ctx)
{
    const kc_normalization_attrs *a = ctx->layer->attrs;
    const kc_shape *s = &ctx->in_shape[0];
    const float *mean = a->has_constants ? a->mean : kc_w(ctx, 0);
    const float *var = a->has_constants ? a->variance : kc_w(ctx, 1);
    int64_t n_params = 1;
    for (int k = 0; k < a->n_keep; k++)
        n_params *= s->dims[a->keep[k]];
    int64_t n_mean = a->has_constants ? kc_shape_count(&a->mean_shape) : n_params;
    int64_t n_var = a->has_constants ? kc_shape_count(&a->variance_shape) : n_params;
    int per_channel = n_params == 1 || (a->n_keep == 1 && a->keep[0] == s->rank - 1);
    if (per_channel && s->rank >= 1) { /* the usual case: by rows */
        kc_rows_job j = {.kind = KC_ROWS_NORMALIZE, .p0 = mean, .p1 = var,
                         .n0 = n_mean == 1 ? 1 : n_params, .n1 = n_var == 1 ? 1 : n_params,
                         .invert = a->invert};
        kc_rows_run(ctx, &j);
        return KC_OK;
    }
    int64_t n = kc_count(s);
    for (int64_t i = 0; i < n; i++) {
        int64_t p = n_params > 1 ? kc_norm_param_index(a, s, i) : 0;
        float m = mean[n_mean == 1 ? 0 : p], v = var[n_var == 1 ? 0 : p];
        float sd = fmaxf(sqrtf(v), 1e-7f);
        ctx->out[0][i] = a->invert ? ctx->in[0][i] * sd + m : (ctx->in[0][i] - m) / sd;
    }
    return KC_OK;
}

/* Resize one (h, w, c) image region [y0, y0+hh) x [x0, x0+ww) to (oh, ow). */
/* A resize of the window (y0, x0, hh x ww) of each ih x iw input image
 * to oh x ow, by output rows over the threads. */
typedef struct kc_resize_job {
    const float *in;
    float *out;
    int64_t ih, iw, c, y0, x0, hh, ww, oh, ow;
    int nearest;
} kc_resize_job;

/* Output rows [lo, hi) over (image, row). */
static void kc_resize_rows(void *arg, int64_t lo, int64_t hi)
{
    const kc_resize_job *j = arg;
    int64_t c = j->c, hh = j->hh, ww = j->ww, oh = j->oh, ow = j->ow;
    for (int64_t r = lo; r < hi; r++) {
        int64_t b = r / oh, y = r % oh;
        const float *in = j->in + b * j->ih * j->iw * c;
        float *row = j->out + r * ow * c;
        float sy = ((float)y + 0.5f) * (float)hh / (float)oh - 0.5f;
        int64_t ny = (int64_t)floorf(((float)y + 0.5f) * (float)hh / (float)oh);
        ny = ny < hh ? ny : hh - 1;
        sy = sy < 0 ? 0 : sy;
        int64_t ya = (int64_t)sy;
        ya = ya < hh - 1 ? ya : hh - 1;
        int64_t yb = ya + 1 < hh ? ya + 1 : hh - 1;
        float ty = sy - (float)ya;
        for (int64_t x = 0; x < ow; x++) {
            float *o = row + x * c;
            if (j->nearest) {
                int64_t nx = (int64_t)floorf(((float)x + 0.5f) * (float)ww / (float)ow);
                nx = nx < ww ? nx : ww - 1;
                memcpy(o, in + ((j->y0 + ny) * j->iw + j->x0 + nx) * c, (size_t)c * sizeof *o);
                continue;
            }
            float sx = ((float)x + 0.5f) * (float)ww / (float)ow - 0.5f;
            sx = sx < 0 ? 0 : sx;
            int64_t xa = (int64_t)sx;
            xa = xa < ww - 1 ? xa : ww - 1;
            int64_t xb = xa + 1 < ww ? xa + 1 : ww - 1;
            float tx = sx - (float)xa;
            const float *p00 = in + ((j->y0 + ya) * j->iw + j->x0 + xa) * c;
            const float *p01 = in + ((j->y0 + ya) * j->iw + j->x0 + xb) * c;
            const float *p10 = in + ((j->y0 + yb) * j->iw + j->x0 + xa) * c;
            const float *p11 = in + ((j->y0 + yb) * j->iw + j->x0 + xb) * c;
            for (int64_t k = 0; k < c; k++) {
                float top = p00[k] + (p01[k] - p00[k]) * tx;
                float bot = p10[k] + (p11[k] - p10[k]) * tx;
                o[k] = top + (bot - top) * ty;
            }
        }
    }
}

static kc_status kc_resize_batch(const kc_exec_ctx *ctx, int nearest, int crop_aspect)
{
    const kc_shape *is = &ctx->in_shape[0], *os = &ctx->out_shape[0];
    int batched = is->rank == 4;
    int64_t n = batched ? is->dims[0] : 1;
    int64_t ih = is->dims[batched], iw = is->dims[batched + 1], c = is->dims[is->rank - 1];
    int64_t oh = os->dims[batched], ow = os->dims[batched + 1];
    int64_t y0 = 0, x0 = 0, hh = ih, ww = iw;
    if (crop_aspect) {
        /* The largest centred window with the target's aspect ratio. */
        double target = (double)ow / (double)oh;
        if ((double)iw / (double)ih > target)
            ww = (int64_t)((double)ih * target);
        else
            hh = (int64_t)((double)iw / target);
        hh = hh < 1 ? 1 : hh;
        ww = ww < 1 ? 1 : ww;
        y0 = (ih - hh) / 2;
        x0 = (iw - ww) / 2;
    }
    int64_t count = n * oh * ow * c;
    if (hh == oh && ww == ow && hh == ih && ww == iw) {
        /* already the target size: TensorFlow's resize returns the images
         * as they are (a real model resized 256 x 256 images to 256 x 256:
         * 0.65 ms an image) */
        memcpy(ctx->out[0], ctx->in[0], (size_t)count * sizeof(float));
        return KC_OK;
    }
    kc_resize_job j = {ctx->in[0], ctx->out[0], ih, iw, c, y0, x0, hh, ww, oh, ow, nearest};
    kc_parallel_for(n * oh, count * (int64_t)sizeof(float), 1, kc_resize_rows, &j);
    return KC_OK;
}

static kc_status kc_resizing(const kc_exec_ctx *ctx)
{
    const kc_resizing_attrs *a = ctx->layer->attrs;
    if (a->interpolation != KC_INTERP_BILINEAR && a->interpolation != KC_INTERP_NEAREST)
        return kc_fail(KC_ERR_UNSUPPORTED, "Resizing interpolation other than bilinear/nearest");
    if (a->pad_to_aspect_ratio)
        return kc_fail(KC_ERR_UNSUPPORTED, "Resizing pad_to_aspect_ratio");
    return kc_resize_batch(ctx, a->interpolation == KC_INTERP_NEAREST, a->crop_to_aspect_ratio);
}

static kc_status kc_center_crop(const kc_exec_ctx *ctx)
{
    const kc_shape *is = &ctx->in_shape[0], *os = &ctx->out_shape[0];
    int batched = is->rank == 4;
    int64_t n = batched ? is->dims[0] : 1;
    int64_t ih = is->dims[batched], iw = is->dims[batched + 1], c = is->dims[is->rank - 1];
    int64_t oh = os->dims[batched], ow = os->dims[batched + 1];
    if (ih < oh || iw < ow) /* Keras resizes (keeping the aspect) when too small */
        return kc_resize_batch(ctx, 0, 1);
    int64_t y0 = (ih - oh) / 2, x0 = (iw - ow) / 2;
    for (int64_t b = 0; b < n; b++)
        for (int64_t y = 0; y < oh; y++)
            memcpy(ctx->out[0] + ((b * oh + y) * ow) * c,
                   ctx->in[0] + ((b * ih + y0 + y) * iw + x0) * c, (size_t)(ow * c) * sizeof(float));
    return KC_OK;
}

static kc_status kc_layer_scale(const kc_exec_ctx *ctx)
{
    const kc_shape *s = &ctx->in_shape[0];
    kc_rows_job j = {.kind = KC_ROWS_SCALE, .p0 = kc_w(ctx, 0), .n0 = s->dims[s->rank - 1]};
    kc_rows_run(ctx, &j);
    return KC_OK;
}

static kc_status kc_custom_scale(const kc_exec_ctx *ctx)
{
    const kc_custom_scale_attrs *a = ctx->layer->attrs;
    int64_t n = kc_count(&ctx->out_shape[0]);
    if (ctx->n_in != 2 || kc_count(&ctx->in_shape[1]) != n)
        return kc_fail(KC_ERR_SHAPE, "CustomScaleLayer needs two inputs of one shape");
    for (int64_t i = 0; i < n; i++)
        ctx->out[0][i] = ctx->in[0][i] + ctx->in[1][i] * (float)a->scale;
    return KC_OK;
}

const kc_kernel_entry kc_kernels_preprocess[] = {
    {"Rescaling", 0, kc_rescaling},      {"Normalization", 0, kc_normalization},
    {"Resizing", 0, kc_resizing},        {"CenterCrop", 0, kc_center_crop},
    {"RandomCrop", 0, kc_resizing},
    {"LayerScale", 0, kc_layer_scale},   {"CustomScaleLayer", 0, kc_custom_scale},
    {NULL, 0, NULL},
};
