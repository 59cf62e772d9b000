/* Keras 3 ops nodes: raw keras.ops calls on symbolic tensors ("x + 3.0",
 * ops.mean(x, axis=1), x[:, 0]) that a Functional config records as
 * Operation entries (module keras.src.ops.*). Their parameters are the
 * Operation's constructor arguments, auto-serialised into config; tensors
 * and constants are the call's positional args.
 *
 * This file also holds the shape logic shared with tfop.c (elementwise.h):
 * both families first resolve a kc_top_attrs, then kc_top_infer computes the
 * output shape from it. */
#include "ops/numpy.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "ops/op.h"

/* ================================================ shared: JSON readers */

static kc_status kc_json_int(const cJSON *v, const char *what, int64_t lo, int64_t hi,
                             int64_t *out)
{
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        v->valuedouble < (double)lo || v->valuedouble > (double)hi)
        return kc_fail(KC_ERR_FORMAT, "%s is not an integer in [%lld, %lld]", what,
                       (long long)lo, (long long)hi);
    *out = (int64_t)v->valuedouble;
    return KC_OK;
}

kc_status kc_top_read_axes(const cJSON *item, const char *what, int *axes, int *n)
{
    *n = -1;
    if (!item || cJSON_IsNull(item))
        return KC_OK;
    int64_t v = 0;
    if (cJSON_IsNumber(item)) {
        KC_TRY(kc_json_int(item, what, -KC_MAX_RANK, KC_MAX_RANK, &v));
        axes[0] = (int)v;
        *n = 1;
        return KC_OK;
    }
    if (!cJSON_IsArray(item))
        return kc_fail(KC_ERR_FORMAT, "%s is not an int or a list of ints", what);
    int count = cJSON_GetArraySize(item);
    if (count > KC_MAX_RANK)
        return kc_fail(KC_ERR_LIMIT, "%s lists %d axes (max %d)", what, count, KC_MAX_RANK);
    int i = 0;
    for (const cJSON *e = item->child; e; e = e->next, i++) {
        KC_TRY(kc_json_int(e, what, -KC_MAX_RANK, KC_MAX_RANK, &v));
        axes[i] = (int)v;
    }
    *n = count;
    return KC_OK;
}

kc_status kc_top_read_shape(const cJSON *item, const char *what, int64_t *dims, int *rank)
{
    if (!item || cJSON_IsNull(item))
        return kc_fail(KC_ERR_FORMAT, "%s is missing", what);
    const int64_t max = (int64_t)1 << 40;
    if (cJSON_IsNumber(item)) {
        KC_TRY(kc_json_int(item, what, -1, max, &dims[0]));
        *rank = 1;
        return KC_OK;
    }
    if (!cJSON_IsArray(item))
        return kc_fail(KC_ERR_FORMAT, "%s is not a shape", what);
    int count = cJSON_GetArraySize(item), unknown = 0, i = 0;
    if (count > KC_MAX_RANK)
        return kc_fail(KC_ERR_LIMIT, "%s has %d dimensions (max %d)", what, count, KC_MAX_RANK);
    for (const cJSON *e = item->child; e; e = e->next, i++) {
        if (cJSON_IsNull(e))
            dims[i] = -1;
        else
            KC_TRY(kc_json_int(e, what, -1, max, &dims[i]));
        unknown += dims[i] == -1;
    }
    if (unknown > 1)
        return kc_fail(KC_ERR_FORMAT, "%s has more than one -1 dimension", what);
    *rank = count;
    return KC_OK;
}

static const struct {
    const char *name;
    kc_dtype dtype;
} kc_top_dtypes[] = {
    {"float32", KC_F32}, {"float16", KC_F16}, {"bfloat16", KC_BF16}, {"float64", KC_F64},
    {"int8", KC_I8},     {"int16", KC_I16},   {"int32", KC_I32},     {"int64", KC_I64},
    {"uint8", KC_U8},    {"uint16", KC_U16},  {"uint32", KC_U32},    {"uint64", KC_U64},
    {"bool", KC_BOOL},   {"float", KC_F32},   {"int", KC_I32},       {"half", KC_F16},
    {"double", KC_F64},
};

kc_status kc_top_read_dtype(const char *name, kc_dtype *out)
{
    if (!name)
        return kc_fail(KC_ERR_FORMAT, "dtype is missing");
    for (size_t i = 0; i < sizeof kc_top_dtypes / sizeof kc_top_dtypes[0]; i++)
        if (strcmp(name, kc_top_dtypes[i].name) == 0) {
            *out = kc_top_dtypes[i].dtype;
            return KC_OK;
        }
    return kc_fail(KC_ERR_UNSUPPORTED, "dtype '%s' is not supported", name);
}

/* Shape of nested lists; every number must sit at the same (deepest) level
 * so the values fill the shape exactly. */
static kc_status kc_json_dims(const cJSON *v, int depth, kc_shape *shape, int *leaf_depth)
{
    if (depth > KC_MAX_RANK)
        return kc_fail(KC_ERR_LIMIT, "constant nested deeper than %d", KC_MAX_RANK);
    if (cJSON_IsNumber(v) || cJSON_IsBool(v)) {
        if (*leaf_depth >= 0 && *leaf_depth != depth)
            return kc_fail(KC_ERR_FORMAT, "constant is ragged");
        *leaf_depth = depth;
        return KC_OK;
    }
    if (!cJSON_IsArray(v))
        return kc_fail(KC_ERR_FORMAT, "constant is not numeric");
    int n = cJSON_GetArraySize(v);
    if (depth >= shape->rank) {
        shape->rank = depth + 1;
        shape->dims[depth] = n;
    } else if (shape->dims[depth] != n) {
        return kc_fail(KC_ERR_FORMAT, "constant is ragged");
    }
    if (n == 0 && *leaf_depth >= 0 && *leaf_depth != depth + 1)
        return kc_fail(KC_ERR_FORMAT, "constant is ragged");
    for (const cJSON *e = v->child; e; e = e->next)
        KC_TRY(kc_json_dims(e, depth + 1, shape, leaf_depth));
    return KC_OK;
}

static void kc_json_fill(const cJSON *v, float *out, int64_t *pos)
{
    if (cJSON_IsNumber(v))
        out[(*pos)++] = (float)v->valuedouble;
    else if (cJSON_IsBool(v))
        out[(*pos)++] = cJSON_IsTrue(v) ? 1.0f : 0.0f;
    else
        for (const cJSON *e = v->child; e; e = e->next)
            kc_json_fill(e, out, pos);
}

kc_status kc_json_values(const cJSON *item, float *out, int64_t cap, kc_shape *shape,
                         int64_t *count)
{
    if (cJSON_IsObject(item)) {
        const cJSON *cls = cJSON_GetObjectItemCaseSensitive(item, "class_name");
        if (!cJSON_IsString(cls) || (strcmp(cls->valuestring, "__numpy__") != 0 &&
                                     strcmp(cls->valuestring, "__tensor__") != 0))
            return kc_fail(KC_ERR_FORMAT, "constant is an object, not a tensor");
        item = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(item, "config"), "value");
    }
    if (!item)
        return kc_fail(KC_ERR_FORMAT, "constant has no value");
    memset(shape, 0, sizeof *shape);
    int leaf_depth = -1;
    KC_TRY(kc_json_dims(item, 0, shape, &leaf_depth));
    int64_t n = kc_shape_count(shape);
    if (n < 0)
        return kc_fail(KC_ERR_LIMIT, "constant too large");
    if (n > cap)
        return kc_fail(KC_ERR_LIMIT, "constant has %lld values (max %lld)", (long long)n,
                       (long long)cap);
    if (out) {
        int64_t pos = 0;
        kc_json_fill(item, out, &pos);
    }
    *count = n;
    return KC_OK;
}

/* ============================================== shared: slicing keys */

typedef struct kc_raw_index {
    kc_slice_kind kind;
    int ellipsis;
    int64_t start, stop, step;
    int has_start, has_stop;
} kc_raw_index;

/* A slice bound or step: null/missing is "omitted". */
static kc_status kc_slice_bound(const cJSON *cfg, const char *key, int64_t *v, int *has)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(cfg, key);
    *has = item && !cJSON_IsNull(item);
    if (!*has)
        return KC_OK;
    const int64_t lim = (int64_t)1 << 62;
    return kc_json_int(item, "slice bound", -lim, lim, v);
}

static kc_status kc_slice_object(const cJSON *e, kc_raw_index *r)
{
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(e, "class_name");
    const cJSON *cfg = e;
    if (cJSON_IsString(cls)) {
        if (strcmp(cls->valuestring, "__ellipsis__") == 0) {
            r->ellipsis = 1;
            return KC_OK;
        }
        if (strcmp(cls->valuestring, "__slice__") != 0)
            return kc_fail(KC_ERR_UNSUPPORTED, "index of class '%s' is not supported "
                           "(only ints, slices, None and ...)", cls->valuestring);
        cfg = cJSON_GetObjectItemCaseSensitive(e, "config");
        if (!cJSON_IsObject(cfg))
            return kc_fail(KC_ERR_FORMAT, "__slice__ without config");
    }
    r->kind = KC_SLICE_RANGE;
    int has_step;
    KC_TRY(kc_slice_bound(cfg, "start", &r->start, &r->has_start));
    KC_TRY(kc_slice_bound(cfg, "stop", &r->stop, &r->has_stop));
    KC_TRY(kc_slice_bound(cfg, "step", &r->step, &has_step));
    if (!has_step)
        r->step = 1;
    if (r->step < 1)
        return kc_fail(KC_ERR_UNSUPPORTED, "slice step %lld is not supported (only positive "
                       "steps)", (long long)r->step);
    return KC_OK;
}

static kc_status kc_slice_raw(const cJSON *e, kc_raw_index *r)
{
    memset(r, 0, sizeof *r);
    if (cJSON_IsNull(e)) {
        r->kind = KC_SLICE_NEWAXIS;
        return KC_OK;
    }
    if (cJSON_IsNumber(e)) {
        r->kind = KC_SLICE_INDEX;
        const int64_t lim = (int64_t)1 << 62;
        return kc_json_int(e, "index", -lim, lim, &r->start);
    }
    if (cJSON_IsObject(e))
        return kc_slice_object(e, r);
    return kc_fail(KC_ERR_UNSUPPORTED, "indexing with a %s is not supported (only ints, "
                   "slices, None and ...)", cJSON_IsArray(e) ? "nested list" : "non-number");
}

static kc_status kc_slice_emit(kc_top_attrs *a, const kc_raw_index *r, int axis)
{
    if (a->n_slices >= KC_TOP_MAX_SLICES)
        return kc_fail(KC_ERR_LIMIT, "index has too many entries");
    kc_slice_item *it = &a->slices[a->n_slices++];
    memset(it, 0, sizeof *it);
    it->kind = r ? r->kind : KC_SLICE_RANGE;
    it->axis = axis;
    it->step = 1;
    if (r) {
        it->start = r->start;
        it->stop = r->stop;
        it->step = r->kind == KC_SLICE_RANGE ? r->step : 1;
        it->has_start = r->has_start;
        it->has_stop = r->has_stop;
    }
    return KC_OK;
}

/* NumPy's rule: an Ellipsis stands for as many full slices as the other
 * entries (new axes excluded) leave unconsumed; without one, a trailing
 * Ellipsis is implied. */
static kc_status kc_slice_expand(const kc_raw_index *raw, int n, int rank, kc_top_attrs *a)
{
    int axis = 0;
    a->n_slices = 0;
    for (int i = 0; i < n; i++) {
        if (raw[i].ellipsis) {
            int needed = 0;
            for (int j = i + 1; j < n; j++)
                needed += !raw[j].ellipsis && raw[j].kind != KC_SLICE_NEWAXIS;
            int take = rank - axis - needed;
            if (take < 0)
                return kc_fail(KC_ERR_SHAPE, "too many indices for a rank-%d tensor", rank);
            for (int k = 0; k < take; k++)
                KC_TRY(kc_slice_emit(a, NULL, axis++));
        } else if (raw[i].kind == KC_SLICE_NEWAXIS) {
            KC_TRY(kc_slice_emit(a, &raw[i], -1));
        } else {
            if (axis >= rank)
                return kc_fail(KC_ERR_SHAPE, "too many indices for a rank-%d tensor", rank);
            KC_TRY(kc_slice_emit(a, &raw[i], axis++));
        }
    }
    return KC_OK;
}

kc_status kc_top_read_slices(const cJSON *key, int rank, kc_top_attrs *a)
{
    kc_raw_index raw[KC_TOP_MAX_SLICES + 1];
    int n = 0, ellipses = 0;
    if (!key)
        return kc_fail(KC_ERR_FORMAT, "slice key is missing");
    if (cJSON_IsArray(key)) {
        if (cJSON_GetArraySize(key) > KC_TOP_MAX_SLICES)
            return kc_fail(KC_ERR_LIMIT, "index has more than %d entries", KC_TOP_MAX_SLICES);
        for (const cJSON *e = key->child; e; e = e->next)
            KC_TRY(kc_slice_raw(e, &raw[n++]));
    } else {
        KC_TRY(kc_slice_raw(key, &raw[n++]));
    }
    for (int i = 0; i < n; i++)
        ellipses += raw[i].ellipsis;
    if (ellipses > 1)
        return kc_fail(KC_ERR_FORMAT, "index has more than one Ellipsis");
    if (!ellipses) {
        memset(&raw[n], 0, sizeof raw[n]);
        raw[n++].ellipsis = 1;
    }
    return kc_slice_expand(raw, n, rank, a);
}

void kc_slice_resolve(const kc_slice_item *it, int64_t dim, int64_t *start, int64_t *count)
{
    int64_t b = it->has_start ? it->start : 0;
    int64_t e = it->has_stop ? it->stop : dim;
    if (b < 0)
        b = b + dim < 0 ? 0 : b + dim;
    if (b > dim)
        b = dim;
    if (e < 0)
        e = e + dim < 0 ? 0 : e + dim;
    if (e > dim)
        e = dim;
    *start = b;
    *count = e > b ? (e - b + it->step - 1) / it->step : 0;
}

/* ================================================ shared: shape logic */

static kc_dtype kc_top_operand_dtype(const kc_op_ctx *ctx, const kc_operand *o)
{
    if (o->kind == KC_OPND_INPUT && ctx->in_dtype)
        return ctx->in_dtype[o->index];
    return KC_DTYPE_INVALID;
}

static kc_status kc_top_set_out(kc_op_ctx *ctx, const kc_shape *shape, kc_dtype dtype)
{
    if (shape->rank > KC_MAX_RANK)
        return kc_fail(KC_ERR_LIMIT, "result rank above %d", KC_MAX_RANK);
    ctx->out[0] = *shape;
    ctx->out_dtype[0] = dtype;
    ctx->n_out = 1;
    return KC_OK;
}

static kc_status kc_top_need_input(const kc_top_attrs *a, int i)
{
    if (a->n_operands <= i || a->operand[i].kind != KC_OPND_INPUT)
        return kc_fail(KC_ERR_UNSUPPORTED, "%s: operand %d must be a tensor", a->op_name, i);
    return KC_OK;
}

static kc_status kc_top_same(kc_op_ctx *ctx, kc_top_attrs *a)
{
    KC_TRY(kc_top_need_input(a, 0));
    const kc_shape *s = &a->operand[0].shape;
    if (a->kind == KC_TOP_SOFTMAX) {
        if (s->rank < 1)
            return kc_fail(KC_ERR_SHAPE, "softmax of a scalar");
        KC_TRY(kc_op_axis(ctx, a->axis, s->rank, &a->axis));
    }
    kc_dtype dt = a->kind == KC_TOP_CAST ? a->dtype : kc_top_operand_dtype(ctx, &a->operand[0]);
    return kc_top_set_out(ctx, s, dt);
}

static kc_status kc_top_binary(kc_op_ctx *ctx, kc_top_attrs *a)
{
    if (a->n_operands != 2)
        return kc_fail(KC_ERR_FORMAT, "%s needs two operands", a->op_name);
    int t = a->operand[0].kind == KC_OPND_INPUT ? 0 : 1;
    if (a->operand[t].kind != KC_OPND_INPUT)
        return kc_fail(KC_ERR_UNSUPPORTED, "%s of two constants", a->op_name);
    kc_shape out;
    KC_TRY(kc_broadcast(ctx, &a->operand[0].shape, &a->operand[1].shape, &out));
    kc_dtype dt = kc_top_operand_dtype(ctx, &a->operand[t]);
    /* True division of integers gives floats (NumPy, TF truediv). */
    if (a->ew == KC_EW_DIV && dt != KC_F16 && dt != KC_BF16 && dt != KC_F64)
        dt = KC_DTYPE_INVALID;
    return kc_top_set_out(ctx, &out, dt);
}

/* Normalise axes[0..n) against rank; duplicates are an error. Returns a
 * bitmask of the axes in *mask. */
static kc_status kc_top_norm_axes(kc_op_ctx *ctx, int *axes, int n, int rank, unsigned *mask)
{
    *mask = 0;
    for (int i = 0; i < n; i++) {
        KC_TRY(kc_op_axis(ctx, axes[i], rank, &axes[i]));
        if (*mask & (1u << axes[i]))
            return kc_fail(KC_ERR_FORMAT, "axis %d repeated", axes[i]);
        *mask |= 1u << axes[i];
    }
    return KC_OK;
}

static kc_status kc_top_reduce(kc_op_ctx *ctx, kc_top_attrs *a)
{
    KC_TRY(kc_top_need_input(a, 0));
    const kc_shape *in = &a->operand[0].shape;
    unsigned mask = 0;
    if (a->n_axes < 0) {
        /* All axes, spelled out so the executor needs no special case. */
        a->n_axes = in->rank;
        for (int i = 0; i < in->rank; i++)
            a->axes[i] = i;
    }
    KC_TRY(kc_top_norm_axes(ctx, a->axes, a->n_axes, in->rank, &mask));
    kc_shape out = {.rank = 0};
    for (int i = 0; i < in->rank; i++) {
        if (!(mask & (1u << i)))
            out.dims[out.rank++] = in->dims[i];
        else if (a->keepdims)
            out.dims[out.rank++] = 1;
    }
    return kc_top_set_out(ctx, &out, kc_top_operand_dtype(ctx, &a->operand[0]));
}

static kc_status kc_top_reshape(kc_op_ctx *ctx, kc_top_attrs *a)
{
    KC_TRY(kc_top_need_input(a, 0));
    int64_t total = kc_shape_count(&a->operand[0].shape);
    if (total < -1)
        return KC_ERR_LIMIT;
    kc_shape out = kc_shape_make(a->shape_rank, a->shape);
    int64_t known = 1;
    int unknown_at = -1;
    for (int i = 0; i < out.rank; i++) {
        if (out.dims[i] < 0)
            unknown_at = i;
        else if (kc_mul_overflows(known, out.dims[i], &known) || known > KC_MAX_ELEMENTS)
            return kc_fail(KC_ERR_LIMIT, "reshape target too large");
    }
    if (total >= 0 && unknown_at >= 0) {
        if (known == 0 || total % known != 0)
            return kc_fail(KC_ERR_SHAPE, "cannot reshape %lld elements with a -1 dimension",
                           (long long)total);
        out.dims[unknown_at] = total / known;
    } else if (total >= 0 && known != total) {
        return kc_fail(KC_ERR_SHAPE, "cannot reshape %lld elements into %lld",
                       (long long)total, (long long)known);
    }
    return kc_top_set_out(ctx, &out, kc_top_operand_dtype(ctx, &a->operand[0]));
}

static kc_status kc_top_transpose(kc_op_ctx *ctx, kc_top_attrs *a)
{
    KC_TRY(kc_top_need_input(a, 0));
    const kc_shape *in = &a->operand[0].shape;
    if (a->n_perm == 0) {
        a->n_perm = in->rank;
        for (int i = 0; i < in->rank; i++)
            a->perm[i] = in->rank - 1 - i;
    }
    if (a->n_perm != in->rank)
        return kc_fail(KC_ERR_SHAPE, "transpose permutation has %d axes for a rank-%d input",
                       a->n_perm, in->rank);
    unsigned mask;
    KC_TRY(kc_top_norm_axes(ctx, a->perm, a->n_perm, in->rank, &mask));
    kc_shape out = {.rank = in->rank};
    for (int i = 0; i < in->rank; i++)
        out.dims[i] = in->dims[a->perm[i]];
    return kc_top_set_out(ctx, &out, kc_top_operand_dtype(ctx, &a->operand[0]));
}

static kc_status kc_top_expand_dims(kc_op_ctx *ctx, kc_top_attrs *a)
{
    KC_TRY(kc_top_need_input(a, 0));
    const kc_shape *in = &a->operand[0].shape;
    if (a->n_axes < 1)
        return kc_fail(KC_ERR_FORMAT, "expand_dims needs an axis");
    int rank = in->rank + a->n_axes;
    if (rank > KC_MAX_RANK)
        return kc_fail(KC_ERR_LIMIT, "result rank %d above %d", rank, KC_MAX_RANK);
    unsigned mask;
    KC_TRY(kc_top_norm_axes(ctx, a->axes, a->n_axes, rank, &mask));
    kc_shape out = {.rank = rank};
    for (int i = 0, j = 0; i < rank; i++)
        out.dims[i] = (mask & (1u << i)) ? 1 : in->dims[j++];
    return kc_top_set_out(ctx, &out, kc_top_operand_dtype(ctx, &a->operand[0]));
}

static kc_status kc_top_squeeze(kc_op_ctx *ctx, kc_top_attrs *a)
{
    KC_TRY(kc_top_need_input(a, 0));
    const kc_shape *in = &a->operand[0].shape;
    unsigned mask = 0;
    if (a->n_axes < 0) {
        /* Unknown dims stay: Keras only drops dims known to be 1. The
         * chosen axes are spelled out for the executor. */
        a->n_axes = 0;
        for (int i = 0; i < in->rank; i++)
            if (in->dims[i] == 1) {
                mask |= 1u << i;
                a->axes[a->n_axes++] = i;
            }
    } else {
        KC_TRY(kc_top_norm_axes(ctx, a->axes, a->n_axes, in->rank, &mask));
        for (int i = 0; i < a->n_axes; i++)
            if (in->dims[a->axes[i]] != 1 && in->dims[a->axes[i]] != -1)
                return kc_fail(KC_ERR_SHAPE, "cannot squeeze axis %d of size %lld", a->axes[i],
                               (long long)in->dims[a->axes[i]]);
    }
    kc_shape out = {.rank = 0};
    for (int i = 0; i < in->rank; i++)
        if (!(mask & (1u << i)))
            out.dims[out.rank++] = in->dims[i];
    return kc_top_set_out(ctx, &out, kc_top_operand_dtype(ctx, &a->operand[0]));
}

/* Two dims that must agree; an unknown one takes the other's value. */
static kc_status kc_top_merge_dim(int64_t a, int64_t b, int64_t *out)
{
    if (a >= 0 && b >= 0 && a != b)
        return kc_fail(KC_ERR_SHAPE, "dimensions %lld and %lld differ", (long long)a,
                       (long long)b);
    *out = a >= 0 ? a : b;
    return KC_OK;
}

/* Concatenated tensors: the positional list, or the list passed by its
 * keyword (ops.concatenate(xs=...), tf.concat(values=...)). */
int kc_top_concat_input(const kc_op_ctx *ctx, int i)
{
    const char *r = ctx->in_roles ? ctx->in_roles[i] : NULL;
    return !r || strcmp(r, "xs") == 0 || strcmp(r, "values") == 0;
}

static kc_status kc_top_concat(kc_op_ctx *ctx, kc_top_attrs *a)
{
    kc_shape out = {.rank = -1};
    int n = 0;
    for (int i = 0; i < ctx->n_in; i++) {
        if (!kc_top_concat_input(ctx, i))
            continue;
        const kc_shape *s = &ctx->in[i];
        if (out.rank < 0) {
            out = *s;
            KC_TRY(kc_op_axis(ctx, a->axis, s->rank, &a->axis));
        } else if (s->rank != out.rank) {
            return kc_fail(KC_ERR_SHAPE, "concatenating ranks %d and %d", out.rank, s->rank);
        } else {
            for (int d = 0; d < s->rank; d++) {
                if (d != a->axis)
                    KC_TRY(kc_top_merge_dim(out.dims[d], s->dims[d], &out.dims[d]));
                else
                    out.dims[d] = out.dims[d] < 0 || s->dims[d] < 0 ? -1
                                                                     : out.dims[d] + s->dims[d];
            }
        }
        n++;
    }
    if (n == 0)
        return kc_fail(KC_ERR_FORMAT, "concatenate of no tensors");
    a->n_operands = n;
    return kc_top_set_out(ctx, &out, ctx->in_dtype ? ctx->in_dtype[0] : KC_DTYPE_INVALID);
}

static kc_status kc_top_slice(kc_op_ctx *ctx, kc_top_attrs *a)
{
    KC_TRY(kc_top_need_input(a, 0));
    const kc_shape *in = &a->operand[0].shape;
    kc_shape out = {.rank = 0};
    for (int i = 0; i < a->n_slices; i++) {
        const kc_slice_item *it = &a->slices[i];
        int64_t dim = it->axis >= 0 ? in->dims[it->axis] : 1;
        if (it->kind != KC_SLICE_INDEX && out.rank >= KC_MAX_RANK)
            return kc_fail(KC_ERR_LIMIT, "result rank above %d", KC_MAX_RANK);
        if (it->kind == KC_SLICE_NEWAXIS) {
            out.dims[out.rank++] = 1;
        } else if (it->kind == KC_SLICE_INDEX) {
            if (dim >= 0 && (it->start >= dim || it->start < -dim))
                return kc_fail(KC_ERR_SHAPE, "index %lld out of range for axis %d of size %lld",
                               (long long)it->start, it->axis, (long long)dim);
        } else {
            int64_t start, count = -1;
            if (dim >= 0)
                kc_slice_resolve(it, dim, &start, &count);
            out.dims[out.rank++] = count;
        }
    }
    return kc_top_set_out(ctx, &out, kc_top_operand_dtype(ctx, &a->operand[0]));
}

static void kc_top_swap_last(kc_shape *s)
{
    int64_t t = s->dims[s->rank - 1];
    s->dims[s->rank - 1] = s->dims[s->rank - 2];
    s->dims[s->rank - 2] = t;
}

/* NumPy matmul: 1-D operands are promoted (and the added axis dropped),
 * leading axes broadcast. */
static kc_status kc_top_matmul(kc_op_ctx *ctx, kc_top_attrs *a)
{
    if (a->n_operands != 2)
        return kc_fail(KC_ERR_FORMAT, "matmul needs two operands");
    if (a->operand[0].kind != KC_OPND_INPUT && a->operand[1].kind != KC_OPND_INPUT)
        return kc_fail(KC_ERR_UNSUPPORTED, "matmul of two constants");
    kc_shape x = a->operand[0].shape, y = a->operand[1].shape;
    if (x.rank < 1 || y.rank < 1)
        return kc_fail(KC_ERR_SHAPE, "matmul of a scalar");
    if ((a->transpose_a && x.rank < 2) || (a->transpose_b && y.rank < 2))
        return kc_fail(KC_ERR_SHAPE, "matmul transpose of a 1-D operand");
    if (a->transpose_a)
        kc_top_swap_last(&x);
    if (a->transpose_b)
        kc_top_swap_last(&y);
    int x1 = x.rank == 1, y1 = y.rank == 1;
    if (x1)
        x = (kc_shape){.rank = 2, .dims = {1, x.dims[0]}};
    if (y1)
        y = (kc_shape){.rank = 2, .dims = {y.dims[0], 1}};
    int64_t k;
    KC_TRY(kc_top_merge_dim(x.dims[x.rank - 1], y.dims[y.rank - 2], &k));
    kc_shape bx = {.rank = x.rank - 2}, by = {.rank = y.rank - 2}, out;
    memcpy(bx.dims, x.dims, (size_t)bx.rank * sizeof bx.dims[0]);
    memcpy(by.dims, y.dims, (size_t)by.rank * sizeof by.dims[0]);
    KC_TRY(kc_broadcast(ctx, &bx, &by, &out));
    if (!x1)
        out.dims[out.rank++] = x.dims[x.rank - 2];
    if (!y1) {
        if (out.rank >= KC_MAX_RANK)
            return kc_fail(KC_ERR_LIMIT, "result rank above %d", KC_MAX_RANK);
        out.dims[out.rank++] = y.dims[y.rank - 1];
    }
    int t = a->operand[0].kind == KC_OPND_INPUT ? 0 : 1;
    return kc_top_set_out(ctx, &out, kc_top_operand_dtype(ctx, &a->operand[t]));
}

kc_status kc_top_infer(kc_op_ctx *ctx, kc_top_attrs *a)
{
    switch (a->kind) {
    case KC_TOP_IDENTITY:
    case KC_TOP_UNARY:
    case KC_TOP_CLIP:
    case KC_TOP_SOFTMAX:
    case KC_TOP_CAST:
        return kc_top_same(ctx, a);
    case KC_TOP_BINARY:
        return kc_top_binary(ctx, a);
    case KC_TOP_REDUCE:
        return kc_top_reduce(ctx, a);
    case KC_TOP_RESHAPE:
        return kc_top_reshape(ctx, a);
    case KC_TOP_TRANSPOSE:
        return kc_top_transpose(ctx, a);
    case KC_TOP_EXPAND_DIMS:
        return kc_top_expand_dims(ctx, a);
    case KC_TOP_SQUEEZE:
        return kc_top_squeeze(ctx, a);
    case KC_TOP_CONCAT:
        return kc_top_concat(ctx, a);
    case KC_TOP_SLICE:
        return kc_top_slice(ctx, a);
    case KC_TOP_MATMUL:
        return kc_top_matmul(ctx, a);
    }
    return kc_fail(KC_ERR_FORMAT, "bad tensor op kind");
}

/* ============================================ the ops-node family */

/* One line per supported Operation class: (id, class name, kind, ew or
 * reduce op). Adding an op is one line here. */
#define KC_NP_OPS(X)                                              \
    X(add, "Add", KC_TOP_BINARY, KC_EW_ADD)                       \
    X(subtract, "Subtract", KC_TOP_BINARY, KC_EW_SUB)             \
    X(multiply, "Multiply", KC_TOP_BINARY, KC_EW_MUL)             \
    X(divide, "Divide", KC_TOP_BINARY, KC_EW_DIV)                 \
    X(true_divide, "TrueDivide", KC_TOP_BINARY, KC_EW_DIV)        \
    X(power, "Power", KC_TOP_BINARY, KC_EW_POW)                   \
    X(maximum, "Maximum", KC_TOP_BINARY, KC_EW_MAX)               \
    X(minimum, "Minimum", KC_TOP_BINARY, KC_EW_MIN)               \
    X(negative, "Negative", KC_TOP_UNARY, KC_EW_NEG)              \
    X(absolute, "Absolute", KC_TOP_UNARY, KC_EW_ABS)              \
    X(abs, "Abs", KC_TOP_UNARY, KC_EW_ABS)                        \
    X(sqrt, "Sqrt", KC_TOP_UNARY, KC_EW_SQRT)                     \
    X(rsqrt, "Rsqrt", KC_TOP_UNARY, KC_EW_RSQRT)                  \
    X(square, "Square", KC_TOP_UNARY, KC_EW_SQUARE)               \
    X(exp, "Exp", KC_TOP_UNARY, KC_EW_EXP)                        \
    X(log, "Log", KC_TOP_UNARY, KC_EW_LOG)                        \
    X(tanh, "Tanh", KC_TOP_UNARY, KC_EW_TANH)                     \
    X(sigmoid, "Sigmoid", KC_TOP_UNARY, KC_EW_SIGMOID)            \
    X(relu, "Relu", KC_TOP_UNARY, KC_EW_RELU)                     \
    X(relu6, "Relu6", KC_TOP_UNARY, KC_EW_RELU6)                  \
    X(silu, "Silu", KC_TOP_UNARY, KC_EW_SILU)                     \
    X(hard_sigmoid, "HardSigmoid", KC_TOP_UNARY, KC_EW_HARD_SIGMOID) \
    X(hard_silu, "HardSilu", KC_TOP_UNARY, KC_EW_HARD_SILU)       \
    X(gelu, "Gelu", KC_TOP_UNARY, KC_EW_GELU_TANH)                \
    X(erf, "Erf", KC_TOP_UNARY, KC_EW_ERF)                        \
    X(reciprocal, "Reciprocal", KC_TOP_UNARY, KC_EW_RECIPROCAL)   \
    X(floor, "Floor", KC_TOP_UNARY, KC_EW_FLOOR)                  \
    X(ceil, "Ceil", KC_TOP_UNARY, KC_EW_CEIL)                     \
    X(softplus, "Softplus", KC_TOP_UNARY, KC_EW_SOFTPLUS)         \
    X(softsign, "Softsign", KC_TOP_UNARY, KC_EW_SOFTSIGN)         \
    X(elu, "Elu", KC_TOP_UNARY, KC_EW_ELU)                        \
    X(selu, "Selu", KC_TOP_UNARY, KC_EW_SELU)                     \
    X(leaky_relu, "LeakyRelu", KC_TOP_UNARY, KC_EW_LEAKY_RELU)    \
    X(clip, "Clip", KC_TOP_CLIP, KC_EW_NONE)                      \
    X(softmax, "Softmax", KC_TOP_SOFTMAX, KC_EW_NONE)             \
    X(mean, "Mean", KC_TOP_REDUCE, KC_REDUCE_MEAN)                \
    X(sum, "Sum", KC_TOP_REDUCE, KC_REDUCE_SUM)                   \
    X(max, "Max", KC_TOP_REDUCE, KC_REDUCE_MAX)                   \
    X(min, "Min", KC_TOP_REDUCE, KC_REDUCE_MIN)                   \
    X(amax, "Amax", KC_TOP_REDUCE, KC_REDUCE_MAX)                 \
    X(amin, "Amin", KC_TOP_REDUCE, KC_REDUCE_MIN)                 \
    X(reshape, "Reshape", KC_TOP_RESHAPE, KC_EW_NONE)             \
    X(transpose, "Transpose", KC_TOP_TRANSPOSE, KC_EW_NONE)       \
    X(expand_dims, "ExpandDims", KC_TOP_EXPAND_DIMS, KC_EW_NONE)  \
    X(squeeze, "Squeeze", KC_TOP_SQUEEZE, KC_EW_NONE)             \
    X(concatenate, "Concatenate", KC_TOP_CONCAT, KC_EW_NONE)      \
    X(get_item, "GetItem", KC_TOP_SLICE, KC_EW_NONE)              \
    X(matmul, "Matmul", KC_TOP_MATMUL, KC_EW_NONE)                \
    X(cast, "Cast", KC_TOP_CAST, KC_EW_NONE)

typedef struct kc_np_info {
    const char *class_name;
    kc_top_kind kind;
    int sub; /* kc_ew_op, or kc_reduce_op for KC_TOP_REDUCE */
} kc_np_info;

#define KC_NP_INFO(id, cls, kind, sub) {cls, kind, (int)(sub)},
static const kc_np_info kc_np_infos[] = {KC_NP_OPS(KC_NP_INFO)};
#define KC_NP_N_INFOS (sizeof kc_np_infos / sizeof kc_np_infos[0])

static kc_status kc_np_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_top_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    const char *cls = layer->def->class_name;
    for (size_t i = 0; i < KC_NP_N_INFOS; i++)
        if (strcmp(kc_np_infos[i].class_name, cls) == 0) {
            a->kind = kc_np_infos[i].kind;
            a->op_name = kc_np_infos[i].class_name;
            if (a->kind == KC_TOP_REDUCE)
                a->reduce = (kc_reduce_op)kc_np_infos[i].sub;
            else
                a->ew = (kc_ew_op)kc_np_infos[i].sub;
            return KC_OK;
        }
    return kc_fail(KC_ERR_UNSUPPORTED, "ops node %s is not supported", cls);
}

/* A parameter: the Operation's constructor argument (config), or, for
 * Keras versions that passed it at call time, the call's kwargs. Returns
 * the object holding `key` so the kc_cfg_* readers apply defaults. */
static const cJSON *kc_np_src(const kc_op_ctx *ctx, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(ctx->layer->config, key);
    if (!v || cJSON_IsNull(v)) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(ctx->call_kwargs, key);
        if (k && !cJSON_IsNull(k))
            return ctx->call_kwargs;
    }
    return ctx->layer->config;
}

static const cJSON *kc_np_param(const kc_op_ctx *ctx, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(kc_np_src(ctx, key), key);
}

static int kc_np_is_tensor_arg(const cJSON *v)
{
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(v, "class_name");
    return cJSON_IsString(cls) && strcmp(cls->valuestring, "__keras_tensor__") == 0;
}

static int kc_np_role_input(const kc_op_ctx *ctx, int nth)
{
    for (int i = 0; i < ctx->n_in; i++)
        if (!(ctx->in_roles && ctx->in_roles[i]) && nth-- == 0)
            return i;
    return -1;
}

/* The value of positional argument `pos` (keyword `kw` as a fallback):
 * a constant if the builder found one there, else the matching tensor. */
static kc_status kc_np_operand(const kc_op_ctx *ctx, int pos, const char *kw, kc_operand *o)
{
    memset(o, 0, sizeof *o);
    int before = 0;
    for (int k = 0; k < ctx->n_consts; k++) {
        if (ctx->consts[k].position == pos) {
            o->kind = KC_OPND_CONST;
            o->index = k;
            o->shape = ctx->consts[k].shape;
            return KC_OK;
        }
        before += ctx->consts[k].position < pos;
    }
    int nth = pos - before;
    if (cJSON_IsArray(ctx->call_args)) {
        /* The written args say exactly which positions hold tensors. */
        const cJSON *arg = cJSON_GetArrayItem(ctx->call_args, pos);
        nth = 0;
        for (int q = 0; q < pos; q++)
            nth += kc_np_is_tensor_arg(cJSON_GetArrayItem(ctx->call_args, q));
        if (arg && !kc_np_is_tensor_arg(arg))
            return kc_fail(KC_ERR_UNSUPPORTED, "argument %d is neither a tensor nor a numeric "
                           "constant", pos);
    }
    int idx = kc_np_role_input(ctx, nth);
    if (idx < 0)
        idx = kc_op_input_by_role(ctx, kw);
    if (idx < 0)
        return kc_fail(KC_ERR_FORMAT, "argument %d ('%s') is missing", pos, kw);
    o->kind = KC_OPND_INPUT;
    o->index = idx;
    o->shape = ctx->in[idx];
    return KC_OK;
}

/* Tensors passed by keyword are only understood for the op's own operand
 * names; anything else would be silently dropped. */
static kc_status kc_np_check_roles(const kc_op_ctx *ctx, const char *ok1, const char *ok2)
{
    for (int i = 0; ctx->in_roles && i < ctx->n_in; i++) {
        const char *r = ctx->in_roles[i];
        if (r && strcmp(r, ok1) != 0 && (!ok2 || strcmp(r, ok2) != 0))
            return kc_fail(KC_ERR_UNSUPPORTED, "tensor passed as keyword '%s' is not supported",
                           r);
    }
    return KC_OK;
}

static kc_status kc_np_unary_params(const kc_op_ctx *ctx, kc_top_attrs *a)
{
    if (a->ew == KC_EW_GELU_TANH || a->ew == KC_EW_GELU) {
        int approx; /* keras.ops.gelu defaults to the tanh form */
        KC_TRY(kc_cfg_bool(kc_np_src(ctx, "approximate"), "approximate", 1, &approx));
        a->ew = approx ? KC_EW_GELU_TANH : KC_EW_GELU;
    } else if (a->ew == KC_EW_LEAKY_RELU) {
        KC_TRY(kc_cfg_float(kc_np_src(ctx, "negative_slope"), "negative_slope", 0.2, &a->alpha));
    } else if (a->ew == KC_EW_ELU) {
        KC_TRY(kc_cfg_float(kc_np_src(ctx, "alpha"), "alpha", 1.0, &a->alpha));
    }
    return KC_OK;
}

static kc_status kc_np_required_float(const kc_op_ctx *ctx, const char *key, double *out)
{
    if (!kc_np_param(ctx, key) || cJSON_IsNull(kc_np_param(ctx, key)))
        return kc_fail(KC_ERR_UNSUPPORTED, "'%s' must be a number (tensor bounds are not "
                       "supported)", key);
    return kc_cfg_float(kc_np_src(ctx, key), key, 0.0, out);
}

static kc_status kc_np_reduce_params(const kc_op_ctx *ctx, kc_top_attrs *a)
{
    KC_TRY(kc_top_read_axes(kc_np_param(ctx, "axis"), "axis", a->axes, &a->n_axes));
    KC_TRY(kc_cfg_bool(kc_np_src(ctx, "keepdims"), "keepdims", 0, &a->keepdims));
    const cJSON *initial = kc_np_param(ctx, "initial");
    if (initial && !cJSON_IsNull(initial))
        return kc_fail(KC_ERR_UNSUPPORTED, "%s with 'initial' is not supported", a->op_name);
    return KC_OK;
}

/* GetItem's key is its second positional argument, written verbatim in
 * the call (slices and Ellipsis are not numeric constants). */
static kc_status kc_np_slice_params(const kc_op_ctx *ctx, kc_top_attrs *a)
{
    if (kc_np_role_input(ctx, 1) >= 0)
        return kc_fail(KC_ERR_UNSUPPORTED, "indexing with a tensor is not supported");
    int rank = a->operand[0].shape.rank;
    if (cJSON_GetArraySize(ctx->call_args) >= 2)
        return kc_top_read_slices(cJSON_GetArrayItem(ctx->call_args, 1), rank, a);
    for (int k = 0; k < ctx->n_consts; k++)
        if (ctx->consts[k].position == 1 && ctx->consts[k].shape.rank == 0) {
            cJSON *key = cJSON_CreateNumber(ctx->consts[k].data[0]);
            if (!key)
                return KC_ERR_NOMEM;
            kc_status st = kc_top_read_slices(key, rank, a);
            cJSON_Delete(key);
            return st;
        }
    return kc_top_read_slices(kc_np_param(ctx, "key"), rank, a);
}

static kc_status kc_np_shape_params(const kc_op_ctx *ctx, kc_top_attrs *a)
{
    const cJSON *v;
    switch (a->kind) {
    case KC_TOP_RESHAPE:
        return kc_top_read_shape(kc_np_param(ctx, "newshape"), "newshape", a->shape,
                                 &a->shape_rank);
    case KC_TOP_TRANSPOSE:
        KC_TRY(kc_top_read_axes(kc_np_param(ctx, "axes"), "axes", a->perm, &a->n_perm));
        if (a->n_perm < 0)
            a->n_perm = 0;
        return KC_OK;
    case KC_TOP_EXPAND_DIMS:
        return kc_top_read_axes(kc_np_param(ctx, "axis"), "axis", a->axes, &a->n_axes);
    case KC_TOP_SQUEEZE:
        return kc_top_read_axes(kc_np_param(ctx, "axis"), "axis", a->axes, &a->n_axes);
    case KC_TOP_CAST:
        v = kc_np_param(ctx, "dtype");
        if (cJSON_IsObject(v)) /* a DTypePolicy-like object */
            v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(v, "config"),
                                                 "name");
        return kc_top_read_dtype(cJSON_IsString(v) ? v->valuestring : NULL, &a->dtype);
    case KC_TOP_SLICE:
        return kc_np_slice_params(ctx, a);
    default:
        return KC_OK;
    }
}

static kc_status kc_np_params(const kc_op_ctx *ctx, kc_top_attrs *a)
{
    int64_t axis;
    switch (a->kind) {
    case KC_TOP_UNARY:
        return kc_np_unary_params(ctx, a);
    case KC_TOP_CLIP:
        KC_TRY(kc_np_required_float(ctx, "x_min", &a->clip_min));
        return kc_np_required_float(ctx, "x_max", &a->clip_max);
    case KC_TOP_SOFTMAX:
        if (cJSON_IsArray(kc_np_param(ctx, "axis")))
            return kc_fail(KC_ERR_UNSUPPORTED, "softmax over several axes is not supported");
        KC_TRY(kc_cfg_int(kc_np_src(ctx, "axis"), "axis", -1, &axis));
        if (axis < -KC_MAX_RANK || axis >= KC_MAX_RANK)
            return kc_fail(KC_ERR_FORMAT, "axis %lld out of range", (long long)axis);
        a->axis = (int)axis;
        return KC_OK;
    case KC_TOP_REDUCE:
        return kc_np_reduce_params(ctx, a);
    default:
        return kc_np_shape_params(ctx, a);
    }
}

/* Concatenate's tensors are the list in its first argument; a constant in
 * that list would not reach us as an input, so refuse it. */
static kc_status kc_np_concat(kc_op_ctx *ctx, kc_top_attrs *a)
{
    const cJSON *list = cJSON_GetArrayItem(ctx->call_args, 0);
    for (const cJSON *e = cJSON_IsArray(list) ? list->child : NULL; e; e = e->next)
        if (!kc_np_is_tensor_arg(e))
            return kc_fail(KC_ERR_UNSUPPORTED, "concatenating a constant is not supported");
    if (ctx->n_consts > 0)
        return kc_fail(KC_ERR_UNSUPPORTED, "concatenating a constant is not supported");
    int64_t axis;
    KC_TRY(kc_cfg_int(kc_np_src(ctx, "axis"), "axis", 0, &axis));
    if (axis < -KC_MAX_RANK || axis >= KC_MAX_RANK)
        return kc_fail(KC_ERR_FORMAT, "axis %lld out of range", (long long)axis);
    a->axis = (int)axis;
    return kc_top_infer(ctx, a);
}

static kc_status kc_np_infer(kc_op_ctx *ctx)
{
    kc_top_attrs *a = ctx->layer->attrs;
    if (a->kind == KC_TOP_CONCAT) {
        KC_TRY(kc_np_check_roles(ctx, "xs", NULL));
        return kc_np_concat(ctx, a);
    }
    int binary = a->kind == KC_TOP_BINARY || a->kind == KC_TOP_MATMUL;
    KC_TRY(binary ? kc_np_check_roles(ctx, "x1", "x2") : kc_np_check_roles(ctx, "x", NULL));
    a->n_operands = binary ? 2 : 1;
    KC_TRY(kc_np_operand(ctx, 0, binary ? "x1" : "x", &a->operand[0]));
    if (binary)
        KC_TRY(kc_np_operand(ctx, 1, "x2", &a->operand[1]));
    else
        KC_TRY(kc_top_need_input(a, 0));
    KC_TRY(kc_np_params(ctx, a));
    return kc_top_infer(ctx, a);
}

#define KC_NP_DEF(id, cls, kind, sub) \
    static const kc_op_def kc_np_def_##id = {cls, KC_OPF_OPS_NODE, kc_np_parse, kc_np_infer};
KC_NP_OPS(KC_NP_DEF)

#define KC_NP_PTR(id, cls, kind, sub) &kc_np_def_##id,
const kc_op_def *const kc_ops_numpy[] = {KC_NP_OPS(KC_NP_PTR) NULL};
