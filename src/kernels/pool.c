/* Pooling on NHWC: windowed max/average (average over the real cells of
 * a "same"-padded window, as TensorFlow and Keras do) and global pooling.
 * 1-D and 3-D use the same loops with unit spatial axes. */
#include <float.h>
#include <string.h>

#include "base/threads.h"
#include "kernels/dnnl_pool.h"
#include "kernels/isa.h"
#include "kernels/kernel.h"
#include "ops/pool.h"

void kc_gpool_cells_avx512(const float *p, int64_t cells, int64_t stride, int64_t len, int max,
                           float *o);
void kc_gpool_cells_avx2(const float *p, int64_t cells, int64_t stride, int64_t len, int max,
                         float *o);

static void kc_pool_dims(const kc_shape *s, int spatial, int64_t d[3])
{
    for (int i = 0; i < 3; i++) {
        int axis = i - (3 - spatial);
        d[i] = axis >= 0 ? s->dims[1 + axis] : 1;
    }
}

static kc_status kc_pool_window(const kc_exec_ctx *ctx, const kc_pool_attrs *a)
{
    const kc_shape *is = &ctx->in_shape[0], *os = &ctx->out_shape[0];
    int64_t in[3], out[3], k[3], st[3], pad[3];
    kc_pool_dims(is, a->spatial, in);
    kc_pool_dims(os, a->spatial, out);
    int64_t n = is->dims[0], c = is->dims[is->rank - 1];
    for (int i = 0; i < 3; i++) {
        int axis = i - (3 - a->spatial);
        k[i] = axis >= 0 ? a->pool[axis] : 1;
        st[i] = axis >= 0 ? a->strides[axis] : 1;
        if (axis >= 0) /* a folded ZeroPadding: the data is smaller than the value */
            in[i] -= a->pad_before[axis] + a->pad_after[axis];
        pad[i] = kc_conv_pad_before(in[i], out[i], k[i], st[i], a->padding ? 1 : 0) +
                 (axis >= 0 ? a->pad_before[axis] : 0);
    }
    for (int64_t b = 0; b < n; b++)
        for (int64_t oz = 0; oz < out[0]; oz++)
            for (int64_t oy = 0; oy < out[1]; oy++)
                for (int64_t ox = 0; ox < out[2]; ox++) {
                    float *o = ctx->out[0] + (((b * out[0] + oz) * out[1] + oy) * out[2] + ox) * c;
                    for (int64_t j = 0; j < c; j++)
                        o[j] = a->kind == KC_POOL_MAX ? -FLT_MAX : 0.0f;
                    int64_t cells = 0;
                    for (int64_t kz = 0; kz < k[0]; kz++)
                        for (int64_t ky = 0; ky < k[1]; ky++)
                            for (int64_t kx = 0; kx < k[2]; kx++) {
                                int64_t iz = oz * st[0] + kz - pad[0];
                                int64_t iy = oy * st[1] + ky - pad[1];
                                int64_t ix = ox * st[2] + kx - pad[2];
                                if (iz < 0 || iz >= in[0] || iy < 0 || iy >= in[1] || ix < 0 ||
                                    ix >= in[2])
                                    continue;
                                const float *p =
                                    ctx->in[0] + (((b * in[0] + iz) * in[1] + iy) * in[2] + ix) * c;
                                cells++;
                                if (a->kind == KC_POOL_MAX)
                                    for (int64_t j = 0; j < c; j++)
                                        o[j] = p[j] > o[j] ? p[j] : o[j];
                                else
                                    for (int64_t j = 0; j < c; j++)
                                        o[j] += p[j];
                            }
                    if (a->kind == KC_POOL_AVG && cells)
                        for (int64_t j = 0; j < c; j++)
                            o[j] /= (float)cells;
                }
    return KC_OK;
}

/* GlobalAveragePooling1D under a Keras mask averages the real timesteps
 * only: sum(x * mask) / sum(mask). */
static kc_status kc_pool_global_masked(const kc_exec_ctx *ctx)
{
    const kc_shape *is = &ctx->in_shape[0];
    int64_t n = is->dims[0], t = is->dims[1], c = is->dims[2];
    for (int64_t b = 0; b < n; b++) {
        float *o = ctx->out[0] + b * c;
        int64_t real = 0;
        memset(o, 0, (size_t)c * sizeof *o);
        for (int64_t i = 0; i < t; i++) {
            if (!ctx->in_mask[b * t + i])
                continue;
            real++;
            for (int64_t j = 0; j < c; j++)
                o[j] += ctx->in[0][(b * t + i) * c + j];
        }
        for (int64_t j = 0; j < c && real; j++)
            o[j] /= (float)real;
    }
    return KC_OK;
}

/* Global pooling: the sum (or maximum) over all cells of an image, per
 * channel, worked in blocks of channels, and split over the pool's
 * threads by (image, channel block) when there is enough to read.
 * MobileNetV2 batch 8 (2 MB): 0.17 ms as one scalar loop. With AVX-512
 * or AVX2 a block's sums stay in registers over all the cells
 * (gpool_simd.inc), the same bits as the plain loop below, which went
 * back to memory at every cell, 4 floats at a time (GCC -O2). */
#define KC_GPOOL_BLOCK 256

typedef struct kc_gpool_job {
    const float *in;
    float *out;
    int64_t cells, c, blocks, per_part; /* blocks: per image */
    int64_t items;                      /* images x blocks */
    int max;
    kc_isa_level isa;                   /* the vector loops to take, read once a run */
} kc_gpool_job;

/* A full block has a constant trip count, which GCC's -O2 vectoriser
 * (the "very cheap" cost model: no epilogue, no alias checks) takes. */
static void kc_gpool_sum(const float *restrict p, float *restrict o, int64_t len)
{
    if (len == KC_GPOOL_BLOCK)
        for (int j = 0; j < KC_GPOOL_BLOCK; j++)
            o[j] += p[j];
    else
        for (int64_t j = 0; j < len; j++)
            o[j] += p[j];
}

static void kc_gpool_max(const float *restrict p, float *restrict o, int64_t len)
{
    if (len == KC_GPOOL_BLOCK)
        for (int j = 0; j < KC_GPOOL_BLOCK; j++)
            o[j] = p[j] > o[j] ? p[j] : o[j];
    else
        for (int64_t j = 0; j < len; j++)
            o[j] = p[j] > o[j] ? p[j] : o[j];
}

static void kc_gpool_block(const float *p, float *o, int64_t cells, int64_t stride, int64_t len,
                           int max, kc_isa_level isa)
{
    if (isa == KC_ISA_AVX512) {
        kc_gpool_cells_avx512(p, cells, stride, len, max, o);
        return;
    }
    if (isa == KC_ISA_AVX2) {
        kc_gpool_cells_avx2(p, cells, stride, len, max, o);
        return;
    }
    for (int64_t j = 0; j < len; j++)
        o[j] = max ? -FLT_MAX : 0.0f;
    for (int64_t i = 0; i < cells; i++, p += stride)
        (max ? kc_gpool_max : kc_gpool_sum)(p, o, len);
    if (!max && cells)
        for (int64_t j = 0; j < len; j++)
            o[j] /= (float)cells;
}

static void kc_gpool_part(void *arg, int k)
{
    const kc_gpool_job *g = arg;
    for (int64_t it = k * g->per_part; it < (k + 1) * g->per_part && it < g->items; it++) {
        int64_t b = it / g->blocks, j0 = it % g->blocks * KC_GPOOL_BLOCK;
        int64_t len = g->c - j0 < KC_GPOOL_BLOCK ? g->c - j0 : KC_GPOOL_BLOCK;
        kc_gpool_block(g->in + b * g->cells * g->c + j0, g->out + b * g->c + j0, g->cells, g->c,
                       len, g->max, g->isa);
    }
}

static kc_status kc_pool_global(const kc_exec_ctx *ctx, const kc_pool_attrs *a)
{
    const kc_shape *is = &ctx->in_shape[0];
    if (ctx->in_mask && a->kind == KC_POOL_AVG && a->spatial == 1 && !a->keepdims)
        return kc_pool_global_masked(ctx);
    int64_t n = is->dims[0], c = is->dims[is->rank - 1];
    if (n * c <= 0)
        return KC_OK;
    kc_gpool_job g = {ctx->in[0], ctx->out[0], kc_count(is) / (n * c), c,
                      (c + KC_GPOOL_BLOCK - 1) / KC_GPOOL_BLOCK, 0, 0, a->kind == KC_POOL_MAX,
                      kc_isa()};
    g.items = n * g.blocks;
    int parts = kc_parallel_parts(kc_count(is) * (int64_t)sizeof(float), g.items);
    g.per_part = (g.items + parts - 1) / parts;
    kc_parallel(parts, kc_gpool_part, &g);
    return KC_OK;
}

/* A windowed pooling whose one window is the whole image: Keras 2's
 * MobileNetV2 (nsfwjs's) ends in AveragePooling2D(7) on 7x7, the global
 * average under another name. It runs as global pooling: no oneDNN
 * primitive, whose every call allocates (README, tests/alloc), and the
 * same cells summed. No folded padding, no mask. */
static int kc_pool_whole_window(const kc_exec_ctx *ctx, const kc_pool_attrs *a)
{
    const kc_shape *is = &ctx->in_shape[0], *os = &ctx->out_shape[0];
    if (ctx->in_mask || is->rank != a->spatial + 2 || os->rank != is->rank)
        return 0;
    for (int i = 0; i < a->spatial; i++)
        if (a->pad_before[i] || a->pad_after[i] || a->pool[i] != is->dims[1 + i] ||
            os->dims[1 + i] != 1)
            return 0;
    return os->dims[0] == is->dims[0] && os->dims[is->rank - 1] == is->dims[is->rank - 1];
}

static kc_status kc_pool(const kc_exec_ctx *ctx)
{
    const kc_pool_attrs *a = ctx->layer->attrs;
    if (a->global || kc_pool_whole_window(ctx, a))
        return kc_pool_global(ctx, a);
    int handled = 0;
    KC_TRY(kc_dnnl_pool(ctx, &handled));
    return handled ? KC_OK : kc_pool_window(ctx, a);
}

const kc_kernel_entry kc_kernels_pool[] = {
    {"MaxPooling1D", 0, kc_pool},  {"MaxPooling2D", 0, kc_pool},
    {"MaxPooling3D", 0, kc_pool},  {"AveragePooling1D", 0, kc_pool},
    {"AveragePooling2D", 0, kc_pool}, {"AveragePooling3D", 0, kc_pool},
    {"GlobalMaxPooling1D", 0, kc_pool}, {"GlobalMaxPooling2D", 0, kc_pool},
    {"GlobalMaxPooling3D", 0, kc_pool}, {"GlobalAveragePooling1D", 0, kc_pool},
    {"GlobalAveragePooling2D", 0, kc_pool}, {"GlobalAveragePooling3D", 0, kc_pool},
    {"MaxPool1D", 0, kc_pool},     {"MaxPool2D", 0, kc_pool},
    {"AvgPool1D", 0, kc_pool},     {"AvgPool2D", 0, kc_pool},
    {"GlobalAvgPool2D", 0, kc_pool}, {"GlobalMaxPool2D", 0, kc_pool},
    {"GlobalAvgPool1D", 0, kc_pool}, {"GlobalMaxPool1D", 0, kc_pool},
    {NULL, 0, NULL},
};
