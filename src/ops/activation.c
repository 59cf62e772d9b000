/* Activation layers with parameters: ReLU, LeakyReLU, PReLU, ELU, Softmax,
 * ThresholdedReLU. (The Activation layer with a name is in core.c.) */
#include "ops/activation.h"

#include "base/mem.h"
#include "ops/op.h"

static kc_status kc_act_new(kc_layer *layer, kc_act_layer_kind kind, kc_act_layer_attrs **out)
{
    kc_act_layer_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    a->kind = kind;
    a->max_value = -1;
    layer->attrs = a;
    *out = a;
    return KC_OK;
}

static kc_status kc_relu_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_act_layer_attrs *a;
    KC_TRY(kc_act_new(layer, KC_ACT_RELU, &a));
    KC_TRY(kc_cfg_float(layer->config, "max_value", -1, &a->max_value));
    KC_TRY(kc_cfg_float(layer->config, "negative_slope", 0, &a->negative_slope));
    return kc_cfg_float(layer->config, "threshold", 0, &a->threshold);
}

static kc_status kc_leaky_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_act_layer_attrs *a;
    KC_TRY(kc_act_new(layer, KC_ACT_LEAKY, &a));
    /* Keras 2 key alpha, Keras 3 negative_slope; both default 0.3. */
    KC_TRY(kc_cfg_float(layer->config, "alpha", 0.3, &a->negative_slope));
    return kc_cfg_float(layer->config, "negative_slope", a->negative_slope, &a->negative_slope);
}

static kc_status kc_elu_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_act_layer_attrs *a;
    KC_TRY(kc_act_new(layer, KC_ACT_ELU, &a));
    return kc_cfg_float(layer->config, "alpha", 1.0, &a->alpha);
}

static kc_status kc_thresholded_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_act_layer_attrs *a;
    KC_TRY(kc_act_new(layer, KC_ACT_THRESHOLDED, &a));
    return kc_cfg_float(layer->config, "theta", 1.0, &a->alpha);
}

static kc_status kc_int_list(const cJSON *cfg, const char *key, int dflt, int *out, int *n)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!item || cJSON_IsNull(item)) {
        *n = dflt == 0 ? 0 : 1;
        out[0] = dflt;
        return KC_OK;
    }
    int count = cJSON_IsArray(item) ? cJSON_GetArraySize(item) : 1;
    if (count > 8)
        return kc_fail(KC_ERR_FORMAT, "'%s' has more than 8 entries", key);
    int64_t v[8];
    KC_TRY(kc_cfg_ints(cfg, key, count, 0, v));
    for (int i = 0; i < count; i++) {
        if (v[i] < -8 || v[i] > 8)
            return kc_fail(KC_ERR_FORMAT, "'%s' entry out of range", key);
        out[i] = (int)v[i];
    }
    *n = count;
    return KC_OK;
}

static kc_status kc_softmax_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_act_layer_attrs *a;
    KC_TRY(kc_act_new(layer, KC_ACT_SOFTMAX, &a));
    return kc_int_list(layer->config, "axis", -1, a->axes, &a->n_axes);
}

static kc_status kc_prelu_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_act_layer_attrs *a;
    KC_TRY(kc_act_new(layer, KC_ACT_PRELU, &a));
    return kc_int_list(layer->config, "shared_axes", 0, a->shared_axes, &a->n_shared_axes);
}

static kc_status kc_act_infer(kc_op_ctx *ctx)
{
    KC_TRY(kc_op_expect_inputs(ctx, 1, 2)); /* Softmax may take a mask */
    const kc_act_layer_attrs *a = ctx->layer->attrs;
    const kc_shape *in = &ctx->in[0];
    if (a->kind == KC_ACT_SOFTMAX)
        for (int i = 0; i < a->n_axes; i++) {
            int axis;
            KC_TRY(kc_op_axis(ctx, a->axes[i], in->rank, &axis));
        }
    if (a->kind == KC_ACT_PRELU) {
        /* alpha has the input's shape without batch; shared axes are 1. */
        kc_weight_spec *spec = NULL;
        kc_op_spec(ctx, "", "alpha", 1, 0);
        if (ctx->first_call)
            spec = &ctx->layer->specs[ctx->layer->n_specs - 1];
        kc_shape s = {.rank = in->rank - 1};
        for (int i = 1; i < in->rank; i++) {
            if (in->dims[i] < 1)
                return kc_fail(KC_ERR_SHAPE, "PReLU input has an unknown dimension");
            s.dims[i - 1] = in->dims[i];
        }
        for (int i = 0; i < a->n_shared_axes; i++) {
            int axis = a->shared_axes[i];
            if (axis < 1 || axis >= in->rank)
                return kc_fail(KC_ERR_SHAPE, "PReLU shared axis %d out of range", axis);
            s.dims[axis - 1] = 1;
        }
        if (spec)
            spec->shape = s;
    }
    return kc_op_same_shape(ctx);
}

static const kc_op_def kc_def_relu = {"ReLU", KC_OPF_LAYER, kc_relu_parse, kc_act_infer};
static const kc_op_def kc_def_leaky = {"LeakyReLU", KC_OPF_LAYER, kc_leaky_parse, kc_act_infer};
static const kc_op_def kc_def_prelu = {"PReLU", KC_OPF_LAYER, kc_prelu_parse, kc_act_infer};
static const kc_op_def kc_def_elu = {"ELU", KC_OPF_LAYER, kc_elu_parse, kc_act_infer};
static const kc_op_def kc_def_softmax = {"Softmax", KC_OPF_LAYER, kc_softmax_parse,
                                         kc_act_infer};
static const kc_op_def kc_def_thresholded = {"ThresholdedReLU", KC_OPF_LAYER,
                                             kc_thresholded_parse, kc_act_infer};

const kc_op_def *const kc_ops_activation[] = {&kc_def_relu,    &kc_def_leaky,
                                              &kc_def_prelu,   &kc_def_elu,
                                              &kc_def_softmax, &kc_def_thresholded, NULL};
