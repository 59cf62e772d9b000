/* The products of kerasc's 2-D Winograd kernels (wino_fly.c, wino.c):
 * for each of the alpha^2 points, [tiles x C] transformed inputs times
 * [C x F] transformed kernel, in registers 8 tiles x 48 channels at a
 * time, with the next piece of kernel fetched into L2 meanwhile. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/wino_tx.h"

/* c[i][..] (+)= a[i][0..k) · b[0..k)[..] for mr rows of tiles and nv
 * vectors of channels; c's rows ldc apart (the products buffer), a's rows
 * lda apart (the transformed inputs), b's rows nv * 16 wide. Inlined with
 * mr and nv constants, the accumulators stay in registers. */
__attribute__((target("avx512f"), always_inline)) static inline void
kc_w2p_block(const float *a, int64_t lda, const float *b, int64_t k, float *c, int64_t ldc,
             int mr, int nv, int first, const char *pf, int64_t pf_lines)
{
    __m512 acc[KC_WINO2D_MR][KC_WINO2D_NV];
    int64_t width = 16 * nv;
    #pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
        #pragma GCC unroll 3
        for (int j = 0; j < nv; j++)
            acc[i][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + i * ldc + 16 * j);
    int64_t issued = 0;
    for (int64_t kk = 0; kk < k; kk++, b += width) {
        /* the run's lines spread evenly over the loop */
        for (; issued * k < pf_lines * (kk + 1); issued++)
            _mm_prefetch(pf + issued * 64, _MM_HINT_T1);
        __m512 bv[KC_WINO2D_NV];
        #pragma GCC unroll 3
        for (int j = 0; j < nv; j++)
            bv[j] = _mm512_loadu_ps(b + 16 * j);
        #pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            __m512 x = _mm512_set1_ps(a[i * lda + kk]);
            #pragma GCC unroll 3
            for (int j = 0; j < nv; j++)
                acc[i][j] = _mm512_fmadd_ps(x, bv[j], acc[i][j]);
        }
    }
    #pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
        #pragma GCC unroll 3
        for (int j = 0; j < nv; j++)
            _mm512_storeu_ps(c + i * ldc + 16 * j, acc[i][j]);
}

#define KC_W2P_NVS(mr_)                                                                            \
    do {                                                                                           \
        if (nv == 3)                                                                               \
            kc_w2p_block(a, lda, b, k, c, ldc, mr_, 3, first, pf, pl);                           \
        else if (nv == 2)                                                                          \
            kc_w2p_block(a, lda, b, k, c, ldc, mr_, 2, first, pf, pl);                           \
        else                                                                                       \
            kc_w2p_block(a, lda, b, k, c, ldc, mr_, 1, first, pf, pl);                           \
    } while (0)

/* The tiles in blocks of at most KC_WINO2D_MR, evened out (25 tiles: 7,
 * 6, 6, 6, not 8, 8, 8, 1): a block of one or two tiles has too few
 * accumulators to cover the multiply-add's latency (3 or 6 chains, each
 * a step every 4 cycles, where 8 keep the two FMA pipes busy), and ran
 * at a third of the full blocks' speed. `fetch`'s lines: a share per
 * block. */
__attribute__((target("avx512f"))) void
kc_wino2d_product(const float *a0, int64_t lda, const float *b, int64_t k, float *c0, int64_t ldc,
                  int64_t tiles, int nv, int first, kc_wino2d_lines fetch)
{
    int64_t blocks = (tiles + KC_WINO2D_MR - 1) / KC_WINO2D_MR;
    for (int64_t blk = 0; blk < blocks; blk++) {
        int64_t lo = tiles * blk / blocks, hi = tiles * (blk + 1) / blocks;
        const float *a = a0 + lo * lda;
        float *c = c0 + lo * ldc;
        kc_wino2d_lines mine = kc_wino2d_lines_share(fetch, blk, blocks);
        const char *pf = mine.at;
        int64_t pl = mine.n;
        switch (hi - lo) {
        case 8: KC_W2P_NVS(8); break;
        case 7: KC_W2P_NVS(7); break;
        case 6: KC_W2P_NVS(6); break;
        case 5: KC_W2P_NVS(5); break;
        case 4: KC_W2P_NVS(4); break;
        case 3: KC_W2P_NVS(3); break;
        case 2: KC_W2P_NVS(2); break;
        default: KC_W2P_NVS(1); break;
        }
    }
}
