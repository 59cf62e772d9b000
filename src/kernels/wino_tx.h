/* The 2-D F(4x4, 3x3) transforms of wino.c, shared with the kernel that
 * transforms its weights as it runs (wino_fly.c). Internal to kernels/. */
#ifndef KC_WINO_TX_H
#define KC_WINO_TX_H

#include <stdint.h>

/* F(4x4, 3x3)'s transforms in float, at (4 x 6), bt (6 x 6), g (6 x 3),
 * row-major; 1 when their zeros are not where the unrolled loops skip
 * them (kc_wino2d_g_nz for g, wino.c's patterns for at and bt). */
int kc_wino2d_f43(float *at, float *bt, float *g);

/* g's zeros for the points 0, 1, -1, 2, -2 and infinity: row 0 reads
 * only the kernel's first tap, row 5 only its last. */
static inline int kc_wino2d_g_nz(int row, int tap)
{
    return row == 0 ? tap == 0 : row == 5 ? tap == 2 : 1;
}

/* One tile's input transform, bt · d · bt' over its 6x6 inputs (d
 * row-major, NULL where padding), into the 36 rows
 * v[(xi * 6 + eta) * ldv + c], c < c_all. AVX-512. */
void kc_wino2d_in_tile(const float *bt, int64_t c_all, const float *const *d, float *v,
                       int64_t ldv);

/* One tile's output transform for m = 4, at · M · at' over the 36 rows
 * mt[(xi * 6 + eta) * ldm + f], f < f_all, into y[p * 4 + q] + f for
 * p < valid_h, q < valid_w, with the bias (or NULL) and the activation
 * (0 linear, 1 relu, 2 relu6, else none). AVX-512. */
void kc_wino2d_out_tile4(const float *at, int64_t f_all, const float *mt, int64_t ldm,
                         const float *bias, int act, float *const *y, int valid_h, int valid_w);

#endif
