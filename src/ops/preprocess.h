/* Attributes of the in-model preprocessing layers (Rescaling, Resizing,
 * CenterCrop, Normalization) and of the helper layers keras.applications
 * defines (LayerScale, StochasticDepth, CustomScaleLayer). */
#ifndef KC_OPS_PREPROCESS_H
#define KC_OPS_PREPROCESS_H

#include <stdint.h>

#include "base/tensor.h"

/* y = x * scale + offset, scale/offset broadcast NumPy-style against x
 * (a list is per channel on the last axis). Values live in the same
 * allocation as the struct. */
typedef struct kc_rescaling_attrs {
    kc_shape scale_shape;
    kc_shape offset_shape;
    int64_t n_scale, n_offset;
    float *scale;
    float *offset;
} kc_rescaling_attrs;

typedef enum kc_interpolation {
    KC_INTERP_BILINEAR, KC_INTERP_NEAREST, KC_INTERP_BICUBIC, KC_INTERP_AREA,
    KC_INTERP_LANCZOS3, KC_INTERP_LANCZOS5, KC_INTERP_GAUSSIAN, KC_INTERP_MITCHELLCUBIC,
} kc_interpolation;

/* Resizing of (batch, h, w, c) or unbatched (h, w, c) images. */
typedef struct kc_resizing_attrs {
    int64_t height, width;
    kc_interpolation interpolation;
    int crop_to_aspect_ratio;
    int pad_to_aspect_ratio;
    double fill_value;          /* padding value with pad_to_aspect_ratio */
    int antialias;
} kc_resizing_attrs;

/* Central crop to (height, width); Keras resizes first when the input is
 * smaller than the target. */
typedef struct kc_center_crop_attrs {
    int64_t height, width;
} kc_center_crop_attrs;

/* y = (x - mean) / max(sqrt(variance), 1e-7), or the inverse with invert.
 * keep[] are the normalised "axis" values (input axes with their own
 * mean/variance), resolved on the first call; mean/variance have the
 * input's dims on those axes. With constants in the config they are in
 * mean/variance (same allocation, mean_shape broadcastable to that
 * shape); otherwise the layer has weights mean, variance, count. */
typedef struct kc_normalization_attrs {
    int axes[KC_MAX_RANK];      /* as configured */
    int n_axes;                 /* -1: axis=None (one scalar mean) */
    int keep[KC_MAX_RANK];
    int n_keep;
    int rank;                   /* input rank the keep axes refer to; 0 before infer */
    int invert;
    int has_constants;
    kc_shape mean_shape, variance_shape;
    float *mean;
    float *variance;
} kc_normalization_attrs;

/* ConvNeXt LayerScale: y = x * gamma, gamma (projection_dim,). */
typedef struct kc_layer_scale_attrs {
    double init_values;
    int64_t projection_dim;
} kc_layer_scale_attrs;

/* ConvNeXt StochasticDepth: identity at inference. */
typedef struct kc_stochastic_depth_attrs {
    double drop_path_rate;
} kc_stochastic_depth_attrs;

/* InceptionResNetV2 CustomScaleLayer: y = inputs[0] + inputs[1] * scale. */
typedef struct kc_custom_scale_attrs {
    double scale;
} kc_custom_scale_attrs;

#endif
