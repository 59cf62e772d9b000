/* Binding the weights stored in a file to the layers of a built graph.
 * Each layer declared its expected weights (kc_weight_spec, in Keras's
 * order with shapes) during shape inference; binding finds the stored
 * arrays, checks count and shape, and converts them to float32 once. */
#ifndef KC_BIND_H
#define KC_BIND_H

#include "format/arrays.h"
#include "format/h5.h"
#include "graph/graph.h"

/* Keras 3 / tf.keras 2.13+ layout (/layers/<snake>[_k]/vars/<i>). */
kc_status kc_bind_keras3(kc_graph *graph, kc_h5 *h5);
/* Legacy layout: root attribute layer_names, per-layer weight_names.
 * group is "/model_weights" for full models, "/" for weights-only files. */
kc_status kc_bind_legacy(kc_graph *graph, kc_h5 *h5, const char *group);
/* Named arrays (TensorFlow.js): matched to layers by name components. */
kc_status kc_bind_named(kc_graph *graph, kc_array_list *arrays);
/* Fail naming the first layer whose weights were not bound. */
kc_status kc_bind_check_complete(const kc_graph *graph);

/* ---- shared by the binders */

/* Move data (count floats, owned) into layer weight slot spec_index after
 * checking its shape; takes ownership of data on success and failure. */
kc_status kc_bind_one(kc_layer *layer, int spec_index, const kc_shape *shape, float *data,
                      kc_dtype stored_dtype);
/* Keras's naming.to_snake_case: "DepthwiseConv2D" -> "depthwise_conv2d". */
void kc_snake_case(const char *name, char *out, size_t cap);
/* Collect weighted leaf layers under layer (itself included). */
int kc_weighted_leaves(kc_layer *layer, kc_layer **out, int cap);

#endif
