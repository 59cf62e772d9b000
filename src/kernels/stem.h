/* Convolutions over few input channels (an image's RGB stem: MobileNetV2's
 * 3 -> 32 3x3 stride 2, InceptionV3's 3 -> 32) on kerasc's own loop
 * (stem.c, stem_simd.inc). */
#ifndef KC_KERNELS_STEM_H
#define KC_KERNELS_STEM_H

#include <stdint.h>

#include "kernels/kernel.h"
#include "ops/conv.h"
#include "ops/pool.h"

/* One image's geometry: input data rows and columns (a folded
 * ZeroPadding excluded) and channels, output rows, columns and channels,
 * the kernel's rows and columns, the stride (both axes), the padding
 * before (top, left), the activation (kc_wino_act's codes: 0 linear, 1
 * relu, 2 relu6; 3 applied by the caller), taps = kh * kw * c. */
typedef struct kc_stem_geom {
    int64_t in_h, in_w, c, out_h, out_w, f, kh, kw, s, pad_t, pad_l, taps;
    int act;
} kc_stem_geom;

/* The loop's copy of the kernel: per vector of 16 output channels, its
 * taps in Keras's order (row, column, input channel) of 16 floats, zeros
 * past the last channel; `off[t]`: tap t's input offset in floats from
 * the window's first pixel, for an image `in_w` columns wide. */
typedef struct kc_stem_kernel {
    const float *w;           /* vector v's tap t at w + (v * taps + t) * 16 */
    const float *bias;        /* f floats, or NULL */
    const int32_t *off;       /* taps */
} kc_stem_kernel;

/* Output rows [y0, y1) of one image (NHWC `in`; `out` at row y0): each output
 * the sum over its taps inside the image in order, from zero, one
 * multiply-add each, then the bias, then the activation; the same bits
 * whatever the rows, threads and instruction set. */
void kc_stem_rows_avx512(const kc_stem_geom *g, const kc_stem_kernel *k, const float *in,
                         float *out, int64_t y0, int64_t y1);
void kc_stem_rows_avx2(const kc_stem_geom *g, const kc_stem_kernel *k, const float *in,
                       float *out, int64_t y0, int64_t y1);

/* Kernels wider than 3x3 (ResNet's 7x7 stride-2 conv1) run on the wide
 * loop: blocks of 6 pixels x 64 channels (AVX-512), each kernel row's
 * taps (kw x c) read in a run from the image's row padded with zeros.
 * The padded rows a thread reads: a ring of kh of them (an input row
 * stays while the output rows under it run: at stride 2 each output row
 * pads two new ones), and a row of zeros for those outside the image. */
#define KC_STEM_WIDE_MAX_KERNEL 11
/* The 16-channel vectors a block of it holds (stem_simd.inc): its
 * kernel's groups (kc_stem_wide_rows's w4) are this wide */
#define KC_STEM_WIDE_NV_AVX512 4
#define KC_STEM_WIDE_NV_AVX2 1
typedef struct kc_stem_ring {
    float *rows;              /* kh rows of row_floats */
    const float *zeros;       /* row_floats zeros */
    int64_t row_floats;       /* ((out_w - 1) * s + kw) * c */
    int64_t iy[KC_STEM_WIDE_MAX_KERNEL]; /* the input row each slot holds */
    const float *image;       /* the image they are from (NULL: none) */
} kc_stem_ring;

/* Output rows [y0, y1) of one image as kc_stem_rows's, for a kernel of
 * up to KC_STEM_WIDE_MAX_KERNEL rows: `w4` the kernel in groups of the
 * wide block's vectors (AVX-512: 4), group q's tap t's 16 * 4 channels
 * at w4 + (q * taps + t) * 64 (AVX2: 1 vector, 16), zeros past f. The
 * same sums as kc_stem_rows's. */
void kc_stem_wide_rows_avx512(const kc_stem_geom *g, const float *w4, const float *bias,
                              const float *in, kc_stem_ring *ring, float *out, int64_t y0,
                              int64_t y1);
void kc_stem_wide_rows_avx2(const kc_stem_geom *g, const float *w4, const float *bias,
                            const float *in, kc_stem_ring *ring, float *out, int64_t y0,
                            int64_t y1);

/* The loop inside another kernel: irb.c's block whose expansion is a
 * stem (MobileNetV2's Conv1 before its first depthwise layer), whose rows
 * it computes band by band into the core's cache instead of writing the
 * whole output (1.6 MB there) for the depthwise layer to read back. */
typedef struct kc_stem_loop {
    kc_stem_geom g;
    kc_stem_kernel k; /* the arrays below */
    void (*rows)(const kc_stem_geom *, const kc_stem_kernel *, const float *, float *, int64_t,
                 int64_t);
    float *w, *bias;
    int32_t *off;
} kc_stem_loop;

/* Whether this loop would take convolution a on input value shape `in`
 * (NHWC) were it alone, whatever layers a carries: its geometry into
 * *g; its activation one the loop applies (linear, relu, relu6). */
int kc_stem_block_takes(const kc_conv_attrs *a, const kc_shape *in, kc_stem_geom *g);

/* The loop for geometry *g (from kc_stem_block_takes) on Keras's kernel
 * w and bias (NULL: none), on the instruction set kc_isa() names; the
 * rows are those kc_stem_conv computes, bit for bit. */
kc_status kc_stem_loop_build(const kc_stem_geom *g, const float *w, const float *bias,
                             kc_stem_loop *loop);
void kc_stem_loop_free(kc_stem_loop *loop);

/* Run the layer of ctx on this kernel where it qualifies (*handled 1),
 * else leave it to the next (*handled 0); *act_done: its activation was
 * applied too. A plain 2-D convolution, undilated, ungrouped, the same
 * stride on both axes, a kernel of at most 3x3 (KC_STEM_MAX_KERNEL), at
 * most KC_STEM_MAX_CHANNELS input channels, 16 output channels or more,
 * no fused sum. Needs ctx->state and AVX-512 (kc_isa; with KC_STEM=1
 * AVX2 too); never with KC_STEM=0 or KC_DNNL=0 (the plain path).
 * Streamed weights (ctx->w_ext) are packed again every run; ctx->whole
 * runs it as one part on the calling thread. */
kc_status kc_stem_conv(const kc_exec_ctx *ctx, int *handled, int *act_done);

/* For tests: 1 when the state is this kernel's. */
int kc_stem_owns(const kc_kernel_state *state);

/* 1 when this kernel would take the convolution a from input value shape
 * `in` to `out` and run the max pooling p after it inside (a->post_pool):
 * p 2-D, its windows tiling the output (pool size = strides; "valid", or
 * "same" where that pads nothing), the convolution's activation linear,
 * relu or relu6 (they commute with the max), and max pooling loops for
 * the CPU. Each thread then computes the convolution's rows one pooled
 * row at a time into a buffer of its own and pools them into the output:
 * a 540x540x32 layer's 37 MB output is never written (the real denoising
 * autoencoder's first pair, README). */
int kc_stem_pool_fusable(const kc_conv_attrs *a, const kc_pool_attrs *p, const kc_shape *in,
                         const kc_shape *out);

#endif
