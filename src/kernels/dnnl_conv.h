/* oneDNN convolution (see dnnl_conv.c). */
#ifndef KC_DNNL_CONV_H
#define KC_DNNL_CONV_H

#include "kernels/kernel.h"

/* Run the convolution with oneDNN when it supports it; *handled = 0 means
 * the caller must use its own path (KC_DNNL=0 forces that). *act_done
 * says the layer's activation already ran as a fused post-op. */
kc_status kc_dnnl_conv(const kc_exec_ctx *ctx, int *handled, int *act_done);

#endif
