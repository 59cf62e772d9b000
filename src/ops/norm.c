/* BatchNormalization (moving statistics at inference), LayerNormalization,
 * GroupNormalization, UnitNormalization. Always read epsilon from config:
 * the default differs between layers and applications override it. */
#include "ops/norm.h"

#include "base/mem.h"
#include "ops/op.h"

static kc_status kc_norm_parse_axes(const cJSON *cfg, int dflt, kc_norm_attrs *a)
{
    const cJSON *axis = cJSON_GetObjectItemCaseSensitive(cfg, "axis");
    if (!axis || cJSON_IsNull(axis)) {
        a->axes[0] = dflt;
        a->n_axes = 1;
        return KC_OK;
    }
    if (cJSON_IsNumber(axis)) {
        int64_t v;
        KC_TRY(kc_cfg_int(cfg, "axis", dflt, &v));
        if (v < -8 || v > 8)
            return kc_fail(KC_ERR_FORMAT, "axis %lld out of range", (long long)v);
        a->axes[0] = (int)v;
        a->n_axes = 1;
        return KC_OK;
    }
    int n = cJSON_GetArraySize(axis);
    if (!cJSON_IsArray(axis) || n < 1 || n > 8)
        return kc_fail(KC_ERR_FORMAT, "axis is not an int or a list of 1..8 ints");
    int64_t v[8];
    KC_TRY(kc_cfg_ints(cfg, "axis", n, 0, v));
    for (int i = 0; i < n; i++) {
        if (v[i] < -8 || v[i] > 8)
            return kc_fail(KC_ERR_FORMAT, "axis %lld out of range", (long long)v[i]);
        a->axes[i] = (int)v[i];
    }
    a->n_axes = n;
    return KC_OK;
}

static kc_status kc_norm_parse_common(kc_layer *layer, double eps_default, kc_norm_attrs **out)
{
    const cJSON *cfg = layer->config;
    kc_norm_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    *out = a;
    KC_TRY(kc_norm_parse_axes(cfg, -1, a));
    KC_TRY(kc_cfg_float(cfg, "epsilon", eps_default, &a->epsilon));
    if (!(a->epsilon >= 0))
        return kc_fail(KC_ERR_FORMAT, "epsilon must be >= 0");
    KC_TRY(kc_cfg_bool(cfg, "center", 1, &a->center));
    KC_TRY(kc_cfg_bool(cfg, "scale", 1, &a->scale));
    return kc_cfg_bool(cfg, "rms_scaling", 0, &a->rms_scaling);
}

static kc_status kc_batchnorm_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_norm_attrs *a;
    KC_TRY(kc_norm_parse_common(layer, 1e-3, &a));
    if (a->n_axes != 1)
        return kc_fail(KC_ERR_UNSUPPORTED, "BatchNormalization over several axes");
    int64_t mode;
    KC_TRY(kc_cfg_int(layer->config, "mode", 0, &mode)); /* Keras 1 */
    if (mode != 0)
        return kc_fail(KC_ERR_UNSUPPORTED, "Keras 1 BatchNormalization mode %lld (only mode 0 "
                       "maps to Keras 2+)", (long long)mode);
    int renorm;
    KC_TRY(kc_cfg_bool(layer->config, "renorm", 0, &renorm));
    if (renorm)
        return kc_fail(KC_ERR_UNSUPPORTED, "BatchNormalization renorm=True is not supported");
    return KC_OK;
}

/* Product-free shape of the parameters: the input dims on the axes. */
static kc_status kc_norm_param_shape(kc_op_ctx *ctx, const kc_norm_attrs *a, kc_shape *pshape)
{
    const kc_shape *in = &ctx->in[0];
    pshape->rank = a->n_axes;
    for (int i = 0; i < a->n_axes; i++) {
        int axis;
        KC_TRY(kc_op_axis(ctx, a->axes[i], in->rank, &axis));
        if (axis == 0)
            return kc_fail(KC_ERR_SHAPE, "normalization over the batch axis");
        if (in->dims[axis] < 1)
            return kc_fail(KC_ERR_SHAPE, "normalized axis %d has unknown size", axis);
        pshape->dims[i] = in->dims[axis];
    }
    return KC_OK;
}

static void kc_norm_spec(kc_op_ctx *ctx, const char *name, int trainable, const kc_shape *s)
{
    if (s->rank == 1)
        kc_op_spec(ctx, "", name, trainable, 1, s->dims[0]);
    else if (s->rank == 2)
        kc_op_spec(ctx, "", name, trainable, 2, s->dims[0], s->dims[1]);
    else
        kc_op_spec(ctx, "", name, trainable, 3, s->dims[0], s->dims[1], s->dims[2]);
}

static kc_status kc_batchnorm_infer(kc_op_ctx *ctx)
{
    const kc_norm_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    kc_shape p = {0};
    KC_TRY(kc_norm_param_shape(ctx, a, &p));
    if (a->scale)
        kc_norm_spec(ctx, "gamma", 1, &p);
    if (a->center)
        kc_norm_spec(ctx, "beta", 1, &p);
    kc_norm_spec(ctx, "moving_mean", 0, &p);
    kc_norm_spec(ctx, "moving_variance", 0, &p);
    return kc_op_same_shape(ctx);
}

static kc_status kc_layernorm_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_norm_attrs *a;
    return kc_norm_parse_common(layer, 1e-3, &a);
}

static kc_status kc_layernorm_infer(kc_op_ctx *ctx)
{
    const kc_norm_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    if (a->n_axes > 3)
        return kc_fail(KC_ERR_UNSUPPORTED, "LayerNormalization over more than 3 axes");
    kc_shape p = {0};
    KC_TRY(kc_norm_param_shape(ctx, a, &p));
    if (a->scale || a->rms_scaling)
        kc_norm_spec(ctx, "gamma", 1, &p);
    if (a->center && !a->rms_scaling)
        kc_norm_spec(ctx, "beta", 1, &p);
    return kc_op_same_shape(ctx);
}

static kc_status kc_groupnorm_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_norm_attrs *a;
    KC_TRY(kc_norm_parse_common(layer, 1e-3, &a));
    KC_TRY(kc_cfg_int(layer->config, "groups", 32, &a->groups));
    if (a->groups < 1 && a->groups != -1)
        return kc_fail(KC_ERR_FORMAT, "groups out of range");
    return KC_OK;
}

static kc_status kc_groupnorm_infer(kc_op_ctx *ctx)
{
    const kc_norm_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    kc_shape p = {0};
    KC_TRY(kc_norm_param_shape(ctx, a, &p));
    int64_t groups = a->groups == -1 ? p.dims[0] : a->groups;
    if (p.dims[0] % groups)
        return kc_fail(KC_ERR_SHAPE, "groups %lld does not divide channels %lld",
                       (long long)groups, (long long)p.dims[0]);
    if (a->scale)
        kc_norm_spec(ctx, "gamma", 1, &p);
    if (a->center)
        kc_norm_spec(ctx, "beta", 1, &p);
    return kc_op_same_shape(ctx);
}

static kc_status kc_unitnorm_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_norm_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    return kc_norm_parse_axes(layer->config, -1, a);
}

static kc_status kc_unitnorm_infer(kc_op_ctx *ctx)
{
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    return kc_op_same_shape(ctx);
}

static const kc_op_def kc_def_batchnorm = {"BatchNormalization", KC_OPF_LAYER,
                                           kc_batchnorm_parse, kc_batchnorm_infer};
static const kc_op_def kc_def_batchnorm_v1 = {"BatchNormalizationV1", KC_OPF_LAYER,
                                              kc_batchnorm_parse, kc_batchnorm_infer};
static const kc_op_def kc_def_layernorm = {"LayerNormalization", KC_OPF_LAYER,
                                           kc_layernorm_parse, kc_layernorm_infer};
static const kc_op_def kc_def_groupnorm = {"GroupNormalization", KC_OPF_LAYER,
                                           kc_groupnorm_parse, kc_groupnorm_infer};
static const kc_op_def kc_def_unitnorm = {"UnitNormalization", KC_OPF_LAYER, kc_unitnorm_parse,
                                          kc_unitnorm_infer};

const kc_op_def *const kc_ops_norm[] = {&kc_def_batchnorm, &kc_def_batchnorm_v1,
                                        &kc_def_layernorm, &kc_def_groupnorm,
                                        &kc_def_unitnorm, NULL};
