/* Keras 3 weights layout: paths come from an object walk, not from layer
 * names (keras-formats.md §1.8.2): /layers/<snake(class)>[_k]/vars/<i>,
 * counted per class within each model, nested models recursively, and
 * sub-objects (RNN cells, wrapper layers, attention projections) under
 * their attribute names. Files from Keras >= 3.6 also name each vars
 * group; when that name disagrees with the walk, the group carrying the
 * layer's name wins. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/spill.h"
#include "base/error.h"
#include "base/mem.h"
#include "format/bind.h"
#include "ops/op.h"

#define KC_PATH_MAX 4096

typedef struct kc_k3 {
    kc_h5 *h5;
    const char *layers_key; /* "layers" or "_layer_checkpoint_dependencies" */
} kc_k3;

/* "/a/b" + "c" -> "/a/b/c" */
static void kc_join(char *out, const char *a, const char *b)
{
    kc_format(out, KC_PATH_MAX, "%s/%s", a, b);
}

/* The vars group of a sub-object, trying Keras 3.0.0-3.0.2's private
 * attribute names (_query_dense) when the public one is missing. */
static int kc_find_vars(kc_k3 *k, const char *layer_path, const char *group, char *out)
{
    char base[KC_PATH_MAX];
    if (group[0])
        kc_join(base, layer_path, group);
    else
        kc_format(base, sizeof base, "%s", layer_path);
    kc_join(out, base, "vars");
    if (kc_h5_kind(k->h5, out) == KC_H5_GROUP)
        return 1;
    if (group[0] && group[0] != '_') {
        char alt[KC_PATH_MAX];
        kc_format(alt, sizeof alt, "%s/_%s/vars", layer_path, group);
        if (kc_h5_kind(k->h5, alt) == KC_H5_GROUP) {
            kc_format(out, KC_PATH_MAX, "%s", alt);
            return 1;
        }
    }
    return 0;
}

static kc_status kc_k3_read(kc_k3 *k, kc_layer *layer, int spec_index, const char *dataset)
{
    kc_shape shape;
    kc_dtype dtype;
    KC_TRY(kc_h5_dataset_info(k->h5, dataset, &shape, &dtype));
    int64_t count = kc_shape_count(&shape);
    if (count < 0)
        return KC_ERR_LIMIT;
    if (!kc_shape_equal(&shape, &layer->specs[spec_index].shape))
        return kc_bind_one(layer, spec_index, &shape, NULL, dtype);
    float *data = NULL;
    if (kc_spill_dir() && count > 0) { /* the disk tier: a view of the mapping */
        KC_TRY(kc_h5_borrow_f32(k->h5, dataset, count, &data));
        return kc_bind_one(layer, spec_index, &shape, data, dtype);
    }
    /* Small pages (kc_calloc): the bound arrays are the weights some kernels
     * read at run time, and InceptionV3 at batch 8 ran ~10% slower with
     * them on huge pages (21.0-21.8 against 23.5-26.6 ms an image). */
    data = kc_calloc((size_t)(count ? count : 1), sizeof *data);
    if (!data)
        return KC_ERR_NOMEM;
    kc_status st = kc_h5_read_f32(k->h5, dataset, data, count);
    if (st != KC_OK) {
        free(data);
        return st;
    }
    return kc_bind_one(layer, spec_index, &shape, data, dtype);
}

/* Bind every spec group of a leaf layer found at layer_path. */
static kc_status kc_k3_bind_leaf(kc_k3 *k, kc_layer *layer, const char *layer_path)
{
    for (int s = 0; s < layer->n_specs;) {
        const char *group = layer->specs[s].group;
        int in_group = 0;
        while (s + in_group < layer->n_specs && strcmp(layer->specs[s + in_group].group, group) == 0)
            in_group++;
        char vars[KC_PATH_MAX];
        if (!kc_find_vars(k, layer_path, group, vars))
            return kc_fail(KC_ERR_FORMAT, "layer '%s' (%s): weights group %s%s%s/vars is missing",
                           layer->name, layer->class_name, layer_path, group[0] ? "/" : "", group);
        char **names = NULL;
        int n = 0;
        KC_TRY(kc_h5_list(k->h5, vars, &names, &n));
        kc_strv_free(names, n);
        if (n != in_group)
            return kc_fail(KC_ERR_FORMAT, "layer '%s' (%s): %s holds %d variables, the config "
                           "implies %d", layer->name, layer->class_name, vars, n, in_group);
        for (int i = 0; i < in_group; i++) {
            char dataset[KC_PATH_MAX + 16];
            kc_format(dataset, sizeof dataset, "%s/%d", vars, i);
            KC_TRY(kc_k3_read(k, layer, s + i, dataset));
        }
        s += in_group;
    }
    return KC_OK;
}

/* Keras >= 3.6 names each vars group: if the walk's path names another
 * layer, look for the sibling group that carries this layer's name. */
static void kc_k3_confirm_path(kc_k3 *k, const kc_layer *layer, const char *container,
                               char *path)
{
    char vars[KC_PATH_MAX], *name = NULL;
    kc_join(vars, path, "vars");
    if (kc_h5_attr_string(k->h5, vars, "name", &name) != KC_OK || !name)
        return;
    int match = strcmp(name, layer->name) == 0;
    free(name);
    if (match)
        return;
    char **children = NULL;
    int n = 0;
    if (kc_h5_list(k->h5, container, &children, &n) != KC_OK)
        return;
    for (int i = 0; i < n; i++) {
        char cand[KC_PATH_MAX];
        kc_format(cand, sizeof cand, "%s/%s/vars", container, children[i]);
        char *cname = NULL;
        if (kc_h5_attr_string(k->h5, cand, "name", &cname) == KC_OK && cname &&
            strcmp(cname, layer->name) == 0) {
            kc_format(path, KC_PATH_MAX, "%s/%s", container, children[i]);
            free(cname);
            break;
        }
        free(cname);
    }
    kc_strv_free(children, n);
}

static int kc_is_ops_node(const kc_layer *layer)
{
    return layer->def && (layer->def->flags & KC_OPF_OPS_NODE);
}

static int kc_is_model(const kc_layer *layer)
{
    return !layer->def && (strcmp(layer->class_name, "Functional") == 0 ||
                           strcmp(layer->class_name, "Sequential") == 0 ||
                           strcmp(layer->class_name, "Model") == 0);
}

typedef struct kc_counter {
    char name[128];
    int count;
} kc_counter;

static kc_status kc_k3_walk(kc_k3 *k, kc_layer *model, const char *prefix)
{
    char container[KC_PATH_MAX];
    kc_format(container, sizeof container, "%s/%s", prefix, k->layers_key);
    int sequential = strcmp(model->class_name, "Sequential") == 0;
    kc_counter *counters = kc_calloc((size_t)(model->n_children + 1), sizeof *counters);
    if (!counters)
        return KC_ERR_NOMEM;
    int n_counters = 0;
    kc_status st = KC_OK;
    for (int i = 0; st == KC_OK && i < model->n_children; i++) {
        kc_layer *child = model->children[i];
        if (kc_is_ops_node(child))
            continue;
        if (sequential && child->def && (child->def->flags & KC_OPF_INPUT))
            continue;
        char snake[128];
        kc_snake_case(child->class_name, snake, sizeof snake);
        int c = 0;
        while (c < n_counters && strcmp(counters[c].name, snake) != 0)
            c++;
        if (c == n_counters)
            kc_format(counters[n_counters++].name, sizeof counters[0].name, "%s", snake);
        int k_index = counters[c].count++;
        char path[KC_PATH_MAX];
        if (k_index == 0)
            kc_format(path, sizeof path, "%s/%s", container, snake);
        else
            kc_format(path, sizeof path, "%s/%s_%d", container, snake, k_index);
        if (!kc_is_model(child) && child->n_specs == 0)
            continue;
        kc_k3_confirm_path(k, child, container, path);
        if (kc_is_model(child))
            st = kc_k3_walk(k, child, path);
        else
            st = kc_k3_bind_leaf(k, child, path);
    }
    free(counters);
    return st;
}

kc_status kc_bind_keras3(kc_graph *graph, kc_h5 *h5)
{
    kc_k3 k = {.h5 = h5, .layers_key = "layers"};
    kc_h5_release_on_read(h5); /* one pass: each dataset is read once */
    /* tf.keras 2.13-2.14 wrote _layer_checkpoint_dependencies. */
    if (kc_h5_kind(h5, "/layers") != KC_H5_GROUP &&
        kc_h5_kind(h5, "/_layer_checkpoint_dependencies") == KC_H5_GROUP)
        k.layers_key = "_layer_checkpoint_dependencies";
    kc_status st = kc_k3_walk(&k, graph->root, "");
    if (st != KC_OK)
        return kc_fail_context(st, "%s", kc_h5_label(h5));
    return KC_OK;
}
