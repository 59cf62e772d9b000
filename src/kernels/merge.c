/* Merge layers: element-wise with NumPy broadcasting, Concatenate, Dot. */
#include <math.h>
#include <string.h>

#include "base/mem.h"
#include "base/threads.h"
#include "kernels/dnnl_common.h"
#include "kernels/kernel.h"
#include "ops/merge.h"

/* Strides of `in` seen through the output shape (0 on broadcast axes). */
static void kc_broadcast_strides(const kc_shape *in, const kc_shape *out, int64_t *strides)
{
    int64_t s = 1;
    for (int i = out->rank - 1; i >= 0; i--) {
        int ii = i - (out->rank - in->rank);
        if (ii < 0 || in->dims[ii] == 1) {
            strides[i] = 0;
        } else {
            strides[i] = s;
        }
        if (ii >= 0)
            s *= in->dims[ii];
    }
}

/* acc = op(acc, x) for every output element. */
static void kc_combine(kc_merge_kind kind, float *acc, const float *x, const kc_shape *xs,
                       const kc_shape *os)
{
    int64_t total = kc_count(os);
    int same = kc_shape_equal(xs, os);
    int64_t strides[KC_MAX_RANK], idx[KC_MAX_RANK] = {0};
    if (!same)
        kc_broadcast_strides(xs, os, strides);
    int64_t src = 0;
    for (int64_t o = 0; o < total; o++) {
        float v = same ? x[o] : x[src];
        switch (kind) {
        case KC_MERGE_ADD: case KC_MERGE_AVERAGE: acc[o] += v; break;
        case KC_MERGE_SUBTRACT: acc[o] -= v; break;
        case KC_MERGE_MULTIPLY: acc[o] *= v; break;
        case KC_MERGE_MAXIMUM: acc[o] = v > acc[o] ? v : acc[o]; break;
        case KC_MERGE_MINIMUM: acc[o] = v < acc[o] ? v : acc[o]; break;
        default: break;
        }
        if (same)
            continue;
        for (int i = os->rank - 1; i >= 0; i--) {
            src += strides[i];
            if (++idx[i] < os->dims[i])
                break;
            src -= strides[i] * idx[i];
            idx[i] = 0;
        }
    }
}

/* Broadcast-copy x into out. */
static void kc_broadcast_copy(float *out, const float *x, const kc_shape *xs, const kc_shape *os)
{
    int64_t total = kc_count(os);
    if (kc_shape_equal(xs, os)) {
        memcpy(out, x, (size_t)total * sizeof *out);
        return;
    }
    for (int64_t o = 0; o < total; o++)
        out[o] = 0.0f;
    kc_combine(KC_MERGE_ADD, out, x, xs, os);
}

static kc_status kc_elementwise(const kc_exec_ctx *ctx)
{
    const kc_merge_attrs *a = ctx->layer->attrs;
    const kc_shape *os = &ctx->out_shape[0];
    kc_broadcast_copy(ctx->out[0], ctx->in[0], &ctx->in_shape[0], os);
    for (int i = 1; i < ctx->n_in; i++)
        kc_combine(a->kind, ctx->out[0], ctx->in[i], &ctx->in_shape[i], os);
    if (a->kind == KC_MERGE_AVERAGE) {
        int64_t total = kc_count(os);
        for (int64_t o = 0; o < total; o++)
            ctx->out[0][o] /= (float)ctx->n_in;
    }
    return KC_OK;
}

/* A Concatenate's copy, over outer positions [lo, hi) (the positions
 * before the axis: images, rows, pixels). */
typedef struct kc_concat_job {
    const kc_exec_ctx *ctx;
    int64_t outer, out_block;
    kc_dnnl_cut cut[KC_DNNL_MAX_CUTS];
    int64_t per_unit; /* outer positions per image or per row of a cut */
} kc_concat_job;

/* Position by position, each input's block in turn: the output is written
 * in one sequential stream. Input by input (the output written in strides
 * of its block) took 1.34x as long on InceptionV3's mixed0 parts (4
 * images of 35x35, 64 + 64 + 96 + 32 channels, one thread). Inputs go
 * KC_CONCAT_GROUP at a time (the blocks' sizes live on the stack). */
#define KC_CONCAT_GROUP 64
static void kc_concat_range(void *arg, int part)
{
    const kc_concat_job *job = arg;
    const kc_exec_ctx *ctx = job->ctx;
    int64_t lo = job->cut[part].lo * job->per_unit, hi = job->cut[part].hi * job->per_unit;
    int64_t block[KC_CONCAT_GROUP], offset = 0;
    for (int first = 0; first < ctx->n_in; first += KC_CONCAT_GROUP) {
        int n = ctx->n_in - first < KC_CONCAT_GROUP ? ctx->n_in - first : KC_CONCAT_GROUP;
        int64_t width = 0;
        for (int k = 0; k < n; k++) {
            block[k] = kc_count(&ctx->in_shape[first + k]) / (job->outer ? job->outer : 1);
            width += block[k];
        }
        for (int64_t o = lo; o < hi; o++) {
            float *out = ctx->out[0] + o * job->out_block + offset;
            for (int k = 0; k < n; k++) {
                memcpy(out, ctx->in[first + k] + o * block[k], (size_t)block[k] * sizeof(float));
                out += block[k];
            }
        }
        offset += width;
    }
}

/* Cut like the convolutions that feed it (kc_dnnl_plan_cuts): by images,
 * or for one image by rows when the axis comes after them (Inception's
 * channel concatenations), so each thread copies what it just wrote. */
static kc_status kc_concat(const kc_exec_ctx *ctx)
{
    const kc_merge_attrs *a = ctx->layer->attrs;
    const kc_shape *os = &ctx->out_shape[0];
    int axis = a->axis < 0 ? a->axis + os->rank : a->axis;
    kc_concat_job job = {.ctx = ctx, .outer = 1};
    for (int i = 0; i < axis; i++)
        job.outer *= os->dims[i];
    job.out_block = kc_count(os) / (job.outer ? job.outer : 1);
    int64_t batch = axis >= 1 ? os->dims[0] : 1, rows = axis >= 2 ? os->dims[1] : 1;
    int n = ctx->whole ? 1
                       : kc_dnnl_plan_cuts(batch, rows, kc_count(os) * 2 * (int64_t)sizeof(float),
                                           0, job.cut);
    if (n == 1)
        job.cut[0] = (kc_dnnl_cut){0, 0, 1};
    job.per_unit = n == 1 ? job.outer : job.cut[0].by_rows ? job.outer / rows : job.outer / batch;
    kc_parallel(n, kc_concat_range, &job);
    return KC_OK;
}

/* Dot for rank-2/3 inputs: out[b, i, j] = sum_k x[b, .., k, ..] y[b, .., k, ..]
 * with the free axis of each input (if any) as i and j. */
static kc_status kc_dot(const kc_exec_ctx *ctx)
{
    const kc_merge_attrs *a = ctx->layer->attrs;
    const kc_shape *xs = &ctx->in_shape[0], *ys = &ctx->in_shape[1];
    if (xs->rank > 3 || ys->rank > 3)
        return kc_fail(KC_ERR_UNSUPPORTED, "Dot on inputs of rank > 3");
    int ax = a->dot_axes[0] < 0 ? a->dot_axes[0] + xs->rank : a->dot_axes[0];
    int ay = a->dot_axes[1] < 0 ? a->dot_axes[1] + ys->rank : a->dot_axes[1];
    int64_t n = xs->dims[0], k = xs->dims[ax];
    int64_t xi = xs->rank == 3 ? xs->dims[ax == 1 ? 2 : 1] : 1;
    int64_t yj = ys->rank == 3 ? ys->dims[ay == 1 ? 2 : 1] : 1;
    /* element (i, k) of x for sample b */
    int64_t x_sk = xs->rank == 3 ? (ax == 1 ? xs->dims[2] : 1) : 1;
    int64_t x_si = xs->rank == 3 ? (ax == 1 ? 1 : xs->dims[2]) : 0;
    int64_t y_sk = ys->rank == 3 ? (ay == 1 ? ys->dims[2] : 1) : 1;
    int64_t y_sj = ys->rank == 3 ? (ay == 1 ? 1 : ys->dims[2]) : 0;
    int64_t xsz = kc_count(xs) / n, ysz = kc_count(ys) / n;
    for (int64_t b = 0; b < n; b++) {
        const float *x = ctx->in[0] + b * xsz, *y = ctx->in[1] + b * ysz;
        for (int64_t i = 0; i < xi; i++)
            for (int64_t j = 0; j < yj; j++) {
                double dot = 0, nx = 0, ny = 0;
                for (int64_t kk = 0; kk < k; kk++) {
                    double xv = x[i * x_si + kk * x_sk], yv = y[j * y_sj + kk * y_sk];
                    dot += xv * yv;
                    nx += xv * xv;
                    ny += yv * yv;
                }
                if (a->normalize)
                    dot /= fmax(sqrt(nx), 1e-12) * fmax(sqrt(ny), 1e-12);
                ctx->out[0][(b * xi + i) * yj + j] = (float)dot;
            }
    }
    return KC_OK;
}

static kc_status kc_keras1_merge(const kc_exec_ctx *ctx)
{
    const kc_merge_attrs *a = ctx->layer->attrs;
    if (a->kind == KC_MERGE_CONCAT)
        return kc_concat(ctx);
    if (a->kind == KC_MERGE_DOT)
        return kc_dot(ctx);
    return kc_elementwise(ctx);
}

const kc_kernel_entry kc_kernels_merge[] = {
    {"Add", 0, kc_elementwise},      {"Subtract", 0, kc_elementwise},
    {"Multiply", 0, kc_elementwise}, {"Average", 0, kc_elementwise},
    {"Maximum", 0, kc_elementwise},  {"Minimum", 0, kc_elementwise},
    {"Concatenate", 0, kc_concat},   {"Dot", 0, kc_dot},
    {"Merge", 0, kc_keras1_merge},   {NULL, 0, NULL},
};
