/* kc_session: run a loaded model on the CPU.
 *
 * The graph is already in topological order with shapes inferred against a
 * symbolic batch. A run resolves every shape for the actual inputs (batch,
 * variable sequence lengths) by re-running each op's shape rule, then calls
 * each node's kernel. Activations live in one arena planned once per input
 * shape: each value gets an offset, and a value's space is reused after its
 * last reader (liveness), so peak memory is the widest cut of the graph,
 * not the sum of all activations. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "base/threads.h"
#include "kernels/kernel.h"
#include "model/model_internal.h"
#include "runtime/fuse.h"
#include "runtime/mask.h"
#include "runtime/plan.h"

struct kc_session {
    const kc_model *model;
    const kc_graph *graph;
    kc_kernel_fn *kernels;   /* per node */
    kc_plan plan;            /* shapes + arena offsets for the last input shapes */
    kc_fused fused;          /* BN folding / activation fusion */
    float *arena;
    size_t arena_floats;
    kc_kernel_state **state; /* per node: kernel state (oneDNN primitives) */
    unsigned char **mask;    /* per value during a run, or NULL */
    unsigned char *mask_owned;
    int threads;
    int exact;               /* kc_session_options.exact */
};

static kc_status kc_layer_error(kc_status st, const kc_layer *layer)
{
    return kc_fail_context(st, "layer '%s' (%s)", layer->name, layer->class_name);
}

kc_status kc_session_new(const kc_model *model, const kc_session_options *options,
                         kc_session **out)
{
    *out = NULL;
    if (!model)
        return kc_fail(KC_ERR_ARG, "kc_session_new: no model");
    const kc_graph *g = model->graph;
    kc_session *s = kc_calloc(1, sizeof *s);
    if (!s)
        return KC_ERR_NOMEM;
    s->model = model;
    s->graph = g;
    s->threads = options && options->threads > 0 ? options->threads : 0;
    s->exact = options && options->exact;
    s->kernels = kc_calloc((size_t)g->n_nodes + 1, sizeof *s->kernels);
    s->mask = kc_calloc((size_t)g->n_values + 1, sizeof *s->mask);
    s->state = kc_calloc((size_t)g->n_nodes + 1, sizeof *s->state);
    s->mask_owned = kc_calloc((size_t)g->n_values + 1, 1);
    if (!s->kernels || !s->mask || !s->mask_owned || !s->state) {
        free(s->state);
        free(s->mask);
        free(s->mask_owned);
        free(s);
        return KC_ERR_NOMEM;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        const kc_layer *layer = g->nodes[i].layer;
        s->kernels[i] = kc_kernel_lookup(layer->def);
        if (!s->kernels[i]) {
            kc_status st = kc_fail(KC_ERR_UNSUPPORTED, "%s: layer '%s' (%s): no CPU kernel yet",
                                   model->path, layer->name, layer->class_name);
            kc_session_free(s);
            return st;
        }
    }
    kc_status fst = kc_fuse(g, &s->fused);
    if (fst != KC_OK) {
        kc_session_free(s);
        return fst;
    }
    *out = s;
    return KC_OK;
}

void kc_session_free(kc_session *s)
{
    if (!s)
        return;
    kc_plan_free(&s->plan);
    kc_fused_free(&s->fused, s->graph->n_nodes);
    for (int i = 0; s->state && i < s->graph->n_nodes; i++)
        if (s->state[i])
            s->state[i]->free(s->state[i]);
    free(s->state);
    free(s->arena);
    free(s->kernels);
    free(s->mask);
    free(s->mask_owned);
    free(s);
}

/* ------------------------------------------------------------- inputs */

static kc_status kc_check_input(const kc_session *s, int i, const kc_tensor *t)
{
    const kc_shape *want = &s->graph->values[s->graph->inputs[i]].shape;
    const char *name = s->graph->input_names[i];
    char got_text[160], want_text[160];
    kc_shape_format(&t->shape, got_text, sizeof got_text);
    kc_shape_format(want, want_text, sizeof want_text);
    if (t->shape.rank != want->rank)
        return kc_fail(KC_ERR_SHAPE, "input %d '%s' has shape %s, the model expects %s", i, name,
                       got_text, want_text);
    for (int d = 0; d < want->rank; d++)
        if (want->dims[d] >= 0 && t->shape.dims[d] != want->dims[d] && d > 0)
            return kc_fail(KC_ERR_SHAPE, "input %d '%s' has shape %s, the model expects %s", i,
                           name, got_text, want_text);
    if (t->dtype == KC_DTYPE_INVALID || t->dtype == KC_BF16)
        return kc_fail(KC_ERR_ARG, "input %d '%s' has unsupported dtype %s", i, name,
                       kc_dtype_name(t->dtype));
    return KC_OK;
}

/* Convert any numeric tensor to float32 into dst. */
static void kc_to_f32(const kc_tensor *t, float *dst)
{
    int64_t n = kc_count(&t->shape);
    const void *src = t->data;
    for (int64_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case KC_F32: dst[i] = ((const float *)src)[i]; break;
        case KC_F64: dst[i] = (float)((const double *)src)[i]; break;
        case KC_F16: dst[i] = kc_half_to_float(((const uint16_t *)src)[i]); break;
        case KC_I8: dst[i] = ((const int8_t *)src)[i]; break;
        case KC_I16: dst[i] = ((const int16_t *)src)[i]; break;
        case KC_I32: dst[i] = (float)((const int32_t *)src)[i]; break;
        case KC_I64: dst[i] = (float)((const int64_t *)src)[i]; break;
        case KC_U8: case KC_BOOL: dst[i] = ((const uint8_t *)src)[i]; break;
        case KC_U16: dst[i] = ((const uint16_t *)src)[i]; break;
        case KC_U32: dst[i] = (float)((const uint32_t *)src)[i]; break;
        case KC_U64: dst[i] = (float)((const uint64_t *)src)[i]; break;
        default: dst[i] = 0; break;
        }
    }
}

/* --------------------------------------------------------------- run */

/* NC(spatial) <-> N(spatial)C for channels_first layers. */
static void kc_relayout(const float *in, float *out, const kc_shape *s, int to_last)
{
    int64_t n = s->dims[0], c = s->rank >= 3 ? (to_last ? s->dims[1] : s->dims[s->rank - 1]) : 1;
    int64_t per = n ? kc_count(s) / n : 0, sp = c ? per / c : 0;
    if (s->rank < 3) {
        memcpy(out, in, (size_t)kc_count(s) * sizeof *out);
        return;
    }
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t p = 0; p < sp; p++) {
                if (to_last)
                    out[b * per + p * c + ch] = in[b * per + ch * sp + p];
                else
                    out[b * per + ch * sp + p] = in[b * per + p * c + ch];
            }
}

/* Run a channels_first layer's NHWC kernel between two transposes. */
static kc_status kc_run_channels_first(kc_kernel_fn fn, kc_exec_ctx *ctx, float **in0,
                                       float *const *outp)
{
    kc_shape in_shape[KC_MAX_NODE_IO], out_shape[KC_MAX_OUTPUTS];
    float *tout[KC_MAX_OUTPUTS] = {0};
    const float *in[KC_MAX_NODE_IO];
    for (int i = 0; i < ctx->n_in; i++) {
        in_shape[i] = ctx->in_shape[i];
        in[i] = ctx->in[i];
    }
    kc_shape_to_channels_last(&in_shape[0]);
    kc_status st = (*in0 = kc_scratch(kc_count(&ctx->in_shape[0]))) ? KC_OK : KC_ERR_NOMEM;
    if (st == KC_OK) {
        kc_relayout(ctx->in[0], *in0, &ctx->in_shape[0], 1);
        in[0] = *in0;
    }
    for (int i = 0; st == KC_OK && i < ctx->n_out; i++) {
        out_shape[i] = ctx->out_shape[i];
        kc_shape_to_channels_last(&out_shape[i]);
        if (!(tout[i] = kc_scratch(kc_count(&out_shape[i]))))
            st = KC_ERR_NOMEM;
    }
    kc_exec_ctx sub = *ctx;
    sub.in = in;
    sub.in_shape = in_shape;
    sub.out = tout;
    sub.out_shape = out_shape;
    if (st == KC_OK)
        st = fn(&sub);
    for (int i = 0; st == KC_OK && i < ctx->n_out; i++)
        kc_relayout(tout[i], outp[i], &out_shape[i], 0);
    for (int i = 0; i < ctx->n_out; i++)
        free(tout[i]);
    return st;
}

static kc_status kc_run_node(kc_session *s, int index)
{
    const kc_graph *g = s->graph;
    const kc_node *node = &g->nodes[index];
    if (s->fused.skip[index]) {
        /* absorbed into its producer; the output aliases the input */
        s->mask[node->outputs[0]] = s->mask[node->inputs[0]];
        return KC_OK;
    }
    const float *in[KC_MAX_NODE_IO];
    kc_shape in_shape[KC_MAX_NODE_IO];
    float *outp[KC_MAX_OUTPUTS];
    kc_shape out_shape[KC_MAX_OUTPUTS];
    if (node->n_inputs > KC_MAX_NODE_IO)
        return kc_layer_error(kc_fail(KC_ERR_LIMIT, "too many inputs"), node->layer);
    for (int i = 0; i < node->n_inputs; i++) {
        in[i] = s->arena + s->plan.offset[node->inputs[i]];
        in_shape[i] = s->plan.shape[node->inputs[i]];
    }
    for (int i = 0; i < node->n_outputs; i++) {
        outp[i] = s->arena + s->plan.offset[node->outputs[i]];
        out_shape[i] = s->plan.shape[node->outputs[i]];
    }
    kc_exec_ctx ctx = {
        .node = node,
        .layer = s->fused.shadow[index] ? s->fused.shadow[index] : node->layer,
        .in = in,
        .in_shape = in_shape,
        .n_in = node->n_inputs,
        .out = outp,
        .out_shape = out_shape,
        .n_out = node->n_outputs,
        .keras_major = s->model->keras_major,
        .in_mask = node->n_inputs ? s->mask[node->inputs[0]] : NULL,
        .state = &s->state[index],
        .exact = s->exact,
    };
    kc_status st;
    if (ctx.layer->channels_first && node->n_inputs > 0) {
        float *tin = NULL;
        st = kc_run_channels_first(s->kernels[index], &ctx, &tin, outp);
        free(tin);
    } else {
        st = s->kernels[index](&ctx);
    }
    if (st != KC_OK)
        return kc_layer_error(st, node->layer);
    if (node->n_inputs && node->n_outputs) {
        int owned = 0;
        int v = node->outputs[0];
        s->mask[v] = kc_mask_after(node, in[0], &in_shape[0], &out_shape[0],
                                   s->mask[node->inputs[0]], &owned);
        s->mask_owned[v] = (unsigned char)owned;
    }
    return KC_OK;
}

static kc_status kc_prepare(kc_session *s, const kc_tensor *const *inputs)
{
    kc_shape shapes[64];
    int n = s->graph->n_inputs;
    if (n > 64)
        return kc_fail(KC_ERR_LIMIT, "more than 64 model inputs");
    for (int i = 0; i < n; i++)
        shapes[i] = inputs[i]->shape;
    if (kc_plan_matches(&s->plan, shapes, n))
        return KC_OK;
    kc_plan_free(&s->plan);
    KC_TRY(kc_plan_build(s->model, s->fused.alias, shapes, n, &s->plan));
    if (s->plan.arena_floats > s->arena_floats) {
        free(s->arena);
        s->arena = kc_calloc(s->plan.arena_floats, sizeof *s->arena);
        s->arena_floats = s->arena ? s->plan.arena_floats : 0;
        if (!s->arena)
            return KC_ERR_NOMEM;
    }
    return KC_OK;
}

/* Validate, plan and run every node; the outputs are left in the arena. */
static kc_status kc_session_exec(kc_session *s, const kc_tensor *const *inputs, int n_inputs,
                                 int n_outputs)
{
    kc_error_clear();
    if (!s || (!inputs && n_inputs))
        return kc_fail(KC_ERR_ARG, "kc_session_run: null argument");
    const kc_graph *g = s->graph;
    if (n_inputs != g->n_inputs)
        return kc_fail(KC_ERR_ARG, "the model takes %d input(s), %d given", g->n_inputs,
                       n_inputs);
    if (n_outputs != g->n_outputs)
        return kc_fail(KC_ERR_ARG, "the model has %d output(s), %d requested", g->n_outputs,
                       n_outputs);
    for (int i = 0; i < n_inputs; i++) {
        if (!inputs[i])
            return kc_fail(KC_ERR_ARG, "input %d is null", i);
        KC_TRY(kc_check_input(s, i, inputs[i]));
    }
    for (int i = 1; i < n_inputs; i++)
        if (inputs[i]->shape.dims[0] != inputs[0]->shape.dims[0])
            return kc_fail(KC_ERR_SHAPE, "inputs have different batch sizes (%lld and %lld)",
                           (long long)inputs[0]->shape.dims[0],
                           (long long)inputs[i]->shape.dims[0]);
    KC_TRY(kc_prepare(s, inputs));
    kc_threads_enter(s->threads);
    for (int i = 0; i < n_inputs; i++)
        kc_to_f32(inputs[i], s->arena + s->plan.offset[g->inputs[i]]);
    kc_status st = KC_OK;
    for (int i = 0; st == KC_OK && i < g->n_nodes; i++)
        st = kc_run_node(s, i);
    for (int v = 0; v < g->n_values; v++) {
        if (s->mask_owned[v])
            free(s->mask[v]);
        s->mask[v] = NULL;
        s->mask_owned[v] = 0;
    }
    return st;
}

kc_status kc_session_run(kc_session *s, const kc_tensor *const *inputs, int n_inputs,
                         kc_tensor **outputs, int n_outputs)
{
    if (!outputs && n_outputs)
        return kc_fail(KC_ERR_ARG, "kc_session_run: null argument");
    KC_TRY(kc_session_exec(s, inputs, n_inputs, n_outputs));
    const kc_graph *g = s->graph;
    for (int i = 0; i < n_outputs; i++)
        outputs[i] = NULL;
    for (int i = 0; i < n_outputs; i++) {
        int v = g->outputs[i];
        const kc_shape *shape = &s->plan.shape[v];
        kc_status st = kc_tensor_new(KC_F32, shape->rank, shape->dims, &outputs[i]);
        if (st != KC_OK) {
            for (int j = 0; j < i; j++) {
                kc_tensor_free(outputs[j]);
                outputs[j] = NULL;
            }
            return st;
        }
        memcpy(outputs[i]->data, s->arena + s->plan.offset[v],
               (size_t)kc_count(shape) * sizeof(float));
    }
    return KC_OK;
}

kc_status kc_session_run_into(kc_session *s, const kc_tensor *const *inputs, int n_inputs,
                              kc_tensor *const *outputs, int n_outputs)
{
    if (!outputs && n_outputs)
        return kc_fail(KC_ERR_ARG, "kc_session_run_into: null argument");
    for (int i = 0; i < n_outputs; i++)
        if (!outputs[i] || outputs[i]->dtype != KC_F32)
            return kc_fail(KC_ERR_ARG, "output %d is null or not float32", i);
    KC_TRY(kc_session_exec(s, inputs, n_inputs, n_outputs));
    for (int i = 0; i < n_outputs; i++) {
        int v = s->graph->outputs[i];
        const kc_shape *shape = &s->plan.shape[v];
        if (!kc_shape_equal(shape, &outputs[i]->shape)) {
            char want[160];
            kc_shape_format(shape, want, sizeof want);
            return kc_fail(KC_ERR_SHAPE, "output %d must have shape %s", i, want);
        }
        memcpy(outputs[i]->data, s->arena + s->plan.offset[v],
               (size_t)kc_count(shape) * sizeof(float));
    }
    return KC_OK;
}

size_t kc_session_arena_bytes(const kc_session *s)
{
    return s ? s->plan.arena_floats * sizeof(float) : 0;
}

int kc_session_fused_nodes(const kc_session *s) { return s ? s->fused.n_fused : 0; }
