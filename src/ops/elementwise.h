/* Tensor operations shared by two op families that spell the same maths
 * differently: Keras 3 ops nodes (numpy.c: keras.src.ops.numpy.Add, ...)
 * and Keras 2 TFOpLambda layers (tfop.c: "math.add", ...). Both parse into
 * one attrs struct, kc_top_attrs, and share one shape logic (implemented
 * in numpy.c), so the executor sees "x + 3.0" the same way whichever Keras
 * wrote it. */
#ifndef KC_OPS_ELEMENTWISE_H
#define KC_OPS_ELEMENTWISE_H

#include <stdint.h>

#include "ops/op.h"

typedef enum kc_top_kind {
    KC_TOP_IDENTITY,
    KC_TOP_UNARY,      /* ew on operand 0 */
    KC_TOP_BINARY,     /* ew on operands 0 and 1, NumPy broadcasting */
    KC_TOP_CLIP,       /* clamp operand 0 to [clip_min, clip_max] */
    KC_TOP_SOFTMAX,    /* over axis */
    KC_TOP_REDUCE,     /* reduce over axes (n_axes == -1: all), keepdims */
    KC_TOP_RESHAPE,    /* to shape[0..shape_rank), -1 = inferred */
    KC_TOP_TRANSPOSE,  /* out axis i = in axis perm[i] */
    KC_TOP_EXPAND_DIMS,/* new size-1 axes at axes[] (output numbering) */
    KC_TOP_SQUEEZE,    /* drop axes[] (input numbering) */
    KC_TOP_CONCAT,     /* inputs with kc_top_concat_input() along axis */
    KC_TOP_SLICE,      /* basic indexing: slices[] */
    KC_TOP_MATMUL,     /* NumPy matmul of operands 0 and 1 */
    KC_TOP_CAST,       /* to dtype */
} kc_top_kind;

typedef enum kc_ew_op {
    KC_EW_NONE,
    /* binary */
    KC_EW_ADD, KC_EW_SUB, KC_EW_MUL, KC_EW_DIV, KC_EW_POW, KC_EW_MAX, KC_EW_MIN,
    KC_EW_SQUARED_DIFF,
    /* unary */
    KC_EW_NEG, KC_EW_ABS, KC_EW_SQRT, KC_EW_RSQRT, KC_EW_SQUARE, KC_EW_EXP, KC_EW_LOG,
    KC_EW_TANH, KC_EW_SIGMOID, KC_EW_RELU, KC_EW_RELU6, KC_EW_SILU,
    KC_EW_HARD_SIGMOID,   /* Keras 3 ops formula: relu6(x + 3) / 6 */
    KC_EW_HARD_SILU,      /* x * relu6(x + 3) / 6 */
    KC_EW_GELU,           /* exact: 0.5 x (1 + erf(x / sqrt 2)) */
    KC_EW_GELU_TANH,      /* tanh approximation */
    KC_EW_ERF, KC_EW_RECIPROCAL, KC_EW_FLOOR, KC_EW_CEIL, KC_EW_SOFTPLUS, KC_EW_SOFTSIGN,
    KC_EW_ELU,            /* alpha */
    KC_EW_SELU,
    KC_EW_LEAKY_RELU,     /* alpha = negative slope */
} kc_ew_op;

typedef enum kc_reduce_op {
    KC_REDUCE_MEAN, KC_REDUCE_SUM, KC_REDUCE_MAX, KC_REDUCE_MIN, KC_REDUCE_PROD,
} kc_reduce_op;

/* Where an argument's values come from at run time. */
typedef enum kc_operand_kind {
    KC_OPND_INPUT,  /* node input `index` */
    KC_OPND_CONST,  /* node->consts[index] (a positional constant) */
    KC_OPND_SCALAR, /* `scalar` (a keyword number) */
    KC_OPND_INLINE, /* attrs->inline_data (a keyword list constant) */
} kc_operand_kind;

typedef struct kc_operand {
    kc_operand_kind kind;
    int index;
    double scalar;
    kc_shape shape;   /* for every kind; SCALAR is rank 0 */
} kc_operand;

/* One entry of a basic-indexing key after ellipsis expansion: every input
 * axis is covered, in order, with new axes interleaved. */
typedef enum kc_slice_kind { KC_SLICE_RANGE, KC_SLICE_INDEX, KC_SLICE_NEWAXIS } kc_slice_kind;

typedef struct kc_slice_item {
    kc_slice_kind kind;
    int axis;             /* input axis (RANGE, INDEX) */
    int64_t start, stop;  /* Python semantics, negative counts from the end;
                             RANGE bounds only count when has_start/has_stop */
    int64_t step;         /* RANGE: >= 1 */
    int has_start, has_stop;
} kc_slice_item;

#define KC_TOP_INLINE_MAX 256
#define KC_TOP_MAX_SLICES (2 * KC_MAX_RANK)

/* Attributes of one tensor op. kind/ew/reduce come from the class or TF
 * function (parse); the rest is resolved on each infer call from config,
 * constants and kwargs, normalised against the input rank (axes >= 0). Ops
 * nodes and TFOpLambda layers are called exactly once, so "the last call"
 * is "the call". */
typedef struct kc_top_attrs {
    kc_top_kind kind;
    kc_ew_op ew;
    kc_reduce_op reduce;
    const char *op_name;      /* class or TF function name, for messages */
    kc_operand operand[2];    /* UNARY..MATMUL: 1 or 2 operands */
    int n_operands;
    float inline_data[KC_TOP_INLINE_MAX];
    double alpha;             /* ELU alpha, LEAKY_RELU slope */
    double clip_min, clip_max;
    int axis;                 /* SOFTMAX, CONCAT */
    int axes[KC_MAX_RANK];    /* REDUCE, EXPAND_DIMS, SQUEEZE */
    int n_axes;               /* as read: -1 = all (REDUCE) / every size-1 axis
                                 (SQUEEZE); after infer always explicit */
    int keepdims;
    int64_t shape[KC_MAX_RANK];
    int shape_rank;           /* RESHAPE target */
    int perm[KC_MAX_RANK];
    int n_perm;               /* TRANSPOSE; 0 = reverse all axes */
    kc_slice_item slices[KC_TOP_MAX_SLICES];
    int n_slices;
    kc_dtype dtype;           /* CAST */
    int transpose_a, transpose_b; /* MATMUL (tf.linalg.matmul) */
} kc_top_attrs;

/* ------------------------------------------- shared logic (numpy.c) */

/* Output shape(s) of a fully resolved op (operands and parameters filled
 * in); normalises axes in place. */
kc_status kc_top_infer(kc_op_ctx *ctx, kc_top_attrs *a);

/* An int, a list of ints or null (*n = -1) into axes[] (raw, unnormalised). */
kc_status kc_top_read_axes(const cJSON *item, const char *what, int *axes, int *n);
/* A reshape target: list of ints (-1 / null = inferred) or a single int. */
kc_status kc_top_read_shape(const cJSON *item, const char *what, int64_t *dims, int *rank);
/* A dtype name ("float32", "int64", "bool", ...). */
kc_status kc_top_read_dtype(const char *name, kc_dtype *out);
/* A basic-indexing key (int, slice, None, Ellipsis, or a list of those) in
 * Keras 3 form ({"class_name": "__slice__", "config": {...}}) or Keras 2
 * form ({"start", "stop", "step"}), expanded against an input of `rank`. */
kc_status kc_top_read_slices(const cJSON *key, int rank, kc_top_attrs *a);
/* A numeric JSON value (number, bool, nested lists, or a Keras 3
 * __tensor__/__numpy__ object) into out[0..cap) with its shape. */
kc_status kc_json_values(const cJSON *item, float *out, int64_t cap, kc_shape *shape,
                         int64_t *count);
/* Whether input i of a CONCAT call is one of the concatenated tensors
 * (positional, or passed as the list keyword "xs" / "values"). */
int kc_top_concat_input(const kc_op_ctx *ctx, int i);
/* Python slice arithmetic for one RANGE item on a known dim (>= 0):
 * first index and element count. */
void kc_slice_resolve(const kc_slice_item *it, int64_t dim, int64_t *start, int64_t *count);

#endif
