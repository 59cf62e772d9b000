/* Page-locking the host weights a device streams (see sched_internal.h).
 *
 * A GPU copies pageable memory through a small pinned staging ring, and
 * the thread that enqueues the copy fills it: at batch 1 that thread is
 * also the one launching the kernels, so every staged layer holds the
 * launches back by its copy time (measured on an H200: 8-13% of the
 * uploads overlapped compute). Pinned in place, each upload is one DMA
 * the copy engine does alone, at the link's full rate, and the host only
 * enqueues it. Nothing is copied or duplicated: the model's own weight
 * buffers are locked where they are, for as long as the plan streams
 * them. Only the whole pages inside a weight buffer are locked, never a
 * page it shares with another allocation: a copy of that other buffer
 * would then start or end inside a locked range, which CUDA refuses. A
 * buffer's partial first and last pages upload staged. Disk-backed
 * weights are never pinned (the disk tier exists to keep them out of
 * memory), nor with KC_PIN=0. */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/env.h"
#include "base/mem.h"
#include "runtime/sched_internal.h"

typedef struct kc_page_range {
    uintptr_t lo, hi; /* [lo, hi), page-aligned */
} kc_page_range;

static int kc_range_cmp(const void *a, const void *b)
{
    const kc_page_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sort ranges and merge those that overlap or meet; returns the count. */
static int kc_merge_ranges(kc_page_range *r, int n)
{
    qsort(r, (size_t)n, sizeof *r, kc_range_cmp);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi) {
            if (r[i].hi > r[m - 1].hi)
                r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    return m;
}

/* The whole pages inside [ptr, ptr + bytes) into *r; 0 when there are
 * none (a partial page stays pageable: see above). */
static int kc_inner_pages(const void *ptr, size_t bytes, kc_page_range *r)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)ptr;
    r->lo = (a + page - 1) & ~(page - 1);
    r->hi = (a + bytes) & ~(page - 1);
    return r->hi > r->lo;
}

/* Lock ranges r[0..n) for device d, appending them to its pins; what
 * cannot be locked (a lock limit, a range another session holds) stays
 * pageable and is copied staged: still correct. Returns the bytes locked
 * through *locked. */
static kc_status kc_pin_ranges(kc_sdev *dv, const kc_page_range *r, int n, size_t *locked)
{
    void **grown = realloc(dv->pins, (size_t)(dv->n_pins + n + 1) * sizeof *grown);
    if (!grown)
        return KC_ERR_NOMEM;
    dv->pins = grown;
    for (int i = 0; i < n; i++) {
        void *ptr = (void *)r[i].lo;
        size_t bytes = r[i].hi - r[i].lo;
        if (dv->io->host_pin(dv->b, ptr, bytes) == KC_OK) {
            dv->pins[dv->n_pins++] = ptr;
            *locked += bytes;
        }
    }
    return KC_OK;
}

int kc_sched_pin_wanted(const kc_sched *sc, const kc_sdev *dv)
{
    return dv->io->host_pin && dv->io->host_unpin && !sc->disk && !kc_env_off("KC_PIN");
}

/* The whole pages inside device d's streamed weight buffers, sorted and
 * merged (a weight shared by two nodes, or buffers that meet at a page
 * edge, become one range); *weight_bytes: the buffers' bytes. */
static kc_status kc_streamed_ranges(const kc_sched *sc, int d, kc_page_range **out, int *n_out,
                                    size_t *weight_bytes)
{
    const kc_sdev *dv = &sc->dev[d];
    int cap = 0;
    for (int k = 0; k < dv->res.n_streamed; k++)
        cap += kc_sched_layer(sc, dv->stream_nodes[k])->n_weights;
    kc_page_range *r = kc_calloc((size_t)cap + 1, sizeof *r);
    if (!r)
        return KC_ERR_NOMEM;
    int n = 0;
    for (int k = 0; k < dv->res.n_streamed; k++) {
        const kc_layer *l = kc_sched_layer(sc, dv->stream_nodes[k]);
        for (int w = 0; w < l->n_weights; w++) {
            size_t bytes = (size_t)kc_shape_count(&l->weights[w].shape) * sizeof(float);
            if (!bytes || !l->weights[w].data)
                continue;
            *weight_bytes += bytes;
            n += kc_inner_pages(l->weights[w].data, bytes, &r[n]); /* under a page: staged */
        }
    }
    *out = r;
    *n_out = kc_merge_ranges(r, n);
    return KC_OK;
}

kc_status kc_sched_pin_streamed(kc_sched *sc, int d)
{
    kc_sdev *dv = &sc->dev[d];
    kc_sched_unpin_device(sc, d);
    if (!dv->res.n_streamed || !kc_sched_pin_wanted(sc, dv))
        return KC_OK;
    kc_page_range *r;
    int n;
    size_t weight_bytes = 0;
    KC_TRY(kc_streamed_ranges(sc, d, &r, &n, &weight_bytes));
    dv->pinnable_bytes = weight_bytes;
    kc_status st = kc_pin_ranges(dv, r, n, &dv->pinned_bytes);
    free(r);
    return st;
}

/* The activations a GPU exchanges with the host (the model's inputs and
 * outputs; at a mixed placement every value that crosses) are copied from
 * and into the host arena each run. Pageable, a GPU stages them through
 * its pinned ring at a fraction of the link (6-7 GB/s against 53 on an
 * H200: ResNet50's batch-32 input, 18 MiB, took about 2 ms of a 16 ms
 * run). Their whole pages are locked in place for the plan, once its
 * first run has shown which values cross; as for weights, a partial page
 * stays pageable and KC_PIN=0 turns it off. The arena is the session's
 * until the next plan, which unlocks them first (kc_sched_unpin). */
kc_status kc_sched_pin_boundary(kc_sched *sc)
{
    const kc_session *s = sc->s;
    int n_values = s->graph->n_values;
    kc_page_range *r = kc_calloc((size_t)n_values + 1, sizeof *r);
    if (!r)
        return KC_ERR_NOMEM;
    kc_status st = KC_OK;
    for (int d = 0; st == KC_OK && d < sc->n_dev; d++) {
        kc_sdev *dv = &sc->dev[d];
        if (dv->io->type != KC_DEVICE_GPU || !kc_sched_pin_wanted(sc, dv))
            continue;
        int n = 0;
        for (int v = 0; v < n_values; v++)
            if (sc->crossed[v] == d + 1)
                n += kc_inner_pages(s->arena + s->plan.offset[v],
                                    (size_t)kc_shape_count(&s->plan.shape[v]) * sizeof(float),
                                    &r[n]);
        st = kc_pin_ranges(dv, r, kc_merge_ranges(r, n), &dv->boundary_pinned);
    }
    free(r);
    return st;
}

void kc_sched_unpin_device(kc_sched *sc, int d)
{
    kc_sdev *dv = &sc->dev[d];
    for (int i = 0; i < dv->n_pins; i++)
        dv->io->host_unpin(dv->b, dv->pins[i]);
    free(dv->pins);
    dv->pins = NULL;
    dv->n_pins = 0;
    dv->pinned_bytes = dv->pinnable_bytes = dv->boundary_pinned = 0;
}

void kc_sched_unpin(kc_sched *sc)
{
    if (!sc)
        return;
    for (int d = 0; d < sc->n_dev; d++)
        if (sc->dev[d].b)
            kc_sched_unpin_device(sc, d);
}
