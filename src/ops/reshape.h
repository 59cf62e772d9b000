/* Attributes of reshaping layers. */
#ifndef KC_OPS_RESHAPE_H
#define KC_OPS_RESHAPE_H

#include <stdint.h>

typedef struct kc_pad_attrs {
    int spatial;
    int64_t before[3];
    int64_t after[3];
} kc_pad_attrs;              /* ZeroPadding*, Cropping* */

typedef struct kc_upsample_attrs {
    int spatial;
    int64_t size[3];
    const char *interpolation; /* "nearest" or "bilinear" */
} kc_upsample_attrs;

typedef struct kc_reshape_attrs {
    int64_t dims[8];         /* target shape without batch; -1 = inferred */
    int n_dims;
    int perm[8];             /* Permute: 1-based dims as in Keras */
} kc_reshape_attrs;           /* Reshape, Permute, RepeatVector (dims[0] = n) */

#endif
