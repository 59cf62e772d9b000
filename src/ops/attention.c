/* Attention layers: MultiHeadAttention (its four EinsumDense projections
 * are sub-layers: Keras 3 groups query_dense, key_dense, value_dense,
 * output_dense), Attention (dot-product / concat scores) and
 * AdditiveAttention. Dropout is training-only and ignored. */
#include "ops/attention.h"

#include <math.h>
#include <string.h>

#include "base/mem.h"
#include "ops/op.h"

#define KC_MHA_MAX_HEADS 4096
#define KC_MHA_MAX_DIM ((int64_t)1 << 20)

/* ------------------------------------------------------ input binding */

static const char *const kc_mha_params[] = {"query",      "value",    "key",
                                            "query_mask", "value_mask", "key_mask",
                                            "attention_mask"};

static int *kc_att_slot(kc_attention_inputs *io, int param)
{
    int *slots[] = {&io->query,      &io->value,    &io->key,           &io->query_mask,
                    &io->value_mask, &io->key_mask, &io->attention_mask};
    return slots[param];
}

static void kc_att_clear(kc_attention_inputs *io)
{
    for (int p = 0; p < 7; p++)
        *kc_att_slot(io, p) = -1;
}

/* Python binding of call(query, value, key=None, query_mask=None, ...):
 * positional input p fills parameter p, keywords fill their own. */
int kc_mha_bind_inputs(char *const *roles, int n_in, kc_attention_inputs *out)
{
    kc_att_clear(out);
    int pos = 0;
    for (int i = 0; i < n_in; i++) {
        const char *r = roles ? roles[i] : NULL;
        int p = -1;
        if (!r) {
            p = pos++;
        } else {
            for (int j = 0; j < 7 && p < 0; j++)
                if (strcmp(r, kc_mha_params[j]) == 0)
                    p = j;
        }
        if (p < 0 || p >= 7 || *kc_att_slot(out, p) >= 0)
            return -1;
        *kc_att_slot(out, p) = i;
    }
    return out->query >= 0 && out->value >= 0 ? 0 : -1;
}

/* call([query, value(, key)], mask=[query_mask, value_mask(, key_mask)]) */
int kc_dot_attention_bind_inputs(char *const *roles, int n_in, kc_attention_inputs *out)
{
    kc_att_clear(out);
    int pos = 0, masks = 0;
    for (int i = 0; i < n_in; i++) {
        const char *r = roles ? roles[i] : NULL;
        if (!r) {
            if (pos >= 3)
                return -1;
            *kc_att_slot(out, pos++) = i;
        } else if (strcmp(r, "mask") == 0) {
            if (masks >= 3)
                return -1;
            *kc_att_slot(out, 3 + masks++) = i;
        } else {
            return -1;
        }
    }
    return pos >= 2 ? 0 : -1;
}

/* ------------------------------------------------------------ helpers */

/* A weight spec of any rank (kc_op_spec takes the dims as varargs). */
static void kc_att_spec(kc_op_ctx *ctx, const char *group, const char *name,
                        const kc_shape *shape)
{
    kc_layer *layer = ctx->layer;
    if (!ctx->first_call || layer->n_specs >= KC_MAX_WEIGHT_SPECS)
        return;
    kc_weight_spec *spec = &layer->specs[layer->n_specs++];
    spec->group = group;
    spec->name = name;
    spec->trainable = 1;
    spec->shape = *shape;
}

static int kc_att_wants_scores(const kc_op_ctx *ctx)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ctx->call_kwargs,
                                                         "return_attention_scores"));
}

static kc_status kc_att_feature(const kc_shape *s, const char *what, int64_t *out)
{
    *out = s->dims[s->rank - 1];
    if (*out < 1)
        return kc_fail(KC_ERR_SHAPE, "%s feature dimension is unknown", what);
    return KC_OK;
}

/* Two dims that must agree when both are known. */
static kc_status kc_att_same(int64_t a, int64_t b, const char *what)
{
    if (a >= 0 && b >= 0 && a != b)
        return kc_fail(KC_ERR_SHAPE, "%s: %lld != %lld", what, (long long)a, (long long)b);
    return KC_OK;
}

/* ------------------------------------------------- MultiHeadAttention */

static kc_status kc_mha_dim(const cJSON *cfg, const char *key, int64_t dflt, int64_t max,
                            int64_t *out)
{
    KC_TRY(kc_cfg_int(cfg, key, dflt, out));
    if (*out < 1 || *out > max)
        return kc_fail(KC_ERR_FORMAT, "%s %lld missing or out of range (1..%lld)", key,
                       (long long)*out, (long long)max);
    return KC_OK;
}

/* output_shape: null (query's features), an int, or a list of ints. Keras
 * treats 0 and [] like null. */
static kc_status kc_mha_output_shape(const cJSON *cfg, kc_mha_attrs *a)
{
    int n;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "output_shape");
    if (cJSON_IsNumber(v) && v->valuedouble == 0)
        v = NULL;
    if (!v || cJSON_IsNull(v)) {
        a->n_output_shape = 0;
        return KC_OK;
    }
    KC_TRY(kc_cfg_shape(cfg, "output_shape", KC_MAX_RANK - 2, a->output_shape, &n));
    for (int i = 0; i < n; i++)
        if (a->output_shape[i] < 1 || a->output_shape[i] > KC_MHA_MAX_DIM)
            return kc_fail(KC_ERR_FORMAT, "output_shape dimension %lld out of range",
                           (long long)a->output_shape[i]);
    a->n_output_shape = n;
    return KC_OK;
}

static kc_status kc_mha_attention_axes(const cJSON *cfg, kc_mha_attrs *a)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "attention_axes");
    a->n_attention_axes = -1;
    if (!v || cJSON_IsNull(v))
        return KC_OK;
    int n = 0;
    const cJSON *e = cJSON_IsArray(v) ? v->child : v;
    if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > KC_MAX_RANK)
        return kc_fail(KC_ERR_UNSUPPORTED, "attention_axes with %d axes is not supported",
                       cJSON_GetArraySize(v));
    for (; e; e = cJSON_IsArray(v) ? e->next : NULL) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) ||
            fabs(e->valuedouble) > KC_MAX_RANK)
            return kc_fail(KC_ERR_FORMAT, "attention_axes is not an int or a list of ints");
        a->attention_axes[n++] = (int)e->valuedouble;
    }
    a->n_attention_axes = n;
    return KC_OK;
}

static kc_status kc_mha_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    kc_mha_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    const cJSON *cfg = layer->config;
    KC_TRY(kc_mha_dim(cfg, "num_heads", -1, KC_MHA_MAX_HEADS, &a->num_heads));
    KC_TRY(kc_mha_dim(cfg, "key_dim", -1, KC_MHA_MAX_DIM, &a->key_dim));
    /* Keras: value_dim if value_dim else key_dim. */
    KC_TRY(kc_cfg_int(cfg, "value_dim", 0, &a->value_dim));
    if (a->value_dim == 0)
        a->value_dim = a->key_dim;
    if (a->value_dim < 1 || a->value_dim > KC_MHA_MAX_DIM)
        return kc_fail(KC_ERR_FORMAT, "value_dim %lld out of range", (long long)a->value_dim);
    KC_TRY(kc_cfg_bool(cfg, "use_bias", 1, &a->use_bias));
    KC_TRY(kc_cfg_float(cfg, "dropout", 0.0, &a->dropout));
    KC_TRY(kc_mha_output_shape(cfg, a));
    return kc_mha_attention_axes(cfg, a);
}

/* Only the default: attention over every axis between batch and features
 * (Keras normalises negative axes against the projected rank, rank + 1). */
static kc_status kc_mha_check_axes(const kc_mha_attrs *a, int rank)
{
    if (a->n_attention_axes < 0)
        return KC_OK;
    unsigned want = 0, got = 0;
    for (int i = 1; i < rank - 1; i++)
        want |= 1u << i;
    for (int i = 0; i < a->n_attention_axes; i++) {
        int ax = a->attention_axes[i] >= 0 ? a->attention_axes[i] : rank + a->attention_axes[i];
        if (ax >= 0 && ax < KC_MAX_RANK)
            got |= 1u << ax;
    }
    if (got != want || a->n_attention_axes != rank - 2)
        return kc_fail(KC_ERR_UNSUPPORTED, "attention_axes other than all axes between batch "
                       "and features are not supported");
    return KC_OK;
}

static kc_status kc_mha_check_shapes(const kc_shape *q, const kc_shape *k, const kc_shape *v)
{
    if (q->rank < 3 || q->rank != k->rank || q->rank != v->rank)
        return kc_fail(KC_ERR_SHAPE, "query, key and value must have the same rank >= 3 "
                       "(got %d, %d, %d)", q->rank, k->rank, v->rank);
    if (q->rank > 5) /* scores (batch, heads, *q_axes, *v_axes) must fit */
        return kc_fail(KC_ERR_UNSUPPORTED, "attention over inputs of rank %d", q->rank);
    KC_TRY(kc_att_same(q->dims[0], v->dims[0], "query and value batch"));
    for (int i = 1; i < v->rank - 1; i++)
        KC_TRY(kc_att_same(k->dims[i], v->dims[i], "key and value attention axes"));
    return KC_OK;
}

static void kc_mha_specs(kc_op_ctx *ctx, const kc_mha_attrs *a, int64_t qf, int64_t kf,
                         int64_t vf, const kc_shape *out_feat)
{
    int64_t h = a->num_heads, kd = a->key_dim, vd = a->value_dim;
    kc_op_spec(ctx, "query_dense", "kernel", 1, 3, qf, h, kd);
    if (a->use_bias)
        kc_op_spec(ctx, "query_dense", "bias", 1, 2, h, kd);
    kc_op_spec(ctx, "key_dense", "kernel", 1, 3, kf, h, kd);
    if (a->use_bias)
        kc_op_spec(ctx, "key_dense", "bias", 1, 2, h, kd);
    kc_op_spec(ctx, "value_dense", "kernel", 1, 3, vf, h, vd);
    if (a->use_bias)
        kc_op_spec(ctx, "value_dense", "bias", 1, 2, h, vd);
    kc_shape kernel = {.rank = 2 + out_feat->rank, .dims = {h, vd}};
    memcpy(kernel.dims + 2, out_feat->dims, (size_t)out_feat->rank * sizeof kernel.dims[0]);
    kc_att_spec(ctx, "output_dense", "kernel", &kernel);
    if (a->use_bias)
        kc_att_spec(ctx, "output_dense", "bias", out_feat);
}

static kc_status kc_mha_inputs(const kc_op_ctx *ctx, kc_attention_inputs *io)
{
    if (kc_mha_bind_inputs(ctx->in_roles, ctx->n_in, io) != 0)
        return kc_fail(KC_ERR_FORMAT, "expects query and value (and optionally key and "
                       "masks) as call arguments");
    return KC_OK;
}

static kc_status kc_mha_infer(kc_op_ctx *ctx)
{
    const kc_mha_attrs *a = ctx->layer->attrs;
    kc_attention_inputs io;
    KC_TRY(kc_mha_inputs(ctx, &io));
    const kc_shape *q = &ctx->in[io.query], *v = &ctx->in[io.value];
    const kc_shape *k = io.key >= 0 ? &ctx->in[io.key] : v;
    KC_TRY(kc_mha_check_shapes(q, k, v));
    KC_TRY(kc_mha_check_axes(a, q->rank));
    int64_t qf, kf, vf;
    KC_TRY(kc_att_feature(q, "query", &qf));
    KC_TRY(kc_att_feature(k, "key", &kf));
    KC_TRY(kc_att_feature(v, "value", &vf));
    kc_shape feat = {.rank = 1, .dims = {qf}};
    if (a->n_output_shape > 0)
        feat = kc_shape_make(a->n_output_shape, a->output_shape);
    kc_shape out = {.rank = q->rank - 1 + feat.rank};
    if (out.rank > KC_MAX_RANK)
        return kc_fail(KC_ERR_LIMIT, "output rank above %d", KC_MAX_RANK);
    memcpy(out.dims, q->dims, (size_t)(q->rank - 1) * sizeof out.dims[0]);
    memcpy(out.dims + q->rank - 1, feat.dims, (size_t)feat.rank * sizeof out.dims[0]);
    ctx->out[0] = out;
    ctx->n_out = 1;
    if (kc_att_wants_scores(ctx)) {
        kc_shape s = {.rank = 2, .dims = {q->dims[0], a->num_heads}};
        for (int i = 1; i < q->rank - 1; i++)
            s.dims[s.rank++] = q->dims[i];
        for (int i = 1; i < v->rank - 1; i++)
            s.dims[s.rank++] = v->dims[i];
        ctx->out[ctx->n_out++] = s;
    }
    kc_mha_specs(ctx, a, qf, kf, vf, &feat);
    return KC_OK;
}

/* ------------------------------------- Attention / AdditiveAttention */

static kc_status kc_dot_parse_common(kc_layer *layer, int additive)
{
    kc_dot_attention_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    const cJSON *cfg = layer->config;
    a->additive = additive;
    KC_TRY(kc_cfg_bool(cfg, "use_scale", additive, &a->use_scale));
    KC_TRY(kc_cfg_bool(cfg, "causal", 0, &a->causal));
    KC_TRY(kc_cfg_float(cfg, "dropout", 0.0, &a->dropout));
    if (additive)
        return KC_OK;
    const char *mode;
    KC_TRY(kc_cfg_str(cfg, "score_mode", "dot", &mode));
    if (strcmp(mode, "dot") == 0)
        a->score_mode = KC_SCORE_DOT;
    else if (strcmp(mode, "concat") == 0)
        a->score_mode = KC_SCORE_CONCAT;
    else
        return kc_fail(KC_ERR_FORMAT, "unknown score_mode '%s' (dot or concat)", mode);
    return KC_OK;
}

static kc_status kc_attention_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    return kc_dot_parse_common(layer, 0);
}

static kc_status kc_additive_parse(kc_layer *layer, const kc_parse_env *env)
{
    (void)env;
    return kc_dot_parse_common(layer, 1);
}

static kc_status kc_dot_check(const kc_shape *q, const kc_shape *k, const kc_shape *v)
{
    if (q->rank != 3 || k->rank != 3 || v->rank != 3)
        return kc_fail(KC_ERR_SHAPE, "query, value and key must be (batch, time, dim)");
    KC_TRY(kc_att_same(q->dims[0], v->dims[0], "query and value batch"));
    KC_TRY(kc_att_same(k->dims[1], v->dims[1], "key and value lengths"));
    return kc_att_same(q->dims[2], k->dims[2], "query and key dims");
}

/* Keras 3 sizes AdditiveAttention's scale by the query's last dim; tf.keras
 * by the value's (equal whenever key is value). */
static kc_status kc_dot_specs(kc_op_ctx *ctx, const kc_dot_attention_attrs *a,
                              const kc_shape *q, const kc_shape *v)
{
    if (a->additive && a->use_scale) {
        const kc_shape *src = ctx->env && ctx->env->keras_major <= 2 ? v : q;
        int64_t dim;
        KC_TRY(kc_att_feature(src, "AdditiveAttention", &dim));
        kc_op_spec(ctx, "", "scale", 1, 1, dim);
        return KC_OK;
    }
    if (!a->additive && a->use_scale)
        kc_op_spec(ctx, "", "scale", 1, 0);
    if (!a->additive && a->score_mode == KC_SCORE_CONCAT)
        kc_op_spec(ctx, "", "concat_score_weight", 1, 0);
    return KC_OK;
}

static kc_status kc_dot_infer(kc_op_ctx *ctx)
{
    const kc_dot_attention_attrs *a = ctx->layer->attrs;
    kc_attention_inputs io;
    if (kc_dot_attention_bind_inputs(ctx->in_roles, ctx->n_in, &io) != 0)
        return kc_fail(KC_ERR_FORMAT, "expects a list [query, value] or [query, value, key] "
                       "(masks by keyword 'mask')");
    const kc_shape *q = &ctx->in[io.query], *v = &ctx->in[io.value];
    const kc_shape *k = io.key >= 0 ? &ctx->in[io.key] : v;
    KC_TRY(kc_dot_check(q, k, v));
    ctx->out[0] = (kc_shape){.rank = 3, .dims = {q->dims[0], q->dims[1], v->dims[2]}};
    ctx->n_out = 1;
    if (kc_att_wants_scores(ctx))
        ctx->out[ctx->n_out++] = (kc_shape){.rank = 3, .dims = {q->dims[0], q->dims[1],
                                                                 v->dims[1]}};
    return kc_dot_specs(ctx, a, q, v);
}

/* -------------------------------------------------------------- table */

static const kc_op_def kc_def_mha = {"MultiHeadAttention", KC_OPF_LAYER, kc_mha_parse,
                                     kc_mha_infer};
static const kc_op_def kc_def_attention = {"Attention", KC_OPF_LAYER, kc_attention_parse,
                                           kc_dot_infer};
static const kc_op_def kc_def_additive = {"AdditiveAttention", KC_OPF_LAYER, kc_additive_parse,
                                          kc_dot_infer};

const kc_op_def *const kc_ops_attention[] = {&kc_def_mha, &kc_def_attention, &kc_def_additive,
                                             NULL};
