/* Legacy HDF5 weights (keras-formats.md §2.2-2.3, §3.2) and TensorFlow.js
 * named weights (§4.7).
 *
 * Legacy files list layers in the layer_names attribute and each layer's
 * variables in weight_names. Top-level layers are paired with groups by
 * position among layers that have weights (what Keras does by default),
 * falling back to names when the counts differ. A nested model is one
 * group holding all its sub-layers' variables, trainable ones first, so
 * they are split among the sub-layers by the name components of each
 * variable (`sequential/dense/kernel:0` belongs to `dense`). */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "base/spill.h"
#include "format/bind.h"

#define KC_MAX_LEAVES 100000

/* "block1/conv/kernel:0" -> "kernel" (last component, ":0" stripped). */
static void kc_var_basename(const char *name, char *out, size_t cap)
{
    const char *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name;
    size_t n = strcspn(base, ":");
    if (n >= cap)
        n = cap - 1;
    memcpy(out, base, n);
    out[n] = '\0';
}

static int kc_spec_name_matches(const char *spec, const char *var)
{
    if (strcmp(spec, var) == 0)
        return 1;
    /* Keras 3 renamed DepthwiseConv's depthwise_kernel to kernel. */
    return strcmp(spec, "depthwise_kernel") == 0 && strcmp(var, "kernel") == 0;
}

/* Concatenate arrays along their last axis into one (shapes must agree on
 * every other axis). Frees nothing; returns a new malloc'd array. */
static kc_status kc_concat_last(kc_named_array *const *parts, int n, kc_named_array *out)
{
    kc_shape s = parts[0]->shape;
    int rank = s.rank;
    if (rank < 1)
        return kc_fail(KC_ERR_SHAPE, "cannot fuse scalar per-gate weights");
    int64_t outer = kc_shape_count(&s) / (s.dims[rank - 1] ? s.dims[rank - 1] : 1);
    int64_t total_last = 0;
    for (int i = 0; i < n; i++) {
        const kc_shape *p = &parts[i]->shape;
        if (p->rank != rank)
            return kc_fail(KC_ERR_SHAPE, "per-gate weights have different ranks");
        for (int d = 0; d < rank - 1; d++)
            if (p->dims[d] != s.dims[d])
                return kc_fail(KC_ERR_SHAPE, "per-gate weights have different shapes");
        total_last += p->dims[rank - 1];
    }
    s.dims[rank - 1] = total_last;
    int64_t count = kc_shape_count(&s);
    if (count < 0)
        return KC_ERR_LIMIT;
    float *data = kc_calloc((size_t)(count ? count : 1), sizeof *data);
    if (!data)
        return KC_ERR_NOMEM;
    int64_t col = 0;
    for (int i = 0; i < n; i++) {
        int64_t w = parts[i]->shape.dims[rank - 1];
        for (int64_t r = 0; r < outer; r++)
            memcpy(data + r * total_last + col, parts[i]->data + r * w, (size_t)w * sizeof *data);
        col += w;
    }
    out->shape = s;
    out->data = data;
    out->stored_dtype = parts[0]->stored_dtype;
    return KC_OK;
}

/* Keras 1 LSTM/GRU with per-gate arrays: fuse them in Keras 2's order
 * (LSTM stored i, c, f, o -> kernel i, f, c, o; GRU z, r, h), the rule of
 * Keras 2's preprocess_weights_for_loading. Replaces arrays[0..2]. */
static kc_status kc_fuse_keras1_rnn(const kc_layer *leaf, kc_named_array **arrays, int *n,
                                    kc_named_array fused[3])
{
    static const int lstm[3][4] = {{0, 6, 3, 9}, {1, 7, 4, 10}, {2, 8, 5, 11}};
    static const int gru[3][4] = {{0, 3, 6, -1}, {1, 4, 7, -1}, {2, 5, 8, -1}};
    int is_lstm = strcmp(leaf->class_name, "LSTM") == 0 && *n == 12;
    int is_gru = strcmp(leaf->class_name, "GRU") == 0 && *n == 9;
    if ((!is_lstm && !is_gru) || leaf->n_specs != 3)
        return KC_OK;
    const int(*order)[4] = is_lstm ? lstm : gru;
    int gates = is_lstm ? 4 : 3;
    for (int k = 0; k < 3; k++) {
        kc_named_array *parts[4];
        for (int g = 0; g < gates; g++)
            parts[g] = arrays[order[k][g]];
        KC_TRY(kc_concat_last(parts, gates, &fused[k]));
        fused[k].name = (char *)leaf->specs[k].name;
    }
    for (int i = 0; i < *n; i++) {
        kc_wfree(arrays[i]->data);
        arrays[i]->data = NULL;
    }
    for (int k = 0; k < 3; k++)
        arrays[k] = &fused[k];
    *n = 3;
    return KC_OK;
}

/* Assign a leaf's arrays to its specs: by variable name when every name
 * matches one spec (restores order after trainable/non-trainable splits),
 * else by position. Takes ownership of every array's data. */
static kc_status kc_assign_leaf(kc_layer *leaf, kc_named_array **arrays, int n)
{
    kc_named_array fused[3];
    memset(fused, 0, sizeof fused);
    kc_status fst = kc_fuse_keras1_rnn(leaf, arrays, &n, fused);
    if (fst != KC_OK) {
        for (int k = 0; k < 3; k++)
            free(fused[k].data);
        for (int i = 0; i < n; i++) {
            kc_wfree(arrays[i]->data);
            arrays[i]->data = NULL;
        }
        return fst;
    }
    if (n != leaf->n_specs) {
        for (int i = 0; i < n; i++) {
            kc_wfree(arrays[i]->data);
            arrays[i]->data = NULL;
        }
        return kc_fail(KC_ERR_FORMAT, "layer '%s' (%s): the file holds %d weights, the config "
                       "implies %d", leaf->name, leaf->class_name, n, leaf->n_specs);
    }
    int order[KC_MAX_WEIGHT_SPECS];
    int by_name = 1;
    unsigned used = 0;
    for (int s = 0; s < n && by_name; s++) {
        order[s] = -1;
        for (int i = 0; i < n; i++) {
            char base[128];
            kc_var_basename(arrays[i]->name, base, sizeof base);
            if (!(used & (1u << i)) && kc_spec_name_matches(leaf->specs[s].name, base)) {
                order[s] = i;
                used |= 1u << i;
                break;
            }
        }
        by_name = order[s] >= 0;
    }
    kc_status st = KC_OK;
    for (int s = 0; s < n; s++) {
        kc_named_array *a = arrays[by_name ? order[s] : s];
        float *data = a->data;
        a->data = NULL;
        if (st == KC_OK)
            st = kc_bind_one(leaf, s, &a->shape, data, a->stored_dtype);
        else
            kc_wfree(data);
    }
    return st;
}

/* The leaf a variable belongs to: the last name component that names one
 * of the candidate leaves. */
static int kc_owner_leaf(const char *var, kc_layer **leaves, int n_leaves)
{
    char buf[1024];
    kc_format(buf, sizeof buf, "%s", var);
    char *last_slash = strrchr(buf, '/');
    if (!last_slash)
        return -1;
    *last_slash = '\0';
    int owner = -1;
    for (char *save = NULL, *tok = strtok_r(buf, "/", &save); tok; tok = strtok_r(NULL, "/", &save))
        for (int i = 0; i < n_leaves; i++)
            if (strcmp(leaves[i]->name, tok) == 0)
                owner = i;
    return owner;
}

/* Split arrays among leaves by name, then assign each leaf. */
static kc_status kc_assign_by_name(kc_layer **leaves, int n_leaves, kc_array_list *list,
                                   const char *where)
{
    kc_named_array **mine = kc_calloc((size_t)list->n + 1, sizeof *mine);
    int *owner = kc_calloc((size_t)list->n + 1, sizeof *owner);
    kc_status st = (!mine || !owner) ? KC_ERR_NOMEM : KC_OK;
    for (int i = 0; st == KC_OK && i < list->n; i++) {
        owner[i] = n_leaves == 1 ? 0 : kc_owner_leaf(list->items[i].name, leaves, n_leaves);
        if (owner[i] < 0)
            st = kc_fail(KC_ERR_FORMAT, "%s: weight '%s' belongs to no layer of the model", where,
                         list->items[i].name);
    }
    for (int l = 0; st == KC_OK && l < n_leaves; l++) {
        int n = 0;
        for (int i = 0; i < list->n; i++)
            if (owner[i] == l && n < KC_MAX_WEIGHT_SPECS)
                mine[n++] = &list->items[i];
        st = kc_assign_leaf(leaves[l], mine, n);
    }
    free(mine);
    free(owner);
    return st;
}

/* --------------------------------------------------------------- h5 */

static kc_status kc_legacy_read_group(kc_h5 *h5, const char *group, kc_array_list *list)
{
    char **names = NULL;
    int n = 0;
    KC_TRY(kc_h5_attr_strings(h5, group, "weight_names", &names, &n));
    kc_status st = KC_OK;
    for (int i = 0; st == KC_OK && i < n; i++) {
        char path[4096];
        kc_format(path, sizeof path, "%s/%s", group, names[i]);
        kc_named_array a = {0};
        kc_dtype dtype;
        st = kc_h5_dataset_info(h5, path, &a.shape, &dtype);
        int64_t count = st == KC_OK ? kc_shape_count(&a.shape) : 0;
        if (st == KC_OK && count < 0)
            st = KC_ERR_LIMIT;
        if (st == KC_OK && kc_spill_dir() && count > 0) {
            st = kc_h5_borrow_f32(h5, path, count, &a.data);
        } else {
            if (st == KC_OK && !(a.data = kc_calloc((size_t)(count ? count : 1), sizeof(float))))
                st = KC_ERR_NOMEM;
            if (st == KC_OK)
                st = kc_h5_read_f32(h5, path, a.data, count);
        }
        if (st == KC_OK && !(a.name = kc_strdup(names[i])))
            st = KC_ERR_NOMEM;
        a.stored_dtype = dtype;
        a.stored_bytes = count * (int64_t)kc_dtype_size(dtype);
        if (st == KC_OK)
            st = kc_grow((void **)&list->items, &list->cap, (size_t)list->n + 1,
                         sizeof *list->items);
        if (st != KC_OK) {
            kc_wfree(a.data);
            free(a.name);
            break;
        }
        list->items[list->n++] = a;
    }
    kc_strv_free(names, n);
    return st;
}

static kc_status kc_legacy_bind_layer(kc_h5 *h5, const char *root, kc_layer *layer,
                                      const char *group_name)
{
    kc_layer *leaves[256];
    int n_leaves = kc_weighted_leaves(layer, leaves, 256);
    if (n_leaves > 256)
        return kc_fail(KC_ERR_LIMIT, "nested model '%s' has more than 256 weighted layers "
                       "in one legacy group", layer->name);
    char group[4096];
    kc_format(group, sizeof group, "%s/%s", strcmp(root, "/") == 0 ? "" : root, group_name);
    kc_array_list list = {0};
    kc_status st = kc_legacy_read_group(h5, group, &list);
    if (st == KC_OK && n_leaves == 1 && leaves[0] == layer) {
        kc_named_array *mine[KC_MAX_WEIGHT_SPECS];
        if (list.n > KC_MAX_WEIGHT_SPECS)
            st = kc_fail(KC_ERR_FORMAT, "layer '%s': group %s holds %d weights", layer->name,
                         group, list.n);
        for (int i = 0; st == KC_OK && i < list.n; i++)
            mine[i] = &list.items[i];
        if (st == KC_OK)
            st = kc_assign_leaf(layer, mine, list.n);
    } else if (st == KC_OK) {
        st = kc_assign_by_name(leaves, n_leaves, &list, group);
    }
    kc_array_list_free(&list);
    return st;
}

static int kc_has_weights(const kc_layer *layer)
{
    if (layer->n_specs > 0)
        return 1;
    for (int i = 0; i < layer->n_children; i++)
        if (kc_has_weights(layer->children[i]))
            return 1;
    return 0;
}

/* Names in layer_names whose group lists at least one weight. */
static kc_status kc_legacy_weighted_names(kc_h5 *h5, const char *root, char **names, int n,
                                          int *keep)
{
    for (int i = 0; i < n; i++) {
        char group[4096];
        kc_format(group, sizeof group, "%s/%s", strcmp(root, "/") == 0 ? "" : root, names[i]);
        char **w = NULL;
        int nw = 0;
        KC_TRY(kc_h5_attr_strings(h5, group, "weight_names", &w, &nw));
        keep[i] = nw > 0;
        kc_strv_free(w, nw);
    }
    return KC_OK;
}

kc_status kc_bind_legacy(kc_graph *graph, kc_h5 *h5, const char *root)
{
    char **names = NULL;
    int n = 0;
    kc_h5_release_on_read(h5); /* one pass: each dataset is read once */
    KC_TRY(kc_h5_attr_strings(h5, root, "layer_names", &names, &n));
    if (n < 0)
        return kc_fail(KC_ERR_FORMAT, "%s: %s has no layer_names attribute", kc_h5_label(h5),
                       root);
    int *keep = kc_calloc((size_t)n + 1, sizeof *keep);
    kc_layer **layers = kc_calloc((size_t)graph->root->n_children + 1, sizeof *layers);
    kc_status st = (!keep || !layers) ? KC_ERR_NOMEM : KC_OK;
    if (st == KC_OK)
        st = kc_legacy_weighted_names(h5, root, names, n, keep);
    int n_layers = 0, n_groups = 0;
    for (int i = 0; st == KC_OK && i < graph->root->n_children; i++)
        if (kc_has_weights(graph->root->children[i]))
            layers[n_layers++] = graph->root->children[i];
    for (int i = 0; i < n; i++)
        n_groups += keep[i];
    /* Keras pairs weighted layers with weighted groups by position. */
    if (st == KC_OK && n_layers != n_groups)
        st = kc_fail(KC_ERR_FORMAT, "%s: the model has %d layers with weights, the file %d",
                     kc_h5_label(h5), n_layers, n_groups);
    for (int i = 0, g = 0; st == KC_OK && i < n_layers; i++, g++) {
        while (!keep[g])
            g++;
        st = kc_legacy_bind_layer(h5, root, layers[i], names[g]);
    }
    free(keep);
    free(layers);
    kc_strv_free(names, n);
    if (st != KC_OK)
        return kc_fail_context(st, "%s", kc_h5_label(h5));
    return KC_OK;
}

/* ------------------------------------------------------------- tfjs */

kc_status kc_bind_named(kc_graph *graph, kc_array_list *arrays)
{
    int n_leaves = kc_weighted_leaves(graph->root, NULL, 0);
    if (n_leaves > KC_MAX_LEAVES)
        return kc_fail(KC_ERR_LIMIT, "too many weighted layers");
    kc_layer **leaves = kc_calloc((size_t)n_leaves + 1, sizeof *leaves);
    if (!leaves)
        return KC_ERR_NOMEM;
    kc_weighted_leaves(graph->root, leaves, n_leaves);
    kc_status st = kc_assign_by_name(leaves, n_leaves, arrays, "weights manifest");
    free(leaves);
    return st;
}
