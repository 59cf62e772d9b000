/* The arena's values placed offline, largest first (plan_pack.c). */
#ifndef KC_PLAN_PACK_H
#define KC_PLAN_PACK_H

#include <stddef.h>

/* n blocks of size[i] (whole cache lines), block i live from node
 * from[i] to node to[i] inclusive: offsets such that blocks whose lives
 * overlap never share memory, each block, largest first, at the smallest
 * gap that fits it; their end at most into *peak. 1 when out of memory. */
int kc_plan_pack(int n, const size_t *size, const int *from, const int *to, size_t *offset,
                 size_t *peak);

/* The widest gap between the blocks live at `node` (from <= node <= to)
 * into *gap_offset and *gap_floats, and where the last of them ends into
 * *live_end; scratch holds n pairs. */
void kc_plan_pack_gaps(int n, const size_t *size, const int *from, const int *to,
                       const size_t *offset, int node, size_t (*scratch)[2], size_t *gap_offset,
                       size_t *gap_floats, size_t *live_end);

#endif
