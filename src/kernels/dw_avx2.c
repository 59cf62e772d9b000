/* dw.h's loop for AVX2 (CMakeLists.txt: -mavx2 -mfma).
 *
 * Every output vector (8 channels of one pixel) is one chain of
 * multiply-adds from its bias over its taps, row by row, left to right,
 * the taps in the padding skipped: jit_dw:avx2's order, whatever block
 * computes it. What makes this faster than that kernel (MobileNetV2's
 * stride-1 layers, one thread, the Zen 3: 56x56x144 172 -> 138 us, 14x14
 * x384 29 -> 23, 112x112x32 147 -> 109) is the interior's block: two
 * output rows at once, which share two of their four input rows, so each
 * input vector comes from L2 once per two rows instead of once per row.
 * Its 8 chains (2 rows x 4 pixels) hide the multiply-add's latency.
 * Columns at the image's edges and rows without a partner take one
 * pixel at a time, 4 channel blocks side by side. Stride 2 (in fused
 * pairs only, dnnl_conv.c) runs the same blocks, two rows sharing one of
 * their five input rows; there each output reads four times the input
 * and the loop runs at ~30 GFLOP/s a core out of L2 (block_1 of
 * MobileNetV2), L2-bound. */
#include <immintrin.h>

#include "kernels/dw.h"

static inline __m256 kc_dw_act(__m256 v, int act)
{
    if (act == 1 || act == 2)
        v = _mm256_max_ps(v, _mm256_setzero_ps());
    return act == 2 ? _mm256_min_ps(v, _mm256_set1_ps(6.0f)) : v;
}

/* One output pixel, nc blocks of 8 channels: its taps in rows [ky_lo,
 * ky_hi) and columns [kx_lo, kx_hi) (the others in the padding), `in` at
 * the first of them, `w` and `bias` at the first block; `rs` floats
 * between input rows. */
__attribute__((always_inline)) static inline void
kc_dw_pixel_blocks(const kc_dw_geom *g, const float *in, const float *w, const float *bias,
                   float *out, int64_t rs, int ky_lo, int ky_hi, int kx_lo, int kx_hi, const int nc)
{
    __m256 acc[4];
    #pragma GCC unroll 4
    for (int j = 0; j < nc; j++)
        acc[j] = _mm256_loadu_ps(bias + 8 * j);
    for (int ky = ky_lo; ky < ky_hi; ky++)
        for (int kx = kx_lo; kx < kx_hi; kx++) {
            const float *at = in + (ky - ky_lo) * rs + (kx - kx_lo) * g->c;
            #pragma GCC unroll 4
            for (int j = 0; j < nc; j++)
                acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(at + 8 * j),
                                         _mm256_loadu_ps(w + 72 * j + (ky * 3 + kx) * 8), acc[j]);
        }
    #pragma GCC unroll 4
    for (int j = 0; j < nc; j++)
        _mm256_storeu_ps(out + 8 * j, kc_dw_act(acc[j], g->act));
}

/* Output pixel x of the row whose taps start at input row iy0, all
 * channels, the taps clipped to the image. */
static void kc_dw_pixel(const kc_dw_geom *g, const float *in, const float *w, const float *bias,
                        float *row_out, int64_t iy0, int64_t x)
{
    int64_t ix0 = x * g->s - g->pad_l, rs = g->in_w * g->c;
    int ky_lo = iy0 < 0 ? (int)-iy0 : 0, kx_lo = ix0 < 0 ? (int)-ix0 : 0;
    int ky_hi = g->in_h - iy0 < 3 ? (int)(g->in_h - iy0) : 3;
    int kx_hi = g->in_w - ix0 < 3 ? (int)(g->in_w - ix0) : 3;
    /* (no tap at all: a pixel all in the padding gets its bias) */
    const float *at = ky_lo < ky_hi && kx_lo < kx_hi ? in + (iy0 + ky_lo) * rs + (ix0 + kx_lo) * g->c
                                                     : in;
    float *o = row_out + x * g->c;
    int64_t cb = 0;
    for (; cb + 32 <= g->c; cb += 32)
        kc_dw_pixel_blocks(g, at + cb, w + cb * 9, bias + cb, o + cb, rs, ky_lo, ky_hi, kx_lo,
                           kx_hi, 4);
    for (; cb < g->c; cb += 8)
        kc_dw_pixel_blocks(g, at + cb, w + cb * 9, bias + cb, o + cb, rs, ky_lo, ky_hi, kx_lo,
                           kx_hi, 1);
}

/* Two output rows x 4 pixels x 8 channels at stride s, every tap inside
 * the image: `in` at the top-left tap of the upper row's first pixel.
 * Input row r (0 .. s + 2) is the upper row's tap row r and the lower
 * row's r - s; input column j is pixel i's tap j - i * s. */
__attribute__((always_inline)) static inline void
kc_dw_pair_block(const kc_dw_geom *g, const float *in, const float *w, const float *bias,
                 float *out, int64_t rs, int64_t out_rs, const int s)
{
    int64_t c = g->c;
    __m256 b = _mm256_loadu_ps(bias);
    __m256 up[4] = {b, b, b, b}, down[4] = {b, b, b, b};
    #pragma GCC unroll 5
    for (int r = 0; r < s + 3; r++) {
        const float *row = in + r * rs;
        #pragma GCC unroll 9
        for (int col = 0; col < 3 * s + 3; col++) {
            __m256 v = _mm256_loadu_ps(row + col * c);
            #pragma GCC unroll 3
            for (int kx = 0; kx < 3; kx++) {
                int i = (col - kx) / s; /* the output pixel this tap is kx of */
                if (col < kx || (col - kx) % s || i > 3)
                    continue;
                if (r < 3)
                    up[i] = _mm256_fmadd_ps(v, _mm256_loadu_ps(w + (r * 3 + kx) * 8), up[i]);
                if (r >= s && r - s < 3)
                    down[i] =
                        _mm256_fmadd_ps(v, _mm256_loadu_ps(w + ((r - s) * 3 + kx) * 8), down[i]);
            }
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(out + i * c, kc_dw_act(up[i], g->act));
        _mm256_storeu_ps(out + out_rs + i * c, kc_dw_act(down[i], g->act));
    }
}

/* One output row x 4 pixels x 16 channels at stride s, taps in rows
 * [ky_lo, ky_hi) (the others in the padding; `in` at row ky_lo's first
 * tap), every column inside: 8 chains. */
__attribute__((always_inline)) static inline void
kc_dw_row_block(const kc_dw_geom *g, const float *in, const float *w, const float *bias,
                float *out, int64_t rs, const int ky_lo, const int ky_hi, const int s)
{
    int64_t c = g->c;
    __m256 acc[4][2];
    #pragma GCC unroll 2
    for (int j = 0; j < 2; j++) {
        __m256 b = _mm256_loadu_ps(bias + 8 * j);
        #pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
            acc[i][j] = b;
    }
    #pragma GCC unroll 3
    for (int ky = ky_lo; ky < ky_hi; ky++)
        #pragma GCC unroll 2
        for (int j = 0; j < 2; j++) {
            const float *row = in + (ky - ky_lo) * rs + 8 * j;
            __m256 w0 = _mm256_loadu_ps(w + 72 * j + ky * 24);
            __m256 w1 = _mm256_loadu_ps(w + 72 * j + ky * 24 + 8);
            __m256 w2 = _mm256_loadu_ps(w + 72 * j + ky * 24 + 16);
            #pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                const float *px = row + i * s * c;
                acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(px), w0, acc[i][j]);
                acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(px + c), w1, acc[i][j]);
                acc[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(px + 2 * c), w2, acc[i][j]);
            }
        }
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        #pragma GCC unroll 2
        for (int j = 0; j < 2; j++)
            _mm256_storeu_ps(out + i * c + 8 * j, kc_dw_act(acc[i][j], g->act));
}

/* The interior columns [x_lo, x_hi) of one row, taps in rows [ky_lo,
 * ky_hi): blocks of 4 pixels x 16 channels, the rest one pixel at a time. */
__attribute__((always_inline)) static inline void
kc_dw_row_interior(const kc_dw_geom *g, const float *in, const float *w, const float *bias,
                   float *row_out, int64_t iy0, int64_t x_lo, int64_t x_hi, const int ky_lo,
                   const int ky_hi, const int s)
{
    int64_t c = g->c, rs = g->in_w * c, x = x_lo;
    for (; x + 4 <= x_hi; x += 4) {
        const float *at = in + (iy0 + ky_lo) * rs + (x * s - g->pad_l) * c;
        int64_t cb = 0;
        for (; cb + 16 <= c; cb += 16)
            kc_dw_row_block(g, at + cb, w + cb * 9, bias + cb, row_out + x * c + cb, rs, ky_lo,
                            ky_hi, s);
        for (; cb < c; cb += 8) /* a last block of 8 channels, pixel by pixel */
            for (int i = 0; i < 4; i++)
                kc_dw_pixel_blocks(g, at + i * s * c + cb, w + cb * 9, bias + cb,
                                   row_out + (x + i) * c + cb, rs, ky_lo, ky_hi, 0, 3, 1);
    }
    for (; x < x_hi; x++)
        kc_dw_pixel(g, in, w, bias, row_out, iy0, x);
}

/* The columns whose three taps are all inside the image. */
static void kc_dw_interior(const kc_dw_geom *g, int64_t *x_lo, int64_t *x_hi)
{
    *x_lo = (g->pad_l + g->s - 1) / g->s;
    *x_hi = g->in_w - 3 + g->pad_l < 0 ? 0 : (g->in_w - 3 + g->pad_l) / g->s + 1;
    if (*x_lo > g->out_w)
        *x_lo = g->out_w;
    if (*x_hi > g->out_w)
        *x_hi = g->out_w;
    if (*x_hi < *x_lo)
        *x_hi = *x_lo;
}

/* Output row y alone. */
__attribute__((always_inline)) static inline void
kc_dw_row(const kc_dw_geom *g, const float *in, const float *w, const float *bias, float *out,
          int64_t y, const int s)
{
    int64_t iy0 = y * s - g->pad_t, x_lo, x_hi;
    float *row_out = out + y * g->out_w * g->c;
    kc_dw_interior(g, &x_lo, &x_hi);
    for (int64_t x = 0; x < x_lo; x++)
        kc_dw_pixel(g, in, w, bias, row_out, iy0, x);
    int ky_lo = iy0 < 0 ? (int)-iy0 : 0;
    int ky_hi = g->in_h - iy0 < 3 ? (int)(g->in_h - iy0) : 3;
    if (ky_lo == 0 && ky_hi == 3)
        kc_dw_row_interior(g, in, w, bias, row_out, iy0, x_lo, x_hi, 0, 3, s);
    else if (ky_lo == 1 && ky_hi == 3)
        kc_dw_row_interior(g, in, w, bias, row_out, iy0, x_lo, x_hi, 1, 3, s);
    else if (ky_lo == 0 && ky_hi == 2)
        kc_dw_row_interior(g, in, w, bias, row_out, iy0, x_lo, x_hi, 0, 2, s);
    else
        for (int64_t x = x_lo; x < x_hi; x++)
            kc_dw_pixel(g, in, w, bias, row_out, iy0, x);
    for (int64_t x = x_hi; x < g->out_w; x++)
        kc_dw_pixel(g, in, w, bias, row_out, iy0, x);
}

/* Output rows y and y + 1, all of whose taps' rows are inside. */
__attribute__((always_inline)) static inline void
kc_dw_row_pair(const kc_dw_geom *g, const float *in, const float *w, const float *bias,
               float *out, int64_t y, const int s)
{
    int64_t c = g->c, rs = g->in_w * c, out_rs = g->out_w * c, iy0 = y * s - g->pad_t, x_lo, x_hi;
    float *row_out = out + y * out_rs;
    kc_dw_interior(g, &x_lo, &x_hi);
    for (int64_t x = 0; x < x_lo; x++) {
        kc_dw_pixel(g, in, w, bias, row_out, iy0, x);
        kc_dw_pixel(g, in, w, bias, row_out + out_rs, iy0 + s, x);
    }
    int64_t x = x_lo;
    for (; x + 4 <= x_hi; x += 4) {
        const float *at = in + iy0 * rs + (x * s - g->pad_l) * c;
        for (int64_t cb = 0; cb < c; cb += 8)
            kc_dw_pair_block(g, at + cb, w + cb * 9, bias + cb, row_out + x * c + cb, rs, out_rs,
                             s);
    }
    for (; x < g->out_w; x++) {
        kc_dw_pixel(g, in, w, bias, row_out, iy0, x);
        kc_dw_pixel(g, in, w, bias, row_out + out_rs, iy0 + s, x);
    }
}

__attribute__((always_inline)) static inline void
kc_dw_rows_at(const kc_dw_geom *g, const float *in, const float *w, const float *bias,
              float *out, int64_t y0, int64_t y1, const int s)
{
    for (int64_t y = y0; y < y1;) {
        int64_t iy0 = y * s - g->pad_t;
        if (y + 1 < y1 && iy0 >= 0 && iy0 + s + 3 <= g->in_h) {
            kc_dw_row_pair(g, in, w, bias, out, y, s);
            y += 2;
        } else {
            kc_dw_row(g, in, w, bias, out, y, s);
            y++;
        }
    }
}

void kc_dw_rows_avx2(const kc_dw_geom *g, const float *in, const float *w, const float *bias,
                     float *out, int64_t y0, int64_t y1)
{
    if (g->s == 2)
        kc_dw_rows_at(g, in, w, bias, out, y0, y1, 2);
    else
        kc_dw_rows_at(g, in, w, bias, out, y0, y1, 1);
}
