/* Max/average pooling, windowed and global, 1-D to 3-D. Average pooling
 * with "same" padding excludes padded cells (keras-formats.md §5.2). */
#include "ops/pool.h"

#include "base/mem.h"
#include "ops/op.h"

static kc_status kc_pool_parse_common(kc_layer *layer, kc_pool_kind kind, int spatial,
                                      int global)
{
    const cJSON *cfg = layer->config;
    kc_pool_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    a->kind = kind;
    a->spatial = spatial;
    a->global = global;
    KC_TRY(kc_cfg_channels_last(cfg));
    if (global)
        return kc_cfg_bool(cfg, "keepdims", 0, &a->keepdims);
    const char *pool_key = spatial == 1 && cJSON_GetObjectItemCaseSensitive(cfg, "pool_length")
                               ? "pool_length" /* Keras 1 */
                               : "pool_size";
    KC_TRY(kc_cfg_ints(cfg, pool_key, spatial, 2, a->pool));
    const cJSON *strides = cJSON_GetObjectItemCaseSensitive(cfg, "strides");
    if (!strides && spatial == 1)
        strides = cJSON_GetObjectItemCaseSensitive(cfg, "stride"); /* Keras 1 */
    if (!strides || cJSON_IsNull(strides)) {
        for (int i = 0; i < spatial; i++)
            a->strides[i] = a->pool[i];
    } else {
        KC_TRY(kc_cfg_ints(cfg, cJSON_GetObjectItemCaseSensitive(cfg, "strides") ? "strides"
                                                                                 : "stride",
                           spatial, 1, a->strides));
    }
    for (int i = 0; i < spatial; i++)
        if (a->pool[i] < 1 || a->strides[i] < 1 || a->pool[i] > (1 << 20) ||
            a->strides[i] > (1 << 20))
            return kc_fail(KC_ERR_FORMAT, "pool_size/strides out of range");
    return kc_cfg_padding(cfg, 0, &a->padding);
}

static kc_status kc_pool_infer(kc_op_ctx *ctx)
{
    const kc_pool_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    KC_TRY(kc_op_expect_rank(ctx, 0, a->spatial + 2, a->spatial + 2));
    const kc_shape *in = &ctx->in[0];
    kc_shape out = *in;
    if (a->global) {
        if (a->keepdims) {
            for (int i = 0; i < a->spatial; i++)
                out.dims[1 + i] = 1;
        } else {
            out.rank = 2;
            out.dims[1] = in->dims[in->rank - 1];
        }
    } else {
        for (int i = 0; i < a->spatial; i++)
            out.dims[1 + i] = kc_conv_out_len(in->dims[1 + i], a->pool[i], a->strides[i], 1,
                                              a->padding);
    }
    ctx->out[0] = out;
    ctx->n_out = 1;
    return KC_OK;
}

#define KC_POOL(fn, var, cls, kind, spatial, global)                       \
    static kc_status fn(kc_layer *layer, const kc_parse_env *env)          \
    {                                                                      \
        (void)env;                                                         \
        return kc_pool_parse_common(layer, kind, spatial, global);         \
    }                                                                      \
    static const kc_op_def var = {cls, KC_OPF_LAYER, fn, kc_pool_infer}

KC_POOL(kc_maxpool1d_parse, kc_def_maxpool1d, "MaxPooling1D", KC_POOL_MAX, 1, 0);
KC_POOL(kc_maxpool2d_parse, kc_def_maxpool2d, "MaxPooling2D", KC_POOL_MAX, 2, 0);
KC_POOL(kc_maxpool3d_parse, kc_def_maxpool3d, "MaxPooling3D", KC_POOL_MAX, 3, 0);
KC_POOL(kc_avgpool1d_parse, kc_def_avgpool1d, "AveragePooling1D", KC_POOL_AVG, 1, 0);
KC_POOL(kc_avgpool2d_parse, kc_def_avgpool2d, "AveragePooling2D", KC_POOL_AVG, 2, 0);
KC_POOL(kc_avgpool3d_parse, kc_def_avgpool3d, "AveragePooling3D", KC_POOL_AVG, 3, 0);
KC_POOL(kc_gmaxpool1d_parse, kc_def_gmaxpool1d, "GlobalMaxPooling1D", KC_POOL_MAX, 1, 1);
KC_POOL(kc_gmaxpool2d_parse, kc_def_gmaxpool2d, "GlobalMaxPooling2D", KC_POOL_MAX, 2, 1);
KC_POOL(kc_gmaxpool3d_parse, kc_def_gmaxpool3d, "GlobalMaxPooling3D", KC_POOL_MAX, 3, 1);
KC_POOL(kc_gavgpool1d_parse, kc_def_gavgpool1d, "GlobalAveragePooling1D", KC_POOL_AVG, 1, 1);
KC_POOL(kc_gavgpool2d_parse, kc_def_gavgpool2d, "GlobalAveragePooling2D", KC_POOL_AVG, 2, 1);
KC_POOL(kc_gavgpool3d_parse, kc_def_gavgpool3d, "GlobalAveragePooling3D", KC_POOL_AVG, 3, 1);
/* Aliases Keras exports under shorter names. */
static const kc_op_def kc_def_maxpool1d_a = {"MaxPool1D", KC_OPF_LAYER, kc_maxpool1d_parse,
                                             kc_pool_infer};
static const kc_op_def kc_def_maxpool2d_a = {"MaxPool2D", KC_OPF_LAYER, kc_maxpool2d_parse,
                                             kc_pool_infer};
static const kc_op_def kc_def_avgpool1d_a = {"AvgPool1D", KC_OPF_LAYER, kc_avgpool1d_parse,
                                             kc_pool_infer};
static const kc_op_def kc_def_avgpool2d_a = {"AvgPool2D", KC_OPF_LAYER, kc_avgpool2d_parse,
                                             kc_pool_infer};
static const kc_op_def kc_def_gavgpool2d_a = {"GlobalAvgPool2D", KC_OPF_LAYER,
                                              kc_gavgpool2d_parse, kc_pool_infer};
static const kc_op_def kc_def_gmaxpool2d_a = {"GlobalMaxPool2D", KC_OPF_LAYER,
                                              kc_gmaxpool2d_parse, kc_pool_infer};
static const kc_op_def kc_def_gavgpool1d_a = {"GlobalAvgPool1D", KC_OPF_LAYER,
                                              kc_gavgpool1d_parse, kc_pool_infer};
static const kc_op_def kc_def_gmaxpool1d_a = {"GlobalMaxPool1D", KC_OPF_LAYER,
                                              kc_gmaxpool1d_parse, kc_pool_infer};

const kc_op_def *const kc_ops_pool[] = {
    &kc_def_maxpool1d,   &kc_def_maxpool2d,   &kc_def_maxpool3d,   &kc_def_avgpool1d,
    &kc_def_avgpool2d,   &kc_def_avgpool3d,   &kc_def_gmaxpool1d,  &kc_def_gmaxpool2d,
    &kc_def_gmaxpool3d,  &kc_def_gavgpool1d,  &kc_def_gavgpool2d,  &kc_def_gavgpool3d,
    &kc_def_maxpool1d_a, &kc_def_maxpool2d_a, &kc_def_avgpool1d_a, &kc_def_avgpool2d_a,
    &kc_def_gavgpool2d_a, &kc_def_gmaxpool2d_a, &kc_def_gavgpool1d_a, &kc_def_gmaxpool1d_a,
    NULL};
