/* Shape resolution and the memory plan (liveness -> arena offsets). */
#include "runtime/plan.h"

#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/error.h"
#include "base/mem.h"
#include "model/model_internal.h"
#include "ops/op.h"
#include "runtime/plan_pack.h"

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

void kc_plan_last_reads(const kc_graph *g, int *last)
{
    for (int v = 0; v < g->n_values; v++)
        last[v] = -1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++)
            last[g->nodes[i].inputs[j]] = i;
    for (int i = 0; i < g->n_outputs; i++)
        last[g->outputs[i]] = g->n_nodes; /* model outputs live to the end */
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
                               const int *last_use, int head, kc_allocator *a, kc_plan *p,
                               int *born)
{
    for (int v = 0; v < g->n_values; v++)
        if (kc_plan_root(alias, v) == v && kc_crosses(made, last_use, v, head)) {
            p->offset[v] = kc_alloc_block(a, v, kc_plan_size(&p->shape[v]));
            born[v] = head - 1;
        }
    for (int v = 0; v < g->n_values; v++) {
        int producer = g->values[v].producer;
        if (producer >= 0 && producer < head && kc_plan_root(alias, v) != v)
            p->offset[v] = p->offset[kc_plan_root(alias, v)];
    }
}

/* Branch regions (kc_plan_relayout): every value a region's nodes read
 * or write stays live to region_last (its join), since its branches run
 * side by side in no fixed order; so no two of them share memory. */
static void kc_plan_region_lives(const kc_graph *g, const int *alias, const int *region_last,
                                 int *last_use)
{
    for (int i = 0; region_last && i < g->n_nodes; i++) {
        if (region_last[i] < 0)
            continue;
        const kc_node *node = &g->nodes[i];
        for (int j = 0; j < node->n_inputs + node->n_outputs; j++) {
            int v = j < node->n_inputs ? node->inputs[j] : node->outputs[j - node->n_inputs];
            int r = kc_plan_root(alias, v);
            if (last_use[r] < region_last[i])
                last_use[r] = region_last[i];
        }
    }
}

/* A region's nodes share the range free at its join (every value of the
 * region is live there): the runner gives each branch lane its part. */
static void kc_plan_region_spares(const kc_graph *g, const int *region_last, kc_plan *p)
{
    for (int i = 0; region_last && i < g->n_nodes; i++)
        if (region_last[i] >= 0) {
            p->spare_offset[i] = p->spare_offset[region_last[i]];
            p->spare_floats[i] = p->spare_floats[region_last[i]];
        }
}

/* Past this many values the offline packing (quadratic in them) is left
 * out: the node-order placement stays. */
#define KC_PLAN_PACK_MAX_VALUES 4096

/* Each root's life in the node-order placement: made at node born[r]
 * (-1: a model input; KC_PLAN_UNPLACED: never placed), freed at node
 * died[r] (the node count: never). */
#define KC_PLAN_UNPLACED (-2)
typedef struct kc_plan_lives {
    int *born, *died;
} kc_plan_lives;

/* A whole plan's values packed again offline (plan_pack.c), kept where
 * that takes less arena than placing them in node order; the spare ranges
 * (and live_end, as kc_plan_spare_gap's) follow. */
static kc_status kc_plan_repack(const kc_graph *g, const int *alias, const kc_plan_lives *lv,
                                kc_plan *p, size_t *live_end)
{
    int n = 0, nv = g->n_values;
    size_t *size = kc_calloc((size_t)nv + 1, sizeof *size);
    size_t *offset = kc_calloc((size_t)nv + 1, sizeof *offset);
    size_t(*scratch)[2] = kc_calloc((size_t)nv + 1, sizeof *scratch);
    int *from = kc_calloc((size_t)nv + 1, sizeof *from);
    int *to = kc_calloc((size_t)nv + 1, sizeof *to);
    int *root_of = kc_calloc((size_t)nv + 1, sizeof *root_of);
    kc_status st = KC_ERR_NOMEM;
    size_t peak = 0;
    if (!size || !offset || !scratch || !from || !to || !root_of)
        goto done;
    for (int v = 0; v < nv; v++)
        if (lv->born[v] != KC_PLAN_UNPLACED) {
            root_of[n] = v;
            size[n] = kc_plan_size(&p->shape[v]);
            from[n] = lv->born[v];
            to[n++] = lv->died[v];
        }
    if (kc_plan_pack(n, size, from, to, offset, &peak))
        goto done;
    st = KC_OK;
    if (peak >= p->arena_floats || kc_env_off("KC_PACK")) /* KC_PACK=0: node order kept */
        goto done;
    for (int k = 0; k < n; k++)
        p->offset[root_of[k]] = offset[k];
    for (int v = 0; v < nv; v++) {
        int r = kc_plan_root(alias, v);
        if (r != v && lv->born[r] != KC_PLAN_UNPLACED)
            p->offset[v] = p->offset[r];
    }
    p->arena_floats = peak;
    for (int i = 0; i < g->n_nodes; i++)
        kc_plan_pack_gaps(n, size, from, to, offset, i, scratch, &p->spare_offset[i],
                          &p->spare_floats[i], &live_end[i]);
done:
    free(size);
    free(offset);
    free(scratch);
    free(from);
    free(to);
    free(root_of);
    return st;
}

static kc_status kc_plan_memory(const kc_graph *g, const int *alias, int head, kc_plan_part part,
                                const int *region_last, kc_plan *p)
{
    int *last_use = kc_calloc((size_t)g->n_values + 1, sizeof *last_use);
    int *made = kc_calloc((size_t)g->n_values + 1, sizeof *made);
    kc_allocator a = {.live = kc_calloc((size_t)g->n_values + 1, sizeof(kc_block))};
    size_t *live_end = kc_calloc((size_t)g->n_nodes + 1, sizeof *live_end);
    kc_plan_lives lv = {kc_calloc((size_t)g->n_values + 1, sizeof(int)),
                        kc_calloc((size_t)g->n_values + 1, sizeof(int))};
    p->spare_offset = kc_calloc((size_t)g->n_nodes + 1, sizeof *p->spare_offset);
    p->spare_floats = kc_calloc((size_t)g->n_nodes + 1, sizeof *p->spare_floats);
    if (!last_use || !made || !a.live || !live_end || !lv.born || !lv.died || !p->spare_offset ||
        !p->spare_floats) {
        free(last_use);
        free(made);
        free(a.live);
        free(live_end);
        free(lv.born);
        free(lv.died);
        return KC_ERR_NOMEM;
    }
    for (int v = 0; v < g->n_values; v++) {
        lv.born[v] = KC_PLAN_UNPLACED;
        lv.died[v] = g->n_nodes;
    }
    kc_plan_first_writers(g, alias, made);
    kc_plan_last_reads(g, last_use);
    /* An alias keeps its root alive as long as the alias is read. */
    for (int v = 0; v < g->n_values; v++) {
        int r = kc_plan_root(alias, v);
        if (r != v && last_use[v] > last_use[r])
            last_use[r] = last_use[v];
    }
    kc_plan_region_lives(g, alias, region_last, last_use);
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
        lv.born[v] = -1;
    }
    if (part == KC_PLAN_TAIL) {
        first = head;
        kc_plan_tail_start(g, alias, made, last_use, head, &a, p, lv.born);
    }
    for (int i = first; i < end; i++) {
        const kc_node *node = &g->nodes[i];
        for (int j = 0; j < node->n_outputs; j++) {
            int v = node->outputs[j], r = kc_plan_root(alias, v);
            /* a root made later (a fused block's output, which its first
             * node writes) gets its slot with the first of its values */
            if (!kc_plan_placed(&a, r)) {
                p->offset[r] = kc_alloc_block(&a, r, kc_plan_size(&p->shape[r]));
                lv.born[r] = i;
                if (last_use[r] < i) /* computed but never read: free at once */
                    last_use[r] = i;
            }
            p->offset[v] = p->offset[r];
        }
        kc_plan_spare_gap(&a, i, p, &live_end[i]);
        /* Inputs and dead outputs whose last reader is this node. */
        /* (a branch region's values live to its join, which need not
         * read them: every root whose life ends here, not only the
         * node's own inputs and outputs) */
        for (int r = 0; r < g->n_values; r++)
            if (last_use[r] == i && kc_plan_root(alias, r) == r && lv.born[r] != KC_PLAN_UNPLACED) {
                kc_free_block(&a, r);
                lv.died[r] = i;
            }
    }
    p->arena_floats = a.peak ? a.peak : KC_ALIGN_FLOATS;
    kc_status st = part == KC_PLAN_WHOLE && g->n_values <= KC_PLAN_PACK_MAX_VALUES
                       ? kc_plan_repack(g, alias, &lv, p, live_end)
                       : KC_OK;
    kc_plan_spare_tail(p, first, end, live_end);
    kc_plan_region_spares(g, region_last, p);
    free(last_use);
    free(made);
    free(a.live);
    free(live_end);
    free(lv.born);
    free(lv.died);
    return st;
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
        st = kc_plan_memory(g, alias, head, part, NULL, p);
    if (st != KC_OK) {
        kc_plan_free(p);
        return st;
    }
    for (int i = 0; i < n_in; i++)
        p->in_shapes[i] = in_shapes[i];
    p->n_in = n_in;
    return KC_OK;
}

kc_status kc_plan_relayout(const kc_model *m, const int *alias, const int *region_last, kc_plan *p)
{
    const kc_graph *g = m->graph;
    free(p->spare_offset);
    free(p->spare_floats);
    p->spare_offset = p->spare_floats = NULL;
    memset(p->offset, 0, ((size_t)g->n_values + 1) * sizeof *p->offset);
    return kc_plan_memory(g, alias, 0, KC_PLAN_WHOLE, region_last, p);
}
