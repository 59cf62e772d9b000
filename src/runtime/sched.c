/* The scheduler (see sched.h).
 *
 * Activations: every managed device holds an arena with the same offsets
 * as the host arena (one liveness plan), so a value crossing devices is a
 * copy between the same offset in two arenas. `where` tracks, per value,
 * which memories hold its current contents.
 *
 * Streaming: a device's streamed layers, in execution order, cycle through
 * `depth` ring slots. The copy stream uploads layer k into slot k % depth
 * after the compute stream has finished layer k - depth (the slot's last
 * reader); compute of layer k waits for its upload. Uploads for layers
 * k+1 .. k+depth-1 are therefore in flight while layer k computes. */
#include "runtime/sched.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "backend/cpu_exec.h"
#include "backend/registry.h"
#include "base/mem.h"
#include "base/spill.h"
#include "device/placement.h"
#include "model/model_internal.h"
#include "runtime/residency.h"
#include "runtime/sched_internal.h"

#define KC_HOST_BIT 1u

static size_t kc_align64(size_t n) { return (n + 63) & ~(size_t)63; }

const kc_layer *kc_sched_layer(const kc_sched *sc, int i)
{
    const kc_session *s = sc->s;
    return s->fused.shadow[i] ? s->fused.shadow[i] : s->graph->nodes[i].layer;
}

static size_t kc_layer_weight_bytes(const kc_layer *l)
{
    size_t n = 0;
    for (int i = 0; i < l->n_weights; i++)
        n += kc_align64((size_t)kc_shape_count(&l->weights[i].shape) * sizeof(float));
    return n;
}

/* The disk tier: page a layer's weights in ahead of use (WILLNEED) or
 * drop them from this process once they are on the device or have been
 * used (DONTNEED: the file-backed pages are re-read on the next access). */
static void kc_advise_weights(const kc_sched *sc, const kc_layer *l, int advice)
{
    if (!sc->disk)
        return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < l->n_weights; i++) {
        if (!kc_spill_owns(l->weights[i].data))
            continue;
        uintptr_t a = (uintptr_t)l->weights[i].data;
        uintptr_t b = a + (uintptr_t)kc_shape_count(&l->weights[i].shape) * sizeof(float);
        a &= ~(page - 1);
        madvise((void *)a, b - a, advice);
    }
}

static int kc_root(const kc_sched *sc, int v)
{
    const int *alias = sc->s->fused.alias;
    while (alias && alias[v] >= 0)
        v = alias[v];
    return v;
}

/* ------------------------------------------------------------ devices */

/* Upload bandwidth of a device, measured with one 16 MiB transfer after a
 * warm-up one (a first transfer pays for page faults and pinning), from
 * page-locked memory when the plan will pin its streamed weights. */
static kc_status kc_measure_link(kc_sdev *d, int pinned)
{
    const size_t bytes = (size_t)16 << 20;
    void *dev = NULL;
    char *host = NULL;
    if (posix_memalign((void **)&host, (size_t)sysconf(_SC_PAGESIZE), bytes) == 0)
        memset(host, 0, bytes);
    else
        host = NULL;
    kc_backend_event *e = NULL;
    kc_status st = host ? KC_OK : KC_ERR_NOMEM;
    d->link_pinned = st == KC_OK && pinned && d->io->host_pin(d->b, host, bytes) == KC_OK;
    if (st == KC_OK)
        st = d->io->alloc(d->b, bytes, &dev);
    if (st == KC_OK)
        st = d->io->event_new(d->b, &e);
    double best = 0;
    for (int rep = 0; st == KC_OK && rep < 2; rep++) {
        double t0 = kc_now();
        st = d->io->upload_async(d->b, dev, host, bytes);
        if (st == KC_OK)
            st = d->io->record(d->b, KC_STREAM_COPY, e);
        if (st == KC_OK)
            st = d->io->event_sync(d->b, e);
        double dt = kc_now() - t0;
        if (dt > 0 && (double)bytes / dt > best)
            best = (double)bytes / dt;
    }
    d->link_bps = best > 0 ? best : 1e10;
    if (d->link_pinned)
        d->io->host_unpin(d->b, host);
    if (e)
        d->io->event_free(d->b, e);
    if (dev)
        d->io->free(d->b, dev);
    free(host);
    return st;
}

static int kc_find_device(kc_sched *sc, kc_device_type type, int index)
{
    for (int d = 0; d < sc->n_dev; d++)
        if (sc->dev[d].spec.type == type && sc->dev[d].spec.index == index)
            return d;
    return -1;
}

static kc_status kc_open_device(kc_sched *sc, kc_device_type type, int index, int *out)
{
    *out = kc_find_device(sc, type, index);
    if (*out >= 0)
        return KC_OK;
    if (sc->n_dev == KC_SCHED_MAX_DEVICES)
        return kc_fail(KC_ERR_LIMIT, "more than %d devices placed", KC_SCHED_MAX_DEVICES);
    kc_sdev *d = &sc->dev[sc->n_dev];
    memset(d, 0, sizeof *d);
    d->spec.type = type;
    d->spec.index = index;
    d->spec.has_device = 1;
    d->spec.task = d->spec.replica = -1;
    kc_devspec_format(&d->spec, d->label, sizeof d->label);
    if (type == KC_DEVICE_CPU) /* host memory standing in for a device */
        snprintf(d->label, sizeof d->label, "/CPU:0[budget]");
    char why[1024] = "";
    d->io = kc_backend_find(type, why, sizeof why);
    if (!d->io)
        return kc_fail(KC_ERR_UNSUPPORTED, "%s: %s", d->label, why);
    KC_TRY(d->io->open(index, kc_backend_host_services(), &d->b));
    kc_backend_info info;
    if (d->io->info(d->b, &info) == KC_OK)
        snprintf(d->name, sizeof d->name, "%s", info.name);
    d->budget = sc->device_memory;
    if (type == KC_DEVICE_GPU && !d->budget)
        d->budget = info.free_bytes / 10 * 9;
    d->flops_per_s = type == KC_DEVICE_GPU ? 2e13 : 5e10;
    sc->n_dev++;
    KC_TRY(kc_measure_link(d, kc_sched_pin_wanted(sc, d)));
    *out = sc->n_dev - 1;
    return KC_OK;
}

/* Is a device there? (for soft placement, before opening it) */
static int kc_device_exists(kc_device_type type, int index, char *why, size_t why_size)
{
    const kc_backend_iface *io = kc_backend_find(type, why, why_size);
    if (!io)
        return 0;
    int count = io->device_count();
    if (index >= count) {
        snprintf(why, why_size, "the %s backend sees %d device(s)", io->name, count);
        return 0;
    }
    return 1;
}

/* Node i's device after soft placement: a missing one becomes /CPU:0. */
static kc_status kc_resolve_node(kc_sched *sc, int i, kc_device_type *type, int *index)
{
    const kc_devspec *spec = &sc->pl.compute[i];
    char text[160];
    kc_devspec_format(spec, text, sizeof text);
    if (!kc_devspec_is_local(spec) || !spec->has_device)
        return kc_fail(KC_ERR_ARG,
                       "layer '%s' is placed on %s, a cluster task: run it with --cluster "
                       "(kerasc serve on that task)",
                       sc->s->graph->nodes[i].layer->name, text);
    *type = spec->type;
    *index = spec->index;
    char why[1024] = "";
    if (!kc_device_exists(*type, *index, why, sizeof why)) {
        if (sc->strict)
            return kc_fail(KC_ERR_UNSUPPORTED, "%s is not available (%s) and placement is strict",
                           text, why);
        if (!sc->warned[*type]) {
            fprintf(stderr, "kerasc: warning: %s is not available (%s); its layers run on "
                            "/CPU:0 instead\n", text, why);
            sc->warned[*type] = 1;
        }
        *type = KC_DEVICE_CPU;
        *index = 0;
    }
    return KC_OK;
}

/* Map every node to a scheduler device (-1 = host). The budget applies to
 * the GPUs when any is used; with none, host memory stands in for device
 * memory on /CPU:0 (the same manager, testable without a GPU). */
static kc_status kc_assign_nodes(kc_sched *sc)
{
    const kc_graph *g = sc->s->graph;
    int any_gpu = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        kc_device_type type;
        int index;
        KC_TRY(kc_resolve_node(sc, i, &type, &index));
        sc->nodes[i].dev = type == KC_DEVICE_GPU ? index : KC_SCHED_HOST;
        any_gpu |= type == KC_DEVICE_GPU;
    }
    for (int i = 0; i < g->n_nodes; i++) {
        kc_snode *n = &sc->nodes[i];
        n->item = -1;
        if (n->dev != KC_SCHED_HOST)
            KC_TRY(kc_open_device(sc, KC_DEVICE_GPU, n->dev, &n->dev));
        else if (!any_gpu && sc->device_memory)
            KC_TRY(kc_open_device(sc, KC_DEVICE_CPU, 0, &n->dev));
        if (n->dev == KC_SCHED_HOST)
            continue;
        kc_sdev *d = &sc->dev[n->dev];
        if (!d->io->supports(d->b, kc_sched_layer(sc, i), &g->nodes[i])) {
            n->fallback = 1; /* runs on the host, copies at its edges */
            sc->n_fallback++;
        }
    }
    return KC_OK;
}

kc_status kc_sched_new(kc_session *s, const kc_session_options *o, kc_sched **out)
{
    *out = NULL;
    const kc_graph *g = s->graph;
    kc_sched *sc = kc_calloc(1, sizeof *sc);
    if (!sc)
        return KC_ERR_NOMEM;
    sc->s = s;
    sc->strict = o->strict_placement;
    sc->device_memory = o->device_memory;
    sc->host_memory = o->host_memory;
    sc->disk = s->model->disk_weights;
    sc->max_depth = o->prefetch_depth;
    /* Two events around every device layer cost the host a few us each
     * and, inside a CUDA graph, the GPU as much: ResNet50 at batch 1 on
     * an H200 took 2.50 ms an image with them, 2.14 without (graph), and
     * 2.98-4.18 against 2.80-2.85 layer by layer. So only a profile
     * (--stats) or a trace has them. */
    sc->layer_times = o->profile || o->trace_path;
    sc->nodes = kc_calloc((size_t)g->n_nodes + 1, sizeof *sc->nodes);
    sc->where = kc_calloc((size_t)g->n_values + 1, sizeof *sc->where);
    sc->crossed = kc_calloc((size_t)g->n_values + 1, 1);
    sc->trace_path = o->trace_path ? kc_strdup(o->trace_path) : NULL;
    kc_status st = (sc->nodes && sc->where && sc->crossed && (!o->trace_path || sc->trace_path))
                       ? KC_OK : KC_ERR_NOMEM;
    if (st == KC_OK)
        st = kc_placement_build(g, o->device, o->place, o->n_place, o->variables, &sc->pl);
    if (st == KC_OK && sc->pl.variables_set && !kc_devspec_is_local(&sc->pl.variables))
        st = kc_fail(KC_ERR_ARG, "variables placed on a cluster task: run with --cluster");
    sc->variables_on_host = sc->pl.variables_set && sc->pl.variables.type == KC_DEVICE_CPU;
    if (st == KC_OK)
        st = kc_assign_nodes(sc);
    if (st != KC_OK) {
        kc_sched_free(sc);
        return st;
    }
    *out = sc;
    return KC_OK;
}

static void kc_release_blocks(kc_sdev *d)
{
    for (int k = 0; k < KC_SDEV_BLOCKS; k++) {
        if (d->block[k])
            d->io->free(d->b, d->block[k]);
        d->block[k] = NULL;
        d->block_bytes[k] = 0;
    }
    d->allocated = 0;
}

static void kc_free_events(kc_sched *sc)
{
    for (int i = 0; i < sc->s->graph->n_nodes; i++) {
        kc_snode *n = &sc->nodes[i];
        if (n->dev == KC_SCHED_HOST)
            continue;
        kc_backend_event **ev[4] = {&n->ev_start, &n->ev_end, &n->ev_up_start, &n->ev_up_end};
        for (int k = 0; k < 4; k++)
            if (*ev[k]) {
                sc->dev[n->dev].io->event_free(sc->dev[n->dev].b, *ev[k]);
                *ev[k] = NULL;
            }
    }
}

void kc_sched_free(kc_sched *sc)
{
    if (!sc)
        return;
    for (int d = 0; d < sc->n_dev; d++)
        if (sc->dev[d].b)
            sc->dev[d].io->synchronize(sc->dev[d].b);
    kc_sched_unpin(sc);
    kc_sched_graph_reset(sc);
    free(sc->graph_where);
    if (sc->nodes) {
        kc_free_events(sc);
        for (int i = 0; i < sc->s->graph->n_nodes; i++) {
            kc_snode *n = &sc->nodes[i];
            if (n->state && n->dev != KC_SCHED_HOST)
                sc->dev[n->dev].io->state_free(sc->dev[n->dev].b, n->state);
        }
    }
    for (int d = 0; d < sc->n_dev; d++) {
        kc_sdev *dv = &sc->dev[d];
        if (!dv->b)
            continue;
        kc_release_blocks(dv);
        if (dv->ev_base)
            dv->io->event_free(dv->b, dv->ev_base);
        free(dv->stream_nodes);
        dv->io->close(dv->b);
    }
    kc_placement_free(&sc->pl);
    free(sc->nodes);
    free(sc->where);
    free(sc->crossed);
    free(sc->trace_path);
    free(sc->stats);
    free(sc);
}

/* ------------------------------------------------------------ prepare */

static kc_status kc_alloc_block(kc_sdev *d, int k, size_t bytes)
{
    d->block_bytes[k] = bytes;
    if (!bytes)
        return KC_OK;
    KC_TRY(d->io->alloc(d->b, bytes, (void **)&d->block[k]));
    d->allocated += bytes;
    if (d->allocated > d->peak)
        d->peak = d->allocated;
    return KC_OK;
}

/* A call for node i on its device with the planned shapes (pointers left
 * NULL: only for asking the workspace size). */
static void kc_shape_call(const kc_sched *sc, int i, kc_backend_call *c, kc_shape *in_shape,
                          kc_shape *out_shape)
{
    const kc_session *s = sc->s;
    const kc_node *node = &s->graph->nodes[i];
    memset(c, 0, sizeof *c);
    for (int k = 0; k < node->n_inputs && k < KC_MAX_NODE_IO; k++)
        in_shape[k] = s->plan.shape[node->inputs[k]];
    for (int k = 0; k < node->n_outputs; k++)
        out_shape[k] = s->plan.shape[node->outputs[k]];
    c->node = node;
    c->layer = kc_sched_layer(sc, i);
    c->keras_major = s->model->keras_major;
    c->exact = s->exact;
    c->wino_budget = &sc->s->wino_budget; /* kernels pay from it when built */
    c->in_shape = in_shape;
    c->n_in = node->n_inputs;
    c->out_shape = out_shape;
    c->n_out = node->n_outputs;
}

/* Nodes a run executes: all, or a pipeline stage's range. */
static int kc_in_range(const kc_sched *sc, int i)
{
    const kc_session *s = sc->s;
    return s->stage_first < 0 || (i >= s->stage_first && i <= s->stage_last);
}

static int kc_runs_on(const kc_sched *sc, int i, int d)
{
    const kc_snode *n = &sc->nodes[i];
    return n->dev == d && !n->fallback && !sc->s->fused.skip[i] && kc_in_range(sc, i);
}

static kc_status kc_ensure_event(kc_sdev *d, kc_backend_event **e)
{
    return *e ? KC_OK : d->io->event_new(d->b, e);
}

/* The largest workspace device d's nodes need, each planned within `cap`
 * bytes (0: no limit; kc_backend_call.workspace_size), and the weights
 * they hold: *n_items layers, *weight_bytes in all, *largest the most
 * one layer holds. */
static kc_status kc_device_workspace(kc_sched *sc, int d, size_t cap, size_t *workspace,
                                     size_t *weight_bytes, size_t *largest, int *n_items)
{
    kc_sdev *dv = &sc->dev[d];
    const kc_graph *g = sc->s->graph;
    kc_shape *in_shape = kc_calloc(KC_MAX_NODE_IO, sizeof *in_shape);
    kc_shape out_shape[KC_MAX_OUTPUTS];
    if (!in_shape)
        return KC_ERR_NOMEM;
    *workspace = *weight_bytes = *largest = 0;
    *n_items = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (!kc_runs_on(sc, i, d))
            continue;
        kc_backend_call call;
        kc_shape_call(sc, i, &call, in_shape, out_shape);
        call.state = &sc->nodes[i].state; /* the plan the backend keeps for `run` */
        call.workspace_size = cap;
        size_t ws = dv->io->workspace_bytes(dv->b, &call);
        *workspace = ws > *workspace ? ws : *workspace;
        size_t bytes = kc_layer_weight_bytes(kc_sched_layer(sc, i));
        *weight_bytes += bytes;
        *largest = bytes > *largest ? bytes : *largest;
        *n_items += bytes > 0;
    }
    free(in_shape);
    return KC_OK;
}

/* Residency for device d at the session's current plan. */
static kc_status kc_prepare_device(kc_sched *sc, int d)
{
    kc_sdev *dv = &sc->dev[d];
    const kc_session *s = sc->s;
    const kc_graph *g = s->graph;
    dv->io->synchronize(dv->b);
    kc_sched_unpin_device(sc, d);
    kc_release_blocks(dv);
    size_t workspace = 0, weight_bytes = 0, largest = 0;
    int n_items = 0;
    size_t arena = kc_align64(s->plan.arena_floats * sizeof(float));
    KC_TRY(kc_device_workspace(sc, d, 0, &workspace, &weight_bytes, &largest, &n_items));
    /* When the weights will not all fit beside the activations and the
     * largest workspace, the workspaces are planned again within a quarter
     * of the budget: the fastest algorithms can want far more scratch than
     * their layer's weights (cuDNN's non-fused Winograd on ResNet50's 7x7
     * 3x3 layer at batch 1: 47 MB for 9.4 MB of weights), memory that
     * would otherwise push weights out to be streamed every run. Nor more
     * than the budget leaves beside the activations and the largest layer
     * (the residency minimum): a budget at the minimum a failed plan
     * reported must then plan, which a cap growing with it would break. */
    if (dv->budget && arena + workspace + weight_bytes > dv->budget) {
        size_t room = dv->budget > arena + largest + 1 ? dv->budget - arena - largest : 1;
        size_t cap = room < dv->budget / 4 ? room : dv->budget / 4;
        if (workspace > cap)
            KC_TRY(kc_device_workspace(sc, d, cap ? cap : 1, &workspace, &weight_bytes, &largest,
                                       &n_items));
    }
    kc_res_item *items = kc_calloc((size_t)n_items + 1, sizeof *items);
    int *item_node = kc_calloc((size_t)n_items + 1, sizeof *item_node);
    if (!items || !item_node) {
        free(items);
        free(item_node);
        return KC_ERR_NOMEM;
    }
    n_items = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kc_layer *l = kc_sched_layer(sc, i);
        size_t bytes = kc_layer_weight_bytes(l);
        sc->nodes[i].item = -1;
        if (!kc_runs_on(sc, i, d) || !bytes)
            continue;
        items[n_items] = (kc_res_item){.name = g->nodes[i].layer->name, .bytes = bytes,
                                       .flops = kc_node_flops(&g->nodes[i], l, &s->plan)};
        item_node[n_items] = i;
        sc->nodes[i].item = n_items++;
    }
    kc_res_request req = {.device = dv->label, .budget = dv->budget,
                          .fixed_bytes = arena + kc_align64(workspace),
                          .activation_bytes = arena,
                          .variables_on_host = sc->variables_on_host,
                          .max_depth = sc->max_depth, .link_bytes_per_s = dv->link_bps,
                          .flops_per_s = dv->flops_per_s};
    kc_status st = kc_residency_plan(&req, items, n_items, &dv->res);
    free(dv->stream_nodes);
    dv->stream_nodes = st == KC_OK ? kc_calloc((size_t)dv->res.n_streamed + 1, sizeof(int)) : NULL;
    if (st == KC_OK && !dv->stream_nodes)
        st = KC_ERR_NOMEM;
    for (int k = 0; st == KC_OK && k < n_items; k++) {
        kc_snode *n = &sc->nodes[item_node[k]];
        n->wmode = items[k].mode;
        n->w_offset = items[k].offset;
        n->seq = items[k].seq;
        n->w_bytes = items[k].bytes;
        if (n->wmode == KC_WMODE_STREAMED)
            dv->stream_nodes[n->seq] = item_node[k];
    }
    free(items);
    free(item_node);
    if (st == KC_OK)
        st = kc_sched_pin_streamed(sc, d);
    if (st == KC_OK)
        st = kc_alloc_block(dv, KC_BLOCK_ARENA, arena);
    if (st == KC_OK)
        st = kc_alloc_block(dv, KC_BLOCK_RESIDENT, dv->res.resident_bytes);
    if (st == KC_OK)
        st = kc_alloc_block(dv, KC_BLOCK_RING, (size_t)dv->res.depth * dv->res.slot_bytes);
    if (st == KC_OK)
        st = kc_alloc_block(dv, KC_BLOCK_WORKSPACE, kc_align64(workspace));
    if (st == KC_OK)
        st = kc_ensure_event(dv, &dv->ev_base);
    /* Resident weights go up once, here; events for every node. */
    for (int i = 0; st == KC_OK && i < g->n_nodes; i++) {
        kc_snode *n = &sc->nodes[i];
        if (!kc_runs_on(sc, i, d))
            continue;
        st = kc_ensure_event(dv, &n->ev_start);
        if (st == KC_OK)
            st = kc_ensure_event(dv, &n->ev_end);
        if (st == KC_OK && n->item >= 0 && n->wmode == KC_WMODE_STREAMED) {
            st = kc_ensure_event(dv, &n->ev_up_start);
            if (st == KC_OK)
                st = kc_ensure_event(dv, &n->ev_up_end);
        }
        if (st != KC_OK || n->item < 0 || n->wmode != KC_WMODE_RESIDENT)
            continue;
        const kc_layer *l = kc_sched_layer(sc, i);
        char *base = dv->block[KC_BLOCK_RESIDENT] + n->w_offset;
        for (int w = 0; st == KC_OK && w < l->n_weights; w++) {
            size_t bytes = (size_t)kc_shape_count(&l->weights[w].shape) * sizeof(float);
            st = dv->io->upload(dv->b, base, l->weights[w].data, bytes);
            base += kc_align64(bytes);
        }
        kc_advise_weights(sc, l, MADV_DONTNEED); /* on the device now */
    }
    return st;
}

/* The disk tier's host budget must hold the largest layer's weights. */
static kc_status kc_check_host_memory(const kc_sched *sc)
{
    if (!sc->disk || !sc->host_memory)
        return KC_OK;
    const kc_graph *g = sc->s->graph;
    int largest = -1;
    size_t most = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        size_t bytes = kc_layer_weight_bytes(kc_sched_layer(sc, i));
        if (bytes > most) {
            most = bytes;
            largest = i;
        }
    }
    if (most > sc->host_memory)
        return kc_fail(KC_ERR_NOMEM,
                       "host memory budget %zu bytes is below the minimum %zu: the largest "
                       "layer '%s' alone has that many bytes of weights",
                       sc->host_memory, most, g->nodes[largest].layer->name);
    return KC_OK;
}

kc_status kc_sched_prepare(kc_sched *sc)
{
    kc_sched_graph_reset(sc);
    memset(sc->crossed, 0, (size_t)sc->s->graph->n_values);
    sc->boundary_done = 0;
    KC_TRY(kc_check_host_memory(sc));
    for (int d = 0; d < sc->n_dev; d++)
        KC_TRY(kc_prepare_device(sc, d));
    return KC_OK;
}

size_t kc_sched_peak_bytes(const kc_sched *sc)
{
    size_t peak = 0;
    for (int d = 0; d < sc->n_dev; d++)
        peak = sc->dev[d].peak > peak ? sc->dev[d].peak : peak;
    return peak;
}

/* ---------------------------------------------------------------- run */

static unsigned kc_bit(int dev) { return dev == KC_SCHED_HOST ? KC_HOST_BIT : 2u << dev; }

static float *kc_value_ptr(const kc_sched *sc, int dev, int v)
{
    size_t off = sc->s->plan.offset[v];
    if (dev == KC_SCHED_HOST)
        return sc->s->arena + off;
    return (float *)sc->dev[dev].block[KC_BLOCK_ARENA] + off;
}

static size_t kc_value_bytes(const kc_sched *sc, int v)
{
    return (size_t)kc_shape_count(&sc->s->plan.shape[v]) * sizeof(float);
}

/* Make value v's contents present in `dev`'s memory. */
static kc_status kc_ensure(kc_sched *sc, int v, int dev)
{
    int r = kc_root(sc, v);
    unsigned have = sc->where[r];
    if (have & kc_bit(dev))
        return KC_OK;
    size_t bytes = kc_value_bytes(sc, v);
    if (!(have & KC_HOST_BIT)) {
        int from = -1;
        for (int d = 0; d < sc->n_dev && from < 0; d++)
            if (have & kc_bit(d))
                from = d;
        if (from < 0)
            return kc_fail(KC_ERR_DEVICE, "value %d has no location", v);
        KC_TRY(sc->dev[from].io->download(sc->dev[from].b, kc_value_ptr(sc, KC_SCHED_HOST, v),
                                          kc_value_ptr(sc, from, v), bytes));
        sc->boundary_bytes += bytes;
        if (!sc->crossed[r])
            sc->crossed[r] = (unsigned char)(from + 1);
        sc->where[r] |= KC_HOST_BIT;
    }
    if (dev != KC_SCHED_HOST) {
        KC_TRY(sc->dev[dev].io->upload(sc->dev[dev].b, kc_value_ptr(sc, dev, v),
                                       kc_value_ptr(sc, KC_SCHED_HOST, v), bytes));
        sc->boundary_bytes += bytes;
        if (!sc->crossed[r])
            sc->crossed[r] = (unsigned char)(dev + 1);
    }
    sc->where[r] |= kc_bit(dev);
    return KC_OK;
}

/* Queue the upload of device d's k-th streamed layer into its ring slot,
 * after the slot's previous reader (layer k - depth) has computed. */
static kc_status kc_enqueue_upload(kc_sched *sc, int d, int k)
{
    kc_sdev *dv = &sc->dev[d];
    if (k >= dv->res.n_streamed)
        return KC_OK;
    kc_snode *n = &sc->nodes[dv->stream_nodes[k]];
    if (k >= dv->res.depth)
        KC_TRY(dv->io->wait(dv->b, KC_STREAM_COPY,
                            sc->nodes[dv->stream_nodes[k - dv->res.depth]].ev_end));
    KC_TRY(dv->io->record(dv->b, KC_STREAM_COPY, n->ev_up_start));
    const kc_layer *l = kc_sched_layer(sc, dv->stream_nodes[k]);
    /* Disk tier: read the following layers from disk while this one copies,
     * as far ahead as the host budget allows. */
    size_t ahead = 0;
    for (int j = k + 1; sc->disk && j < dv->res.n_streamed; j++) {
        const kc_snode *next = &sc->nodes[dv->stream_nodes[j]];
        if (sc->host_memory && ahead + next->w_bytes > sc->host_memory)
            break;
        ahead += next->w_bytes;
        kc_advise_weights(sc, kc_sched_layer(sc, dv->stream_nodes[j]), MADV_WILLNEED);
        if (!sc->host_memory && j >= k + dv->res.depth)
            break;
    }
    char *slot = dv->block[KC_BLOCK_RING] + (size_t)(k % dv->res.depth) * dv->res.slot_bytes;
    for (int w = 0; w < l->n_weights; w++) {
        size_t bytes = (size_t)kc_shape_count(&l->weights[w].shape) * sizeof(float);
        KC_TRY(dv->io->upload_async(dv->b, slot, l->weights[w].data, bytes));
        slot += kc_align64(bytes);
    }
    return dv->io->record(dv->b, KC_STREAM_COPY, n->ev_up_end);
}

/* Device pointers of node i's weights (resident block or its ring slot). */
static void kc_weight_ptrs(const kc_sched *sc, int i, const float **w)
{
    const kc_snode *n = &sc->nodes[i];
    const kc_sdev *dv = &sc->dev[n->dev];
    const kc_layer *l = kc_sched_layer(sc, i);
    char *base = n->wmode == KC_WMODE_RESIDENT
                     ? dv->block[KC_BLOCK_RESIDENT] + n->w_offset
                     : dv->block[KC_BLOCK_RING] +
                           (size_t)(n->seq % dv->res.depth) * dv->res.slot_bytes;
    for (int k = 0; k < l->n_weights; k++) {
        w[k] = (const float *)base;
        base += kc_align64((size_t)kc_shape_count(&l->weights[k].shape) * sizeof(float));
    }
}

static kc_status kc_run_on_device(kc_sched *sc, int i, kc_backend_call *call)
{
    kc_snode *n = &sc->nodes[i];
    kc_sdev *dv = &sc->dev[n->dev];
    const float *w[KC_MAX_WEIGHT_SPECS];
    int streamed = n->item >= 0 && n->wmode == KC_WMODE_STREAMED;
    if (n->item >= 0) {
        kc_weight_ptrs(sc, i, w);
        call->w = w;
        call->n_w = call->layer->n_weights;
        if (streamed)
            KC_TRY(dv->io->wait(dv->b, KC_STREAM_COMPUTE, n->ev_up_end));
    }
    call->workspace = dv->block[KC_BLOCK_WORKSPACE];
    call->workspace_size = dv->block_bytes[KC_BLOCK_WORKSPACE];
    call->state = &n->state;
    n->t_start = kc_now() - sc->run_t0;
    if (sc->layer_times)
        KC_TRY(dv->io->record(dv->b, KC_STREAM_COMPUTE, n->ev_start));
    KC_TRY(dv->io->run(dv->b, call));
    /* a streamed layer's end frees its ring slot for the copy stream */
    if (sc->layer_times || streamed)
        KC_TRY(dv->io->record(dv->b, KC_STREAM_COMPUTE, n->ev_end));
    n->t_end = kc_now() - sc->run_t0;
    if (streamed) {
        if (sc->disk) { /* its upload is done: drop the host pages */
            KC_TRY(dv->io->event_sync(dv->b, n->ev_up_end));
            kc_advise_weights(sc, call->layer, MADV_DONTNEED);
        }
        KC_TRY(kc_enqueue_upload(sc, n->dev, n->seq + dv->res.depth));
    }
    return KC_OK;
}

static kc_status kc_run_one(kc_sched *sc, int i)
{
    kc_session *s = sc->s;
    const kc_node *node = &s->graph->nodes[i];
    kc_snode *n = &sc->nodes[i];
    if (s->fused.skip[i]) {
        s->mask[node->outputs[0]] = s->mask[node->inputs[0]];
        if (s->mask[node->outputs[0]])
            sc->graph_blocked = 1;
        return KC_OK;
    }
    const unsigned char *in_mask = node->n_inputs ? s->mask[node->inputs[0]] : NULL;
    int dev = n->dev;
    /* Keras masks are host data: a masked node leaves a GPU for the host. */
    if (dev != KC_SCHED_HOST && (n->fallback || (in_mask && sc->dev[dev].io->type != KC_DEVICE_CPU)))
        dev = KC_SCHED_HOST;
    n->ran_on = dev;
    if (dev == KC_SCHED_HOST || in_mask) /* no graph of this plan */
        sc->graph_blocked = 1;
    const float *in[KC_MAX_NODE_IO];
    float *outp[KC_MAX_OUTPUTS];
    kc_shape in_shape[KC_MAX_NODE_IO], out_shape[KC_MAX_OUTPUTS];
    kc_backend_call call;
    kc_shape_call(sc, i, &call, in_shape, out_shape);
    for (int k = 0; k < node->n_inputs; k++) {
        KC_TRY(kc_ensure(sc, node->inputs[k], dev));
        in[k] = kc_value_ptr(sc, dev, node->inputs[k]);
    }
    for (int k = 0; k < node->n_outputs; k++)
        outp[k] = kc_value_ptr(sc, dev, node->outputs[k]);
    call.in = in;
    call.out = outp;
    call.in_mask = in_mask;
    kc_status st;
    const float *host_w[KC_MAX_WEIGHT_SPECS];
    if (dev == KC_SCHED_HOST && sc->disk) {
        /* Disk-backed weights are read in place each run: no kernel may
         * keep a packed copy of them in memory (w_ext semantics). */
        for (int k = 0; k < call.layer->n_weights && k < KC_MAX_WEIGHT_SPECS; k++)
            host_w[k] = call.layer->weights[k].data;
        call.w = host_w;
        call.n_w = call.layer->n_weights;
    }
    if (dev == KC_SCHED_HOST) {
        n->t_start = kc_now() - sc->run_t0;
        st = kc_cpu_exec(s->kernels[i], &call, &s->state[i], 1); /* beside the copy thread */
        n->t_end = kc_now() - sc->run_t0;
        kc_advise_weights(sc, call.layer, MADV_DONTNEED);
    } else {
        st = kc_run_on_device(sc, i, &call);
    }
    if (st != KC_OK)
        return st;
    for (int k = 0; k < node->n_outputs; k++)
        sc->where[kc_root(sc, node->outputs[k])] = kc_bit(dev);
    kc_session_mask_after(s, i, node->n_inputs ? in[0] : NULL);
    for (int k = 0; k < node->n_outputs; k++)
        if (s->mask[node->outputs[k]])
            sc->graph_blocked = 1;
    return KC_OK;
}

kc_status kc_sched_ensure(kc_sched *sc, int v, int dev) { return kc_ensure(sc, v, dev); }

kc_status kc_sched_run_one(kc_sched *sc, int i) { return kc_run_one(sc, i); }

static void kc_collect_times(kc_sched *sc)
{
    for (int i = 0; i < sc->s->graph->n_nodes; i++) {
        kc_snode *n = &sc->nodes[i];
        n->up_s = n->up_at = -1;
        if (sc->s->fused.skip[i] || !kc_in_range(sc, i)) {
            n->compute_s = n->start_s = -1;
            continue;
        }
        if (n->ran_on == KC_SCHED_HOST) {
            n->start_s = n->t_start;
            n->compute_s = n->t_end - n->t_start;
        } else if (!sc->layer_times) {
            n->start_s = -1;
            n->compute_s = KC_UNTIMED;
        } else {
            kc_sdev *dv = &sc->dev[n->ran_on];
            n->start_s = dv->io->elapsed(dv->b, dv->ev_base, n->ev_start) + dv->base_offset;
            n->compute_s = dv->io->elapsed(dv->b, n->ev_start, n->ev_end);
        }
        if (n->item >= 0 && n->wmode == KC_WMODE_STREAMED && n->ran_on != KC_SCHED_HOST) {
            kc_sdev *dv = &sc->dev[n->dev];
            n->up_at = dv->io->elapsed(dv->b, dv->ev_base, n->ev_up_start) + dv->base_offset;
            n->up_s = dv->io->elapsed(dv->b, n->ev_up_start, n->ev_up_end);
        }
    }
}

kc_status kc_sched_run(kc_sched *sc)
{
    kc_session *s = sc->s;
    const kc_graph *g = s->graph;
    memset(sc->where, 0, (size_t)g->n_values * sizeof *sc->where);
    for (int i = 0; i < g->n_inputs; i++)
        sc->where[kc_root(sc, g->inputs[i])] = KC_HOST_BIT;
    for (int i = 0; i < s->n_stage_inputs; i++) /* a stage's inputs arrive on the host */
        sc->where[kc_root(sc, s->stage_inputs[i])] = KC_HOST_BIT;
    sc->boundary_bytes = 0;
    sc->run_t0 = kc_now();
    kc_status st = KC_OK;
    for (int d = 0; st == KC_OK && d < sc->n_dev; d++) {
        kc_sdev *dv = &sc->dev[d];
        st = dv->io->record(dv->b, KC_STREAM_COMPUTE, dv->ev_base);
        dv->base_offset = kc_now() - sc->run_t0;
        for (int k = 0; st == KC_OK && k < dv->res.depth; k++)
            st = kc_enqueue_upload(sc, d, k);
    }
    int first = s->stage_first < 0 ? 0 : s->stage_first;
    int last = s->stage_first < 0 ? g->n_nodes - 1 : s->stage_last;
    int replayed = 0;
    if (st == KC_OK)
        st = kc_sched_graph_run(sc, first, last, &replayed);
    for (int i = first; st == KC_OK && !replayed && i <= last; i++) {
        st = kc_run_one(sc, i);
        if (st != KC_OK)
            st = kc_fail_context(st, "layer '%s' (%s) on %s", g->nodes[i].layer->name,
                                 g->nodes[i].layer->class_name,
                                 sc->nodes[i].ran_on == KC_SCHED_HOST
                                     ? "/CPU:0" : sc->dev[sc->nodes[i].ran_on].label);
    }
    if (st == KC_OK && !replayed)
        kc_sched_graph_eager_done(sc);
    if (s->stage_first < 0) {
        for (int k = 0; st == KC_OK && k < g->n_outputs; k++)
            st = kc_ensure(sc, g->outputs[k], KC_SCHED_HOST);
    } else { /* a stage: the values live after it */
        for (int k = 0; st == KC_OK && k < s->n_stage_outputs; k++)
            st = kc_ensure(sc, s->stage_outputs[k], KC_SCHED_HOST);
    }
    /* Drain every stream even after an error: nothing may still be copying
     * into buffers the caller is about to reuse. */
    for (int d = 0; d < sc->n_dev; d++) {
        kc_status sync = sc->dev[d].io->synchronize(sc->dev[d].b);
        if (st == KC_OK)
            st = sync;
    }
    sc->run_s = kc_now() - sc->run_t0;
    /* Disk tier: the kernel maps neighbouring file pages on a fault
     * ("fault-around"), which the per-layer drops miss; release all. */
    const kc_model *m = s->model;
    for (int k = 0; sc->disk && k < m->n_spill_maps; k++)
        madvise(m->spill_maps[k], m->spill_lens[k], MADV_DONTNEED);
    if (st != KC_OK)
        return st;
    kc_collect_times(sc);
    KC_TRY(kc_sched_build_stats(sc));
    if (sc->trace_path)
        KC_TRY(kc_sched_write_trace(sc, sc->trace_path));
    if (!sc->boundary_done) { /* for the next runs: this one copied staged */
        sc->boundary_done = 1;
        KC_TRY(kc_sched_pin_boundary(sc));
    }
    return KC_OK;
}

const char *kc_sched_stats(const kc_sched *sc) { return sc->stats ? sc->stats : ""; }
