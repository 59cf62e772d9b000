/* Planning the cuts of a split run (--stages K, `kerasc plan`): exact
 * dynamic programming over the topological cut points where few tensors
 * cross (at most KC_PLAN_MAX_CROSSING), minimising the slowest stage —
 * its compute (FLOPs over the worker's measured speed, plus a per-layer
 * overhead) plus its incoming activations over the measured link
 * bandwidth — subject to each worker's memory for the stage's weights. */
#ifndef KC_PLANNER_H
#define KC_PLANNER_H

#include <stddef.h>

#include "kerasc.h"
#include "net/pipeline.h"

#define KC_PLAN_MAX_CROSSING 4

typedef struct kc_plan_worker {
    double flops_per_s;       /* measured (STATUS gflops) */
    double bytes_per_s;       /* link into this worker */
    size_t memory_bytes;      /* 0: unknown (no constraint) */
} kc_plan_worker;

typedef struct kc_split_plan {
    int n_stages;
    int last_node[KC_PIPELINE_MAX_STAGES];
    double compute_s[KC_PIPELINE_MAX_STAGES];
    double transfer_s[KC_PIPELINE_MAX_STAGES];   /* its incoming activations */
    size_t in_bytes[KC_PIPELINE_MAX_STAGES];
    size_t weight_bytes[KC_PIPELINE_MAX_STAGES];
    double bottleneck_s;
} kc_split_plan;

/* This machine's GEMM speed (GFLOP/s, kerasc's own GEMM, 384^3, best of
 * 4): the compute side of the cost model; 0 if it cannot be measured. */
double kc_plan_gemm_gflops(void);

kc_status kc_plan_split(const kc_model *m, int64_t batch, int n_stages,
                        const kc_plan_worker *workers, kc_split_plan *out);
/* The plan as a table (one line per stage). */
void kc_split_plan_print(const kc_model *m, const kc_split_plan *p, FILE *out);

#endif
