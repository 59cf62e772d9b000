/* The pieces of wino.c's 2-D Winograd shared with the kernel that
 * transforms its weights as it runs (wino_fly.c): the eligibility checks,
 * the tile grid, the F(4x4, 3x3) transforms. Internal to kernels/. */
#ifndef KC_WINO_TX_H
#define KC_WINO_TX_H

#include <stdint.h>

#include "base/tensor.h"
#include "kernels/kernel.h"
#include "ops/conv.h"

/* A 2-D layer's images cut into tiles of m x m outputs (m a kernel's
 * own, passed alongside): images, input and output sizes, the leading
 * pad on both axes, tiles per axis and in all. */
typedef struct kc_wino2d_grid {
    int64_t n, h_in, w_in, h_out, w_out, pad, tiles_h, tiles_w, tiles;
} kc_wino2d_grid;

/* The grid of an r x r stride-1 layer from NHWC in to out (padding: 0
 * "valid", 1 "same"); 0 when the shapes are not such a layer's. */
int kc_wino2d_grid_init(kc_wino2d_grid *g, const kc_shape *in, const kc_shape *out, int r,
                        int padding, int m);
/* Tile t's alpha x alpha input cells d[i * alpha + j] in `in` (c
 * channels), NULL where it reads padding. */
void kc_wino2d_cells(const kc_wino2d_grid *g, int m, int alpha, int64_t c, const float *in,
                     int64_t t, const float **d);
/* Tile t's output cells y[p * 4 + q] in `out` (rows of f floats), p < *vh,
 * q < *vw (edge tiles may have fewer than m rows or columns). */
void kc_wino2d_dests(const kc_wino2d_grid *g, int m, int64_t f, float *out, int64_t t, float **y,
                     int *vh, int *vw);

/* What every Winograd kind asks of a layer first: a plain, ungrouped
 * convolution with nothing fused into it, on NHWC data of its spatial
 * rank. */
int kc_wino_plain(const kc_exec_ctx *ctx, const kc_conv_attrs *a);

/* An activation the output transforms apply: 0 linear, 1 relu, 2 relu6;
 * 3 for any other (the caller applies it). */
int kc_wino_act(const char *act);

/* F(m x m, 3x3)'s transforms in float for m = 4 (alpha 6) or m = 2
 * (alpha 4): at (m x alpha), bt (alpha x alpha), g (alpha x 3),
 * row-major; 1 when their zeros are not where the unrolled loops skip
 * them (kc_wino2d_g_nz for g, wino.c's patterns for at and bt). */
int kc_wino2d_f3(int m, float *at, float *bt, float *g);

/* g's zeros (points 0, 1, -1, 2, -2 and infinity for alpha 6; 0, 1, -1
 * and infinity for alpha 4): the first row reads only the kernel's first
 * tap, the last only its last. */
static inline int kc_wino2d_g_nz(int alpha, int row, int tap)
{
    return row == 0 ? tap == 0 : row == alpha - 1 ? tap == 2 : 1;
}

/* One tile's input transform, bt · d · bt' over its alpha x alpha inputs
 * (alpha 6 or 4; d row-major, NULL where padding), into the alpha^2 rows
 * v[(xi * alpha + eta) * ldv + c], c < c_all. AVX-512. */
void kc_wino2d_in_tile(int alpha, const float *bt, int64_t c_all, const float *const *d, float *v,
                       int64_t ldv);

/* One tile's output transform for r = 3 and m = 4 (alpha 6) or 2 (alpha
 * 4), at · M · at' over the alpha^2 rows mt[(xi * alpha + eta) * ldm + f],
 * f < f_all, into y[p * 4 + q] + f for p < valid_h, q < valid_w, with the
 * bias (or NULL) and the activation (0 linear, 1 relu, 2 relu6, else
 * none). AVX-512. */
void kc_wino2d_out_tile(int m, const float *at, int64_t f_all, const float *mt, int64_t ldm,
                        const float *bias, int act, float *const *y, int valid_h, int valid_w);

/* A run of n cache lines from `at` to fetch into L2 (n 0: none). */
typedef struct kc_wino2d_lines {
    const char *at;
    int64_t n;
} kc_wino2d_lines;

/* Share i of n even shares of run (consecutive, together the run). */
static inline kc_wino2d_lines kc_wino2d_lines_share(kc_wino2d_lines run, int64_t i, int64_t n)
{
    int64_t lo = run.n * i / n, hi = run.n * (i + 1) / n;
    return (kc_wino2d_lines){run.at + lo * 64, hi - lo};
}

/* The products' register block: 8 tiles x up to 3 vectors of 16 output
 * channels (24 accumulators, 3 kernel vectors and a broadcast input in
 * the 32 registers). */
#define KC_WINO2D_MR 8
#define KC_WINO2D_NV 3

/* One Winograd product, c[t][..] (+)= a[t][0..k) · b[0..k)[..] for t <
 * tiles: a's rows lda apart (transformed inputs), b's rows nv * 16 wide
 * (transformed kernel, nv <= KC_WINO2D_NV), c's rows ldc apart (first:
 * written, else added onto); the lines of `fetch` (or none) fetched into
 * L2 along the way, spread evenly over the loop. AVX-512
 * (wino_product.c). */
void kc_wino2d_product(const float *a, int64_t lda, const float *b, int64_t k, float *c,
                       int64_t ldc, int64_t tiles, int nv, int first, kc_wino2d_lines fetch);

#endif
