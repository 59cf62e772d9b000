/* Keras 2 TFOpLambda and SlicingOpLambda: tf.keras wraps every raw tf.*
 * call on a symbolic tensor (x + 3.0, tf.reshape(x, ...), x[:, 0]) in one
 * of these layers; config "function" is the canonical TF symbol. The call
 * record keeps the first argument positionally (a tensor, or a
 * ["_CONSTANT_VALUE", -1, value] constant that reaches us as consts[0]) and
 * every other argument by its TF parameter name in kwargs: numbers and
 * lists as JSON, tensors as extra inputs whose role is the name. */
#include "ops/tfop.h"

#include <string.h>

#include "base/mem.h"
#include "ops/op.h"

/* The TF symbols we understand; adding one is one line. `sub` is a
 * kc_ew_op, or a kc_reduce_op for KC_TOP_REDUCE. */
typedef struct kc_tfop_map {
    const char *function;
    kc_top_kind kind;
    int sub;
} kc_tfop_map;

static const kc_tfop_map kc_tfop_table[] = {
    {"math.add", KC_TOP_BINARY, KC_EW_ADD},
    {"__operators__.add", KC_TOP_BINARY, KC_EW_ADD},
    {"math.subtract", KC_TOP_BINARY, KC_EW_SUB},
    {"math.multiply", KC_TOP_BINARY, KC_EW_MUL},
    {"math.truediv", KC_TOP_BINARY, KC_EW_DIV},
    {"math.divide", KC_TOP_BINARY, KC_EW_DIV},
    {"math.maximum", KC_TOP_BINARY, KC_EW_MAX},
    {"math.minimum", KC_TOP_BINARY, KC_EW_MIN},
    {"math.pow", KC_TOP_BINARY, KC_EW_POW},
    {"math.squared_difference", KC_TOP_BINARY, KC_EW_SQUARED_DIFF},
    {"math.negative", KC_TOP_UNARY, KC_EW_NEG},
    {"math.abs", KC_TOP_UNARY, KC_EW_ABS},
    {"math.sqrt", KC_TOP_UNARY, KC_EW_SQRT},
    {"math.rsqrt", KC_TOP_UNARY, KC_EW_RSQRT},
    {"math.square", KC_TOP_UNARY, KC_EW_SQUARE},
    {"math.exp", KC_TOP_UNARY, KC_EW_EXP},
    {"math.log", KC_TOP_UNARY, KC_EW_LOG},
    {"math.tanh", KC_TOP_UNARY, KC_EW_TANH},
    {"math.sigmoid", KC_TOP_UNARY, KC_EW_SIGMOID},
    {"math.erf", KC_TOP_UNARY, KC_EW_ERF},
    {"math.reciprocal", KC_TOP_UNARY, KC_EW_RECIPROCAL},
    {"math.floor", KC_TOP_UNARY, KC_EW_FLOOR},
    {"math.ceil", KC_TOP_UNARY, KC_EW_CEIL},
    {"math.softplus", KC_TOP_UNARY, KC_EW_SOFTPLUS},
    {"nn.softsign", KC_TOP_UNARY, KC_EW_SOFTSIGN},
    {"math.softsign", KC_TOP_UNARY, KC_EW_SOFTSIGN},
    {"nn.relu", KC_TOP_UNARY, KC_EW_RELU},
    {"nn.relu6", KC_TOP_UNARY, KC_EW_RELU6},
    {"nn.silu", KC_TOP_UNARY, KC_EW_SILU},
    {"nn.swish", KC_TOP_UNARY, KC_EW_SILU},
    {"nn.gelu", KC_TOP_UNARY, KC_EW_GELU},
    {"nn.elu", KC_TOP_UNARY, KC_EW_ELU},
    {"nn.selu", KC_TOP_UNARY, KC_EW_SELU},
    {"nn.leaky_relu", KC_TOP_UNARY, KC_EW_LEAKY_RELU},
    {"identity", KC_TOP_IDENTITY, KC_EW_NONE},
    {"nn.softmax", KC_TOP_SOFTMAX, KC_EW_NONE},
    {"clip_by_value", KC_TOP_CLIP, KC_EW_NONE},
    {"math.reduce_mean", KC_TOP_REDUCE, KC_REDUCE_MEAN},
    {"math.reduce_sum", KC_TOP_REDUCE, KC_REDUCE_SUM},
    {"math.reduce_max", KC_TOP_REDUCE, KC_REDUCE_MAX},
    {"math.reduce_min", KC_TOP_REDUCE, KC_REDUCE_MIN},
    {"math.reduce_prod", KC_TOP_REDUCE, KC_REDUCE_PROD},
    {"reshape", KC_TOP_RESHAPE, KC_EW_NONE},
    {"transpose", KC_TOP_TRANSPOSE, KC_EW_NONE},
    {"compat.v1.transpose", KC_TOP_TRANSPOSE, KC_EW_NONE},
    {"concat", KC_TOP_CONCAT, KC_EW_NONE},
    {"expand_dims", KC_TOP_EXPAND_DIMS, KC_EW_NONE},
    {"compat.v1.expand_dims", KC_TOP_EXPAND_DIMS, KC_EW_NONE},
    {"squeeze", KC_TOP_SQUEEZE, KC_EW_NONE},
    {"compat.v1.squeeze", KC_TOP_SQUEEZE, KC_EW_NONE},
    {"cast", KC_TOP_CAST, KC_EW_NONE},
    {"__operators__.getitem", KC_TOP_SLICE, KC_EW_NONE},
    {"linalg.matmul", KC_TOP_MATMUL, KC_EW_NONE},
};

#define KC_TFOP_N (sizeof kc_tfop_table / sizeof kc_tfop_table[0])

static kc_status kc_tfop_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_top_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    const char *fn;
    KC_TRY(kc_cfg_str(layer->config, "function", NULL, &fn));
    if (!fn)
        return kc_fail(KC_ERR_FORMAT, "%s has no 'function'", layer->def->class_name);
    for (size_t i = 0; i < KC_TFOP_N; i++)
        if (strcmp(kc_tfop_table[i].function, fn) == 0) {
            a->kind = kc_tfop_table[i].kind;
            a->op_name = kc_tfop_table[i].function;
            if (a->kind == KC_TOP_REDUCE)
                a->reduce = (kc_reduce_op)kc_tfop_table[i].sub;
            else
                a->ew = (kc_ew_op)kc_tfop_table[i].sub;
            return KC_OK;
        }
    return kc_fail(KC_ERR_UNSUPPORTED, "TFOpLambda function '%s' is not supported", fn);
}

/* ------------------------------------------------------------ operands */

static int kc_tfop_positional(const kc_op_ctx *ctx, int nth)
{
    for (int i = 0; i < ctx->n_in; i++)
        if (!(ctx->in_roles && ctx->in_roles[i]) && nth-- == 0)
            return i;
    return -1;
}

static void kc_tfop_input(const kc_op_ctx *ctx, int idx, kc_operand *o)
{
    memset(o, 0, sizeof *o);
    o->kind = KC_OPND_INPUT;
    o->index = idx;
    o->shape = ctx->in[idx];
}

/* The first argument: a _CONSTANT_VALUE (consts at position 0) or the
 * first positional tensor, or a tensor passed by its keyword. */
static kc_status kc_tfop_first(const kc_op_ctx *ctx, const char *kw, kc_operand *o)
{
    memset(o, 0, sizeof *o);
    for (int k = 0; k < ctx->n_consts; k++)
        if (ctx->consts[k].position == 0) {
            o->kind = KC_OPND_CONST;
            o->index = k;
            o->shape = ctx->consts[k].shape;
            return KC_OK;
        }
    int idx = kc_tfop_positional(ctx, 0);
    if (idx < 0 && kw)
        idx = kc_op_input_by_role(ctx, kw);
    if (idx < 0)
        return kc_fail(KC_ERR_FORMAT, "first argument is missing");
    kc_tfop_input(ctx, idx, o);
    return KC_OK;
}

/* A keyword number becomes a scalar, a keyword list an inline constant. */
static kc_status kc_tfop_kw_const(kc_top_attrs *a, const cJSON *v, kc_operand *o)
{
    memset(o, 0, sizeof *o);
    if (cJSON_IsNumber(v)) {
        o->kind = KC_OPND_SCALAR;
        o->scalar = v->valuedouble;
        return KC_OK;
    }
    int64_t count;
    o->kind = KC_OPND_INLINE;
    return kc_json_values(v, a->inline_data, KC_TOP_INLINE_MAX, &o->shape, &count);
}

/* The second operand (`y`, `b`): keyword tensor, keyword constant, a
 * constant at position 1, or a second positional tensor. */
static kc_status kc_tfop_second(const kc_op_ctx *ctx, kc_top_attrs *a, const char *kw,
                                kc_operand *o)
{
    int idx = kc_op_input_by_role(ctx, kw);
    if (idx >= 0) {
        kc_tfop_input(ctx, idx, o);
        return KC_OK;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(ctx->call_kwargs, kw);
    if (v && !cJSON_IsNull(v))
        return kc_tfop_kw_const(a, v, o);
    for (int k = 0; k < ctx->n_consts; k++)
        if (ctx->consts[k].position == 1) {
            memset(o, 0, sizeof *o);
            o->kind = KC_OPND_CONST;
            o->index = k;
            o->shape = ctx->consts[k].shape;
            return KC_OK;
        }
    int nth = a->operand[0].kind == KC_OPND_INPUT ? 1 : 0;
    idx = kc_tfop_positional(ctx, nth);
    if (idx < 0)
        return kc_fail(KC_ERR_FORMAT, "argument '%s' is missing", kw);
    kc_tfop_input(ctx, idx, o);
    return KC_OK;
}

/* Keyword tensors other than the operands (a tensor axis or shape) would
 * make the shape data-dependent. */
static kc_status kc_tfop_check_roles(const kc_op_ctx *ctx, const kc_top_attrs *a)
{
    const char *ok1 = a->kind == KC_TOP_MATMUL ? "a" : a->kind == KC_TOP_CONCAT ? "values" : "x";
    const char *ok2 = a->kind == KC_TOP_MATMUL ? "b" : a->kind == KC_TOP_BINARY ? "y" : NULL;
    for (int i = 0; ctx->in_roles && i < ctx->n_in; i++) {
        const char *r = ctx->in_roles[i];
        if (r && strcmp(r, ok1) != 0 && (!ok2 || strcmp(r, ok2) != 0))
            return kc_fail(KC_ERR_UNSUPPORTED, "tensor-valued argument '%s' of %s is not "
                           "supported", r, a->op_name);
    }
    return KC_OK;
}

/* ---------------------------------------------------------- parameters */

static const cJSON *kc_tfop_kw(const kc_op_ctx *ctx, const char *key, const char *alias)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(ctx->call_kwargs, key);
    if ((!v || cJSON_IsNull(v)) && alias)
        v = cJSON_GetObjectItemCaseSensitive(ctx->call_kwargs, alias);
    return v;
}

static kc_status kc_tfop_int_kw(const kc_op_ctx *ctx, const char *key, const char *alias,
                                int dflt, int required, int *out)
{
    const cJSON *v = kc_tfop_kw(ctx, key, alias);
    int axes[KC_MAX_RANK], n;
    if (cJSON_IsArray(v))
        return kc_fail(KC_ERR_UNSUPPORTED, "'%s' must be a single axis", key);
    KC_TRY(kc_top_read_axes(v, key, axes, &n));
    if (n < 0 && required)
        return kc_fail(KC_ERR_FORMAT, "'%s' is missing", key);
    *out = n < 0 ? dflt : axes[0];
    return KC_OK;
}

static kc_status kc_tfop_bool_kw(const kc_op_ctx *ctx, const char *key, const char *alias,
                                 int dflt, int *out)
{
    const cJSON *v = kc_tfop_kw(ctx, key, alias);
    *out = dflt;
    if (!v || cJSON_IsNull(v))
        return KC_OK;
    if (!cJSON_IsBool(v))
        return kc_fail(KC_ERR_FORMAT, "'%s' is not a boolean", key);
    *out = cJSON_IsTrue(v);
    return KC_OK;
}

static kc_status kc_tfop_number_kw(const kc_op_ctx *ctx, const char *key, double *out)
{
    const cJSON *v = kc_tfop_kw(ctx, key, NULL);
    if (!cJSON_IsNumber(v))
        return kc_fail(KC_ERR_UNSUPPORTED, "'%s' must be a number (tensor-valued bounds are "
                       "not supported)", key);
    *out = v->valuedouble;
    return KC_OK;
}

static kc_status kc_tfop_unary_params(const kc_op_ctx *ctx, kc_top_attrs *a)
{
    int approx;
    double beta = 1.0;
    switch (a->ew) {
    case KC_EW_GELU:
    case KC_EW_GELU_TANH: /* tf.nn.gelu defaults to the exact (erf) form */
        KC_TRY(kc_tfop_bool_kw(ctx, "approximate", NULL, 0, &approx));
        a->ew = approx ? KC_EW_GELU_TANH : KC_EW_GELU;
        return KC_OK;
    case KC_EW_SILU:
        KC_TRY(kc_cfg_float(ctx->call_kwargs, "beta", 1.0, &beta));
        if (beta != 1.0)
            return kc_fail(KC_ERR_UNSUPPORTED, "%s with beta=%g is not supported", a->op_name,
                           beta);
        return KC_OK;
    case KC_EW_LEAKY_RELU:
        return kc_cfg_float(ctx->call_kwargs, "alpha", 0.2, &a->alpha);
    case KC_EW_ELU:
        a->alpha = 1.0;
        return KC_OK;
    default:
        return KC_OK;
    }
}

static kc_status kc_tfop_matmul_params(const kc_op_ctx *ctx, kc_top_attrs *a)
{
    int adj_a, adj_b;
    KC_TRY(kc_tfop_bool_kw(ctx, "transpose_a", NULL, 0, &a->transpose_a));
    KC_TRY(kc_tfop_bool_kw(ctx, "transpose_b", NULL, 0, &a->transpose_b));
    KC_TRY(kc_tfop_bool_kw(ctx, "adjoint_a", NULL, 0, &adj_a));
    KC_TRY(kc_tfop_bool_kw(ctx, "adjoint_b", NULL, 0, &adj_b));
    /* Real tensors: adjoint is transpose. */
    a->transpose_a |= adj_a;
    a->transpose_b |= adj_b;
    return KC_OK;
}

static kc_status kc_tfop_shape_params(const kc_op_ctx *ctx, kc_top_attrs *a)
{
    const cJSON *v;
    switch (a->kind) {
    case KC_TOP_RESHAPE:
        return kc_top_read_shape(kc_tfop_kw(ctx, "shape", NULL), "shape", a->shape,
                                 &a->shape_rank);
    case KC_TOP_TRANSPOSE:
        KC_TRY(kc_top_read_axes(kc_tfop_kw(ctx, "perm", NULL), "perm", a->perm, &a->n_perm));
        if (a->n_perm < 0)
            a->n_perm = 0;
        return KC_OK;
    case KC_TOP_EXPAND_DIMS:
        KC_TRY(kc_tfop_int_kw(ctx, "axis", "dim", 0, 1, &a->axes[0]));
        a->n_axes = 1;
        return KC_OK;
    case KC_TOP_SQUEEZE:
        return kc_top_read_axes(kc_tfop_kw(ctx, "axis", "squeeze_dims"), "axis", a->axes,
                                &a->n_axes);
    case KC_TOP_CAST:
        v = kc_tfop_kw(ctx, "dtype", NULL);
        return kc_top_read_dtype(cJSON_IsString(v) ? v->valuestring : NULL, &a->dtype);
    case KC_TOP_SLICE:
        return kc_top_read_slices(kc_tfop_kw(ctx, "slice_spec", NULL),
                                  a->operand[0].shape.rank, a);
    default:
        return KC_OK;
    }
}

static kc_status kc_tfop_params(const kc_op_ctx *ctx, kc_top_attrs *a)
{
    switch (a->kind) {
    case KC_TOP_UNARY:
        return kc_tfop_unary_params(ctx, a);
    case KC_TOP_CLIP:
        KC_TRY(kc_tfop_number_kw(ctx, "clip_value_min", &a->clip_min));
        return kc_tfop_number_kw(ctx, "clip_value_max", &a->clip_max);
    case KC_TOP_SOFTMAX:
        return kc_tfop_int_kw(ctx, "axis", "dim", -1, 0, &a->axis);
    case KC_TOP_REDUCE:
        KC_TRY(kc_top_read_axes(kc_tfop_kw(ctx, "axis", "reduction_indices"), "axis", a->axes,
                                &a->n_axes));
        return kc_tfop_bool_kw(ctx, "keepdims", "keep_dims", 0, &a->keepdims);
    case KC_TOP_MATMUL:
        return kc_tfop_matmul_params(ctx, a);
    default:
        return kc_tfop_shape_params(ctx, a);
    }
}

/* tf.concat(values, axis): the values list is the first argument, so its
 * tensors are the positional inputs; a constant among them is refused. */
static kc_status kc_tfop_concat(kc_op_ctx *ctx, kc_top_attrs *a)
{
    if (ctx->n_consts > 0)
        return kc_fail(KC_ERR_UNSUPPORTED, "concat of a constant is not supported");
    return kc_tfop_int_kw(ctx, "axis", NULL, 0, 1, &a->axis);
}

static kc_status kc_tfop_infer(kc_op_ctx *ctx)
{
    kc_top_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_tfop_check_roles(ctx, a));
    if (a->kind == KC_TOP_CONCAT) {
        KC_TRY(kc_tfop_concat(ctx, a));
        return kc_top_infer(ctx, a);
    }
    int binary = a->kind == KC_TOP_BINARY || a->kind == KC_TOP_MATMUL;
    a->n_operands = binary ? 2 : 1;
    KC_TRY(kc_tfop_first(ctx, a->kind == KC_TOP_MATMUL ? "a" : "x", &a->operand[0]));
    if (binary)
        KC_TRY(kc_tfop_second(ctx, a, a->kind == KC_TOP_MATMUL ? "b" : "y", &a->operand[1]));
    else if (a->operand[0].kind != KC_OPND_INPUT)
        return kc_fail(KC_ERR_UNSUPPORTED, "%s of a constant", a->op_name);
    KC_TRY(kc_tfop_params(ctx, a));
    return kc_top_infer(ctx, a);
}

static const kc_op_def kc_def_tfop = {"TFOpLambda", KC_OPF_LAYER, kc_tfop_parse, kc_tfop_infer};
static const kc_op_def kc_def_slicing = {"SlicingOpLambda", KC_OPF_LAYER, kc_tfop_parse,
                                         kc_tfop_infer};

const kc_op_def *const kc_ops_tfop[] = {&kc_def_tfop, &kc_def_slicing, NULL};
