/* Attributes of the advanced-activation layers. */
#ifndef KC_OPS_ACTIVATION_H
#define KC_OPS_ACTIVATION_H

typedef enum kc_act_layer_kind {
    KC_ACT_RELU,      /* ReLU(max_value, negative_slope, threshold) */
    KC_ACT_LEAKY,     /* LeakyReLU(negative_slope) */
    KC_ACT_PRELU,     /* PReLU: learned alpha */
    KC_ACT_ELU,
    KC_ACT_SOFTMAX,
    KC_ACT_THRESHOLDED
} kc_act_layer_kind;

typedef struct kc_act_layer_attrs {
    kc_act_layer_kind kind;
    double max_value;      /* < 0: none */
    double negative_slope;
    double threshold;
    double alpha;          /* ELU alpha / ThresholdedReLU theta */
    int axes[8];           /* Softmax axes */
    int n_axes;
    int shared_axes[8];    /* PReLU */
    int n_shared_axes;
} kc_act_layer_attrs;

#endif
