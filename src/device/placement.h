/* Where each node computes and where the variables live, from the user's
 * rules in graph order:
 *   "conv1_pad..conv4_block6_out=/GPU:0"  a range, both ends included
 *   "conv5_block1_1_conv..=/CPU:0"        to the end
 *   "..fc1=/GPU:0"                        from the start
 *   "predictions=/CPU:0"                  one layer (every call of it)
 * Later rules override earlier ones; nodes no rule covers get the default
 * device. Variables default to the device that computes with them; one
 * `variables` device (TensorFlow's `with tf.device("/CPU:0")` recipe)
 * keeps them all there instead. */
#ifndef KC_PLACEMENT_H
#define KC_PLACEMENT_H

#include "device/devspec.h"
#include "graph/graph.h"

typedef struct kc_placement {
    int n_nodes;
    kc_devspec *compute;      /* per node */
    kc_devspec default_device;
    kc_devspec variables;
    int variables_set;        /* 0: each layer's variables on its device */
} kc_placement;

kc_status kc_placement_build(const kc_graph *graph, const char *default_device,
                             const char *const *rules, int n_rules, const char *variables,
                             kc_placement *out);
void kc_placement_free(kc_placement *placement);

#endif
