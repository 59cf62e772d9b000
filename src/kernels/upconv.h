/* A 3x3 convolution over a nearest-neighbour UpSampling2D by 2, run on
 * the upsampling's input as one 2x2 convolution with four times the
 * filters, then its outputs laid out on the upsampled grid (upconv.c). */
#ifndef KC_KERNELS_UPCONV_H
#define KC_KERNELS_UPCONV_H

#include "kernels/kernel.h"
#include "ops/conv.h"
#include "ops/reshape.h"

/* Whether convolution a over upsampling u's output runs so: a plain 2-D
 * 3x3 stride-1 undilated ungrouped "same" or "valid" convolution with
 * nothing else fused into it, u a 2-D nearest upsampling by (2, 2), and
 * the upsampling's input (NHWC `in`) at least 4x4: on fewer rows or
 * columns the padded 2x2 grid costs as much as the 3x3 one. */
int kc_upconv_fusable(const kc_conv_attrs *a, const kc_upsample_attrs *u, const kc_shape *in);

/* Run ctx's convolution, whose attrs carry pre_upsample: ctx->in[0]
 * holds the upsampling's input, ctx->in_shape[0] is the upsampled shape.
 * The 2x2 convolution runs through `conv` (the convolution kernel, with
 * its own state kept in this one's). Needs ctx->state. */
kc_status kc_upconv(const kc_exec_ctx *ctx, kc_kernel_fn conv);

#endif
