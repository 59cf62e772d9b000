/* kerasc's own team of worker threads for kc_parallel (base/threads.c),
 * beside libgomp's, used while no OpenMP team has run lately. See pool.c. */
#ifndef KC_POOL_H
#define KC_POOL_H

/* Run fn(arg, i) for every i in [0, n): index 0 on the calling thread,
 * index i on the pool's worker i, and return 1 when all have. 0, having
 * run nothing, where the pool does not take the call: n < 2 or more than
 * it has room for, a call from inside a team (the pool's or OpenMP's),
 * the pool in use by another calling thread, an OpenMP team run lately
 * (kc_pool_team_note), KC_POOL=0, or no thread to be had. Inside the
 * call, OpenMP regions (oneDNN's) run on their calling thread alone, as
 * in a nested OpenMP team. */
int kc_pool_run(int n, void (*fn)(void *arg, int index), void *arg);

/* Inside kc_pool_run: wait until every index of the call has reached
 * this point. */
void kc_pool_barrier(void);

/* The calling thread's index in the running kc_pool_run, -1 outside. */
int kc_pool_index(void);

/* An OpenMP team (oneDNN's, or kc_parallel's own) is about to start on
 * this thread: the pool's spinning workers sleep now, and the pool
 * stays off until libgomp's workers have stopped spinning. */
void kc_pool_team_note(void);

/* For tests: calls the pool has run in this process; and whether it is
 * on (1), off (0), or as KC_POOL says (-1). */
long kc_pool_runs(void);
void kc_pool_enable(int on);

#endif
