/* Recurrent layers and layer wrappers: LSTM, GRU, SimpleRNN, RNN(cell),
 * CuDNNLSTM, CuDNNGRU (tf.keras 1.x), Bidirectional, TimeDistributed.
 *
 * Weights follow keras-formats.md §1.8.7: an RNN's variables live in its
 * cell (Keras 3 group "cell": kernel, recurrent_kernel, bias); the CuDNN
 * layers own them directly. Wrappers run their inner layer's own def to
 * get shapes and weight specs, then re-home the specs under the wrapper's
 * sub-object path ("forward_layer/cell", "layer", ...). */
#include "ops/rnn.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "ops/op.h"

#define KC_RNN_MAX_UNITS ((int64_t)1 << 24)

static const struct {
    const char *cls;
    kc_rnn_kind kind;
} kc_rnn_classes[] = {
    {"SimpleRNN", KC_RNN_SIMPLE},        {"LSTM", KC_RNN_LSTM},
    {"GRU", KC_RNN_GRU},                 {"CuDNNLSTM", KC_RNN_CUDNN_LSTM},
    {"CuDNNGRU", KC_RNN_CUDNN_GRU},      {"SimpleRNNCell", KC_RNN_SIMPLE},
    {"LSTMCell", KC_RNN_LSTM},           {"GRUCell", KC_RNN_GRU},
};

static int kc_rnn_kind_of(const char *cls, kc_rnn_kind *kind)
{
    for (size_t i = 0; i < sizeof kc_rnn_classes / sizeof kc_rnn_classes[0]; i++)
        if (strcmp(cls, kc_rnn_classes[i].cls) == 0) {
            *kind = kc_rnn_classes[i].kind;
            return 1;
        }
    return 0;
}

static int kc_rnn_is_lstm(kc_rnn_kind k) { return k == KC_RNN_LSTM || k == KC_RNN_CUDNN_LSTM; }
static int kc_rnn_is_cudnn(kc_rnn_kind k)
{
    return k == KC_RNN_CUDNN_LSTM || k == KC_RNN_CUDNN_GRU;
}

static int kc_rnn_gates(kc_rnn_kind k)
{
    return kc_rnn_is_lstm(k) ? 4 : (k == KC_RNN_SIMPLE ? 1 : 3);
}

/* ------------------------------------------------------------- config */

/* An activation key with a default when the key is absent (null means
 * "no activation" in Keras, i.e. linear). */
static kc_status kc_rnn_activation(const cJSON *cfg, const char *key, const char *dflt,
                                   const char **out)
{
    if (!cJSON_GetObjectItemCaseSensitive(cfg, key)) {
        *out = dflt;
        return KC_OK;
    }
    return kc_cfg_activation(cfg, key, out);
}

/* Keras 1 recurrent layers: output_dim / inner_activation, always a bias.
 * LSTM/GRU built with consume_less='cpu'/'mem' store one W, U, b per gate
 * (12 or 9 arrays); the legacy binder fuses them into the Keras 2 layout
 * exactly as Keras 2's own loader does, so the specs stay the fused ones. */
static kc_status kc_rnn_keras1(const cJSON *cfg, kc_rnn_attrs *a)
{
    a->use_bias = 1;
    a->reset_after = 0;
    KC_TRY(kc_rnn_activation(cfg, "activation", "tanh", &a->activation));
    return kc_rnn_activation(cfg, "inner_activation", "hard_sigmoid",
                             &a->recurrent_activation);
}

/* The cell's own parameters (units, activations, bias layout). */
static kc_status kc_rnn_read_cell(const cJSON *cfg, kc_rnn_kind kind, const kc_parse_env *env,
                                  kc_rnn_attrs *a)
{
    a->kind = kind;
    a->keras_major = env ? env->keras_major : 3;
    a->n_states = kc_rnn_is_lstm(kind) ? 2 : 1;
    int keras1 = !cJSON_GetObjectItemCaseSensitive(cfg, "units") &&
                 cJSON_GetObjectItemCaseSensitive(cfg, "output_dim");
    KC_TRY(kc_cfg_int(cfg, keras1 ? "output_dim" : "units", -1, &a->units));
    if (a->units < 1 || a->units > KC_RNN_MAX_UNITS)
        return kc_fail(KC_ERR_FORMAT, "units %lld missing or out of range (1..%lld)",
                       (long long)a->units, (long long)KC_RNN_MAX_UNITS);
    if (kc_rnn_is_cudnn(kind)) {
        a->activation = "tanh";
        a->recurrent_activation = "sigmoid";
        a->use_bias = 1;
        a->reset_after = 1;
        return KC_OK;
    }
    if (keras1)
        return kc_rnn_keras1(cfg, a);
    /* Defaults only matter for files old enough to omit the key:
     * standalone Keras 2 used hard_sigmoid and GRU reset_after=False. */
    int modern = a->keras_major >= 3;
    KC_TRY(kc_rnn_activation(cfg, "activation", "tanh", &a->activation));
    KC_TRY(kc_rnn_activation(cfg, "recurrent_activation", modern ? "sigmoid" : "hard_sigmoid",
                             &a->recurrent_activation));
    KC_TRY(kc_cfg_bool(cfg, "use_bias", 1, &a->use_bias));
    if (kind == KC_RNN_GRU)
        KC_TRY(kc_cfg_bool(cfg, "reset_after", modern, &a->reset_after));
    return KC_OK;
}

/* The RNN layer's own switches. */
static kc_status kc_rnn_read_flags(const cJSON *cfg, kc_rnn_attrs *a)
{
    int time_major;
    KC_TRY(kc_cfg_bool(cfg, "return_sequences", 0, &a->return_sequences));
    KC_TRY(kc_cfg_bool(cfg, "return_state", 0, &a->return_state));
    KC_TRY(kc_cfg_bool(cfg, "go_backwards", 0, &a->go_backwards));
    KC_TRY(kc_cfg_bool(cfg, "stateful", 0, &a->stateful));
    KC_TRY(kc_cfg_bool(cfg, "unroll", 0, &a->unroll));
    KC_TRY(kc_cfg_bool(cfg, "time_major", 0, &time_major));
    if (time_major)
        return kc_fail(KC_ERR_UNSUPPORTED, "time_major=true is not supported");
    return KC_OK;
}

/* keras.layers.RNN(cell): the cell is a serialized LSTMCell/GRUCell/
 * SimpleRNNCell; stacked or custom cells are not supported. */
static kc_status kc_rnn_read_generic(const cJSON *cfg, const kc_parse_env *env,
                                     kc_rnn_attrs *a)
{
    const cJSON *cell = cJSON_GetObjectItemCaseSensitive(cfg, "cell");
    if (cJSON_IsArray(cell))
        return kc_fail(KC_ERR_UNSUPPORTED, "RNN over a list of cells (stacked) is not "
                       "supported");
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(cell, "class_name");
    const cJSON *module = cJSON_GetObjectItemCaseSensitive(cell, "module");
    const cJSON *ccfg = cJSON_GetObjectItemCaseSensitive(cell, "config");
    if (!cJSON_IsString(cls) || !cJSON_IsObject(ccfg))
        return kc_fail(KC_ERR_FORMAT, "RNN config has no cell {class_name, config}");
    kc_rnn_kind kind;
    if ((cJSON_IsString(module) && strncmp(module->valuestring, "keras", 5) != 0 &&
         strncmp(module->valuestring, "tf_keras", 8) != 0) ||
        !kc_rnn_kind_of(cls->valuestring, &kind) || kc_rnn_is_cudnn(kind) ||
        strstr(cls->valuestring, "Cell") == NULL)
        return kc_fail(KC_ERR_UNSUPPORTED, "RNN cell '%s' is not supported (only LSTMCell, "
                       "GRUCell, SimpleRNNCell)", cls->valuestring);
    KC_TRY(kc_rnn_read_cell(ccfg, kind, env, a));
    return kc_rnn_read_flags(cfg, a);
}

/* Fill attrs for RNN layer class `cls` with config `cfg`. */
static kc_status kc_rnn_fill(const char *cls, const cJSON *cfg, const kc_parse_env *env,
                             kc_rnn_attrs *a)
{
    memset(a, 0, sizeof *a);
    if (strcmp(cls, "RNN") == 0)
        return kc_rnn_read_generic(cfg, env, a);
    kc_rnn_kind kind;
    if (!kc_rnn_kind_of(cls, &kind) || strstr(cls, "Cell"))
        return kc_fail(KC_ERR_UNSUPPORTED, "'%s' is not a supported RNN layer", cls);
    KC_TRY(kc_rnn_read_cell(cfg, kind, env, a));
    return kc_rnn_read_flags(cfg, a);
}

static kc_status kc_rnn_parse(kc_layer *layer, const kc_parse_env *env)
{
    kc_rnn_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    return kc_rnn_fill(layer->def->class_name, layer->config, env, a);
}

/* ------------------------------------------------------------- infer */

/* Input 0 is the sequence; role "mask" inputs are ignored for shapes;
 * the rest are initial states. */
static kc_status kc_rnn_check_states(const kc_op_ctx *ctx, const kc_rnn_attrs *a)
{
    int n = 0;
    for (int i = 1; i < ctx->n_in; i++) {
        const char *r = ctx->in_roles ? ctx->in_roles[i] : NULL;
        if (r && strcmp(r, "mask") == 0)
            continue;
        if (r && strcmp(r, "initial_state") != 0)
            return kc_fail(KC_ERR_UNSUPPORTED, "tensor argument '%s' is not supported", r);
        const kc_shape *s = &ctx->in[i];
        if (s->rank != 2 || (s->dims[1] >= 0 && s->dims[1] != a->units))
            return kc_fail(KC_ERR_SHAPE, "initial state %d is not (batch, %lld)", n,
                           (long long)a->units);
        n++;
    }
    if (n != 0 && n != a->n_states)
        return kc_fail(KC_ERR_SHAPE, "got %d initial states, expected %d", n, a->n_states);
    return KC_OK;
}

/* Variables in Keras's creation order (keras-formats.md §1.8.7). */
static kc_status kc_rnn_specs(kc_op_ctx *ctx, const kc_rnn_attrs *a, int64_t in_dim)
{
    const char *group = kc_rnn_is_cudnn(a->kind) ? "" : "cell";
    int64_t u = a->units, g = kc_rnn_gates(a->kind);
    if (in_dim > KC_MAX_ELEMENTS / (g * u))
        return kc_fail(KC_ERR_LIMIT, "kernel (%lld, %lld) too large", (long long)in_dim,
                       (long long)(g * u));
    kc_op_spec(ctx, group, "kernel", 1, 2, in_dim, g * u);
    kc_op_spec(ctx, group, "recurrent_kernel", 1, 2, u, g * u);
    if (kc_rnn_is_cudnn(a->kind))
        kc_op_spec(ctx, group, "bias", 1, 1, 2 * g * u);
    else if (a->use_bias && a->kind == KC_RNN_GRU && a->reset_after)
        kc_op_spec(ctx, group, "bias", 1, 2, (int64_t)2, g * u);
    else if (a->use_bias)
        kc_op_spec(ctx, group, "bias", 1, 1, g * u);
    return KC_OK;
}

static kc_status kc_rnn_infer(kc_op_ctx *ctx)
{
    const kc_rnn_attrs *a = ctx->layer->attrs;
    if (ctx->n_in < 1)
        return kc_fail(KC_ERR_FORMAT, "expects a sequence input");
    KC_TRY(kc_op_expect_rank(ctx, 0, 3, 3));
    KC_TRY(kc_rnn_check_states(ctx, a));
    const kc_shape *in = &ctx->in[0];
    if (in->dims[2] < 1)
        return kc_fail(KC_ERR_SHAPE, "input feature dimension is unknown");
    int64_t b = in->dims[0], u = a->units;
    ctx->out[0] = a->return_sequences ? (kc_shape){.rank = 3, .dims = {b, in->dims[1], u}}
                                      : (kc_shape){.rank = 2, .dims = {b, u}};
    ctx->n_out = 1;
    for (int s = 0; a->return_state && s < a->n_states; s++)
        ctx->out[ctx->n_out++] = (kc_shape){.rank = 2, .dims = {b, u}};
    return kc_rnn_specs(ctx, a, in->dims[2]);
}

/* ------------------------------------------------ wrappers: shared */

/* Run an inner layer's def on one input; its specs land in inner->specs
 * on the wrapper's first call. */
static kc_status kc_wrap_run(const kc_op_ctx *ctx, kc_layer *inner, const kc_shape *in,
                             const kc_dtype *dtype, kc_op_ctx *ictx)
{
    memset(ictx, 0, sizeof *ictx);
    ictx->layer = inner;
    ictx->env = ctx->env;
    ictx->in = in;
    ictx->in_dtype = dtype;
    ictx->n_in = 1;
    ictx->first_call = ctx->first_call;
    if (ctx->first_call)
        inner->n_specs = 0;
    kc_status st = inner->def->infer(ictx);
    if (st != KC_OK)
        return kc_fail_context(st, "wrapped layer '%s'", inner->name);
    if (ictx->n_out < 1 || ictx->n_out > KC_MAX_OUTPUTS)
        return kc_fail(KC_ERR_FORMAT, "wrapped layer '%s' produced %d outputs", inner->name,
                       ictx->n_out);
    return KC_OK;
}

/* Copy inner specs into the wrapper under `prefix` (the Keras 3 attribute
 * path of the inner layer); group strings live in the wrapper's attrs. */
static kc_status kc_wrap_copy_specs(kc_op_ctx *ctx, const kc_layer *inner, const char *prefix,
                                    char (*groups)[KC_WRAP_GROUP_MAX])
{
    kc_layer *outer = ctx->layer;
    if (!ctx->first_call)
        return KC_OK;
    for (int i = 0; i < inner->n_specs; i++) {
        if (outer->n_specs >= KC_MAX_WEIGHT_SPECS)
            return kc_fail(KC_ERR_LIMIT, "more than %d weights", KC_MAX_WEIGHT_SPECS);
        char *g = groups[outer->n_specs];
        const char *ig = inner->specs[i].group ? inner->specs[i].group : "";
        int n = ig[0] ? snprintf(g, KC_WRAP_GROUP_MAX, "%s/%s", prefix, ig)
                      : snprintf(g, KC_WRAP_GROUP_MAX, "%s", prefix);
        if (n < 0 || n >= KC_WRAP_GROUP_MAX)
            return kc_fail(KC_ERR_LIMIT, "weight group path '%s/%s' too long", prefix, ig);
        outer->specs[outer->n_specs] = inner->specs[i];
        outer->specs[outer->n_specs].group = g;
        outer->n_specs++;
    }
    return KC_OK;
}

/* Point an embedded kc_layer at a serialized {class_name, config} entry;
 * strings are borrowed from the JSON, which outlives the graph's layers. */
static kc_status kc_wrap_bind(kc_layer *wrapper, const cJSON *entry, kc_layer *inner,
                              const char *what)
{
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(entry, "class_name");
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(entry, "config");
    const cJSON *module = cJSON_GetObjectItemCaseSensitive(entry, "module");
    if (!cJSON_IsString(cls) || !cJSON_IsObject(cfg))
        return kc_fail(KC_ERR_FORMAT, "'%s' is not a serialized layer {class_name, config}",
                       what);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(cfg, "name");
    inner->name = cJSON_IsString(name) ? name->valuestring : cls->valuestring;
    inner->class_name = cls->valuestring;
    inner->module = cJSON_IsString(module) ? module->valuestring : NULL;
    inner->config = cfg;
    inner->entry = entry;
    inner->parent = wrapper;
    inner->def = kc_op_lookup(inner->module, inner->class_name);
    KC_TRY(kc_cfg_bool(cfg, "trainable", 1, &inner->trainable));
    if (!inner->def)
        return kc_fail(KC_ERR_UNSUPPORTED, "%s wraps unsupported layer class '%s'",
                       wrapper->def->class_name, inner->class_name);
    return KC_OK;
}

/* Only the sequence (input 0) and masks; initial states would have to be
 * split between the two directions. */
static kc_status kc_wrap_check_inputs(const kc_op_ctx *ctx)
{
    if (ctx->n_in < 1)
        return kc_fail(KC_ERR_FORMAT, "expects an input");
    for (int i = 1; i < ctx->n_in; i++) {
        const char *r = ctx->in_roles ? ctx->in_roles[i] : NULL;
        if (!r || strcmp(r, "mask") != 0)
            return kc_fail(KC_ERR_UNSUPPORTED, "extra tensor argument '%s' is not supported",
                           r ? r : "(positional)");
    }
    return KC_OK;
}

/* ------------------------------------------------------ Bidirectional */

static kc_status kc_bidi_merge_mode(const cJSON *cfg, kc_merge_mode *out)
{
    static const char *const names[] = {"concat", "sum", "mul", "ave"};
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(cfg, "merge_mode");
    *out = KC_MERGE_CONCAT;
    if (!m)
        return KC_OK;
    if (cJSON_IsNull(m)) {
        *out = KC_MERGE_NONE;
        return KC_OK;
    }
    for (int i = 0; cJSON_IsString(m) && i < 4; i++)
        if (strcmp(m->valuestring, names[i]) == 0) {
            *out = (kc_merge_mode)i;
            return KC_OK;
        }
    return kc_fail(KC_ERR_FORMAT, "unknown merge_mode '%s' (concat, sum, mul, ave or null)",
                   cJSON_IsString(m) ? m->valuestring : "?");
}

/* One direction: the entry must be one of this family's RNN layers. */
static kc_status kc_bidi_side(kc_layer *wrapper, const kc_parse_env *env, const cJSON *entry,
                              kc_layer *side, kc_rnn_attrs *ra)
{
    KC_TRY(kc_wrap_bind(wrapper, entry, side, "layer"));
    if (side->def->infer != kc_rnn_infer)
        return kc_fail(KC_ERR_UNSUPPORTED, "Bidirectional wraps '%s', which is not a "
                       "supported recurrent layer", side->class_name);
    KC_TRY(kc_rnn_fill(side->class_name, side->config, env, ra));
    side->attrs = ra;
    return KC_OK;
}

static kc_status kc_bidi_check(const kc_bidirectional_attrs *a)
{
    const kc_rnn_attrs *f = &a->fwd_attrs, *b = &a->bwd_attrs;
    if (f->go_backwards == b->go_backwards)
        return kc_fail(KC_ERR_FORMAT, "forward and backward layers have the same "
                       "go_backwards");
    if (f->return_sequences != b->return_sequences || f->return_state != b->return_state ||
        f->stateful != b->stateful)
        return kc_fail(KC_ERR_FORMAT, "forward and backward layers differ in "
                       "return_sequences/return_state/stateful");
    if (f->n_states != b->n_states)
        return kc_fail(KC_ERR_UNSUPPORTED, "forward and backward layers of different kinds");
    return KC_OK;
}

static kc_status kc_bidi_parse(kc_layer *layer, const kc_parse_env *env)
{
    kc_bidirectional_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    const cJSON *cfg = layer->config;
    int64_t n_constants;
    KC_TRY(kc_bidi_merge_mode(cfg, &a->merge_mode));
    KC_TRY(kc_cfg_int(cfg, "num_constants", 0, &n_constants));
    if (n_constants != 0)
        return kc_fail(KC_ERR_UNSUPPORTED, "Bidirectional with constants is not supported");
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(cfg, "layer");
    const cJSON *back = cJSON_GetObjectItemCaseSensitive(cfg, "backward_layer");
    KC_TRY(kc_bidi_side(layer, env, inner, &a->forward, &a->fwd_attrs));
    if (back && !cJSON_IsNull(back)) {
        KC_TRY(kc_bidi_side(layer, env, back, &a->backward, &a->bwd_attrs));
    } else {
        /* Keras builds the backward layer from the same config with
         * go_backwards flipped. */
        KC_TRY(kc_bidi_side(layer, env, inner, &a->backward, &a->bwd_attrs));
        a->bwd_attrs.go_backwards = !a->fwd_attrs.go_backwards;
    }
    return kc_bidi_check(a);
}

static kc_status kc_bidi_merge(kc_op_ctx *ctx, kc_merge_mode mode, const kc_op_ctx *f,
                               const kc_op_ctx *b)
{
    kc_shape y = f->out[0];
    const kc_shape *yr = &b->out[0];
    if (y.rank != yr->rank || y.rank < 1)
        return kc_fail(KC_ERR_SHAPE, "forward and backward outputs differ in rank");
    int last = y.rank - 1;
    for (int d = 0; d < y.rank; d++) {
        int64_t p = y.dims[d], q = yr->dims[d];
        if (mode == KC_MERGE_CONCAT && d == last)
            y.dims[d] = p < 0 || q < 0 ? -1 : p + q;
        else if (mode != KC_MERGE_NONE && p >= 0 && q >= 0 && p != q)
            return kc_fail(KC_ERR_SHAPE, "merge_mode needs equal forward and backward output "
                           "shapes");
        else if (mode != KC_MERGE_NONE && p < 0)
            y.dims[d] = q;
    }
    ctx->n_out = 0;
    ctx->out_dtype[ctx->n_out] = f->out_dtype[0];
    ctx->out[ctx->n_out++] = mode == KC_MERGE_NONE ? f->out[0] : y;
    if (mode == KC_MERGE_NONE) {
        ctx->out_dtype[ctx->n_out] = b->out_dtype[0];
        ctx->out[ctx->n_out++] = *yr;
    }
    if (ctx->n_out + (f->n_out - 1) + (b->n_out - 1) > KC_MAX_OUTPUTS)
        return kc_fail(KC_ERR_LIMIT, "more than %d outputs", KC_MAX_OUTPUTS);
    for (int i = 1; i < f->n_out; i++) {
        ctx->out_dtype[ctx->n_out] = f->out_dtype[i];
        ctx->out[ctx->n_out++] = f->out[i];
    }
    for (int i = 1; i < b->n_out; i++) {
        ctx->out_dtype[ctx->n_out] = b->out_dtype[i];
        ctx->out[ctx->n_out++] = b->out[i];
    }
    return KC_OK;
}

static kc_status kc_bidi_infer(kc_op_ctx *ctx)
{
    kc_bidirectional_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_wrap_check_inputs(ctx));
    kc_op_ctx f, b;
    KC_TRY(kc_wrap_run(ctx, &a->forward, &ctx->in[0], ctx->in_dtype, &f));
    KC_TRY(kc_wrap_run(ctx, &a->backward, &ctx->in[0], ctx->in_dtype, &b));
    KC_TRY(kc_wrap_copy_specs(ctx, &a->forward, "forward_layer", a->groups));
    if (ctx->first_call)
        a->n_forward_specs = ctx->layer->n_specs;
    KC_TRY(kc_wrap_copy_specs(ctx, &a->backward, "backward_layer", a->groups));
    return kc_bidi_merge(ctx, a->merge_mode, &f, &b);
}

/* ---------------------------------------------------- TimeDistributed */

static void kc_td_free(void *attrs)
{
    kc_time_distributed_attrs *a = attrs;
    if (!a)
        return;
    if (a->inner.def && a->inner.def->free_attrs)
        a->inner.def->free_attrs(a->inner.attrs);
    else
        free(a->inner.attrs);
    free(a);
}

static kc_status kc_td_parse(kc_layer *layer, const kc_parse_env *env)
{
    kc_time_distributed_attrs *a = kc_calloc(1, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    layer->attrs = a;
    kc_layer *inner = &a->inner;
    KC_TRY(kc_wrap_bind(layer, cJSON_GetObjectItemCaseSensitive(layer->config, "layer"), inner,
                        "layer"));
    unsigned f = inner->def->flags;
    if (!(f & KC_OPF_LAYER) || (f & (KC_OPF_MODEL | KC_OPF_INPUT)))
        return kc_fail(KC_ERR_UNSUPPORTED, "TimeDistributed over a '%s' is not supported",
                       inner->class_name);
    if (inner->def->parse) {
        kc_status st = inner->def->parse(inner, env);
        if (st != KC_OK)
            return kc_fail_context(st, "wrapped layer '%s'", inner->name);
    }
    return KC_OK;
}

/* The inner layer sees (batch, *rest) with the time axis folded away;
 * each of its outputs gets the time axis back at position 1. */
static kc_status kc_td_infer(kc_op_ctx *ctx)
{
    kc_time_distributed_attrs *a = ctx->layer->attrs;
    KC_TRY(kc_wrap_check_inputs(ctx));
    KC_TRY(kc_op_expect_rank(ctx, 0, 3, KC_MAX_RANK));
    const kc_shape *in = &ctx->in[0];
    kc_shape step = {.rank = in->rank - 1};
    step.dims[0] = in->dims[0];
    memcpy(step.dims + 1, in->dims + 2, (size_t)(in->rank - 2) * sizeof in->dims[0]);
    kc_op_ctx ictx;
    KC_TRY(kc_wrap_run(ctx, &a->inner, &step, ctx->in_dtype, &ictx));
    for (int i = 0; i < ictx.n_out; i++) {
        const kc_shape *o = &ictx.out[i];
        if (o->rank < 1 || o->rank >= KC_MAX_RANK)
            return kc_fail(KC_ERR_SHAPE, "wrapped layer output %d has rank %d", i, o->rank);
        kc_shape r = {.rank = o->rank + 1};
        r.dims[0] = o->dims[0];
        r.dims[1] = in->dims[1];
        memcpy(r.dims + 2, o->dims + 1, (size_t)(o->rank - 1) * sizeof o->dims[0]);
        ctx->out[i] = r;
        ctx->out_dtype[i] = ictx.out_dtype[i];
    }
    ctx->n_out = ictx.n_out;
    return kc_wrap_copy_specs(ctx, &a->inner, "layer", a->groups);
}

/* -------------------------------------------------------------- table */

static const kc_op_def kc_def_lstm = {"LSTM", KC_OPF_LAYER, kc_rnn_parse, kc_rnn_infer};
static const kc_op_def kc_def_gru = {"GRU", KC_OPF_LAYER, kc_rnn_parse, kc_rnn_infer};
static const kc_op_def kc_def_simple = {"SimpleRNN", KC_OPF_LAYER, kc_rnn_parse, kc_rnn_infer};
static const kc_op_def kc_def_rnn = {"RNN", KC_OPF_LAYER, kc_rnn_parse, kc_rnn_infer};
static const kc_op_def kc_def_cudnn_lstm = {"CuDNNLSTM", KC_OPF_LAYER, kc_rnn_parse,
                                            kc_rnn_infer};
static const kc_op_def kc_def_cudnn_gru = {"CuDNNGRU", KC_OPF_LAYER, kc_rnn_parse,
                                           kc_rnn_infer};
static const kc_op_def kc_def_bidi = {"Bidirectional", KC_OPF_LAYER, kc_bidi_parse,
                                      kc_bidi_infer};
static const kc_op_def kc_def_td = {"TimeDistributed", KC_OPF_LAYER, kc_td_parse, kc_td_infer,
                                    kc_td_free};

const kc_op_def *const kc_ops_rnn[] = {&kc_def_lstm,       &kc_def_gru,       &kc_def_simple,
                                       &kc_def_rnn,        &kc_def_cudnn_lstm, &kc_def_cudnn_gru,
                                       &kc_def_bidi,       &kc_def_td,        NULL};
