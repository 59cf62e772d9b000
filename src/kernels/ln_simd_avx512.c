/* ln_simd.inc for AVX-512 (CMakeLists.txt: -mavx512f). */
#define KC_SIMD_AVX512 1
#include <math.h>

#include "kernels/ln_simd.inc"
