/* Attributes of the core layers (Dense, Activation, Embedding, ...). */
#ifndef KC_OPS_CORE_H
#define KC_OPS_CORE_H

#include <stdint.h>

typedef struct kc_dense_attrs {
    int64_t units;
    int use_bias;
    const char *activation;
    /* Session copies only (runtime/fuse.c): a residual Add fused into this
     * layer, as a convolution's: the output buffer holds the residual
     * beforehand and receives residual + (x·W + b), then the activation. */
    int accumulate;
} kc_dense_attrs;

typedef struct kc_activation_attrs {
    const char *activation;
} kc_activation_attrs;

typedef struct kc_embedding_attrs {
    int64_t input_dim;
    int64_t output_dim;
    int mask_zero;
} kc_embedding_attrs;

typedef struct kc_masking_attrs {
    double mask_value;
} kc_masking_attrs;

#endif
