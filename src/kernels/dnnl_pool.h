/* Windowed max/average pooling through oneDNN (see dnnl_pool.c). */
#ifndef KC_DNNL_POOL_H
#define KC_DNNL_POOL_H

#include "kernels/kernel.h"

/* Run the pooling with oneDNN when it can; *handled = 0 means the caller
 * runs its own loops (KC_DNNL=0 forces that). */
kc_status kc_dnnl_pool(const kc_exec_ctx *ctx, int *handled);

/* Parts a node's oneDNN pooling state runs in (1 whole, 0 for none). */
int kc_dnnl_pool_parts(const kc_kernel_state *state);

#endif
