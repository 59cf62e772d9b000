/* wino_simd.inc for AVX-512: CMakeLists.txt builds files named *_avx512.c
 * with -mavx512f; wino_simd.c calls them only where the CPU has it. */
#define KC_SIMD_AVX512 1
#include "kernels/wino_simd.inc"
