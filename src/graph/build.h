/* Building the graph from a Keras model config (any version's encoding):
 * Functional/Model/Sequential at any nesting depth, shared layers, Keras 2
 * and Keras 3 inbound_nodes, ops nodes with constant arguments. Every node
 * is shape-inferred as it is created. */
#ifndef KC_BUILD_H
#define KC_BUILD_H

#include <cjson/cJSON.h>

#include "graph/graph.h"
#include "ops/op.h"

/* model_entry: {"class_name": "Functional"|"Model"|"Sequential", "config":
 * {...}, ...}. On failure the error names the layer. */
kc_status kc_build_graph(const cJSON *model_entry, const kc_parse_env *env, kc_graph **out);

/* A numeric JSON constant (number, nested lists, or a Keras 3
 * __tensor__/__numpy__ object) as a float tensor; out->data is malloc'd. */
kc_status kc_const_from_json(const cJSON *v, kc_const_arg *out);

#endif
