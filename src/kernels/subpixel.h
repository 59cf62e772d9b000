/* A 2-D transposed convolution whose kernel is a multiple of its stride
 * (4x4 stride 2: DCGAN's and pix2pix's; 2x2 stride 2: U-Net's), run as
 * one convolution on its input, one filter group per output phase, then
 * laid out on the output grid (subpixel.c). */
#ifndef KC_KERNELS_SUBPIXEL_H
#define KC_KERNELS_SUBPIXEL_H

#include "kernels/conv_geom.h"
#include "kernels/kernel.h"

/* Run ctx's transposed convolution so where it qualifies (*handled 1:
 * its bias and activation applied too), else leave it (*handled 0):
 * 2-D, undilated, each axis's kernel a multiple of its stride, 64+ input
 * pixels an image, the output's padding one the phases' convolution can
 * take; needs ctx->state
 * and no run's own weights; KC_SUBPIXEL=0: never. g: the layer's
 * geometry with TensorFlow's padding (transpose.c). The phases'
 * convolution runs through `conv`. */
kc_status kc_subpixel_transpose(const kc_exec_ctx *ctx, const kc_geom *g, kc_kernel_fn conv,
                                int *handled);

#endif
