/* Branch lanes: where a run is not split into batch lanes (batch 1), the
 * independent branches of a block (InceptionV3's towers) run side by
 * side, one thread each, each layer on one thread (see branches.c). */
#ifndef KC_BRANCHES_H
#define KC_BRANCHES_H

#include "runtime/session_internal.h"

#define KC_BRANCH_LANES 2

/* A block whose branches run side by side: nodes [first, last] (its
 * join, node last + 1, runs after them on every thread), cut into
 * branches that share no value made inside the block. */
typedef struct kc_branch_region {
    int first, last;
    int n_branches;
    /* The join is a channel Concatenate of the branches' outputs: each
     * lane copies a branch's outputs into it when the branch is done
     * (while they are in its cache; the join does not run). join_of[k]:
     * the branch that makes the join's input k; else n_branches. */
    int lane_join;
    int *join_of;
    int *branch_first;     /* branch b's nodes: node_list[branch_first[b] ..
                            * branch_first[b + 1]), in node order; branches
                            * costliest first */
    int *node_list;
    int *lane_of;          /* branch b runs on lane lane_of[b] */
} kc_branch_region;

typedef struct kc_branches {
    int n_regions;
    kc_branch_region *region;
    int *region_of;        /* per node: its region, or -1 */
    int *region_last;      /* per node: its region's join, or -1 (kc_plan_relayout) */
    int warm;              /* the first run, lanes in turn, has built the states */
} kc_branches;

/* The session's branch regions for its current plan (batch lanes off, on
 * the host loop, 2 or more threads, no masks, KC_BRANCHES not 0), the
 * plan laid out again so that values of a region never share memory;
 * NULL in *out when there are none. */
kc_status kc_branches_new(kc_session *s, kc_branches **out);
void kc_branches_free(kc_branches *b);

/* One run of every node: regions' branches side by side, each on its
 * lane's thread (the first run: the lanes take turns, building their
 * kernels for one thread). */
kc_status kc_branches_run(kc_session *s);

#endif
