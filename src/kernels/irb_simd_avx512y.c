/* irb_simd.inc on AVX-512's 256-bit vectors (CMakeLists.txt: -mavx512f
 * -mavx512vl -mfma), for a CPU whose AVX-512 runs on 256-bit halves
 * (kc_isa_vec_bits: the Zen 4). */
#define KC_SIMD_AVX512Y 1
#include "kernels/irb_simd.inc"
