/* narrow_simd.inc for AVX-512 (CMakeLists.txt: -mavx512f). */
#define KC_SIMD_AVX512 1
#include "kernels/narrow_simd.inc"
