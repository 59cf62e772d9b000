/* wino_simd.inc for AVX2: CMakeLists.txt builds files named *_avx2.c with
 * -mavx2 -mfma; wino_simd.c calls them only where the CPU has both. */
#define KC_SIMD_AVX2 1
#include "kernels/wino_simd.inc"
