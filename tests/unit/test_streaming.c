/* The residency manager on the CPU backend, host memory standing in for
 * device memory (issue "Devices and placement", §4): streamed runs are
 * bit-identical to the fully resident run, stay inside the budget, overlap
 * uploads with compute (read back from the trace), and impossible budgets
 * or placements fail cleanly. The model is the reduced ResNet50 of
 * tests/apps (convolutions, BatchNormalization folded, Dense head). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "base/spill.h"
#include "graph/graph.h"
#include "kerasc.h"
#include "model/model_internal.h"

#define MODEL KC_TEST_DATA "/../apps/resnet50/model.keras"
#define INPUT KC_TEST_DATA "/../apps/resnet50/input_0.npy"

typedef struct fixture {
    kc_model *model;
    kc_tensor *input;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f || kc_model_load(MODEL, NULL, &f->model) != KC_OK ||
        kc_tensor_load_npy(INPUT, &f->input) != KC_OK) {
        fprintf(stderr, "setup: %s\n", kc_last_error());
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    kc_tensor_free(f->input);
    kc_model_free(f->model);
    free(f);
    return 0;
}

/* Run once with the options; returns the output (caller frees). */
static kc_tensor *run_with(fixture *f, const kc_session_options *o, size_t *peak, char *stats,
                           size_t stats_size)
{
    kc_session *s = NULL;
    if (kc_session_new(f->model, o, &s) != KC_OK)
        fail_msg("session: %s", kc_last_error());
    kc_tensor *out = NULL;
    for (int rep = 0; rep < 2; rep++) { /* the second run reuses every buffer */
        kc_tensor_free(out);
        out = NULL;
        if (kc_session_run(s, (const kc_tensor *const *)&f->input, 1, &out, 1) != KC_OK)
            fail_msg("run: %s", kc_last_error());
    }
    if (peak)
        *peak = kc_session_device_peak_bytes(s);
    if (stats)
        snprintf(stats, stats_size, "%s", kc_session_stats(s));
    kc_session_free(s);
    return out;
}

static size_t out_bytes(const kc_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < kc_tensor_rank(t); d++)
        n *= (size_t)kc_tensor_dim(t, d);
    return n * sizeof(float);
}

static void assert_close(const kc_tensor *a, const kc_tensor *b, double tol)
{
    const float *x = kc_tensor_data((kc_tensor *)a), *y = kc_tensor_data((kc_tensor *)b);
    for (size_t i = 0; i < out_bytes(a) / sizeof(float); i++)
        if (fabs((double)x[i] - (double)y[i]) > tol)
            fail_msg("output %zu: %g vs %g", i, (double)x[i], (double)y[i]);
}

/* Budget = everything resident, and budgets that force streaming with
 * every ring depth: all bit-identical, all within budget. */
static void test_streamed_equals_resident(void **state)
{
    fixture *f = *state;
    kc_session_options o = {.variables = "/CPU:0", .device_memory = (size_t)64 << 20};
    char stats[65536];
    size_t peak = 0;
    kc_tensor *resident = run_with(f, &o, &peak, stats, sizeof stats);
    assert_non_null(strstr(stats, "ring 0 x"));
    assert_true(peak <= o.device_memory);
    kc_tensor *plain = run_with(f, &(kc_session_options){0}, NULL, NULL, 0);
    assert_close(resident, plain, 1e-4);
    static const size_t budgets[] = {300 << 10, 360 << 10, 480 << 10};
    for (int b = 0; b < 3; b++)
        for (int depth = 1; depth <= 3; depth++) {
            o.device_memory = budgets[b];
            o.prefetch_depth = depth;
            kc_tensor *streamed = run_with(f, &o, &peak, stats, sizeof stats);
            if (!strstr(stats, "streamed"))
                fail_msg("budget %zu: nothing streamed:\n%s", budgets[b], stats);
            if (peak > budgets[b])
                fail_msg("peak %zu above budget %zu", peak, budgets[b]);
            assert_int_equal(out_bytes(streamed), out_bytes(resident));
            if (memcmp(kc_tensor_data(streamed), kc_tensor_data(resident), out_bytes(resident)))
                fail_msg("budget %zu depth %d: not bit-identical to the resident run",
                         budgets[b], depth);
            kc_tensor_free(streamed);
        }
    kc_tensor_free(resident);
    kc_tensor_free(plain);
}

/* Prefetching, read back from the trace: with a ring of 3, the upload of
 * the next streamed layer starts before the current streamed layer has
 * finished computing; with one slot it cannot (the next upload waits for
 * the slot's reader). The link is paced so uploads take visible time. */
typedef struct span {
    char name[128];
    double start, end;
} span;

static int read_trace(const char *path, span *up, int *n_up, span *comp, int *n_comp, int cap)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return 0;
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = '\0';
    cJSON *root = cJSON_Parse(text);
    if (!root)
        return 0;
    *n_up = *n_comp = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents"))
    {
        const cJSON *cat = cJSON_GetObjectItem(e, "cat");
        if (!cat)
            continue;
        int is_copy = !strcmp(cat->valuestring, "copy");
        span *list = is_copy ? up : comp;
        int *count = is_copy ? n_up : n_comp;
        if (*count == cap)
            continue;
        span *sp = &list[(*count)++];
        const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
        snprintf(sp->name, sizeof sp->name, "%s", is_copy ? name + strlen("upload ") : name);
        sp->start = cJSON_GetObjectItem(e, "ts")->valuedouble;
        sp->end = sp->start + cJSON_GetObjectItem(e, "dur")->valuedouble;
    }
    cJSON_Delete(root);
    return 1;
}

/* One streamed run with a trace and `depth` ring slots: how many of its
 * uploads began before the layer computing at the time had finished
 * (*ahead) out of *pairs. KC_CPU_DEVICE_SETTLE holds each compute until
 * the copy stream has taken what it may take, so the count shows what the
 * scheduler lets overlap, not whether a loaded host gave the copy thread a
 * core in time (a CI run under ASan beside another test saw 9 of 47). */
static void prefetch_run(fixture *f, const char *trace, int depth, int *n_up, int *ahead,
                         int *pairs)
{
    setenv("KC_CPU_DEVICE_GBPS", "0.05", 1);
    setenv("KC_CPU_DEVICE_SETTLE", "1", 1);
    kc_session_options o = {.variables = "/CPU:0", .device_memory = 400 << 10,
                            .prefetch_depth = depth, .trace_path = trace};
    kc_tensor *out = run_with(f, &o, NULL, NULL, 0);
    unsetenv("KC_CPU_DEVICE_GBPS");
    unsetenv("KC_CPU_DEVICE_SETTLE");
    kc_tensor_free(out);
    static span up[512], comp[512];
    int n_comp = 0;
    *n_up = *ahead = *pairs = 0;
    assert_true(read_trace(trace, up, n_up, comp, &n_comp, 512));
    for (int i = 0; i + 1 < *n_up; i++) {
        const span *now = NULL;
        for (int k = 0; k < n_comp && !now; k++)
            if (!strcmp(comp[k].name, up[i].name))
                now = &comp[k];
        assert_non_null(now);
        assert_true(up[i].end <= now->start + 1.0); /* weights before use (1 us slack) */
        (*pairs)++;
        *ahead += up[i + 1].start < now->end;
    }
    printf("%d ring slots, %d streamed layers: the next upload began before the current layer "
           "finished computing %d of %d times\n", depth, *n_up, *ahead, *pairs);
}

/* With three ring slots the copy stream works ahead of the compute: every
 * next upload starts before the current layer finishes. With one slot
 * (no prefetch) none does, which shows the count can tell them apart. */
static void test_prefetch_overlaps_compute(void **state)
{
    fixture *f = *state;
    char trace[1024];
    snprintf(trace, sizeof trace, "%s/streaming_trace.json", KC_TEST_TMP);
    int n_up = 0, ahead = 0, pairs = 0;
    prefetch_run(f, trace, 3, &n_up, &ahead, &pairs);
    assert_true(n_up >= 3);
    assert_int_equal(ahead, pairs);
    prefetch_run(f, trace, 1, &n_up, &ahead, &pairs);
    assert_true(n_up >= 3);
    assert_int_equal(ahead, 0);
}

static void test_impossible_budget(void **state)
{
    fixture *f = *state;
    kc_session *s = NULL;
    kc_session_options o = {.variables = "/CPU:0", .device_memory = 64 << 10};
    assert_int_equal(kc_session_new(f->model, &o, &s), KC_OK);
    kc_tensor *out = NULL;
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&f->input, 1, &out, 1),
                     KC_ERR_NOMEM);
    assert_null(out);
    assert_non_null(strstr(kc_last_error(), "below the minimum"));
    assert_non_null(strstr(kc_last_error(), "largest layer"));
    kc_session_free(s);
    /* variables on the device: all must fit, and the message says how to stream */
    o.variables = NULL;
    o.device_memory = 300 << 10;
    assert_int_equal(kc_session_new(f->model, &o, &s), KC_OK);
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&f->input, 1, &out, 1),
                     KC_ERR_NOMEM);
    assert_non_null(strstr(kc_last_error(), "variables on /CPU:0"));
    kc_session_free(s);
}

/* Half the model on the budgeted device, half on the host: boundary copies,
 * same numbers. A GPU that is absent falls back to the CPU (soft) or fails
 * (strict). */
static void test_mixed_and_soft_placement(void **state)
{
    fixture *f = *state;
    kc_tensor *plain = run_with(f, &(kc_session_options){0}, NULL, NULL, 0);
    /* the CPU backend posing as one GPU: a budgeted device beside the host */
    setenv("KC_FAKE_GPUS", "1", 1);
    const char *rules[] = {"conv1_pad..conv3_block1_out=/GPU:0"};
    char stats[65536];
    kc_session_options o = {.place = rules, .n_place = 1, .variables = "/CPU:0",
                            .device_memory = 300 << 10};
    kc_tensor *mixed = run_with(f, &o, NULL, stats, sizeof stats);
    unsetenv("KC_FAKE_GPUS");
    assert_close(mixed, plain, 1e-4);
    kc_tensor_free(mixed);
    if (!strstr(stats, "conv2_block1_1_conv              /GPU:0") ||
        !strstr(stats, "conv4_block1_1_conv              /CPU:0 ") ||
        !strstr(stats, "device /GPU:0"))
        fail_msg("placement not followed:\n%s", stats);

    const char *gpu_rules[] = {"conv2_block1_0_conv..=/GPU:7"};
    o = (kc_session_options){.place = gpu_rules, .n_place = 1};
    kc_tensor *soft = run_with(f, &o, NULL, NULL, 0);
    assert_close(soft, plain, 1e-4);
    kc_tensor_free(soft);
    o.strict_placement = 1;
    kc_session *s = NULL;
    assert_int_not_equal(kc_session_new(f->model, &o, &s), KC_OK);
    assert_non_null(strstr(kc_last_error(), "/GPU:7"));
    assert_null(s);

    const char *bad[] = {"no_such_layer..=/CPU:0"};
    o = (kc_session_options){.place = bad, .n_place = 1};
    assert_int_equal(kc_session_new(f->model, &o, &s), KC_ERR_ARG);
    assert_non_null(strstr(kc_last_error(), "no_such_layer"));
    const char *remote[] = {"predictions=/job:worker/task:1/GPU:0"};
    o = (kc_session_options){.place = remote, .n_place = 1};
    assert_int_equal(kc_session_new(f->model, &o, &s), KC_ERR_ARG);
    assert_non_null(strstr(kc_last_error(), "cluster"));
    kc_tensor_free(plain);
}

/* Throughput mode: a batch of 5 in micro-batches of 2 (the last padded)
 * equals the whole-batch run, and fits a budget the whole batch does not. */
static void test_microbatches(void **state)
{
    fixture *f = *state;
    kc_tensor *batch5 = NULL;
    int64_t dims[4];
    int rank = kc_tensor_rank(f->input);
    for (int d = 0; d < rank; d++)
        dims[d] = kc_tensor_dim(f->input, d);
    size_t sample = out_bytes(f->input) / (size_t)dims[0];
    dims[0] = 5;
    assert_int_equal(kc_tensor_new(KC_F32, rank, dims, &batch5), KC_OK);
    for (int b = 0; b < 5; b++) {
        float *dst = (float *)((char *)kc_tensor_data(batch5) + (size_t)b * sample);
        memcpy(dst, kc_tensor_data(f->input), sample);
        dst[b] += 0.5f * (float)b; /* make the samples differ */
    }
    kc_session *s = NULL;
    kc_tensor *whole = NULL, *split = NULL;
    assert_int_equal(kc_session_new(f->model, NULL, &s), KC_OK);
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&batch5, 1, &whole, 1), KC_OK);
    kc_session_free(s);
    kc_session_options o = {.variables = "/CPU:0", .device_memory = 300 << 10, .microbatch = 2};
    assert_int_equal(kc_session_new(f->model, &o, &s), KC_OK);
    if (kc_session_run(s, (const kc_tensor *const *)&batch5, 1, &split, 1) != KC_OK)
        fail_msg("micro-batched run: %s", kc_last_error());
    assert_int_equal(kc_tensor_dim(split, 0), 5);
    assert_close(split, whole, 1e-4);
    kc_tensor_free(split);
    split = NULL;
    kc_session_free(s);
    o.microbatch = 0; /* the whole batch's activations exceed the budget */
    assert_int_equal(kc_session_new(f->model, &o, &s), KC_OK);
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&batch5, 1, &split, 1),
                     KC_ERR_NOMEM);
    kc_session_free(s);
    kc_tensor_free(whole);
    kc_tensor_free(batch5);
}

/* Resident kB of the mappings that hold this model's weights (smaps). */
static long weights_rss_kb(const kc_model *m)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[512];
    long total = 0;
    int in_map = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, ' ') == line + strcspn(line, " ")) {
            in_map = 0;
            for (int i = 0; i < m->n_spill_maps; i++)
                if ((unsigned long)(uintptr_t)m->spill_maps[i] == a)
                    in_map = 1;
            continue;
        }
        long kb;
        if (in_map && sscanf(line, "Rss: %ld kB", &kb) == 1)
            total += kb;
    }
    fclose(f);
    return total;
}

/* The disk tier: weights stay in a (deleted) disk file, mapped; outputs as
 * in memory; streaming from it bit-identical to resident; pages dropped
 * after the run; a host budget below the largest layer is refused. */
static void test_disk_tier(void **state)
{
    fixture *f = *state;
    kc_tensor *plain = run_with(f, &(kc_session_options){0}, NULL, NULL, 0);
    static const char *const files[] = {MODEL, KC_TEST_DATA "/../apps/resnet50/model.h5"};
    for (int k = 0; k < 2; k++) {
        kc_model *m = NULL;
        kc_load_options lo = {.disk_weights = 1, .spill_dir = KC_TEST_TMP};
        if (kc_model_load(files[k], &lo, &m) != KC_OK)
            fail_msg("%s: %s", files[k], kc_last_error());
        assert_true(m->n_spill_maps >= 1);
        size_t weight_bytes = 0;
        for (int i = 0; i < m->graph->n_nodes; i++) {
            const kc_layer *l = m->graph->nodes[i].layer;
            for (int w = 0; w < l->n_weights; w++) {
                if (!kc_spill_owns(l->weights[w].data))
                    fail_msg("%s: weight %s of '%s' is not disk-backed", files[k],
                             l->weights[w].name, l->name);
                weight_bytes += (size_t)kc_shape_count(&l->weights[w].shape) * sizeof(float);
            }
        }
        fixture disk = {m, f->input};
        kc_session_options o = {.host_memory = 128 << 10};
        kc_tensor *resident = run_with(&disk, &o, NULL, NULL, 0);
        assert_close(resident, plain, 1e-4);
        long rss = weights_rss_kb(m);
        printf("%s: %zu weight bytes, %ld kB of them resident after the run\n", files[k],
               weight_bytes, rss);
        assert_true((size_t)rss * 1024 < weight_bytes / 2);
        o = (kc_session_options){.host_memory = 128 << 10, .variables = "/CPU:0",
                                 .device_memory = 400 << 10};
        kc_tensor *streamed = run_with(&disk, &o, NULL, NULL, 0);
        assert_int_equal(memcmp(kc_tensor_data(streamed), kc_tensor_data(resident),
                                out_bytes(resident)), 0);
        kc_tensor_free(streamed);
        kc_tensor_free(resident);
        kc_session *s = NULL;
        o = (kc_session_options){.host_memory = 16 << 10};
        assert_int_equal(kc_session_new(m, &o, &s), KC_OK);
        kc_tensor *out = NULL;
        assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&f->input, 1, &out, 1),
                         KC_ERR_NOMEM);
        assert_non_null(strstr(kc_last_error(), "conv5_block1_2_conv"));
        kc_session_free(s);
        kc_model_free(m);
    }
    kc_tensor_free(plain);
}

/* How far VmLck may be from the stats' pinned MiB (two decimals: 10 kB).
 * ASan intercepts mlock and ignores it (locking its shadow would pin
 * terabytes), so VmLck stays put there: only the rest is checked. */
#if defined(__SANITIZE_ADDRESS__)
#define KC_LOCK_SLACK_KB (1L << 40)
#else
#define KC_LOCK_SLACK_KB 12L
#endif

/* Page-locked memory of this process (VmLck, kB), or -1. */
static long locked_kb(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    if (!fp)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, fp))
        if (sscanf(line, "VmLck: %ld kB", &kb) == 1)
            break;
    fclose(fp);
    return kb;
}

/* "streamed weights DEV: P of Q MiB pinned" from a session's stats. */
static void pinned_mib(const char *stats, double *pinned, double *pinnable)
{
    const char *line = strstr(stats, "streamed weights");
    if (!line || !strstr(line, "pinned in host memory"))
        fail_msg("no pinning line in the stats:\n%s", stats);
    if (sscanf(strstr(line, ": ") + 1, " %lf of %lf", pinned, pinnable) != 2)
        fail_msg("unreadable pinning line: %.120s", line);
}

/* x repeated twice along the batch axis. */
static kc_tensor *batch_of_two(const kc_tensor *x)
{
    int64_t dims[8];
    int rank = kc_tensor_rank(x);
    for (int d = 0; d < rank; d++)
        dims[d] = kc_tensor_dim(x, d);
    dims[0] *= 2;
    kc_tensor *t = NULL;
    assert_int_equal(kc_tensor_new(KC_F32, rank, dims, &t), KC_OK);
    size_t bytes = out_bytes(x);
    memcpy(kc_tensor_data(t), kc_tensor_cdata(x), bytes);
    memcpy((char *)kc_tensor_data(t) + bytes, kc_tensor_cdata(x), bytes);
    return t;
}

/* Streamed weights are page-locked in place for the plan (sched_pin.c):
 * the stats say how much, the process's locked memory shows exactly that,
 * a new plan (another batch size) unlocks the last plan's pages before
 * locking its own (the CPU backend, like CUDA, refuses a range that
 * overlaps one already locked, so a leftover would show as a shortfall),
 * freeing the session unlocks everything, and the outputs are the staged
 * run's bits (KC_PIN=0). */
static void test_streamed_weights_pinned(void **state)
{
    fixture *f = *state;
    long before = locked_kb();
    if (before < 0)
        skip();
    /* streams at batch 1 and 2 */
    kc_session_options o = {.variables = "/CPU:0", .device_memory = 600 << 10};
    setenv("KC_PIN", "0", 1);
    char stats[65536];
    kc_tensor *staged = run_with(f, &o, NULL, stats, sizeof stats);
    unsetenv("KC_PIN");
    assert_non_null(strstr(stats, "staged, not pinned (KC_PIN=0)"));
    kc_session *s = NULL;
    assert_int_equal(kc_session_new(f->model, &o, &s), KC_OK);
    kc_tensor *out = NULL;
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&f->input, 1, &out, 1), KC_OK);
    double pinned = 0, pinnable = 0;
    pinned_mib(kc_session_stats(s), &pinned, &pinnable);
    if (pinned == 0) { /* a lock limit refused every range: nothing to check */
        printf("mlock refused here (RLIMIT_MEMLOCK): pinning not exercised\n");
        kc_tensor_free(out);
        kc_tensor_free(staged);
        kc_session_free(s);
        skip();
    }
    assert_true(pinned <= pinnable); /* whole pages only */
    printf("pinned %.2f of %.2f MiB; VmLck %ld -> %ld kB\n", pinned, pinnable, before,
           locked_kb());
    /* the stats' MiB have two decimals: 10 kB */
    assert_true(labs(locked_kb() - before - (long)(pinned * 1024)) <= KC_LOCK_SLACK_KB);
    assert_int_equal(memcmp(kc_tensor_data(out), kc_tensor_data(staged), out_bytes(staged)), 0);
    /* batch 2: more activations, more layers streamed; the last plan's
     * pages are unlocked, not left beside the new ones */
    kc_tensor *two = batch_of_two(f->input), *out2 = NULL;
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&two, 1, &out2, 1), KC_OK);
    pinned_mib(kc_session_stats(s), &pinned, &pinnable);
    assert_true(pinned > 0 && pinned <= pinnable);
    assert_true(labs(locked_kb() - before - (long)(pinned * 1024)) <= KC_LOCK_SLACK_KB);
    assert_int_equal(memcmp(kc_tensor_data(out2), kc_tensor_data(staged), out_bytes(staged)), 0);
    kc_session_free(s);
    assert_int_equal(locked_kb(), before);
    kc_tensor_free(two);
    kc_tensor_free(out2);
    kc_tensor_free(out);
    kc_tensor_free(staged);
}

/* One run of session s on x; the output (caller frees), and the stats. */
static kc_tensor *run_once(kc_session *s, const kc_tensor *x, char *stats, size_t size)
{
    kc_tensor *out = NULL;
    if (kc_session_run(s, (const kc_tensor *const *)&x, 1, &out, 1) != KC_OK)
        fail_msg("run: %s", kc_last_error());
    snprintf(stats, size, "%s", kc_session_stats(s));
    return out;
}

static kc_tensor *plain_output(fixture *f, const kc_tensor *x)
{
    kc_session *s = NULL;
    assert_int_equal(kc_session_new(f->model, NULL, &s), KC_OK);
    char stats[64];
    kc_tensor *out = run_once(s, x, stats, sizeof stats);
    kc_session_free(s);
    return out;
}

static double max_diff(const kc_tensor *a, const kc_tensor *b)
{
    const float *x = kc_tensor_cdata(a), *y = kc_tensor_cdata(b);
    double m = 0;
    for (size_t i = 0; i < out_bytes(a) / sizeof(float); i++)
        m = fmax(m, fabs((double)x[i] - (double)y[i]));
    return m;
}

/* Three runs of x on a fresh /GPU:0 session (no profile: device layers
 * untimed): all equal to `want`; the stats of the second and third. */
static void three_runs(fixture *f, const kc_tensor *x, const kc_tensor *want, char *second,
                       char *third, size_t size)
{
    kc_session *s = NULL;
    kc_session_options o = {.device = "/GPU:0", .strict_placement = 1};
    assert_int_equal(kc_session_new(f->model, &o, &s), KC_OK);
    for (int run = 0; run < 3; run++) {
        kc_tensor *out = run_once(s, x, run == 2 ? third : second, size);
        assert_true(max_diff(out, want) <= 1e-4);
        kc_tensor_free(out);
    }
    kc_session_free(s);
}

/* A run wholly on one GPU with resident weights is captured as a graph on
 * its plan's second run and replayed after (sched_graph.c), here on the
 * CPU backend posing as a GPU, which captures and replays its calls as
 * CUDA does. The replay computes new inputs (not the captured run's
 * values), keeps per-layer times when profiled (the events are nodes of
 * the graph; unprofiled, device layers go untimed: the events cost as
 * much as the launches saved), a new batch size captures afresh, and
 * KC_CUDA_GRAPH=0 or a capture that fails runs layer by layer with the
 * same outputs. KC_GRAPH_TEST_GPU=1 runs it on the real /GPU:0 (the CUDA
 * plugin; scripts/gpu-check.sh), less the failed capture, which only the
 * stand-in can be made to do. */
static void test_gpu_graph_replay(void **state)
{
    fixture *f = *state;
    kc_tensor *half = NULL;
    int64_t dims[8];
    for (int d = 0; d < kc_tensor_rank(f->input); d++)
        dims[d] = kc_tensor_dim(f->input, d);
    assert_int_equal(kc_tensor_new(KC_F32, kc_tensor_rank(f->input), dims, &half), KC_OK);
    for (size_t i = 0; i < out_bytes(half) / sizeof(float); i++)
        ((float *)kc_tensor_data(half))[i] = 0.5f * ((const float *)kc_tensor_cdata(f->input))[i];
    kc_tensor *two = batch_of_two(f->input);
    kc_tensor *want_x = plain_output(f, f->input), *want_half = plain_output(f, half),
              *want_two = plain_output(f, two);
    assert_true(max_diff(want_x, want_half) > 1e-3); /* the inputs tell apart */

    int real = getenv("KC_GRAPH_TEST_GPU") && !strcmp(getenv("KC_GRAPH_TEST_GPU"), "1");
    if (!real)
        setenv("KC_FAKE_GPUS", "1", 1);
    kc_session *s = NULL;
    kc_session_options o = {.device = "/GPU:0", .strict_placement = 1, .profile = 1};
    assert_int_equal(kc_session_new(f->model, &o, &s), KC_OK);
    static char stats[65536];
    kc_tensor *out = run_once(s, f->input, stats, sizeof stats);
    assert_null(strstr(stats, "graph:")); /* the plan's first run: layer by layer */
    assert_true(max_diff(out, want_x) <= 1e-4);
    kc_tensor *first = out;
    for (int run = 0; run < 2; run++) { /* captured, then replayed */
        out = run_once(s, f->input, stats, sizeof stats);
        if (!strstr(stats, "graph: /GPU:0 replays its"))
            fail_msg("run %d not a graph:\n%s", run + 2, stats);
        assert_int_equal(memcmp(kc_tensor_data(out), kc_tensor_data(first), out_bytes(first)), 0);
        const char *row = strstr(stats, "conv2_block1_1_conv              /GPU:0");
        double ms = -1;
        assert_non_null(row);
        assert_int_equal(sscanf(row, "%*s %*s %*s %lf", &ms), 1); /* timed, in the graph */
        assert_true(ms >= 0);
        assert_null(strstr(stats, "untimed"));
        kc_tensor_free(out);
    }
    out = run_once(s, half, stats, sizeof stats);
    assert_non_null(strstr(stats, "replays its"));
    assert_true(max_diff(out, want_half) <= 1e-4);
    kc_tensor_free(out);
    out = run_once(s, two, stats, sizeof stats); /* a new plan */
    assert_null(strstr(stats, "graph:"));
    assert_true(max_diff(out, want_two) <= 1e-4);
    kc_tensor_free(out);
    out = run_once(s, two, stats, sizeof stats);
    assert_non_null(strstr(stats, "replays its"));
    assert_true(max_diff(out, want_two) <= 1e-4);
    kc_tensor_free(out);
    kc_session_free(s);

    static char second[65536];
    setenv("KC_CUDA_GRAPH", "0", 1);
    three_runs(f, f->input, want_x, second, stats, sizeof stats);
    unsetenv("KC_CUDA_GRAPH");
    assert_null(strstr(second, "graph:"));
    assert_null(strstr(stats, "graph:"));
    assert_non_null(strstr(stats, "untimed: "));
    three_runs(f, f->input, want_x, second, stats, sizeof stats); /* unprofiled graph */
    assert_non_null(strstr(stats, "replays its"));
    assert_non_null(strstr(stats, "untimed: "));
    assert_null(strstr(stats, "bound:"));
    if (!real) { /* only the stand-in can be made to fail a capture */
        setenv("KC_FAKE_GPU_CAPTURE", "fail", 1);
        three_runs(f, f->input, want_x, second, stats, sizeof stats);
        unsetenv("KC_FAKE_GPU_CAPTURE");
        if (!strstr(second, "graph: /GPU:0 runs layer by layer: ") ||
            !strstr(second, "cannot be captured"))
            fail_msg("no reason for the failed capture:\n%s", second);
        assert_non_null(strstr(stats, "runs layer by layer")); /* not tried again */
    }
    unsetenv("KC_FAKE_GPUS");
    kc_tensor_free(first);
    kc_tensor_free(half);
    kc_tensor_free(two);
    kc_tensor_free(want_x);
    kc_tensor_free(want_half);
    kc_tensor_free(want_two);
}

/* The host pages of the values a GPU exchanges with the host (here the
 * model's input and output) are locked once the plan's first run has
 * shown which cross (sched_pin.c): the stats of the next run say how
 * much, VmLck shows it, the outputs are the unpinned run's bits
 * (KC_PIN=0), and freeing the session unlocks them. The CPU backend
 * posing as a GPU locks with mlock. */
static void test_boundary_pinned(void **state)
{
    fixture *f = *state;
    long before = locked_kb();
    if (before < 0)
        skip();
    setenv("KC_FAKE_GPUS", "1", 1);
    kc_session_options o = {.device = "/GPU:0", .strict_placement = 1};
    static char stats[65536];
    kc_session *s = NULL;
    setenv("KC_PIN", "0", 1);
    assert_int_equal(kc_session_new(f->model, &o, &s), KC_OK);
    kc_tensor *want = run_once(s, f->input, stats, sizeof stats), *out = NULL;
    kc_tensor_free(want);
    want = run_once(s, f->input, stats, sizeof stats);
    kc_session_free(s);
    unsetenv("KC_PIN");
    assert_null(strstr(stats, "pinned host pages"));
    assert_int_equal(kc_session_new(f->model, &o, &s), KC_OK);
    out = run_once(s, f->input, stats, sizeof stats);
    assert_null(strstr(stats, "pinned host pages")); /* known after the first run */
    kc_tensor_free(out);
    out = run_once(s, f->input, stats, sizeof stats);
    unsetenv("KC_FAKE_GPUS");
    const char *line = strstr(stats, "pinned host pages");
    double pinned = 0;
    if (!line) { /* a lock limit refused it: nothing to check */
        printf("mlock refused here (RLIMIT_MEMLOCK): boundary pinning not exercised\n");
        kc_tensor_free(out);
        kc_tensor_free(want);
        kc_session_free(s);
        skip();
    }
    assert_int_equal(sscanf(strstr(stats, "boundary copies"), "boundary copies %*f MiB, from %lf",
                            &pinned), 1);
    size_t input_bytes = out_bytes(f->input);
    assert_true(pinned > 0 && pinned * 1048576.0 <= (double)(input_bytes + out_bytes(out)));
    printf("boundary pinned %.3f MiB (input %zu bytes); VmLck %ld -> %ld kB\n", pinned,
           input_bytes, before, locked_kb());
    assert_true(labs(locked_kb() - before - (long)(pinned * 1024)) <= KC_LOCK_SLACK_KB);
    assert_int_equal(memcmp(kc_tensor_data(out), kc_tensor_data(want), out_bytes(want)), 0);
    kc_session_free(s);
    assert_int_equal(locked_kb(), before);
    kc_tensor_free(out);
    kc_tensor_free(want);
}

/* The workspace "MiB" figure of a stats device line. */
static double stats_workspace_mib(const char *stats)
{
    const char *w = strstr(stats, "+ workspace ");
    double mib = -1;
    if (!w || sscanf(w, "+ workspace %lf", &mib) != 1)
        fail_msg("no workspace in the stats:\n%s", stats);
    return mib;
}

/* A device whose algorithms want more workspace than a tight budget can
 * spare beside the weights (cuDNN's non-fused Winograd: 47 MB for a 9.4 MB
 * layer) is asked again within a quarter of the budget, so the weights
 * keep that memory: on the fake GPU every convolution wants 1 MiB. Fully
 * resident, the workspace is what the layers ask; under a 600 KiB budget
 * (1 MiB alone would not fit) it is held to 150 KiB and the run still
 * equals the host's. */
static void test_workspace_capped_for_weights(void **state)
{
    fixture *f = *state;
    kc_tensor *plain = run_with(f, &(kc_session_options){0}, NULL, NULL, 0);
    setenv("KC_FAKE_GPUS", "1", 1);
    setenv("KC_FAKE_GPU_WORKSPACE", "1048576", 1);
    static char stats[65536];
    kc_session_options o = {.device = "/GPU:0", .strict_placement = 1, .variables = "/CPU:0",
                            .device_memory = (size_t)64 << 20};
    kc_tensor *roomy = run_with(f, &o, NULL, stats, sizeof stats);
    double roomy_ws = stats_workspace_mib(stats);
    o.device_memory = 600 << 10;
    size_t peak = 0;
    kc_tensor *tight = run_with(f, &o, &peak, stats, sizeof stats);
    double tight_ws = stats_workspace_mib(stats);
    /* A budget at the minimum an impossible one reports plans: the cap
     * never grows the workspace past what that minimum counted. */
    o.device_memory = 64 << 10;
    kc_session *s = NULL;
    kc_tensor *none = NULL;
    assert_int_equal(kc_session_new(f->model, &o, &s), KC_OK);
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&f->input, 1, &none, 1),
                     KC_ERR_NOMEM);
    kc_session_free(s);
    const char *at = strstr(kc_last_error(), "below the minimum ");
    double minimum = 0;
    char unit[16] = "";
    assert_non_null(at);
    assert_int_equal(sscanf(at, "below the minimum %lf %15s", &minimum, unit), 2);
    int in_mib = !strcmp(unit, "MiB");
    minimum *= in_mib ? 1048576.0 : 1.0; /* else "bytes" */
    assert_true(minimum > 0 && minimum < 64 * 1048576.0);
    o.device_memory = (size_t)minimum + (in_mib ? 6 << 10 : 0); /* MiB: to 0.01 */
    kc_tensor *at_min = run_with(f, &o, NULL, NULL, 0);
    assert_close(at_min, plain, 1e-4);
    kc_tensor_free(at_min);
    unsetenv("KC_FAKE_GPU_WORKSPACE");
    unsetenv("KC_FAKE_GPUS");
    printf("workspace: %.2f MiB resident, %.2f MiB under a 600 KiB budget (peak %zu bytes)\n",
           roomy_ws, tight_ws, peak);
    assert_true(fabs(roomy_ws - 1.0) < 0.01);
    assert_true(tight_ws <= 150.0 / 1024 + 0.01);
    assert_true(peak <= 600 << 10);
    assert_close(roomy, plain, 1e-4);
    assert_close(tight, plain, 1e-4);
    kc_tensor_free(roomy);
    kc_tensor_free(tight);
    kc_tensor_free(plain);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_streamed_equals_resident),
        cmocka_unit_test(test_prefetch_overlaps_compute),
        cmocka_unit_test(test_impossible_budget),
        cmocka_unit_test(test_mixed_and_soft_placement),
        cmocka_unit_test(test_microbatches),
        cmocka_unit_test(test_disk_tier),
        cmocka_unit_test(test_streamed_weights_pinned),
        cmocka_unit_test(test_gpu_graph_replay),
        cmocka_unit_test(test_boundary_pinned),
        cmocka_unit_test(test_workspace_capped_for_weights),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
