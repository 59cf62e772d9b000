/* Convolutions with few output channels (a model's last layer: a
 * denoiser's or segmenter's 32 -> 1 3x3 "head", an autoencoder's 64 -> 3)
 * on kerasc's own loop (narrow.c, narrow_simd.inc). */
#ifndef KC_KERNELS_NARROW_H
#define KC_KERNELS_NARROW_H

#include <stdint.h>

#include "kernels/kernel.h"
#include "ops/conv.h"

/* Most output channels the loop takes: oneDNN pads the output channels
 * to a vector of 16, so below 16 it does up to 16x the work. */
#define KC_NARROW_MAX_FILTERS 8

/* One image's geometry: input data rows, columns (a folded ZeroPadding
 * excluded) and channels, output rows, columns and channels, the
 * kernel's rows and columns, the strides (rows, columns), the padding
 * before (top, left), the activation (kc_wino_act's codes: 0 linear, 1
 * relu, 2 relu6; 3 applied by the caller). */
typedef struct kc_narrow_geom {
    int64_t in_h, in_w, c, out_h, out_w, f, kh, kw, sy, sx, pad_t, pad_l;
    int act;
} kc_narrow_geom;

/* The loop's copy of the kernel: per output channel, per kernel row, the
 * kw * c taps of the row in Keras's order (column, input channel). */
typedef struct kc_narrow_kernel {
    const float *w;    /* channel o's row ky at w + (o * kh + ky) * kw * c */
    const float *bias; /* f floats, or NULL */
} kc_narrow_kernel;

/* Output rows [y0, y1) of one image (NHWC `in` and `out`). Each output is
 * a dot product over its window's rows inside the image: each row's
 * taps inside the image a contiguous run of the input, summed in 16
 * lanes (the run's i-th value into lane i mod 16, one multiply-add each,
 * in order), the lanes added pairwise (i + 8, then + 4, + 2, + 1), then
 * the bias and the activation: the same bits whatever the rows, threads
 * and instruction set. */
void kc_narrow_rows_avx512(const kc_narrow_geom *g, const kc_narrow_kernel *k, const float *in,
                           float *out, int64_t y0, int64_t y1);
void kc_narrow_rows_avx2(const kc_narrow_geom *g, const kc_narrow_kernel *k, const float *in,
                         float *out, int64_t y0, int64_t y1);

/* Run the layer of ctx on this loop where it qualifies (*handled 1), else
 * leave it to the next (*handled 0); *act_done: its activation was
 * applied too. A plain 2-D convolution, undilated, ungrouped, at most
 * KC_NARROW_MAX_FILTERS output channels (4 with AVX2), no fused sum,
 * depthwise or pooling. Needs ctx->state and AVX2 or AVX-512 (kc_isa);
 * never with KC_NARROW=0 or KC_DNNL=0 (the plain path). Streamed weights
 * (ctx->w_ext) are packed again every run; ctx->whole runs it as one
 * part on the calling thread. */
kc_status kc_narrow_conv(const kc_exec_ctx *ctx, int *handled, int *act_done);

/* For tests: 1 when the state is this kernel's. */
int kc_narrow_owns(const kc_kernel_state *state);

#endif
