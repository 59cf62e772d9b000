/* Tensors and shapes. A kc_shape uses -1 for an unknown (symbolic)
 * dimension, which for activations is normally the batch. */
#ifndef KC_TENSOR_H
#define KC_TENSOR_H

#include <stdint.h>

#include "kerasc.h"

typedef struct kc_shape {
    int rank;
    int64_t dims[KC_MAX_RANK];
} kc_shape;

struct kc_tensor {
    kc_dtype dtype;
    kc_shape shape;
    void *data;
    int owns_data;
};

/* Largest element count kerasc accepts for one tensor (2^40): far above any
 * real model, far below what overflows a size_t in bytes. */
#define KC_MAX_ELEMENTS ((int64_t)1 << 40)

/* Product of dims; -1 if any dim is unknown; sets KC_ERR_LIMIT error and
 * returns -2 if negative or above KC_MAX_ELEMENTS. */
int64_t kc_shape_count(const kc_shape *shape);
int kc_shape_equal(const kc_shape *a, const kc_shape *b);
/* "(None, 224, 224, 3)" in Keras's notation. */
void kc_shape_format(const kc_shape *shape, char *buf, size_t cap);
kc_shape kc_shape_make(int rank, const int64_t *dims);

/* Wrap existing memory (not owned). */
kc_tensor *kc_tensor_wrap(kc_dtype dtype, const kc_shape *shape, void *data);

/* IEEE half and bfloat16 to float. */
float kc_half_to_float(uint16_t h);
float kc_bf16_to_float(uint16_t b);
uint16_t kc_float_to_half(float f);

#endif
