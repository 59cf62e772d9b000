#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "base/spill.h"
#include "base/error.h"
#include "base/mem.h"
#include "format/bind.h"
#include "ops/op.h"

void kc_snake_case(const char *name, char *out, size_t cap)
{
    /* Step 0: drop non-word characters. */
    char clean[512], step1[1024];
    size_t n = 0;
    for (const char *p = name; *p && n + 1 < sizeof clean; p++)
        if (isalnum((unsigned char)*p) || *p == '_')
            clean[n++] = *p;
    clean[n] = '\0';
    /* Step 1: re.sub("(.)([A-Z][a-z]+)", r"\1_\2"), non-overlapping. */
    size_t o = 0;
    for (size_t i = 0; i < n && o + 3 < sizeof step1;) {
        if (i + 2 < n + 0 && isupper((unsigned char)clean[i + 1]) &&
            islower((unsigned char)clean[i + 2])) {
            step1[o++] = clean[i];
            step1[o++] = '_';
            size_t j = i + 1;
            step1[o++] = clean[j++];
            while (j < n && islower((unsigned char)clean[j]) && o + 2 < sizeof step1)
                step1[o++] = clean[j++];
            i = j;
        } else {
            step1[o++] = clean[i++];
        }
    }
    step1[o] = '\0';
    /* Step 2: re.sub("([a-z])([A-Z])", r"\1_\2"), then lower(). */
    size_t w = 0;
    for (size_t i = 0; i < o && w + 3 < cap;) {
        if (i + 1 < o && islower((unsigned char)step1[i]) && isupper((unsigned char)step1[i + 1])) {
            out[w++] = step1[i];
            out[w++] = '_';
            out[w++] = (char)tolower((unsigned char)step1[i + 1]);
            i += 2;
        } else {
            out[w++] = (char)tolower((unsigned char)step1[i++]);
        }
    }
    if (cap)
        out[w < cap ? w : cap - 1] = '\0';
}

kc_status kc_bind_one(kc_layer *layer, int spec_index, const kc_shape *shape, float *data,
                      kc_dtype stored_dtype)
{
    const kc_weight_spec *spec = &layer->specs[spec_index];
    if (!kc_shape_equal(shape, &spec->shape)) {
        char got[128], want[128];
        kc_shape_format(shape, got, sizeof got);
        kc_shape_format(&spec->shape, want, sizeof want);
        kc_wfree(data);
        return kc_fail(KC_ERR_SHAPE, "layer '%s' (%s): weight %s has shape %s, the config "
                       "implies %s", layer->name, layer->class_name, spec->name, got, want);
    }
    if (!layer->weights) {
        layer->weights = kc_calloc((size_t)layer->n_specs, sizeof *layer->weights);
        if (!layer->weights) {
            kc_wfree(data);
            return KC_ERR_NOMEM;
        }
        layer->n_weights = layer->n_specs;
    }
    kc_weight *w = &layer->weights[spec_index];
    if (w->data) {
        kc_wfree(data);
        return kc_fail(KC_ERR_FORMAT, "layer '%s': weight %s bound twice", layer->name,
                       spec->name);
    }
    w->name = kc_strdup(spec->name);
    if (!w->name) {
        kc_wfree(data);
        return KC_ERR_NOMEM;
    }
    w->shape = *shape;
    w->data = data;
    w->trainable = spec->trainable;
    w->stored_dtype = stored_dtype;
    return KC_OK;
}

static void kc_collect_leaves(kc_layer *layer, kc_layer **out, int cap, int *n)
{
    if (layer->n_specs > 0) {
        if (*n < cap)
            out[*n] = layer;
        (*n)++;
        return;
    }
    for (int i = 0; i < layer->n_children; i++)
        kc_collect_leaves(layer->children[i], out, cap, n);
}

int kc_weighted_leaves(kc_layer *layer, kc_layer **out, int cap)
{
    int n = 0;
    kc_collect_leaves(layer, out, cap, &n);
    return n;
}

kc_status kc_bind_check_complete(const kc_graph *graph)
{
    for (int i = 0; i < graph->n_layers; i++) {
        const kc_layer *l = graph->layers[i];
        for (int s = 0; s < l->n_specs; s++)
            if (!l->weights || !l->weights[s].data)
                return kc_fail(KC_ERR_FORMAT, "layer '%s' (%s): the file holds no value for its "
                               "weight %s", l->name, l->class_name, l->specs[s].name);
    }
    return KC_OK;
}
