/* oneDNN convolution (see dnnl_conv.c). */
#ifndef KC_DNNL_CONV_H
#define KC_DNNL_CONV_H

#include "kernels/kernel.h"

/* Run the convolution with oneDNN when it supports it; *handled = 0 means
 * the caller must use its own path (KC_DNNL=0 forces that). *act_done
 * says the layer's activation already ran as a fused post-op. */
kc_status kc_dnnl_conv(const kc_exec_ctx *ctx, int *handled, int *act_done);

/* How many parts (threads) a node's oneDNN convolution state runs in:
 * 1 whole, more when cut (kc_dnnl_plan_cuts); 0 for no such state. */
int kc_dnnl_conv_parts(const kc_kernel_state *state);

#endif
