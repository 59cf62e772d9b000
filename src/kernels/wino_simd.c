/* The Winograd kernels' vector code for the CPU: wino_simd.inc built for
 * AVX-512 and for AVX2 (wino_simd_avx512.c, wino_simd_avx2.c). */
#include "base/env.h"
#include "kernels/isa.h"
#include "kernels/wino_tx.h"

void kc_wino2d_fused4_avx512(const float *, int64_t, const float *, int, float *, int64_t,
                             const char *, int64_t);

#define KC_WINO_SIMD_DECLARE(sfx, fused4)                                                          \
    void kc_wino1d_in_tile_##sfx(int, const float *, int64_t, const float *const *, float *,      \
                                 int64_t);                                                         \
    void kc_wino1d_out_tile_##sfx(int, int, const float *, int64_t, const float *, int64_t,       \
                                  const float *, int, float *const *, int);                        \
    void kc_wino2d_in_tile_##sfx(int, const float *, int64_t, const float *const *, float *,      \
                                 int64_t, int);                                                    \
    void kc_wino2d_out_tile_##sfx(int, int, const float *, int64_t, const float *, int64_t,       \
                                  const float *, int, float *const *, int, int);                   \
    void kc_wino2d_product_##sfx(const float *, int64_t, const float *, int64_t, float *,         \
                                 int64_t, int64_t, int, int, kc_wino2d_lines, int, const float *); \
    void kc_wino2d_kernel_##sfx(const float *, int64_t, int, int64_t, int, int64_t, int64_t,      \
                                float *, int64_t);                                                 \
    static const kc_wino_simd kc_wino_simd_##sfx = {                                               \
        #sfx, kc_wino1d_in_tile_##sfx, kc_wino1d_out_tile_##sfx, kc_wino2d_in_tile_##sfx,          \
        kc_wino2d_out_tile_##sfx, kc_wino2d_product_##sfx, kc_wino2d_kernel_##sfx, fused4};

/* the fused F(4x4) wants 32 vector registers: AVX2's tables go without */
KC_WINO_SIMD_DECLARE(avx512, kc_wino2d_fused4_avx512)
KC_WINO_SIMD_DECLARE(avx2, NULL)

const kc_wino_simd *kc_wino_simd_pick(void)
{
    switch (kc_isa()) {
    case KC_ISA_AVX512: return &kc_wino_simd_avx512;
    case KC_ISA_AVX2: return &kc_wino_simd_avx2;
    default: return NULL;
    }
}

int kc_wino2d_fetch_rows_wanted(void) { return !kc_env_off("KC_WINO_FETCH_ROWS"); }
