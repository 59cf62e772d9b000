#include "kernels/isa.h"

#include <stdlib.h>
#include <string.h>

static kc_isa_level kc_isa_cpu(void)
{
    if (__builtin_cpu_supports("avx512f"))
        return KC_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return KC_ISA_AVX2;
    return KC_ISA_NONE;
}

kc_isa_level kc_isa(void)
{
    kc_isa_level best = kc_isa_cpu();
    const char *cap = getenv("KC_ISA");
    if (!cap)
        return best;
    kc_isa_level want = best;
    if (strcmp(cap, "none") == 0)
        want = KC_ISA_NONE;
    else if (strcmp(cap, "avx2") == 0)
        want = KC_ISA_AVX2;
    else if (strcmp(cap, "avx512") == 0)
        want = KC_ISA_AVX512;
    return want < best ? want : best;
}

const char *kc_isa_name(kc_isa_level level)
{
    return level == KC_ISA_AVX512 ? "avx512" : level == KC_ISA_AVX2 ? "avx2" : "none";
}
