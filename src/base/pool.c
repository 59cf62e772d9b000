/* kerasc's own team of worker threads for kc_parallel.
 *
 * Why: kc_parallel forked and joined a libgomp team per layer, and that
 * cost 4-5 us a call even with the workers spinning (a bare loop of
 * empty `omp parallel` regions on 2 threads of the Zen 5 of
 * bench/results: 4.0 us a region; this pool 0.9 us). In ResNet50 at
 * batch 1 the worker began its part 2.5-4.5 us after the call and the call
 * returned ~6 us after the slower part, over 53 calls a run. With this
 * pool the run took 0.984 of the time (11 of 12 alternating pairs).
 *
 * How: the workers wait for a generation counter to move, spinning first
 * (as long as libgomp's own workers would: GOMP_SPINCOUNT and
 * OMP_WAIT_POLICY, which the CLI sets, kc_pool_spins), then sleeping on
 * it (futex). A call publishes its job, moves the counter, runs index 0
 * itself and spins until every worker has reported.
 *
 * Beside libgomp: oneDNN keeps its OpenMP team, and two pools spinning
 * at once on a small machine take each other's cores (base/threads.c).
 * So the pool stays off while an OpenMP team may still be spinning: each
 * place that may start one says so first (kc_pool_team_note), which also
 * sends the pool's spinning workers to sleep; kc_parallel then uses
 * libgomp until its workers would have stopped spinning (twice their spin
 * time, measured in spins of this machine). A model whose layers all
 * run on kerasc's own kernels uses the pool; one that calls oneDNN every
 * run mostly libgomp, as before. Inside a pool call, OpenMP regions run
 * on their calling thread alone (the threads' OpenMP count 1), as they
 * do inside a libgomp team.
 *
 * Not pinned: the calling thread and each worker bound to a CPU of their
 * own (sched_setaffinity, in the order of the process's mask) took
 * ResNet50 at batch 1 1.013 of the time (6 alternating pairs on the Zen 5
 * of bench/results, 12-07; probably: the kernel already keeps two busy
 * threads on the two vCPUs, and a bound thread cannot leave one the
 * host is slowing). */

#include "base/pool.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/fpenv.h"

/* libgomp's API (see base/threads.c) */
int omp_get_max_threads(void);
void omp_set_num_threads(int n);
int omp_in_parallel(void);

#define KC_POOL_MAX 16 /* threads of a call, the caller included */

/* libgomp's spins where GOMP_SPINCOUNT and OMP_WAIT_POLICY are unset */
#define KC_POOL_DEFAULT_SPINS 300000LL
/* ... and with OMP_WAIT_POLICY=active: for all purposes, forever */
#define KC_POOL_FOREVER (LLONG_MAX / 4)
/* Spins before a caller waiting on a descheduled worker yields its core. */
#define KC_POOL_WAIT_SPINS (1LL << 16)

/* The word the workers wait on: the job's number times KC_POOL_JOB plus
 * its index count, so that a worker learns both in one read (one with no
 * index in a job then reads nothing else of it: the next job's fields
 * may be being written). */
#define KC_POOL_JOB 64
_Static_assert(KC_POOL_MAX < KC_POOL_JOB, "a job's index count fits under KC_POOL_JOB");

typedef struct kc_pool {
    _Atomic int gen;       /* KC_POOL_JOB x the job's number + its n; workers wait on it */
    _Atomic int pending;   /* workers of the job not yet done */
    _Atomic int sleepers;  /* workers asleep (or about to be) on gen */
    _Atomic int park;      /* an OpenMP team is starting: stop spinning */
    _Atomic int busy;      /* a calling thread owns the pool */
    void (*fn)(void *arg, int index);
    void *arg;
    int n;
    int workers;           /* started (worker i has index i, from 1) */
    _Atomic int bar_count, bar_sense;
    _Atomic long runs;
    _Atomic int64_t team_ns; /* when an OpenMP team last started (kc_pool_ns) */
    _Atomic long long spins; /* a waiting worker's spins before it sleeps */
    int64_t quiet_ns;      /* how long after a team the pool stays off */
    unsigned fpenv;        /* the caller's floating-point state, the workers' for the job */
    int enabled;
} kc_pool;

static kc_pool kc_the_pool = {.team_ns = INT64_MIN / 2};
static _Thread_local int kc_pool_me = -1;

typedef struct kc_pool_start {
    int index, gen;
} kc_pool_start;

static int64_t kc_pool_ns(void) { return (int64_t)(kc_now() * 1e9); }

static void kc_pool_futex(_Atomic int *at, int op, int val)
{
    syscall(SYS_futex, (int *)at, op, val, NULL, NULL, 0);
}

static void kc_pool_relax(void) { __builtin_ia32_pause(); }

/* A GOMP_SPINCOUNT value: a count with an optional k, M, G or T, or
 * "infinite"; -1 where unreadable. */
static long long kc_pool_parse_spins(const char *s)
{
    if (!strcasecmp(s, "infinite") || !strcasecmp(s, "infinity"))
        return KC_POOL_FOREVER;
    char *end;
    long long n = strtoll(s, &end, 10);
    if (end == s || n < 0)
        return -1;
    static const char units[] = "kMGT";
    const char *unit = *end ? strchr(units, *end) : NULL;
    if (*end && (!unit || end[1]))
        return -1;
    for (const char *u = units; unit && u <= unit; u++)
        n = n > KC_POOL_FOREVER / 1000 ? KC_POOL_FOREVER : n * 1000;
    return n;
}

/* The spins libgomp's waiting workers make before they sleep, as its
 * env.c reads them. */
static long long kc_pool_spins(void)
{
    const char *count = getenv("GOMP_SPINCOUNT"), *policy = getenv("OMP_WAIT_POLICY");
    long long n = count ? kc_pool_parse_spins(count) : -1;
    if (n >= 0)
        return n;
    if (policy && !strcasecmp(policy, "active"))
        return KC_POOL_FOREVER;
    if (policy && !strcasecmp(policy, "passive"))
        return 0;
    return KC_POOL_DEFAULT_SPINS;
}

/* Nanoseconds one spin (a load and a pause) takes here. */
static double kc_pool_spin_ns(void)
{
    _Atomic int never = 0;
    int64_t t0 = kc_pool_ns();
    for (int i = 0; i < 20000 && !atomic_load_explicit(&never, memory_order_relaxed); i++)
        kc_pool_relax();
    double ns = (double)(kc_pool_ns() - t0) / 20000.0;
    return ns > 1.0 ? ns : 1.0;
}

static void kc_pool_configure(kc_pool *p)
{
    long long spins = kc_pool_spins();
    atomic_store_explicit(&p->spins, spins, memory_order_relaxed);
    double spin_time = (double)spins * kc_pool_spin_ns();
    /* libgomp's workers spin that long after their team: twice it, and
     * a tenth of a millisecond; forever where they never stop */
    int forever = spins >= KC_POOL_FOREVER || spin_time > 1e15;
    p->quiet_ns = forever ? INT64_MAX : (int64_t)(2 * spin_time) + 100000;
    /* off where libgomp's workers never stop spinning, and with KC_DNNL=0,
     * where OpenBLAS's own threads (which yield for a tenth of a second
     * after each GEMM) do the GEMMs */
    p->enabled = !forever && !kc_env_off("KC_POOL") && !kc_env_off("KC_DNNL");
}

static void kc_pool_configure_once(void) { kc_pool_configure(&kc_the_pool); }

/* Until *at holds `want`: spins, then yields the core each time (a thread
 * it waits on may be waiting for this core). */
static void kc_pool_await(_Atomic int *at, int want)
{
    for (long long spun = 0; atomic_load_explicit(at, memory_order_acquire) != want; spun++)
        if (spun < KC_POOL_WAIT_SPINS)
            kc_pool_relax();
        else
            sched_yield();
}

/* In a child of fork() the workers are gone: the pool starts again. */
static void kc_pool_after_fork(void)
{
    kc_pool *p = &kc_the_pool;
    p->workers = 0;
    atomic_store(&p->busy, 0);
    atomic_store(&p->pending, 0);
    atomic_store(&p->sleepers, 0);
    atomic_store(&p->bar_count, 0);
    kc_pool_me = -1;
}

/* Until gen moves from `seen`: spins, then sleeps (at once when parked). */
static int kc_pool_wait_job(kc_pool *p, int seen)
{
    long long spun = 0;
    for (;;) {
        int now = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (now != seen)
            return now;
        if (spun < atomic_load_explicit(&p->spins, memory_order_relaxed) &&
            !atomic_load_explicit(&p->park, memory_order_relaxed)) {
            spun++;
            kc_pool_relax();
            continue;
        }
        atomic_fetch_add(&p->sleepers, 1);
        if (atomic_load(&p->gen) == seen)
            kc_pool_futex(&p->gen, FUTEX_WAIT_PRIVATE, seen);
        atomic_fetch_sub(&p->sleepers, 1);
        spun = 0;
    }
}

static void *kc_pool_worker(void *arg)
{
    kc_pool *p = &kc_the_pool;
    kc_pool_start start = *(kc_pool_start *)arg;
    free(arg);
    omp_set_num_threads(1); /* oneDNN inside a part: on this thread alone */
    for (int seen = start.gen;;) {
        seen = kc_pool_wait_job(p, seen);
        if (start.index >= (int)((unsigned)seen % KC_POOL_JOB))
            continue; /* no index in this job */
        kc_pool_me = start.index;
        unsigned fpenv = kc_fpenv_adopt(p->fpenv); /* the caller's (base/fpenv.h) */
        p->fn(p->arg, start.index);
        kc_fpenv_adopt(fpenv);
        kc_pool_me = -1;
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
    return NULL;
}

/* Workers 1 .. n-1 started; 0 where one could not be. */
static int kc_pool_grow(kc_pool *p, int n)
{
    static int fork_handled;
    if (!fork_handled && pthread_atfork(NULL, NULL, kc_pool_after_fork) == 0)
        fork_handled = 1;
    while (p->workers < n - 1) {
        kc_pool_start *start = malloc(sizeof *start);
        if (!start)
            return 0;
        *start = (kc_pool_start){p->workers + 1, atomic_load(&p->gen)};
        pthread_t t;
        if (pthread_create(&t, NULL, kc_pool_worker, start) != 0) {
            free(start);
            return 0;
        }
        pthread_detach(t);
        p->workers++;
    }
    return 1;
}

int kc_pool_run(int n, void (*fn)(void *arg, int index), void *arg)
{
    kc_pool *p = &kc_the_pool;
    static pthread_once_t configured = PTHREAD_ONCE_INIT;
    pthread_once(&configured, kc_pool_configure_once);
    if (!p->enabled || n < 2 || n > KC_POOL_MAX || kc_pool_me >= 0 || omp_in_parallel())
        return 0;
    if (kc_pool_ns() - atomic_load_explicit(&p->team_ns, memory_order_relaxed) < p->quiet_ns)
        return 0;
    if (atomic_exchange_explicit(&p->busy, 1, memory_order_acquire))
        return 0;
    if (!kc_pool_grow(p, n)) {
        atomic_store_explicit(&p->busy, 0, memory_order_release);
        return 0;
    }
    p->fn = fn;
    p->arg = arg;
    p->n = n;
    p->fpenv = kc_fpenv_get();
    atomic_store_explicit(&p->pending, n - 1, memory_order_relaxed);
    atomic_store_explicit(&p->park, 0, memory_order_relaxed);
    /* the next job's number, its n beside; ordered before the sleepers'
     * load (seq_cst) */
    unsigned job = (unsigned)atomic_load_explicit(&p->gen, memory_order_relaxed) / KC_POOL_JOB + 1;
    atomic_store(&p->gen, (int)((job * KC_POOL_JOB + (unsigned)n) & INT_MAX));
    if (atomic_load(&p->sleepers))
        kc_pool_futex(&p->gen, FUTEX_WAKE_PRIVATE, INT_MAX);
    int threads = omp_get_max_threads();
    if (threads > 1)
        omp_set_num_threads(1);
    kc_pool_me = 0;
    fn(arg, 0);
    kc_pool_me = -1;
    if (threads > 1)
        omp_set_num_threads(threads);
    kc_pool_await(&p->pending, 0); /* the workers count it down to 0 */
    atomic_fetch_add_explicit(&p->runs, 1, memory_order_relaxed);
    atomic_store_explicit(&p->busy, 0, memory_order_release);
    return 1;
}

void kc_pool_barrier(void)
{
    kc_pool *p = &kc_the_pool;
    if (kc_pool_me < 0 || p->n < 2)
        return;
    int sense = atomic_load_explicit(&p->bar_sense, memory_order_acquire);
    if (atomic_fetch_add_explicit(&p->bar_count, 1, memory_order_acq_rel) == p->n - 1) {
        atomic_store_explicit(&p->bar_count, 0, memory_order_relaxed);
        atomic_store_explicit(&p->bar_sense, !sense, memory_order_release);
        return;
    }
    kc_pool_await(&p->bar_sense, !sense);
}

int kc_pool_index(void) { return kc_pool_me; }

void kc_pool_team_note(void)
{
    kc_pool *p = &kc_the_pool;
    if (kc_pool_me >= 0 || omp_in_parallel() || omp_get_max_threads() < 2)
        return; /* a team of one: nothing spins */
    atomic_store_explicit(&p->team_ns, kc_pool_ns(), memory_order_relaxed);
    atomic_store_explicit(&p->park, 1, memory_order_relaxed);
}

long kc_pool_runs(void) { return atomic_load(&kc_the_pool.runs); }

void kc_pool_enable(int on)
{
    kc_pool *p = &kc_the_pool;
    kc_pool_configure(p);
    if (on >= 0)
        p->enabled = on;
    atomic_store(&p->team_ns, INT64_MIN / 2);
}
