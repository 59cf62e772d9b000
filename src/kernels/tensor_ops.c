/* Tensor ops: Keras 3 ops nodes (keras.src.ops.*) and Keras 2 TFOpLambda /
 * SlicingOpLambda, which both resolve to kc_top_attrs (ops/elementwise.h)
 * during shape inference. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/threads.h"
#include "kernels/fastmath.h"
#include "kernels/kernel.h"
#include "ops/elementwise.h"

typedef struct kc_view {
    const float *data;
    kc_shape shape;
    float scalar; /* backing store for SCALAR operands */
} kc_view;

static kc_status kc_get_operand(const kc_exec_ctx *ctx, const kc_top_attrs *a, int k, kc_view *v)
{
    const kc_operand *op = &a->operand[k];
    switch (op->kind) {
    case KC_OPND_INPUT:
        if (op->index < 0 || op->index >= ctx->n_in)
            return kc_fail(KC_ERR_FORMAT, "operand %d refers to a missing input", k);
        v->data = ctx->in[op->index];
        v->shape = ctx->in_shape[op->index];
        return KC_OK;
    case KC_OPND_CONST:
        if (op->index < 0 || op->index >= ctx->node->n_consts)
            return kc_fail(KC_ERR_FORMAT, "operand %d refers to a missing constant", k);
        v->data = ctx->node->consts[op->index].data;
        v->shape = ctx->node->consts[op->index].shape;
        return KC_OK;
    case KC_OPND_SCALAR:
        v->scalar = (float)op->scalar;
        v->data = &v->scalar;
        v->shape.rank = 0;
        return KC_OK;
    case KC_OPND_INLINE:
        v->data = a->inline_data;
        v->shape = op->shape;
        return KC_OK;
    }
    return kc_fail(KC_ERR_FORMAT, "bad operand kind");
}

static float kc_ew_unary(kc_ew_op op, float x, double alpha)
{
    switch (op) {
    case KC_EW_NEG: return -x;
    case KC_EW_ABS: return fabsf(x);
    case KC_EW_SQRT: return sqrtf(x);
    case KC_EW_RSQRT: return 1.0f / sqrtf(x);
    case KC_EW_SQUARE: return x * x;
    case KC_EW_EXP: return expf(x);
    case KC_EW_LOG: return logf(x);
    case KC_EW_TANH: return tanhf(x);
    case KC_EW_SIGMOID: return kc_sigmoid_fast(x); /* fastmath.h */
    case KC_EW_RELU: return x > 0 ? x : 0;
    case KC_EW_RELU6: return x < 0 ? 0 : x > 6 ? 6 : x;
    case KC_EW_SILU: return x * kc_sigmoid_fast(x);
    case KC_EW_HARD_SIGMOID: {
        float r = x + 3.0f;
        return (r < 0 ? 0 : r > 6 ? 6 : r) / 6.0f;
    }
    case KC_EW_HARD_SILU: {
        float r = x + 3.0f;
        return x * (r < 0 ? 0 : r > 6 ? 6 : r) / 6.0f;
    }
    case KC_EW_GELU: return kc_gelu_erf(x); /* fastmath.h */
    case KC_EW_GELU_TANH:
        return 0.5f * x *
               (1.0f + tanhf(sqrtf(2.0f / (float)M_PI) * (x + 0.044715f * x * x * x)));
    case KC_EW_ERF: return erff(x);
    case KC_EW_RECIPROCAL: return 1.0f / x;
    case KC_EW_FLOOR: return floorf(x);
    case KC_EW_CEIL: return ceilf(x);
    case KC_EW_SOFTPLUS: return x > 20.0f ? x : log1pf(expf(x));
    case KC_EW_SOFTSIGN: return x / (1.0f + fabsf(x));
    case KC_EW_ELU: return x > 0 ? x : (float)alpha * expm1f(x);
    case KC_EW_SELU:
        return 1.0507009873554805f * (x > 0 ? x : 1.6732632423543772f * expm1f(x));
    case KC_EW_LEAKY_RELU: return x >= 0 ? x : (float)alpha * x;
    default: return x;
    }
}

static float kc_ew_binary(kc_ew_op op, float x, float y)
{
    switch (op) {
    case KC_EW_ADD: return x + y;
    case KC_EW_SUB: return x - y;
    case KC_EW_MUL: return x * y;
    case KC_EW_DIV: return x / y;
    case KC_EW_POW: return powf(x, y);
    case KC_EW_MAX: return x > y ? x : y;
    case KC_EW_MIN: return x < y ? x : y;
    case KC_EW_SQUARED_DIFF: return (x - y) * (x - y);
    default: return x;
    }
}

/* Offset into a broadcast operand for output multi-index idx. */
static int64_t kc_bcast_offset(const kc_shape *s, const kc_shape *out, const int64_t *idx)
{
    int64_t off = 0, stride = 1;
    for (int i = s->rank - 1; i >= 0; i--) {
        int oi = i + (out->rank - s->rank);
        if (s->dims[i] != 1)
            off += idx[oi] * stride;
        stride *= s->dims[i];
    }
    return off;
}

static void kc_next_index(int64_t *idx, const kc_shape *s)
{
    for (int i = s->rank - 1; i >= 0; i--) {
        if (++idx[i] < s->dims[i])
            return;
        idx[i] = 0;
    }
}

/* A binary op over the output's rows (its innermost axis), each operand
 * read along a row with stride 1 or 0 (broadcast), the rows cut over
 * the threads; every element's arithmetic is kc_ew_binary's. */
typedef struct kc_bin_job {
    kc_ew_op op;
    kc_view x, y;
    const kc_shape *os;
    float *out;
} kc_bin_job;

/* out[i] = x[i * sx] OP y[i * sy] for the common ops, in loops the
 * compiler vectorises where both strides are 1. */
#define KC_BIN_LOOP(expr)                                                                          \
    do {                                                                                           \
        if (sx == 1 && sy == 1)                                                                    \
            for (int64_t i = 0; i < n; i++) {                                                      \
                float xv = x[i], yv = y[i];                                                        \
                out[i] = (expr);                                                                   \
            }                                                                                      \
        else                                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                      \
                float xv = x[i * sx], yv = y[i * sy];                                              \
                out[i] = (expr);                                                                   \
            }                                                                                      \
    } while (0)

static void kc_bin_row(kc_ew_op op, float *out, const float *x, int64_t sx, const float *y,
                       int64_t sy, int64_t n)
{
    switch (op) {
    case KC_EW_ADD: KC_BIN_LOOP(xv + yv); break;
    case KC_EW_SUB: KC_BIN_LOOP(xv - yv); break;
    case KC_EW_MUL: KC_BIN_LOOP(xv * yv); break;
    case KC_EW_DIV: KC_BIN_LOOP(xv / yv); break;
    default: KC_BIN_LOOP(kc_ew_binary(op, xv, yv)); break;
    }
}
#undef KC_BIN_LOOP

/* Stride of operand s along the output's innermost axis: 0 when it
 * broadcasts there (or has no such axis). */
static int64_t kc_bin_stride(const kc_shape *s)
{
    return s->rank > 0 && s->dims[s->rank - 1] != 1 ? 1 : 0;
}

static void kc_bin_rows(void *arg, int64_t lo, int64_t hi)
{
    const kc_bin_job *j = arg;
    const kc_shape *os = j->os;
    int64_t len = os->rank ? os->dims[os->rank - 1] : 1;
    int64_t idx[KC_MAX_RANK] = {0};
    int64_t sx = kc_bin_stride(&j->x.shape), sy = kc_bin_stride(&j->y.shape);
    for (int64_t r = lo; r < hi; r++) {
        int64_t rest = r;
        for (int i = os->rank - 2; i >= 0; i--) {
            idx[i] = rest % os->dims[i];
            rest /= os->dims[i];
        }
        kc_bin_row(j->op, j->out + r * len, j->x.data + kc_bcast_offset(&j->x.shape, os, idx), sx,
                   j->y.data + kc_bcast_offset(&j->y.shape, os, idx), sy, len);
    }
}

static kc_status kc_top_binary(const kc_exec_ctx *ctx, const kc_top_attrs *a)
{
    kc_bin_job job = {.op = a->ew, .os = &ctx->out_shape[0], .out = ctx->out[0]};
    KC_TRY(kc_get_operand(ctx, a, 0, &job.x));
    KC_TRY(kc_get_operand(ctx, a, 1, &job.y));
    const kc_shape *os = job.os;
    int64_t n = kc_count(os), len = os->rank ? os->dims[os->rank - 1] : 1;
    if (n < 1 || len < 1)
        return KC_OK;
    kc_parallel_for(n / len, 3 * n * (int64_t)sizeof(float), 1, kc_bin_rows, &job);
    return KC_OK;
}

static kc_status kc_top_reduce(const kc_exec_ctx *ctx, const kc_top_attrs *a)
{
    const kc_shape *is = &ctx->in_shape[0];
    int reduced[KC_MAX_RANK] = {0};
    for (int k = 0; k < a->n_axes; k++)
        reduced[a->axes[k]] = 1;
    /* Output multi-index = input index with reduced axes dropped/zeroed. */
    int64_t out_n = kc_count(&ctx->out_shape[0]), in_n = kc_count(is);
    double acc_init = a->reduce == KC_REDUCE_MAX ? -INFINITY
                      : a->reduce == KC_REDUCE_MIN ? INFINITY
                      : a->reduce == KC_REDUCE_PROD ? 1.0 : 0.0;
    double *acc = (double *)kc_scratch(out_n * 2);
    if (!acc)
        return KC_ERR_NOMEM;
    for (int64_t o = 0; o < out_n; o++)
        acc[o] = acc_init;
    int64_t idx[KC_MAX_RANK] = {0}, count_per = 1;
    for (int i = 0; i < is->rank; i++)
        if (reduced[i])
            count_per *= is->dims[i];
    for (int64_t i = 0; i < in_n; i++, kc_next_index(idx, is)) {
        int64_t o = 0;
        for (int d = 0; d < is->rank; d++)
            if (!reduced[d])
                o = o * is->dims[d] + idx[d];
        double v = ctx->in[0][i];
        switch (a->reduce) {
        case KC_REDUCE_MAX: acc[o] = fmax(acc[o], v); break;
        case KC_REDUCE_MIN: acc[o] = fmin(acc[o], v); break;
        case KC_REDUCE_PROD: acc[o] *= v; break;
        default: acc[o] += v; break;
        }
    }
    for (int64_t o = 0; o < out_n; o++)
        ctx->out[0][o] = (float)(a->reduce == KC_REDUCE_MEAN ? acc[o] / (double)count_per : acc[o]);
    free(acc);
    return KC_OK;
}

static kc_status kc_top_transpose(const kc_exec_ctx *ctx, const kc_top_attrs *a)
{
    const kc_shape *is = &ctx->in_shape[0], *os = &ctx->out_shape[0];
    int rank = is->rank, perm[KC_MAX_RANK];
    for (int i = 0; i < rank; i++)
        perm[i] = a->n_perm ? a->perm[i] : rank - 1 - i;
    int64_t in_stride[KC_MAX_RANK], idx[KC_MAX_RANK] = {0};
    in_stride[rank - 1] = 1;
    for (int i = rank - 2; i >= 0; i--)
        in_stride[i] = in_stride[i + 1] * is->dims[i + 1];
    int64_t n = kc_count(os);
    for (int64_t o = 0; o < n; o++, kc_next_index(idx, os)) {
        int64_t src = 0;
        for (int i = 0; i < rank; i++)
            src += idx[i] * in_stride[perm[i]];
        ctx->out[0][o] = ctx->in[0][src];
    }
    return KC_OK;
}

static kc_status kc_top_concat(const kc_exec_ctx *ctx, const kc_top_attrs *a)
{
    const kc_shape *os = &ctx->out_shape[0];
    int64_t outer = 1;
    for (int i = 0; i < a->axis; i++)
        outer *= os->dims[i];
    int64_t out_block = outer ? kc_count(os) / outer : 0, offset = 0;
    for (int k = 0; k < ctx->n_in; k++) {
        /* TFOpLambda concat marks its tensors; ops nodes use every input. */
        int64_t block = outer ? kc_count(&ctx->in_shape[k]) / outer : 0;
        for (int64_t o = 0; o < outer; o++)
            memcpy(ctx->out[0] + o * out_block + offset, ctx->in[k] + o * block,
                   (size_t)block * sizeof(float));
        offset += block;
    }
    return KC_OK;
}

static kc_status kc_top_slice(const kc_exec_ctx *ctx, const kc_top_attrs *a)
{
    const kc_shape *is = &ctx->in_shape[0];
    int64_t start[KC_MAX_RANK], step[KC_MAX_RANK], count[KC_MAX_RANK];
    for (int i = 0; i < is->rank; i++) {
        start[i] = 0;
        step[i] = 1;
        count[i] = is->dims[i];
    }
    for (int k = 0; k < a->n_slices; k++) {
        const kc_slice_item *it = &a->slices[k];
        if (it->kind == KC_SLICE_NEWAXIS)
            continue;
        int ax = it->axis;
        if (it->kind == KC_SLICE_INDEX) {
            start[ax] = it->start < 0 ? it->start + is->dims[ax] : it->start;
            count[ax] = 1;
        } else {
            kc_slice_resolve(it, is->dims[ax], &start[ax], &count[ax]);
            step[ax] = it->step;
        }
    }
    kc_shape sel = {.rank = is->rank};
    for (int i = 0; i < is->rank; i++)
        sel.dims[i] = count[i];
    int64_t in_stride[KC_MAX_RANK], idx[KC_MAX_RANK] = {0};
    in_stride[is->rank - 1] = 1;
    for (int i = is->rank - 2; i >= 0; i--)
        in_stride[i] = in_stride[i + 1] * is->dims[i + 1];
    int64_t n = kc_count(&sel);
    for (int64_t o = 0; o < n; o++, kc_next_index(idx, &sel)) {
        int64_t src = 0;
        for (int i = 0; i < is->rank; i++)
            src += (start[i] + idx[i] * step[i]) * in_stride[i];
        ctx->out[0][o] = ctx->in[0][src];
    }
    return KC_OK;
}

/* Batched matmul over equal leading dims (2-D operands broadcast). */
static kc_status kc_top_matmul(const kc_exec_ctx *ctx, const kc_top_attrs *a)
{
    kc_view x, y;
    KC_TRY(kc_get_operand(ctx, a, 0, &x));
    KC_TRY(kc_get_operand(ctx, a, 1, &y));
    if (a->transpose_a || x.shape.rank < 2 || y.shape.rank < 2)
        return kc_fail(KC_ERR_UNSUPPORTED, "matmul with transpose_a or 1-D operands");
    int64_t m = x.shape.dims[x.shape.rank - 2], k = x.shape.dims[x.shape.rank - 1];
    int64_t n = ctx->out_shape[0].dims[ctx->out_shape[0].rank - 1];
    int64_t batch = m * n > 0 ? kc_count(&ctx->out_shape[0]) / (m * n) : 0;
    int64_t xb = x.shape.rank > 2 ? m * k : 0;
    int64_t yb = y.shape.rank > 2 ? k * n : 0;
    for (int64_t b = 0; b < batch; b++)
        kc_gemm_ld(m, n, k, x.data + b * xb, k, y.data + b * yb, a->transpose_b ? k : n,
                   a->transpose_b, ctx->out[0] + b * m * n, n, 0);
    return KC_OK;
}

static kc_status kc_top_cast(const kc_exec_ctx *ctx, const kc_top_attrs *a)
{
    int64_t n = kc_count(&ctx->out_shape[0]);
    for (int64_t i = 0; i < n; i++) {
        float v = ctx->in[0][i];
        if (a->dtype == KC_BOOL)
            v = v != 0;
        else if (a->dtype != KC_F32 && a->dtype != KC_F64 && a->dtype != KC_F16 &&
                 a->dtype != KC_BF16)
            v = truncf(v);
        ctx->out[0][i] = v;
    }
    return KC_OK;
}

/* A unary op over element ranges side by side. */
typedef struct kc_unary_job {
    const kc_top_attrs *a;
    float *out;
    kc_view x;
} kc_unary_job;

static void kc_unary_range(void *arg, int64_t lo, int64_t hi)
{
    const kc_unary_job *j = arg;
    for (int64_t i = lo; i < hi; i++)
        j->out[i] = kc_ew_unary(j->a->ew, j->x.data[i], j->a->alpha);
}

static kc_status kc_tensor_op(const kc_exec_ctx *ctx)
{
    const kc_top_attrs *a = ctx->layer->attrs;
    int64_t n = kc_count(&ctx->out_shape[0]);
    switch (a->kind) {
    case KC_TOP_IDENTITY: case KC_TOP_RESHAPE: case KC_TOP_EXPAND_DIMS: case KC_TOP_SQUEEZE:
        memcpy(ctx->out[0], ctx->in[0], (size_t)n * sizeof(float));
        return KC_OK;
    case KC_TOP_UNARY: {
        kc_unary_job job = {a, ctx->out[0]};
        KC_TRY(kc_get_operand(ctx, a, 0, &job.x));
        kc_parallel_for(n, 2 * n * (int64_t)sizeof(float), 16, kc_unary_range, &job);
        return KC_OK;
    }
    case KC_TOP_BINARY: return kc_top_binary(ctx, a);
    case KC_TOP_CLIP:
        for (int64_t i = 0; i < n; i++) {
            float v = ctx->in[0][i];
            ctx->out[0][i] = v < a->clip_min ? (float)a->clip_min
                             : v > a->clip_max ? (float)a->clip_max : v;
        }
        return KC_OK;
    case KC_TOP_SOFTMAX: {
        const kc_shape *s = &ctx->out_shape[0];
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < a->axis; i++)
            outer *= s->dims[i];
        for (int i = a->axis + 1; i < s->rank; i++)
            inner *= s->dims[i];
        memcpy(ctx->out[0], ctx->in[0], (size_t)n * sizeof(float));
        kc_softmax_axis(ctx->out[0], outer, s->dims[a->axis], inner);
        return KC_OK;
    }
    case KC_TOP_REDUCE: return kc_top_reduce(ctx, a);
    case KC_TOP_TRANSPOSE: return kc_top_transpose(ctx, a);
    case KC_TOP_CONCAT: return kc_top_concat(ctx, a);
    case KC_TOP_SLICE: return kc_top_slice(ctx, a);
    case KC_TOP_MATMUL: return kc_top_matmul(ctx, a);
    case KC_TOP_CAST: return kc_top_cast(ctx, a);
    }
    return kc_fail(KC_ERR_UNSUPPORTED, "tensor op %s", a->op_name ? a->op_name : "?");
}

#define KC_OPS(name) {name, 1, kc_tensor_op}
const kc_kernel_entry kc_kernels_tensor_ops[] = {
    KC_OPS("Add"), KC_OPS("Subtract"), KC_OPS("Multiply"), KC_OPS("Divide"),
    KC_OPS("TrueDivide"), KC_OPS("Power"), KC_OPS("Maximum"), KC_OPS("Minimum"),
    KC_OPS("Negative"), KC_OPS("Absolute"), KC_OPS("Abs"), KC_OPS("Sqrt"), KC_OPS("Rsqrt"),
    KC_OPS("Square"), KC_OPS("Exp"), KC_OPS("Log"), KC_OPS("Tanh"), KC_OPS("Sigmoid"),
    KC_OPS("Relu"), KC_OPS("Relu6"), KC_OPS("Silu"), KC_OPS("HardSigmoid"), KC_OPS("HardSilu"),
    KC_OPS("Gelu"), KC_OPS("Erf"), KC_OPS("Reciprocal"), KC_OPS("Floor"), KC_OPS("Ceil"),
    KC_OPS("Softplus"), KC_OPS("Softsign"), KC_OPS("Elu"), KC_OPS("Selu"), KC_OPS("LeakyRelu"),
    KC_OPS("Clip"), KC_OPS("Softmax"), KC_OPS("Mean"), KC_OPS("Sum"), KC_OPS("Max"),
    KC_OPS("Min"), KC_OPS("Amax"), KC_OPS("Amin"), KC_OPS("Reshape"), KC_OPS("Transpose"),
    KC_OPS("ExpandDims"), KC_OPS("Squeeze"), KC_OPS("Concatenate"), KC_OPS("GetItem"),
    KC_OPS("Matmul"), KC_OPS("Cast"),
    {"TFOpLambda", 0, kc_tensor_op},
    {"SlicingOpLambda", 0, kc_tensor_op},
    {NULL, 0, NULL},
};
