/* Device strings, placement rules and the residency planner, without
 * running a model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "device/devspec.h"
#include "runtime/residency.h"

static void expect_spec(const char *text, const char *canonical, kc_device_type type, int index,
                        const char *job, int task)
{
    kc_devspec d;
    assert_int_equal(kc_devspec_parse(text, &d), KC_OK);
    char buf[160];
    kc_devspec_format(&d, buf, sizeof buf);
    assert_string_equal(buf, canonical);
    assert_int_equal(d.type, type);
    assert_int_equal(d.index, index);
    assert_string_equal(d.job, job);
    assert_int_equal(d.task, task);
}

static void test_devspec_forms(void **state)
{
    (void)state;
    expect_spec("/CPU:0", "/CPU:0", KC_DEVICE_CPU, 0, "", -1);
    expect_spec("/GPU:0", "/GPU:0", KC_DEVICE_GPU, 0, "", -1);
    expect_spec("/device:GPU:1", "/GPU:1", KC_DEVICE_GPU, 1, "", -1);
    expect_spec("/gpu:2", "/GPU:2", KC_DEVICE_GPU, 2, "", -1);
    expect_spec("cpu:0", "/CPU:0", KC_DEVICE_CPU, 0, "", -1);
    expect_spec("/job:worker/task:1/GPU:0", "/job:worker/task:1/device:GPU:0", KC_DEVICE_GPU, 0,
                "worker", 1);
    expect_spec("/job:worker/replica:0/task:3/device:CPU:0",
                "/job:worker/replica:0/task:3/device:CPU:0", KC_DEVICE_CPU, 0, "worker", 3);
    kc_devspec d;
    assert_int_equal(kc_devspec_parse("/job:ps/task:0", &d), KC_OK);
    assert_false(d.has_device);
    assert_false(kc_devspec_is_local(&d));
}

static void test_devspec_errors(void **state)
{
    (void)state;
    static const char *const bad[] = {"",         "/",         "/TPU:0",     "/GPU:",
                                      "/GPU:x",   "/GPU:0/",   "/task:1/GPU:0", "/GPU:0/CPU:0",
                                      "//GPU:0",  "/job:/GPU:0", "/GPU:-1",   "GPU",
                                      "/job:w/task:1/task:2", "/GPU:1234567",
                                      "replica:2/device:CPU:0", NULL};
    for (int i = 0; bad[i]; i++) {
        kc_devspec d;
        if (kc_devspec_parse(bad[i], &d) == KC_OK)
            fail_msg("'%s' parsed", bad[i]);
        assert_non_null(strstr(kc_last_error(), "device"));
    }
}

static kc_res_item item(const char *name, size_t bytes, double flops)
{
    return (kc_res_item){.name = name, .bytes = bytes, .flops = flops};
}

static void test_residency_everything_fits(void **state)
{
    (void)state;
    kc_res_item items[2] = {item("a", 1000, 1e6), item("b", 2000, 1e6)};
    kc_res_request req = {.device = "/GPU:0", .budget = 10000, .fixed_bytes = 4000,
                          .activation_bytes = 4000, .variables_on_host = 1,
                          .link_bytes_per_s = 1e9, .flops_per_s = 1e10};
    kc_res_plan plan;
    assert_int_equal(kc_residency_plan(&req, items, 2, &plan), KC_OK);
    assert_int_equal(plan.n_streamed, 0);
    assert_int_equal(plan.depth, 0);
    assert_int_equal(items[0].mode, KC_WMODE_RESIDENT);
    assert_int_equal(plan.device_bytes, 7000);
}

/* A big Dense (little work per byte) stays resident; the convolutions,
 * which reuse each weight many times, stream. */
static void test_residency_prefers_dense_resident(void **state)
{
    (void)state;
    kc_res_item items[4] = {item("conv1", 1000, 1e9), item("conv2", 1000, 1e9),
                            item("conv3", 1000, 1e9), item("fc", 3000, 6e3)};
    kc_res_request req = {.device = "/GPU:0", .budget = 1000 + 3000 + 2 * 1000 + 10,
                          .fixed_bytes = 1000, .activation_bytes = 1000, .variables_on_host = 1,
                          .link_bytes_per_s = 1e9, .flops_per_s = 1e10};
    kc_res_plan plan;
    assert_int_equal(kc_residency_plan(&req, items, 4, &plan), KC_OK);
    assert_int_equal(items[3].mode, KC_WMODE_RESIDENT);
    assert_int_equal(items[0].mode, KC_WMODE_STREAMED);
    assert_int_equal(plan.n_streamed, 3);
    assert_int_equal(plan.depth, 2);
    assert_true(plan.device_bytes <= req.budget);
    assert_int_equal(plan.streamed_bytes, 3000);
}

static void test_residency_deeper_ring_when_room(void **state)
{
    (void)state;
    kc_res_item items[5] = {item("a", 1000, 1e9), item("b", 1000, 1e9), item("c", 1000, 1e9),
                            item("d", 1000, 1e9), item("e", 1000, 1e9)};
    kc_res_request req = {.device = "/GPU:0", .budget = 3500, .fixed_bytes = 0,
                          .variables_on_host = 1, .link_bytes_per_s = 1e9, .flops_per_s = 1e10};
    kc_res_plan plan;
    assert_int_equal(kc_residency_plan(&req, items, 5, &plan), KC_OK);
    assert_true(plan.device_bytes <= 3500);
    assert_true(plan.depth >= 2);
    req.max_depth = 1;
    assert_int_equal(kc_residency_plan(&req, items, 5, &plan), KC_OK);
    assert_int_equal(plan.depth, 1);
}

static void test_residency_too_small(void **state)
{
    (void)state;
    kc_res_item items[2] = {item("small", 100, 1e6), item("huge_dense", 5000, 1e4)};
    kc_res_request req = {.device = "/GPU:0", .budget = 4000, .fixed_bytes = 1000,
                          .activation_bytes = 1000, .variables_on_host = 1,
                          .link_bytes_per_s = 1e9, .flops_per_s = 1e10};
    kc_res_plan plan;
    assert_int_equal(kc_residency_plan(&req, items, 2, &plan), KC_ERR_NOMEM);
    assert_non_null(strstr(kc_last_error(), "minimum 6000 bytes"));
    assert_non_null(strstr(kc_last_error(), "huge_dense"));
    /* variables on the device: everything must fit */
    req.variables_on_host = 0;
    req.budget = 6000;
    assert_int_equal(kc_residency_plan(&req, items, 2, &plan), KC_ERR_NOMEM);
    assert_non_null(strstr(kc_last_error(), "minimum 6100 bytes"));
    req.budget = 6100;
    assert_int_equal(kc_residency_plan(&req, items, 2, &plan), KC_OK);
    assert_int_equal(plan.n_streamed, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devspec_forms),
        cmocka_unit_test(test_devspec_errors),
        cmocka_unit_test(test_residency_everything_fits),
        cmocka_unit_test(test_residency_prefers_dense_resident),
        cmocka_unit_test(test_residency_deeper_ring_when_room),
        cmocka_unit_test(test_residency_too_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
