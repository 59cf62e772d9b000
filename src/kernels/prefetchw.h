/* Output lines asked for writing before a block computes them.
 *
 * Why: a register-blocked kernel stores its block's outputs (and reads a
 * residual sum from the same lines) at the block's end; where the output
 * is in no cache (ResNet50's conv1 and 56x56 to 14x14 1x1 layers at
 * batch 1) each store waited on its line there. PREFETCHW at the block's
 * start brings the lines in exclusive state while the multiply-adds run
 * (kernels/pw.c, kernels/stem_simd.inc give the measurements).
 *
 * Inline assembly: GCC emits PREFETCHT0 for _MM_HINT_ET0 without
 * -mprfchw. Every AVX-512 CPU has PREFETCHW (AVX2 ones from Broadwell);
 * the callers issue it from AVX-512 code only. */
#ifndef KC_KERNELS_PREFETCHW_H
#define KC_KERNELS_PREFETCHW_H

#include <stdint.h>

/* The first line of `vectors` runs of 16 floats from each of `rows` rows,
 * `ld` floats apart, from `at`: a block of rows x vectors outputs. */
static inline __attribute__((always_inline)) void kc_prefetchw_block(const float *at, int64_t ld,
                                                                     int64_t rows, int vectors)
{
    for (int64_t r = 0; r < rows; r++, at += ld)
        for (int j = 0; j < vectors; j++)
            __asm__ volatile("prefetchw %0" ::"m"(at[16 * j]));
}

#endif
