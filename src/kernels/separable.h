/* SeparableConv1D/2D as a depthwise and a 1x1 convolution (separable.c). */
#ifndef KC_SEPARABLE_H
#define KC_SEPARABLE_H

#include "kernels/kernel.h"

/* Runs a separable layer through the convolution kernels; *handled = 0
 * (and KC_OK) where it does not take the layer: the plain path runs. */
kc_status kc_separable_conv(const kc_exec_ctx *ctx, int *handled);

#endif
