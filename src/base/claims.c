#include "base/claims.h"

static uint64_t kc_claims_pack(uint32_t front, uint32_t end)
{
    return (uint64_t)end << 32 | front;
}

void kc_claims_init(kc_claims *c, const kc_balance *b, int64_t most)
{
    c->parts = b->parts;
    c->most = most < 1 ? 1 : most;
    c->steal = b->steal;
    for (int k = 0; k < b->parts; k++) {
        atomic_init(&c->part[k].run,
                    kc_claims_pack((uint32_t)b->lo[k], (uint32_t)b->lo[k + 1]));
        c->part[k].done = 0;
    }
}

/* The next piece's size when `left` units are left: at most c->most,
 * the pieces of what is left evened out. */
static int64_t kc_claims_piece(const kc_claims *c, int64_t left)
{
    if (left < 1)
        return 0;
    int64_t pieces = (left + c->most - 1) / c->most;
    return (left + pieces - 1) / pieces;
}

/* A piece from the front (back = 0) or the back of part k's run, the
 * run's front or end moved past it; *after: the units left behind it. */
static kc_claim kc_claims_take(kc_claims *c, int k, int back, int64_t *after)
{
    uint64_t run = atomic_load_explicit(&c->part[k].run, memory_order_relaxed);
    for (;;) {
        uint32_t front = (uint32_t)run, end = (uint32_t)(run >> 32);
        int64_t left = front < end ? (int64_t)(end - front) : 0;
        int64_t n = kc_claims_piece(c, left);
        if (n == 0)
            return (kc_claim){0, 0};
        uint64_t taken = back ? kc_claims_pack(front, end - (uint32_t)n)
                              : kc_claims_pack(front + (uint32_t)n, end);
        if (atomic_compare_exchange_weak_explicit(&c->part[k].run, &run, taken,
                                                  memory_order_relaxed, memory_order_relaxed)) {
            *after = left - n;
            return (kc_claim){back ? end - n : front, n};
        }
    }
}

/* Units left in part k's run. */
static int64_t kc_claims_left(const kc_claims *c, int k)
{
    uint64_t run = atomic_load_explicit(&c->part[k].run, memory_order_relaxed);
    uint32_t front = (uint32_t)run, end = (uint32_t)(run >> 32);
    return front < end ? (int64_t)(end - front) : 0;
}

/* The part other than `part` with the most units left, -1 if none has. */
static int kc_claims_victim(const kc_claims *c, int part)
{
    int best = -1;
    int64_t most = 0;
    for (int k = 0; k < c->parts; k++) {
        int64_t left = k == part ? 0 : kc_claims_left(c, k);
        if (left > most) {
            most = left;
            best = k;
        }
    }
    return best;
}

kc_claim kc_claims_next(kc_claims *c, int part, kc_claim *guess)
{
    int64_t after = 0;
    kc_claim got = kc_claims_take(c, part, 0, &after);
    if (got.count > 0) {
        c->part[part].done += got.count;
        *guess = (kc_claim){got.first + got.count, kc_claims_piece(c, after)};
        return got;
    }
    for (int victim; c->steal && (victim = kc_claims_victim(c, part)) >= 0;) {
        got = kc_claims_take(c, victim, 1, &after);
        if (got.count > 0) {
            c->part[part].done += got.count;
            /* the victim works on from its front: the next piece from
             * its back is likely this thread's too */
            int64_t n = kc_claims_piece(c, after);
            *guess = after > n ? (kc_claim){got.first - n, n} : (kc_claim){0, 0};
            return got;
        }
    }
    *guess = (kc_claim){0, 0};
    return (kc_claim){0, 0};
}

void kc_claims_units(const kc_claims *c, int64_t *units)
{
    for (int k = 0; k < c->parts; k++)
        units[k] = c->part[k].done;
}
