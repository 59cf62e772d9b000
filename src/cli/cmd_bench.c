/* `kerasc bench MODEL [--batch B] [--iters N] [--warmup W] [--threads T]`:
 * load once, warm up, time N runs on seeded random input of the model's
 * shape; print medians, load time and peak RSS as "key: value" lines.
 * --exact: direct convolutions only (kc_session_options.exact).
 * --slices S: a harness alternates this process with a peer's
 * (tools/bench/bench.py): after the warm-up it prints `ready`, then runs
 * S slices of N timed runs, each when a line arrives on standard input,
 * printing `slice_median_ms: X` after each; the report covers all S x N
 * runs. Why: on a shared machine whose speed drifts 10-30% within
 * minutes, two runners whose slices alternate a few hundred ms apart see
 * the same drift, where two whole runs back to back did not.
 * Under the allocation-counting shim (LD_PRELOAD=build/tests/
 * libkc_alloc_shim.so) it also prints the heap allocations per run after
 * the warm-up (after the first run where --warmup is 0 or 1;
 * kc_session_run_into, outputs reused). Why after the warm-up: a session
 * settles over its first runs (branch lanes time their branches over
 * runs 2-7 and may move some to the other thread, whose per-lane oneDNN
 * buffers are then made once), and the steady state is what follows. */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "cli/commands.h"
#include "cli/placement_args.h"
#include "kerasc.h"

#define KC_BENCH_MAX_IO 64

static double kc_now_ms(void) { return kc_now() * 1e3; }

static int kc_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int kc_bench_int(const char *arg, const char *name, long lo, long hi, long *out)
{
    char *end;
    long v = strtol(arg, &end, 10);
    if (*end || v < lo || v > hi) {
        fprintf(stderr, "kerasc bench: %s takes a number from %ld to %ld\n", name, lo, hi);
        return 2;
    }
    *out = v;
    return 0;
}

/* Seeded uniform [0, 1) input (small integers for integer inputs). */
static kc_status kc_bench_input(const kc_model *m, int i, long batch, kc_tensor **out)
{
    int64_t dims[KC_MAX_RANK];
    int rank = kc_model_input_shape(m, i, dims);
    dims[0] = batch;
    for (int d = 1; d < rank; d++)
        if (dims[d] < 0)
            dims[d] = 16; /* a variable length: benchmark a fixed one */
    kc_status st = kc_tensor_new(KC_F32, rank, dims, out);
    if (st != KC_OK)
        return st;
    float *p = kc_tensor_data(*out);
    uint64_t x = 0x9e3779b97f4a7c15ull + (uint64_t)i;
    for (int64_t k = 0; k < kc_tensor_count(*out); k++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p[k] = (float)((x >> 40) & 0xffff) / 65536.0f;
    }
    return KC_OK;
}

/* The harness's go-ahead for the next slice: one line on standard
 * input; 0 at its end. read(2), not stdio: stdio would allocate its
 * buffer inside the runs the allocation count covers. */
static int kc_bench_wait_line(void)
{
    for (char c;;) {
        ssize_t n = read(0, &c, 1);
        if (n == 1 && c == '\n')
            return 1;
        if (n == 0 || (n < 0 && errno != EINTR))
            return 0;
    }
}

/* A line to the harness at once, through write(2) for the same reason. */
static void kc_bench_say(const char *line)
{
    for (size_t done = 0, len = strlen(line); done < len;) {
        ssize_t n = write(1, line + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        done += (size_t)n;
    }
}

static double kc_bench_median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof *v, kc_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef unsigned long (*kc_alloc_count_fn)(void);

/* One of the shim's counters, or NULL when it is not preloaded. */
static kc_alloc_count_fn kc_alloc_counter(const char *name)
{
    void *sym = dlsym(RTLD_DEFAULT, name);
    kc_alloc_count_fn fn = NULL;
    if (sym)
        memcpy(&fn, &sym, sizeof fn);
    return fn;
}

int kc_cmd_bench(int argc, char **argv)
{
    const char *path = NULL;
    long batch = 1, iters = 20, warmup = 3, threads = 0, slices = 0;
    kc_cli_placement placement = {0};
    int exact = 0;
    for (int i = 0; i < argc; i++) {
        int has = i + 1 < argc, rc = 0;
        int placed = kc_cli_placement_arg("bench", argc, argv, &i, &placement);
        if (placed < 0)
            return 2;
        if (placed)
            continue;
        if (!strcmp(argv[i], "--batch") && has)
            rc = kc_bench_int(argv[++i], "--batch", 1, 4096, &batch);
        else if (!strcmp(argv[i], "--iters") && has)
            rc = kc_bench_int(argv[++i], "--iters", 1, 100000, &iters);
        else if (!strcmp(argv[i], "--warmup") && has)
            rc = kc_bench_int(argv[++i], "--warmup", 0, 1000, &warmup);
        else if (!strcmp(argv[i], "--threads") && has)
            rc = kc_bench_int(argv[++i], "--threads", 1, 1024, &threads);
        else if (!strcmp(argv[i], "--slices") && has)
            rc = kc_bench_int(argv[++i], "--slices", 1, 1000, &slices);
        else if (!strcmp(argv[i], "--exact"))
            exact = 1;
        else if (argv[i][0] == '-' || path) {
            fprintf(stderr, "kerasc bench: unexpected argument '%s' (usage: kerasc bench MODEL "
                            "[--batch B] [--iters N] [--warmup W] [--threads T] [--slices S] [--exact] "
                            KC_CLI_PLACEMENT_USAGE ")\n", argv[i]);
            return 2;
        } else
            path = argv[i];
        if (rc)
            return rc;
    }
    if (!path) {
        fprintf(stderr, "kerasc bench: no model given\n");
        return 2;
    }
    double t0 = kc_now_ms();
    kc_model *m = NULL;
    kc_session *s = NULL;
    /* one session per model: its packed weights need no second copy */
    kc_session_options so = {.threads = (int)threads, .exact = exact,
                             .release_packed_weights = 1};
    kc_cli_placement_apply(&placement, &so);
    kc_load_options lo = {0};
    kc_cli_placement_load(&placement, &lo);
    if (kc_model_load(path, &lo, &m) != KC_OK || kc_session_new(m, &so, &s) != KC_OK) {
        fprintf(stderr, "kerasc: error: %s\n", kc_last_error());
        kc_model_free(m);
        return 1;
    }
    double load_ms = kc_now_ms() - t0;
    int n_in = kc_model_num_inputs(m), n_out = kc_model_num_outputs(m), rc = 0;
    kc_tensor *in[KC_BENCH_MAX_IO] = {0}, *out[KC_BENCH_MAX_IO] = {0};
    /* with slices, --iters is a slice's runs */
    long timed = iters * (slices ? slices : 1);
    double *times = calloc((size_t)timed, sizeof *times);
    if (!times || n_in > KC_BENCH_MAX_IO || n_out > KC_BENCH_MAX_IO)
        rc = 1;
    for (int i = 0; !rc && i < n_in; i++)
        if (kc_bench_input(m, i, batch, &in[i]) != KC_OK)
            rc = 1;
    double first_ms = 0;
    kc_alloc_count_fn counter = kc_alloc_counter("kc_alloc_shim_count");
    kc_alloc_count_fn large = kc_alloc_counter("kc_alloc_shim_large");
    if (!large)
        counter = NULL;
    unsigned long allocs_from = 0, large_from = 0;
    long counted = 0, slices_done = 0;
    long count_from = warmup > 1 ? warmup : 1; /* the allocations' window: the steady state */
    int input_ended = 0;
    for (long it = 0; !rc && it < warmup + timed; it++) {
        if (it == count_from && counter) {
            allocs_from = counter();
            large_from = large();
        }
        if (slices && it >= warmup && (it - warmup) % iters == 0) {
            if (it == warmup)
                kc_bench_say("ready\n");
            if (!kc_bench_wait_line()) {
                input_ended = rc = 1;
                break;
            }
        }
        double a = kc_now_ms();
        /* The first run plans and returns the outputs; later runs write
         * into them, as a steady-state user would. */
        kc_status st = it == 0 ? kc_session_run(s, (const kc_tensor *const *)in, n_in, out, n_out)
                               : kc_session_run_into(s, (const kc_tensor *const *)in, n_in, out,
                                                     n_out);
        if (st != KC_OK)
            rc = 1;
        double dt = kc_now_ms() - a;
        if (it == 0)
            first_ms = dt;
        if (it >= warmup)
            times[it - warmup] = dt;
        counted += it >= count_from;
        if (slices && it >= warmup && (it - warmup + 1) % iters == 0) {
            char line[64];
            snprintf(line, sizeof line, "slice_median_ms: %.3f\n",
                     kc_bench_median(times + (it - warmup + 1 - iters), iters));
            kc_bench_say(line);
            slices_done++;
        }
    }
    unsigned long allocs = counter && counted ? counter() - allocs_from : 0;
    unsigned long large_allocs = counter && counted ? large() - large_from : 0;
    for (int o = 0; o < n_out; o++)
        kc_tensor_free(out[o]);
    if (input_ended) {
        fprintf(stderr, "kerasc bench: standard input ended after %ld of %ld slices\n", slices_done,
                slices);
    } else if (rc) {
        fprintf(stderr, "kerasc: error: %s\n", kc_last_error()[0] ? kc_last_error() : "out of memory");
    } else {
        double median = kc_bench_median(times, timed);
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("model: %s\nbatch: %ld\niters: %ld\n", path, batch, timed);
        if (slices)
            printf("slices: %ld\n", slices);
        if (threads)
            printf("threads: %ld\n", threads);
        else
            printf("threads: all\n");
        const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
        const char *blas = getenv("OPENBLAS_NUM_THREADS");
        printf("omp: OMP_WAIT_POLICY=%s GOMP_SPINCOUNT=%s OPENBLAS_NUM_THREADS=%s\n",
               policy ? policy : "(unset)", spin ? spin : "(unset)", blas ? blas : "(unset)");
        printf("load_ms: %.1f\nfirst_run_ms: %.2f\nmedian_ms: %.3f\nmedian_ms_per_image: %.3f\n"
               "min_ms: %.3f\nmax_ms: %.3f\narena_bytes: %zu\npeak_rss_kb: %ld\n",
               load_ms, first_ms, median, median / (double)batch, times[0], times[timed - 1],
               kc_session_arena_bytes(s), ru.ru_maxrss);
        printf("lanes: %d\nbranch_regions: %d\nbranch_moved: %d\n", kc_session_lanes(s),
               kc_session_branch_regions(s), kc_session_branch_moved(s));
        if (kc_session_lanes(s) > 1)
            printf("lanes_helped_per_run: %.1f\n",
                   (double)kc_session_lanes_helped(s) / (double)(timed + warmup));
        kc_param_counts pc = kc_model_params(m);
        printf("weight_f32_bytes: %lld\n", (long long)pc.total * 4);
        if (counter && counted)
            printf("allocs_per_inference: %.2f\nlarge_allocs_per_inference: %.2f\n",
                   (double)allocs / (double)counted, (double)large_allocs / (double)counted);
        else
            printf("allocs_per_inference: unmeasured (needs LD_PRELOAD of the counting shim "
                   "and --iters + --warmup >= 2)\n");
        if (kc_session_device_peak_bytes(s))
            printf("device_peak_bytes: %zu\n", kc_session_device_peak_bytes(s));
        if (placement.stats) /* the last timed run */
            fputs(kc_session_stats(s), stdout);
    }
    for (int i = 0; i < n_in; i++)
        kc_tensor_free(in[i]);
    free(times);
    kc_session_free(s);
    kc_model_free(m);
    return rc;
}
