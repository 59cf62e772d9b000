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

#include "base/env.h"
#include "base/error.h"
#include "base/fpenv.h"
#include "base/huge.h"
#include "base/mem.h"
#include "base/threads.h"
#include "backend/cpu_exec.h"
#include "device/devspec.h"
#include "kernels/kernel.h"
#include "model/model_internal.h"
#include "runtime/fuse.h"
#include "runtime/head.h"
#include "runtime/branches.h"
#include "runtime/lanes.h"
#include "runtime/mask.h"
#include "runtime/plan.h"
#include "runtime/sched.h"
#include "runtime/session_internal.h"


static kc_status kc_layer_error(kc_status st, const kc_layer *layer)
{
    return kc_fail_context(st, "layer '%s' (%s)", layer->name, layer->class_name);
}

/* The model's sessions are counted so that one may free the model's
 * arrays it has packed (release_packed_weights) only while it is the sole
 * user. The API borrows the model const, but kc_model_load allocated it
 * mutable, and only these counters and the released arrays change. */
static kc_status kc_session_check_model(const kc_model *model, const kc_session_options *o)
{
    kc_model *m = (kc_model *)model;
    if (m->exclusive)
        return kc_fail(KC_ERR_ARG, "%s: the model's session frees weights it has packed "
                       "(release_packed_weights); free it before creating another", m->path);
    if (o->release_packed_weights && m->n_sessions)
        return kc_fail(KC_ERR_ARG, "%s: release_packed_weights needs the model's only session; "
                       "it has %d already", m->path, m->n_sessions);
    /* arrays a previous session released: back before kc_fuse reads them */
    return kc_model_restore_weights(m);
}

/* Whether `text` names this process's CPU, the host loop's own device
 * ("/CPU:0", "/device:CPU:0", "/cpu:0"). */
static int kc_names_host_cpu(const char *text)
{
    kc_devspec spec;
    return kc_devspec_parse(text, &spec) == KC_OK && kc_devspec_is_local(&spec) &&
           spec.has_device && spec.type == KC_DEVICE_CPU && spec.index == 0;
}

/* The scheduler runs whenever placement, a budget, a trace or disk-backed
 * weights (which it pages in and out) are involved. A device or variables
 * option naming the host CPU alone places nothing: such a session runs on
 * the host loop with all its rewrites, as with no placement (ResNet50 with
 * --device /CPU:0 took 20-21 ms through the scheduler against 18). */
static int kc_session_scheduled(const kc_model *model, const kc_session_options *o)
{
    return (o->device && !kc_names_host_cpu(o->device)) || o->n_place ||
           (o->variables && !kc_names_host_cpu(o->variables)) || o->device_memory ||
           o->trace_path || o->host_memory || model->disk_weights;
}

/* What kc_fuse may rewrite for a session (fuse.h). */
static kc_fuse_level kc_session_fuse_level(const kc_model *m, int scheduled)
{
    return m->disk_weights ? KC_FUSE_NONE : scheduled ? KC_FUSE_PORTABLE : KC_FUSE_HOST;
}

/* kc_fuse's `taken`: the model's count of released arrays when this
 * session may take them over. */
static int *kc_session_taken(kc_session *s)
{
    return s->release_originals ? &((kc_model *)s->model)->n_released : NULL;
}

static void kc_session_join_model(kc_session *s)
{
    kc_model *m = (kc_model *)s->model;
    m->exclusive = s->release_originals;
    m->n_sessions++;
    s->counted = 1;
}

static void kc_session_leave_model(kc_session *s)
{
    kc_model *m = (kc_model *)s->model;
    if (!s->counted)
        return;
    m->n_sessions--;
    if (s->release_originals)
        m->exclusive = 0; /* released arrays stay freed until a session needs them */
}

/* A node reads a copy of its own: packed by its kernel, rewritten by
 * kc_fuse (a shadow), or none at all (absorbed into its producer). */
static int kc_node_packed(const kc_session *s, int j)
{
    return s->fused.skip[j] || s->fused.shadow[j] ||
           (s->state[j] && s->state[j]->weights_cached);
}

/* release_packed_weights, after node `index` ran: its layer's kernel array
 * (its first `n` arrays) once every node calling the layer (a shared layer
 * has several) reads a packed copy of its own. */
static void kc_session_release_packed(kc_session *s, int index, int n)
{
    kc_layer *layer = s->graph->nodes[index].layer;
    if (!layer->n_weights || !layer->weights[0].data)
        return;
    for (int j = 0; j < s->graph->n_nodes; j++)
        if ((j == index || (layer->n_calls != 1 && s->graph->nodes[j].layer == layer)) &&
            !kc_node_packed(s, j))
            return;
    for (int w = 0; w < n && w < layer->n_weights; w++)
        kc_model_release_weight((kc_model *)s->model, layer, w);
    s->n_packed_released++;
}

static void kc_session_arena_free(kc_session *s);

kc_status kc_session_new(const kc_model *model, const kc_session_options *options,
                         kc_session **out)
{
    *out = NULL;
    if (!model)
        return kc_fail(KC_ERR_ARG, "kc_session_new: no model");
    static const kc_session_options no_options;
    const kc_session_options *o = options ? options : &no_options;
    if (o->microbatch < 0)
        return kc_fail(KC_ERR_ARG, "micro-batch size %lld is negative", (long long)o->microbatch);
    KC_TRY(kc_session_check_model(model, o));
    const kc_graph *g = model->graph;
    kc_session *s = kc_calloc(1, sizeof *s);
    if (!s)
        return KC_ERR_NOMEM;
    s->model = model;
    s->graph = g;
    s->threads = options && options->threads > 0 ? options->threads : 0;
    s->microbatch = options && options->microbatch > 0 ? options->microbatch : 0;
    s->stage_first = s->stage_last = -1;
    s->exact = options && options->exact;
    s->trace_nodes = kc_mem_trace_nodes();
    s->wino_budget.left =
        options && options->winograd_memory ? options->winograd_memory : SIZE_MAX;
    s->fuse_dw = !kc_env_off("KC_FUSE_DW"); /* 0: never fuse depthwise pairs (fuse.c) */
    s->lanes_refused = kc_env_off("KC_LANES") || !kc_lanes_model_ok(g);
    s->branches_off = kc_env_off("KC_BRANCHES");
    s->branch_join_off = kc_env_off("KC_BRANCH_JOIN");
    s->branch_rebalance_off = kc_env_off("KC_BRANCH_REBALANCE");
    s->fuse_pool = !kc_env_off("KC_FUSE_POOL"); /* 0: never move a pooling (fuse.c) */
    s->fuse_up = !kc_env_off("KC_FUSE_UP"); /* 0: upsamplings run before their 3x3 conv */
    s->fuse_head = !kc_env_off("KC_FUSE_HEAD"); /* 0: a classifier runs after its 1x1 conv */
    s->input_direct = !kc_env_off("KC_INPUT_DIRECT"); /* 0: inputs always copied in */
    if (o->profile && !kc_session_scheduled(model, o) && !(s->profile = kc_profile_new(g->n_nodes))) {
        free(s);
        return KC_ERR_NOMEM;
    }
    s->kernels = kc_calloc((size_t)g->n_nodes + 1, sizeof *s->kernels);
    s->mask = kc_calloc((size_t)g->n_values + 1, sizeof *s->mask);
    s->state = kc_calloc((size_t)g->n_nodes + 1, sizeof *s->state);
    s->mask_owned = kc_calloc((size_t)g->n_values + 1, 1);
    if (!s->kernels || !s->mask || !s->mask_owned || !s->state) {
        free(s->state);
        free(s->mask);
        free(s->mask_owned);
        kc_profile_free(s->profile);
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
    s->release_originals = o->release_packed_weights && !kc_session_scheduled(model, o);
    kc_status fst = kc_fuse(g, kc_session_fuse_level(model, kc_session_scheduled(model, o)),
                            NULL, kc_session_taken(s), &s->fused);
    if (fst != KC_OK) {
        kc_session_free(s);
        return fst;
    }
    if (kc_session_scheduled(model, o)) {
        kc_status sst = kc_sched_new(s, o, &s->sched);
        if (sst != KC_OK) {
            kc_session_free(s);
            return sst;
        }
    }
    kc_session_join_model(s);
    kc_mem_trace("session created");
    *out = s;
    return KC_OK;
}

void kc_session_free(kc_session *s)
{
    if (!s)
        return;
    kc_session_leave_model(s);
    kc_sched_free(s->sched);
    kc_head_free(s);
    kc_branches_free(s->branches);
    kc_plan_free(&s->plan);
    kc_fused_free(&s->fused, s->graph->n_nodes);
    for (int i = 0; s->state && i < s->graph->n_nodes; i++)
        if (s->state[i])
            s->state[i]->free(s->state[i]);
    free(s->state);
    kc_session_arena_free(s);
    free(s->kernels);
    free(s->mask);
    free(s->mask_owned);
    kc_profile_free(s->profile);
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

/* dst[i] = (float)src[i] for n elements of C type `type`. */
#define KC_CONVERT_LOOP(type, conv)                                                         \
    do {                                                                                    \
        const type *from = src;                                                             \
        for (int64_t i = 0; i < n; i++)                                                     \
            dst[i] = conv(from[i]);                                                         \
    } while (0)
#define KC_AS_FLOAT(x) ((float)(x))

/* Convert any numeric tensor to float32 into dst. One loop per dtype, not
 * a switch per element: MobileNetV2's 150,528 input floats took ~90 us
 * through a per-element switch, 3% of an inference at batch 1; float32
 * input is a plain copy. */
void kc_session_input_slice(const kc_tensor *t, int64_t first, int64_t n, float *dst)
{
    const void *src = (const char *)t->data + (size_t)first * kc_dtype_size(t->dtype);
    switch (t->dtype) {
    case KC_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case KC_F64: KC_CONVERT_LOOP(double, KC_AS_FLOAT); break;
    case KC_F16: KC_CONVERT_LOOP(uint16_t, kc_half_to_float); break;
    case KC_I8: KC_CONVERT_LOOP(int8_t, KC_AS_FLOAT); break;
    case KC_I16: KC_CONVERT_LOOP(int16_t, KC_AS_FLOAT); break;
    case KC_I32: KC_CONVERT_LOOP(int32_t, KC_AS_FLOAT); break;
    case KC_I64: KC_CONVERT_LOOP(int64_t, KC_AS_FLOAT); break;
    case KC_U8: case KC_BOOL: KC_CONVERT_LOOP(uint8_t, KC_AS_FLOAT); break;
    case KC_U16: KC_CONVERT_LOOP(uint16_t, KC_AS_FLOAT); break;
    case KC_U32: KC_CONVERT_LOOP(uint32_t, KC_AS_FLOAT); break;
    case KC_U64: KC_CONVERT_LOOP(uint64_t, KC_AS_FLOAT); break;
    default: memset(dst, 0, (size_t)n * sizeof(float)); break;
    }
}
#undef KC_CONVERT_LOOP
#undef KC_AS_FLOAT

typedef struct kc_input_copy {
    const kc_tensor *t;
    float *dst;
    int64_t n;
    int parts;
} kc_input_copy;

static void kc_input_copy_part(void *arg, int index)
{
    const kc_input_copy *c = arg;
    int64_t first = c->n * index / c->parts, end = c->n * (index + 1) / c->parts;
    kc_session_input_slice(c->t, first, end - first, c->dst + first);
}

/* The input into the arena, cut between the threads from 256 KiB on: one
 * core copies ~9 GB/s, so a batch of 32 ResNet50 images (18.5 MiB) took
 * 2 ms of a 16.5 ms run on the H200's host, where many cores read memory
 * side by side; on two cores it is level. */
static void kc_to_f32(const kc_tensor *t, float *dst)
{
    int64_t n = kc_count(&t->shape);
    kc_input_copy copy = {t, dst, n, kc_parallel_parts(n * (int64_t)sizeof(float), n / 4096)};
    kc_parallel(copy.parts, kc_input_copy_part, &copy);
}

/* --------------------------------------------------------------- run */

/* Whether the plain loop may read model input i where the caller's
 * tensor t holds it instead of copying it into its slot: float32 (the
 * copy would be a plain memcpy); no model output in its slot (gathered
 * from the slot); no value sharing its slot but the outputs of absorbed
 * layers (views of it, read where it is: kc_session_value_in), so none
 * a kernel writes there (a residual sum over it); and no running node
 * that reads it writing an output over its slot (a kernel working in
 * place). The slot is then left unwritten: once the input is dead the
 * plan gives it to other values, as it would anyway. Why: the copy of a
 * 224x224 RGB image (600 KB) took 45-70 us of MobileNetV2's 3.4 ms at
 * batch 1 on two threads, one parallel pass of its own. */
static int kc_session_direct_ok(const kc_session *s, int i, const kc_tensor *t)
{
    const kc_graph *g = s->graph;
    int v = g->inputs[i];
    if (!s->input_direct || t->dtype != KC_F32 || !t->data)
        return 0;
    for (int o = 0; o < g->n_outputs; o++)
        if (kc_plan_root(s->fused.alias, g->outputs[o]) == v)
            return 0;
    for (int u = 0; u < g->n_values; u++) {
        int producer = g->values[u].producer;
        if (u != v && kc_plan_root(s->fused.alias, u) == v &&
            (producer < 0 || !s->fused.skip[producer]))
            return 0;
    }
    size_t lo = s->plan.offset[v], hi = lo + (size_t)kc_shape_count(&s->plan.shape[v]);
    for (int n = 0; n < g->n_nodes; n++) {
        const kc_node *node = &g->nodes[n];
        int reads = 0;
        for (int j = 0; j < node->n_inputs && !s->fused.skip[n]; j++)
            reads |= kc_plan_root(s->fused.alias, node->inputs[j]) == v;
        for (int j = 0; reads && j < node->n_outputs; j++) {
            size_t o_lo = s->plan.offset[node->outputs[j]];
            size_t o_hi = o_lo + (size_t)kc_shape_count(&s->plan.shape[node->outputs[j]]);
            if (o_lo < hi && lo < o_hi)
                return 0;
        }
    }
    return 1;
}

/* The model inputs into the session's arena: each copied into its slot
 * (kc_to_f32) or, where `direct` (the plain loop runs the nodes), read
 * where it is if it may (kc_session_direct_ok). */
static void kc_session_inputs_in(kc_session *s, const kc_tensor *const *inputs, int n_inputs,
                                 int direct)
{
    const kc_graph *g = s->graph;
    s->n_direct = 0;
    for (int i = 0; i < n_inputs; i++) {
        if (direct && s->n_direct < KC_SESSION_MAX_DIRECT &&
            kc_session_direct_ok(s, i, inputs[i])) {
            s->direct_value[s->n_direct] = g->inputs[i];
            s->direct_data[s->n_direct++] = kc_tensor_cdata(inputs[i]);
            continue;
        }
        kc_to_f32(inputs[i], s->arena + s->plan.offset[g->inputs[i]]);
    }
    s->n_direct_last = s->n_direct;
}

/* Where value v is read in `arena` laid out by `plan`: the caller's
 * tensor for a model input read in place (kc_session_direct), else its
 * slot. */
static const float *kc_session_value_in(const kc_session *s, const kc_plan *plan,
                                        const float *arena, int v)
{
    if (!s->n_direct || plan != &s->plan || arena != s->arena)
        return arena + plan->offset[v];
    int root = kc_plan_root(s->fused.alias, v); /* an absorbed layer's output: a view */
    for (int k = 0; k < s->n_direct; k++)
        if (s->direct_value[k] == root)
            return s->direct_data[k] + (plan->offset[v] - plan->offset[root]);
    return arena + plan->offset[v];
}

/* Node index's inputs and outputs in `arena` (the plan's offsets). */
static kc_status kc_session_node_io(const kc_session *s, int index, const kc_plan *plan,
                                    float *arena, const float **in, kc_shape *in_shape,
                                    float **outp, kc_shape *out_shape)
{
    const kc_node *node = &s->graph->nodes[index];
    if (node->n_inputs > KC_MAX_NODE_IO)
        return kc_layer_error(kc_fail(KC_ERR_LIMIT, "too many inputs"), node->layer);
    for (int i = 0; i < node->n_inputs; i++) {
        in[i] = kc_session_value_in(s, plan, arena, node->inputs[i]);
        in_shape[i] = plan->shape[node->inputs[i]];
    }
    for (int i = 0; i < node->n_outputs; i++) {
        outp[i] = arena + plan->offset[node->outputs[i]];
        out_shape[i] = plan->shape[node->outputs[i]];
    }
    return KC_OK;
}

/* Node index's kernel on `arena` laid out by `plan`, its input mask
 * `in_mask`, the arena's floats [spare, spare + spare_floats) free for it. */
static kc_status kc_session_kernel_in(kc_session *s, int index, const kc_plan *plan,
                                      float *arena, const unsigned char *in_mask, size_t spare,
                                      size_t spare_floats)
{
    const kc_node *node = &s->graph->nodes[index];
    const float *in[KC_MAX_NODE_IO];
    kc_shape in_shape[KC_MAX_NODE_IO];
    float *outp[KC_MAX_OUTPUTS];
    kc_shape out_shape[KC_MAX_OUTPUTS];
    KC_TRY(kc_session_node_io(s, index, plan, arena, in, in_shape, outp, out_shape));
    kc_backend_call call = {
        .node = node,
        .layer = s->fused.shadow[index] ? s->fused.shadow[index] : node->layer,
        .keras_major = s->model->keras_major,
        .in = in,
        .in_shape = in_shape,
        .n_in = node->n_inputs,
        .out = outp,
        .out_shape = out_shape,
        .n_out = node->n_outputs,
        .in_mask = in_mask,
        .exact = s->exact,
        .wino_budget = &s->wino_budget,
        .spare = arena + spare,
        .spare_bytes = spare_floats * sizeof(float),
    };
    kc_status st = kc_cpu_exec(s->kernels[index], &call, &s->state[index], 0);
    return st == KC_OK ? KC_OK : kc_layer_error(st, node->layer);
}

static kc_status kc_session_kernel(kc_session *s, int index, const kc_plan *plan, float *arena,
                                   const unsigned char *in_mask)
{
    return kc_session_kernel_in(s, index, plan, arena, in_mask, plan->spare_offset[index],
                                plan->spare_floats[index]);
}

kc_status kc_session_node_spare(kc_session *s, int index, size_t spare, size_t spare_floats)
{
    return kc_session_kernel_in(s, index, &s->plan, s->arena, NULL, spare, spare_floats);
}

kc_status kc_session_node_on(kc_session *s, int index, const kc_plan *plan, float *arena)
{
    return kc_session_kernel(s, index, plan, arena, NULL);
}

/* After node index's kernel ran: once its state holds a packed copy of
 * the weights, the fused and original arrays it no longer reads go; a
 * 1x1 convolution's head (kc_fuse_head_plan) packed its Dense's too. */
static void kc_session_release_after(kc_session *s, int index)
{
    if (s->state[index] && s->state[index]->weights_cached && !s->sched) {
        int dense = s->fused.head_on && s->fused.head_on[index] ? s->fused.head_dense[index] : -1;
        kc_fused_release_kernel(&s->fused, index); /* the packed copy is the one read now */
        if (dense >= 0)
            kc_fused_release_kernel(&s->fused, dense);
        if (s->release_originals) {
            kc_session_release_packed(s, index, 1);
            if (dense >= 0) /* its kernel and bias: the head keeps copies */
                kc_session_release_packed(s, dense, 2);
        }
    }
}

kc_status kc_session_first_on(kc_session *s, int index, const kc_plan *plan, float *arena)
{
    if (s->fused.skip[index])
        return KC_OK;
    KC_TRY(kc_session_kernel(s, index, plan, arena, NULL));
    kc_session_release_after(s, index);
    return KC_OK;
}

kc_status kc_session_run_node(kc_session *s, int index)
{
    const kc_graph *g = s->graph;
    const kc_node *node = &g->nodes[index];
    if (s->fused.skip[index]) {
        /* absorbed into its producer; the output aliases the input */
        s->mask[node->outputs[0]] = s->mask[node->inputs[0]];
        return KC_OK;
    }
    KC_TRY(kc_session_kernel(s, index, &s->plan, s->arena,
                             node->n_inputs ? s->mask[node->inputs[0]] : NULL));
    kc_session_release_after(s, index);
    const float *in0 =
        node->n_inputs ? kc_session_value_in(s, &s->plan, s->arena, node->inputs[0]) : NULL;
    kc_session_mask_after(s, index, in0);
    if (s->trace_nodes)
        kc_mem_trace_node(node->layer->name);
    return KC_OK;
}

void kc_session_mask_after(kc_session *s, int index, const float *in0)
{
    const kc_node *node = &s->graph->nodes[index];
    if (node->n_inputs && node->n_outputs) {
        int owned = 0;
        int v = node->outputs[0];
        s->mask[v] = kc_mask_after(node, in0, &s->plan.shape[node->inputs[0]],
                                   &s->plan.shape[node->outputs[0]], s->mask[node->inputs[0]],
                                   &owned);
        s->mask_owned[v] = (unsigned char)owned;
    }
}

/* release_packed_weights: before a new plan, the arrays released are read
 * back from the model's file when a kernel or a fold could need one. The
 * packed kernels go first (rebuilt for the new shapes anyway), so the
 * re-read arrays never sit next to a full packed set; kc_fuse then takes
 * them over again. Nothing is reset before the re-read succeeds. */
static kc_status kc_session_reread(kc_session *s)
{
    for (int i = 0; i < s->graph->n_nodes; i++)
        if (s->state[i] && s->state[i]->weights_cached) {
            s->state[i]->free(s->state[i]);
            s->state[i] = NULL;
        }
    KC_TRY(kc_model_restore_weights((kc_model *)s->model));
    s->n_packed_released = 0;
    return KC_OK;
}

/* The graph's rewrites made again (kc_fuse), for the session's stage
 * range if it has one. */
static kc_status kc_session_fuse_again(kc_session *s)
{
    int reread = s->release_originals && (s->fused.n_released || s->n_packed_released);
    if (reread)
        KC_TRY(kc_session_reread(s));
    kc_fused_free(&s->fused, s->graph->n_nodes);
    int stage[2] = {s->stage_first, s->stage_last};
    return kc_fuse(s->graph, kc_session_fuse_level(s->model, s->sched != NULL),
                   s->stage_first >= 0 ? stage : NULL, kc_session_taken(s), &s->fused);
}

/* A new plan may rebuild any kernel from its layer's weights: bring back
 * the fused kernels released after packing (same rewrites, same graph). */
static kc_status kc_session_refuse(kc_session *s)
{
    int reread = s->release_originals && (s->fused.n_released || s->n_packed_released);
    if (!reread && !s->fused.n_released)
        return KC_OK;
    return kc_session_fuse_again(s);
}

kc_status kc_session_restage(kc_session *s)
{
    kc_plan_free(&s->plan);
    if (s->sched) /* the portable rewrites alone: the same for any range */
        return KC_OK;
    for (int i = 0; i < s->graph->n_nodes; i++)
        if (s->state[i]) { /* built on the old rewrites */
            s->state[i]->free(s->state[i]);
            s->state[i] = NULL;
        }
    return kc_session_fuse_again(s);
}

/* Depthwise-after-1x1, pooling-before-1x1, max-pooling-in-the-stem,
 * upsampling-before-3x3 and classifier-in-1x1 fusions are decided per plan (fuse.c): only on
 * the host loop (the scheduler's devices and a cluster stage's boundaries
 * know nothing of them), and the plan is laid out again when they change
 * which values share a slot. The average pooling and upsampling ones
 * reorder the arithmetic, so `exact` keeps Keras's order. */
static kc_status kc_session_fuse_per_plan(kc_session *s, const kc_shape *shapes, int n,
                                          int lanes)
{
    int before = s->fused.n_dw_on + s->fused.n_pool_on + s->fused.n_irb_on +
                 s->fused.n_maxpool_on + s->fused.n_upsample_on + s->fused.n_head_on;
    int host = !s->sched && s->stage_first < 0;
    /* the pairs one image fuses depend on the threads it runs on (a pair
     * cut by rows needs two): the session's, as kc_session_run sets them */
    kc_threads_enter(s->threads);
    KC_TRY(kc_fuse_dw_plan(&s->fused, s->graph, s->plan.shape, s->fuse_dw && host, lanes > 1));
    KC_TRY(kc_fuse_pool_plan(&s->fused, s->graph, s->plan.shape,
                             s->fuse_pool && host && !s->exact));
    /* max is exact: `exact` keeps this one */
    KC_TRY(kc_fuse_maxpool_plan(&s->fused, s->graph, s->plan.shape, s->fuse_pool && host));
    KC_TRY(kc_fuse_upsample_plan(&s->fused, s->graph, s->plan.shape,
                                 s->fuse_up && host && !s->exact));
    /* the same bits as the layers apart: `exact` keeps it; one lane only
     * (the lanes share a state, and the head's buffers are the state's) */
    KC_TRY(kc_fuse_head_plan(&s->fused, s->graph, s->plan.shape,
                             s->fuse_head && host && lanes == 1));
    if (!before && !s->fused.n_dw_on && !s->fused.n_pool_on && !s->fused.n_irb_on &&
        !s->fused.n_maxpool_on && !s->fused.n_upsample_on && !s->fused.n_head_on)
        return KC_OK;
    kc_plan_free(&s->plan);
    return kc_plan_build(s->model, s->fused.alias, shapes, n, &s->plan);
}

/* The arena of `floats`, zeroed: on huge pages where they are on
 * (base/huge.h: its activations are read and written at every run, rows
 * of an image kilobytes apart, a 4 KiB page each), else kc_calloc's. */
static kc_status kc_session_arena_new(kc_session *s, size_t floats)
{
    s->arena_huge = kc_huge_maps_on();
    if (floats > SIZE_MAX / sizeof(float))
        return kc_fail(KC_ERR_LIMIT, "an arena of %zu floats is too large", floats);
    s->arena = s->arena_huge ? kc_huge_alloc(floats * sizeof(float))
                             : kc_calloc(floats, sizeof(float));
    s->arena_floats = s->arena ? floats : 0;
    return s->arena ? KC_OK : KC_ERR_NOMEM;
}

static void kc_session_arena_free(kc_session *s)
{
    if (s->arena_huge)
        kc_huge_free(s->arena, s->arena_floats * sizeof(float));
    else
        free(s->arena);
    s->arena = NULL;
    s->arena_floats = 0;
}

/* The plan for these input shapes run in `lanes` lanes (each lane's
 * shapes: the batch divided), laid out, with its arena. */
static kc_status kc_session_plan(kc_session *s, kc_shape *shapes, int n, int lanes, int *fresh)
{
    for (int i = 0; i < n; i++)
        shapes[i].dims[0] /= lanes;
    if (s->lanes == lanes && kc_plan_matches(&s->plan, shapes, n))
        return KC_OK;
    *fresh = 1;
    kc_head_free(s);
    kc_plan_free(&s->plan);
    if (s->sched) /* the weights it page-locked may be rewritten or freed */
        kc_sched_unpin(s->sched);
    KC_TRY(kc_session_refuse(s));
    KC_TRY(kc_plan_build(s->model, s->fused.alias, shapes, n, &s->plan));
    KC_TRY(kc_session_fuse_per_plan(s, shapes, n, lanes));
    s->lanes = lanes;
    s->lanes_warm = 0;
    return KC_OK;
}

kc_status kc_session_prepare(kc_session *s, const kc_tensor *const *inputs)
{
    kc_shape shapes[64];
    int n = s->graph->n_inputs;
    if (n > 64)
        return kc_fail(KC_ERR_LIMIT, "more than 64 model inputs");
    shapes[0] = (kc_shape){0};
    for (int i = 0; i < n; i++)
        shapes[i] = inputs[i]->shape;
    int lanes = kc_lanes_for(s, shapes, n);
    int64_t batch = n && shapes[0].rank ? shapes[0].dims[0] : 0;
    int fresh = 0;
    KC_TRY(kc_session_plan(s, shapes, n, lanes, &fresh));
    if (lanes > 1 && !kc_lanes_plan_ok(s, batch / lanes)) {
        /* some value is not one row per image: the model runs as one
         * batch, now and at any batch size */
        s->lanes_refused = 1;
        for (int i = 0; i < n; i++)
            shapes[i] = inputs[i]->shape;
        KC_TRY(kc_session_plan(s, shapes, n, 1, &fresh));
    }
    if (!fresh)
        return KC_OK;
    if (s->profile)
        kc_profile_new_plan(s->profile, s->lanes, s->lanes > 1 ? batch / s->lanes : batch);
    KC_TRY(kc_head_plan(s, shapes, n));
    kc_branches_free(s->branches);
    s->branches = NULL;
    KC_TRY(kc_branches_new(s, &s->branches));
    s->lane_floats = s->lanes > 1 ? (s->plan.arena_floats + 15) & ~(size_t)15 : s->plan.arena_floats;
    size_t need = (s->lane_floats + s->head_floats) * (size_t)s->lanes;
    if (need > s->arena_floats) {
        kc_session_arena_free(s);
        KC_TRY(kc_session_arena_new(s, need));
    }
    if (s->sched) {
        kc_status st = kc_sched_prepare(s->sched);
        if (st != KC_OK) {
            kc_plan_free(&s->plan); /* plan again next run */
            return st;
        }
    }
    return KC_OK;
}

kc_status kc_session_run(kc_session *s, const kc_tensor *const *inputs, int n_inputs,
                         kc_tensor **outputs, int n_outputs)
{
    kc_error_clear();
    if (s && s->microbatch > 0 && inputs && n_inputs > 0 && inputs[0] &&
        inputs[0]->shape.rank > 0 && inputs[0]->shape.dims[0] > s->microbatch)
        return kc_session_run_microbatched(s, inputs, n_inputs, outputs, n_outputs);
    return kc_session_run_whole(s, inputs, n_inputs, outputs, n_outputs);
}

/* Validate, plan and run every node; the outputs are left in the arena. */
static kc_status kc_session_exec_nodes(kc_session *s, const kc_tensor *const *inputs,
                                       int n_inputs, int n_outputs)
{
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
    KC_TRY(kc_session_prepare(s, inputs));
    kc_threads_enter(s->threads);
    if (s->lanes > 1) {
        kc_status laned = kc_lanes_run(s, inputs, n_inputs);
        if (s->profile && laned == KC_OK)
            kc_profile_run_done(s->profile);
        return laned;
    }
    kc_status st = KC_OK;
    kc_session_inputs_in(s, inputs, n_inputs, !s->sched && !s->branches);
    if (s->sched)
        st = kc_sched_run(s->sched);
    if (s->branches)
        st = kc_branches_run(s);
    for (int i = 0; !s->branches && !s->sched && !s->profile && st == KC_OK && i < g->n_nodes;
         i++)
        st = kc_session_run_node(s, i);
    for (int i = 0; !s->sched && s->profile && st == KC_OK && i < g->n_nodes; i++) {
        double start = kc_profile_clock(s->profile);
        st = kc_session_run_node(s, i);
        if (!s->fused.skip[i]) /* absorbed into its producer: nothing ran */
            kc_profile_since(s->profile, i, start);
    }
    s->n_direct = 0; /* the caller's tensors are theirs again */
    if (!s->sched && s->profile && st == KC_OK)
        kc_profile_run_done(s->profile);
    kc_mem_trace("session run");
    for (int v = 0; v < g->n_values; v++) {
        if (s->mask_owned[v])
            free(s->mask[v]);
        s->mask[v] = NULL;
        s->mask_owned[v] = 0;
    }
    return st;
}

/* kc_session_exec_nodes in TensorFlow's floating-point environment
 * (base/fpenv.h), the caller's restored after. */
static kc_status kc_session_exec(kc_session *s, const kc_tensor *const *inputs, int n_inputs,
                                 int n_outputs)
{
    unsigned fpenv = kc_fpenv_enter();
    kc_status st = kc_session_exec_nodes(s, inputs, n_inputs, n_outputs);
    kc_fpenv_leave(fpenv);
    return st;
}

kc_status kc_session_run_whole(kc_session *s, const kc_tensor *const *inputs, int n_inputs,
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
        kc_shape whole = kc_lanes_shape(s, v);
        const kc_shape *shape = &whole;
        kc_status st = kc_tensor_new(KC_F32, shape->rank, shape->dims, &outputs[i]);
        if (st != KC_OK) {
            for (int j = 0; j < i; j++) {
                kc_tensor_free(outputs[j]);
                outputs[j] = NULL;
            }
            return st;
        }
        kc_lanes_gather(s, v, outputs[i]->data);
    }
    return KC_OK;
}

kc_status kc_session_run_into(kc_session *s, const kc_tensor *const *inputs, int n_inputs,
                              kc_tensor *const *outputs, int n_outputs)
{
    kc_error_clear();
    if (!outputs && n_outputs)
        return kc_fail(KC_ERR_ARG, "kc_session_run_into: null argument");
    for (int i = 0; i < n_outputs; i++)
        if (!outputs[i] || outputs[i]->dtype != KC_F32)
            return kc_fail(KC_ERR_ARG, "output %d is null or not float32", i);
    KC_TRY(kc_session_exec(s, inputs, n_inputs, n_outputs));
    for (int i = 0; i < n_outputs; i++) {
        int v = s->graph->outputs[i];
        kc_shape shape = kc_lanes_shape(s, v);
        if (!kc_shape_equal(&shape, &outputs[i]->shape)) {
            char want[160];
            kc_shape_format(&shape, want, sizeof want);
            return kc_fail(KC_ERR_SHAPE, "output %d must have shape %s", i, want);
        }
        kc_lanes_gather(s, v, outputs[i]->data);
    }
    return KC_OK;
}

size_t kc_session_arena_bytes(const kc_session *s)
{
    return s ? (s->lane_floats + s->head_floats) * (size_t)s->lanes * sizeof(float) : 0;
}

int kc_session_lanes(const kc_session *s) { return s && s->lanes > 1 ? s->lanes : 1; }

long kc_session_lanes_helped(const kc_session *s) { return s ? s->lanes_helped : 0; }

int kc_session_branch_regions(const kc_session *s)
{
    return s && s->branches ? s->branches->n_regions : 0;
}

int kc_session_branch_moved(const kc_session *s)
{
    return s ? kc_branches_moved(s->branches) : 0;
}

int kc_session_fused_nodes(const kc_session *s) { return s ? s->fused.n_fused : 0; }

const char *kc_session_stats(const kc_session *s)
{
    if (s && s->sched)
        return kc_sched_stats(s->sched);
    return s && s->profile ? kc_profile_report(s->profile, s->graph) : "";
}

size_t kc_session_device_peak_bytes(const kc_session *s)
{
    return s && s->sched ? kc_sched_peak_bytes(s->sched) : 0;
}

kc_status kc_session_prepare_batch(kc_session *s, int64_t batch, int variable_as_one,
                                   const char *why)
{
    const kc_graph *g = s->graph;
    if (g->n_inputs > KC_PLAN_MAX_INPUTS)
        return kc_fail(KC_ERR_LIMIT, "more than %d model inputs", KC_PLAN_MAX_INPUTS);
    kc_tensor fake[KC_PLAN_MAX_INPUTS];
    const kc_tensor *inputs[KC_PLAN_MAX_INPUTS];
    for (int i = 0; i < g->n_inputs; i++) {
        memset(&fake[i], 0, sizeof fake[i]);
        fake[i].dtype = KC_F32;
        fake[i].shape = g->values[g->inputs[i]].shape;
        fake[i].shape.dims[0] = batch;
        for (int d = 1; d < fake[i].shape.rank; d++) {
            if (fake[i].shape.dims[d] >= 0)
                continue;
            if (!variable_as_one)
                return kc_fail(KC_ERR_UNSUPPORTED, "input '%s' has a variable dimension: %s",
                               g->input_names[i], why ? why : "fixed shapes needed");
            fake[i].shape.dims[d] = 1; /* a variable length: one step */
        }
        inputs[i] = &fake[i];
    }
    return kc_session_prepare(s, inputs);
}

kc_status kc_session_describe(kc_session *s, int64_t batch, FILE *out)
{
    kc_error_clear();
    if (!s || !out || batch < 1)
        return kc_fail(KC_ERR_ARG, "kc_session_describe: bad argument");
    KC_TRY(kc_session_prepare_batch(s, batch, 1, NULL));
    if (!s->sched) {
        fprintf(out, "every layer on /CPU:0 (host), variables in host memory\n");
        return KC_OK;
    }
    kc_sched_describe(s->sched, out);
    return KC_OK;
}
