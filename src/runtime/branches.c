/* Branch lanes (see branches.h).
 *
 * Why: at batch 1 every layer is cut across the threads, and a small
 * layer cut in two runs well under twice as fast: InceptionV3 at batch 1
 * took 44 ms on one thread and 29 on two of the 2-core AMD EPYC of
 * bench/results (1.5x), its layers on 17x17 and 8x8 images the worst.
 * Its blocks are four towers that read the same input and meet at a
 * Concatenate: run side by side, one tower a thread, each layer whole on
 * its thread, they need no cutting at all.
 *
 * What a region is: in node order, a boundary after which exactly one
 * value is still to be read is a meeting point; between two of them the
 * nodes but the last (the join: a Concatenate, an Add) split into
 * branches, the groups of nodes linked by values made inside. A region
 * has two branches or more, and its costliest branches (multiply-adds,
 * longest first onto the less loaded of two lanes) leave no lane more
 * than KC_BRANCH_SHARE of its work: ResNet50's first block of a stage
 * (a 1x1 shortcut beside three convolutions: 78% on one lane) stays cut
 * layer by layer.
 *
 * How: the plan is laid out so that a region's values (and its join's
 * output) never share memory (plan.c), its spare range split between
 * the lanes. Each branch has its lane: costliest first onto the less
 * loaded, so that a thread runs the same layers run after run and its
 * per-thread buffers are in place from the first run on. A join that
 * concatenates channels does not run: each lane copies a branch's
 * outputs into its slices when the branch is done (InceptionV3's
 * Concatenates took 0.08-0.13 ms each on two threads, 0.06-0.08 on one:
 * a copy too small to share). In the first run each
 * region is a parallel section whose lanes take turns, each building its
 * branches' kernels for one thread on the thread that will run them (as
 * batch lanes do, lanes.c; the weights they copy are released one lane
 * at a time); from the second run the lanes run side by side. The nodes
 * outside regions still run cut across the threads.
 *
 * Dealt again once, from measured times (kc_branches_rebalance): the
 * branches' multiply-adds are a poor guide to their time, as a 3x3
 * layer on Winograd does a quarter of its multiplies and a 1x1 all of
 * them. On the 2-vCPU Intel Xeon of 12-07 (InceptionV3, batch 1) the
 * lane dealt the 1x1, 5x5 and pooling towers of the first blocks ended
 * 0.5-1.5 ms after the other (lane 0 1.7-2.3 ms, lane 1 2.7-3.8), and
 * over the nine regions the lanes ended 6.9-9.0 ms apart a run, of
 * 47-53 (each lane timed apart, 60 runs). So each region times its
 * branches over its first KC_BRANCH_MEASURE runs side by side (each
 * branch's least time) and then deals them again, the split whose
 * longer lane is shortest (kc_branches_deal), where that shortens it by
 * KC_BRANCH_GAIN or more. A branch's time depends on what runs beside it
 * (the two cores share the last-level cache and memory), so the new deal
 * is then timed as the first was, over as many runs, and kept only if
 * its longer lane ends sooner (the least over the runs); else the first
 * deal comes back. Either way the deal then stays. A branch that moves
 * runs on the other thread, whose buffers may grow once then
 * (kc_dnnl_workspace); the same bits, each layer whole on one thread
 * either way. KC_BRANCH_REBALANCE=0: the first deal stays. */
#include "runtime/branches.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/mem.h"
#include "base/threads.h"
#include "kernels/dnnl_common.h"
#include "ops/merge.h"
#include "runtime/lanes.h"
#include "runtime/sched.h"

/* The most of a region's work one lane may take for the region to run
 * side by side: a layer cut across two threads runs about 1.5x as fast
 * as on one (above), so a lane at 60% of the work is ~10% ahead. */
#define KC_BRANCH_SHARE 0.6
/* Less work than this (multiply-adds x 2) in a region: the meeting of the
 * threads costs more than the region saves. KC_BRANCH_MIN_FLOPS sets
 * another (tests: the small models of tests/apps). */
#define KC_BRANCH_MIN_FLOPS 2e6
/* Runs side by side a region times its branches over before it deals
 * them to the lanes again (the least of them: a run the host slowed
 * says nothing of the branch), and the least the longer lane must gain
 * for the new deal to be taken (the times' noise is a few percent). */
#define KC_BRANCH_MEASURE 3
#define KC_BRANCH_GAIN 0.03
/* Up to this many branches the deal tries every split (InceptionV3's
 * blocks have 3 or 4; 2^15 splits at most), beyond it longest first. */
#define KC_BRANCH_EXACT 16

static double kc_branches_min_flops(void)
{
    const char *env = getenv("KC_BRANCH_MIN_FLOPS");
    return env && *env ? atof(env) : KC_BRANCH_MIN_FLOPS;
}

static int kc_branches_wanted(const kc_session *s)
{
    if (s->branches_off)
        return 0;
    return s->lanes <= 1 && !s->sched && s->stage_first < 0 && !s->profile && !s->trace_nodes &&
           !s->head_nodes && kc_threads_wanted(s->threads) >= KC_BRANCH_LANES &&
           kc_lanes_model_ok(s->graph);
}

/* cross[p]: how many values are made at or before node p and read after
 * it (p < n_nodes). */
static void kc_branches_crossing(const kc_graph *g, const int *last, int *cross)
{
    memset(cross, 0, (size_t)(g->n_nodes + 1) * sizeof *cross);
    for (int v = 0; v < g->n_values; v++) {
        int from = g->values[v].producer < 0 ? 0 : g->values[v].producer;
        if (last[v] <= from)
            continue;
        cross[from]++;
        cross[last[v]]--; /* crosses boundaries from .. last - 1 */
    }
    for (int p = 1; p <= g->n_nodes; p++)
        cross[p] += cross[p - 1];
}

static int kc_uf_find(int *parent, int x)
{
    while (parent[x] != x)
        x = parent[x] = parent[parent[x]];
    return x;
}

static double kc_branches_node_cost(const kc_session *s, int i)
{
    const kc_node *node = &s->graph->nodes[i];
    if (s->fused.skip[i])
        return 0;
    const kc_layer *layer = s->fused.shadow[i] ? s->fused.shadow[i] : node->layer;
    return kc_node_flops(node, layer, &s->plan);
}

typedef struct kc_branch_scan {
    int *parent;   /* per node: union-find over the region's nodes */
    int *root_id;  /* per node: its branch's index in the region, or -1 */
    double *cost;  /* per branch */
    int *order;    /* branches, costliest first */
    int *lane;     /* per place in order: the lane it runs on */
} kc_branch_scan;

/* Nodes [first, last] into branches (sc->root_id, sc->cost); how many. */
static int kc_branches_split(const kc_session *s, int first, int last, kc_branch_scan *sc)
{
    const kc_graph *g = s->graph;
    for (int i = first; i <= last; i++)
        sc->parent[i] = i;
    for (int i = first; i <= last; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++) {
            int p = g->values[g->nodes[i].inputs[j]].producer;
            if (p >= first && p <= last)
                sc->parent[kc_uf_find(sc->parent, i)] = kc_uf_find(sc->parent, p);
        }
    int n = 0;
    for (int i = first; i <= last; i++)
        sc->root_id[i] = -1;
    for (int i = first; i <= last; i++) {
        int r = kc_uf_find(sc->parent, i);
        if (sc->root_id[r] < 0) {
            sc->root_id[r] = n;
            sc->cost[n++] = 0;
        }
        sc->root_id[i] = sc->root_id[r];
        sc->cost[sc->root_id[i]] += kc_branches_node_cost(s, i);
    }
    return n;
}

/* n branches of cost[] longest first (ties in branch order) into
 * order[], each onto the less loaded lane (ties: lane 0), the lane of
 * the k-th into lane_at[k]; the longer lane's cost. */
static double kc_branches_longest_first(const double *cost, int n, int *order, int *lane_at)
{
    double lane[KC_BRANCH_LANES] = {0};
    for (int b = 0; b < n; b++)
        order[b] = b;
    for (int a = 1; a < n; a++) /* insertion sort: a handful of branches */
        for (int b = a; b > 0 && cost[order[b]] > cost[order[b - 1]]; b--) {
            int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    for (int k = 0; k < n; k++) {
        int to = lane[1] < lane[0];
        lane[to] += cost[order[k]];
        lane_at[k] = to;
    }
    return lane[0] > lane[1] ? lane[0] : lane[1];
}

/* Branches costliest first into sc->order; whether two lanes taking
 * them in that order each get at most KC_BRANCH_SHARE of the work. */
static int kc_branches_balanced(const kc_branch_scan *sc, int n, double min_flops)
{
    double total = 0;
    for (int b = 0; b < n; b++)
        total += sc->cost[b];
    double most = kc_branches_longest_first(sc->cost, n, sc->order, sc->lane);
    return total >= min_flops && most <= KC_BRANCH_SHARE * total;
}

/* The best deal of n <= KC_BRANCH_EXACT branches: every split tried
 * (branch 0 on lane 0: the mirror deals are the same). */
static double kc_branches_deal_exact(const double *seconds, int n, int *lane_of)
{
    double best = -1.0;
    unsigned best_mask = 0;
    for (unsigned mask = 0; mask < 1u << (n - 1); mask++) {
        double lane[KC_BRANCH_LANES] = {0};
        for (int b = 0; b < n; b++)
            lane[b > 0 && (mask >> (b - 1) & 1u)] += seconds[b];
        double longer = lane[0] > lane[1] ? lane[0] : lane[1];
        if (best < 0.0 || longer < best) {
            best = longer;
            best_mask = mask;
        }
    }
    for (int b = 0; b < n; b++)
        lane_of[b] = b > 0 && (best_mask >> (b - 1) & 1u);
    return best;
}

double kc_branches_deal(const double *seconds, int n, int *lane_of)
{
    if (n >= 1 && n <= KC_BRANCH_EXACT)
        return kc_branches_deal_exact(seconds, n, lane_of);
    int order[KC_BRANCH_MAX_DEAL], lane_at[KC_BRANCH_MAX_DEAL];
    n = n < KC_BRANCH_MAX_DEAL ? n : KC_BRANCH_MAX_DEAL;
    double longer = kc_branches_longest_first(seconds, n, order, lane_at);
    for (int k = 0; k < n; k++)
        lane_of[order[k]] = lane_at[k];
    return longer;
}

/* Whether node j, the join of a region, concatenates the region's
 * outputs along their last axis (channels), each input made by one of its
 * branches; r->join_of filled then. */
static int kc_branches_lane_join(const kc_session *s, const kc_branch_scan *sc, int j,
                                 kc_branch_region *r)
{
    const kc_node *node = &s->graph->nodes[j];
    const kc_layer *l = node->layer;
    if (s->fused.skip[j] || strcmp(l->class_name, "Concatenate") || !l->attrs ||
        node->n_outputs != 1 || node->n_inputs < 1)
        return 0;
    const kc_merge_attrs *a = l->attrs;
    int rank = s->plan.shape[node->outputs[0]].rank;
    if (rank < 2 || (a->axis != -1 && a->axis != rank - 1))
        return 0;
    for (int k = 0; k < node->n_inputs; k++) {
        int p = s->graph->values[node->inputs[k]].producer;
        if (p < r->first || p > r->last)
            return 0;
        int id = sc->root_id[p];
        r->join_of[k] = 0;
        while (sc->order[r->join_of[k]] != id)
            r->join_of[k]++;
    }
    return 1;
}

/* Region r: nodes [first, last] in its branches' order. */
static kc_status kc_branches_add(const kc_session *s, kc_branches *bs, const kc_branch_scan *sc,
                                 int n, int first, int last)
{
    kc_branch_region *r = &bs->region[bs->n_regions];
    const kc_node *join = &s->graph->nodes[last + 1];
    r->first = first;
    r->last = last;
    r->n_branches = n;
    r->branch_first = kc_calloc((size_t)n + 1, sizeof *r->branch_first);
    r->node_list = kc_calloc((size_t)(last - first + 1), sizeof *r->node_list);
    r->join_of = kc_calloc((size_t)join->n_inputs + 1, sizeof *r->join_of);
    r->lane_of = kc_calloc((size_t)n, sizeof *r->lane_of);
    r->seconds = kc_calloc((size_t)n, sizeof *r->seconds);
    r->run_seconds = kc_calloc((size_t)n, sizeof *r->run_seconds);
    r->lane_first = kc_calloc((size_t)n, sizeof *r->lane_first);
    if (!r->branch_first || !r->node_list || !r->join_of || !r->lane_of || !r->seconds ||
        !r->run_seconds || !r->lane_first) {
        free(r->branch_first);
        free(r->node_list);
        free(r->join_of);
        free(r->lane_of);
        free(r->seconds);
        free(r->run_seconds);
        free(r->lane_first);
        return KC_ERR_NOMEM;
    }
    r->phase = s->branch_rebalance_off || n > KC_BRANCH_MAX_DEAL ? 2 : 0;
    for (int b = 0; b < n; b++)
        r->lane_of[b] = sc->lane[b];
    r->lane_join = !s->branch_join_off && kc_branches_lane_join(s, sc, last + 1, r);
    int at = 0;
    for (int b = 0; b < n; b++) {
        r->branch_first[b] = at;
        for (int i = first; i <= last; i++)
            if (sc->root_id[i] == sc->order[b])
                r->node_list[at++] = i;
    }
    r->branch_first[n] = at;
    for (int i = first; i <= last + 1; i++) {
        bs->region_of[i] = bs->n_regions;
        bs->region_last[i] = last + 1;
    }
    bs->n_regions++;
    return KC_OK;
}

/* Every region of the graph into bs. */
static kc_status kc_branches_find(const kc_session *s, kc_branches *bs, const int *cross,
                                  kc_branch_scan *sc)
{
    const kc_graph *g = s->graph;
    int start = 0; /* first node after the last meeting point */
    double min_flops = kc_branches_min_flops();
    for (int p = 0; p < g->n_nodes; p++) {
        if (cross[p] != 1)
            continue;
        /* nodes start .. p - 1 branch off; node p joins them */
        if (p - start >= 2) {
            int n = kc_branches_split(s, start, p - 1, sc);
            if (n >= 2 && kc_branches_balanced(sc, n, min_flops))
                KC_TRY(kc_branches_add(s, bs, sc, n, start, p - 1));
        }
        start = p + 1;
    }
    return KC_OK;
}

void kc_branches_free(kc_branches *b)
{
    if (!b)
        return;
    for (int r = 0; r < b->n_regions; r++) {
        free(b->region[r].branch_first);
        free(b->region[r].node_list);
        free(b->region[r].join_of);
        free(b->region[r].lane_of);
        free(b->region[r].seconds);
        free(b->region[r].run_seconds);
        free(b->region[r].lane_first);
    }
    free(b->region);
    free(b->region_of);
    free(b->region_last);
    free(b);
}

static kc_status kc_branches_scan(const kc_session *s, kc_branches *bs)
{
    const kc_graph *g = s->graph;
    size_t nodes = (size_t)g->n_nodes + 1;
    int *last = kc_calloc((size_t)g->n_values + 1, sizeof *last);
    int *cross = kc_calloc(nodes, sizeof *cross);
    kc_branch_scan sc = {kc_calloc(nodes, sizeof(int)), kc_calloc(nodes, sizeof(int)),
                         kc_calloc(nodes, sizeof(double)), kc_calloc(nodes, sizeof(int)),
                         kc_calloc(nodes, sizeof(int))};
    kc_status st = KC_ERR_NOMEM;
    if (last && cross && sc.parent && sc.root_id && sc.cost && sc.order && sc.lane) {
        kc_plan_last_reads(g, last);
        kc_branches_crossing(g, last, cross);
        st = kc_branches_find(s, bs, cross, &sc);
    }
    free(last);
    free(cross);
    free(sc.parent);
    free(sc.root_id);
    free(sc.cost);
    free(sc.order);
    free(sc.lane);
    return st;
}

kc_status kc_branches_new(kc_session *s, kc_branches **out)
{
    *out = NULL;
    if (!kc_branches_wanted(s))
        return KC_OK;
    if (kc_dnnl_ready() && kc_dnnl_lanes(KC_BRANCH_LANES) != KC_OK)
        return KC_OK; /* no stream for a second lane: run node by node */
    int n = s->graph->n_nodes;
    kc_branches *bs = kc_calloc(1, sizeof *bs);
    if (!bs)
        return KC_ERR_NOMEM;
    bs->region = kc_calloc((size_t)n / 2 + 1, sizeof *bs->region);
    bs->region_of = kc_calloc((size_t)n + 1, sizeof *bs->region_of);
    bs->region_last = kc_calloc((size_t)n + 1, sizeof *bs->region_last);
    if (!bs->region || !bs->region_of || !bs->region_last) {
        kc_branches_free(bs);
        return KC_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++)
        bs->region_of[i] = bs->region_last[i] = -1;
    kc_status st = kc_branches_scan(s, bs);
    if (st == KC_OK && bs->n_regions)
        st = kc_plan_relayout(s->model, s->fused.alias, bs->region_last, &s->plan);
    if (st != KC_OK || !bs->n_regions) {
        kc_branches_free(bs);
        return st;
    }
    *out = bs;
    return KC_OK;
}

/* ------------------------------------------------------------ run */

typedef struct kc_branch_job {
    kc_session *s;
    const kc_branch_region *r;
    int first;                          /* the plan's first run: lanes take turns */
    atomic_int turn;                    /* first run: the lane whose turn it is */
    kc_status status[KC_BRANCH_LANES];
    char message[KC_BRANCH_LANES][512]; /* a failed lane's, from its thread */
} kc_branch_job;

/* Node i on lane `lane`, with the lane's part of the region's spare
 * range (whole cache lines). */
static kc_status kc_branches_node(kc_session *s, int i, int lane)
{
    size_t part = s->plan.spare_floats[i] / KC_BRANCH_LANES / 16 * 16;
    return kc_session_node_spare(s, i, s->plan.spare_offset[i] + (size_t)lane * part, part);
}

/* Branch b's outputs into the join's channel slices. */
static void kc_branches_join_copy(const kc_session *s, const kc_branch_region *r, int b)
{
    const kc_node *join = &s->graph->nodes[r->last + 1];
    const kc_shape *os = &s->plan.shape[join->outputs[0]];
    int64_t width = os->dims[os->rank - 1], outer = kc_shape_count(os) / width, at = 0;
    float *out = s->arena + s->plan.offset[join->outputs[0]];
    for (int k = 0; k < join->n_inputs; k++) {
        const kc_shape *is = &s->plan.shape[join->inputs[k]];
        int64_t c = is->dims[is->rank - 1];
        if (r->join_of[k] == b) {
            const float *in = s->arena + s->plan.offset[join->inputs[k]];
            for (int64_t o = 0; o < outer; o++)
                memcpy(out + o * width + at, in + o * c, (size_t)c * sizeof *out);
        }
        at += c;
    }
}

/* Lane `lane`'s branches of r. In the first run, node by node as the
 * session's loop runs them (kernels built, weights released), on one
 * thread. */
static kc_status kc_branches_lane_nodes(kc_branch_job *job, int lane)
{
    const kc_branch_region *r = job->r;
    kc_status st = KC_OK;
    int timed = !job->first && r->phase < 2;
    for (int b = 0; st == KC_OK && b < r->n_branches; b++) {
        if (r->lane_of[b] != lane)
            continue;
        double t0 = timed ? kc_now() : 0.0;
        for (int k = r->branch_first[b]; st == KC_OK && k < r->branch_first[b + 1]; k++) {
            int i = r->node_list[k];
            if (job->first)
                st = kc_session_run_node(job->s, i);
            else if (!job->s->fused.skip[i])
                st = kc_branches_node(job->s, i, lane);
        }
        if (st == KC_OK && r->lane_join)
            kc_branches_join_copy(job->s, r, b);
        if (timed) /* this lane's branch: no other thread writes it */
            r->run_seconds[b] = kc_now() - t0;
    }
    return st;
}

/* The longer lane's time under deal lane_of for branch times t[]. */
static double kc_branches_span(const kc_branch_region *r, const int *lane_of, const double *t)
{
    double lane[KC_BRANCH_LANES] = {0};
    for (int b = 0; b < r->n_branches; b++)
        lane[lane_of[b]] += t[b];
    return lane[0] > lane[1] ? lane[0] : lane[1];
}

void kc_branches_rebalance(kc_branch_region *r)
{
    int n = r->n_branches, first = r->measured == 0;
    double span = kc_branches_span(r, r->lane_of, r->run_seconds);
    r->span = first || span < r->span ? span : r->span;
    for (int b = 0; r->phase == 0 && b < n; b++)
        r->seconds[b] = first || r->run_seconds[b] < r->seconds[b] ? r->run_seconds[b]
                                                                    : r->seconds[b];
    if (++r->measured < KC_BRANCH_MEASURE)
        return;
    r->measured = 0;
    if (r->phase == 1) { /* the tried deal against the first */
        if (r->span >= r->span_first)
            memcpy(r->lane_of, r->lane_first, (size_t)n * sizeof *r->lane_of);
        r->moved = r->span < r->span_first;
        r->phase = 2;
        return;
    }
    int lane_of[KC_BRANCH_MAX_DEAL];
    double longer = kc_branches_span(r, r->lane_of, r->seconds);
    if (kc_branches_deal(r->seconds, n, lane_of) > (1.0 - KC_BRANCH_GAIN) * longer) {
        r->phase = 2;
        return;
    }
    memcpy(r->lane_first, r->lane_of, (size_t)n * sizeof *r->lane_of);
    memcpy(r->lane_of, lane_of, (size_t)n * sizeof *lane_of);
    r->span_first = r->span;
    r->phase = 1;
}

/* A short wait for the other lane's turn (the first run only). */
static void kc_branches_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    sched_yield();
#endif
}

static void kc_branches_lane(void *arg, int lane)
{
    kc_branch_job *job = arg;
    kc_status st;
    kc_batch_lane_set(lane);
    if (job->first) {
        while (atomic_load(&job->turn) != lane)
            kc_branches_pause();
        kc_threads_enter(1);
        st = kc_branches_lane_nodes(job, lane);
        kc_threads_enter(job->s->threads);
        atomic_store(&job->turn, lane + 1); /* the next lane's, whatever happened */
    } else {
        st = kc_branches_lane_nodes(job, lane);
    }
    kc_batch_lane_set(0);
    job->status[lane] = st;
    if (st != KC_OK)
        snprintf(job->message[lane], sizeof job->message[lane], "%s", kc_last_error());
}

static kc_status kc_branches_region_run(kc_session *s, kc_branch_region *r, int first)
{
    kc_branch_job job = {.s = s, .r = r, .first = first};
    atomic_init(&job.turn, 0);
    kc_parallel(KC_BRANCH_LANES, kc_branches_lane, &job);
    for (int k = 0; k < KC_BRANCH_LANES; k++)
        if (job.status[k] != KC_OK)
            return kc_fail(job.status[k], "%s (branch lane %d of %d)", job.message[k], k,
                           KC_BRANCH_LANES);
    if (!first && r->phase < 2)
        kc_branches_rebalance(r);
    return KC_OK;
}

int kc_branches_moved(const kc_branches *b)
{
    int moved = 0;
    for (int r = 0; b && r < b->n_regions; r++)
        moved += b->region[r].moved;
    return moved;
}

kc_status kc_branches_run(kc_session *s)
{
    kc_branches *b = s->branches;
    for (int i = 0; i < s->graph->n_nodes;) {
        int r = b->region_of[i];
        if (r < 0 || i > b->region[r].last) { /* outside, or a join that runs */
            KC_TRY(kc_session_run_node(s, i));
            i++;
            continue;
        }
        KC_TRY(kc_branches_region_run(s, &b->region[r], !b->warm));
        i = b->region[r].last + 1 + b->region[r].lane_join;
    }
    b->warm = 1;
    return KC_OK;
}
