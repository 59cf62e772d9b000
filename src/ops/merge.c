/* Merge layers: Add, Subtract, Multiply, Average, Maximum, Minimum
 * (broadcasting), Concatenate, Dot. */
#include "ops/merge.h"

#include <string.h>

#include "base/mem.h"
#include "ops/op.h"

static kc_status kc_merge_new(kc_layer *layer, kc_merge_kind kind, kc_merge_attrs **out)
{
    kc_merge_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    a->kind = kind;
    layer->attrs = a;
    *out = a;
    return KC_OK;
}

#define KC_MERGE_PARSER(fn, kind)                                        \
    static kc_status fn(kc_layer *layer, const kc_parse_env *env)        \
    {                                                                    \
        (void)env;                                                       \
        kc_merge_attrs *a;                                               \
        return kc_merge_new(layer, kind, &a);                            \
    }
KC_MERGE_PARSER(kc_add_parse, KC_MERGE_ADD)
KC_MERGE_PARSER(kc_sub_parse, KC_MERGE_SUBTRACT)
KC_MERGE_PARSER(kc_mul_parse, KC_MERGE_MULTIPLY)
KC_MERGE_PARSER(kc_avg_parse, KC_MERGE_AVERAGE)
KC_MERGE_PARSER(kc_max_parse, KC_MERGE_MAXIMUM)
KC_MERGE_PARSER(kc_min_parse, KC_MERGE_MINIMUM)

static kc_status kc_concat_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_merge_attrs *a;
    KC_TRY(kc_merge_new(layer, KC_MERGE_CONCAT, &a));
    int64_t axis;
    KC_TRY(kc_cfg_int(layer->config, "axis", -1, &axis));
    if (axis < -8 || axis > 8)
        return kc_fail(KC_ERR_FORMAT, "Concatenate axis out of range");
    a->axis = (int)axis;
    return KC_OK;
}

static kc_status kc_dot_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_merge_attrs *a;
    KC_TRY(kc_merge_new(layer, KC_MERGE_DOT, &a));
    int64_t axes[2];
    KC_TRY(kc_cfg_ints(layer->config, "axes", 2, -1, axes));
    for (int i = 0; i < 2; i++) {
        if (axes[i] < -8 || axes[i] > 8)
            return kc_fail(KC_ERR_FORMAT, "Dot axes out of range");
        a->dot_axes[i] = (int)axes[i];
    }
    return kc_cfg_bool(layer->config, "normalize", 0, &a->normalize);
}

/* Keras 1's Merge layer (merge([a, b], mode=...)): the modes that map onto
 * a Keras 2 merge layer are loaded as that layer. */
static kc_status kc_keras1_merge_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    const char *mode;
    KC_TRY(kc_cfg_str(layer->config, "mode", "sum", &mode));
    static const struct {
        const char *mode;
        kc_merge_kind kind;
    } modes[] = {{"sum", KC_MERGE_ADD},     {"mul", KC_MERGE_MULTIPLY}, {"ave", KC_MERGE_AVERAGE},
                 {"max", KC_MERGE_MAXIMUM}, {"concat", KC_MERGE_CONCAT}, {"dot", KC_MERGE_DOT}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        if (strcmp(mode, modes[i].mode) != 0)
            continue;
        kc_merge_attrs *a;
        KC_TRY(kc_merge_new(layer, modes[i].kind, &a));
        int64_t axis;
        KC_TRY(kc_cfg_int(layer->config, "concat_axis", -1, &axis));
        if (axis < -8 || axis > 8)
            return kc_fail(KC_ERR_FORMAT, "Merge concat_axis out of range");
        a->axis = (int)axis;
        int64_t axes[2] = {-1, -1};
        if (modes[i].kind == KC_MERGE_DOT)
            KC_TRY(kc_cfg_ints(layer->config, "dot_axes", 2, -1, axes));
        if (axes[0] < -8 || axes[0] > 8 || axes[1] < -8 || axes[1] > 8)
            return kc_fail(KC_ERR_FORMAT, "Merge dot_axes out of range");
        a->dot_axes[0] = (int)axes[0];
        a->dot_axes[1] = (int)axes[1];
        return KC_OK;
    }
    return kc_fail(KC_ERR_UNSUPPORTED, "Keras 1 Merge mode '%s' (a Python function or cos) is "
                   "not supported", mode);
}

static kc_status kc_elementwise_infer(kc_op_ctx *ctx)
{
    const kc_merge_attrs *a = ctx->layer->attrs;
    int exact = a->kind == KC_MERGE_SUBTRACT ? 2 : 0;
    KC_TRY(kc_op_expect_inputs(ctx, exact ? 2 : 1, exact ? 2 : 64));
    kc_shape out = ctx->in[0];
    for (int i = 1; i < ctx->n_in; i++)
        KC_TRY(kc_broadcast(ctx, &out, &ctx->in[i], &out));
    ctx->out[0] = out;
    ctx->n_out = 1;
    return KC_OK;
}

static kc_status kc_concat_infer(kc_op_ctx *ctx)
{
    const kc_merge_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1024));
    kc_shape out = ctx->in[0];
    int axis;
    KC_TRY(kc_op_axis(ctx, a->axis, out.rank, &axis));
    for (int i = 1; i < ctx->n_in; i++) {
        const kc_shape *s = &ctx->in[i];
        if (s->rank != out.rank)
            return kc_fail(KC_ERR_SHAPE, "Concatenate inputs have different ranks");
        for (int d = 0; d < out.rank; d++) {
            if (d == axis)
                continue;
            if (s->dims[d] != out.dims[d] && s->dims[d] >= 0 && out.dims[d] >= 0)
                return kc_fail(KC_ERR_SHAPE, "Concatenate inputs differ on axis %d", d);
            if (out.dims[d] < 0)
                out.dims[d] = s->dims[d];
        }
        if (out.dims[axis] >= 0)
            out.dims[axis] = s->dims[axis] < 0 ? -1 : out.dims[axis] + s->dims[axis];
    }
    ctx->out[0] = out;
    ctx->n_out = 1;
    return KC_OK;
}

/* Dot: batched contraction of axes[0] of x with axes[1] of y; the output
 * is x's remaining dims followed by y's (keras batch_dot). */
static kc_status kc_dot_infer(kc_op_ctx *ctx)
{
    const kc_merge_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 2, 2));
    const kc_shape *x = &ctx->in[0], *y = &ctx->in[1];
    int ax, ay;
    KC_TRY(kc_op_axis(ctx, a->dot_axes[0], x->rank, &ax));
    KC_TRY(kc_op_axis(ctx, a->dot_axes[1], y->rank, &ay));
    if (ax == 0 || ay == 0)
        return kc_fail(KC_ERR_SHAPE, "Dot over the batch axis");
    if (x->dims[ax] != y->dims[ay] && x->dims[ax] >= 0 && y->dims[ay] >= 0)
        return kc_fail(KC_ERR_SHAPE, "Dot axes have sizes %lld and %lld",
                       (long long)x->dims[ax], (long long)y->dims[ay]);
    kc_shape out = {.rank = 0};
    out.dims[out.rank++] = x->dims[0];
    for (int i = 1; i < x->rank; i++)
        if (i != ax)
            out.dims[out.rank++] = x->dims[i];
    for (int i = 1; i < y->rank; i++)
        if (i != ay) {
            if (out.rank >= KC_MAX_RANK)
                return kc_fail(KC_ERR_SHAPE, "Dot output rank too large");
            out.dims[out.rank++] = y->dims[i];
        }
    if (out.rank == 1)
        out.dims[out.rank++] = 1;
    ctx->out[0] = out;
    ctx->n_out = 1;
    return KC_OK;
}

#define KC_DEF(var, cls, parse, infer) \
    static const kc_op_def var = {cls, KC_OPF_LAYER, parse, infer}
KC_DEF(kc_def_add, "Add", kc_add_parse, kc_elementwise_infer);
KC_DEF(kc_def_sub, "Subtract", kc_sub_parse, kc_elementwise_infer);
KC_DEF(kc_def_mul, "Multiply", kc_mul_parse, kc_elementwise_infer);
KC_DEF(kc_def_avg, "Average", kc_avg_parse, kc_elementwise_infer);
KC_DEF(kc_def_max, "Maximum", kc_max_parse, kc_elementwise_infer);
KC_DEF(kc_def_min, "Minimum", kc_min_parse, kc_elementwise_infer);
KC_DEF(kc_def_concat, "Concatenate", kc_concat_parse, kc_concat_infer);
KC_DEF(kc_def_dot, "Dot", kc_dot_parse, kc_dot_infer);

static kc_status kc_keras1_merge_infer(kc_op_ctx *ctx)
{
    const kc_merge_attrs *a = ctx->layer->attrs;
    if (a->kind == KC_MERGE_CONCAT)
        return kc_concat_infer(ctx);
    if (a->kind == KC_MERGE_DOT)
        return kc_dot_infer(ctx);
    return kc_elementwise_infer(ctx);
}
KC_DEF(kc_def_keras1_merge, "Merge", kc_keras1_merge_parse, kc_keras1_merge_infer);

const kc_op_def *const kc_ops_merge[] = {&kc_def_add, &kc_def_sub,    &kc_def_mul,
                                         &kc_def_avg, &kc_def_max,    &kc_def_min,
                                         &kc_def_concat, &kc_def_dot,
                                         &kc_def_keras1_merge, NULL};
