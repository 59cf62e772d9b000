/* Every op in the registry can run on the CPU: a layer kerasc can load
 * but not execute would be a silent gap between summary and run. And the
 * padding arithmetic the convolution and pooling kernels share. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels/kernel.h"
#include "ops/op.h"

static void test_every_registered_op_has_a_kernel(void **state)
{
    (void)state;
    int missing = 0;
    for (int i = 0; i < kc_op_count(); i++) {
        const kc_op_def *d = kc_op_at(i);
        if (d->flags & KC_OPF_INPUT)
            continue; /* InputLayer is a model input, never executed */
        if (!kc_kernel_lookup(d)) {
            print_error("no CPU kernel for %s%s\n", (d->flags & KC_OPF_OPS_NODE) ? "ops." : "",
                        d->class_name);
            missing++;
        }
    }
    assert_int_equal(missing, 0);
}

/* TensorFlow's padding before an axis (kc_conv_pad_before): "same" puts
 * the odd pixel after (224 -> 112 at stride 2 pads 0 before, 1 after),
 * never pads below zero; "causal" everything before; "valid" nothing. */
static void test_conv_pad_before(void **state)
{
    (void)state;
    static const struct {
        int64_t in, out, extent, stride;
        int mode;
        int64_t want;
    } cases[] = {
        {224, 112, 3, 2, 1, 0},  /* total 1: after */
        {225, 113, 3, 2, 1, 1},  /* total 2 */
        {7, 7, 3, 1, 1, 1},
        {10, 10, 9, 1, 1, 4},    /* a 5-tap kernel dilated by 2 */
        {299, 150, 3, 2, 1, 1},  /* total 2: InceptionV3's odd size */
        {6, 3, 1, 2, 1, 0},      /* total -1: none */
        {35, 17, 3, 2, 0, 0},    /* valid */
        {20, 20, 3, 1, 2, 2},    /* causal: extent - 1 */
        {20, 20, 7, 1, 2, 6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(kc_conv_pad_before(cases[i].in, cases[i].out, cases[i].extent,
                                            cases[i].stride, cases[i].mode),
                         cases[i].want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_registered_op_has_a_kernel),
        cmocka_unit_test(test_conv_pad_before),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
