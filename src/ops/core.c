/* Core layers: InputLayer, Dense, Activation, Embedding, Masking and the
 * layers that are the identity at inference (dropout, noise, augmentation,
 * regularization). */
#include "ops/core.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "ops/op.h"

/* InputLayer: its shape comes from config; the graph builder turns it into
 * a model input, so infer just reports the declared shape. */
static kc_status kc_input_infer(kc_op_ctx *ctx)
{
    const cJSON *cfg = ctx->layer->config;
    int64_t dims[KC_MAX_RANK];
    int n;
    KC_TRY(kc_cfg_shape(cfg, "batch_shape", KC_MAX_RANK, dims, &n));
    if (n < 0)
        KC_TRY(kc_cfg_shape(cfg, "batch_input_shape", KC_MAX_RANK, dims, &n));
    if (n < 0) {
        int64_t inner[KC_MAX_RANK];
        KC_TRY(kc_cfg_shape(cfg, "input_shape", KC_MAX_RANK - 1, inner, &n));
        if (n < 0)
            KC_TRY(kc_cfg_shape(cfg, "shape", KC_MAX_RANK - 1, inner, &n));
        if (n < 0)
            return kc_fail(KC_ERR_FORMAT, "InputLayer has no batch_shape");
        dims[0] = -1;
        memcpy(dims + 1, inner, (size_t)n * sizeof *dims);
        n++;
    }
    if (n < 1)
        return kc_fail(KC_ERR_FORMAT, "InputLayer shape has no batch dimension");
    ctx->out[0] = kc_shape_make(n, dims);
    ctx->n_out = 1;
    const char *dtype;
    KC_TRY(kc_cfg_str(cfg, "dtype", "float32", &dtype));
    if (strstr(dtype, "int"))
        ctx->out_dtype[0] = strstr(dtype, "64") ? KC_I64 : KC_I32;
    else if (strcmp(dtype, "bool") == 0)
        ctx->out_dtype[0] = KC_BOOL;
    return KC_OK;
}

static kc_status kc_dense_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_dense_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    KC_TRY(kc_cfg_int(layer->config, "units", -1, &a->units));
    if (a->units < 0) /* Keras 1 */
        KC_TRY(kc_cfg_int(layer->config, "output_dim", -1, &a->units));
    if (a->units <= 0 || a->units > ((int64_t)1 << 31))
        return kc_fail(KC_ERR_FORMAT, "Dense units missing or out of range");
    KC_TRY(kc_cfg_bool(layer->config, "use_bias", 1, &a->use_bias));
    if (cJSON_GetObjectItemCaseSensitive(layer->config, "bias") &&
        !cJSON_GetObjectItemCaseSensitive(layer->config, "use_bias"))
        KC_TRY(kc_cfg_bool(layer->config, "bias", 1, &a->use_bias)); /* Keras 1 */
    return kc_cfg_activation(layer->config, "activation", &a->activation);
}

/* Dense applies to the last axis of an N-D input: y = x·W + b. */
static kc_status kc_dense_infer(kc_op_ctx *ctx)
{
    const kc_dense_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    KC_TRY(kc_op_expect_rank(ctx, 0, 2, KC_MAX_RANK));
    int64_t in_features = ctx->in[0].dims[ctx->in[0].rank - 1];
    if (in_features < 0)
        return kc_fail(KC_ERR_SHAPE, "Dense input's last dimension is unknown");
    ctx->out[0] = ctx->in[0];
    ctx->out[0].dims[ctx->in[0].rank - 1] = a->units;
    ctx->n_out = 1;
    kc_op_spec(ctx, "", "kernel", 1, 2, in_features, a->units);
    if (a->use_bias)
        kc_op_spec(ctx, "", "bias", 1, 1, a->units);
    return KC_OK;
}

static kc_status kc_activation_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_activation_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    return kc_cfg_activation(layer->config, "activation", &a->activation);
}

static kc_status kc_identity_infer(kc_op_ctx *ctx)
{
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    return kc_op_same_shape(ctx);
}

static kc_status kc_embedding_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_embedding_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    KC_TRY(kc_cfg_int(layer->config, "input_dim", -1, &a->input_dim));
    KC_TRY(kc_cfg_int(layer->config, "output_dim", -1, &a->output_dim));
    KC_TRY(kc_cfg_bool(layer->config, "mask_zero", 0, &a->mask_zero));
    if (a->input_dim <= 0 || a->output_dim <= 0 || a->input_dim > ((int64_t)1 << 32) ||
        a->output_dim > ((int64_t)1 << 24))
        return kc_fail(KC_ERR_FORMAT, "Embedding input_dim/output_dim missing or out of range");
    return KC_OK;
}

static kc_status kc_embedding_infer(kc_op_ctx *ctx)
{
    const kc_embedding_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    if (ctx->in[0].rank >= KC_MAX_RANK)
        return kc_fail(KC_ERR_SHAPE, "Embedding input rank too large");
    ctx->out[0] = ctx->in[0];
    ctx->out[0].dims[ctx->out[0].rank++] = a->output_dim;
    ctx->n_out = 1;
    kc_op_spec(ctx, "", "embeddings", 1, 2, a->input_dim, a->output_dim);
    return KC_OK;
}

static kc_status kc_masking_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_masking_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    return kc_cfg_float(layer->config, "mask_value", 0.0, &a->mask_value);
}

static const kc_op_def kc_def_input = {"InputLayer", KC_OPF_LAYER | KC_OPF_INPUT, NULL,
                                       kc_input_infer};
static const kc_op_def kc_def_dense = {"Dense", KC_OPF_LAYER, kc_dense_parse, kc_dense_infer};
static const kc_op_def kc_def_activation = {"Activation", KC_OPF_LAYER, kc_activation_parse,
                                            kc_identity_infer};
static const kc_op_def kc_def_embedding = {"Embedding", KC_OPF_LAYER, kc_embedding_parse,
                                           kc_embedding_infer};
static const kc_op_def kc_def_masking = {"Masking", KC_OPF_LAYER, kc_masking_parse,
                                         kc_identity_infer};

/* Identity at inference: the layer exists only for training. */
#define KC_IDENTITY_DEF(var, cls) \
    static const kc_op_def var = {cls, KC_OPF_LAYER | KC_OPF_IDENTITY, NULL, kc_identity_infer}
KC_IDENTITY_DEF(kc_def_dropout, "Dropout");
KC_IDENTITY_DEF(kc_def_spatial_dropout1d, "SpatialDropout1D");
KC_IDENTITY_DEF(kc_def_spatial_dropout2d, "SpatialDropout2D");
KC_IDENTITY_DEF(kc_def_spatial_dropout3d, "SpatialDropout3D");
KC_IDENTITY_DEF(kc_def_gaussian_noise, "GaussianNoise");
KC_IDENTITY_DEF(kc_def_gaussian_dropout, "GaussianDropout");
KC_IDENTITY_DEF(kc_def_alpha_dropout, "AlphaDropout");
KC_IDENTITY_DEF(kc_def_activity_reg, "ActivityRegularization");
KC_IDENTITY_DEF(kc_def_random_flip, "RandomFlip");
KC_IDENTITY_DEF(kc_def_random_rotation, "RandomRotation");
KC_IDENTITY_DEF(kc_def_random_zoom, "RandomZoom");
KC_IDENTITY_DEF(kc_def_random_contrast, "RandomContrast");
KC_IDENTITY_DEF(kc_def_random_translation, "RandomTranslation");
KC_IDENTITY_DEF(kc_def_random_brightness, "RandomBrightness");
KC_IDENTITY_DEF(kc_def_random_saturation, "RandomSaturation");
KC_IDENTITY_DEF(kc_def_random_hue, "RandomHue");
KC_IDENTITY_DEF(kc_def_random_grayscale, "RandomGrayscale");
KC_IDENTITY_DEF(kc_def_random_sharpness, "RandomSharpness");
KC_IDENTITY_DEF(kc_def_random_shear, "RandomShear");
KC_IDENTITY_DEF(kc_def_random_color_jitter, "RandomColorJitter");
KC_IDENTITY_DEF(kc_def_random_erasing, "RandomErasing");
KC_IDENTITY_DEF(kc_def_random_gaussian_blur, "RandomGaussianBlur");
KC_IDENTITY_DEF(kc_def_random_perspective, "RandomPerspective");
KC_IDENTITY_DEF(kc_def_random_posterization, "RandomPosterization");
KC_IDENTITY_DEF(kc_def_random_invert, "RandomInvert");
KC_IDENTITY_DEF(kc_def_random_elastic, "RandomElasticTransform");
KC_IDENTITY_DEF(kc_def_solarization, "Solarization");
KC_IDENTITY_DEF(kc_def_random_color_degen, "RandomColorDegeneration");
KC_IDENTITY_DEF(kc_def_random_height, "RandomHeight");
KC_IDENTITY_DEF(kc_def_random_width, "RandomWidth");
KC_IDENTITY_DEF(kc_def_identity, "Identity");

const kc_op_def *const kc_ops_core[] = {
    &kc_def_input, &kc_def_dense, &kc_def_activation, &kc_def_embedding, &kc_def_masking,
    &kc_def_dropout, &kc_def_spatial_dropout1d, &kc_def_spatial_dropout2d,
    &kc_def_spatial_dropout3d, &kc_def_gaussian_noise, &kc_def_gaussian_dropout,
    &kc_def_alpha_dropout, &kc_def_activity_reg, &kc_def_random_flip, &kc_def_random_rotation,
    &kc_def_random_zoom, &kc_def_random_contrast, &kc_def_random_translation,
    &kc_def_random_brightness, &kc_def_random_saturation, &kc_def_random_hue,
    &kc_def_random_grayscale, &kc_def_random_sharpness, &kc_def_random_shear,
    &kc_def_random_color_jitter, &kc_def_random_erasing, &kc_def_random_gaussian_blur,
    &kc_def_random_perspective, &kc_def_random_posterization, &kc_def_random_invert,
    &kc_def_random_elastic, &kc_def_solarization, &kc_def_random_color_degen,
    &kc_def_random_height, &kc_def_random_width, &kc_def_identity, NULL};
