/* The split planner (see planner.h). */
#include "net/planner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/mem.h"
#include "kernels/kernel.h"
#include "model/model_internal.h"
#include "runtime/sched.h"
#include "runtime/session_internal.h"

#define KC_PLAN_LAYER_OVERHEAD_S 20e-6

double kc_plan_gemm_gflops(void)
{
    enum { N = 384 };
    float *a = kc_calloc((size_t)N * N * 3, sizeof *a);
    if (!a)
        return 0;
    for (int i = 0; i < N * N * 2; i++)
        a[i] = (float)(i % 7) * 0.1f;
    double best = 0;
    for (int rep = 0; rep < 4; rep++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        kc_gemm(N, N, N, a, a + N * N, a + 2 * N * N, 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double dt = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        if (dt > 0 && 2.0 * N * N * N / dt / 1e9 > best)
            best = 2.0 * N * N * N / dt / 1e9;
    }
    free(a);
    return best;
}

typedef struct kc_costs {
    int n;
    double *flops;         /* per node */
    size_t *weights;       /* per node, bytes */
    size_t *cut_bytes;     /* per cut c (0..n): activation bytes crossing */
    int *cut_count;        /* tensors crossing */
} kc_costs;

static void kc_costs_free(kc_costs *c)
{
    free(c->flops);
    free(c->weights);
    free(c->cut_bytes);
    free(c->cut_count);
}

/* Shapes at this batch, through a throwaway session's plan. */
static kc_status kc_node_costs(const kc_model *m, int64_t batch, kc_costs *c)
{
    const kc_graph *g = m->graph;
    kc_session *s = NULL;
    KC_TRY(kc_session_new(m, NULL, &s));
    kc_status st = kc_session_prepare_batch(s, batch, 1, NULL);
    c->n = g->n_nodes;
    c->flops = kc_calloc((size_t)c->n + 1, sizeof *c->flops);
    c->weights = kc_calloc((size_t)c->n + 1, sizeof *c->weights);
    c->cut_bytes = kc_calloc((size_t)c->n + 2, sizeof *c->cut_bytes);
    c->cut_count = kc_calloc((size_t)c->n + 2, sizeof *c->cut_count);
    int *last_read = kc_calloc((size_t)g->n_values + 1, sizeof *last_read);
    if (st == KC_OK && (!c->flops || !c->weights || !c->cut_bytes || !c->cut_count || !last_read))
        st = KC_ERR_NOMEM;
    for (int i = 0; st == KC_OK && i < c->n; i++) {
        const kc_layer *l = g->nodes[i].layer;
        c->flops[i] = kc_node_flops(&g->nodes[i], l, &s->plan);
        for (int w = 0; w < l->n_weights; w++)
            c->weights[i] += (size_t)kc_shape_count(&l->weights[w].shape) * sizeof(float);
        for (int k = 0; k < g->nodes[i].n_inputs; k++)
            last_read[g->nodes[i].inputs[k]] = i + 1;
    }
    for (int k = 0; st == KC_OK && k < g->n_outputs; k++)
        last_read[g->outputs[k]] = c->n + 1;
    /* A value crosses cut c (before node c) if made before c and read at
     * or after it. */
    for (int v = 0; st == KC_OK && v < g->n_values; v++) {
        int made = g->values[v].producer + 1; /* first cut after it exists */
        size_t bytes = (size_t)kc_shape_count(&s->plan.shape[v]) * sizeof(float);
        for (int cut = made; cut < last_read[v] && cut <= c->n; cut++) {
            c->cut_bytes[cut] += bytes;
            c->cut_count[cut]++;
        }
    }
    free(last_read);
    kc_session_free(s);
    if (st != KC_OK)
        kc_costs_free(c);
    return st;
}

static double kc_stage_compute(const kc_costs *c, const double *prefix, int first, int last,
                               const kc_plan_worker *w)
{
    double flops = prefix[last + 1] - prefix[first];
    return flops / (w->flops_per_s > 0 ? w->flops_per_s : 1e10) +
           (last - first + 1) * KC_PLAN_LAYER_OVERHEAD_S;
    (void)c;
}

kc_status kc_plan_split(const kc_model *m, int64_t batch, int K, const kc_plan_worker *workers,
                        kc_split_plan *out)
{
    memset(out, 0, sizeof *out);
    if (K < 1 || K > KC_PIPELINE_MAX_STAGES)
        return kc_fail(KC_ERR_ARG, "--stages takes 1 to %d", KC_PIPELINE_MAX_STAGES);
    kc_costs c = {0};
    KC_TRY(kc_node_costs(m, batch, &c));
    int n = c.n;
    double *prefix = kc_calloc((size_t)n + 2, sizeof *prefix);
    size_t *wprefix = kc_calloc((size_t)n + 2, sizeof *wprefix);
    double *best = kc_calloc((size_t)(K + 1) * (size_t)(n + 1), sizeof *best);
    int *from = kc_calloc((size_t)(K + 1) * (size_t)(n + 1), sizeof *from);
    kc_status st = prefix && wprefix && best && from ? KC_OK : KC_ERR_NOMEM;
    for (int i = 0; st == KC_OK && i < n; i++) {
        prefix[i + 1] = prefix[i] + c.flops[i];
        wprefix[i + 1] = wprefix[i] + c.weights[i];
    }
    /* best[k][j]: the slowest of stages 0..k-1 covering nodes 0..j-1, the
     * last stage ending at node j-1 (cut j allowed). */
#define B(k, j) best[(size_t)(k) * (size_t)(n + 1) + (size_t)(j)]
#define F(k, j) from[(size_t)(k) * (size_t)(n + 1) + (size_t)(j)]
    for (int k = 0; st == KC_OK && k <= K; k++)
        for (int j = 0; j <= n; j++)
            B(k, j) = 1e300;
    if (st == KC_OK)
        B(0, 0) = 0;
    for (int k = 1; st == KC_OK && k <= K; k++) {
        const kc_plan_worker *w = &workers[k - 1];
        for (int j = 1; j <= n; j++) {
            if (j < n && c.cut_count[j] > KC_PLAN_MAX_CROSSING)
                continue; /* only cuts where few tensors cross */
            for (int i = k - 1; i < j; i++) {
                if (B(k - 1, i) >= 1e300)
                    continue;
                if (w->memory_bytes && wprefix[j] - wprefix[i] > w->memory_bytes)
                    continue;
                double xfer = (double)c.cut_bytes[i] / (w->bytes_per_s > 0 ? w->bytes_per_s : 1e9);
                double stage = kc_stage_compute(&c, prefix, i, j - 1, w) + xfer;
                double worst = stage > B(k - 1, i) ? stage : B(k - 1, i);
                if (worst < B(k, j)) {
                    B(k, j) = worst;
                    F(k, j) = i;
                }
            }
        }
    }
    if (st == KC_OK && B(K, n) >= 1e300)
        st = kc_fail(KC_ERR_UNSUPPORTED, "no way to cut this model into %d stages at points "
                     "where at most %d tensors cross within the workers' memory", K,
                     KC_PLAN_MAX_CROSSING);
    if (st == KC_OK) {
        out->n_stages = K;
        out->bottleneck_s = B(K, n);
        for (int k = K, j = n; k >= 1; k--) {
            int i = F(k, j);
            const kc_plan_worker *w = &workers[k - 1];
            out->last_node[k - 1] = j - 1;
            out->in_bytes[k - 1] = c.cut_bytes[i];
            out->transfer_s[k - 1] =
                (double)c.cut_bytes[i] / (w->bytes_per_s > 0 ? w->bytes_per_s : 1e9);
            out->compute_s[k - 1] = kc_stage_compute(&c, prefix, i, j - 1, w);
            out->weight_bytes[k - 1] = wprefix[j] - wprefix[i];
            j = i;
        }
    }
#undef B
#undef F
    free(prefix);
    free(wprefix);
    free(best);
    free(from);
    kc_costs_free(&c);
    return st;
}

void kc_split_plan_print(const kc_model *m, const kc_split_plan *p, FILE *out)
{
    const kc_graph *g = m->graph;
    fprintf(out, "%-6s %-28s %-28s %12s %12s %12s %12s\n", "stage", "first layer", "last layer",
            "weights_B", "in_bytes", "compute_ms", "transfer_ms");
    for (int k = 0; k < p->n_stages; k++) {
        int first = k ? p->last_node[k - 1] + 1 : 0;
        fprintf(out, "%-6d %-28.28s %-28.28s %12zu %12zu %12.3f %12.3f\n", k,
                g->nodes[first].layer->name, g->nodes[p->last_node[k]].layer->name,
                p->weight_bytes[k], p->in_bytes[k], p->compute_s[k] * 1e3,
                p->transfer_s[k] * 1e3);
    }
    fprintf(out, "cuts:");
    for (int k = 0; k + 1 < p->n_stages; k++)
        fprintf(out, "%s%s", k ? "," : " ", g->nodes[p->last_node[k]].layer->name);
    fprintf(out, "%s\npredicted slowest stage: %.3f ms (pipeline throughput bound %.1f "
                 "batches/s)\n", p->n_stages > 1 ? "" : " none",
            p->bottleneck_s * 1e3, p->bottleneck_s > 0 ? 1.0 / p->bottleneck_s : 0.0);
}
