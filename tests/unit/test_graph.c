/* Graph building from hand-written configs in every encoding Keras has
 * used: the cases real files exercise only partially. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "graph/build.h"

static kc_graph *build(const char *json, int major, kc_status want)
{
    cJSON *doc = cJSON_Parse(json);
    assert_non_null(doc);
    kc_parse_env env = {.keras_major = major};
    kc_graph *g = NULL;
    kc_status st = kc_build_graph(doc, &env, &g);
    if (st != want)
        print_error("status %d, want %d: %s\n", st, want, kc_last_error());
    assert_int_equal(st, want);
    if (want != KC_OK)
        assert_true(strlen(kc_last_error()) > 0);
    cJSON_Delete(doc);
    return g;
}

static const kc_shape *out_shape(const kc_graph *g, int i)
{
    return &g->values[g->outputs[i]].shape;
}

static void test_keras2_functional_shared_layer(void **state)
{
    (void)state;
    /* One Dense applied to two inputs (a siamese tower), outputs merged. */
    const char *j =
        "{\"class_name\":\"Model\",\"config\":{\"name\":\"m\",\"layers\":["
        "{\"class_name\":\"InputLayer\",\"name\":\"a\",\"config\":{\"name\":\"a\",\"batch_input_shape\":[null,8]},\"inbound_nodes\":[]},"
        "{\"class_name\":\"InputLayer\",\"name\":\"b\",\"config\":{\"name\":\"b\",\"batch_input_shape\":[null,8]},\"inbound_nodes\":[]},"
        "{\"class_name\":\"Dense\",\"name\":\"tower\",\"config\":{\"name\":\"tower\",\"units\":4},"
        " \"inbound_nodes\":[[[\"a\",0,0,{}]],[[\"b\",0,0,{}]]]},"
        "{\"class_name\":\"Subtract\",\"name\":\"diff\",\"config\":{\"name\":\"diff\"},"
        " \"inbound_nodes\":[[[\"tower\",0,0,{}],[\"tower\",1,0,{}]]]}],"
        "\"input_layers\":[[\"a\",0,0],[\"b\",0,0]],\"output_layers\":[[\"diff\",0,0]]}}";
    kc_graph *g = build(j, 2, KC_OK);
    assert_int_equal(g->n_inputs, 2);
    assert_int_equal(g->n_nodes, 3); /* tower twice + diff */
    assert_int_equal(out_shape(g, 0)->dims[1], 4);
    int64_t total, trainable;
    kc_graph_count_params(g, g->root, &total, &trainable);
    assert_int_equal(total, 8 * 4 + 4); /* shared weights counted once */
    kc_graph_free(g);
}

static void test_keras3_ops_node_with_constant(void **state)
{
    (void)state;
    /* x + 3.0 as a keras.src.ops.numpy.Add entry (MobileNetV3 style). */
    const char *j =
        "{\"module\":\"keras.src.models.functional\",\"class_name\":\"Functional\",\"config\":{\"name\":\"f\",\"layers\":["
        "{\"module\":\"keras.layers\",\"class_name\":\"InputLayer\",\"name\":\"x\",\"config\":{\"name\":\"x\",\"batch_shape\":[null,5]},\"inbound_nodes\":[]},"
        "{\"module\":\"keras.src.ops.numpy\",\"class_name\":\"Add\",\"name\":\"add\",\"config\":{\"name\":\"add\"},"
        " \"inbound_nodes\":[{\"args\":[{\"class_name\":\"__keras_tensor__\",\"config\":{\"shape\":[null,5],\"keras_history\":[\"x\",0,0]}},3.0],\"kwargs\":{}}]},"
        "{\"module\":\"keras.layers\",\"class_name\":\"Add\",\"name\":\"add_layer\",\"config\":{\"name\":\"add_layer\"},"
        " \"inbound_nodes\":[{\"args\":[[{\"class_name\":\"__keras_tensor__\",\"config\":{\"keras_history\":[\"add\",0,0]}},"
        "  {\"class_name\":\"__keras_tensor__\",\"config\":{\"keras_history\":[\"x\",0,0]}}]],\"kwargs\":{}}]}],"
        "\"input_layers\":[\"x\",0,0],\"output_layers\":[\"add_layer\",0,0]}}";
    kc_graph *g = build(j, 3, KC_OK);
    assert_int_equal(g->n_nodes, 2);
    assert_int_equal(g->nodes[0].n_consts, 1);
    assert_true(g->nodes[0].consts[0].data[0] == 3.0f);
    assert_int_equal(g->nodes[1].n_inputs, 2);
    assert_int_equal(out_shape(g, 0)->dims[1], 5);
    kc_graph_free(g);
}

/* A nested Functional called twice (shared sub-model) inside a Keras 3
 * model, with the +1 node offset on output_layers. */
static void test_nested_functional_called_twice(void **state)
{
    (void)state;
    const char *inner =
        "{\"module\":\"keras.src.models.functional\",\"class_name\":\"Functional\",\"name\":\"enc\","
        "\"config\":{\"name\":\"enc\",\"layers\":["
        "{\"module\":\"keras.layers\",\"class_name\":\"InputLayer\",\"name\":\"ei\",\"config\":{\"name\":\"ei\",\"batch_shape\":[null,6]},\"inbound_nodes\":[]},"
        "{\"module\":\"keras.layers\",\"class_name\":\"Dense\",\"name\":\"ed\",\"config\":{\"name\":\"ed\",\"units\":3},"
        " \"inbound_nodes\":[{\"args\":[{\"class_name\":\"__keras_tensor__\",\"config\":{\"keras_history\":[\"ei\",0,0]}}],\"kwargs\":{}}]}],"
        "\"input_layers\":[[\"ei\",0,0]],\"output_layers\":[[\"ed\",0,0]]},"
        "\"inbound_nodes\":["
        " {\"args\":[{\"class_name\":\"__keras_tensor__\",\"config\":{\"keras_history\":[\"p\",0,0]}}],\"kwargs\":{}},"
        " {\"args\":[{\"class_name\":\"__keras_tensor__\",\"config\":{\"keras_history\":[\"q\",0,0]}}],\"kwargs\":{}}]}";
    char j[8192];
    snprintf(j, sizeof j,
             "{\"module\":\"keras.src.models.functional\",\"class_name\":\"Functional\",\"config\":{\"name\":\"outer\",\"layers\":["
             "{\"module\":\"keras.layers\",\"class_name\":\"InputLayer\",\"name\":\"p\",\"config\":{\"name\":\"p\",\"batch_shape\":[null,6]},\"inbound_nodes\":[]},"
             "{\"module\":\"keras.layers\",\"class_name\":\"InputLayer\",\"name\":\"q\",\"config\":{\"name\":\"q\",\"batch_shape\":[null,6]},\"inbound_nodes\":[]},"
             "%s],"
             "\"input_layers\":[[\"p\",0,0],[\"q\",0,0]],\"output_layers\":[[\"enc\",1,0],[\"enc\",2,0]]}}",
             inner);
    kc_graph *g = build(j, 3, KC_OK);
    assert_int_equal(g->n_outputs, 2);
    assert_int_equal(g->n_nodes, 2); /* the inner Dense, twice */
    assert_ptr_equal(g->nodes[0].layer, g->nodes[1].layer);
    assert_int_not_equal(g->outputs[0], g->outputs[1]);
    int64_t total, trainable;
    kc_graph_count_params(g, g->root, &total, &trainable);
    assert_int_equal(total, 6 * 3 + 3);
    kc_graph_free(g);
}

static void test_old_sequential_bare_list(void **state)
{
    (void)state;
    /* Keras 1 / early Keras 2: config is a bare list, no InputLayer. */
    const char *j =
        "{\"class_name\":\"Sequential\",\"config\":["
        "{\"class_name\":\"Convolution2D\",\"config\":{\"name\":\"c\",\"nb_filter\":4,\"nb_row\":3,\"nb_col\":3,"
        " \"border_mode\":\"same\",\"dim_ordering\":\"tf\",\"batch_input_shape\":[null,10,10,1]}},"
        "{\"class_name\":\"Flatten\",\"config\":{\"name\":\"f\"}},"
        "{\"class_name\":\"Dense\",\"config\":{\"name\":\"d\",\"output_dim\":2,\"activation\":\"softmax\"}}]}";
    kc_graph *g = build(j, 1, KC_OK);
    assert_int_equal(out_shape(g, 0)->dims[1], 2);
    assert_int_equal(g->layers[1]->n_specs, 2);
    assert_int_equal(g->layers[1]->specs[0].shape.dims[3], 4);
    assert_string_equal(g->input_names[0], "c_input");
    kc_graph_free(g);
}

static void test_dict_io_and_tf_same_padding(void **state)
{
    (void)state;
    /* output_layers as a dict; Conv2D "same" stride 2 on odd size. */
    const char *j =
        "{\"module\":\"keras.src.models.functional\",\"class_name\":\"Functional\",\"config\":{\"name\":\"f\",\"layers\":["
        "{\"module\":\"keras.layers\",\"class_name\":\"InputLayer\",\"name\":\"x\",\"config\":{\"name\":\"x\",\"batch_shape\":[null,7,7,3]},\"inbound_nodes\":[]},"
        "{\"module\":\"keras.layers\",\"class_name\":\"Conv2D\",\"name\":\"c\",\"config\":{\"name\":\"c\",\"filters\":8,\"kernel_size\":[3,3],\"strides\":[2,2],\"padding\":\"same\"},"
        " \"inbound_nodes\":[{\"args\":[{\"class_name\":\"__keras_tensor__\",\"config\":{\"keras_history\":[\"x\",0,0]}}],\"kwargs\":{}}]}],"
        "\"input_layers\":{\"x\":[\"x\",0,0]},\"output_layers\":{\"y\":[\"c\",0,0]}}}";
    kc_graph *g = build(j, 3, KC_OK);
    const kc_shape *s = out_shape(g, 0);
    assert_int_equal(s->dims[1], 4);
    assert_int_equal(s->dims[3], 8);
    kc_graph_free(g);
}

static void test_refusals(void **state)
{
    (void)state;
    build("{\"class_name\":\"Sequential\",\"config\":{\"layers\":["
          "{\"class_name\":\"InputLayer\",\"config\":{\"batch_input_shape\":[null,2]}},"
          "{\"class_name\":\"Lambda\",\"config\":{\"name\":\"l\",\"function\":[\"4wEAAA\",null,null]}}]}}",
          2, KC_ERR_REFUSED);
    assert_non_null(strstr(kc_last_error(), "layer 'l' (Lambda)"));
    build("{\"class_name\":\"Sequential\",\"config\":{\"layers\":["
          "{\"class_name\":\"InputLayer\",\"config\":{\"batch_input_shape\":[null,2]}},"
          "{\"module\":\"mypkg\",\"class_name\":\"Fancy\",\"registered_name\":\"mypkg>Fancy\",\"config\":{\"name\":\"z\"}}]}}",
          3, KC_ERR_REFUSED);
    build("{\"class_name\":\"Sequential\",\"config\":{\"layers\":["
          "{\"class_name\":\"InputLayer\",\"config\":{\"batch_input_shape\":[null,2]}},"
          "{\"class_name\":\"Merge\",\"config\":{\"name\":\"m\",\"mode\":\"cos\"}}]}}",
          1, KC_ERR_UNSUPPORTED);
    /* A reference to a layer that does not exist. */
    build("{\"class_name\":\"Model\",\"config\":{\"name\":\"m\",\"layers\":["
          "{\"class_name\":\"InputLayer\",\"name\":\"a\",\"config\":{\"batch_input_shape\":[null,8]},\"inbound_nodes\":[]},"
          "{\"class_name\":\"Dense\",\"name\":\"d\",\"config\":{\"units\":4},\"inbound_nodes\":[[[\"ghost\",0,0,{}]]]}],"
          "\"input_layers\":[[\"a\",0,0]],\"output_layers\":[[\"d\",0,0]]}}",
          2, KC_ERR_FORMAT);
    /* Dense on a rank-1 (batch-only) input cannot infer its kernel. */
    build("{\"class_name\":\"Sequential\",\"config\":{\"layers\":["
          "{\"class_name\":\"InputLayer\",\"config\":{\"batch_input_shape\":[null]}},"
          "{\"class_name\":\"Dense\",\"config\":{\"name\":\"d\",\"units\":3}}]}}",
          2, KC_ERR_SHAPE);
}

static void test_nesting_limit(void **state)
{
    (void)state;
    /* 40 Sequentials nested in one another: past the depth limit. */
    char *j = malloc(1 << 16);
    assert_non_null(j);
    size_t n = 0;
    for (int i = 0; i < 40; i++)
        n += (size_t)sprintf(j + n, "{\"class_name\":\"Sequential\",\"config\":{\"name\":\"s%d\",\"layers\":[", i);
    n += (size_t)sprintf(j + n, "{\"class_name\":\"Dense\",\"config\":{\"units\":1,\"batch_input_shape\":[null,1]}}");
    for (int i = 0; i < 40; i++)
        n += (size_t)sprintf(j + n, "]}}");
    build(j, 2, KC_ERR_LIMIT);
    free(j);
}

static void test_keras3_getitem_slice(void **state)
{
    (void)state;
    /* x[:, 0] as a keras.src.ops.numpy.GetItem entry with __slice__ args. */
    const char *j =
        "{\"module\":\"keras.src.models.functional\",\"class_name\":\"Functional\",\"config\":{\"name\":\"f\",\"layers\":["
        "{\"module\":\"keras.layers\",\"class_name\":\"InputLayer\",\"name\":\"x\",\"config\":{\"name\":\"x\",\"batch_shape\":[null,4,5]},\"inbound_nodes\":[]},"
        "{\"module\":\"keras.src.ops.numpy\",\"class_name\":\"GetItem\",\"name\":\"get_item\",\"config\":{\"name\":\"get_item\"},"
        " \"inbound_nodes\":[{\"args\":[{\"class_name\":\"__keras_tensor__\",\"config\":{\"keras_history\":[\"x\",0,0]}},"
        "  [{\"class_name\":\"__slice__\",\"config\":{\"start\":null,\"stop\":null,\"step\":null}},0]],\"kwargs\":{}}]}],"
        "\"input_layers\":[\"x\",0,0],\"output_layers\":[\"get_item\",0,0]}}";
    kc_graph *g = build(j, 3, KC_OK);
    const kc_shape *s = out_shape(g, 0);
    assert_int_equal(s->rank, 2);
    assert_int_equal(s->dims[1], 5);
    assert_int_equal(g->nodes[0].n_consts, 0);
    kc_graph_free(g);
}

static void test_keras1_functional_merge(void **state)
{
    (void)state;
    /* Keras 1 merge([a, b], mode='concat', concat_axis=-1); nodes are
     * 3-element lists without kwargs. */
    const char *j =
        "{\"class_name\":\"Model\",\"config\":{\"name\":\"m\",\"layers\":["
        "{\"class_name\":\"InputLayer\",\"name\":\"a\",\"config\":{\"name\":\"a\",\"batch_input_shape\":[null,3]},\"inbound_nodes\":[]},"
        "{\"class_name\":\"InputLayer\",\"name\":\"b\",\"config\":{\"name\":\"b\",\"batch_input_shape\":[null,5]},\"inbound_nodes\":[]},"
        "{\"class_name\":\"Merge\",\"name\":\"merge_1\",\"config\":{\"name\":\"merge_1\",\"mode\":\"concat\",\"concat_axis\":-1},"
        " \"inbound_nodes\":[[[\"a\",0,0],[\"b\",0,0]]]}],"
        "\"input_layers\":[[\"a\",0,0],[\"b\",0,0]],\"output_layers\":[[\"merge_1\",0,0]]}}";
    kc_graph *g = build(j, 1, KC_OK);
    assert_int_equal(out_shape(g, 0)->dims[1], 8);
    kc_graph_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keras2_functional_shared_layer),
        cmocka_unit_test(test_keras3_ops_node_with_constant),
        cmocka_unit_test(test_nested_functional_called_twice),
        cmocka_unit_test(test_old_sequential_bare_list),
        cmocka_unit_test(test_dict_io_and_tf_same_padding),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_keras3_getitem_slice),
        cmocka_unit_test(test_keras1_functional_merge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
