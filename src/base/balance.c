#include "base/balance.h"

#include "base/env.h"

/* Weight of a new run in the averages: a run's times move by a few
 * percent from noise alone, the cores' difference holds for the process. */
#define KC_BALANCE_NEW 0.2

void kc_balance_init(kc_balance *b, int64_t units, int parts, int64_t min_units)
{
    if (min_units < 1)
        min_units = 1;
    if (parts > KC_BALANCE_MAX_PARTS)
        parts = KC_BALANCE_MAX_PARTS;
    if (parts > units / min_units)
        parts = (int)(units / min_units);
    if (parts < 1)
        parts = 1;
    b->parts = parts;
    b->units = units;
    b->min_units = min_units;
    b->adaptive = !kc_env_off("KC_BALANCE");
    b->steal = !kc_env_off("KC_STEAL");
    for (int k = 0; k <= parts; k++)
        b->lo[k] = units * k / parts;
    for (int k = 0; k < parts; k++)
        b->per_unit[k] = 0.0;
    for (int k = 0; k < KC_BALANCE_MAX_PARTS; k++)
        b->ran[k] = 0;
}

/* Cuts giving part k a share of the units proportional to its speed
 * (1 / per_unit[k]), each part keeping at least min_units. */
static void kc_balance_recut(kc_balance *b)
{
    double speed[KC_BALANCE_MAX_PARTS], total = 0.0;
    for (int k = 0; k < b->parts; k++) {
        speed[k] = 1.0 / b->per_unit[k];
        total += speed[k];
    }
    double before = 0.0;
    for (int k = 1; k < b->parts; k++) {
        before += speed[k - 1];
        int64_t lo = (int64_t)((double)b->units * before / total + 0.5);
        int64_t least = b->lo[k - 1] + b->min_units;
        int64_t most = b->units - b->min_units * (b->parts - k);
        b->lo[k] = lo < least ? least : lo > most ? most : lo;
    }
}

void kc_balance_update_units(kc_balance *b, const double *seconds, const int64_t *units)
{
    for (int k = 0; k < b->parts; k++)
        b->ran[k] = units[k];
    if (!b->adaptive || b->parts < 2)
        return;
    for (int k = 0; k < b->parts; k++)
        if (units[k] < 1 || !(seconds[k] > 0.0))
            return; /* a part that did not run, or a clock that did not move */
    for (int k = 0; k < b->parts; k++) {
        double unit = seconds[k] / (double)units[k];
        b->per_unit[k] = b->per_unit[k] > 0.0
                             ? (1.0 - KC_BALANCE_NEW) * b->per_unit[k] + KC_BALANCE_NEW * unit
                             : unit;
    }
    kc_balance_recut(b);
}

void kc_balance_update(kc_balance *b, const double *seconds)
{
    int64_t units[KC_BALANCE_MAX_PARTS];
    for (int k = 0; k < b->parts; k++)
        units[k] = b->lo[k + 1] - b->lo[k];
    kc_balance_update_units(b, seconds, units);
}
