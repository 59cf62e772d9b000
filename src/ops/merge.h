/* Attributes of merge layers. */
#ifndef KC_OPS_MERGE_H
#define KC_OPS_MERGE_H

typedef enum kc_merge_kind {
    KC_MERGE_ADD, KC_MERGE_SUBTRACT, KC_MERGE_MULTIPLY, KC_MERGE_AVERAGE,
    KC_MERGE_MAXIMUM, KC_MERGE_MINIMUM, KC_MERGE_CONCAT, KC_MERGE_DOT
} kc_merge_kind;

typedef struct kc_merge_attrs {
    kc_merge_kind kind;
    int axis;        /* Concatenate (as written, may be negative) */
    int dot_axes[2]; /* Dot */
    int normalize;   /* Dot */
} kc_merge_attrs;

#endif
