/* Attributes of pooling layers. */
#ifndef KC_OPS_POOL_H
#define KC_OPS_POOL_H

#include <stdint.h>

typedef enum kc_pool_kind { KC_POOL_MAX, KC_POOL_AVG } kc_pool_kind;

typedef struct kc_pool_attrs {
    kc_pool_kind kind;
    int spatial;          /* 1, 2, 3 */
    int global;           /* Global*Pooling */
    int keepdims;         /* global only */
    int64_t pool[3];
    int64_t strides[3];
    int padding;          /* 0 valid, 1 same */
    /* Session copies only (runtime/fuse.c): a ZeroPadding folded into this
     * "valid" max pooling of values that cannot be negative, where a zero
     * never beats a real cell. The input value then has the padded shape
     * but holds the unpadded data; the pooling ignores these cells. */
    int64_t pad_before[3], pad_after[3];
} kc_pool_attrs;

#endif
