/* The residency planner (see residency.h). */
#include "runtime/residency.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

static void kc_fmt_bytes(size_t b, char *buf, size_t n)
{
    if (b >= ((size_t)1 << 30))
        snprintf(buf, n, "%.2f GiB", (double)b / (double)((size_t)1 << 30));
    else if (b >= ((size_t)1 << 20))
        snprintf(buf, n, "%.2f MiB", (double)b / (double)((size_t)1 << 20));
    else
        snprintf(buf, n, "%zu bytes", b);
}

typedef struct kc_res_choice {
    int depth;
    size_t slot;
    double score;
    int valid;
} kc_res_choice;

/* Items sorted for residency preference: least work per byte first. */
static int kc_by_reuse(const void *a, const void *b, void *base)
{
    const kc_res_item *items = base;
    const kc_res_item *x = &items[*(const int *)a], *y = &items[*(const int *)b];
    double rx = x->flops / (double)(x->bytes ? x->bytes : 1);
    double ry = y->flops / (double)(y->bytes ? y->bytes : 1);
    if (rx != ry)
        return rx < ry ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

/* Fill modes for one (depth, slot) choice; returns resident bytes or
 * SIZE_MAX when infeasible. */
static size_t kc_assign(kc_res_item *items, int n, const int *order, size_t avail, int depth,
                        size_t slot)
{
    size_t forced = 0;
    for (int i = 0; i < n; i++)
        if (items[i].bytes > slot)
            forced += items[i].bytes;
    if (forced > avail || (size_t)depth * slot > avail - forced)
        return (size_t)-1;
    size_t room = avail - forced - (size_t)depth * slot, resident = forced;
    for (int k = 0; k < n; k++) {
        kc_res_item *it = &items[order[k]];
        if (it->bytes > slot) {
            it->mode = KC_WMODE_RESIDENT;
        } else if (it->bytes <= room) {
            it->mode = KC_WMODE_RESIDENT;
            room -= it->bytes;
            resident += it->bytes;
        } else {
            it->mode = KC_WMODE_STREAMED;
        }
    }
    return resident;
}

static double kc_predict(const kc_res_request *req, double flops, size_t streamed, int depth)
{
    double compute = flops / (req->flops_per_s > 0 ? req->flops_per_s : 1e11);
    double copy = (double)streamed / (req->link_bytes_per_s > 0 ? req->link_bytes_per_s : 1e10);
    if (streamed == 0)
        return compute;
    return depth >= 2 ? (compute > copy ? compute : copy) : compute + copy;
}

static kc_status kc_too_small(const kc_res_request *req, const kc_res_item *items, int n)
{
    int big = -1;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        total += items[i].bytes;
        if (big < 0 || items[i].bytes > items[big].bytes)
            big = i;
    }
    /* Streaming needs room for the largest layer; without it, for all. */
    size_t largest = !req->variables_on_host ? total : big >= 0 ? items[big].bytes : 0;
    char b[32], m[32], a[32], w[32], l[32];
    kc_fmt_bytes(req->budget, b, sizeof b);
    kc_fmt_bytes(req->fixed_bytes + largest, m, sizeof m);
    kc_fmt_bytes(req->activation_bytes, a, sizeof a);
    kc_fmt_bytes(req->fixed_bytes - req->activation_bytes, w, sizeof w);
    kc_fmt_bytes(largest, l, sizeof l);
    if (!req->variables_on_host || big < 0)
        return kc_fail(KC_ERR_NOMEM,
                       "%s: device memory budget %s is below the minimum %s (activations %s, "
                       "workspace %s, weights %s%s)",
                       req->device, b, m, a, w, l,
                       req->variables_on_host ? "" : ", every variable resident: place the "
                                                     "variables on /CPU:0 to stream them");
    return kc_fail(KC_ERR_NOMEM,
                   "%s: device memory budget %s is below the minimum %s (activations %s + "
                   "workspace %s + the largest layer '%s' %s)",
                   req->device, b, m, a, w, items[big].name, l);
}

kc_status kc_residency_plan(const kc_res_request *req, kc_res_item *items, int n,
                            kc_res_plan *out)
{
    memset(out, 0, sizeof *out);
    size_t total = 0;
    double flops = 0;
    for (int i = 0; i < n; i++) {
        total += items[i].bytes;
        flops += items[i].flops;
        items[i].mode = KC_WMODE_RESIDENT;
    }
    size_t budget = req->budget ? req->budget : (size_t)-1;
    if (req->fixed_bytes > budget)
        return kc_too_small(req, items, n);
    size_t avail = budget - req->fixed_bytes;
    if (total <= avail || !req->variables_on_host) {
        if (total > avail)
            return kc_too_small(req, items, n);
        out->resident_bytes = total;
    } else {
        int *order = kc_calloc((size_t)n + 1, sizeof *order);
        if (!order)
            return KC_ERR_NOMEM;
        for (int i = 0; i < n; i++)
            order[i] = i;
        qsort_r(order, (size_t)n, sizeof *order, kc_by_reuse, items);
        /* A ring of two or more slots overlaps uploads with compute; a
         * single slot serialises them, so it is the last resort. */
        kc_res_choice best = {0};
        int max_depth = req->max_depth > 0 ? req->max_depth : 3;
        for (int pass = 0; pass < 2 && !best.valid; pass++)
            for (int depth = max_depth; depth >= 1; depth--) {
                if ((pass == 0) != (depth >= 2 || max_depth == 1))
                    continue;
                for (int c = 0; c < n; c++) {
                    size_t slot = items[c].bytes;
                    size_t resident = kc_assign(items, n, order, avail, depth, slot);
                    if (resident == (size_t)-1)
                        continue;
                    double score = kc_predict(req, flops, total - resident, depth);
                    if (!best.valid || score < best.score * 0.999)
                        best = (kc_res_choice){depth, slot, score, 1};
                }
            }
        if (!best.valid) {
            free(order);
            return kc_too_small(req, items, n);
        }
        out->resident_bytes = kc_assign(items, n, order, avail, best.depth, best.slot);
        out->depth = best.depth;
        out->slot_bytes = best.slot;
        free(order);
    }
    size_t offset = 0;
    int seq = 0;
    for (int i = 0; i < n; i++) {
        if (items[i].mode == KC_WMODE_RESIDENT) {
            items[i].offset = offset;
            offset += items[i].bytes;
        } else {
            items[i].seq = seq++;
            out->streamed_bytes += items[i].bytes;
        }
    }
    out->n_streamed = seq;
    if (!seq) {
        out->depth = 0;
        out->slot_bytes = 0;
    }
    /* Shrink the slot to the largest streamed item. */
    size_t slot = 0;
    for (int i = 0; i < n; i++)
        if (items[i].mode == KC_WMODE_STREAMED && items[i].bytes > slot)
            slot = items[i].bytes;
    out->slot_bytes = slot;
    if (out->depth > seq)
        out->depth = seq;
    out->device_bytes = req->fixed_bytes + out->resident_bytes + (size_t)out->depth * slot;
    out->predicted_s = kc_predict(req, flops, out->streamed_bytes, out->depth);
    return KC_OK;
}
