/* One thread policy for the two thread pools kerasc links: oneDNN's
 * (OpenMP, libgomp) and OpenBLAS's (pthreads). See threads.c. */
#ifndef KC_THREADS_H
#define KC_THREADS_H

#include <stdint.h>

/* Size the pools for a session about to run on the calling thread:
 * `threads` > 0 is the session's option, 0 means every core. With oneDNN
 * enabled, every GEMM goes through oneDNN too, so OpenBLAS is kept at one
 * thread and never spins against the OpenMP workers. Cheap: call it at
 * the start of every run (OpenMP's thread count is per calling thread). */
void kc_threads_enter(int threads);
/* The thread count kc_threads_enter(threads) sets. */
int kc_threads_wanted(int threads);
/* CPUs the process may run on (its affinity mask), at least 1: what
 * `threads` 0 means. */
int kc_threads_cpus(void);

/* Run fn(arg, i) for i in [0, n) on n threads, one index per thread, and
 * return when all have: kerasc's own workers (base/pool.c) where no
 * OpenMP team has run lately, else the OpenMP pool's. Thread i is the
 * same thread on every call of either (both keep their team), so work
 * cut the same way in consecutive layers stays in the cache of the core
 * that made it.
 * Inside the call, oneDNN primitives run on their calling thread alone.
 * n <= 1 runs fn(arg, 0) on the calling thread; so does a call from
 * inside a team (a batch lane, runtime/lanes.c), index after index:
 * libgomp would allocate a nested team of one on every call. */
void kc_parallel(int n, void (*fn)(void *arg, int index), void *arg);

/* The thread time the calling thread's teams (kc_parallel, _timed, _two)
 * have spent waiting at their joins and barriers so far, in seconds: at
 * each, the sum over the team's indexes of how long before the last one
 * each returned (what a perfect cut would have saved, times the
 * threads). From the first call on, this thread's teams measure it (two
 * clock reads an index: `kerasc bench --stats`, runtime/profile.c);
 * before it, and on other threads, they do not. Teams of over 64
 * indexes are not measured; nor are oneDNN's own OpenMP regions. */
double kc_parallel_idle_watch(void);

/* kc_parallel, adding to seconds[i] the time index i took on its thread
 * (what kc_balance cuts by). */
void kc_parallel_timed(int n, void (*fn)(void *arg, int index), void *arg, double *seconds);

/* first(arg, i) for every index, then, once all have returned, second(arg,
 * i) for every index: two passes in one team, a barrier between them
 * instead of a second fork and join. Each pass's time for index i is
 * added to first_seconds[i] / second_seconds[i], where those are not
 * NULL (what kc_balance cuts by). */
void kc_parallel_two(int n, void (*first)(void *arg, int index),
                     void (*second)(void *arg, int index), void *arg, double *first_seconds,
                     double *second_seconds);

/* How many of kc_parallel's indexes run side by side from here: 1 inside
 * a team (a batch lane, lane 0 included), else kc_threads_max(). */
int kc_parallel_width(void);

/* The OpenMP thread count a primitive built now would be sized for. */
int kc_threads_max(void);
/* oneDNN calls made between these two run on the calling thread alone
 * (OpenMP's thread count 1 meanwhile): begin returns the count to give
 * end, which restores it. */
int kc_threads_serial_begin(void);
void kc_threads_serial_end(int previous);
/* The calling thread's number in its kc_parallel team (0 outside one):
 * threads running side by side have different numbers. */
int kc_thread_index(void);

/* The batch lane the calling thread is running (runtime/lanes.c), 0 for
 * lane 0 and outside any lane: lane 0 uses the default buffers, streams
 * and argument memories, the others their own (kc_parallel_width, not
 * this, says whether the caller is inside a lane's team). Lanes run the
 * same kernel states side by side,
 * so what a kernel binds per run (oneDNN's argument memories, streams,
 * a thread's share of the spare arena) is chosen by it. */
int kc_batch_lane(void);
void kc_batch_lane_set(int lane);

/* How many parts (kc_parallel) a memory-bound loop over `items` equal
 * items touching `bytes` in all should be cut into: one per thread from
 * 256 KiB on (a sleeping worker's wake-up costs ~20 us), never more
 * than items, at least 1. */
int kc_parallel_parts(int64_t bytes, int64_t items);

/* fn(arg, lo, hi) over [0, n) in kc_parallel_parts(bytes, n / grain)
 * ranges side by side, every range but the last a whole number of
 * `grain` items (rows, vectors) long. For element-wise loops: each item's
 * result is the same whichever range computes it. */
void kc_parallel_for(int64_t n, int64_t bytes, int64_t grain,
                     void (*fn)(void *arg, int64_t lo, int64_t hi), void *arg);

/* 1 when oneDNN runs the convolutions and GEMMs (KC_DNNL unset or not 0). */
int kc_dnnl_enabled(void);

#endif
