/* Attributes of Keras 2 TFOpLambda / SlicingOpLambda layers: the raw tf.*
 * call a tf.keras Functional model recorded (config "function", e.g.
 * "math.add"). They resolve to the same kc_top_attrs as Keras 3 ops nodes
 * (elementwise.h); `function` keeps the TF symbol for messages. */
#ifndef KC_OPS_TFOP_H
#define KC_OPS_TFOP_H

#include "ops/elementwise.h"

typedef kc_top_attrs kc_tfop_attrs;

#endif
