/* The in-memory model: one validated graph for every file format.
 *
 * Layers (kc_layer) are the objects that own weights and config; a layer
 * called twice (shared layer) is one kc_layer with two kc_node calls.
 * Nested models are kept as a tree of layers (for the summary and weight
 * binding) and inlined into the flat node list (for execution), so the
 * executor never sees a model inside a model. Values (kc_value) are the
 * edges: one per tensor produced by a node or fed as a model input. */
#ifndef KC_GRAPH_H
#define KC_GRAPH_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "base/tensor.h"
#include "kerasc.h"

struct kc_op_def;

/* One bound weight, converted to float32 at load (the layout is the
 * Keras one, §5.1 of keras-formats.md). */
typedef struct kc_weight {
    char *name;        /* e.g. "kernel", "moving_mean" */
    kc_shape shape;
    float *data;       /* shape-count floats */
    int trainable;     /* counted as trainable by Keras */
    kc_dtype stored_dtype;
} kc_weight;

/* What a layer expects, derived from its config and input shape. */
typedef struct kc_weight_spec {
    const char *name;  /* variable name: "kernel", "bias", "gamma", ... */
    const char *group; /* Keras 3 sub-object path holding it ("" = own vars,
                          "cell", "forward_layer/cell", "query_dense") */
    kc_shape shape;
    int trainable;
} kc_weight_spec;

#define KC_MAX_WEIGHT_SPECS 24

typedef struct kc_layer {
    char *name;
    char *class_name;
    char *module;                 /* NULL for Keras 2 configs */
    const struct kc_op_def *def;
    const cJSON *config;          /* the layer's "config" object (borrowed) */
    const cJSON *entry;           /* the whole layer entry (borrowed) */
    struct kc_layer *parent;      /* enclosing model; NULL for the root */
    struct kc_layer **children;   /* sub-layers of a nested model */
    int n_children;
    int trainable;                /* config "trainable" (default 1) */
    int n_calls;                  /* nodes that call this layer */
    void *attrs;                  /* op-specific parsed attributes */

    kc_weight_spec specs[KC_MAX_WEIGHT_SPECS];
    int n_specs;                  /* filled by the op at first call */
    int specs_ready;
    kc_weight *weights;           /* bound in spec order */
    int n_weights;

    kc_shape out_shape;           /* first output of first call, for the summary */
    int n_out_shapes;
    char *connected_to;           /* summary text */
    int depth;                    /* nesting depth (root = 0) */
    int channels_first;           /* data_format channels_first: the op is
                                     run on NHWC through transposes */
} kc_layer;

typedef struct kc_value {
    kc_shape shape;
    kc_dtype dtype;
    int producer;                 /* node index, -1 for a model input */
    int slot;                     /* output index of the producer */
} kc_value;

/* A constant argument of an ops node or TFOpLambda ("x + 3.0"). */
typedef struct kc_const_arg {
    int position;                 /* argument position it replaces */
    kc_shape shape;
    float *data;
} kc_const_arg;

typedef struct kc_node {
    kc_layer *layer;
    int *inputs;                  /* value ids */
    char **input_roles;           /* per input: NULL for a positional
                                     argument, else the keyword it was
                                     passed as ("value", "mask", "y") */
    int n_inputs;
    int *outputs;
    int n_outputs;
    kc_const_arg *consts;
    int n_consts;
    const cJSON *call_kwargs;     /* kwargs of the call (borrowed), may be NULL;
                                     tensor-valued entries are inputs */
    const cJSON *call_args;       /* positional args (Keras 3 form), may be NULL */
} kc_node;

typedef struct kc_graph {
    kc_layer *root;               /* the model itself */
    kc_layer **layers;            /* every layer, tree order, root first */
    int n_layers;
    size_t cap_layers;
    kc_node *nodes;               /* topological order */
    int n_nodes;
    size_t cap_nodes;
    kc_value *values;
    int n_values;
    size_t cap_values;
    int *inputs;                  /* value ids of model inputs */
    char **input_names;
    int n_inputs;
    int *outputs;
    char **output_names;
    int n_outputs;
} kc_graph;

kc_graph *kc_graph_new(void);
void kc_graph_free(kc_graph *graph);
kc_layer *kc_graph_add_layer(kc_graph *graph, kc_layer *parent, const char *name,
                             const char *class_name, const char *module);
int kc_graph_add_value(kc_graph *graph, const kc_shape *shape, kc_dtype dtype, int producer,
                       int slot);
/* Adds a node calling layer on inputs; the outputs are created by shape
 * inference (kc_graph_infer_node). Returns the node index or -1. */
int kc_graph_add_node(kc_graph *graph, kc_layer *layer, const int *inputs,
                      const char *const *roles, int n_inputs);

/* Parameter counts over the layer tree (a layer's weights counted once). */
void kc_graph_count_params(const kc_graph *graph, const kc_layer *layer, int64_t *total,
                           int64_t *trainable);
/* Effective trainability: the layer and all its ancestors trainable. */
int kc_layer_effectively_trainable(const kc_layer *layer);

#endif
