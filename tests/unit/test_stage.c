/* Pipeline stages: a model cut into 2 or 3 node ranges, each run in its own
 * session fed only the tensors live at its cut, gives the whole model's
 * output bit for bit (the reduced ResNet50 of tests/apps: skip connections
 * cross the cuts). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kerasc.h"
#include "runtime/stage.h"

#define MODEL KC_TEST_DATA "/../apps/resnet50/model.keras"
#define INPUT KC_TEST_DATA "/../apps/resnet50/input_0.npy"

static size_t nbytes(const kc_tensor *t)
{
    size_t n = sizeof(float);
    for (int d = 0; d < kc_tensor_rank(t); d++)
        n *= (size_t)kc_tensor_dim(t, d);
    return n;
}

/* Run stages split at the given layer names, stage k's session made with
 * o[k]; returns the final tensor. With `graphs`, each stage session runs
 * three times, its outputs the same bits each time, and says its last run
 * replayed a graph. */
static kc_tensor *run_split(kc_model *m, kc_tensor *input, const char *const *cuts, int n_cuts,
                            const kc_session_options *const *o, int graphs)
{
    int bounds[8];
    bounds[0] = -1;
    for (int c = 0; c < n_cuts; c++)
        assert_int_equal(kc_model_find_cut(m, cuts[c], &bounds[c + 1]), KC_OK);
    bounds[n_cuts + 1] = kc_model_num_nodes(m) - 1;
    kc_tensor *carry[16] = {input};
    int n_carry = 1;
    for (int k = 0; k <= n_cuts; k++) {
        kc_stage_plan plan;
        assert_int_equal(kc_stage_plan_build(m, bounds[k] + 1, bounds[k + 1], &plan), KC_OK);
        assert_int_equal(plan.n_inputs, n_carry);
        kc_session *s = NULL;
        assert_int_equal(kc_session_new(m, o[k], &s), KC_OK);
        assert_int_equal(kc_session_set_stage(s, &plan), KC_OK);
        kc_tensor *out[16] = {0};
        if (kc_session_run_stage(s, kc_tensor_dim(input, 0), (const kc_tensor *const *)carry, out) != KC_OK)
            fail_msg("stage %d: %s", k, kc_last_error());
        for (int run = 1; graphs && run < 3; run++) {
            kc_tensor *again[16] = {0};
            if (kc_session_run_stage(s, kc_tensor_dim(input, 0), (const kc_tensor *const *)carry,
                                     again) != KC_OK)
                fail_msg("stage %d run %d: %s", k, run + 1, kc_last_error());
            for (int i = 0; i < plan.n_outputs; i++) {
                if (memcmp(kc_tensor_data(again[i]), kc_tensor_data(out[i]), nbytes(out[i])))
                    fail_msg("stage %d run %d: output %d differs from the first run", k, run + 1,
                             i);
                kc_tensor_free(again[i]);
            }
        }
        if (graphs && !strstr(kc_session_stats(s), "replays its"))
            fail_msg("stage %d: no graph replayed:\n%s", k, kc_session_stats(s));
        if (k > 0)
            for (int i = 0; i < n_carry; i++)
                kc_tensor_free(carry[i]);
        n_carry = plan.n_outputs;
        memcpy(carry, out, sizeof out);
        kc_session_free(s);
        kc_stage_plan_free(&plan);
    }
    assert_int_equal(n_carry, 1);
    return carry[0];
}

/* The model split at `cuts`, stage k's session made with o[k], against
 * the whole model run with o[0]: bit for bit, or within `tolerance` of
 * max(1, |whole|) when it is above 0. */
static void check_split_each(const char *const *cuts, int n_cuts,
                             const kc_session_options *const *o, int graphs, double tolerance)
{
    kc_model *m = NULL;
    kc_tensor *input = NULL, *whole = NULL;
    assert_int_equal(kc_model_load(MODEL, NULL, &m), KC_OK);
    assert_int_equal(kc_tensor_load_npy(INPUT, &input), KC_OK);
    kc_session *s = NULL;
    assert_int_equal(kc_session_new(m, o[0], &s), KC_OK);
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&input, 1, &whole, 1), KC_OK);
    kc_session_free(s);
    kc_tensor *split = run_split(m, input, cuts, n_cuts, o, graphs);
    assert_int_equal(nbytes(split), nbytes(whole));
    const float *a = kc_tensor_data(split), *b = kc_tensor_data(whole);
    size_t n = nbytes(whole) / sizeof(float);
    if (tolerance > 0) {
        double worst = 0, scale = 1;
        for (size_t i = 0; i < n; i++)
            scale = fabs(b[i]) > scale ? fabs(b[i]) : scale;
        for (size_t i = 0; i < n; i++)
            worst = fabs((double)a[i] - b[i]) > worst ? fabs((double)a[i] - b[i]) : worst;
        if (!(worst <= tolerance * scale))
            fail_msg("split at %s: off by %g, tolerance %g", cuts[0], worst, tolerance * scale);
    } else if (memcmp(a, b, nbytes(whole)))
        fail_msg("split at %s: not bit-identical to the whole run", cuts[0]);
    kc_tensor_free(split);
    kc_tensor_free(whole);
    kc_tensor_free(input);
    kc_model_free(m);
}

/* Every stage's session made with the same options o. */
static void check_split(const char *const *cuts, int n_cuts, const kc_session_options *o,
                        int graphs)
{
    const kc_session_options *each[8] = {o, o, o, o, o, o, o, o};
    check_split_each(cuts, n_cuts, each, graphs, 0);
}

static void test_two_stages(void **state)
{
    (void)state;
    static const char *const cuts[] = {"conv4_block6_out"};
    check_split(cuts, 1, NULL, 0);
}

/* A cut inside a residual block: the skip tensor crosses the cut too. */
static void test_three_stages_across_skips(void **state)
{
    (void)state;
    static const char *const cuts[] = {"conv2_block1_1_conv", "conv3_block2_2_conv"};
    check_split(cuts, 2, NULL, 0);
}

/* Stages on a GPU (the CPU backend posing as one) replay each stage as a
 * CUDA graph from its second run, the stage's inputs uploaded before the
 * launch (sched_graph.c): the same bits as the whole model's run. */
static void test_stages_on_gpu_graphs(void **state)
{
    (void)state;
    static const char *const cuts[] = {"conv2_block1_1_conv", "conv3_block2_2_conv"};
    setenv("KC_FAKE_GPUS", "1", 1);
    kc_session_options o = {.device = "/GPU:0", .strict_placement = 1};
    check_split(cuts, 2, &o, 1);
    unsetenv("KC_FAKE_GPUS");
}

/* The same through the scheduler with streamed weights. */
static void test_stage_under_residency(void **state)
{
    (void)state;
    static const char *const cuts[] = {"conv4_block6_out"};
    kc_session_options o = {.variables = "/CPU:0", .device_memory = 400 << 10};
    check_split(cuts, 1, &o, 0);
}

/* Cuts right after a ZeroPadding the host loop folds into the next
 * convolution or max pooling (conv1_pad, pool1_pad), and between a
 * convolution and the Add it would take as its sum: each stage of the
 * host loop keeps those rewrites on its own side of the cut. The folded
 * padding crossing a cut once left the value sent on unwritten and
 * corrupted the heap. */
static void test_cuts_at_host_rewrites(void **state)
{
    (void)state;
    static const char *const cuts[] = {"conv1_pad", "pool1_pad", "conv2_block1_3_conv",
                                       "conv2_block1_3_bn", "conv3_block1_3_conv"};
    for (int c = 0; c < 5; c++)
        check_split(&cuts[c], 1, NULL, 0);
    check_split(&cuts[3], 2, NULL, 0);
}

/* A stage on the host loop beside one through the scheduler (the CPU
 * backend posing as a GPU), cut between a convolution and its residual
 * Add: the host-only sum rewrite stays off, so the Add runs once, on the
 * later stage (before, the earlier stage added the residual and the later
 * one added it again). */
static void test_host_stage_beside_scheduled(void **state)
{
    (void)state;
    static const char *const cuts[] = {"conv2_block1_3_bn", "conv3_block2_3_conv"};
    setenv("KC_FAKE_GPUS", "1", 1);
    kc_session_options gpu = {.device = "/GPU:0", .strict_placement = 1};
    const kc_session_options *host_first[] = {NULL, &gpu, NULL};
    check_split_each(cuts, 2, host_first, 0, 1e-4);
    const kc_session_options *gpu_first[] = {&gpu, NULL, &gpu};
    check_split_each(cuts, 2, gpu_first, 0, 1e-4);
    unsetenv("KC_FAKE_GPUS");
}

/* "/CPU:0" as the device (or where variables live) places nothing: the
 * session runs on the host loop with all its rewrites, the same bits as
 * no options; "/GPU:0" goes through the scheduler. */
static void test_host_cpu_device_is_host_loop(void **state)
{
    (void)state;
    kc_model *m = NULL;
    kc_tensor *input = NULL, *plain = NULL, *cpu = NULL;
    assert_int_equal(kc_model_load(MODEL, NULL, &m), KC_OK);
    assert_int_equal(kc_tensor_load_npy(INPUT, &input), KC_OK);
    kc_session *s = NULL;
    assert_int_equal(kc_session_new(m, NULL, &s), KC_OK);
    assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&input, 1, &plain, 1), KC_OK);
    int plain_fused = kc_session_fused_nodes(s);
    kc_session_free(s);
    const char *host[] = {"/CPU:0", "/device:CPU:0", "cpu:0"};
    for (int k = 0; k < 3; k++) {
        kc_session_options o = {.device = host[k], .variables = k == 1 ? "/CPU:0" : NULL};
        assert_int_equal(kc_session_new(m, &o, &s), KC_OK);
        assert_int_equal(kc_session_run(s, (const kc_tensor *const *)&input, 1, &cpu, 1), KC_OK);
        assert_int_equal(kc_session_fused_nodes(s), plain_fused);
        if (memcmp(kc_tensor_data(cpu), kc_tensor_data(plain), nbytes(plain)))
            fail_msg("--device %s: not the bits of a session without options", host[k]);
        kc_tensor_free(cpu);
        kc_session_free(s);
    }
    setenv("KC_FAKE_GPUS", "1", 1);
    kc_session_options gpu = {.device = "/GPU:0", .strict_placement = 1};
    assert_int_equal(kc_session_new(m, &gpu, &s), KC_OK);
    assert_true(kc_session_fused_nodes(s) < plain_fused); /* the portable rewrites only */
    kc_session_free(s);
    unsetenv("KC_FAKE_GPUS");
    kc_tensor_free(plain);
    kc_tensor_free(input);
    kc_model_free(m);
}

static void test_live_values(void **state)
{
    (void)state;
    kc_model *m = NULL;
    assert_int_equal(kc_model_load(MODEL, NULL, &m), KC_OK);
    int *v = NULL, n = 0, cut;
    assert_int_equal(kc_model_find_cut(m, "conv2_block1_1_conv", &cut), KC_OK);
    assert_int_equal(kc_model_live_values(m, cut + 1, &v, &n), KC_OK);
    assert_int_equal(n, 2); /* the block's input (skip) and conv1's output */
    free(v);
    assert_int_equal(kc_model_find_cut(m, "no_such_layer", &cut), KC_ERR_ARG);
    kc_stage_plan p;
    assert_int_equal(kc_stage_plan_build(m, 5, 2, &p), KC_ERR_ARG);
    kc_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_live_values),
        cmocka_unit_test(test_cuts_at_host_rewrites),
        cmocka_unit_test(test_host_stage_beside_scheduled),
        cmocka_unit_test(test_host_cpu_device_is_host_loop),
        cmocka_unit_test(test_two_stages),
        cmocka_unit_test(test_three_stages_across_skips),
        cmocka_unit_test(test_stages_on_gpu_graphs),
        cmocka_unit_test(test_stage_under_residency),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
