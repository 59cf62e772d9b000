/* Execution plan for one set of input shapes: every value's concrete
 * shape and its offset in the activation arena. */
#ifndef KC_PLAN_H
#define KC_PLAN_H

#include <stddef.h>

#include "base/tensor.h"
#include "kerasc.h"

#define KC_MAX_NODE_IO 1024
#define KC_PLAN_MAX_INPUTS 64

struct kc_model;

typedef struct kc_plan {
    int n_values;
    kc_shape *shape;       /* per value */
    size_t *offset;        /* per value, in floats */
    size_t arena_floats;   /* arena size needed */
    /* Per node: the largest range of the arena that holds no value live
     * while the node runs (offset and size in floats; size 0: none). A
     * kernel may use it as scratch memory for that run. */
    size_t *spare_offset, *spare_floats;
    kc_shape in_shapes[KC_PLAN_MAX_INPUTS];
    int n_in;              /* 0: no plan yet */
} kc_plan;

/* alias (per value, or NULL): values that share their root value's slot
 * (outputs of nodes absorbed by fusion). */
kc_status kc_plan_build(const struct kc_model *model, const int *alias, const kc_shape *in_shapes,
                        int n_in, kc_plan *out);
int kc_plan_matches(const kc_plan *plan, const kc_shape *in_shapes, int n_in);
void kc_plan_free(kc_plan *plan);

#endif
