/* One vector of floats for the kernels written once and compiled for two
 * instruction sets: a file `X_avx512.c` (built with -mavx512f) or
 * `X_avx2.c` (-mavx2 -mfma) defines KC_SIMD_AVX512 or KC_SIMD_AVX2 and
 * includes `X.inc`, whose functions use kc_vf and the operations below
 * and name their exported entry points KC_SIMD_NAME(f): f_avx512,
 * f_avx2. Internal to kernels/.
 *
 * (A third, KC_SIMD_AVX512Y, `X_avx512y.c` built with -mavx512f
 * -mavx512vl -mfma: 256-bit vectors with AVX-512's registers, see below.)
 *
 * Why two: kerasc's own kernels (Winograd, ...) were AVX-512 only, and
 * on an AVX2 machine (an AMD EPYC Zen 3 here, 2 cores) every layer they
 * take ran on oneDNN's direct AVX2 convolutions instead: ResNet50's 3x3
 * layers at ~105 GFLOP/s, kerasc 1.16x ONNX Runtime's time at batch 1.
 * The layouts the kernels share with their callers stay in vectors of
 * 16 floats (KC_V16); an AVX2 kernel takes each as two of its own. */
#ifndef KC_SIMD_H
#define KC_SIMD_H

#include <immintrin.h>
#include <stdint.h>

/* The packed layouts' vector: 16 floats, whatever the instruction set. */
#define KC_V16 16

#if defined(KC_SIMD_AVX512)

#define KC_SIMD_NAME(f) f##_avx512
#define KC_VW 16 /* floats in a kc_vf */
#define KC_VREGS 32 /* vector registers */
typedef __m512 kc_vf;
typedef __mmask16 kc_vmask;

/* The lanes of the n floats left (all when n >= KC_VW). */
static inline kc_vmask kc_vmask_lanes(int64_t n)
{
    return n >= 16 ? (kc_vmask)0xFFFF : (kc_vmask)((1u << n) - 1);
}
static inline kc_vf kc_vf_zero(void) { return _mm512_setzero_ps(); }
static inline kc_vf kc_vf_set1(float x) { return _mm512_set1_ps(x); }
static inline kc_vf kc_vf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void kc_vf_store(float *p, kc_vf v) { _mm512_storeu_ps(p, v); }
static inline kc_vf kc_vf_load_m(kc_vmask m, const float *p) { return _mm512_maskz_loadu_ps(m, p); }
static inline void kc_vf_store_m(float *p, kc_vmask m, kc_vf v) { _mm512_mask_storeu_ps(p, m, v); }
static inline kc_vf kc_vf_add(kc_vf a, kc_vf b) { return _mm512_add_ps(a, b); }
static inline kc_vf kc_vf_sub(kc_vf a, kc_vf b) { return _mm512_sub_ps(a, b); }
static inline kc_vf kc_vf_mul(kc_vf a, kc_vf b) { return _mm512_mul_ps(a, b); }
static inline kc_vf kc_vf_div(kc_vf a, kc_vf b) { return _mm512_div_ps(a, b); }
/* a * b + c, one rounding */
static inline kc_vf kc_vf_fmadd(kc_vf a, kc_vf b, kc_vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline kc_vf kc_vf_max(kc_vf a, kc_vf b) { return _mm512_max_ps(a, b); }
static inline kc_vf kc_vf_min(kc_vf a, kc_vf b) { return _mm512_min_ps(a, b); }

#elif defined(KC_SIMD_AVX512Y)

/* AVX-512's 256-bit vectors (AVX-512VL): AVX2's width with AVX-512's 32
 * registers and mask registers, for a CPU whose AVX-512 runs on 256-bit
 * halves (kc_isa_vec_bits). Why: on the Zen 4 a 512-bit multiply-add
 * costs two 256-bit ones, and the 256-bit loops of the same blocking
 * spend less around them (a 1x1 product over 16 input channels, 3 pixels
 * x 48 channels a block: 58.4 GMAC/s a core against 54.9 for 6 x 48 of
 * 512-bit vectors; the peak is 58.7). */
#define KC_SIMD_NAME(f) f##_avx512y
#define KC_VW 8
#define KC_VREGS 32
typedef __m256 kc_vf;
typedef __mmask8 kc_vmask;

static inline kc_vmask kc_vmask_lanes(int64_t n)
{
    return n >= 8 ? (kc_vmask)0xFF : (kc_vmask)((1u << n) - 1);
}
static inline kc_vf kc_vf_zero(void) { return _mm256_setzero_ps(); }
static inline kc_vf kc_vf_set1(float x) { return _mm256_set1_ps(x); }
static inline kc_vf kc_vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void kc_vf_store(float *p, kc_vf v) { _mm256_storeu_ps(p, v); }
/* all lanes: plain loads and stores (a constant mask picks at compile
 * time) */
static inline kc_vf kc_vf_load_m(kc_vmask m, const float *p)
{
    return m == (kc_vmask)0xFF ? _mm256_loadu_ps(p) : _mm256_maskz_loadu_ps(m, p);
}
static inline void kc_vf_store_m(float *p, kc_vmask m, kc_vf v)
{
    if (m == (kc_vmask)0xFF)
        _mm256_storeu_ps(p, v);
    else
        _mm256_mask_storeu_ps(p, m, v);
}
static inline kc_vf kc_vf_add(kc_vf a, kc_vf b) { return _mm256_add_ps(a, b); }
static inline kc_vf kc_vf_sub(kc_vf a, kc_vf b) { return _mm256_sub_ps(a, b); }
static inline kc_vf kc_vf_mul(kc_vf a, kc_vf b) { return _mm256_mul_ps(a, b); }
static inline kc_vf kc_vf_div(kc_vf a, kc_vf b) { return _mm256_div_ps(a, b); }
static inline kc_vf kc_vf_fmadd(kc_vf a, kc_vf b, kc_vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline kc_vf kc_vf_max(kc_vf a, kc_vf b) { return _mm256_max_ps(a, b); }
static inline kc_vf kc_vf_min(kc_vf a, kc_vf b) { return _mm256_min_ps(a, b); }

#elif defined(KC_SIMD_AVX2)

#define KC_SIMD_NAME(f) f##_avx2
#define KC_VW 8
#define KC_VREGS 16
typedef __m256 kc_vf;
/* full: all 8 lanes, which take plain loads and stores. Why: AMD's
 * masked store (vmaskmovps) is microcoded, and with every store masked
 * the 2-D input transform took 40 ns a channel and tile on a Zen 3, most
 * of a Winograd layer's time. */
typedef struct kc_vmask {
    __m256i lanes;
    int full;
} kc_vmask;

static inline kc_vmask kc_vmask_lanes(int64_t n)
{
    int lanes = n >= 8 ? 8 : (int)n;
    kc_vmask m = {_mm256_cmpgt_epi32(_mm256_set1_epi32(lanes),
                                     _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                  lanes == 8};
    return m;
}
static inline kc_vf kc_vf_zero(void) { return _mm256_setzero_ps(); }
static inline kc_vf kc_vf_set1(float x) { return _mm256_set1_ps(x); }
static inline kc_vf kc_vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void kc_vf_store(float *p, kc_vf v) { _mm256_storeu_ps(p, v); }
/* masked lanes read as zero and are never touched (no fault past an end) */
static inline kc_vf kc_vf_load_m(kc_vmask m, const float *p)
{
    return m.full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m.lanes);
}
static inline void kc_vf_store_m(float *p, kc_vmask m, kc_vf v)
{
    if (m.full)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, m.lanes, v);
}
static inline kc_vf kc_vf_add(kc_vf a, kc_vf b) { return _mm256_add_ps(a, b); }
static inline kc_vf kc_vf_sub(kc_vf a, kc_vf b) { return _mm256_sub_ps(a, b); }
static inline kc_vf kc_vf_mul(kc_vf a, kc_vf b) { return _mm256_mul_ps(a, b); }
static inline kc_vf kc_vf_div(kc_vf a, kc_vf b) { return _mm256_div_ps(a, b); }
static inline kc_vf kc_vf_fmadd(kc_vf a, kc_vf b, kc_vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline kc_vf kc_vf_max(kc_vf a, kc_vf b) { return _mm256_max_ps(a, b); }
static inline kc_vf kc_vf_min(kc_vf a, kc_vf b) { return _mm256_min_ps(a, b); }

#else
#error "define KC_SIMD_AVX512, KC_SIMD_AVX512Y or KC_SIMD_AVX2 before including kernels/simd.h"
#endif

#endif
