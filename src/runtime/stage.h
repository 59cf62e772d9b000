/* Pipeline stages: a contiguous range of nodes in graph order, cut where
 * few tensors cross. A stage's inputs are the values live at the cut
 * before it (produced earlier, read by it or later, or model outputs), its
 * outputs the values live at the cut after it; a value that skips over
 * the stage is both. Every process computes these lists from the same
 * model file, so only tensors, in this order, travel between stages. */
#ifndef KC_STAGE_H
#define KC_STAGE_H

#include "base/tensor.h"
#include "kerasc.h"

typedef struct kc_stage_plan {
    int first, last;         /* node range, inclusive */
    int *inputs, n_inputs;   /* value ids, ascending */
    int *outputs, n_outputs;
} kc_stage_plan;

int kc_model_num_nodes(const kc_model *m);
/* The layer a node calls. */
const char *kc_model_node_name(const kc_model *m, int node);
/* Index of the last node calling the layer `name` (a cut goes after it). */
kc_status kc_model_find_cut(const kc_model *m, const char *name, int *node);
/* The values live at cut c (between node c-1 and node c; c = 0: the model
 * inputs, c = n_nodes: the model outputs). Sorted. */
kc_status kc_model_live_values(const kc_model *m, int cut, int **values, int *n);
kc_status kc_stage_plan_build(const kc_model *m, int first, int last, kc_stage_plan *out);
void kc_stage_plan_free(kc_stage_plan *p);
/* Bytes of a value per sample (float32), for planners and checks. */
int64_t kc_model_value_sample_floats(const kc_model *m, int value);

/* Turn a session into a stage session (re-plans on the next run). The plan
 * must outlive the session's use of it. */
kc_status kc_session_set_stage(kc_session *s, const kc_stage_plan *plan);
/* Run the stage: in[i] feeds plan->inputs[i] (float32, the value's shape at
 * this batch), out[i] receives plan->outputs[i] (new tensors). */
kc_status kc_session_run_stage(kc_session *s, int64_t batch, const kc_tensor *const *in,
                               kc_tensor **out);

/* The same, with outputs as views of the session's memory (no copy): valid
 * until the session's next run. For a worker that sends them straight on. */
kc_status kc_session_run_stage_views(kc_session *s, int64_t batch, const kc_tensor *const *in,
                                     kc_tensor *views);

#endif
