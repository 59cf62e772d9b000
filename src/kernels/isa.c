#include "kernels/isa.h"

#include <cpuid.h>
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

kc_cpu_vendor kc_isa_vendor(void)
{
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx))
        return KC_CPU_OTHER;
    /* the vendor string's 12 bytes in ebx, edx, ecx */
    if (ebx == 0x756e6547u && edx == 0x49656e69u && ecx == 0x6c65746eu) /* Genu ineI ntel */
        return KC_CPU_INTEL;
    if (ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u) /* Auth enti cAMD */
        return KC_CPU_AMD;
    return KC_CPU_OTHER;
}

/* AMD's family 0x19 with AVX-512 is Zen 4, whose AVX-512 units are
 * 256 bits wide (Zen 5, family 0x1a, has 512-bit ones in its desktop and
 * server parts). */
static int kc_isa_half_width_cpu(void)
{
    unsigned eax, ebx, ecx, edx;
    if (kc_isa_vendor() != KC_CPU_AMD || !__get_cpuid(1, &eax, &ebx, &ecx, &edx))
        return 0;
    unsigned family = (eax >> 8) & 0xf;
    if (family == 0xf)
        family += (eax >> 20) & 0xff;
    return family == 0x19 && __builtin_cpu_supports("avx512f");
}

int kc_isa_vec_bits(void)
{
    const char *env = getenv("KC_VEC_BITS");
    if (env && (!strcmp(env, "256") || !strcmp(env, "512")))
        return atoi(env);
    static int bits; /* the CPU's, found once (any thread finds the same) */
    int known = __atomic_load_n(&bits, __ATOMIC_RELAXED);
    if (!known) {
        known = kc_isa_half_width_cpu() ? 256 : 512;
        __atomic_store_n(&bits, known, __ATOMIC_RELAXED);
    }
    return known;
}
