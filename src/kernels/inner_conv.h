/* A convolution a kernel runs inside its own (a transformed kernel over
 * its input: upconv.c's 2x2 one, a transposed convolution's taps as a
 * 1x1 one), through the convolution dispatch like any layer, with a
 * layer and a kernel state of its own. */
#ifndef KC_KERNELS_INNER_CONV_H
#define KC_KERNELS_INNER_CONV_H

#include "kernels/kernel.h"
#include "ops/conv.h"

/* Batch lanes run one kernel state side by side (runtime/lanes.c):
 * what a state owns for a run's use is owned per lane. */
#define KC_INNER_LANES 8

typedef struct kc_inner_conv {
    kc_layer layer;            /* the outer layer's copy, with these: */
    kc_conv_attrs attrs;
    kc_weight weights[2];      /* kernel, and bias where attrs.use_bias */
    kc_kernel_state *state;    /* the dispatch's kernel state for it */
    /* its output where the arena's spare range has no room, per lane
     * (kc_inner_conv_buffer) */
    float *out[KC_INNER_LANES];
} kc_inner_conv;

/* Set ic up from the outer layer with `attrs` and a zeroed kernel of
 * `kernel` shape (and a bias of `filters` floats where attrs->use_bias),
 * for the caller to fill. On failure ic holds nothing. */
kc_status kc_inner_conv_init(kc_inner_conv *ic, const kc_layer *outer,
                             const kc_conv_attrs *attrs, const kc_shape *kernel);

/* Run it through `conv` on ctx's node and session settings: `in` of
 * in_shape to `out` of out_shape, with the arena's spare range `spare`
 * (or NULL) for its scratch. */
kc_status kc_inner_conv_run(kc_inner_conv *ic, const kc_exec_ctx *ctx, kc_kernel_fn conv,
                            const float *in, const kc_shape *in_shape, float *out,
                            const kc_shape *out_shape, void *spare, size_t spare_bytes);

void kc_inner_conv_free(kc_inner_conv *ic);

/* A buffer of `bytes` for ic's output during one call: from the arena's
 * spare range of ctx (64-aligned; each batch lane has its own arena)
 * where it fits, else ic->out[the lane], allocated on first use and kept
 * (NULL: out of memory). *rest and *rest_bytes: the spare range left for
 * the inner convolution's own scratch. */
float *kc_inner_conv_buffer(kc_inner_conv *ic, const kc_exec_ctx *ctx, size_t bytes, void **rest,
                            size_t *rest_bytes);

#endif
