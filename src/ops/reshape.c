/* Reshaping layers: ZeroPadding/Cropping/UpSampling 1-3D, Flatten,
 * Reshape, Permute, RepeatVector. */
#include "ops/reshape.h"

#include <string.h>

#include "base/mem.h"
#include "ops/op.h"

/* padding/cropping: n | [a, b] (per axis symmetric, or before/after for
 * 1-D) | [[b0, a0], [b1, a1], ...]. */
static kc_status kc_pad_parse_amounts(const cJSON *cfg, const char *key, int spatial,
                                      int64_t dflt, kc_pad_attrs *a)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(cfg, key);
    a->spatial = spatial;
    if (!item || cJSON_IsNumber(item)) {
        int64_t v[1];
        KC_TRY(kc_cfg_ints(cfg, key, 1, dflt, v));
        for (int i = 0; i < spatial; i++)
            a->before[i] = a->after[i] = v[0];
    } else if (cJSON_IsArray(item) && spatial == 1) {
        int64_t v[2];
        KC_TRY(kc_cfg_ints(cfg, key, 2, 0, v));
        a->before[0] = v[0];
        a->after[0] = v[1];
    } else if (cJSON_IsArray(item) && cJSON_GetArraySize(item) == spatial) {
        for (int i = 0; i < spatial; i++) {
            const cJSON *axis = cJSON_GetArrayItem(item, i);
            int64_t v[2];
            cJSON *wrap = cJSON_CreateObject();
            if (!wrap)
                return kc_fail(KC_ERR_NOMEM, "out of memory");
            cJSON_AddItemReferenceToObject(wrap, "p", (cJSON *)axis);
            kc_status st = cJSON_IsNumber(axis) ? kc_cfg_ints(wrap, "p", 1, 0, v)
                                                : kc_cfg_ints(wrap, "p", 2, 0, v);
            cJSON_Delete(wrap);
            if (st != KC_OK)
                return kc_fail(st, "'%s' entry %d is not an int or a pair", key, i);
            a->before[i] = v[0];
            a->after[i] = cJSON_IsNumber(axis) ? v[0] : v[1];
        }
    } else {
        return kc_fail(KC_ERR_FORMAT, "'%s' has an unexpected form", key);
    }
    for (int i = 0; i < spatial; i++)
        if (a->before[i] < 0 || a->after[i] < 0 || a->before[i] > (1 << 20) ||
            a->after[i] > (1 << 20))
            return kc_fail(KC_ERR_FORMAT, "'%s' amount out of range", key);
    return KC_OK;
}

static kc_status kc_pad_parse(kc_layer *layer, int spatial, const char *key, int64_t dflt)
{
    kc_pad_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    KC_TRY(kc_cfg_channels_last(layer->config));
    return kc_pad_parse_amounts(layer->config, key, spatial, dflt, a);
}

static kc_status kc_pad_infer_common(kc_op_ctx *ctx, int crop)
{
    const kc_pad_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    KC_TRY(kc_op_expect_rank(ctx, 0, a->spatial + 2, a->spatial + 2));
    kc_shape out = ctx->in[0];
    for (int i = 0; i < a->spatial; i++) {
        int64_t d = out.dims[1 + i];
        if (d < 0)
            continue;
        int64_t delta = a->before[i] + a->after[i];
        if (crop && delta >= d)
            return kc_fail(KC_ERR_SHAPE, "cropping %lld removes all of dimension %lld",
                           (long long)delta, (long long)d);
        out.dims[1 + i] = crop ? d - delta : d + delta;
    }
    ctx->out[0] = out;
    ctx->n_out = 1;
    return KC_OK;
}

static kc_status kc_zeropad_infer(kc_op_ctx *ctx) { return kc_pad_infer_common(ctx, 0); }
static kc_status kc_crop_infer(kc_op_ctx *ctx) { return kc_pad_infer_common(ctx, 1); }

#define KC_PAD_PARSER(fn, spatial, key, dflt)                          \
    static kc_status fn(kc_layer *layer, const kc_parse_env *env)      \
    {                                                                  \
        (void)env;                                                     \
        return kc_pad_parse(layer, spatial, key, dflt);                \
    }
KC_PAD_PARSER(kc_zeropad1d_parse, 1, "padding", 1)
KC_PAD_PARSER(kc_zeropad2d_parse, 2, "padding", 1)
KC_PAD_PARSER(kc_zeropad3d_parse, 3, "padding", 1)
KC_PAD_PARSER(kc_crop1d_parse, 1, "cropping", 1)
KC_PAD_PARSER(kc_crop2d_parse, 2, "cropping", 0)
KC_PAD_PARSER(kc_crop3d_parse, 3, "cropping", 1)

static kc_status kc_upsample_parse(kc_layer *layer, int spatial)
{
    kc_upsample_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    a->spatial = spatial;
    KC_TRY(kc_cfg_channels_last(layer->config));
    const char *key = spatial == 1 && cJSON_GetObjectItemCaseSensitive(layer->config, "length")
                          ? "length" /* Keras 1 */
                          : "size";
    KC_TRY(kc_cfg_ints(layer->config, key, spatial, 2, a->size));
    for (int i = 0; i < spatial; i++)
        if (a->size[i] < 1 || a->size[i] > 4096)
            return kc_fail(KC_ERR_FORMAT, "UpSampling size out of range");
    KC_TRY(kc_cfg_str(layer->config, "interpolation", "nearest", &a->interpolation));
    if (strcmp(a->interpolation, "nearest") != 0 && strcmp(a->interpolation, "bilinear") != 0)
        return kc_fail(KC_ERR_UNSUPPORTED, "UpSampling interpolation '%s'", a->interpolation);
    return KC_OK;
}

static kc_status kc_upsample1d_parse(kc_layer *l, const kc_parse_env *e) { (void)e; return kc_upsample_parse(l, 1); }
static kc_status kc_upsample2d_parse(kc_layer *l, const kc_parse_env *e) { (void)e; return kc_upsample_parse(l, 2); }
static kc_status kc_upsample3d_parse(kc_layer *l, const kc_parse_env *e) { (void)e; return kc_upsample_parse(l, 3); }

static kc_status kc_upsample_infer(kc_op_ctx *ctx)
{
    const kc_upsample_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    KC_TRY(kc_op_expect_rank(ctx, 0, a->spatial + 2, a->spatial + 2));
    kc_shape out = ctx->in[0];
    for (int i = 0; i < a->spatial; i++)
        if (out.dims[1 + i] >= 0)
            out.dims[1 + i] *= a->size[i];
    ctx->out[0] = out;
    ctx->n_out = 1;
    return KC_OK;
}

static kc_status kc_flatten_infer(kc_op_ctx *ctx)
{
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    KC_TRY(kc_op_expect_rank(ctx, 0, 1, KC_MAX_RANK));
    KC_TRY(kc_cfg_channels_last(ctx->layer->config));
    const kc_shape *in = &ctx->in[0];
    int64_t n = 1;
    for (int i = 1; i < in->rank; i++) {
        if (in->dims[i] < 0) {
            n = -1;
            break;
        }
        if (kc_mul_overflows(n, in->dims[i], &n) || n > KC_MAX_ELEMENTS)
            return kc_fail(KC_ERR_LIMIT, "Flatten size overflows");
    }
    kc_shape out = {.rank = 2};
    out.dims[0] = in->dims[0];
    out.dims[1] = n;
    ctx->out[0] = out;
    ctx->n_out = 1;
    return KC_OK;
}

static kc_status kc_reshape_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_reshape_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(layer->config, "target_shape");
    int n = cJSON_IsArray(ts) ? cJSON_GetArraySize(ts) : -1;
    if (n < 0 || n > KC_MAX_RANK - 1)
        return kc_fail(KC_ERR_FORMAT, "Reshape target_shape missing or of rank > %d",
                       KC_MAX_RANK - 1);
    int unknown = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *d = cJSON_GetArrayItem(ts, i);
        if (!cJSON_IsNumber(d) && !cJSON_IsNull(d))
            return kc_fail(KC_ERR_FORMAT, "Reshape target_shape entry is not a number");
        double v = cJSON_IsNull(d) ? -1 : d->valuedouble;
        if (v == -1)
            unknown++;
        else if (!(v >= 0 && v <= (double)KC_MAX_ELEMENTS) || v != (double)(int64_t)v)
            return kc_fail(KC_ERR_FORMAT, "Reshape target_shape entry out of range");
        a->dims[i] = (int64_t)v;
    }
    if (unknown > 1)
        return kc_fail(KC_ERR_FORMAT, "Reshape target_shape has more than one -1");
    a->n_dims = n;
    return KC_OK;
}

static kc_status kc_reshape_infer(kc_op_ctx *ctx)
{
    const kc_reshape_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    const kc_shape *in = &ctx->in[0];
    kc_shape inner = {.rank = in->rank - 1};
    for (int i = 1; i < in->rank; i++)
        inner.dims[i - 1] = in->dims[i];
    int64_t total = kc_shape_count(&inner);
    if (total < -1)
        return KC_ERR_LIMIT;
    kc_shape out = {.rank = a->n_dims + 1};
    out.dims[0] = in->dims[0];
    int64_t known = 1;
    int free_axis = -1;
    for (int i = 0; i < a->n_dims; i++) {
        out.dims[i + 1] = a->dims[i];
        if (a->dims[i] == -1)
            free_axis = i + 1;
        else if (kc_mul_overflows(known, a->dims[i], &known) || known > KC_MAX_ELEMENTS)
            return kc_fail(KC_ERR_LIMIT, "Reshape target size overflows");
    }
    if (total >= 0) {
        if (free_axis >= 0) {
            if (known == 0 || total % known)
                return kc_fail(KC_ERR_SHAPE, "cannot reshape %lld elements to target_shape",
                               (long long)total);
            out.dims[free_axis] = total / known;
        } else if (known != total) {
            return kc_fail(KC_ERR_SHAPE, "cannot reshape %lld elements into %lld",
                           (long long)total, (long long)known);
        }
    }
    ctx->out[0] = out;
    ctx->n_out = 1;
    return KC_OK;
}

static kc_status kc_permute_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_reshape_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(layer->config, "dims");
    int n = cJSON_IsArray(dims) ? cJSON_GetArraySize(dims) : -1;
    if (n < 1 || n > KC_MAX_RANK - 1)
        return kc_fail(KC_ERR_FORMAT, "Permute dims missing or too long");
    int64_t v[KC_MAX_RANK];
    KC_TRY(kc_cfg_ints(layer->config, "dims", n, 0, v));
    int seen[KC_MAX_RANK] = {0};
    for (int i = 0; i < n; i++) {
        if (v[i] < 1 || v[i] > n || seen[v[i]]++)
            return kc_fail(KC_ERR_FORMAT, "Permute dims is not a permutation of 1..%d", n);
        a->perm[i] = (int)v[i];
    }
    a->n_dims = n;
    return KC_OK;
}

static kc_status kc_permute_infer(kc_op_ctx *ctx)
{
    const kc_reshape_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    KC_TRY(kc_op_expect_rank(ctx, 0, a->n_dims + 1, a->n_dims + 1));
    kc_shape out = ctx->in[0];
    for (int i = 0; i < a->n_dims; i++)
        out.dims[i + 1] = ctx->in[0].dims[a->perm[i]];
    ctx->out[0] = out;
    ctx->n_out = 1;
    return KC_OK;
}

static kc_status kc_repeat_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_reshape_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    KC_TRY(kc_cfg_int(layer->config, "n", -1, &a->dims[0]));
    if (a->dims[0] < 1 || a->dims[0] > (1 << 24))
        return kc_fail(KC_ERR_FORMAT, "RepeatVector n missing or out of range");
    a->n_dims = 1;
    return KC_OK;
}

static kc_status kc_repeat_infer(kc_op_ctx *ctx)
{
    const kc_reshape_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_op_expect_inputs(ctx, 1, 1));
    KC_TRY(kc_op_expect_rank(ctx, 0, 2, 2));
    kc_shape out = {.rank = 3};
    out.dims[0] = ctx->in[0].dims[0];
    out.dims[1] = a->dims[0];
    out.dims[2] = ctx->in[0].dims[1];
    ctx->out[0] = out;
    ctx->n_out = 1;
    return KC_OK;
}

#define KC_DEF(var, cls, parse, infer) \
    static const kc_op_def var = {cls, KC_OPF_LAYER, parse, infer}
KC_DEF(kc_def_zeropad1d, "ZeroPadding1D", kc_zeropad1d_parse, kc_zeropad_infer);
KC_DEF(kc_def_zeropad2d, "ZeroPadding2D", kc_zeropad2d_parse, kc_zeropad_infer);
KC_DEF(kc_def_zeropad3d, "ZeroPadding3D", kc_zeropad3d_parse, kc_zeropad_infer);
KC_DEF(kc_def_crop1d, "Cropping1D", kc_crop1d_parse, kc_crop_infer);
KC_DEF(kc_def_crop2d, "Cropping2D", kc_crop2d_parse, kc_crop_infer);
KC_DEF(kc_def_crop3d, "Cropping3D", kc_crop3d_parse, kc_crop_infer);
KC_DEF(kc_def_upsample1d, "UpSampling1D", kc_upsample1d_parse, kc_upsample_infer);
KC_DEF(kc_def_upsample2d, "UpSampling2D", kc_upsample2d_parse, kc_upsample_infer);
KC_DEF(kc_def_upsample3d, "UpSampling3D", kc_upsample3d_parse, kc_upsample_infer);
KC_DEF(kc_def_flatten, "Flatten", NULL, kc_flatten_infer);
KC_DEF(kc_def_reshape, "Reshape", kc_reshape_parse, kc_reshape_infer);
KC_DEF(kc_def_permute, "Permute", kc_permute_parse, kc_permute_infer);
KC_DEF(kc_def_repeat, "RepeatVector", kc_repeat_parse, kc_repeat_infer);

const kc_op_def *const kc_ops_reshape[] = {
    &kc_def_zeropad1d, &kc_def_zeropad2d, &kc_def_zeropad3d, &kc_def_crop1d,
    &kc_def_crop2d,    &kc_def_crop3d,    &kc_def_upsample1d, &kc_def_upsample2d,
    &kc_def_upsample3d, &kc_def_flatten,  &kc_def_reshape,   &kc_def_permute,
    &kc_def_repeat,    NULL};
