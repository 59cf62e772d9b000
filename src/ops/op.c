/* Shared helpers for op definitions: config attribute readers and shape
 * arithmetic. Every error names the layer through the caller's context. */
#include "ops/op.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

void kc_op_spec(kc_op_ctx *ctx, const char *group, const char *name, int trainable, int rank,
                ...)
{
    kc_layer *layer = ctx->layer;
    if (!ctx->first_call || layer->n_specs >= KC_MAX_WEIGHT_SPECS)
        return;
    kc_weight_spec *spec = &layer->specs[layer->n_specs++];
    spec->group = group ? group : "";
    spec->name = name;
    spec->trainable = trainable;
    spec->shape.rank = rank;
    va_list args;
    va_start(args, rank);
    for (int i = 0; i < rank && i < KC_MAX_RANK; i++)
        spec->shape.dims[i] = va_arg(args, int64_t);
    va_end(args);
}

kc_status kc_op_expect_inputs(const kc_op_ctx *ctx, int min, int max)
{
    if (ctx->n_in < min || ctx->n_in > max) {
        if (min == max)
            return kc_fail(KC_ERR_FORMAT, "expects %d input(s), got %d", min, ctx->n_in);
        return kc_fail(KC_ERR_FORMAT, "expects %d to %d inputs, got %d", min, max, ctx->n_in);
    }
    return KC_OK;
}

kc_status kc_op_expect_rank(const kc_op_ctx *ctx, int input, int min_rank, int max_rank)
{
    int rank = ctx->in[input].rank;
    if (rank < min_rank || rank > max_rank) {
        char buf[128];
        kc_shape_format(&ctx->in[input], buf, sizeof buf);
        if (min_rank == max_rank)
            return kc_fail(KC_ERR_SHAPE, "expects a rank-%d input, got %s", min_rank, buf);
        return kc_fail(KC_ERR_SHAPE, "expects an input of rank %d..%d, got %s", min_rank,
                       max_rank, buf);
    }
    return KC_OK;
}

kc_status kc_op_axis(const kc_op_ctx *ctx, int axis, int rank, int *out)
{
    (void)ctx;
    int a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= rank)
        return kc_fail(KC_ERR_SHAPE, "axis %d out of range for rank %d", axis, rank);
    *out = a;
    return KC_OK;
}

kc_status kc_op_same_shape(kc_op_ctx *ctx)
{
    if (ctx->n_in < 1)
        return kc_fail(KC_ERR_FORMAT, "expects an input");
    ctx->out[0] = ctx->in[0];
    ctx->out_dtype[0] = ctx->in_dtype ? ctx->in_dtype[0] : KC_DTYPE_INVALID;
    ctx->n_out = 1;
    return KC_OK;
}

int64_t kc_conv_pad_before(int64_t in, int64_t out, int64_t extent, int64_t stride, int mode)
{
    if (mode == 2)
        return extent - 1;
    if (mode != 1)
        return 0;
    int64_t total = (out - 1) * stride + extent - in;
    return total > 0 ? total / 2 : 0;
}

int64_t kc_conv_out_len(int64_t in, int64_t k, int64_t stride, int64_t dilation, int same)
{
    if (in < 0)
        return -1;
    if (stride < 1)
        stride = 1;
    if (same)
        return (in + stride - 1) / stride;
    int64_t eff = (k - 1) * dilation + 1;
    if (in < eff)
        return 0;
    return (in - eff) / stride + 1;
}

kc_status kc_broadcast(const kc_op_ctx *ctx, const kc_shape *a, const kc_shape *b, kc_shape *out)
{
    (void)ctx;
    int rank = a->rank > b->rank ? a->rank : b->rank;
    kc_shape r = {.rank = rank};
    for (int i = 0; i < rank; i++) {
        int ia = i - (rank - a->rank), ib = i - (rank - b->rank);
        int64_t da = ia >= 0 ? a->dims[ia] : 1;
        int64_t db = ib >= 0 ? b->dims[ib] : 1;
        if (da == db || db == 1)
            r.dims[i] = da;
        else if (da == 1)
            r.dims[i] = db;
        else if (da == -1 || db == -1)
            r.dims[i] = da == -1 ? db : da;
        else {
            char sa[128], sb[128];
            kc_shape_format(a, sa, sizeof sa);
            kc_shape_format(b, sb, sizeof sb);
            return kc_fail(KC_ERR_SHAPE, "shapes %s and %s do not broadcast", sa, sb);
        }
    }
    *out = r;
    return KC_OK;
}

/* ------------------------------------------------------------ config */

static const cJSON *kc_cfg_get(const cJSON *cfg, const char *key)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(cfg, key);
    return cJSON_IsNull(item) ? NULL : item;
}

static kc_status kc_cfg_to_int(const cJSON *item, const char *key, int64_t *out)
{
    if (!cJSON_IsNumber(item))
        return kc_fail(KC_ERR_FORMAT, "config '%s' is not a number", key);
    double v = item->valuedouble;
    if (!(v >= -9.0e15 && v <= 9.0e15) || v != floor(v))
        return kc_fail(KC_ERR_FORMAT, "config '%s' is not an integer in range", key);
    *out = (int64_t)v;
    return KC_OK;
}

kc_status kc_cfg_int(const cJSON *cfg, const char *key, int64_t dflt, int64_t *out)
{
    const cJSON *item = kc_cfg_get(cfg, key);
    if (!item) {
        *out = dflt;
        return KC_OK;
    }
    /* Keras 2 BatchNormalization may store axis as a one-element list. */
    if (cJSON_IsArray(item) && cJSON_GetArraySize(item) == 1)
        item = cJSON_GetArrayItem(item, 0);
    return kc_cfg_to_int(item, key, out);
}

kc_status kc_cfg_float(const cJSON *cfg, const char *key, double dflt, double *out)
{
    const cJSON *item = kc_cfg_get(cfg, key);
    if (!item) {
        *out = dflt;
        return KC_OK;
    }
    if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble))
        return kc_fail(KC_ERR_FORMAT, "config '%s' is not a finite number", key);
    *out = item->valuedouble;
    return KC_OK;
}

kc_status kc_cfg_bool(const cJSON *cfg, const char *key, int dflt, int *out)
{
    const cJSON *item = kc_cfg_get(cfg, key);
    if (!item) {
        *out = dflt;
        return KC_OK;
    }
    if (cJSON_IsBool(item)) {
        *out = cJSON_IsTrue(item);
        return KC_OK;
    }
    if (cJSON_IsNumber(item)) { /* Keras 1 sometimes wrote 0/1 */
        *out = item->valuedouble != 0;
        return KC_OK;
    }
    return kc_fail(KC_ERR_FORMAT, "config '%s' is not a boolean", key);
}

kc_status kc_cfg_str(const cJSON *cfg, const char *key, const char *dflt, const char **out)
{
    const cJSON *item = kc_cfg_get(cfg, key);
    if (!item) {
        *out = dflt;
        return KC_OK;
    }
    if (!cJSON_IsString(item))
        return kc_fail(KC_ERR_FORMAT, "config '%s' is not a string", key);
    *out = item->valuestring;
    return KC_OK;
}

kc_status kc_cfg_ints(const cJSON *cfg, const char *key, int n, int64_t dflt, int64_t *out)
{
    const cJSON *item = kc_cfg_get(cfg, key);
    if (!item) {
        for (int i = 0; i < n; i++)
            out[i] = dflt;
        return KC_OK;
    }
    if (cJSON_IsNumber(item)) {
        int64_t v = 0;
        KC_TRY(kc_cfg_to_int(item, key, &v));
        for (int i = 0; i < n; i++)
            out[i] = v;
        return KC_OK;
    }
    if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) != n)
        return kc_fail(KC_ERR_FORMAT, "config '%s' is not an int or a list of %d ints", key, n);
    for (int i = 0; i < n; i++)
        KC_TRY(kc_cfg_to_int(cJSON_GetArrayItem(item, i), key, &out[i]));
    return KC_OK;
}

kc_status kc_cfg_shape(const cJSON *cfg, const char *key, int max, int64_t *out, int *n)
{
    const cJSON *item = kc_cfg_get(cfg, key);
    *n = -1;
    if (!item)
        return KC_OK;
    if (cJSON_IsNumber(item)) { /* input_dim-like scalars: a 1-D shape */
        KC_TRY(kc_cfg_to_int(item, key, &out[0]));
        *n = 1;
        return KC_OK;
    }
    if (!cJSON_IsArray(item))
        return kc_fail(KC_ERR_FORMAT, "config '%s' is not a shape list", key);
    int count = cJSON_GetArraySize(item);
    if (count > max)
        return kc_fail(KC_ERR_LIMIT, "config '%s' has %d dimensions (max %d)", key, count, max);
    for (int i = 0; i < count; i++) {
        const cJSON *d = cJSON_GetArrayItem(item, i);
        if (cJSON_IsNull(d)) {
            out[i] = -1;
            continue;
        }
        KC_TRY(kc_cfg_to_int(d, key, &out[i]));
        if (out[i] < 0 || out[i] > ((int64_t)1 << 40))
            return kc_fail(KC_ERR_LIMIT, "config '%s' dimension %lld out of range", key,
                           (long long)out[i]);
    }
    *n = count;
    return KC_OK;
}

static const char *const kc_activation_names[] = {
    "linear", "relu", "relu6", "leaky_relu", "elu", "selu", "sigmoid", "hard_sigmoid",
    "silu", "swish", "hard_silu", "hard_swish", "gelu", "tanh", "softmax", "log_softmax",
    "softplus", "softsign", "exponential", "mish", "celu", "glu", "hard_tanh",
    "hard_shrink", "soft_shrink", "tanh_shrink", "threshold", "sparse_plus",
    "sparse_sigmoid", "sparsemax", "squareplus", "log_sigmoid", NULL};

kc_status kc_cfg_activation(const cJSON *cfg, const char *key, const char **out)
{
    const cJSON *item = kc_cfg_get(cfg, key);
    const char *name = "linear";
    if (item) {
        if (cJSON_IsString(item)) {
            name = item->valuestring;
        } else if (cJSON_IsObject(item)) {
            /* Keras 3 {"module":"keras.activations","class_name":"function",
             * "config":"relu"} or a registered custom function. */
            const cJSON *cls = cJSON_GetObjectItemCaseSensitive(item, "class_name");
            const cJSON *inner = cJSON_GetObjectItemCaseSensitive(item, "config");
            const cJSON *module = cJSON_GetObjectItemCaseSensitive(item, "module");
            if (cJSON_IsString(cls) && strcmp(cls->valuestring, "function") == 0 &&
                cJSON_IsString(inner) &&
                (!cJSON_IsString(module) || strncmp(module->valuestring, "keras", 5) == 0))
                name = inner->valuestring;
            else if (cJSON_IsString(cls) && strcmp(cls->valuestring, "__lambda__") == 0)
                return kc_fail(KC_ERR_REFUSED,
                               "activation '%s' is a Python lambda (bytecode); kerasc never "
                               "executes code from a model file", key);
            else
                return kc_fail(KC_ERR_REFUSED, "activation '%s' is a custom function '%s'; "
                               "custom code is not loaded", key,
                               cJSON_IsString(inner) ? inner->valuestring : "?");
        } else {
            return kc_fail(KC_ERR_FORMAT, "config '%s' is not an activation name", key);
        }
    }
    if (strcmp(name, "None") == 0 || name[0] == '\0')
        name = "linear";
    for (int i = 0; kc_activation_names[i]; i++)
        if (strcmp(name, kc_activation_names[i]) == 0) {
            *out = kc_activation_names[i];
            return KC_OK;
        }
    return kc_fail(KC_ERR_REFUSED, "unknown activation '%s' (a custom function?); custom code "
                   "is not loaded", name);
}

kc_status kc_cfg_padding(const cJSON *cfg, int allow_causal, int *out)
{
    const char *pad;
    /* Keras 1 used border_mode. */
    KC_TRY(kc_cfg_str(cfg, "padding", NULL, &pad));
    if (!pad)
        KC_TRY(kc_cfg_str(cfg, "border_mode", "valid", &pad));
    if (strcmp(pad, "valid") == 0)
        *out = 0;
    else if (strcmp(pad, "same") == 0)
        *out = 1;
    else if (allow_causal && strcmp(pad, "causal") == 0)
        *out = 2;
    else
        return kc_fail(KC_ERR_UNSUPPORTED, "padding '%s' is not supported", pad);
    return KC_OK;
}

kc_status kc_cfg_channels_last(const cJSON *cfg)
{
    /* channels_first layers are accepted: the graph builder marks them
     * (kc_layer.channels_first) and shape inference and execution see them
     * through an NCHW <-> NHWC transpose, so every op is written once, for
     * channels_last. */
    const char *fmt;
    KC_TRY(kc_cfg_str(cfg, "data_format", "channels_last", &fmt));
    if (strcmp(fmt, "channels_last") != 0 && strcmp(fmt, "channels_first") != 0)
        return kc_fail(KC_ERR_UNSUPPORTED, "data_format '%s'", fmt);
    const char *dim = "tf";
    KC_TRY(kc_cfg_str(cfg, "dim_ordering", "tf", &dim));
    if (strcmp(dim, "tf") != 0 && strcmp(dim, "default") != 0)
        return kc_fail(KC_ERR_UNSUPPORTED,
                       "Keras 1 dim_ordering '%s' (Theano channels-first kernels) is not "
                       "supported; only 'tf'", dim);
    return KC_OK;
}

int kc_cfg_is_channels_first(const cJSON *cfg)
{
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(cfg, "data_format");
    return cJSON_IsString(fmt) && strcmp(fmt->valuestring, "channels_first") == 0;
}

void kc_shape_to_channels_last(kc_shape *s)
{
    if (s->rank < 3)
        return;
    int64_t c = s->dims[1];
    for (int i = 1; i < s->rank - 1; i++)
        s->dims[i] = s->dims[i + 1];
    s->dims[s->rank - 1] = c;
}

void kc_shape_to_channels_first(kc_shape *s)
{
    if (s->rank < 3)
        return;
    int64_t c = s->dims[s->rank - 1];
    for (int i = s->rank - 1; i > 1; i--)
        s->dims[i] = s->dims[i - 1];
    s->dims[1] = c;
}

int kc_op_input_by_role(const kc_op_ctx *ctx, const char *role)
{
    if (!ctx->in_roles)
        return -1;
    for (int i = 0; i < ctx->n_in; i++)
        if (ctx->in_roles[i] && strcmp(ctx->in_roles[i], role) == 0)
            return i;
    return -1;
}
