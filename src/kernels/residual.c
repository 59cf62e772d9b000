/* The residual add of residual.h: a memory-bound pass, vectorized. */
#include "kernels/residual.h"

#include <immintrin.h>

#include "base/threads.h"

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

__attribute__((target("avx512f"))) static int64_t kc_residual_avx512(float *dst, const float *add,
                                                                     int64_t n, int act)
{
    const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.0f);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_add_ps(_mm512_loadu_ps(dst + i), _mm512_loadu_ps(add + i));
        if (act)
            v = _mm512_max_ps(v, zero);
        if (act == 2)
            v = _mm512_min_ps(v, six);
        _mm512_storeu_ps(dst + i, v);
    }
    return i;
}

static void kc_residual_range(float *dst, const float *add, int64_t n, int act)
{
    int64_t i = __builtin_cpu_supports("avx512f") ? kc_residual_avx512(dst, add, n, act) : 0;
    for (; i < n; i++)
        dst[i] = kc_residual_scalar(dst[i] + add[i], act);
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
