/* A residual connection's add, after the convolution that feeds it.
 *
 * oneDNN's sum post-op reads the residual (the convolution's output
 * buffer) inside its kernel; where the residual is larger than the cache
 * that read is far slower than a separate pass (dnnl_conv.c,
 * kc_dnnl_add_after). The convolution then writes one image at a time
 * into a cache-sized buffer and this adds it in. */
#ifndef KC_KERNELS_RESIDUAL_H
#define KC_KERNELS_RESIDUAL_H

#include <stdint.h>

/* dst[i] = act(dst[i] + add[i]) for i < n, act 0 linear, 1 relu, 2
 * relu6 (kc_wino_act's codes); split over the threads outside a parallel
 * region. */
void kc_residual_add(float *dst, const float *add, int64_t n, int act);

#endif
