/* ln_simd.inc for AVX2 (CMakeLists.txt: -mavx2 -mfma). */
#define KC_SIMD_AVX2 1
#include <math.h>

#include "kernels/ln_simd.inc"
