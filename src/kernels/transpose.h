/* Transposed convolutions (Conv1D/2D/3DTranspose): the taps' product
 * as a 1x1 convolution, then each output pixel the sum of what its taps
 * reach (transpose.c). */
#ifndef KC_KERNELS_TRANSPOSE_H
#define KC_KERNELS_TRANSPOSE_H

#include "kernels/kernel.h"

/* Run ctx's transposed convolution; `conv` runs the product as a 1x1
 * convolution where ctx has a state (the convolution kernel). */
kc_status kc_conv_transpose(const kc_exec_ctx *ctx, kc_kernel_fn conv);

#endif
