/* A scheduled run replayed as one CUDA graph (see kc_sched_graph_run).
 *
 * Why: on a GPU at batch 1 the host's enqueueing is the bound. ResNet50 on
 * the H200 took 3.9 ms of host time to enqueue 90 layers whose GPU work
 * was about as long (gpu-check, 12-04); a graph launch costs one call.
 *
 * When: the whole range runs on one GPU (managed device 0, the only one),
 * every weight resident (streamed layers wait on the copy stream, and the
 * disk tier drops host pages between layers), no layer fell back to the
 * host and no value carried a Keras mask (host data) in an eager run of
 * this plan. The first run of a plan is eager: it builds each layer's
 * cuDNN plan (algorithm search included), which cannot be captured. The
 * second captures; later ones replay. KC_CUDA_GRAPH=0 turns it off. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/error.h"
#include "base/mem.h"
#include "runtime/sched_internal.h"

void kc_sched_graph_reset(kc_sched *sc)
{
    if (sc->graph)
        sc->dev[0].io->graph_free(sc->dev[0].b, sc->graph);
    sc->graph = NULL;
    sc->graph_eager_runs = 0;
    sc->graph_off = 0;
    sc->graph_note[0] = '\0';
}

/* The device and plan allow a graph at all. */
static int kc_graph_possible(const kc_sched *sc)
{
    if (sc->n_dev != 1 || sc->disk || kc_env_off("KC_CUDA_GRAPH"))
        return 0;
    const kc_sdev *dv = &sc->dev[0];
    return dv->io->type == KC_DEVICE_GPU && dv->io->capture_begin && dv->io->capture_end &&
           dv->io->graph_launch && dv->io->graph_free && dv->res.n_streamed == 0;
}

void kc_sched_graph_eager_done(kc_sched *sc)
{
    if (sc->graph_blocked)
        sc->graph_off = 1;
    else
        sc->graph_eager_runs++;
}

/* Values the range reads from the host (the model's or the stage's
 * inputs), uploaded before the graph: a copy from pageable host memory
 * cannot be captured. */
static kc_status kc_graph_inputs_up(kc_sched *sc)
{
    const kc_session *s = sc->s;
    const int *in = s->stage_first < 0 ? s->graph->inputs : s->stage_inputs;
    int n = s->stage_first < 0 ? s->graph->n_inputs : s->n_stage_inputs;
    for (int k = 0; k < n; k++)
        KC_TRY(kc_sched_ensure(sc, in[k], 0));
    return KC_OK;
}

/* Record the range into sc->graph; on failure nothing ran, `where` is as
 * before, and the plan stays layer by layer with the reason in the note. */
static kc_status kc_graph_capture(kc_sched *sc, int first, int last)
{
    kc_sdev *dv = &sc->dev[0];
    size_t where_bytes = (size_t)sc->s->graph->n_values * sizeof *sc->where;
    unsigned *before = kc_calloc(where_bytes + 1, 1);
    if (!sc->graph_where)
        sc->graph_where = kc_calloc(where_bytes + 1, 1);
    if (!before || !sc->graph_where) {
        free(before);
        return KC_ERR_NOMEM;
    }
    memcpy(before, sc->where, where_bytes);
    char why[128] = "a layer left the GPU";
    kc_status st = dv->io->capture_begin(dv->b);
    if (st == KC_OK) {
        for (int i = first; st == KC_OK && i <= last; i++)
            st = kc_sched_run_one(sc, i);
        if (st != KC_OK) /* the first failure says why; ending then fails too */
            snprintf(why, sizeof why, "%s", kc_last_error());
        void *graph = NULL;
        kc_status end = dv->io->capture_end(dv->b, &graph); /* always ends it */
        if (st == KC_OK && end != KC_OK)
            snprintf(why, sizeof why, "%s", kc_last_error());
        if (st == KC_OK)
            st = end;
        if (st == KC_OK && !sc->graph_blocked)
            sc->graph = graph;
        else if (graph)
            dv->io->graph_free(dv->b, graph);
    } else {
        snprintf(why, sizeof why, "%s", kc_last_error());
    }
    if (sc->graph) {
        memcpy(sc->graph_where, sc->where, where_bytes);
        int layers = 0; /* those fused into a producer ran as part of it */
        for (int i = first; i <= last; i++)
            layers += !sc->s->fused.skip[i];
        snprintf(sc->graph_note, sizeof sc->graph_note,
                 "graph: %s replays its %d layers as one CUDA graph (KC_CUDA_GRAPH=0: layer by "
                 "layer)", dv->label, layers);
    } else {
        sc->graph_off = 1;
        snprintf(sc->graph_note, sizeof sc->graph_note, "graph: %s runs layer by layer: %s",
                 dv->label, why);
        kc_error_clear();
    }
    memcpy(sc->where, before, where_bytes);
    free(before);
    return KC_OK;
}

kc_status kc_sched_graph_run(kc_sched *sc, int first, int last, int *done)
{
    *done = 0;
    sc->graph_blocked = 0;
    if (sc->graph_off || sc->graph_eager_runs < 1 || !kc_graph_possible(sc))
        return KC_OK;
    KC_TRY(kc_graph_inputs_up(sc));
    if (!sc->graph) {
        KC_TRY(kc_graph_capture(sc, first, last));
        if (!sc->graph)
            return KC_OK;
    }
    kc_sdev *dv = &sc->dev[0];
    double t0 = kc_now() - sc->run_t0;
    KC_TRY(dv->io->graph_launch(dv->b, sc->graph));
    double t1 = kc_now() - sc->run_t0;
    /* The host's part of every layer is now that one launch. */
    for (int i = first; i <= last; i++) {
        sc->nodes[i].t_start = t0;
        sc->nodes[i].t_end = i == first ? t1 : t0;
    }
    memcpy(sc->where, sc->graph_where, (size_t)sc->s->graph->n_values * sizeof *sc->where);
    *done = 1;
    return KC_OK;
}
