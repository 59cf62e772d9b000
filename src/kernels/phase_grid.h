/* An inner convolution's output laid on a layer's output grid by phase
 * (upconv.c's four parities of an upsampled 3x3 convolution, subpixel.c's
 * s_h x s_w phases of a transposed one). */
#ifndef KC_KERNELS_PHASE_GRID_H
#define KC_KERNELS_PHASE_GRID_H

#include "kernels/kernel.h"

#define KC_PHASE_MAX 64

/* Output pixel (s[0] m + a, s[1] n + b) is q's pixel (m + off[0][a],
 * n + off[1][b]), its filters [(a s[1] + b) f, (a s[1] + b + 1) f). */
typedef struct kc_phase_grid {
    int64_t s[2];
    int64_t off[2][KC_PHASE_MAX];
    int64_t f;
} kc_phase_grid;

/* out (NHWC out_shape) from q (images, rows, columns, s[0] s[1] f of
 * q_shape), by output rows over the threads. */
void kc_phase_grid_copy(const kc_phase_grid *grid, const float *q, const kc_shape *q_shape,
                        float *out, const kc_shape *out_shape);

#endif
