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

/* The 2-D transforms' zeros (points 0, 1, -1, 2, -2 and infinity for
 * alpha = 6; 0, 1, -1 and infinity for alpha = 4): bt's first row reads
 * the even inputs, its last the odd ones, the others 1 to alpha - 2;
 * at's first row reads products 0 to alpha - 2, its last (row m - 1) 1 to
 * alpha - 1, the others 1 to alpha - 2. Constants where the transforms
 * are inlined, so the unrolled loops skip the zero terms: 22 of bt's 36
 * and 18 of at's 24 (m = 4) multiply-adds remain, the same sums in the
 * same order (wino.c's kc_w2_zeros_ok checks the zeros are there). */
static inline int kc_wino2d_bt_nz(int alpha, int xi, int j)
{
    return xi == 0 ? j % 2 == 0 : xi == alpha - 1 ? j % 2 == 1 : j >= 1 && j <= alpha - 2;
}

static inline int kc_wino2d_at_nz(int q, int m, int alpha, int eta)
{
    return q == 0 ? eta <= alpha - 2 : q == m - 1 ? eta >= 1 : eta >= 1 && eta <= alpha - 2;
}

/* The distance between two of the alpha^2 products' rows in a buffer of
 * `floats` a product: one cache line more, so that the rows a transform
 * writes or reads at once do not all fall in one cache set (16 tiles x
 * 256 channels is 16 KB: with the plain distance wino_fly.c's kernel
 * transform took twice the products' time, wino.c's input transforms of
 * such a block 43 against 15 us). */
static inline int64_t kc_wino2d_ld(int64_t floats) { return floats + 16; }

/* Output vectors of 16 channels a product takes at once (wino_fly.c's
 * pieces, wino.c's groups). */
#define KC_WINO2D_NV 3

/* fused4's transformed inputs: a run of 16 channels of one point and
 * tile every KC_WINO_FUSED_RUN floats (wino_fly.c's kc_wf_fused_inputs).
 * 17 rather than 16: with runs 64 bytes apart, a channel's 24 values sat
 * at one offset in 24 cache lines, and fused4 (4 tiles, 512 channels, its
 * kernel in cache, one thread, the Zen 5 of bench/results) took 15.1-15.3
 * us a vector against 14.7-15.0 (17, 18 level; 20, 24 between). */
#define KC_WINO_FUSED_RUN 17
/* The runs of 16 channels a row of fused4's transformed inputs holds for
 * c channels (the last one padded with zeros). */
static inline int64_t kc_wino_fused_blocks(int64_t c) { return (c + 15) / 16; }

/* The Winograd kernels' vector code (wino_simd.inc), one table per
 * instruction set; kc_wino_simd_pick gives the CPU's. Layouts are the
 * same for all (vectors of 16 channels), so a state built with one runs
 * with another.
 *
 * in1d: one tile's 1-D input transform, v[xi * ldv + c] = sum_j
 * bt[xi][j] d[j][c] for c < c_all, d[j] NULL where padding.
 * out1d: one tile's 1-D output transform (at: m x alpha) of the alpha rows
 * mt[xi * ldm + f], f < f_all, into y[q] + f for q < valid, with the bias
 * (or NULL) and the activation (0 linear, 1 relu, 2 relu6, else none).
 * in2d: one tile's input transform, bt · d · bt' over its alpha x alpha
 * inputs (alpha 6 or 4; d row-major, NULL where padding), into the
 * alpha^2 rows v[(xi * alpha + eta) * ldv + c], c < c_all; with `fetch`
 * the cells and rows two lines ahead fetched as it runs.
 * out2d: one tile's output transform for (m, alpha) (4, 6), (2, 6) or (2,
 * 4), at · M · at' over the alpha^2 rows mt[(xi * alpha + eta) * ldm +
 * f], into y[p * 4 + q] + f for p < valid_h, q < valid_w, with the bias
 * and the activation as out1d's.
 * product: c[t][..] (+)= a[t][0..k) · b[0..k)[..] for t < tiles: a's rows
 * lda apart (transformed inputs), b's rows nv * 16 wide (transformed
 * kernel, nv <= KC_WINO2D_NV), c's rows ldc apart (first: written, else
 * added onto); the lines of `fetch` (or none) fetched into L2 along the
 * way, spread evenly over the loop (with KC_WINO2D_LINES_LEAD in `flags`:
 * two a step over a block's first steps); and with KC_WINO2D_ROWS_AHEAD
 * each block of tiles fetches into L1 the a rows the next reads (the
 * next block's, the last block those of `after`, the next call's a, or
 * none where NULL; kc_wino2d_fetch_rows_wanted).
 * kernel2d: F(m x m, 3x3)'s transformed kernel (g · w · g', g wino_fly.c's)
 * of input channels c0 .. c0+cn-1 and output vectors v0 .. v0+nv-1 of w
 * ([vecs][c][9 taps][16]) into u: [alpha^2][cn][nv * 16], rows ldu apart.
 * fused4 (AVX-512 only, else NULL): F(4x4, 3x3)'s products of one output
 * vector (w: its [c][9 taps][16]) over at most 4 tiles, the kernel
 * transformed in registers as they run: m[p * ldm + t * 16] = sum over ci
 * of x[p][t][ci] (g · w[ci] · g')[p], x the transformed inputs in vf as
 * wino_fly.c's kc_wf_fused_inputs lays them out (KC_WINO_FUSED_RUN); the
 * same bits as kernel2d then product; each pass over its channels fetches
 * the next pass's taps into L2, the last one the first of pf's (the next
 * vector's, pf_lines lines; NULL: none). */
/* product's flags. ROWS_AHEAD: each block fetches the next block's rows
 * of transformed inputs into L1 as it runs. LINES_LEAD: the block's
 * share of `fetch`'s lines two a step over its first steps, then its
 * remaining steps without a fetch, rather than spread over every step by
 * a counter of its own (which took two of the loop's general registers:
 * the rows' pointers then came from the stack and from vector registers
 * at every step; wino_fly.c's kc_wf_lead_wanted). A block that fetches
 * rows ahead keeps the spread fetch (its loop has the counters anyway). */
#define KC_WINO2D_ROWS_AHEAD 1
#define KC_WINO2D_LINES_LEAD 2

typedef struct kc_wino_simd {
    const char *name; /* "avx512", "avx2" */
    void (*in1d)(int alpha, const float *bt, int64_t c_all, const float *const *d, float *v,
                 int64_t ldv);
    void (*out1d)(int m, int alpha, const float *at, int64_t f_all, const float *mt, int64_t ldm,
                  const float *bias, int act, float *const *y, int valid);
    void (*in2d)(int alpha, const float *bt, int64_t c_all, const float *const *d, float *v,
                 int64_t ldv, int fetch);
    void (*out2d)(int m, int alpha, const float *at, int64_t f_all, const float *mt, int64_t ldm,
                  const float *bias, int act, float *const *y, int valid_h, int valid_w);
    void (*product)(const float *a, int64_t lda, const float *b, int64_t k, float *c, int64_t ldc,
                    int64_t tiles, int nv, int first, kc_wino2d_lines fetch, int flags,
                    const float *after);
    void (*kernel2d)(const float *w, int64_t c, int alpha, int64_t v0, int nv, int64_t c0,
                     int64_t cn, float *u, int64_t ldu);
    void (*fused4)(const float *w, int64_t c, const float *vf, int tiles, float *m, int64_t ldm,
                   const char *pf, int64_t pf_lines);
} kc_wino_simd;

/* Whether the Winograd kernels fetch ahead the rows of transformed
 * inputs they read and write (kc_wino_simd's in2d and product;
 * KC_WINO_FETCH_ROWS=0: not). */
int kc_wino2d_fetch_rows_wanted(void);

/* The table for the instruction set kc_isa() allows; NULL when it allows
 * none (the layers then run on oneDNN). */
const kc_wino_simd *kc_wino_simd_pick(void);

#endif
