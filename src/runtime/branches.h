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
    /* Measured (branches.c, kc_branches_rebalance), over the region's
     * first runs side by side: run_seconds[b] branch b's time in the
     * last run (written by its lane), seconds[b] its least; span the
     * least over a phase's runs of the longer lane's time; span_first
     * the first deal's, lane_first that deal while a new one is tried.
     * `measured` counts a phase's runs; `phase` 0 times the first deal,
     * 1 a new one, 2 the deal stays; `moved`: the new one stayed. */
    double *seconds, *run_seconds;
    int *lane_first;
    double span, span_first;
    int measured, phase, moved;
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

/* The session's regions whose branches were dealt to the lanes again
 * from their measured times (kc_branches_rebalance). */
int kc_branches_moved(const kc_branches *b);

/* After a run side by side that timed r's branches (r->phase 0 or 1,
 * r->run_seconds filled): its times taken in, and at a phase's end a new
 * deal tried, or the tried one kept or the first brought back
 * (branches.c). */
void kc_branches_rebalance(kc_branch_region *r);

/* n branches of times seconds[] (n <= KC_BRANCH_MAX_DEAL) dealt to the
 * two lanes into lane_of[]: the split whose longer lane is shortest (up
 * to 16 branches; beyond, longest first onto the less loaded lane, ties
 * onto lane 0); that lane's time. */
#define KC_BRANCH_MAX_DEAL 64
double kc_branches_deal(const double *seconds, int n, int *lane_of);

#endif
