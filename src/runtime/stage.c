/* Pipeline stages (see stage.h). */
#include "runtime/stage.h"

#include <stdlib.h>
#include <string.h>

#include "base/fpenv.h"
#include "base/mem.h"
#include "base/tensor.h"
#include "base/threads.h"
#include "model/model_internal.h"
#include "runtime/plan.h"
#include "runtime/sched.h"
#include "runtime/session_internal.h"

int kc_model_num_nodes(const kc_model *m) { return m->graph->n_nodes; }

const char *kc_model_node_name(const kc_model *m, int node)
{
    return node >= 0 && node < m->graph->n_nodes ? m->graph->nodes[node].layer->name : "";
}

kc_status kc_model_find_cut(const kc_model *m, const char *name, int *node)
{
    *node = -1;
    for (int i = 0; i < m->graph->n_nodes; i++)
        if (!strcmp(m->graph->nodes[i].layer->name, name))
            *node = i;
    if (*node < 0)
        return kc_fail(KC_ERR_ARG, "the model has no layer '%s' to cut at", name);
    return KC_OK;
}

static int kc_is_output(const kc_graph *g, int v)
{
    for (int k = 0; k < g->n_outputs; k++)
        if (g->outputs[k] == v)
            return 1;
    return 0;
}

static int kc_read_at_or_after(const kc_graph *g, int v, int cut)
{
    for (int i = cut; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_inputs; k++)
            if (g->nodes[i].inputs[k] == v)
                return 1;
    return 0;
}

kc_status kc_model_live_values(const kc_model *m, int cut, int **values, int *n)
{
    const kc_graph *g = m->graph;
    *values = kc_calloc((size_t)g->n_values + 1, sizeof **values);
    *n = 0;
    if (!*values)
        return KC_ERR_NOMEM;
    for (int v = 0; v < g->n_values; v++) {
        if (g->values[v].producer >= cut)
            continue;
        if (kc_is_output(g, v) || kc_read_at_or_after(g, v, cut))
            (*values)[(*n)++] = v;
    }
    return KC_OK;
}

kc_status kc_stage_plan_build(const kc_model *m, int first, int last, kc_stage_plan *out)
{
    memset(out, 0, sizeof *out);
    if (first < 0 || last < first || last >= m->graph->n_nodes)
        return kc_fail(KC_ERR_ARG, "stage range %d..%d outside the model's %d nodes", first, last,
                       m->graph->n_nodes);
    out->first = first;
    out->last = last;
    kc_status st = kc_model_live_values(m, first, &out->inputs, &out->n_inputs);
    if (st == KC_OK)
        st = kc_model_live_values(m, last + 1, &out->outputs, &out->n_outputs);
    if (st != KC_OK)
        kc_stage_plan_free(out);
    return st;
}

void kc_stage_plan_free(kc_stage_plan *p)
{
    free(p->inputs);
    free(p->outputs);
    memset(p, 0, sizeof *p);
}

int64_t kc_model_value_sample_floats(const kc_model *m, int v)
{
    kc_shape s = m->graph->values[v].shape;
    int64_t n = 1;
    for (int d = 1; d < s.rank; d++)
        n *= s.dims[d] < 0 ? 1 : s.dims[d];
    return n;
}

kc_status kc_session_set_stage(kc_session *s, const kc_stage_plan *p)
{
    s->stage_first = p->first;
    s->stage_last = p->last;
    s->stage_inputs = p->inputs;
    s->n_stage_inputs = p->n_inputs;
    s->stage_outputs = p->outputs;
    s->n_stage_outputs = p->n_outputs;
    return kc_session_restage(s); /* the plan and rewrites depend on the range */
}

static void kc_clear_masks(kc_session *s)
{
    for (int v = 0; v < s->graph->n_values; v++) {
        if (s->mask_owned[v])
            free(s->mask[v]);
        s->mask[v] = NULL;
        s->mask_owned[v] = 0;
    }
}

static kc_status kc_stage_inputs_in(kc_session *s, const kc_tensor *const *in)
{
    for (int i = 0; i < s->n_stage_inputs; i++) {
        int v = s->stage_inputs[i];
        const kc_shape *want = &s->plan.shape[v];
        if (!in[i] || in[i]->dtype != KC_F32 || !kc_shape_equal(&in[i]->shape, want)) {
            char got[160] = "none", w[160];
            if (in[i])
                kc_shape_format(&in[i]->shape, got, sizeof got);
            kc_shape_format(want, w, sizeof w);
            return kc_fail(KC_ERR_SHAPE, "stage input %d: got %s, the stage expects float32 %s",
                           i, got, w);
        }
        memcpy(s->arena + s->plan.offset[v], in[i]->data,
               (size_t)kc_shape_count(want) * sizeof(float));
    }
    return KC_OK;
}

/* Output i of the stage, as a view of the session's arena. */
static kc_status kc_stage_output_view(kc_session *s, int i, kc_tensor *view)
{
    int v = s->stage_outputs[i];
    if (s->mask[v])
        return kc_fail(KC_ERR_UNSUPPORTED, "a Keras mask would cross this cut: cut the model "
                       "elsewhere");
    *view = (kc_tensor){.dtype = KC_F32, .shape = s->plan.shape[v],
                        .data = s->arena + s->plan.offset[v], .owns_data = 0};
    return KC_OK;
}

static kc_status kc_stage_outputs_out(kc_session *s, kc_tensor **out)
{
    for (int i = 0; i < s->n_stage_outputs; i++) {
        kc_tensor view;
        KC_TRY(kc_stage_output_view(s, i, &view));
        KC_TRY(kc_tensor_new(KC_F32, view.shape.rank, view.shape.dims, &out[i]));
        memcpy(out[i]->data, view.data, (size_t)kc_shape_count(&view.shape) * sizeof(float));
    }
    return KC_OK;
}

/* Inputs in, the stage's nodes run; outputs stay in the arena. */
static kc_status kc_stage_compute(kc_session *s, int64_t batch, const kc_tensor *const *in)
{
    kc_error_clear();
    if (s->stage_first < 0)
        return kc_fail(KC_ERR_ARG, "kc_session_run_stage: the session has no stage");
    if (batch < 1)
        return kc_fail(KC_ERR_SHAPE, "stage batch %lld", (long long)batch);
    KC_TRY(kc_session_prepare_batch(s, batch, 0, "a pipeline stage needs fixed shapes"));
    KC_TRY(kc_stage_inputs_in(s, in));
    kc_threads_enter(s->threads);
    kc_status st = KC_OK;
    if (s->sched)
        st = kc_sched_run(s->sched);
    for (int i = s->stage_first; !s->sched && st == KC_OK && i <= s->stage_last; i++)
        st = kc_session_run_node(s, i);
    return st;
}

/* kc_stage_compute in TensorFlow's floating-point environment
 * (base/fpenv.h), the caller's restored after. */
static kc_status kc_stage_compute_flushed(kc_session *s, int64_t batch, const kc_tensor *const *in)
{
    unsigned fpenv = kc_fpenv_enter();
    kc_status st = kc_stage_compute(s, batch, in);
    kc_fpenv_leave(fpenv);
    return st;
}

kc_status kc_session_run_stage(kc_session *s, int64_t batch, const kc_tensor *const *in,
                               kc_tensor **out)
{
    for (int i = 0; i < s->n_stage_outputs; i++)
        out[i] = NULL;
    kc_status st = kc_stage_compute_flushed(s, batch, in);
    if (st == KC_OK)
        st = kc_stage_outputs_out(s, out);
    kc_clear_masks(s);
    if (st != KC_OK)
        for (int i = 0; i < s->n_stage_outputs; i++) {
            kc_tensor_free(out[i]);
            out[i] = NULL;
        }
    return st;
}

kc_status kc_session_run_stage_views(kc_session *s, int64_t batch, const kc_tensor *const *in,
                                     kc_tensor *views)
{
    kc_status st = kc_stage_compute_flushed(s, batch, in);
    for (int i = 0; st == KC_OK && i < s->n_stage_outputs; i++)
        st = kc_stage_output_view(s, i, &views[i]);
    kc_clear_masks(s);
    return st;
}
