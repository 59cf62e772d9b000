/* narrow_simd.inc for AVX2 (CMakeLists.txt: -mavx2 -mfma). */
#define KC_SIMD_AVX2 1
#include "kernels/narrow_simd.inc"
