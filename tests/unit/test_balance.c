/* Tests of the speed-following cuts (src/base/balance.c): an even start,
 * cuts moved toward the faster part in proportion to the measured
 * speeds, averaged over runs, bounded by the parts' least units, and
 * left alone with KC_BALANCE=0, with one part, or when a part reports no
 * time; and of the claims on a cut's runs (src/base/claims.c): each part
 * its own run front to back in evened pieces, then the back of the
 * fullest other run, every unit once under threads, and the cut then
 * following the units each part ran; and of the help between batch
 * lanes (src/base/help.c): a lane done first runs parts of the other's
 * posted work, every unit once, and none where KC_HELP=0 or a lane is
 * still to begin. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/balance.h"
#include "base/claims.h"
#include "base/clock.h"
#include "base/help.h"
#include "base/threads.h"

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

static void expect_claim(kc_claim got, int64_t first, int64_t count, const char *what)
{
    if (got.count != count || (count > 0 && got.first != first))
        fail_msg("%s: units [%lld, +%lld), expected [%lld, +%lld)", what, (long long)got.first,
                 (long long)got.count, (long long)first, (long long)count);
}

/* Two parts of 8 units, pieces of at most 3: part 0 runs its 4 as 2 + 2
 * (evened), then takes part 1's from the back while part 1 has not
 * started; part 1 then finds nothing. */
static void test_claims_order(void **state)
{
    (void)state;
    kc_balance b;
    kc_balance_init(&b, 8, 2, 1);
    kc_claims c;
    kc_claims_init(&c, &b, 3);
    kc_claim guess;
    expect_claim(kc_claims_next(&c, 0, &guess), 0, 2, "part 0's first");
    expect_claim(guess, 2, 2, "part 0's first guess");
    expect_claim(kc_claims_next(&c, 0, &guess), 2, 2, "part 0's second");
    expect_claim(guess, 0, 0, "part 0's run done");
    expect_claim(kc_claims_next(&c, 0, &guess), 6, 2, "part 0 takes part 1's last");
    expect_claim(kc_claims_next(&c, 0, &guess), 4, 2, "part 0 takes part 1's first");
    expect_claim(kc_claims_next(&c, 1, &guess), 0, 0, "part 1: nothing left");
    expect_claim(kc_claims_next(&c, 0, &guess), 0, 0, "part 0: nothing left");
    int64_t units[2];
    kc_claims_units(&c, units);
    assert_int_equal(units[0], 8);
    assert_int_equal(units[1], 0);
    /* 7 units by 3: 3, 2, 2, the guesses following */
    kc_balance_init(&b, 7, 1, 1);
    kc_claims_init(&c, &b, 3);
    expect_claim(kc_claims_next(&c, 0, &guess), 0, 3, "7 by 3, first");
    expect_claim(guess, 3, 2, "7 by 3, first guess");
    expect_claim(kc_claims_next(&c, 0, &guess), 3, 2, "7 by 3, second");
    expect_claim(kc_claims_next(&c, 0, &guess), 5, 2, "7 by 3, third");
    expect_claim(kc_claims_next(&c, 0, &guess), 0, 0, "7 by 3, done");
}

/* A thief takes from the run with the most left, and guesses its next
 * piece from there only where the owner will not reach it first. */
static void test_claims_victim(void **state)
{
    (void)state;
    kc_balance b;
    kc_balance_init(&b, 30, 3, 1); /* runs 0-9, 10-19, 20-29 */
    kc_claims c;
    kc_claims_init(&c, &b, 2);
    kc_claim guess;
    for (int i = 0; i < 3; i++)
        kc_claims_next(&c, 1, &guess); /* part 1: 6 of its 10 */
    for (int i = 0; i < 5; i++)
        kc_claims_next(&c, 0, &guess); /* part 0: all 10 */
    expect_claim(kc_claims_next(&c, 0, &guess), 28, 2, "part 0 takes part 2's back");
    expect_claim(guess, 26, 2, "part 0's guess in part 2's run");
    for (int i = 0; i < 3; i++)
        kc_claims_next(&c, 2, &guess); /* part 2: 20-25, 26-27 left */
    /* part 1 has 4 left, part 2 2 */
    expect_claim(kc_claims_next(&c, 0, &guess), 18, 2, "part 0: the fuller run's back");
    expect_claim(guess, 0, 0, "no guess at a run's last piece");
    expect_claim(kc_claims_next(&c, 1, &guess), 16, 2, "part 1's own");
    expect_claim(kc_claims_next(&c, 0, &guess), 26, 2, "part 0: part 2's last");
    expect_claim(kc_claims_next(&c, 1, &guess), 0, 0, "all taken");
}

typedef struct claims_run {
    kc_claims claims;
    _Atomic int seen[300];
} claims_run;

/* Part 0 slow (1 ms a piece): the others take most of its run. */
static void claims_job(void *arg, int part)
{
    claims_run *r = arg;
    kc_claim guess;
    for (kc_claim got = kc_claims_next(&r->claims, part, &guess); got.count > 0;
         got = kc_claims_next(&r->claims, part, &guess)) {
        for (int64_t u = got.first; u < got.first + got.count; u++)
            atomic_fetch_add(&r->seen[u], 1);
        if (part == 0)
            usleep(1000);
    }
}

static void test_claims_threads(void **state)
{
    (void)state;
    kc_balance b;
    kc_balance_init(&b, 300, 3, 1);
    claims_run *r = calloc(1, sizeof *r);
    assert_non_null(r);
    kc_claims_init(&r->claims, &b, 4);
    kc_threads_enter(3);
    kc_parallel(3, claims_job, r);
    for (int u = 0; u < 300; u++)
        if (atomic_load(&r->seen[u]) != 1)
            fail_msg("unit %d ran %d times", u, atomic_load(&r->seen[u]));
    int64_t units[3];
    kc_claims_units(&r->claims, units);
    assert_int_equal(units[0] + units[1] + units[2], 300);
    if (units[0] >= 100)
        fail_msg("the slow part ran %lld units: nothing taken from its run", (long long)units[0]);
    /* KC_STEAL=0: each part its own run */
    setenv("KC_STEAL", "0", 1);
    kc_balance_init(&b, 300, 3, 1);
    unsetenv("KC_STEAL");
    memset(r, 0, sizeof *r);
    kc_claims_init(&r->claims, &b, 4);
    kc_parallel(3, claims_job, r);
    kc_claims_units(&r->claims, units);
    for (int k = 0; k < 3; k++)
        assert_int_equal(units[k], 100);
    free(r);
}

/* Cuts from the units each part ran: 60 and 40 units in the same time
 * are speeds 60 and 40, whatever the cut was. */
static void test_update_units(void **state)
{
    (void)state;
    kc_balance b;
    kc_balance_init(&b, 100, 2, 1);
    kc_balance_update_units(&b, (const double[]){1.0, 1.0}, (const int64_t[]){60, 40});
    expect_cuts(&b, (const int64_t[]){0, 60, 100}, 2);
    /* a part that ran nothing: left alone */
    kc_balance_update_units(&b, (const double[]){1.0, 1.0}, (const int64_t[]){100, 0});
    expect_cuts(&b, (const int64_t[]){0, 60, 100}, 2);
}

/* kc_parallel_two: every first pass done before any second pass starts
 * (each second pass sees all the firsts' marks), every index once in
 * each, the seconds' times added; the same with more indexes than
 * threads, and from inside a team (run in order on one thread); the
 * first pass timed where asked (pw.c's panels before its head's sums). */
typedef struct two_run {
    atomic_int first[8], second[8], firsts_seen[8];
} two_run;

static two_run *two_now;

static void two_first(void *arg, int i)
{
    two_run *r = arg;
    atomic_fetch_add(&r->first[i], 1);
}

/* two_first, taking at least 2 ms */
static void two_first_slow(void *arg, int i)
{
    struct timespec pause = {0, 2000000};
    nanosleep(&pause, NULL);
    two_first(arg, i);
}

static void two_second(void *arg, int i)
{
    two_run *r = arg;
    int seen = 0;
    for (int k = 0; k < 8; k++)
        seen += atomic_load(&r->first[k]);
    atomic_store(&r->firsts_seen[i], seen);
    atomic_fetch_add(&r->second[i], 1);
}

static void two_check(const two_run *r, int n)
{
    for (int i = 0; i < n; i++) {
        assert_int_equal(atomic_load(&r->first[i]), 1);
        assert_int_equal(atomic_load(&r->second[i]), 1);
        if (atomic_load(&r->firsts_seen[i]) != n)
            fail_msg("index %d's second pass saw %d of %d first passes", i,
                     atomic_load(&r->firsts_seen[i]), n);
    }
}

static void two_nested(void *arg, int i)
{
    (void)arg;
    if (i == 0)
        kc_parallel_two(5, two_first, two_second, two_now, NULL, NULL);
}

static void test_parallel_two(void **state)
{
    (void)state;
    kc_threads_enter(2);
    for (int n = 1; n <= 8; n++) {
        two_run r;
        memset(&r, 0, sizeof r);
        double seconds[8] = {0};
        kc_parallel_two(n, two_first, two_second, &r, NULL, seconds);
        two_check(&r, n);
        for (int i = 0; i < n; i++)
            assert_true(seconds[i] >= 0);
    }
    for (int n = 1; n <= 3; n++) {
        two_run r;
        memset(&r, 0, sizeof r);
        double firsts[3] = {0};
        kc_parallel_two(n, two_first_slow, two_second, &r, firsts, NULL);
        two_check(&r, n);
        for (int i = 0; i < n; i++)
            if (firsts[i] < 1e-3)
                fail_msg("index %d of %d: first pass timed %g s, slept 2 ms", i, n, firsts[i]);
    }
    two_run r;
    memset(&r, 0, sizeof r);
    two_now = &r;
    kc_parallel(2, two_nested, NULL);
    two_check(&r, 5);
}

/* ------------------------------------------------ help between lanes */

typedef struct help_run {
    kc_help_board board;
    kc_claims claims;
    _Atomic int seen[300];
    _Atomic long by_part[4];
    int parts_seen;      /* kc_help_parts() lane 0 saw before posting */
    int idle_waited;     /* lane 0 found the other lane idle */
    int outside_parts;   /* kc_help_parts() after lane 0 finished */
} help_run;

/* Part `part`'s units, 0.2 ms each on lane 0 (the owner) so that the
 * helper has time to take some. */
static long help_units(void *arg, int part)
{
    help_run *r = arg;
    long ran = 0;
    kc_claim guess;
    for (kc_claim got = kc_claims_next(&r->claims, part, &guess); got.count > 0;
         got = kc_claims_next(&r->claims, part, &guess))
        for (int64_t u = got.first; u < got.first + got.count; u++, ran++) {
            atomic_fetch_add(&r->seen[u], 1);
            if (part == 0)
                usleep(200);
        }
    atomic_fetch_add(&r->by_part[part], ran);
    return ran;
}

/* Spin until *v reaches `want`, at most two seconds; whether it did. */
static int help_wait(_Atomic int *v, int want)
{
    double start = kc_now();
    while (atomic_load(v) < want)
        if (kc_now() - start > 2.0)
            return 0;
    return 1;
}

/* Lane 0 waits for lane 1 to be idle, then posts 300 units cut in the
 * parts kc_help_parts() says and runs part 0; lane 1 is done at once
 * and helps. */
static void help_lanes(void *arg, int lane)
{
    help_run *r = arg;
    kc_help_enter(&r->board, lane);
    help_wait(&r->board.started, r->board.lanes);
    if (lane == 0) {
        r->idle_waited = !r->board.enabled || help_wait(&r->board.idle, 1);
        r->parts_seen = kc_help_parts();
        kc_balance b;
        kc_balance_init(&b, 300, r->parts_seen, 1);
        kc_claims_init(&r->claims, &b, 4);
        r->claims.steal = 1;
        kc_help_task task = {.fn = help_units, .arg = r, .parts = b.parts};
        kc_help_open(&task);
        help_units(r, 0);
        kc_help_close(&task);
    }
    kc_help_finish();
    if (lane == 0)
        r->outside_parts = kc_help_parts();
}

static void expect_units_once(help_run *r)
{
    for (int u = 0; u < 300; u++)
        if (atomic_load(&r->seen[u]) != 1)
            fail_msg("unit %d ran %d times", u, atomic_load(&r->seen[u]));
}

static void test_help_lanes(void **state)
{
    (void)state;
    if (kc_threads_cpus() < 2)
        skip(); /* two lanes on one CPU: help is off (base/help.c) */
    kc_threads_enter(2);
    help_run *r = calloc(1, sizeof *r);
    assert_non_null(r);
    assert_int_equal(kc_help_parts(), 1); /* outside any lane */
    kc_help_board_init(&r->board, 2);
    kc_parallel(2, help_lanes, r);
    if (!r->idle_waited)
        fail_msg("lane 1 never became idle (a team of one thread?)");
    assert_int_equal(r->parts_seen, 2);
    expect_units_once(r);
    long helped = atomic_load(&r->by_part[1]);
    if (helped < 1)
        fail_msg("the idle lane ran none of the 300 units");
    assert_int_equal(kc_help_helped(&r->board), helped);
    assert_int_equal(atomic_load(&r->by_part[0]) + helped, 300);
    assert_int_equal(r->outside_parts, 1);
    assert_int_equal(atomic_load(&r->board.running), 0);
    assert_int_equal(atomic_load(&r->board.idle), 0);
    /* KC_HELP=0: nothing idle, one part, no unit helped */
    memset(r, 0, sizeof *r);
    setenv("KC_HELP", "0", 1);
    kc_help_board_init(&r->board, 2);
    unsetenv("KC_HELP");
    kc_parallel(2, help_lanes, r);
    assert_int_equal(r->parts_seen, 1);
    expect_units_once(r);
    assert_int_equal(kc_help_helped(&r->board), 0);
    free(r);
}

/* Three lanes on a team of two threads: one thread runs two lanes in
 * turn, and a lane done before every lane has begun does not wait for
 * the others (it would wait for the lane its own thread is still to
 * run). The run ends, every lane once. And a board for more lanes than
 * the process's CPUs has help off. */
typedef struct help_three {
    kc_help_board board;
    _Atomic int ran[3];
} help_three;

static void help_three_lanes(void *arg, int lane)
{
    help_three *r = arg;
    kc_help_enter(&r->board, lane);
    atomic_fetch_add(&r->ran[lane], 1);
    kc_help_finish();
}

static void test_help_team_smaller(void **state)
{
    (void)state;
    help_three r;
    memset(&r, 0, sizeof r);
    kc_threads_enter(2);
    kc_help_board_init(&r.board, 3);
    /* more lanes than this machine's CPUs would turn help off (below):
     * on, as on a larger machine, so that the lane done first checks
     * that every lane has begun */
    r.board.enabled = 1;
    kc_parallel(3, help_three_lanes, &r);
    for (int k = 0; k < 3; k++)
        assert_int_equal(atomic_load(&r.ran[k]), 1);
    assert_int_equal(atomic_load(&r.board.running), 0);
    /* more lanes than CPUs: no help (a helper descheduled inside a part
     * would hold its owner up) */
    int cpus = kc_threads_cpus();
    kc_help_board_init(&r.board, cpus + 1);
    assert_int_equal(r.board.enabled, 0);
    kc_help_board_init(&r.board, cpus < 2 ? 2 : cpus);
    assert_int_equal(r.board.enabled, cpus >= 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_even_start),
        cmocka_unit_test(test_cut_follows_speed),
        cmocka_unit_test(test_runs_averaged),
        cmocka_unit_test(test_least_units_kept),
        cmocka_unit_test(test_left_alone),
        cmocka_unit_test(test_claims_order),
        cmocka_unit_test(test_claims_victim),
        cmocka_unit_test(test_claims_threads),
        cmocka_unit_test(test_update_units),
        cmocka_unit_test(test_parallel_two),
        cmocka_unit_test(test_help_lanes),
        cmocka_unit_test(test_help_team_smaller),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
