/* Cuts of a parallel loop that follow the threads' measured speeds.
 *
 * On the shared 2-vCPU machines of bench/results one vCPU runs 10-20%
 * slower than the other for the life of a process (which one changes
 * from process to process): ResNet50's 1x1 layers at batch 1, halves of
 * equal work, took 263 against 236 us and 314 against 276 on the two
 * threads. An even cut then waits on the slow thread every layer. A
 * kc_balance keeps, per cut loop, each part's time per unit of work (a
 * moving average over the runs) and moves the cuts so that the parts'
 * predicted times are equal. Part k runs on kc_parallel's thread k, so
 * a part's time is its thread's. */
#ifndef KC_BASE_BALANCE_H
#define KC_BASE_BALANCE_H

#include <stdint.h>

#define KC_BALANCE_MAX_PARTS 16

typedef struct kc_balance {
    int parts;
    int64_t units, min_units;        /* in all; at least this many a part */
    int64_t lo[KC_BALANCE_MAX_PARTS + 1]; /* part k: units [lo[k], lo[k + 1]) */
    double per_unit[KC_BALANCE_MAX_PARTS]; /* seconds a unit, averaged; 0: none yet */
    int adaptive;                    /* 0: the even cut stays (KC_BALANCE=0) */
    int steal;                       /* 0: no part takes from another's run (KC_STEAL=0; base/claims.h) */
    int64_t ran[KC_BALANCE_MAX_PARTS]; /* units each part ran in the last update's run */
} kc_balance;

/* An even cut of `units` into `parts` (at most KC_BALANCE_MAX_PARTS, and
 * fewer where a part would get under min_units, at least 1). */
void kc_balance_init(kc_balance *b, int64_t units, int parts, int64_t min_units);

/* After a run: seconds[k] is what part k took. Updates the averages and
 * moves the cuts for the next run. */
void kc_balance_update(kc_balance *b, const double *seconds);

/* The same where part k ran units[k] units rather than its cut's (work
 * taken from other parts' runs: base/claims.h). */
void kc_balance_update_units(kc_balance *b, const double *seconds, const int64_t *units);

#endif
