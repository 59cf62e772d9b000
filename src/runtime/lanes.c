/* Batch lanes (see lanes.h).
 *
 * Why: a layer cut into per-thread parts ends at a meeting point, where
 * the faster thread waits for the slower. On a shared 2-core machine one
 * core is often a little behind, a different one each time, and over the
 * ~100 layers of a model those waits added up to 3-9% of a batch-8 run
 * (MobileNetV2, InceptionV3: time inside kc_parallel less the mean of the
 * threads' busy times). Two processes each running half the batch on one
 * thread ran 6-16% faster than one on two threads. Lanes are that inside
 * one process: the threads meet once per run instead of once per layer.
 *
 * The kernel states are shared: each is built in the first run of a plan,
 * by lane 0 on one thread, so that it is sized for one thread; every lane
 * then runs the same primitives on its own arena. What a kernel binds per
 * run is chosen by the lane (kc_batch_lane: oneDNN's argument memories and
 * stream, the Winograd buffers' share of the spare arena).
 *
 * A lane done first does not wait idle for the others: it takes pieces
 * of the layers they still run (base/help.h: one vCPU here is often
 * 20-40% slower than the other for minutes). */
#include "runtime/lanes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/help.h"
#include "base/threads.h"
#include "kernels/dnnl_common.h"
#include "kernels/inner_conv.h"
#include "model/model_internal.h"
#include "runtime/head.h"
#include "runtime/profile.h"

_Static_assert(KC_LANES_MAX <= KC_DNNL_MAX_BATCH_LANES, "oneDNN primitives bind per lane");
_Static_assert(KC_LANES_MAX <= KC_INNER_LANES, "kernels keep a buffer per lane");
_Static_assert(KC_LANES_MAX <= KC_HELP_MAX_LANES, "each lane has a slot on the help board");

/* Layers that see the whole batch at once (a TensorFlow or keras.ops
 * function may reduce over it) or make Keras masks (which lanes do not
 * carry): with one of them the model runs as one batch. */
static int kc_lanes_layer_ok(const kc_layer *l)
{
    static const char *const whole_batch[] = {"TFOpLambda", "SlicingOpLambda", "Masking",
                                              "Embedding", NULL};
    if (l->def && (l->def->flags & KC_OPF_OPS_NODE))
        return 0;
    for (int i = 0; whole_batch[i]; i++)
        if (!strcmp(l->class_name, whole_batch[i]))
            return 0;
    return 1;
}

int kc_lanes_model_ok(const kc_graph *g)
{
    for (int i = 0; i < g->n_nodes; i++)
        if (!kc_lanes_layer_ok(g->nodes[i].layer))
            return 0;
    return 1;
}

int kc_lanes_for(const kc_session *s, const kc_shape *shapes, int n)
{
    if (s->lanes_refused || s->sched || s->stage_first >= 0 || s->trace_nodes || n < 1)
        return 1;
    /* one lane per thread: fewer lanes would leave threads idle */
    int lanes = kc_threads_wanted(s->threads);
    int64_t batch = shapes[0].rank > 0 ? shapes[0].dims[0] : 0;
    if (lanes < 2 || lanes > KC_LANES_MAX || batch < lanes || batch % lanes)
        return 1;
    if (kc_dnnl_ready() && kc_dnnl_lanes(lanes) != KC_OK)
        return 1;
    return lanes;
}

int kc_lanes_plan_ok(const kc_session *s, int64_t lane_batch)
{
    for (int v = 0; v < s->plan.n_values; v++) {
        const kc_shape *sh = &s->plan.shape[v];
        if (sh->rank < 1 || sh->dims[0] != lane_batch)
            return 0;
    }
    return 1;
}

float *kc_lanes_arena(const kc_session *s, int k) { return s->arena + (size_t)k * s->lane_floats; }

kc_shape kc_lanes_shape(const kc_session *s, int v)
{
    kc_shape shape = s->plan.shape[v];
    shape.dims[0] *= s->lanes;
    return shape;
}

void kc_lanes_gather(const kc_session *s, int v, float *dst)
{
    size_t n = (size_t)kc_shape_count(&s->plan.shape[v]);
    for (int k = 0; k < s->lanes; k++)
        memcpy(dst + (size_t)k * n, kc_lanes_arena(s, k) + s->plan.offset[v], n * sizeof *dst);
}

/* Lane k's images of every input the lane's arena holds (with a head,
 * those the tail reads too), into its arena. */
static void kc_lanes_scatter(kc_session *s, const kc_tensor *const *inputs, int n_inputs, int k)
{
    for (int i = 0; i < n_inputs; i++) {
        if (!kc_head_input_to_lane(s, i))
            continue;
        int v = s->graph->inputs[i];
        int64_t n = kc_shape_count(&s->plan.shape[v]);
        kc_session_input_slice(inputs[i], k * n, n, kc_lanes_arena(s, k) + s->plan.offset[v]);
    }
}

typedef struct kc_lanes_job {
    kc_session *s;
    const kc_tensor *const *inputs;
    int n_inputs;
    int first;                       /* lane 0 has run already */
    kc_help_board help;              /* a lane done first takes pieces of the others' layers */
    kc_status status[KC_LANES_MAX];
    char message[KC_LANES_MAX][512]; /* a failed lane's, from its thread */
} kc_lanes_job;

kc_profile *kc_lanes_profile(const kc_session *s, int k) { return k == 0 ? s->profile : NULL; }

/* Every node on lane k's arena, each timed into the profile where lane k
 * keeps it (kc_lanes_profile). Absorbed nodes have nothing to run; no
 * layer of a laned model makes a mask (kc_lanes_layer_ok). */
static kc_status kc_lanes_nodes(kc_session *s, int k, const kc_tensor *const *inputs,
                                int n_inputs)
{
    float *arena = kc_lanes_arena(s, k);
    kc_profile *profile = kc_lanes_profile(s, k);
    kc_lanes_scatter(s, inputs, n_inputs, k);
    if (s->head_nodes)
        KC_TRY(kc_head_run(s, k, inputs, 0));
    for (int i = s->head_nodes; i < s->graph->n_nodes; i++) {
        if (s->fused.skip[i])
            continue;
        double start = kc_profile_clock(profile);
        KC_TRY(kc_session_node_on(s, i, &s->plan, arena));
        kc_profile_since(profile, i, start);
    }
    return KC_OK;
}

static void kc_lanes_body(void *arg, int k)
{
    kc_lanes_job *job = arg;
    kc_help_enter(&job->help, k);
    if (job->first && k == 0) {
        kc_help_finish();
        return;
    }
    kc_batch_lane_set(k);
    job->status[k] = kc_lanes_nodes(job->s, k, job->inputs, job->n_inputs);
    kc_help_finish();
    kc_batch_lane_set(0);
    if (job->status[k] != KC_OK)
        snprintf(job->message[k], sizeof job->message[k], "%s", kc_last_error());
}

/* The first run of a plan: lane 0 alone, through the session's own node
 * loop (which builds the kernel states and may then release the weights
 * they copied), on one OpenMP thread so that each state is built for the
 * one thread that runs it. The other lanes then run side by side as in
 * every later run, each on the pool thread that will keep running it, so
 * that its per-thread buffers are in place from this run on. */
static kc_status kc_lanes_first(kc_session *s, const kc_tensor *const *inputs, int n_inputs)
{
    kc_threads_enter(1);
    kc_lanes_scatter(s, inputs, n_inputs, 0);
    kc_status st = s->head_nodes ? kc_head_run(s, 0, inputs, 1) : KC_OK;
    for (int i = s->head_nodes; st == KC_OK && i < s->graph->n_nodes; i++) {
        double start = kc_profile_clock(s->profile);
        st = kc_session_run_node(s, i);
        if (!s->fused.skip[i]) /* absorbed into its producer: nothing ran */
            kc_profile_since(s->profile, i, start);
    }
    kc_threads_enter(s->threads);
    return st;
}

kc_status kc_lanes_run(kc_session *s, const kc_tensor *const *inputs, int n_inputs)
{
    kc_lanes_job job = {.s = s, .inputs = inputs, .n_inputs = n_inputs, .first = !s->lanes_warm};
    if (job.first)
        KC_TRY(kc_lanes_first(s, inputs, n_inputs));
    kc_help_board_init(&job.help, s->lanes);
    /* the first run sizes each lane thread's buffers on its own nodes */
    job.help.enabled = job.help.enabled && !job.first;
    kc_parallel(s->lanes, kc_lanes_body, &job);
    s->lanes_helped += kc_help_helped(&job.help);
    for (int k = 0; k < s->lanes; k++)
        if (job.status[k] != KC_OK)
            return kc_fail(job.status[k], "%s (batch lane %d of %d)", job.message[k], k,
                           s->lanes);
    s->lanes_warm = 1;
    return KC_OK;
}
