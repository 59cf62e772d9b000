/* Per-layer timing (see profile.h). Adding a time is two loads and a
 * store; the report is built only when asked for, so a profiled run
 * allocates nothing more than an unprofiled one. */
#include "runtime/profile.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/mem.h"
#include "base/threads.h"

/* Runs on a new plan not counted. The first builds the kernels and packs
 * the weights. The second still pays once for some oneDNN primitives:
 * InceptionV3's first 448 -> 384 3x3 convolution took 8.5-9.3 ms in it
 * against 0.6-0.8 ms later, ResNet50's conv5_block1_2 5.2 against
 * 0.8-1.0 ms; counted, that one run put those layers 40-70% too high in
 * a 20-run mean. */
#define KC_PROFILE_WARMUP_RUNS 2

/* A node's seconds: its time, and the thread time its teams spent idle
 * at their joins (kc_parallel_idle_watch). */
typedef struct kc_profile_times {
    double seconds, idle;
} kc_profile_times;

struct kc_profile {
    kc_profile_times *node_s; /* summed over the counted runs, per node */
    kc_profile_times *run_s;  /* this run's, per node */
    double idle_mark; /* the calling thread's idle time at the node's start (kc_profile_clock) */
    int n_nodes;
    int64_t runs;
    int warm_left;  /* warm-up runs still to come on this plan */
    int warm_only;  /* node_s holds the latest warm-up run alone (no other yet) */
    int lanes;      /* the plan's batch lanes (times: lane 0's), 1 without */
    int64_t lane_images;
    char *text;
    size_t len, cap;
};

kc_profile *kc_profile_new(int n_nodes)
{
    kc_profile *p = kc_calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->node_s = kc_calloc((size_t)n_nodes + 1, sizeof *p->node_s);
    p->run_s = kc_calloc((size_t)n_nodes + 1, sizeof *p->run_s);
    if (!p->node_s || !p->run_s) {
        kc_profile_free(p);
        return NULL;
    }
    p->warm_left = KC_PROFILE_WARMUP_RUNS;
    p->n_nodes = n_nodes;
    return p;
}

void kc_profile_free(kc_profile *p)
{
    if (!p)
        return;
    free(p->node_s);
    free(p->run_s);
    free(p->text);
    free(p);
}

void kc_profile_run_done(kc_profile *p)
{
    /* A warm-up's times stand in until a later run replaces them, so
     * that a single run (`kerasc run --stats`) still has a profile. */
    int warming = p->warm_left > 0, replace = warming || p->warm_only;
    for (int i = 0; i < p->n_nodes; i++) {
        kc_profile_times *sum = &p->node_s[i], *run = &p->run_s[i];
        sum->seconds = replace ? run->seconds : sum->seconds + run->seconds;
        sum->idle = replace ? run->idle : sum->idle + run->idle;
        *run = (kc_profile_times){0, 0};
    }
    p->warm_only = warming;
    p->runs += !warming;
    p->warm_left -= warming;
}

double kc_profile_clock(kc_profile *p)
{
    if (!p)
        return 0;
    p->idle_mark = kc_parallel_idle_watch();
    return kc_now();
}

void kc_profile_since(kc_profile *p, int node, double start)
{
    if (!p)
        return;
    if (node < 0 || node >= p->n_nodes)
        return;
    p->run_s[node].seconds += kc_now() - start;
    p->run_s[node].idle += kc_parallel_idle_watch() - p->idle_mark;
}

void kc_profile_new_plan(kc_profile *p, int lanes, int64_t lane_images)
{
    p->lanes = lanes;
    p->lane_images = lane_images;
    memset(p->node_s, 0, (size_t)p->n_nodes * sizeof *p->node_s);
    memset(p->run_s, 0, (size_t)p->n_nodes * sizeof *p->run_s);
    p->runs = 0;
    p->warm_left = KC_PROFILE_WARMUP_RUNS;
    p->warm_only = 0;
}

/* Append to the report; a failed growth leaves the text cut short. */
static void kc_profile_printf(kc_profile *p, const char *fmt, ...)
{
    for (int tries = 0; tries < 2; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(p->text ? p->text + p->len : NULL, p->text ? p->cap - p->len : 0, fmt,
                          ap);
        va_end(ap);
        if (n < 0)
            return;
        if (p->text && p->len + (size_t)n < p->cap) {
            p->len += (size_t)n;
            return;
        }
        size_t cap = (p->cap + (size_t)n + 1) * 2;
        char *grown = realloc(p->text, cap);
        if (!grown)
            return;
        p->text = grown;
        p->cap = cap;
    }
}

typedef struct kc_class_time {
    const char *name;
    double ms;
    int layers;
} kc_class_time;

static int kc_class_time_cmp(const void *a, const void *b)
{
    double x = ((const kc_class_time *)a)->ms, y = ((const kc_class_time *)b)->ms;
    return (x < y) - (x > y);
}

const char *kc_profile_report(kc_profile *p, const kc_graph *g)
{
    p->len = 0;
    if (p->text)
        p->text[0] = 0;
    double runs = p->runs > 0 ? (double)p->runs : 1.0, total = 0, idle = 0;
    for (int i = 0; i < p->n_nodes; i++) {
        total += p->node_s[i].seconds * 1e3 / runs;
        idle += p->node_s[i].idle * 1e3 / runs;
    }
    if (p->warm_only)
        kc_profile_printf(p,
                          "profile: ms of warm-up run %d of %d on this plan, on the host CPU "
                          "(kernels built and weights packed in the first; later runs "
                          "replace it)\n",
                          KC_PROFILE_WARMUP_RUNS - p->warm_left, KC_PROFILE_WARMUP_RUNS);
    else
        kc_profile_printf(p,
                          "profile: mean ms per run over %lld run(s) on the host CPU (the "
                          "first %d runs on a plan are warm-ups, not counted)\n",
                          (long long)p->runs, KC_PROFILE_WARMUP_RUNS);
    if (p->lanes > 1)
        kc_profile_printf(p,
                          "  in %d batch lanes: lane 0's times, its %lld image(s) on one thread "
                          "beside the other lanes (the unprofiled run's schedule)\n",
                          p->lanes, (long long)p->lane_images);
    kc_profile_printf(p, "  %-36s %-26s %10s %6s %9s\n", "layer", "class", "ms", "%", "idle ms");
    kc_class_time *classes = kc_calloc((size_t)p->n_nodes + 1, sizeof *classes);
    int n_classes = 0;
    for (int i = 0; i < p->n_nodes && i < g->n_nodes; i++) {
        if (p->node_s[i].seconds <= 0)
            continue; /* fused into its producer, or never ran */
        const kc_layer *l = g->nodes[i].layer;
        double ms = p->node_s[i].seconds * 1e3 / runs;
        kc_profile_printf(p, "  %-36s %-26s %10.4f %6.2f %9.4f\n", l->name, l->class_name, ms,
                          total > 0 ? 100 * ms / total : 0, p->node_s[i].idle * 1e3 / runs);
        int c = 0;
        while (classes && c < n_classes && strcmp(classes[c].name, l->class_name))
            c++;
        if (classes && c == n_classes)
            classes[n_classes++].name = l->class_name;
        if (classes) {
            classes[c].ms += ms;
            classes[c].layers++;
        }
    }
    if (classes) {
        qsort(classes, (size_t)n_classes, sizeof *classes, kc_class_time_cmp);
        kc_profile_printf(p, "by class:\n");
        for (int c = 0; c < n_classes; c++)
            kc_profile_printf(p, "  %-26s %4d layer(s) %10.4f ms %6.2f%%\n", classes[c].name,
                              classes[c].layers, classes[c].ms,
                              total > 0 ? 100 * classes[c].ms / total : 0);
        free(classes);
    }
    kc_profile_printf(p, "total: %.4f ms per run in layers\n", total);
    kc_profile_printf(p,
                      "idle: %.4f ms of thread time per run, threads waiting at the layers' "
                      "joins for the last of their team (kerasc's own teams; idle ms above)\n",
                      idle);
    return p->text ? p->text : "";
}
