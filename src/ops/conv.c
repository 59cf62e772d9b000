/* Convolutions: Conv1D/2D/3D (incl. groups and Keras 1 Convolution*),
 * Conv1D/2D/3DTranspose, DepthwiseConv1D/2D, SeparableConv1D/2D.
 * Shapes follow TF arithmetic (keras-formats.md §5.2); kernels use the
 * Keras layouts of §5.1. */
#include "ops/conv.h"

#include <string.h>

#include "base/mem.h"
#include "ops/op.h"

#define KC_CONV_MAX_DIM ((int64_t)1 << 20)

static kc_status kc_conv_check_positive(const char *what, const int64_t *v, int n)
{
    for (int i = 0; i < n; i++)
        if (v[i] < 1 || v[i] > KC_CONV_MAX_DIM)
            return kc_fail(KC_ERR_FORMAT, "%s %lld out of range", what, (long long)v[i]);
    return KC_OK;
}

/* Keras 1: Convolution2D(nb_filter, nb_row, nb_col, subsample=...). */
static kc_status kc_conv_parse_keras1(const cJSON *cfg, kc_conv_attrs *a)
{
    KC_TRY(kc_cfg_int(cfg, "nb_filter", -1, &a->filters));
    if (a->spatial == 1) {
        KC_TRY(kc_cfg_int(cfg, "filter_length", -1, &a->kernel[0]));
        KC_TRY(kc_cfg_ints(cfg, "subsample_length", 1, 1, a->strides));
    } else if (a->spatial == 2) {
        KC_TRY(kc_cfg_int(cfg, "nb_row", -1, &a->kernel[0]));
        KC_TRY(kc_cfg_int(cfg, "nb_col", -1, &a->kernel[1]));
        KC_TRY(kc_cfg_ints(cfg, "subsample", 2, 1, a->strides));
    } else {
        return kc_fail(KC_ERR_UNSUPPORTED, "Keras 1 3-D convolution is not supported");
    }
    KC_TRY(kc_cfg_ints(cfg, "atrous_rate", a->spatial, 1, a->dilation));
    return KC_OK;
}

static kc_status kc_conv_parse_common(kc_layer *layer, kc_conv_kind kind, int spatial)
{
    const cJSON *cfg = layer->config;
    kc_conv_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    a->kind = kind;
    a->spatial = spatial;
    KC_TRY(kc_cfg_channels_last(cfg));
    if (cJSON_GetObjectItemCaseSensitive(cfg, "nb_filter")) {
        KC_TRY(kc_conv_parse_keras1(cfg, a));
    } else {
        KC_TRY(kc_cfg_int(cfg, "filters", kind == KC_CONV_DEPTHWISE ? 0 : -1, &a->filters));
        KC_TRY(kc_cfg_ints(cfg, "kernel_size", spatial, -1, a->kernel));
        KC_TRY(kc_cfg_ints(cfg, "strides", spatial, 1, a->strides));
        KC_TRY(kc_cfg_ints(cfg, "dilation_rate", spatial, 1, a->dilation));
    }
    if (kind != KC_CONV_DEPTHWISE && (a->filters < 1 || a->filters > KC_CONV_MAX_DIM))
        return kc_fail(KC_ERR_FORMAT, "filters missing or out of range");
    KC_TRY(kc_conv_check_positive("kernel_size", a->kernel, spatial));
    KC_TRY(kc_conv_check_positive("strides", a->strides, spatial));
    KC_TRY(kc_conv_check_positive("dilation_rate", a->dilation, spatial));
    KC_TRY(kc_cfg_padding(cfg, spatial == 1 && kind != KC_CONV_TRANSPOSE, &a->padding));
    KC_TRY(kc_cfg_int(cfg, "groups", 1, &a->groups));
    if (a->groups < 1 || (a->filters && a->filters % a->groups))
        return kc_fail(KC_ERR_FORMAT, "groups %lld does not divide filters %lld",
                       (long long)a->groups, (long long)a->filters);
    KC_TRY(kc_cfg_int(cfg, "depth_multiplier", 1, &a->depth_multiplier));
    if (a->depth_multiplier < 1 || a->depth_multiplier > KC_CONV_MAX_DIM)
        return kc_fail(KC_ERR_FORMAT, "depth_multiplier out of range");
    for (int i = 0; i < 3; i++)
        a->output_padding[i] = -1;
    if (kind == KC_CONV_TRANSPOSE) {
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(cfg, "output_padding");
        if (op && !cJSON_IsNull(op))
            KC_TRY(kc_cfg_ints(cfg, "output_padding", spatial, 0, a->output_padding));
    }
    int bias_key_present = cJSON_GetObjectItemCaseSensitive(cfg, "use_bias") != NULL;
    KC_TRY(kc_cfg_bool(cfg, bias_key_present ? "use_bias" : "bias", 1, &a->use_bias));
    return kc_cfg_activation(cfg, "activation", &a->activation);
}

#define KC_CONV_PARSER(fn, kind, spatial)                                   \
    static kc_status fn(kc_layer *layer, const kc_parse_env *env)           \
    {                                                                       \
        (void)env;                                                          \
        return kc_conv_parse_common(layer, kind, spatial);                  \
    }
KC_CONV_PARSER(kc_conv1d_parse, KC_CONV_PLAIN, 1)
KC_CONV_PARSER(kc_conv2d_parse, KC_CONV_PLAIN, 2)
KC_CONV_PARSER(kc_conv3d_parse, KC_CONV_PLAIN, 3)
KC_CONV_PARSER(kc_conv1dt_parse, KC_CONV_TRANSPOSE, 1)
KC_CONV_PARSER(kc_conv2dt_parse, KC_CONV_TRANSPOSE, 2)
KC_CONV_PARSER(kc_conv3dt_parse, KC_CONV_TRANSPOSE, 3)
KC_CONV_PARSER(kc_dwconv1d_parse, KC_CONV_DEPTHWISE, 1)
KC_CONV_PARSER(kc_dwconv2d_parse, KC_CONV_DEPTHWISE, 2)
KC_CONV_PARSER(kc_sepconv1d_parse, KC_CONV_SEPARABLE, 1)
KC_CONV_PARSER(kc_sepconv2d_parse, KC_CONV_SEPARABLE, 2)

/* Transposed conv output length (keras conv_utils.deconv_output_length). */
static int64_t kc_deconv_out_len(int64_t in, int64_t k, int64_t stride, int64_t dilation,
                                 int same, int64_t out_pad)
{
    if (in < 0)
        return -1;
    int64_t keff = (k - 1) * dilation + 1;
    if (out_pad < 0)
        return same ? in * stride : in * stride + (keff - stride > 0 ? keff - stride : 0);
    int64_t pad = same ? keff / 2 : 0;
    return (in - 1) * stride + keff - 2 * pad + out_pad;
}

static kc_status kc_conv_infer(kc_op_ctx *ctx)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    KC_TRY(kc_op_expect_rank(ctx, 0, a->spatial + 2, a->spatial + 2));
    const kc_shape *in = &ctx->in[0];
    int64_t cin = in->dims[in->rank - 1];
    if (cin < 1)
        return kc_fail(KC_ERR_SHAPE, "input channel dimension is unknown");
    kc_shape out = *in;
    for (int i = 0; i < a->spatial; i++) {
        int64_t len = in->dims[1 + i];
        if (a->kind == KC_CONV_TRANSPOSE)
            out.dims[1 + i] = kc_deconv_out_len(len, a->kernel[i], a->strides[i],
                                                a->dilation[i], a->padding == 1,
                                                a->output_padding[i]);
        else
            out.dims[1 + i] = kc_conv_out_len(len, a->kernel[i], a->strides[i], a->dilation[i],
                                              a->padding != 0);
    }
    int64_t k0 = a->kernel[0], k1 = a->kernel[1], k2 = a->kernel[2];
    int64_t cout;
    switch (a->kind) {
    case KC_CONV_PLAIN:
        if (cin % a->groups)
            return kc_fail(KC_ERR_SHAPE, "groups %lld does not divide input channels %lld",
                           (long long)a->groups, (long long)cin);
        cout = a->filters;
        if (a->spatial == 1)
            kc_op_spec(ctx, "", "kernel", 1, 3, k0, cin / a->groups, cout);
        else if (a->spatial == 2)
            kc_op_spec(ctx, "", "kernel", 1, 4, k0, k1, cin / a->groups, cout);
        else
            kc_op_spec(ctx, "", "kernel", 1, 5, k0, k1, k2, cin / a->groups, cout);
        break;
    case KC_CONV_TRANSPOSE:
        cout = a->filters;
        if (a->spatial == 1)
            kc_op_spec(ctx, "", "kernel", 1, 3, k0, cout, cin);
        else if (a->spatial == 2)
            kc_op_spec(ctx, "", "kernel", 1, 4, k0, k1, cout, cin);
        else
            kc_op_spec(ctx, "", "kernel", 1, 5, k0, k1, k2, cout, cin);
        break;
    case KC_CONV_DEPTHWISE:
        cout = cin * a->depth_multiplier;
        if (a->spatial == 1)
            kc_op_spec(ctx, "", "depthwise_kernel", 1, 3, k0, cin, a->depth_multiplier);
        else
            kc_op_spec(ctx, "", "depthwise_kernel", 1, 4, k0, k1, cin, a->depth_multiplier);
        break;
    default: /* separable */
        cout = a->filters;
        if (a->spatial == 1) {
            kc_op_spec(ctx, "", "depthwise_kernel", 1, 3, k0, cin, a->depth_multiplier);
            kc_op_spec(ctx, "", "pointwise_kernel", 1, 3, (int64_t)1,
                       cin * a->depth_multiplier, cout);
        } else {
            kc_op_spec(ctx, "", "depthwise_kernel", 1, 4, k0, k1, cin, a->depth_multiplier);
            kc_op_spec(ctx, "", "pointwise_kernel", 1, 4, (int64_t)1, (int64_t)1,
                       cin * a->depth_multiplier, cout);
        }
        break;
    }
    if (a->use_bias)
        kc_op_spec(ctx, "", "bias", 1, 1, cout);
    out.dims[out.rank - 1] = cout;
    ctx->out[0] = out;
    ctx->n_out = 1;
    return KC_OK;
}

#define KC_CONV_DEF(var, cls, parser) \
    static const kc_op_def var = {cls, KC_OPF_LAYER, parser, kc_conv_infer}
KC_CONV_DEF(kc_def_conv1d, "Conv1D", kc_conv1d_parse);
KC_CONV_DEF(kc_def_conv2d, "Conv2D", kc_conv2d_parse);
KC_CONV_DEF(kc_def_conv3d, "Conv3D", kc_conv3d_parse);
KC_CONV_DEF(kc_def_convolution1d, "Convolution1D", kc_conv1d_parse);
KC_CONV_DEF(kc_def_convolution2d, "Convolution2D", kc_conv2d_parse);
KC_CONV_DEF(kc_def_convolution3d, "Convolution3D", kc_conv3d_parse);
KC_CONV_DEF(kc_def_conv1dt, "Conv1DTranspose", kc_conv1dt_parse);
KC_CONV_DEF(kc_def_conv2dt, "Conv2DTranspose", kc_conv2dt_parse);
KC_CONV_DEF(kc_def_conv3dt, "Conv3DTranspose", kc_conv3dt_parse);
KC_CONV_DEF(kc_def_deconvolution2d, "Deconvolution2D", kc_conv2dt_parse);
KC_CONV_DEF(kc_def_dwconv1d, "DepthwiseConv1D", kc_dwconv1d_parse);
KC_CONV_DEF(kc_def_dwconv2d, "DepthwiseConv2D", kc_dwconv2d_parse);
KC_CONV_DEF(kc_def_sepconv1d, "SeparableConv1D", kc_sepconv1d_parse);
KC_CONV_DEF(kc_def_sepconv2d, "SeparableConv2D", kc_sepconv2d_parse);
KC_CONV_DEF(kc_def_sepconvolution2d, "SeparableConvolution2D", kc_sepconv2d_parse);
KC_CONV_DEF(kc_def_atrous1d, "AtrousConvolution1D", kc_conv1d_parse);
KC_CONV_DEF(kc_def_atrous2d, "AtrousConvolution2D", kc_conv2d_parse);

const kc_op_def *const kc_ops_conv[] = {
    &kc_def_conv1d, &kc_def_conv2d, &kc_def_conv3d, &kc_def_convolution1d,
    &kc_def_convolution2d, &kc_def_convolution3d, &kc_def_conv1dt, &kc_def_conv2dt,
    &kc_def_conv3dt, &kc_def_deconvolution2d, &kc_def_dwconv1d, &kc_def_dwconv2d,
    &kc_def_sepconv1d, &kc_def_sepconv2d, &kc_def_sepconvolution2d, &kc_def_atrous1d,
    &kc_def_atrous2d, NULL};
