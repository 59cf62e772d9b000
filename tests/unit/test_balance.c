/* Tests of the speed-following cuts (src/base/balance.c): an even start,
 * cuts moved toward the faster part in proportion to the measured
 * speeds, averaged over runs, bounded by the parts' least units, and
 * left alone with KC_BALANCE=0, with one part, or when a part reports no
 * time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#include "base/balance.h"

static void expect_cuts(const kc_balance *b, const int64_t *want, int n)
{
    assert_int_equal(b->parts, n);
    for (int k = 0; k <= n; k++)
        if (b->lo[k] != want[k])
            fail_msg("cut %d at %lld, expected %lld", k, (long long)b->lo[k],
                     (long long)want[k]);
}

static void test_even_start(void **state)
{
    (void)state;
    kc_balance b;
    kc_balance_init(&b, 10, 3, 1);
    expect_cuts(&b, (const int64_t[]){0, 3, 6, 10}, 3);
    /* fewer parts where a part would get under its least units */
    kc_balance_init(&b, 10, 4, 4);
    expect_cuts(&b, (const int64_t[]){0, 5, 10}, 2);
    kc_balance_init(&b, 3, 2, 4);
    expect_cuts(&b, (const int64_t[]){0, 3}, 1);
    /* never more than KC_BALANCE_MAX_PARTS */
    kc_balance_init(&b, 1000, 64, 1);
    assert_int_equal(b.parts, KC_BALANCE_MAX_PARTS);
}

/* Part 0 took 1.5x part 1's time on equal halves: its speed is 2/3 of
 * part 1's, so it gets 2/5 of the units. */
static void test_cut_follows_speed(void **state)
{
    (void)state;
    kc_balance b;
    kc_balance_init(&b, 100, 2, 4);
    kc_balance_update(&b, (const double[]){1.5e-3, 1.0e-3});
    expect_cuts(&b, (const int64_t[]){0, 40, 100}, 2);
    /* the same speeds at the new cut: the cut stays */
    kc_balance_update(&b, (const double[]){40 * 1.5e-5, 60 * 1.0e-5});
    expect_cuts(&b, (const int64_t[]){0, 40, 100}, 2);
    /* three parts, part 2 twice as slow as the others: 2/5, 2/5, 1/5 */
    kc_balance_init(&b, 30, 3, 1);
    kc_balance_update(&b, (const double[]){1.0, 1.0, 2.0});
    expect_cuts(&b, (const int64_t[]){0, 12, 24, 30}, 3);
}

/* A new run weighs 0.2 in the averages: one noisy run moves the cut a
 * little, not all the way. */
static void test_runs_averaged(void **state)
{
    (void)state;
    kc_balance b;
    kc_balance_init(&b, 100, 2, 1);
    kc_balance_update(&b, (const double[]){1.0, 1.0});
    expect_cuts(&b, (const int64_t[]){0, 50, 100}, 2);
    /* part 0 once 3x slower: its average per unit 0.02 * 1.4 */
    kc_balance_update(&b, (const double[]){3.0, 1.0});
    /* speeds 1 / 0.028 and 1 / 0.02: part 0 gets 0.02 / 0.048 of 100 */
    expect_cuts(&b, (const int64_t[]){0, 42, 100}, 2);
}

/* However slow a part, it keeps its least units. */
static void test_least_units_kept(void **state)
{
    (void)state;
    kc_balance b;
    kc_balance_init(&b, 20, 2, 4);
    kc_balance_update(&b, (const double[]){100.0, 1.0});
    expect_cuts(&b, (const int64_t[]){0, 4, 20}, 2);
    kc_balance_init(&b, 20, 2, 4);
    kc_balance_update(&b, (const double[]){1.0, 100.0});
    expect_cuts(&b, (const int64_t[]){0, 16, 20}, 2);
}

static void test_left_alone(void **state)
{
    (void)state;
    kc_balance b;
    /* a part with no time (it did not run, or the clock did not move) */
    kc_balance_init(&b, 100, 2, 1);
    kc_balance_update(&b, (const double[]){0.0, 1.0});
    expect_cuts(&b, (const int64_t[]){0, 50, 100}, 2);
    /* one part */
    kc_balance_init(&b, 100, 1, 1);
    kc_balance_update(&b, (const double[]){5.0});
    expect_cuts(&b, (const int64_t[]){0, 100}, 1);
    /* switched off */
    setenv("KC_BALANCE", "0", 1);
    kc_balance_init(&b, 100, 2, 1);
    unsetenv("KC_BALANCE");
    kc_balance_update(&b, (const double[]){3.0, 1.0});
    expect_cuts(&b, (const int64_t[]){0, 50, 100}, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_even_start),
        cmocka_unit_test(test_cut_follows_speed),
        cmocka_unit_test(test_runs_averaged),
        cmocka_unit_test(test_least_units_kept),
        cmocka_unit_test(test_left_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
