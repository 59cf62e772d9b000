/* Work claimed a piece at a time from a cut's runs, idle parts taking
 * what is left at the back of the others' runs.
 *
 * Why: kc_balance moves the cuts to the threads' average speeds, but on
 * the shared 2-vCPU machines a thread's speed moves from run to run:
 * ResNet50's 1x1 layers on kc_pw_conv, batch 1, the two parts of one
 * layer were busy for times 14-76 us apart (means over 93 runs), 6.7% of
 * the nine layers' time, with the cuts at their averages. Here each part
 * runs its own run front to back and, when it is done, takes pieces from
 * the back of the run with the most left: the parts end within a piece
 * of each other, and in the usual run (no steal) each part reads the
 * units it was cut, in order, as before. Measured (2-vCPU Zen 5,
 * alternating pairs): chains of 3x3 layers on wino_fly.c 2.7-2.8%
 * faster; ResNet50 at batch 1 and a chain of 1x1 layers on pw.c level.
 *
 * The units are independent (each writes outputs of its own, the same
 * bits whichever thread computes them). A kc_claims lives for one run,
 * on the caller's stack: a kernel state may be shared by batch lanes
 * running side by side. */
#ifndef KC_BASE_CLAIMS_H
#define KC_BASE_CLAIMS_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/balance.h"

typedef struct kc_claims {
    int parts;
    int64_t most;       /* units a piece at most */
    int steal;          /* 0: each part its own run only (kc_balance.steal) */
    struct {
        /* the run's first unclaimed unit (low 32 bits) and its end (high
         * 32 bits): the owner moves the front, thieves the end */
        _Alignas(64) _Atomic uint64_t run;
        int64_t done; /* units this part ran (written by the part alone) */
    } part[KC_BALANCE_MAX_PARTS];
} kc_claims;

/* Units [first, first + count); count 0: none. */
typedef struct kc_claim {
    int64_t first, count;
} kc_claim;

/* Runs from b's cuts (units below 2^31), pieces of at most `most` units
 * evened over what is left of a run (7 units by 3: 3, 2, 2); parts take
 * from each other's runs unless b was made with KC_STEAL=0. */
void kc_claims_init(kc_claims *c, const kc_balance *b, int64_t most);

/* The next piece for `part`: from the front of its own run, else from the
 * back of the run with the most left; count 0 when nothing is left.
 * *guess: the piece `part` will likely claim after it (to fetch ahead). */
kc_claim kc_claims_next(kc_claims *c, int part, kc_claim *guess);

/* Units each part ran, into units[0 .. parts-1] (for kc_balance_update_units). */
void kc_claims_units(const kc_claims *c, int64_t *units);

#endif
