/* Attributes of normalization layers. */
#ifndef KC_OPS_NORM_H
#define KC_OPS_NORM_H

#include <stdint.h>

typedef struct kc_norm_attrs {
    int axes[8];       /* as written (may be negative); normalised in infer */
    int n_axes;
    double epsilon;
    int center;
    int scale;
    int rms_scaling;   /* LayerNormalization */
    int64_t groups;    /* GroupNormalization */
} kc_norm_attrs;

#endif
