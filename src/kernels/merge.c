/* Merge layers: element-wise with NumPy broadcasting, Concatenate, Dot. */
#include <math.h>
#include <string.h>

#include "base/mem.h"
#include "base/threads.h"
#include "kernels/dnnl_common.h"
#include "kernels/kernel.h"
#include "ops/merge.h"

/* Element-wise merges (Add, Subtract, Multiply, Average, Maximum,
 * Minimum) with NumPy broadcasting. Each input is seen through the output
 * shape as rows: a run of `row` output elements over which the input is
 * either contiguous or one value (its innermost axes, merged while the
 * pattern holds), so the inner loops are plain vector loops. The output
 * is cut into ranges over the threads, and a range takes every input in
 * turn while it is in the cache; each element's arithmetic is the
 * inputs' in order, as one pass would do it. */
typedef struct kc_bcast {
    const float *x;
    int same;                    /* the output's shape: one run of it all */
    int scalar;                  /* a row reads one value (else a run) */
    int outer_rank;              /* output axes before the row's */
    int64_t row;                 /* output elements a row */
    int64_t dims[KC_MAX_RANK];   /* the output's axes before the row's */
    int64_t strides[KC_MAX_RANK];/* the input's stride along each (0: broadcast) */
} kc_bcast;

typedef struct kc_ewise_job {
    const kc_exec_ctx *ctx;
    kc_merge_kind kind;
} kc_ewise_job;

/* Input `in` seen through output shape `os` (broadcast: NumPy's rules,
 * checked by the op's shape inference). */
static void kc_bcast_init(kc_bcast *b, const float *x, const kc_shape *in, const kc_shape *os)
{
    int64_t strides[KC_MAX_RANK], s = 1;
    for (int i = os->rank - 1; i >= 0; i--) {
        int ii = i - (os->rank - in->rank);
        strides[i] = ii < 0 || in->dims[ii] == 1 ? 0 : s;
        if (ii >= 0)
            s *= in->dims[ii];
    }
    b->x = x;
    b->same = kc_shape_equal(in, os);
    int last = os->rank - 1;
    b->scalar = last < 0 || strides[last] == 0;
    b->row = 1;
    int k = os->rank;
    /* merge axes from the innermost while the input stays one value, or
     * stays contiguous, across them */
    while (k > 0 && (b->scalar ? strides[k - 1] == 0 : strides[k - 1] == b->row)) {
        b->row *= os->dims[k - 1];
        k--;
    }
    b->outer_rank = k;
    for (int i = 0; i < k; i++) {
        b->dims[i] = os->dims[i];
        b->strides[i] = strides[i];
    }
}

/* Where row r of the output starts in the input. */
static int64_t kc_bcast_row_src(const kc_bcast *b, int64_t r)
{
    int64_t src = 0;
    for (int i = b->outer_rank - 1; i >= 0; i--) {
        src += r % b->dims[i] * b->strides[i];
        r /= b->dims[i];
    }
    return src;
}

/* out[i] = op(left[i], x[i]) over n elements (left is out itself while
 * inputs accumulate, or the first input, read in the same pass as the
 * second); `first` copies x instead. */
static void kc_ewise_run(kc_merge_kind kind, int first, float *out, const float *left,
                         const float *x, int64_t n)
{
    if (first) {
        if (out != x)
            memcpy(out, x, (size_t)n * sizeof *out);
        return;
    }
    switch (kind) {
    case KC_MERGE_ADD: case KC_MERGE_AVERAGE:
        for (int64_t i = 0; i < n; i++) out[i] = left[i] + x[i];
        break;
    case KC_MERGE_SUBTRACT:
        for (int64_t i = 0; i < n; i++) out[i] = left[i] - x[i];
        break;
    case KC_MERGE_MULTIPLY:
        for (int64_t i = 0; i < n; i++) out[i] = left[i] * x[i];
        break;
    case KC_MERGE_MAXIMUM:
        for (int64_t i = 0; i < n; i++) out[i] = x[i] > left[i] ? x[i] : left[i];
        break;
    case KC_MERGE_MINIMUM:
        for (int64_t i = 0; i < n; i++) out[i] = x[i] < left[i] ? x[i] : left[i];
        break;
    default: break;
    }
}

/* The same with one value v for all n. */
static void kc_ewise_run1(kc_merge_kind kind, int first, float *out, const float *left, float v,
                          int64_t n)
{
    if (first) {
        for (int64_t i = 0; i < n; i++) out[i] = v;
        return;
    }
    switch (kind) {
    case KC_MERGE_ADD: case KC_MERGE_AVERAGE:
        for (int64_t i = 0; i < n; i++) out[i] = left[i] + v;
        break;
    case KC_MERGE_SUBTRACT:
        for (int64_t i = 0; i < n; i++) out[i] = left[i] - v;
        break;
    case KC_MERGE_MULTIPLY:
        for (int64_t i = 0; i < n; i++) out[i] = left[i] * v;
        break;
    case KC_MERGE_MAXIMUM:
        for (int64_t i = 0; i < n; i++) out[i] = v > left[i] ? v : left[i];
        break;
    case KC_MERGE_MINIMUM:
        for (int64_t i = 0; i < n; i++) out[i] = v < left[i] ? v : left[i];
        break;
    default: break;
    }
}

/* Input b into output elements [lo, hi), row piece by row piece, with
 * `left` (indexed as the output) the other operand. */
static void kc_ewise_input(kc_merge_kind kind, int first, float *out, const float *left,
                           const kc_bcast *b, int64_t lo, int64_t hi)
{
    if (b->same) {
        kc_ewise_run(kind, first, out + lo, left + lo, b->x + lo, hi - lo);
        return;
    }
    for (int64_t o = lo; o < hi;) {
        int64_t r = o / b->row, off = o - r * b->row;
        int64_t n = b->row - off < hi - o ? b->row - off : hi - o;
        const float *x = b->x + kc_bcast_row_src(b, r);
        if (b->scalar)
            kc_ewise_run1(kind, first, out + o, left + o, x[0], n);
        else
            kc_ewise_run(kind, first, out + o, left + o, x + off, n);
        o += n;
    }
}

/* Output elements [lo, hi): every input in turn (its view made here:
 * a few steps per axis). A first input of the output's shape is read
 * with the second in one pass (x * se, x + y: one pass less over the
 * output than copying it first, the same arithmetic). */
static void kc_ewise_range(void *arg, int64_t lo, int64_t hi)
{
    const kc_ewise_job *j = arg;
    const kc_exec_ctx *ctx = j->ctx;
    float *out = ctx->out[0];
    const kc_shape *os = &ctx->out_shape[0];
    kc_bcast b;
    kc_bcast_init(&b, ctx->in[0], &ctx->in_shape[0], os);
    int next = 1;
    if (b.same && ctx->n_in >= 2) {
        const float *first = ctx->in[0];
        kc_bcast_init(&b, ctx->in[1], &ctx->in_shape[1], os);
        kc_ewise_input(j->kind, 0, out, first, &b, lo, hi);
        next = 2;
    } else {
        kc_ewise_input(j->kind, 1, out, out, &b, lo, hi);
    }
    for (int i = next; i < ctx->n_in; i++) {
        kc_bcast_init(&b, ctx->in[i], &ctx->in_shape[i], os);
        kc_ewise_input(j->kind, 0, out, out, &b, lo, hi);
    }
    if (j->kind == KC_MERGE_AVERAGE)
        for (int64_t o = lo; o < hi; o++)
            out[o] /= (float)ctx->n_in;
}

static kc_status kc_elementwise(const kc_exec_ctx *ctx)
{
    const kc_merge_attrs *a = ctx->layer->attrs;
    const kc_shape *os = &ctx->out_shape[0];
    if (ctx->n_in < 1)
        return kc_fail(KC_ERR_ARG, "an element-wise merge of no inputs");
    kc_ewise_job job = {ctx, a->kind};
    int64_t total = kc_count(os);
    kc_parallel_for(total, (ctx->n_in + 1) * total * (int64_t)sizeof(float), 16, kc_ewise_range,
                    &job);
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
