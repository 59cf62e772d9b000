/* Thread policy.
 *
 * oneDNN (Debian's build) threads with OpenMP; OpenBLAS with its own
 * pthreads. Both pools busy-wait between parallel regions, so on a small
 * machine one pool's spinning workers steal the cores the other pool's
 * work needs (measured on 2 cores: ResNet50 at 2 threads slower than at 1).
 * The session therefore uses one pool: oneDNN for convolutions and GEMMs
 * (kc_gemm calls dnnl_sgemm), OpenMP sized to the session's thread
 * option, OpenBLAS at one thread. With KC_DNNL=0 the plain paths use
 * OpenBLAS at the session's thread count instead.
 *
 * libgomp reads OMP_WAIT_POLICY once, when it is loaded; the CLI sets it
 * (see cli/main.c). Library users who share the cores with other work
 * should export OMP_WAIT_POLICY=passive themselves.
 *
 * kc_parallel itself runs on kerasc's own workers (base/pool.c), whose
 * fork and join cost a fifth of libgomp's, while no OpenMP team has
 * started lately, so that the two pools never spin at once; otherwise on
 * libgomp's team. */
#include "base/threads.h"

#include "base/pool.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/fpenv.h"

/* libgomp's API, declared here so that the library needs no -fopenmp
 * (the fuzz build uses clang, whose OpenMP runtime differs). */
void omp_set_num_threads(int n);
int omp_get_num_procs(void);
int omp_get_max_threads(void);
int omp_get_thread_num(void);
int omp_get_num_threads(void);
int omp_in_parallel(void);
void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags);
void GOMP_barrier(void);

int kc_dnnl_enabled(void)
{
    return !kc_env_off("KC_DNNL");
}

int kc_threads_cpus(void)
{
    int cpus = omp_get_num_procs(); /* libgomp counts the affinity mask */
    return cpus < 1 ? 1 : cpus;
}

int kc_threads_wanted(int threads) { return threads > 0 ? threads : kc_threads_cpus(); }

void kc_threads_enter(int threads)
{
    /* per calling thread, like OpenMP's own thread count */
    static __thread int applied = -1;
    int want = kc_threads_wanted(threads);
    int key = want * 2 + kc_dnnl_enabled();
    if (applied == key)
        return;
    applied = key;
    omp_set_num_threads(want);
    openblas_set_num_threads(kc_dnnl_enabled() ? 1 : want);
}

int kc_threads_max(void) { return omp_get_max_threads(); }

int kc_threads_serial_begin(void)
{
    int previous = omp_get_max_threads();
    if (previous != 1)
        omp_set_num_threads(1);
    return previous;
}

void kc_threads_serial_end(int previous)
{
    if (previous != 1)
        omp_set_num_threads(previous);
}

int kc_thread_index(void)
{
    int in_pool = kc_pool_index();
    return in_pool >= 0 ? in_pool : omp_get_thread_num();
}

static __thread int kc_lane_now;

int kc_batch_lane(void) { return kc_lane_now; }

void kc_batch_lane_set(int lane) { kc_lane_now = lane; }

int kc_parallel_parts(int64_t bytes, int64_t items)
{
    int64_t parts = bytes >= ((int64_t)256 << 10) ? kc_threads_max() : 1;
    if (parts > items)
        parts = items;
    return parts < 1 ? 1 : (int)parts;
}

typedef struct kc_parallel_job {
    void (*fn)(void *arg, int index);
    void *arg;
    int n;
    unsigned fpenv; /* the caller's floating-point state (base/fpenv.h) */
} kc_parallel_job;

/* OpenMP may give a smaller team than asked (a thread limit, nesting):
 * every index still runs, some threads then taking several. Each thread
 * computes in the caller's floating-point state and gets its own back. */
static void kc_parallel_body(void *data)
{
    const kc_parallel_job *job = data;
    int team = omp_get_num_threads();
    unsigned fpenv = kc_fpenv_adopt(job->fpenv);
    for (int i = omp_get_thread_num(); i < job->n; i += team)
        job->fn(job->arg, i);
    kc_fpenv_adopt(fpenv);
}

/* Inside a team of kerasc's pool or libgomp's. */
static int kc_in_team(void) { return kc_pool_index() >= 0 || omp_in_parallel(); }

int kc_parallel_width(void) { return kc_in_team() ? 1 : kc_threads_max(); }

/* Thread time the calling thread's teams spent waiting at their joins
 * (kc_parallel_idle_watch), and whether its calls measure it. */
static _Thread_local double kc_idle_seconds;
static _Thread_local int kc_idle_watching;

double kc_parallel_idle_watch(void)
{
    kc_idle_watching = 1;
    return kc_idle_seconds;
}

/* Indexes of a measured call at most (more: not measured). */
#define KC_IDLE_MAX 64

/* When each index of a measured call returned. */
typedef struct kc_idle_stamps {
    double end[KC_IDLE_MAX];
    int n;
} kc_idle_stamps;

/* What the indexes that returned before the last waited, added to the
 * calling thread's idle time. */
static void kc_idle_add(const kc_idle_stamps *stamps)
{
    double last = stamps->end[0], waited = 0;
    for (int i = 1; i < stamps->n; i++)
        last = stamps->end[i] > last ? stamps->end[i] : last;
    for (int i = 0; i < stamps->n; i++)
        waited += last - stamps->end[i];
    kc_idle_seconds += waited;
}

/* fn on a team of n (n > 1, outside any team). */
static void kc_parallel_team(int n, void (*fn)(void *arg, int index), void *arg)
{
    if (kc_pool_run(n, fn, arg))
        return;
    /* What `#pragma omp parallel num_threads(n)` compiles to, called
     * directly so that the library needs no -fopenmp (see above). */
    kc_parallel_job job = {fn, arg, n, kc_fpenv_get()};
    kc_pool_team_note();
    GOMP_parallel(kc_parallel_body, &job, (unsigned)n, 0);
}

typedef struct kc_timed_job {
    void (*fn)(void *arg, int index);
    void *arg;
    double *seconds; /* each index's time added, or NULL */
    double *ends;    /* when each index returned (kc_idle_stamps), or NULL */
} kc_timed_job;

/* fn(arg, index), its time added to seconds[index] and its end stamped
 * in ends[index] (neither where NULL), from one read of the clock. */
static void kc_timed_body(void *data, int index)
{
    const kc_timed_job *job = data;
    double start = job->seconds ? kc_now() : 0;
    job->fn(job->arg, index);
    if (!job->seconds && !job->ends)
        return;
    double end = kc_now();
    if (job->seconds)
        job->seconds[index] += end - start;
    if (job->ends)
        job->ends[index] = end;
}

/* Whether the calling thread measures a team of n's idle time: then
 * stamps is readied for it (its stamps written by the team). */
static int kc_idle_ready(kc_idle_stamps *stamps, int n)
{
    if (!kc_idle_watching || n > KC_IDLE_MAX)
        return 0;
    stamps->n = n;
    return 1;
}

/* kc_parallel, each index's time added to seconds where not NULL. */
static void kc_parallel_clocked(int n, void (*fn)(void *arg, int index), void *arg,
                                double *seconds)
{
    kc_timed_job job = {fn, arg, seconds, NULL};
    if (n <= 1 || kc_in_team()) {
        for (int i = 0; i < (n < 1 ? 1 : n); i++)
            kc_timed_body(&job, i);
        return;
    }
    kc_idle_stamps stamps; /* its first n ends written by the team */
    if (kc_idle_ready(&stamps, n))
        job.ends = stamps.end;
    if (!seconds && !job.ends)
        kc_parallel_team(n, fn, arg);
    else
        kc_parallel_team(n, kc_timed_body, &job);
    if (job.ends)
        kc_idle_add(&stamps);
}

void kc_parallel(int n, void (*fn)(void *arg, int index), void *arg)
{
    kc_parallel_clocked(n, fn, arg, NULL);
}

typedef struct kc_range_job {
    void (*fn)(void *arg, int64_t lo, int64_t hi);
    void *arg;
    int64_t n, grain;
    int parts;
} kc_range_job;

/* Part `part`'s range: its even share, its ends rounded down to grains. */
static void kc_range_body(void *data, int part)
{
    const kc_range_job *job = data;
    int64_t grains = (job->n + job->grain - 1) / job->grain;
    int64_t lo = grains * part / job->parts * job->grain;
    int64_t hi = part == job->parts - 1 ? job->n : grains * (part + 1) / job->parts * job->grain;
    if (hi > job->n)
        hi = job->n;
    if (lo < hi)
        job->fn(job->arg, lo, hi);
}

void kc_parallel_for(int64_t n, int64_t bytes, int64_t grain,
                     void (*fn)(void *arg, int64_t lo, int64_t hi), void *arg)
{
    if (n < 1)
        return;
    if (grain < 1)
        grain = 1;
    kc_range_job job = {fn, arg, n, grain, kc_parallel_parts(bytes, (n + grain - 1) / grain)};
    kc_parallel(job.parts, kc_range_body, &job);
}

void kc_parallel_timed(int n, void (*fn)(void *arg, int index), void *arg, double *seconds)
{
    kc_parallel_clocked(n, fn, arg, seconds);
}

typedef struct kc_two_job {
    kc_timed_job first, second;
    int n;
    unsigned fpenv; /* the caller's floating-point state (base/fpenv.h) */
} kc_two_job;

/* As kc_parallel_body, each pass over the thread's indexes; every thread
 * of the team reaches the barrier once, whatever its share. */
static void kc_two_body(void *data)
{
    kc_two_job *job = data;
    int team = omp_get_num_threads();
    unsigned fpenv = kc_fpenv_adopt(job->fpenv);
    for (int i = omp_get_thread_num(); i < job->n; i += team)
        kc_timed_body(&job->first, i);
    GOMP_barrier();
    for (int i = omp_get_thread_num(); i < job->n; i += team)
        kc_timed_body(&job->second, i);
    kc_fpenv_adopt(fpenv);
}

/* kc_two_body on kerasc's pool: index i's two passes, the pool's barrier
 * between. */
static void kc_two_pool_body(void *data, int i)
{
    kc_two_job *job = data;
    kc_timed_body(&job->first, i);
    kc_pool_barrier();
    kc_timed_body(&job->second, i);
}

/* Why: MobileNetV2's blocks cut by channels (a pass of partial sums) and
 * in place (a pass of border rows first) ran each of their two passes as
 * a team of its own, twelve forks and joins an image at batch 1. */
void kc_parallel_two(int n, void (*first)(void *arg, int index),
                     void (*second)(void *arg, int index), void *arg, double *first_seconds,
                     double *second_seconds)
{
    kc_two_job job = {{first, arg, first_seconds, NULL},
                      {second, arg, second_seconds, NULL},
                      n < 1 ? 1 : n, kc_fpenv_get()};
    if (n <= 1 || kc_in_team()) {
        for (int i = 0; i < job.n; i++)
            kc_timed_body(&job.first, i);
        for (int i = 0; i < job.n; i++)
            kc_timed_body(&job.second, i);
        return;
    }
    kc_idle_stamps at_barrier, at_join; /* their first n ends written by the team */
    if (kc_idle_ready(&at_barrier, n) && kc_idle_ready(&at_join, n)) {
        job.first.ends = at_barrier.end;
        job.second.ends = at_join.end;
    }
    if (!kc_pool_run(n, kc_two_pool_body, &job)) {
        kc_pool_team_note();
        GOMP_parallel(kc_two_body, &job, (unsigned)n, 0);
    }
    if (job.first.ends) {
        kc_idle_add(&at_barrier);
        kc_idle_add(&at_join);
    }
}
