/* Packing the arena offline, greedy by size (see plan_pack.h).
 *
 * Why: plan.c places values in node order, each at the lowest free
 * offset when it is made. A value that lives long then sits wherever the
 * range was free at its birth, and later ones go above it: with branch
 * regions (branches.c), whose values all live to the region's join,
 * InceptionV3's arena at batch 1 grew from 12.2 to 18.3 MB that way,
 * though no moment needs more than the stem's 12.2. Placing the largest
 * values first, each at the best-fitting offset free of the values whose
 * lives overlap its own (TensorFlow Lite's "greedy by size"), packs the
 * same lives tighter; plan.c keeps whichever layout is smaller. */
#include "runtime/plan_pack.h"

#include <stdlib.h>

#include "base/mem.h"

typedef struct kc_pack_key {
    size_t size;
    int from, index;
} kc_pack_key;

/* Largest first; then the earlier born, then the lower index. */
static int kc_pack_by_size(const void *a, const void *b)
{
    const kc_pack_key *x = a, *y = b;
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    if (x->from != y->from)
        return x->from < y->from ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int kc_pack_by_offset(const void *a, const void *b)
{
    const size_t *x = a, *y = b; /* {offset, end} pairs */
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* The best-fitting offset for `size` among the ranges in `used` (n
 * {offset, end} pairs, sorted here): the smallest gap it fits, else past
 * the last. */
static size_t kc_pack_fit(size_t (*used)[2], int n, size_t size)
{
    qsort(used, (size_t)n, sizeof *used, kc_pack_by_offset);
    size_t at = 0, best = (size_t)-1, best_gap = (size_t)-1;
    for (int k = 0; k < n; k++) {
        if (used[k][0] > at) {
            size_t gap = used[k][0] - at;
            if (gap >= size && gap < best_gap) {
                best = at;
                best_gap = gap;
            }
        }
        if (used[k][1] > at)
            at = used[k][1];
    }
    return best != (size_t)-1 ? best : at;
}

int kc_plan_pack(int n, const size_t *size, const int *from, const int *to, size_t *offset,
                 size_t *peak)
{
    kc_pack_key *order = kc_calloc((size_t)n + 1, sizeof *order);
    size_t(*used)[2] = kc_calloc((size_t)n + 1, sizeof *used);
    if (!order || !used) {
        free(order);
        free(used);
        return 1;
    }
    for (int i = 0; i < n; i++)
        order[i] = (kc_pack_key){size[i], from[i], i};
    qsort(order, (size_t)n, sizeof *order, kc_pack_by_size);
    *peak = 0;
    for (int k = 0; k < n; k++) {
        int b = order[k].index, m = 0;
        for (int j = 0; j < k; j++) {
            int o = order[j].index;
            if (from[o] <= to[b] && from[b] <= to[o]) {
                used[m][0] = offset[o];
                used[m++][1] = offset[o] + size[o];
            }
        }
        offset[b] = kc_pack_fit(used, m, size[b]);
        if (offset[b] + size[b] > *peak)
            *peak = offset[b] + size[b];
    }
    free(order);
    free(used);
    return 0;
}

void kc_plan_pack_gaps(int n, const size_t *size, const int *from, const int *to,
                       const size_t *offset, int node, size_t (*scratch)[2], size_t *gap_offset,
                       size_t *gap_floats, size_t *live_end)
{
    int m = 0;
    for (int b = 0; b < n; b++)
        if (from[b] <= node && node <= to[b]) {
            scratch[m][0] = offset[b];
            scratch[m++][1] = offset[b] + size[b];
        }
    qsort(scratch, (size_t)m, sizeof *scratch, kc_pack_by_offset);
    size_t at = 0, best_off = 0, best = 0;
    for (int k = 0; k < m; k++) {
        if (scratch[k][0] > at && scratch[k][0] - at > best) {
            best = scratch[k][0] - at;
            best_off = at;
        }
        if (scratch[k][1] > at)
            at = scratch[k][1];
    }
    *gap_offset = best_off;
    *gap_floats = best;
    *live_end = at;
}
