/* Execution plan for one set of input shapes: every value's concrete
 * shape and its offset in the activation arena. */
#ifndef KC_PLAN_H
#define KC_PLAN_H

#include <stddef.h>

#include "base/tensor.h"
#include "graph/graph.h"
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
/* Per value, the last node that reads it: the node count for a model
 * output, -1 for none. */
void kc_plan_last_reads(const kc_graph *g, int *last);
/* The value whose slot v shares (following alias, which may be NULL). */
int kc_plan_root(const int *alias, int v);
/* Per value (made: n_values ints), the node that writes it first: for a
 * root, the first producer among the values sharing its slot (a fused
 * block's output slot is written by the block's first node, before the
 * output's own producer), -1 for a model input; else its producer. */
void kc_plan_first_writers(const kc_graph *g, const int *alias, int *made);

/* A plan split at node `head` (lanes.c runs nodes [0, head) image by
 * image): KC_PLAN_HEAD lays out only those nodes' values, for the shapes
 * given (one image's); KC_PLAN_TAIL lays out the rest, for the whole
 * shapes, with the values that cross (made in the head, read after it or
 * model outputs) and the model inputs read after it in place before node
 * `head` runs.
 * Offsets of values a part does not lay out are 0 and must not be read;
 * shapes are all resolved. KC_PLAN_WHOLE: kc_plan_build. */
typedef enum { KC_PLAN_WHOLE, KC_PLAN_HEAD, KC_PLAN_TAIL } kc_plan_part;
kc_status kc_plan_build_split(const struct kc_model *model, const int *alias,
                              const kc_shape *in_shapes, int n_in, int head, kc_plan_part part,
                              kc_plan *out);
/* p (a whole plan) laid out again with region_last (per node: the join
 * of the branch region it runs in, or -1; branches.c): the values a
 * region reads or writes live to its join, and its nodes' spare range is
 * the one free throughout the region. */
kc_status kc_plan_relayout(const struct kc_model *model, const int *alias, const int *region_last,
                           kc_plan *p);
int kc_plan_matches(const kc_plan *plan, const kc_shape *in_shapes, int n_in);
void kc_plan_free(kc_plan *plan);

#endif
