/* The residual add of residual.h: a memory-bound pass, vectorized. */
#include "kernels/residual.h"

#include "base/threads.h"
#include "kernels/isa.h"

typedef struct kc_residual_job {
    float *dst;
    const float *add;
    int64_t n;
    int act, parts;
} kc_residual_job;

static float kc_residual_scalar(float x, int act)
{
    if (act && x < 0.0f)
        x = 0.0f;
    return act == 2 && x > 6.0f ? 6.0f : x;
}

void kc_residual_range_avx512(float *dst, const float *add, int64_t n, int act);
void kc_residual_range_avx2(float *dst, const float *add, int64_t n, int act);

/* Why vectors on both sets: with only an AVX-512 loop, on an AVX2 Zen 3
 * ResNet50's 64 -> 256 expansions into their 56x56 residuals spent 0.45
 * ms of their 1.4 in this pass's scalar loop (ONNX Runtime: 0.75 ms for
 * the whole layer). */
static void kc_residual_range(float *dst, const float *add, int64_t n, int act)
{
    switch (kc_isa()) {
    case KC_ISA_AVX512:
        kc_residual_range_avx512(dst, add, n, act);
        return;
    case KC_ISA_AVX2:
        kc_residual_range_avx2(dst, add, n, act);
        return;
    default:
        for (int64_t i = 0; i < n; i++)
            dst[i] = kc_residual_scalar(dst[i] + add[i], act);
    }
}

static void kc_residual_part(void *arg, int k)
{
    const kc_residual_job *job = arg;
    /* cut on 64-byte lines, so two threads never write one */
    int64_t lines = (job->n + 15) / 16;
    int64_t lo = lines * k / job->parts * 16, hi = lines * (k + 1) / job->parts * 16;
    if (hi > job->n)
        hi = job->n;
    if (hi > lo)
        kc_residual_range(job->dst + lo, job->add + lo, hi - lo, job->act);
}

void kc_residual_add(float *dst, const float *add, int64_t n, int act)
{
    kc_residual_job job = {dst, add, n, act, 1};
    job.parts = kc_parallel_width() > 1 ? kc_parallel_parts(n * (int64_t)sizeof(float), n) : 1;
    kc_parallel(job.parts, kc_residual_part, &job);
}
