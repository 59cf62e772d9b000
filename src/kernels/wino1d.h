/* One-dimensional Winograd convolution F(m, r) for (1, r) and (r, 1)
 * kernels and Conv1D (see wino1d.c). */
#ifndef KC_WINO1D_H
#define KC_WINO1D_H

#include "kernels/kernel.h"

/* Run the convolution as 1-D Winograd when it qualifies (a plain,
 * stride-1, undilated, ungrouped convolution whose kernel is 3 to 7 long
 * on one axis and 1 on the others, not exact, weights not streamed, no
 * fused residual, depthwise or pooling, enough channels and output length
 * to gain); *handled = 0 means the caller must run it another way
 * (KC_WINO1D=0 or KC_WINOGRAD=0 force that). *act_done: the activation
 * ran too (linear, relu, relu6). */
kc_status kc_wino1d_conv(const kc_exec_ctx *ctx, int *handled, int *act_done);

/* For tests and reports: the output tile m of a node's 1-D Winograd state,
 * 0 when state is none. */
int kc_wino1d_tile(const kc_kernel_state *state);

/* The transforms of F(m, r) (alpha = m + r - 1 <= KC_WINO1D_MAX_ALPHA):
 * at (m x alpha), g (alpha x r), bt (alpha x alpha), row-major, such that
 * y = at · ((g · w) ⊙ (bt · d)) is the correlation y[i] = sum_k d[i+k] w[k]
 * for i < m. 0 on success. */
#define KC_WINO1D_MAX_ALPHA 12
int kc_wino1d_transforms(int m, int r, double *at, double *g, double *bt);

#endif
