/* GELU's erf, exp and the sigmoid (swish) in branch-free float
 * arithmetic that vectorises (GCC with the element-wise files'
 * -fvect-cost-model=dynamic -fno-trapping-math; clang at -O2). libm's
 * erff and expf are a call per value (erff ~13 ns on the Zen 5 of
 * bench/results): ConvNeXtTiny's 8.6 M GELUs a run took 37 ms of its 100
 * on two threads, EfficientNetB0's swish half its run.
 *
 * erf(z), z >= 0: Abramowitz & Stegun 7.1.26, 1 - t (a1 + a2 t + .. a5
 * t^4) exp(-z^2) with t = 1 / (1 + p z), |error| <= 1.5e-7. exp by
 * Cody-Waite reduction to r in [-ln2/2, ln2/2] and a degree-6 Taylor
 * polynomial (relative error < 2e-7 there), scaled by 2^n through the
 * exponent bits. GELU(x) = x/2 (1 + erf(x/sqrt2)) then differs from the
 * erff form by at most ~3e-7 max(1, |GELU|), the sigmoid by ~2e-7: far
 * inside the 1e-4 fidelity bound (test_ewise sweeps both).
 *
 * These are the scalar forms: the tensor ops' element-wise loops and, on
 * a CPU without AVX2, the activations run them. With AVX2 or AVX-512 the
 * activations run act_simd.inc's vectors, the same formulas with fused
 * multiply-adds (a few units in the last place away from these). */
#ifndef KC_FASTMATH_H
#define KC_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp(y) for y <= 0; 0 below -87 (exp(-87) ~ 1.6e-38), NaN for NaN. */
static inline float kc_exp_nonpos(float y)
{
    float c = y < -87.0f ? -87.0f : y; /* NaN stays NaN */
    float t = c * 1.44269504088896341f;
    t = t > -126.0f ? t : -126.0f; /* and NaN: the conversion stays defined */
    int32_t n = (int32_t)(t - 0.5f); /* t <= 0: truncation rounds to nearest */
    float fn = (float)n;
    float r = (c - fn * 0.693145751953125f) - fn * 1.428606765330187e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t bits = (uint32_t)(n + 127) << 23; /* n >= -126: a normal 2^n */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    /* 0 below -87, as a factor: a second select on y's sign of the
     * clamp above made GCC join both into a branch, and not vectorise */
    return p * scale * (float)(y >= -87.0f);
}

/* 1 / (1 + exp(-x)) from e = exp(-|x|) <= 1, so nothing overflows (libm's
 * expf(-x) overflowed for x < -88 and took its slow errno path: EfficientNet's
 * swish layers spent half their time there). */
static inline float kc_sigmoid_fast(float x)
{
    float e = kc_exp_nonpos(-fabsf(x));
    float r = 1.0f / (1.0f + e);
    return x >= 0 ? r : e * r;
}

/* tanh(x): (1 - e) / (1 + e) with e = exp(-2|x|), the sign of x; below
 * |x| = 1/16, where 1 - e cancels, x (1 - x^2/3 + 2x^4/15) (its error
 * < 17/315 |x|^7, 3e-10 |x|). Within ~2.4e-7 of double (test_ewise);
 * NaN for NaN, +-1 at the infinities, -0 for -0. libm's tanhf took a
 * quarter of a bidirectional LSTM's run at batch 1. */
static inline float kc_tanh_fast(float x)
{
    float ax = fabsf(x);
    float e = kc_exp_nonpos(-2.0f * ax);
    float r = (1.0f - e) / (1.0f + e);
    float x2 = x * x;
    float p = x * (1.0f + x2 * (-1.0f / 3.0f + x2 * (2.0f / 15.0f))); /* -0 stays -0 */
    return ax >= 0.0625f ? copysignf(r, x) : p;
}

/* erf(z) for z >= 0. */
static inline float kc_erf_nonneg(float z)
{
    float t = 1.0f / (1.0f + 0.3275911f * z);
    float q = 1.061405429f;
    q = q * t - 1.453152027f;
    q = q * t + 1.421413741f;
    q = q * t - 0.284496736f;
    q = q * t + 0.254829592f;
    return 1.0f - q * t * kc_exp_nonpos(-z * z);
}

/* Keras's exact GELU, x/2 (1 + erf(x / sqrt 2)). */
static inline float kc_gelu_erf(float x)
{
    float e = kc_erf_nonneg(fabsf(x) * 0.70710678118654752f);
    return 0.5f * x * (1.0f + copysignf(e, x));
}

#endif
