/* Graph containers: layers, values, nodes; parameter counting. */
#include "graph/graph.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "base/spill.h"
#include "ops/op.h"

kc_graph *kc_graph_new(void) { return kc_calloc(1, sizeof(kc_graph)); }

static void kc_layer_free(kc_layer *layer)
{
    free(layer->name);
    free(layer->class_name);
    free(layer->module);
    free(layer->children);
    free(layer->connected_to);
    if (layer->def && layer->def->free_attrs)
        layer->def->free_attrs(layer->attrs);
    else
        free(layer->attrs);
    for (int i = 0; i < layer->n_weights; i++) {
        free(layer->weights[i].name);
        kc_wfree(layer->weights[i].data);
    }
    free(layer->weights);
    free(layer);
}

void kc_graph_free(kc_graph *graph)
{
    if (!graph)
        return;
    for (int i = 0; i < graph->n_layers; i++)
        kc_layer_free(graph->layers[i]);
    free(graph->layers);
    for (int i = 0; i < graph->n_nodes; i++) {
        kc_node *n = &graph->nodes[i];
        free(n->inputs);
        if (n->input_roles)
            for (int j = 0; j < n->n_inputs; j++)
                free(n->input_roles[j]);
        free(n->input_roles);
        free(n->outputs);
        for (int j = 0; j < n->n_consts; j++)
            free(n->consts[j].data);
        free(n->consts);
    }
    free(graph->nodes);
    free(graph->values);
    free(graph->inputs);
    free(graph->outputs);
    for (int i = 0; i < graph->n_inputs; i++)
        free(graph->input_names[i]);
    for (int i = 0; i < graph->n_outputs; i++)
        free(graph->output_names[i]);
    free(graph->input_names);
    free(graph->output_names);
    free(graph);
}

kc_layer *kc_graph_add_layer(kc_graph *graph, kc_layer *parent, const char *name,
                             const char *class_name, const char *module)
{
    if (kc_grow((void **)&graph->layers, &graph->cap_layers, (size_t)graph->n_layers + 1,
                sizeof *graph->layers) != KC_OK)
        return NULL;
    kc_layer *layer = kc_calloc(1, sizeof *layer);
    if (!layer)
        return NULL;
    layer->name = kc_strdup(name ? name : "");
    layer->class_name = kc_strdup(class_name ? class_name : "");
    layer->module = module ? kc_strdup(module) : NULL;
    layer->parent = parent;
    layer->trainable = 1;
    layer->depth = parent ? parent->depth + 1 : 0;
    graph->layers[graph->n_layers++] = layer;
    if (!layer->name || !layer->class_name || (module && !layer->module))
        return NULL;
    if (parent) {
        kc_layer **children = kc_realloc_array(parent->children, (size_t)parent->n_children + 1,
                                               sizeof *children);
        if (!children)
            return NULL;
        parent->children = children;
        parent->children[parent->n_children++] = layer;
    }
    return layer;
}

int kc_graph_add_value(kc_graph *graph, const kc_shape *shape, kc_dtype dtype, int producer,
                       int slot)
{
    if (kc_grow((void **)&graph->values, &graph->cap_values, (size_t)graph->n_values + 1,
                sizeof *graph->values) != KC_OK)
        return -1;
    kc_value *v = &graph->values[graph->n_values];
    v->shape = *shape;
    v->dtype = dtype == KC_DTYPE_INVALID ? KC_F32 : dtype;
    v->producer = producer;
    v->slot = slot;
    return graph->n_values++;
}

int kc_graph_add_node(kc_graph *graph, kc_layer *layer, const int *inputs,
                      const char *const *roles, int n_inputs)
{
    if (kc_grow((void **)&graph->nodes, &graph->cap_nodes, (size_t)graph->n_nodes + 1,
                sizeof *graph->nodes) != KC_OK)
        return -1;
    kc_node *node = &graph->nodes[graph->n_nodes];
    memset(node, 0, sizeof *node);
    node->layer = layer;
    node->inputs = kc_calloc((size_t)(n_inputs ? n_inputs : 1), sizeof *node->inputs);
    node->input_roles = kc_calloc((size_t)(n_inputs ? n_inputs : 1), sizeof(char *));
    if (!node->inputs || !node->input_roles) {
        free(node->inputs);
        free(node->input_roles);
        return -1;
    }
    graph->n_nodes++;
    for (int i = 0; i < n_inputs; i++) {
        node->inputs[i] = inputs[i];
        if (roles && roles[i] && !(node->input_roles[i] = kc_strdup(roles[i])))
            return -1;
    }
    node->n_inputs = n_inputs;
    return graph->n_nodes - 1;
}

int kc_layer_effectively_trainable(const kc_layer *layer)
{
    for (; layer; layer = layer->parent)
        if (!layer->trainable)
            return 0;
    return 1;
}

void kc_graph_count_params(const kc_graph *graph, const kc_layer *layer, int64_t *total,
                           int64_t *trainable)
{
    (void)graph;
    *total = *trainable = 0;
    if (!layer)
        return;
    int layer_trainable = kc_layer_effectively_trainable(layer);
    for (int i = 0; i < layer->n_specs; i++) {
        int64_t n = kc_shape_count(&layer->specs[i].shape);
        if (n < 0)
            continue;
        *total += n;
        if (layer_trainable && layer->specs[i].trainable)
            *trainable += n;
    }
    for (int c = 0; c < layer->n_children; c++) {
        int64_t t, tr;
        kc_graph_count_params(graph, layer->children[c], &t, &tr);
        *total += t;
        *trainable += tr;
    }
}
