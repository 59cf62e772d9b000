/* Attributes of Keras 3 ops nodes (keras.src.ops.numpy / nn / math / core
 * entries of a Functional config). They share kc_top_attrs with Keras 2
 * TFOpLambda layers; see elementwise.h for the fields. */
#ifndef KC_OPS_NUMPY_H
#define KC_OPS_NUMPY_H

#include "ops/elementwise.h"

typedef kc_top_attrs kc_numpy_attrs;

#endif
