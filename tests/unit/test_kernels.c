/* Every op in the registry can run on the CPU: a layer kerasc can load
 * but not execute would be a silent gap between summary and run. */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_registered_op_has_a_kernel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
