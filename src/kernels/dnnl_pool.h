/* Windowed max/average pooling through oneDNN (see dnnl_pool.c). */
#ifndef KC_DNNL_POOL_H
#define KC_DNNL_POOL_H

#include "kernels/dnnl_common.h"
#include "kernels/kernel.h"

/* Run the pooling with oneDNN when it can; *handled = 0 means the caller
 * runs its own loops (KC_DNNL=0 forces that). */
kc_status kc_dnnl_pool(const kc_exec_ctx *ctx, int *handled);

/* Build p: pooling a (max, or average over the real cells) over window g,
 * NHWC in and out, with attr (its scratchpad mode, post-ops); the pooling
 * layer's parts, and a convolution's pooling moved after it (pre_pool). */
struct kc_pool_attrs;
kc_status kc_dnnl_pool_prim_init(const struct kc_pool_attrs *a, const kc_dnnl_window *g,
                                 const_dnnl_primitive_attr_t attr, kc_dnnl_prim *p);

/* Parts a node's oneDNN pooling state runs in (1 whole, 0 for none). */
int kc_dnnl_pool_parts(const kc_kernel_state *state);
/* Those of them that run kerasc's AVX-512 max pooling (maxpool_nhwc.h). */
int kc_dnnl_pool_hand_parts(const kc_kernel_state *state);

#endif
