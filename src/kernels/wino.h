/* kerasc's own Winograd convolutions (see wino.c): F(m, r) along one
 * axis for (1, r) and (r, 1) kernels and Conv1D, F(4x4, 3x3) and
 * F(2x2, 5x5), their transformed kernels kept; and (wino_fly.c) F(4x4,
 * 3x3) with the kernel transformed as the layer runs, for small images. */
#ifndef KC_WINO_H
#define KC_WINO_H

#include "kernels/kernel.h"

/* Run the convolution as Winograd when it qualifies; *handled = 0 means
 * the caller must run it another way. 1-D: a plain, stride-1, undilated,
 * ungrouped convolution whose kernel is 3 to 7 long on one axis and 1 on
 * the others, 32 channels or more in and out, 100 outputs or more per
 * image (KC_WINO1D=0: never). 2-D: a 3x3 or 5x5 stride-1 Conv2D, 32
 * channels or more in and out, 512 outputs or more per image
 * (KC_WINO2D=0: never). Neither with --exact, streamed weights, a fused
 * residual, depthwise convolution or pooling, a folded ZeroPadding, or
 * KC_WINOGRAD=0. *act_done: the activation ran too (linear, relu,
 * relu6). */
kc_status kc_wino_conv(const kc_exec_ctx *ctx, int *handled, int *act_done);

/* F(4x4, 3x3) with the kernel transformed as the layer runs (wino_fly.c),
 * where the kept transformed kernel does not pay: a 3x3 stride-1 Conv2D,
 * 64 channels or more in and out, under 512 outputs an image (the layers
 * kc_wino_conv leaves), 16 tiles or more over the batch; F(2x2, 3x3)
 * where 4x4 tiles are fewer than 16 and 2x2 ones are not (one 7x7 or 8x8
 * image; KC_WINOFLY_F2=0: not). Not with
 * --exact, streamed weights, anything fused, KC_WINOGRAD=0, KC_WINO2D=0
 * or KC_WINOFLY=0. *act_done as kc_wino_conv's. */
kc_status kc_wino_fly_conv(const kc_exec_ctx *ctx, int *handled, int *act_done);
/* For tests: how many threads' parts a node's state of that kernel runs
 * in; 0 when the state is not one. */
int kc_wino_fly_parts(const kc_kernel_state *state);

/* For tests: the cut of a fly state (its parts' runs of output vectors,
 * moved by their times after each run), NULL for another state. */
struct kc_balance *kc_wino_fly_balance(kc_kernel_state *state);
/* Its output tile (4 or 2), 0 for another kernel's state. */
int kc_wino_fly_tile(const kc_kernel_state *state);
/* The output vectors its parts claim at once: 1 fused (kc_wf_fused),
 * else KC_WINO2D_NV; 0 for another kernel's state. */
int kc_wino_fly_claim_most(const kc_kernel_state *state);
/* 1 when its threads transform the inputs each for itself, 0 when they
 * share one buffer (or for another kernel's state). */
int kc_wino_fly_alone(const kc_kernel_state *state);
/* 1 when those threads, each transforming the inputs for itself, first
 * read all of the input in address order (kernels/touch.c; KC_TOUCH=0:
 * not), 0 otherwise. */
int kc_wino_fly_touches(const kc_kernel_state *state);
/* 1 when its input transform and products fetch the next rows of
 * transformed inputs ahead (wino_fly.c's kc_wf_fetch_rows_wanted), 0
 * otherwise (or for another kernel's state). */
int kc_wino_fly_fetches_rows(const kc_kernel_state *state);

/* For tests and reports: the output tile m of a node's Winograd state and
 * how many axes it spans (1 or 2); 0 when state is none. */
int kc_wino_tile(const kc_kernel_state *state);
int kc_wino_dims(const kc_kernel_state *state);
/* ... and how many blocks of tiles its largest part runs in turn. */
int kc_wino_blocks(const kc_kernel_state *state);
/* ... and the floats between two of the rows a block's transformed
 * inputs are kept in (0 for another kernel's state). */
int64_t kc_wino_row_floats(const kc_kernel_state *state);
/* ... and its cut (its parts' runs of tiles, moved by their times after
 * each run), NULL for another kernel's state. */
struct kc_balance *kc_wino_balance(kc_kernel_state *state);
/* ... and 1 when its products are kerasc's own (kc_wino_simd's product), 0
 * when oneDNN's batched matmul (or none). */
int kc_wino_own(const kc_kernel_state *state);

/* The transforms of F(m, r) (alpha = m + r - 1 <= KC_WINO_MAX_ALPHA):
 * at (m x alpha), g (alpha x r), bt (alpha x alpha), row-major, such that
 * y = at · ((g · w) ⊙ (bt · d)) is the correlation y[i] = sum_k d[i+k] w[k]
 * for i < m. 0 on success. The 2-D transforms apply them on both axes. */
#define KC_WINO_MAX_ALPHA 12
int kc_wino_transforms(int m, int r, double *at, double *g, double *bt);

#endif
