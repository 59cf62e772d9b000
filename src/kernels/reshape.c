/* Reshaping kernels: padding, cropping, upsampling, flatten/reshape (a
 * copy: NHWC row-major order is what Keras's channels_last Flatten uses),
 * permute, repeat. */
#include <math.h>
#include <string.h>

#include "base/threads.h"
#include "kernels/kernel.h"
#include "ops/reshape.h"

static kc_status kc_copy(const kc_exec_ctx *ctx)
{
    memcpy(ctx->out[0], ctx->in[0], (size_t)kc_count(&ctx->out_shape[0]) * sizeof(float));
    return KC_OK;
}

/* Padding and cropping: out index = in index + shift on each spatial
 * axis (shift = +before for padding, -before for cropping). Each output
 * row (all axes but the first two fixed) is written once, its zeros and
 * its copy together, the last spatial axis and the channels as one
 * contiguous run: ResNet50's pool1_pad at batch 8 (25.7 MB) took 4.5 ms
 * as a memset of the whole output followed by one memcpy per pixel. */
typedef struct kc_pad_job {
    const kc_shape *is, *os;
    const float *in;
    float *out;
    int64_t shift[KC_MAX_RANK];
    int64_t in_stride[KC_MAX_RANK], out_stride[KC_MAX_RANK]; /* floats per step */
    int64_t rows, per_part;                                    /* axes 0 and 1 flattened */
} kc_pad_job;

static void kc_pad_fill(const kc_pad_job *j, const float *in, float *out, int axis);

/* Output index o of `axis` (earlier axes fixed: in and out point at their
 * blocks): zeros where no input lands, else the input's block at
 * o - shift, filled axis by axis. */
static void kc_pad_slice(const kc_pad_job *j, const float *in, float *out, int axis, int64_t o)
{
    int64_t i = o - j->shift[axis];
    float *dst = out + o * j->out_stride[axis];
    if (i < 0 || i >= j->is->dims[axis])
        memset(dst, 0, (size_t)j->out_stride[axis] * sizeof *dst);
    else
        kc_pad_fill(j, in + i * j->in_stride[axis], dst, axis + 1);
}

/* Fill out's block at `axis` (axis >= 2, all earlier axes fixed). */
static void kc_pad_fill(const kc_pad_job *j, const float *in, float *out, int axis)
{
    const kc_shape *is = j->is, *os = j->os;
    int64_t olen = os->dims[axis];
    if (axis == is->rank - 1 || axis == is->rank - 2) { /* a contiguous run */
        int64_t sh = j->shift[axis], step = j->out_stride[axis];
        int64_t lo = sh > 0 ? sh : 0, hi = is->dims[axis] + sh; /* out [lo, hi) */
        if (lo > olen)
            lo = olen;
        if (hi > olen)
            hi = olen;
        if (hi < lo)
            hi = lo;
        memset(out, 0, (size_t)(lo * step) * sizeof *out);
        if (hi > lo)
            memcpy(out + lo * step, in + (lo - sh) * step, (size_t)((hi - lo) * step) * sizeof *out);
        memset(out + hi * step, 0, (size_t)((olen - hi) * step) * sizeof *out);
        return;
    }
    for (int64_t o = 0; o < olen; o++)
        kc_pad_slice(j, in, out, axis, o);
}

/* Output rows [k * per_part, (k + 1) * per_part) of axes 0 and 1. */
static void kc_pad_part(void *arg, int k)
{
    const kc_pad_job *j = arg;
    int64_t d1 = j->os->dims[1], end = (k + 1) * j->per_part;
    for (int64_t r = k * j->per_part; r < end && r < j->rows; r++) {
        int64_t n = r / d1;
        kc_pad_slice(j, j->in + n * j->in_stride[0], j->out + n * j->out_stride[0], 1, r % d1);
    }
}

static kc_status kc_pad_or_crop(const kc_exec_ctx *ctx, int crop)
{
    const kc_pad_attrs *a = ctx->layer->attrs;
    kc_pad_job j = {.is = &ctx->in_shape[0], .os = &ctx->out_shape[0], .in = ctx->in[0],
                    .out = ctx->out[0]};
    int rank = j.is->rank;
    if (rank < 3)
        return kc_fail(KC_ERR_SHAPE, "padding or cropping needs a spatial axis");
    for (int i = 0; i < a->spatial && 1 + i < rank - 1; i++)
        j.shift[1 + i] = crop ? -a->before[i] : a->before[i];
    j.in_stride[rank - 1] = j.out_stride[rank - 1] = 1;
    for (int i = rank - 2; i >= 0; i--) {
        j.in_stride[i] = j.in_stride[i + 1] * j.is->dims[i + 1];
        j.out_stride[i] = j.out_stride[i + 1] * j.os->dims[i + 1];
    }
    j.rows = j.os->dims[0] * j.os->dims[1];
    /* each part a run of whole output rows */
    int parts = kc_parallel_parts(kc_count(j.os) * (int64_t)sizeof(float), j.rows);
    j.per_part = (j.rows + parts - 1) / parts;
    kc_parallel(parts, kc_pad_part, &j);
    return KC_OK;
}

static kc_status kc_zeropad(const kc_exec_ctx *ctx) { return kc_pad_or_crop(ctx, 0); }
static kc_status kc_crop(const kc_exec_ctx *ctx) { return kc_pad_or_crop(ctx, 1); }

/* Bilinear source coordinate with half-pixel centers (tf.image.resize and
 * Keras 3 ops.image.resize), clamped to the edge. */
static void kc_bilinear_src(int64_t o, int64_t in, int64_t out, int64_t *i0, int64_t *i1,
                            float *t)
{
    float x = ((float)o + 0.5f) * (float)in / (float)out - 0.5f;
    if (x < 0)
        x = 0;
    int64_t lo = (int64_t)floorf(x);
    if (lo > in - 1)
        lo = in - 1;
    *i0 = lo;
    *i1 = lo + 1 < in ? lo + 1 : in - 1;
    *t = x - (float)lo;
}

/* UpSampling by output rows (every axis but the last spatial one and the
 * channels fixed), cut over the threads. A real 540 x 540 denoising
 * autoencoder's two UpSampling2D layers took 4.4 of its 37 ms as one
 * memcpy per output pixel on one thread. */
typedef struct kc_upsample_job {
    const float *in;
    float *out;
    int64_t c;
    int64_t in_d[3], size[3], out_d[3]; /* spatial axes, 1 where absent */
} kc_upsample_job;

/* Bilinear rows [lo, hi) over (image, output row). */
static void kc_upsample_bilinear_rows(void *arg, int64_t lo, int64_t hi)
{
    const kc_upsample_job *j = arg;
    int64_t c = j->c, ih = j->in_d[1], iw = j->in_d[2], oh = j->out_d[1], ow = j->out_d[2];
    for (int64_t r = lo; r < hi; r++) {
        int64_t b = r / oh, y = r % oh, y0, y1;
        float ty;
        kc_bilinear_src(y, ih, oh, &y0, &y1, &ty);
        const float *base = j->in + b * ih * iw * c;
        for (int64_t x = 0; x < ow; x++) {
            int64_t x0, x1;
            float tx;
            kc_bilinear_src(x, iw, ow, &x0, &x1, &tx);
            const float *p00 = base + (y0 * iw + x0) * c, *p01 = base + (y0 * iw + x1) * c;
            const float *p10 = base + (y1 * iw + x0) * c, *p11 = base + (y1 * iw + x1) * c;
            float *o = j->out + (r * ow + x) * c;
            for (int64_t k = 0; k < c; k++) {
                float top = p00[k] + (p01[k] - p00[k]) * tx;
                float bot = p10[k] + (p11[k] - p10[k]) * tx;
                o[k] = top + (bot - top) * ty;
            }
        }
    }
}

/* Nearest rows [lo, hi) over (image, depth, row): out[i] = in[i / size]
 * on each spatial axis. A row repeating one already written in the range
 * (the same input row: the row before, or the same row of the depth
 * plane before) is one copy of it. */
static void kc_upsample_nearest_rows(void *arg, int64_t lo, int64_t hi)
{
    const kc_upsample_job *j = arg;
    int64_t c = j->c, row_floats = j->out_d[2] * c;
    for (int64_t r = lo; r < hi; r++) {
        int64_t y = r % j->out_d[1], z = r / j->out_d[1] % j->out_d[0];
        int64_t b = r / (j->out_d[1] * j->out_d[0]);
        float *o = j->out + r * row_floats;
        int64_t same = y % j->size[1] ? r - 1 : z % j->size[0] ? r - j->out_d[1] : -1;
        if (same >= lo) {
            memcpy(o, j->out + same * row_floats, (size_t)row_floats * sizeof *o);
            continue;
        }
        const float *src =
            j->in + ((b * j->in_d[0] + z / j->size[0]) * j->in_d[1] + y / j->size[1]) *
                        j->in_d[2] * c;
        for (int64_t x = 0; x < j->in_d[2]; x++, src += c)
            for (int64_t s = 0; s < j->size[2]; s++, o += c) {
                if (c == 1)
                    *o = *src;
                else
                    memcpy(o, src, (size_t)c * sizeof *o);
            }
    }
}

static kc_status kc_upsample(const kc_exec_ctx *ctx)
{
    const kc_upsample_attrs *a = ctx->layer->attrs;
    const kc_shape *is = &ctx->in_shape[0];
    kc_upsample_job j = {.in = ctx->in[0], .out = ctx->out[0], .c = is->dims[is->rank - 1],
                         .in_d = {1, 1, 1}, .size = {1, 1, 1}};
    for (int i = 0; i < a->spatial; i++) {
        j.in_d[3 - a->spatial + i] = is->dims[1 + i];
        j.size[3 - a->spatial + i] = a->size[i];
    }
    for (int i = 0; i < 3; i++)
        j.out_d[i] = j.in_d[i] * j.size[i];
    int bilinear = a->spatial == 2 && strcmp(a->interpolation, "bilinear") == 0;
    kc_parallel_for(is->dims[0] * j.out_d[0] * j.out_d[1],
                    kc_count(&ctx->out_shape[0]) * (int64_t)sizeof(float), 1,
                    bilinear ? kc_upsample_bilinear_rows : kc_upsample_nearest_rows, &j);
    return KC_OK;
}

static kc_status kc_permute(const kc_exec_ctx *ctx)
{
    const kc_reshape_attrs *a = ctx->layer->attrs;
    const kc_shape *is = &ctx->in_shape[0], *os = &ctx->out_shape[0];
    int rank = is->rank;
    int64_t in_stride[KC_MAX_RANK], idx[KC_MAX_RANK] = {0};
    in_stride[rank - 1] = 1;
    for (int i = rank - 2; i >= 0; i--)
        in_stride[i] = in_stride[i + 1] * is->dims[i + 1];
    /* out axis i (i >= 1) reads in axis perm[i - 1]. */
    int64_t stride_for_out[KC_MAX_RANK];
    stride_for_out[0] = in_stride[0];
    for (int i = 1; i < rank; i++)
        stride_for_out[i] = in_stride[a->perm[i - 1]];
    int64_t total = kc_count(os);
    for (int64_t o = 0; o < total; o++) {
        int64_t src = 0;
        for (int i = 0; i < rank; i++)
            src += idx[i] * stride_for_out[i];
        ctx->out[0][o] = ctx->in[0][src];
        for (int i = rank - 1; i >= 0; i--) {
            if (++idx[i] < os->dims[i])
                break;
            idx[i] = 0;
        }
    }
    return KC_OK;
}

static kc_status kc_repeat(const kc_exec_ctx *ctx)
{
    const kc_shape *is = &ctx->in_shape[0], *os = &ctx->out_shape[0];
    int64_t n = is->dims[0], f = is->dims[1], times = os->dims[1];
    for (int64_t b = 0; b < n; b++)
        for (int64_t t = 0; t < times; t++)
            memcpy(ctx->out[0] + (b * times + t) * f, ctx->in[0] + b * f, (size_t)f * sizeof(float));
    return KC_OK;
}

const kc_kernel_entry kc_kernels_reshape[] = {
    {"ZeroPadding1D", 0, kc_zeropad}, {"ZeroPadding2D", 0, kc_zeropad},
    {"ZeroPadding3D", 0, kc_zeropad}, {"Cropping1D", 0, kc_crop},
    {"Cropping2D", 0, kc_crop},       {"Cropping3D", 0, kc_crop},
    {"UpSampling1D", 0, kc_upsample}, {"UpSampling2D", 0, kc_upsample},
    {"UpSampling3D", 0, kc_upsample}, {"Flatten", 0, kc_copy},
    {"Reshape", 0, kc_copy},          {"Permute", 0, kc_permute},
    {"RepeatVector", 0, kc_repeat},   {NULL, 0, NULL},
};
