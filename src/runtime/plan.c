/* Shape resolution and the memory plan (liveness -> arena offsets). */
#include "runtime/plan.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "model/model_internal.h"
#include "ops/op.h"

#define KC_ALIGN_FLOATS 16 /* 64-byte alignment for vector loads */

int kc_plan_matches(const kc_plan *plan, const kc_shape *in_shapes, int n_in)
{
    if (plan->n_in != n_in || n_in == 0)
        return 0;
    for (int i = 0; i < n_in; i++)
        if (!kc_shape_equal(&plan->in_shapes[i], &in_shapes[i]))
            return 0;
    return 1;
}

void kc_plan_free(kc_plan *plan)
{
    free(plan->shape);
    free(plan->offset);
    free(plan->spare_offset);
    free(plan->spare_floats);
    memset(plan, 0, sizeof *plan);
}

/* Re-run a node's shape rule on concrete input shapes. */
static kc_status kc_plan_node_shapes(const kc_model *m, const kc_node *node, kc_plan *p)
{
    kc_shape in[KC_MAX_NODE_IO];
    kc_dtype in_dtype[KC_MAX_NODE_IO];
    if (node->n_inputs > KC_MAX_NODE_IO)
        return kc_fail(KC_ERR_LIMIT, "node has too many inputs");
    for (int i = 0; i < node->n_inputs; i++) {
        in[i] = p->shape[node->inputs[i]];
        in_dtype[i] = m->graph->values[node->inputs[i]].dtype;
    }
    kc_parse_env env = {.keras_major = m->keras_major};
    kc_op_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.layer = node->layer;
    ctx.env = &env;
    ctx.in = in;
    ctx.in_dtype = in_dtype;
    ctx.in_roles = node->input_roles;
    ctx.n_in = node->n_inputs;
    ctx.consts = node->consts;
    ctx.n_consts = node->n_consts;
    ctx.call_kwargs = node->call_kwargs;
    ctx.call_args = node->call_args;
    if (node->layer->channels_first && node->n_inputs > 0)
        kc_shape_to_channels_last(&in[0]);
    KC_TRY(node->layer->def->infer(&ctx));
    for (int i = 0; node->layer->channels_first && i < ctx.n_out; i++)
        kc_shape_to_channels_first(&ctx.out[i]);
    if (ctx.n_out != node->n_outputs)
        return kc_fail(KC_ERR_SHAPE, "produced %d outputs for these inputs, %d planned",
                       ctx.n_out, node->n_outputs);
    for (int i = 0; i < ctx.n_out; i++) {
        int64_t count = kc_shape_count(&ctx.out[i]);
        if (count < 0)
            return kc_fail(count == -1 ? KC_ERR_SHAPE : KC_ERR_LIMIT,
                           "output %d has an unresolved or too large shape", i);
        p->shape[node->outputs[i]] = ctx.out[i];
    }
    return KC_OK;
}

/* Live allocations sorted by offset; first fit. */
typedef struct kc_block {
    size_t offset, size;
    int value;
} kc_block;

typedef struct kc_allocator {
    kc_block *live;
    int n;
    size_t peak;
} kc_allocator;

static size_t kc_plan_size(const kc_shape *s)
{
    int64_t n = kc_shape_count(s);
    size_t floats = n > 0 ? (size_t)n : 1;
    return (floats + KC_ALIGN_FLOATS - 1) / KC_ALIGN_FLOATS * KC_ALIGN_FLOATS;
}

static size_t kc_alloc_block(kc_allocator *a, int value, size_t size)
{
    size_t at = 0;
    int pos = 0;
    for (; pos < a->n; pos++) {
        if (a->live[pos].offset >= at + size)
            break;
        size_t end = a->live[pos].offset + a->live[pos].size;
        if (end > at)
            at = end;
    }
    memmove(&a->live[pos + 1], &a->live[pos], (size_t)(a->n - pos) * sizeof *a->live);
    a->live[pos] = (kc_block){at, size, value};
    a->n++;
    if (at + size > a->peak)
        a->peak = at + size;
    return at;
}

/* Whether value's slot is live now. */
static int kc_plan_placed(const kc_allocator *a, int value)
{
    for (int i = 0; i < a->n; i++)
        if (a->live[i].value == value)
            return 1;
    return 0;
}

static void kc_free_block(kc_allocator *a, int value)
{
    for (int i = 0; i < a->n; i++)
        if (a->live[i].value == value) {
            memmove(&a->live[i], &a->live[i + 1], (size_t)(a->n - i - 1) * sizeof *a->live);
            a->n--;
            return;
        }
}

/* The widest gap between a's live blocks (sorted by offset) into
 * p->spare_*[node], and in *live_end where the last one ends: the range
 * past it up to the final arena size is free too (kc_plan_spare_tail). */
static void kc_plan_spare_gap(const kc_allocator *a, int node, kc_plan *p, size_t *live_end)
{
    size_t at = 0, best_off = 0, best = 0;
    for (int i = 0; i < a->n; i++) {
        if (a->live[i].offset > at && a->live[i].offset - at > best) {
            best = a->live[i].offset - at;
            best_off = at;
        }
        size_t end = a->live[i].offset + a->live[i].size;
        if (end > at)
            at = end;
    }
    p->spare_offset[node] = best_off;
    p->spare_floats[node] = best;
    *live_end = at;
}

static void kc_plan_spare_tail(kc_plan *p, int first, int end, const size_t *live_end)
{
    for (int i = first; i < end; i++)
        if (p->arena_floats - live_end[i] > p->spare_floats[i]) {
            p->spare_offset[i] = live_end[i];
            p->spare_floats[i] = p->arena_floats - live_end[i];
        }
}

int kc_plan_root(const int *alias, int v)
{
    while (alias && alias[v] >= 0)
        v = alias[v];
    return v;
}

/* Where the boundary of a split plan lies (kc_plan_build_split): values
 * made before node `head` and read from it on (or model outputs) cross. */
static int kc_crosses(const int *made, const int *last_use, int v, int head)
{
    return made[v] >= 0 && made[v] < head && last_use[v] >= head;
}

void kc_plan_first_writers(const kc_graph *g, const int *alias, int *made)
{
    for (int v = 0; v < g->n_values; v++)
        made[v] = g->values[v].producer;
    for (int v = 0; v < g->n_values; v++) {
        int r = kc_plan_root(alias, v), at = g->values[v].producer;
        if (r != v && at >= 0 && made[r] >= 0 && at < made[r]) /* a model input stays -1 */
            made[r] = at;
    }
}

/* The head's boundary values (allocated before any node, in value order)
 * stay in the tail's arena from the start: the head writes them image by
 * image before the tail's first node. */
static void kc_plan_tail_start(const kc_graph *g, const int *alias, const int *made,
                               const int *last_use, int head, kc_allocator *a, kc_plan *p)
{
    for (int v = 0; v < g->n_values; v++)
        if (kc_plan_root(alias, v) == v && kc_crosses(made, last_use, v, head))
            p->offset[v] = kc_alloc_block(a, v, kc_plan_size(&p->shape[v]));
    for (int v = 0; v < g->n_values; v++) {
        int producer = g->values[v].producer;
        if (producer >= 0 && producer < head && kc_plan_root(alias, v) != v)
            p->offset[v] = p->offset[kc_plan_root(alias, v)];
    }
}

static kc_status kc_plan_memory(const kc_graph *g, const int *alias, int head, kc_plan_part part,
                                kc_plan *p)
{
    int *last_use = kc_calloc((size_t)g->n_values + 1, sizeof *last_use);
    int *made = kc_calloc((size_t)g->n_values + 1, sizeof *made);
    kc_allocator a = {.live = kc_calloc((size_t)g->n_values + 1, sizeof(kc_block))};
    size_t *live_end = kc_calloc((size_t)g->n_nodes + 1, sizeof *live_end);
    p->spare_offset = kc_calloc((size_t)g->n_nodes + 1, sizeof *p->spare_offset);
    p->spare_floats = kc_calloc((size_t)g->n_nodes + 1, sizeof *p->spare_floats);
    if (!last_use || !made || !a.live || !live_end || !p->spare_offset || !p->spare_floats) {
        free(last_use);
        free(made);
        free(a.live);
        free(live_end);
        return KC_ERR_NOMEM;
    }
    kc_plan_first_writers(g, alias, made);
    for (int v = 0; v < g->n_values; v++)
        last_use[v] = -1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++)
            last_use[g->nodes[i].inputs[j]] = i;
    for (int i = 0; i < g->n_outputs; i++)
        last_use[g->outputs[i]] = g->n_nodes; /* model outputs live to the end */
    /* An alias keeps its root alive as long as the alias is read. */
    for (int v = 0; v < g->n_values; v++) {
        int r = kc_plan_root(alias, v);
        if (r != v && last_use[v] > last_use[r])
            last_use[r] = last_use[v];
    }
    int first = 0, end = g->n_nodes;
    if (part == KC_PLAN_HEAD) { /* what crosses stays to the end of the head */
        end = head;
        for (int v = 0; v < g->n_values; v++)
            if (kc_crosses(made, last_use, v, head))
                last_use[v] = head;
    }
    for (int i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        if (part == KC_PLAN_TAIL && last_use[v] < head)
            continue; /* read by the head only: never in the tail's arena */
        p->offset[v] = kc_alloc_block(&a, v, kc_plan_size(&p->shape[v]));
    }
    if (part == KC_PLAN_TAIL) {
        first = head;
        kc_plan_tail_start(g, alias, made, last_use, head, &a, p);
    }
    for (int i = first; i < end; i++) {
        const kc_node *node = &g->nodes[i];
        for (int j = 0; j < node->n_outputs; j++) {
            int v = node->outputs[j], r = kc_plan_root(alias, v);
            /* a root made later (a fused block's output, which its first
             * node writes) gets its slot with the first of its values */
            if (!kc_plan_placed(&a, r)) {
                p->offset[r] = kc_alloc_block(&a, r, kc_plan_size(&p->shape[r]));
                if (last_use[r] < i) /* computed but never read: free at once */
                    last_use[r] = i;
            }
            p->offset[v] = p->offset[r];
        }
        kc_plan_spare_gap(&a, i, p, &live_end[i]);
        /* Inputs and dead outputs whose last reader is this node. */
        for (int j = 0; j < node->n_inputs; j++) {
            int r = kc_plan_root(alias, node->inputs[j]);
            if (last_use[r] == i)
                kc_free_block(&a, r);
        }
        for (int j = 0; j < node->n_outputs; j++) {
            int r = kc_plan_root(alias, node->outputs[j]);
            if (last_use[r] == i)
                kc_free_block(&a, r);
        }
    }
    p->arena_floats = a.peak ? a.peak : KC_ALIGN_FLOATS;
    kc_plan_spare_tail(p, first, end, live_end);
    free(last_use);
    free(made);
    free(a.live);
    free(live_end);
    return KC_OK;
}

kc_status kc_plan_build(const kc_model *m, const int *alias, const kc_shape *in_shapes, int n_in,
                        kc_plan *p)
{
    return kc_plan_build_split(m, alias, in_shapes, n_in, 0, KC_PLAN_WHOLE, p);
}

kc_status kc_plan_build_split(const kc_model *m, const int *alias, const kc_shape *in_shapes,
                              int n_in, int head, kc_plan_part part, kc_plan *p)
{
    const kc_graph *g = m->graph;
    memset(p, 0, sizeof *p);
    if (n_in > KC_PLAN_MAX_INPUTS)
        return kc_fail(KC_ERR_LIMIT, "too many inputs");
    p->n_values = g->n_values;
    p->shape = kc_calloc((size_t)g->n_values + 1, sizeof *p->shape);
    p->offset = kc_calloc((size_t)g->n_values + 1, sizeof *p->offset);
    if (!p->shape || !p->offset) {
        kc_plan_free(p);
        return KC_ERR_NOMEM;
    }
    for (int i = 0; i < n_in; i++)
        p->shape[g->inputs[i]] = in_shapes[i];
    kc_status st = KC_OK;
    for (int i = 0; st == KC_OK && i < g->n_nodes; i++) {
        st = kc_plan_node_shapes(m, &g->nodes[i], p);
        if (st != KC_OK)
            kc_fail_context(st, "layer '%s' (%s)", g->nodes[i].layer->name,
                            g->nodes[i].layer->class_name);
    }
    if (st == KC_OK)
        st = kc_plan_memory(g, alias, head, part, p);
    if (st != KC_OK) {
        kc_plan_free(p);
        return st;
    }
    for (int i = 0; i < n_in; i++)
        p->in_shapes[i] = in_shapes[i];
    p->n_in = n_in;
    return KC_OK;
}
