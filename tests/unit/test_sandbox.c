/* Tests of the parser sandbox (src/base/sandbox.c): results, errors and
 * crashes of the child come back as they should, and a child forked while
 * another thread held a lock it needs (it then blocks forever, using no
 * CPU) is forked again instead of hanging the parent until its deadline. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/sandbox.h"

static kc_status write_hello(void *arg, int fd)
{
    (void)arg;
    return write(fd, "hello", 5) == 5 ? KC_OK : kc_fail(KC_ERR_IO, "write");
}

static kc_status fail_politely(void *arg, int fd)
{
    (void)arg;
    (void)fd;
    return kc_fail(KC_ERR_FORMAT, "x.h5: bad superblock");
}

static kc_status crash(void *arg, int fd)
{
    (void)arg;
    (void)fd;
    raise(SIGSEGV);
    return KC_OK;
}

/* The lock a "library" takes inside the child's work. */
static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;

static kc_status write_under_lock(void *arg, int fd)
{
    (void)arg;
    pthread_mutex_lock(&lib_lock);
    kc_status st = write_hello(NULL, fd);
    pthread_mutex_unlock(&lib_lock);
    return st;
}

/* Another thread of the parent: holds lib_lock from start until the
 * parent has been waiting for hold_s seconds. */
typedef struct holder {
    pthread_t thread;
    pthread_mutex_t gate;
    pthread_cond_t cond;
    int locked;
    double hold_s;
} holder;

static void *hold_lock(void *arg)
{
    holder *h = arg;
    pthread_mutex_lock(&lib_lock);
    pthread_mutex_lock(&h->gate);
    h->locked = 1;
    pthread_cond_signal(&h->cond);
    pthread_mutex_unlock(&h->gate);
    struct timespec ts = {(time_t)h->hold_s, (long)((h->hold_s - (time_t)h->hold_s) * 1e9)};
    nanosleep(&ts, NULL);
    pthread_mutex_unlock(&lib_lock);
    return NULL;
}

static void holder_start(holder *h, double hold_s)
{
    memset(h, 0, sizeof *h);
    h->hold_s = hold_s;
    pthread_mutex_init(&h->gate, NULL);
    pthread_cond_init(&h->cond, NULL);
    assert_int_equal(pthread_create(&h->thread, NULL, hold_lock, h), 0);
    pthread_mutex_lock(&h->gate);
    while (!h->locked)
        pthread_cond_wait(&h->cond, &h->gate);
    pthread_mutex_unlock(&h->gate);
}

static void holder_join(holder *h)
{
    pthread_join(h->thread, NULL);
    pthread_mutex_destroy(&h->gate);
    pthread_cond_destroy(&h->cond);
}

static void expect_hello(int fd)
{
    char buf[16] = {0};
    assert_int_equal(read(fd, buf, sizeof buf - 1), 5);
    assert_string_equal(buf, "hello");
    close(fd);
}

static void test_result_comes_back(void **state)
{
    (void)state;
    int fd = -1;
    assert_int_equal(kc_sandbox_run("x.h5", "the reader", write_hello, NULL, 10, &fd), KC_OK);
    expect_hello(fd);
}

static void test_error_comes_back(void **state)
{
    (void)state;
    int fd = -1;
    assert_int_equal(kc_sandbox_run("x.h5", "the reader", fail_politely, NULL, 10, &fd),
                     KC_ERR_FORMAT);
    assert_int_equal(fd, -1);
    assert_string_equal(kc_last_error(), "x.h5: bad superblock");
}

static void test_crash_contained(void **state)
{
    (void)state;
    int fd = -1;
    assert_int_equal(kc_sandbox_run("x.h5", "the reader", crash, NULL, 10, &fd), KC_ERR_FORMAT);
    assert_non_null(strstr(kc_last_error(), "crashed (signal 11)"));
}

/* write_under_lock in the sandbox, with stalls seen after stall_s and
 * lib_lock held by another thread for hold_s from before the first fork;
 * *took: the run's seconds. */
static kc_status run_while_held(const char *stall_s, double hold_s, int *fd, double *took)
{
    setenv("KC_SANDBOX_STALL_SECONDS", stall_s, 1);
    holder h;
    holder_start(&h, hold_s);
    double t0 = kc_now();
    kc_status st = kc_sandbox_run("x.h5", "the reader", write_under_lock, NULL, 60, fd);
    *took = kc_now() - t0;
    holder_join(&h);
    unsetenv("KC_SANDBOX_STALL_SECONDS");
    return st;
}

/* The first child inherits lib_lock held and blocks; the holder lets go
 * before the stall is seen, so the second fork's child runs to the end. */
static void test_blocked_child_forked_again(void **state)
{
    (void)state;
    int fd = -1;
    double took = 0;
    assert_int_equal(run_while_held("1", 0.3, &fd, &took), KC_OK);
    expect_hello(fd);
    /* One stall (1 s and a poll), not the 130 s wall deadline. */
    assert_true(took >= 1.0);
    assert_true(took < 20.0);
}

/* A lock held through every fork: a clear error after the tries, soon. */
static void test_always_blocked_reported(void **state)
{
    (void)state;
    int fd = -1;
    double took = 0;
    assert_int_equal(run_while_held("0.5", 5.0, &fd, &took), KC_ERR_IO);
    assert_int_equal(fd, -1);
    assert_non_null(strstr(kc_last_error(), "x.h5: the reader blocked without using the CPU"));
    assert_null(strchr(kc_last_error(), '\n'));
    assert_true(took < 5.0);
}

/* A child busy on the CPU past the stall time is left to finish. */
static kc_status spin_then_hello(void *arg, int fd)
{
    (void)arg;
    double until = kc_now() + 1.5;
    volatile double x = 0;
    while (kc_now() < until)
        for (int i = 0; i < 10000; i++)
            x += i;
    return write_hello(NULL, fd);
}

static void test_busy_child_not_stalled(void **state)
{
    (void)state;
    setenv("KC_SANDBOX_STALL_SECONDS", "0.5", 1);
    int fd = -1;
    assert_int_equal(kc_sandbox_run("x.h5", "the reader", spin_then_hello, NULL, 60, &fd),
                     KC_OK);
    expect_hello(fd);
    unsetenv("KC_SANDBOX_STALL_SECONDS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_result_comes_back),
        cmocka_unit_test(test_error_comes_back),
        cmocka_unit_test(test_crash_contained),
        cmocka_unit_test(test_blocked_child_forked_again),
        cmocka_unit_test(test_always_blocked_reported),
        cmocka_unit_test(test_busy_child_not_stalled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
