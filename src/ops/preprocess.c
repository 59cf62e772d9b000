/* In-model preprocessing layers (Rescaling, Resizing, CenterCrop,
 * Normalization) and keras.applications' own helper layers (ConvNeXt's
 * LayerScale and StochasticDepth, InceptionResNetV2's CustomScaleLayer),
 * which appear in saved application models as registered classes. */
#include "ops/preprocess.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "ops/elementwise.h"
#include "ops/op.h"

#define KC_PP_MAX_VALUES ((int64_t)1 << 20)
#define KC_PP_MAX_SIZE ((int64_t)1 << 20)

/* A scalar/list/nested-list constant from config (or its default when
 * absent): count and shape, values copied into dst when non-NULL. */
static kc_status kc_pp_values(const cJSON *cfg, const char *key, float dflt, float *dst,
                              kc_shape *shape, int64_t *count)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!v || cJSON_IsNull(v)) {
        memset(shape, 0, sizeof *shape);
        *count = 1;
        if (dst)
            dst[0] = dflt;
        return KC_OK;
    }
    kc_status st = kc_json_values(v, dst, KC_PP_MAX_VALUES, shape, count);
    if (st != KC_OK)
        return kc_fail_context(st, "config '%s'", key);
    return KC_OK;
}

/* -------------------------------------------------------- Rescaling */

static kc_status kc_rescaling_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    const cJSON *cfg = layer->config;
    kc_shape ss, os;
    int64_t ns, no;
    if (!cJSON_GetObjectItemCaseSensitive(cfg, "scale"))
        return kc_fail(KC_ERR_FORMAT, "Rescaling has no 'scale'");
    KC_TRY(kc_pp_values(cfg, "scale", 1.0f, NULL, &ss, &ns));
    KC_TRY(kc_pp_values(cfg, "offset", 0.0f, NULL, &os, &no));
    /* One block: struct then scale values then offset values. */
    kc_rescaling_attrs *a = kc_calloc(1, sizeof *a + (size_t)(ns + no) * sizeof(float));
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    a->scale = (float *)(a + 1);
    a->offset = a->scale + ns;
    a->n_scale = ns;
    a->n_offset = no;
    KC_TRY(kc_pp_values(cfg, "scale", 1.0f, a->scale, &a->scale_shape, &ns));
    return kc_pp_values(cfg, "offset", 0.0f, a->offset, &a->offset_shape, &no);
}

static kc_status kc_rescaling_infer(kc_op_ctx *ctx)
{
    const kc_rescaling_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    kc_shape out;
    KC_TRY(kc_broadcast(ctx, &ctx->in[0], &a->scale_shape, &out));
    KC_TRY(kc_broadcast(ctx, &out, &a->offset_shape, &out));
    ctx->out[0] = out;
    ctx->n_out = 1;
    return KC_OK;
}

/* ------------------------------------------------ Resizing, CenterCrop */

static kc_status kc_pp_size(const cJSON *cfg, const char *key, int64_t *out)
{
    KC_TRY(kc_cfg_int(cfg, key, -1, out));
    if (*out < 1 || *out > KC_PP_MAX_SIZE)
        return kc_fail(KC_ERR_FORMAT, "%s %lld missing or out of range (1..%lld)", key,
                       (long long)*out, (long long)KC_PP_MAX_SIZE);
    return KC_OK;
}

static kc_status kc_pp_interpolation(const cJSON *cfg, kc_interpolation *out)
{
    static const char *const names[] = {"bilinear", "nearest",  "bicubic",  "area",
                                        "lanczos3", "lanczos5", "gaussian", "mitchellcubic"};
    const char *name;
    KC_TRY(kc_cfg_str(cfg, "interpolation", "bilinear", &name));
    for (int i = 0; i < (int)(sizeof names / sizeof names[0]); i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (kc_interpolation)i;
            return KC_OK;
        }
    return kc_fail(KC_ERR_UNSUPPORTED, "interpolation '%s' is not supported", name);
}

static kc_status kc_resizing_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_resizing_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    const cJSON *cfg = layer->config;
    KC_TRY(kc_cfg_channels_last(cfg));
    KC_TRY(kc_pp_size(cfg, "height", &a->height));
    KC_TRY(kc_pp_size(cfg, "width", &a->width));
    KC_TRY(kc_pp_interpolation(cfg, &a->interpolation));
    KC_TRY(kc_cfg_bool(cfg, "crop_to_aspect_ratio", 0, &a->crop_to_aspect_ratio));
    KC_TRY(kc_cfg_bool(cfg, "pad_to_aspect_ratio", 0, &a->pad_to_aspect_ratio));
    KC_TRY(kc_cfg_float(cfg, "fill_value", 0.0, &a->fill_value));
    KC_TRY(kc_cfg_bool(cfg, "antialias", 0, &a->antialias));
    if (a->crop_to_aspect_ratio && a->pad_to_aspect_ratio)
        return kc_fail(KC_ERR_FORMAT, "crop_to_aspect_ratio and pad_to_aspect_ratio are "
                       "exclusive");
    return KC_OK;
}

/* RandomCrop at inference: Keras resizes to (height, width) keeping the
 * largest centred window of the target's aspect ratio — a bilinear
 * Resizing with crop_to_aspect_ratio (the identity when sizes match). */
static kc_status kc_random_crop_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_resizing_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    KC_TRY(kc_cfg_channels_last(layer->config));
    KC_TRY(kc_pp_size(layer->config, "height", &a->height));
    KC_TRY(kc_pp_size(layer->config, "width", &a->width));
    a->interpolation = KC_INTERP_BILINEAR;
    a->crop_to_aspect_ratio = 1;
    return KC_OK;
}

static kc_status kc_center_crop_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_center_crop_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    KC_TRY(kc_cfg_channels_last(layer->config));
    KC_TRY(kc_pp_size(layer->config, "height", &a->height));
    return kc_pp_size(layer->config, "width", &a->width);
}

/* Both take (batch, h, w, c) or unbatched (h, w, c) and set h, w. */
static kc_status kc_pp_image_out(kc_op_ctx *ctx, int64_t height, int64_t width)
{
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    KC_TRY(kc_op_expect_rank(ctx, 0, 3, 4));
    kc_shape out = ctx->in[0];
    out.dims[out.rank - 3] = height;
    out.dims[out.rank - 2] = width;
    ctx->out[0] = out;
    ctx->n_out = 1;
    return KC_OK;
}

static kc_status kc_resizing_infer(kc_op_ctx *ctx)
{
    const kc_resizing_attrs *a = ctx->layer->attrs;
    return kc_pp_image_out(ctx, a->height, a->width);
}

static kc_status kc_center_crop_infer(kc_op_ctx *ctx)
{
    const kc_center_crop_attrs *a = ctx->layer->attrs;
    return kc_pp_image_out(ctx, a->height, a->width);
}

/* ---------------------------------------------------- Normalization */

/* axis: an int, a list, or null (a single scalar mean/variance). */
static kc_status kc_norm_axes(const cJSON *cfg, kc_normalization_attrs *a)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "axis");
    if (!v) {
        a->axes[0] = -1;
        a->n_axes = 1;
        return KC_OK;
    }
    return kc_top_read_axes(v, "axis", a->axes, &a->n_axes);
}

static kc_status kc_norm_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    const cJSON *cfg = layer->config;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cfg, "mean");
    const cJSON *var = cJSON_GetObjectItemCaseSensitive(cfg, "variance");
    int has = m && !cJSON_IsNull(m), has_var = var && !cJSON_IsNull(var);
    if (has != has_var)
        return kc_fail(KC_ERR_FORMAT, "Normalization needs both mean and variance, or neither");
    kc_shape ms = {0}, vs = {0};
    int64_t nm = 0, nv = 0;
    if (has) {
        KC_TRY(kc_pp_values(cfg, "mean", 0.0f, NULL, &ms, &nm));
        KC_TRY(kc_pp_values(cfg, "variance", 1.0f, NULL, &vs, &nv));
    }
    kc_normalization_attrs *a = kc_calloc(1, sizeof *a + (size_t)(nm + nv) * sizeof(float));
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    a->has_constants = has;
    KC_TRY(kc_norm_axes(cfg, a));
    KC_TRY(kc_cfg_bool(cfg, "invert", 0, &a->invert));
    if (!has)
        return KC_OK;
    a->mean = (float *)(a + 1);
    a->variance = a->mean + nm;
    KC_TRY(kc_pp_values(cfg, "mean", 0.0f, a->mean, &a->mean_shape, &nm));
    return kc_pp_values(cfg, "variance", 1.0f, a->variance, &a->variance_shape, &nv);
}

/* Normalise the configured axes against the input rank; their dims must
 * be known (they size the statistics). */
static kc_status kc_norm_keep(kc_op_ctx *ctx, kc_normalization_attrs *a, kc_shape *stats)
{
    const kc_shape *in = &ctx->in[0];
    unsigned mask = 0;
    int keep[KC_MAX_RANK], n = a->n_axes < 0 ? 0 : a->n_axes;
    for (int i = 0; i < n; i++) {
        KC_TRY(kc_op_axis(ctx, a->axes[i], in->rank, &keep[i]));
        if (mask & (1u << keep[i]))
            return kc_fail(KC_ERR_FORMAT, "axis %d repeated", keep[i]);
        mask |= 1u << keep[i];
    }
    stats->rank = 0;
    for (int d = 0; d < in->rank; d++) {
        if (!(mask & (1u << d)))
            continue;
        if (in->dims[d] < 1)
            return kc_fail(KC_ERR_SHAPE, "axis %d has an unknown size", d);
        a->keep[stats->rank] = d;
        stats->dims[stats->rank++] = in->dims[d];
    }
    if (a->rank && a->rank != in->rank)
        return kc_fail(KC_ERR_SHAPE, "called with rank %d after rank %d", in->rank, a->rank);
    a->n_keep = stats->rank;
    a->rank = in->rank;
    return KC_OK;
}

/* Config constants broadcast to the input's shape with 1 off the kept
 * axes (Keras: ops.broadcast_to(mean, broadcast_shape)). */
static kc_status kc_norm_check_constant(kc_op_ctx *ctx, const kc_normalization_attrs *a,
                                        const kc_shape *c, const char *what)
{
    kc_shape target = {.rank = a->rank}, out;
    for (int d = 0; d < a->rank; d++)
        target.dims[d] = 1;
    for (int i = 0; i < a->n_keep; i++)
        target.dims[a->keep[i]] = ctx->in[0].dims[a->keep[i]];
    if (kc_broadcast(ctx, c, &target, &out) != KC_OK || !kc_shape_equal(&out, &target))
        return kc_fail(KC_ERR_SHAPE, "%s does not broadcast to the normalized axes", what);
    return KC_OK;
}

static kc_status kc_norm_infer(kc_op_ctx *ctx)
{
    kc_normalization_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    kc_shape stats;
    KC_TRY(kc_norm_keep(ctx, a, &stats));
    if (a->has_constants) {
        KC_TRY(kc_norm_check_constant(ctx, a, &a->mean_shape, "mean"));
        KC_TRY(kc_norm_check_constant(ctx, a, &a->variance_shape, "variance"));
    } else if (ctx->first_call) {
        if (ctx->layer->n_specs + 3 > KC_MAX_WEIGHT_SPECS)
            return kc_fail(KC_ERR_LIMIT, "more than %d weights", KC_MAX_WEIGHT_SPECS);
        /* Adapted state: non-trainable, mean and variance shaped by the kept
         * axes, count an int64 scalar. */
        kc_weight_spec *s = &ctx->layer->specs[ctx->layer->n_specs];
        const char *names[] = {"mean", "variance", "count"};
        for (int i = 0; i < 3; i++) {
            s[i].group = "";
            s[i].name = names[i];
            s[i].trainable = 0;
            s[i].shape = i < 2 ? stats : (kc_shape){.rank = 0};
        }
        ctx->layer->n_specs += 3;
    }
    return kc_op_same_shape(ctx);
}

/* ------------------------------------- keras.applications helpers */

static kc_status kc_layer_scale_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_layer_scale_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    KC_TRY(kc_cfg_float(layer->config, "init_values", 0.0, &a->init_values));
    KC_TRY(kc_cfg_int(layer->config, "projection_dim", -1, &a->projection_dim));
    if (a->projection_dim < 1 || a->projection_dim > ((int64_t)1 << 24))
        return kc_fail(KC_ERR_FORMAT, "projection_dim %lld missing or out of range",
                       (long long)a->projection_dim);
    return KC_OK;
}

static kc_status kc_layer_scale_infer(kc_op_ctx *ctx)
{
    const kc_layer_scale_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    KC_TRY(kc_op_expect_rank(ctx, 0, 1, KC_MAX_RANK));
    int64_t last = ctx->in[0].dims[ctx->in[0].rank - 1];
    if (last >= 0 && last != a->projection_dim)
        return kc_fail(KC_ERR_SHAPE, "input has %lld channels, projection_dim is %lld",
                       (long long)last, (long long)a->projection_dim);
    kc_op_spec(ctx, "", "gamma", 1, 1, a->projection_dim);
    return kc_op_same_shape(ctx);
}

static kc_status kc_stochastic_depth_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_stochastic_depth_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    return kc_cfg_float(layer->config, "drop_path_rate", 0.0, &a->drop_path_rate);
}

static kc_status kc_pp_identity_infer(kc_op_ctx *ctx)
{
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    return kc_op_same_shape(ctx);
}

static kc_status kc_custom_scale_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_custom_scale_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    if (!cJSON_GetObjectItemCaseSensitive(layer->config, "scale"))
        return kc_fail(KC_ERR_FORMAT, "CustomScaleLayer has no 'scale'");
    return kc_cfg_float(layer->config, "scale", 1.0, &a->scale);
}

static kc_status kc_custom_scale_infer(kc_op_ctx *ctx)
{
    KC_TRY(kc_op_expect_inputs(ctx, 2, 2));
    KC_TRY(kc_broadcast(ctx, &ctx->in[0], &ctx->in[1], &ctx->out[0]));
    ctx->out_dtype[0] = ctx->in_dtype ? ctx->in_dtype[0] : KC_DTYPE_INVALID;
    ctx->n_out = 1;
    return KC_OK;
}

/* -------------------------------------------------------------- table */

static const kc_op_def kc_def_rescaling = {"Rescaling", KC_OPF_LAYER, kc_rescaling_parse,
                                           kc_rescaling_infer};
static const kc_op_def kc_def_random_crop = {"RandomCrop", KC_OPF_LAYER, kc_random_crop_parse,
                                             kc_resizing_infer};
static const kc_op_def kc_def_resizing = {"Resizing", KC_OPF_LAYER, kc_resizing_parse,
                                          kc_resizing_infer};
static const kc_op_def kc_def_center_crop = {"CenterCrop", KC_OPF_LAYER, kc_center_crop_parse,
                                             kc_center_crop_infer};
static const kc_op_def kc_def_normalization = {"Normalization", KC_OPF_LAYER, kc_norm_parse,
                                               kc_norm_infer};
static const kc_op_def kc_def_layer_scale = {"LayerScale", KC_OPF_LAYER, kc_layer_scale_parse,
                                             kc_layer_scale_infer};
static const kc_op_def kc_def_stochastic_depth = {"StochasticDepth",
                                                  KC_OPF_LAYER | KC_OPF_IDENTITY,
                                                  kc_stochastic_depth_parse,
                                                  kc_pp_identity_infer};
static const kc_op_def kc_def_custom_scale = {"CustomScaleLayer", KC_OPF_LAYER,
                                              kc_custom_scale_parse, kc_custom_scale_infer};

const kc_op_def *const kc_ops_preprocess[] = {
    &kc_def_rescaling,   &kc_def_random_crop, &kc_def_resizing,         &kc_def_center_crop, &kc_def_normalization,
    &kc_def_layer_scale, &kc_def_stochastic_depth, &kc_def_custom_scale, NULL};
