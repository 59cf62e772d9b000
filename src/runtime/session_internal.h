/* The session's internals, shared by session.c (the plain CPU loop) and
 * sched.c (placement across backends under the residency manager). */
#ifndef KC_SESSION_INTERNAL_H
#define KC_SESSION_INTERNAL_H

#include "kernels/kernel.h"
#include "runtime/fuse.h"
#include "runtime/plan.h"
#include "runtime/profile.h"

struct kc_sched;

#define KC_SESSION_MAX_DIRECT 8

struct kc_session {
    const kc_model *model;
    const kc_graph *graph;
    kc_kernel_fn *kernels;   /* per node */
    kc_plan plan;            /* shapes + arena offsets for the last input shapes */
    kc_fused fused;          /* BN folding / activation fusion */
    float *arena;
    size_t arena_floats;
    int arena_huge;          /* the arena is kc_huge_alloc's, not kc_calloc's */
    kc_kernel_state **state; /* per node: kernel state (oneDNN primitives) */
    unsigned char **mask;    /* per value during a run, or NULL */
    unsigned char *mask_owned;
    int threads;
    int exact;               /* kc_session_options.exact: no Winograd */
    kc_wino_budget wino_budget; /* kc_session_options.winograd_memory left */
    int fuse_dw;             /* KC_FUSE_DW unset or not 0 at creation */
    int fuse_pool;           /* KC_FUSE_POOL unset or not 0 at creation */
    int fuse_up;             /* KC_FUSE_UP unset or not 0 at creation */
    int fuse_head;           /* KC_FUSE_HEAD unset or not 0 at creation */
    int trace_nodes;         /* KC_MEM_TRACE=nodes at creation */
    int counted;             /* counted in model->n_sessions */
    /* release_packed_weights in effect (no scheduler): the model's arrays
     * this session never reads are freed, re-read before a new plan. */
    int release_originals;
    int n_packed_released;   /* of them, kernels of nodes reading a packed copy */
    struct kc_sched *sched;  /* placement / residency, or NULL: all on the host */
    int64_t microbatch;      /* throughput mode, 0 = off */
    /* A pipeline stage (stage.c): only nodes [first, last] run, fed the
     * values live at the cut before first; -1 = the whole model. */
    int stage_first, stage_last;
    const int *stage_inputs; /* value ids written before a stage run */
    int n_stage_inputs;
    const int *stage_outputs; /* value ids read after it */
    int n_stage_outputs;
    kc_profile *profile;      /* options.profile on the host loop, or NULL */
    /* Batch lanes (lanes.c) of the current plan, made for one lane's
     * images: 1 = none; lane k's arena starts k * lane_floats in. */
    int lanes;
    int lanes_warm;           /* the plan's first laned run is done */
    long lanes_helped;        /* pieces a lane ran of another's layers (base/help.h) */
    int lanes_refused;        /* KC_LANES=0, a layer or value not per image */
    size_t lane_floats;
    /* Image-major head (head.c): in each lane, nodes [0, head_nodes) run
     * one image at a time on head_plan (one image's shapes), on a head
     * arena of head_floats after the lanes' arenas; 0 = none. */
    int head_nodes;
    kc_plan head_plan;
    size_t head_floats;
    unsigned char *head_input_later; /* per model input: the tail reads it too */
    int *head_out, n_head_out; /* values that cross into the tail */
    int64_t *head_size;        /* per head_out: its floats per image */
    /* Branch lanes (branches.c) of the current plan, or NULL; off
     * (KC_BRANCHES=0), joins run whole (KC_BRANCH_JOIN=0) and the first
     * deal kept (KC_BRANCH_REBALANCE=0), read when the session is
     * created. */
    struct kc_branches *branches;
    int branches_off, branch_join_off, branch_rebalance_off;
    /* Model inputs the nodes read where the caller's float32 tensor holds
     * them, not copied into the arena (session.c, kc_session_direct):
     * during a run of the plain loop only; off with KC_INPUT_DIRECT=0,
     * read when the session is created. n_direct_last: how many the
     * last run read so (tests). */
    int input_direct;
    int n_direct, n_direct_last;
    int direct_value[KC_SESSION_MAX_DIRECT];
    const float *direct_data[KC_SESSION_MAX_DIRECT];
};

/* After node `index` ran with input 0 at `in0`: derive its output mask. */
void kc_session_mask_after(kc_session *s, int index, const float *in0);

/* Build (or reuse) the plan for these model-input shapes. */
kc_status kc_session_prepare(kc_session *s, const kc_tensor *const *inputs);
/* Plan for the model's own input shapes at `batch` (no data needed). A
 * variable non-batch dimension becomes 1 when variable_as_one, else it is
 * an error (`why` says who needs fixed shapes). */
kc_status kc_session_prepare_batch(kc_session *s, int64_t batch, int variable_as_one,
                                   const char *why);
/* Run node i on the host kernels (the session's plain loop). */
kc_status kc_session_run_node(kc_session *s, int index);
/* After the stage range changed: the plan dropped and, on the host loop,
 * the rewrites made again for the range (kc_fuse's stage). */
kc_status kc_session_restage(kc_session *s);
/* Only the kernel of node i (not absorbed), on `plan`'s values in
 * `arena` (a batch lane's): no masks, no weight release. */
kc_status kc_session_node_on(kc_session *s, int index, const kc_plan *plan, float *arena);
/* Node i's kernel (not absorbed) on the session's plan and arena, the
 * arena's floats [spare, spare + spare_floats) free for it (a branch
 * lane's part of its region's spare range): no masks, no weight release. */
kc_status kc_session_node_spare(kc_session *s, int index, size_t spare, size_t spare_floats);
/* The same in a plan's first run, which builds the kernel state and then
 * releases the weights it no longer reads; absorbed nodes: nothing. For
 * laned runs (no masks). */
kc_status kc_session_first_on(kc_session *s, int index, const kc_plan *plan, float *arena);
/* Elements [first, first + n) of t as float32 into dst. */
void kc_session_input_slice(const kc_tensor *t, int64_t first, int64_t n, float *dst);

/* One run over the whole batch (what kc_session_run does without
 * micro-batches). */
kc_status kc_session_run_whole(kc_session *s, const kc_tensor *const *inputs, int n_inputs,
                               kc_tensor **outputs, int n_outputs);
/* Split the batch into s->microbatch-sized runs (microbatch.c). */
kc_status kc_session_run_microbatched(kc_session *s, const kc_tensor *const *inputs,
                                      int n_inputs, kc_tensor **outputs, int n_outputs);

#endif
