/* A list of named float32 arrays: how formats without an HDF5 layout
 * (TensorFlow.js) hand their weights to the binder. */
#ifndef KC_ARRAYS_H
#define KC_ARRAYS_H

#include "base/tensor.h"
#include "kerasc.h"

typedef struct kc_named_array {
    char *name;          /* "conv1/kernel" (tfjs) */
    kc_shape shape;
    float *data;         /* decoded/dequantized float32, shape-count values */
    kc_dtype stored_dtype; /* dtype as stored in the file (KC_U8 if quantized) */
    int64_t stored_bytes;  /* bytes it occupied in the file */
} kc_named_array;

typedef struct kc_array_list {
    kc_named_array *items;
    int n;
    size_t cap;
} kc_array_list;

void kc_array_list_free(kc_array_list *list);

#endif
