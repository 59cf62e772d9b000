/* 3x3 stride-1 depthwise convolutions on AVX2 (dw.c, dw_avx2.c): where
 * oneDNN runs without AVX-512, kerasc's own loop instead of oneDNN's
 * jit_dw:avx2, with the same sums in the same order (the bias, then the
 * taps row by row, left to right, skipping those in the padding), so the
 * same bits. */
#ifndef KC_KERNELS_DW_H
#define KC_KERNELS_DW_H

#include <stdint.h>

#include "kernels/kernel.h"
#include "ops/conv.h"

/* One image's geometry: input data rows and columns (a folded
 * ZeroPadding excluded), channels (a multiple of 8), output rows and
 * columns, the padding before (top, left; after is what the sizes
 * leave), the activation (kc_wino_act's codes 0 linear, 1 relu, 2 relu6;
 * 3: applied by the caller), the stride. */
typedef struct kc_dw_geom {
    int64_t in_h, in_w, c, out_h, out_w, pad_t, pad_l;
    int act;
    int64_t s;              /* the stride, 1 or 2 */
} kc_dw_geom;

/* Output rows [y0, y1) of one image: `in` and `out` the image's NHWC
 * data, `w` the kernel packed by kc_dw_weights, `bias` c floats. */
void kc_dw_rows_avx2(const kc_dw_geom *g, const float *in, const float *w, const float *bias,
                     float *out, int64_t y0, int64_t y1);

/* The loop's copies of a layer's weights: *packed, Keras's (3, 3, c, 1)
 * kernel in blocks of 8 channels (block b's 9 taps, row-major, of 8
 * floats at *packed + 72 * b), and *bias_out, c floats (zeros for a
 * NULL bias). KC_ERR_NOMEM when either allocation fails; whatever was
 * allocated is the caller's to free. */
kc_status kc_dw_weights(const float *keras, const float *bias, int64_t c, float **packed,
                        float **bias_out);

/* Whether this kernel runs here at all: AVX2 (kc_isa), oneDNN without
 * AVX-512, KC_DW unset or not 0. */
int kc_dw_enabled(void);

/* The geometry of depthwise layer a from input value shape `in` to
 * output shape `out` (NHWC, images first; g is one image's): a 3x3
 * kernel, the same stride on both axes, at most max_stride (and 2), no
 * dilation, one output per channel, a multiple of 8 channels, "same" or
 * "valid" (a folded ZeroPadding of one too), at least 12 output columns,
 * at most one pixel of padding a side, no fused sum; 0 when the layer
 * does not qualify. */
int kc_dw_geometry(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out,
                   int max_stride, kc_dw_geom *g);

/* Run the layer of ctx on this kernel where it qualifies (*handled 1),
 * else leave it to the next (*handled 0); *act_done: its activation was
 * applied too. Needs ctx->state; never with ctx->w_ext or ctx->whole,
 * nor with KC_DW=0. */
kc_status kc_dw_conv(const kc_exec_ctx *ctx, int *handled, int *act_done);

/* For tests: 1 when the state is this kernel's. */
int kc_dw_owns(const kc_kernel_state *state);

#endif
