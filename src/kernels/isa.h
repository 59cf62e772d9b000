/* The instruction set kerasc's own vector kernels use on this CPU. */
#ifndef KC_ISA_H
#define KC_ISA_H

typedef enum kc_isa_level {
    KC_ISA_NONE = 0, /* no own vector kernels: oneDNN's run the layers */
    KC_ISA_AVX2 = 1, /* AVX2 with FMA */
    KC_ISA_AVX512 = 2 /* AVX-512F */
} kc_isa_level;

/* The best the CPU runs, capped by KC_ISA ("avx512", "avx2" or "none";
 * anything else, or a level the CPU lacks, is ignored): KC_ISA=avx2 runs
 * the AVX2 kernels on an AVX-512 machine, as tests do to cover both. Read
 * each call (cheap): states keep what they were built with. */
kc_isa_level kc_isa(void);

/* The width at which this CPU runs AVX-512's multiply-adds: 256 where a
 * 512-bit one costs two 256-bit ones (AMD's Zen 4: family 0x19), else
 * 512. KC_VEC_BITS=256 or =512 says otherwise. Kernels built for both
 * (KC_SIMD_AVX512Y, kernels/simd.h) pick their 256-bit build at 256:
 * the same sums in the same order, the same bits. */
int kc_isa_vec_bits(void);

/* Who made this CPU (cpuid leaf 0's vendor string). Some choices follow
 * the maker's memory system where no test of the machine settles them
 * cheaply: pw.c's fetch of the next panel ahead of the hardware's own. */
typedef enum kc_cpu_vendor {
    KC_CPU_OTHER = 0,
    KC_CPU_INTEL = 1, /* "GenuineIntel" */
    KC_CPU_AMD = 2    /* "AuthenticAMD" */
} kc_cpu_vendor;

kc_cpu_vendor kc_isa_vendor(void);

/* "avx512", "avx2" or "none". */
const char *kc_isa_name(kc_isa_level level);

#endif
