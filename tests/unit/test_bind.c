/* Weight binding through the public API on small fixture files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "graph/graph.h"
#include "model/model_internal.h"

static const kc_layer *find_layer(const kc_model *m, const char *name)
{
    for (int i = 0; i < m->graph->n_layers; i++)
        if (strcmp(m->graph->layers[i]->name, name) == 0)
            return m->graph->layers[i];
    return NULL;
}

/* Fixture values are 100 * (gate position in the file) + element index
 * (tools/make_keras1_fixtures.py). */
static float fixture(int gate_in_file, int index) { return (float)(100 * gate_in_file + index); }

static void test_keras1_rnn_gates_fused(void **state)
{
    (void)state;
    kc_model *m = NULL;
    kc_status st = kc_model_load(KC_TEST_DATA "/h5/keras1_rnn.h5", NULL, &m);
    if (st != KC_OK)
        print_error("%s\n", kc_last_error());
    assert_int_equal(st, KC_OK);
    const kc_layer *lstm = find_layer(m, "lstm_1");
    assert_non_null(lstm);
    assert_int_equal(lstm->n_weights, 3);
    /* kernel (3, 8): columns are gates i, f, c, o of 2 units; the file
     * stores i, c, f, o, so column block 1 (f) comes from file gate 2. */
    const kc_weight *k = &lstm->weights[0];
    assert_int_equal(k->shape.dims[0], 3);
    assert_int_equal(k->shape.dims[1], 8);
    static const int file_gate[4] = {0, 2, 1, 3};
    for (int row = 0; row < 3; row++)
        for (int g = 0; g < 4; g++)
            for (int u = 0; u < 2; u++)
                assert_true(k->data[row * 8 + g * 2 + u] == fixture(file_gate[g], row * 2 + u));
    const kc_weight *b = &lstm->weights[2];
    assert_int_equal(b->shape.dims[0], 8);
    assert_true(b->data[2] == fixture(2, 0)); /* f gate bias from file gate 2 */
    /* GRU keeps z, r, h order. */
    const kc_layer *gru = find_layer(m, "gru_1");
    assert_non_null(gru);
    const kc_weight *rk = &gru->weights[1];
    assert_int_equal(rk->shape.dims[1], 6);
    assert_true(rk->data[0 * 6 + 4] == fixture(2, 0));
    assert_true(rk->data[1 * 6 + 3] == fixture(1, 3));
    kc_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keras1_rnn_gates_fused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
