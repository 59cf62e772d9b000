/* Dense through a oneDNN matmul primitive (see dnnl_matmul.c). */
#ifndef KC_DNNL_MATMUL_H
#define KC_DNNL_MATMUL_H

#include "kernels/kernel.h"

/* y = x·W (+ b) over the last axis; *handled = 0 means the caller runs
 * its own GEMM (KC_DNNL=0 forces that). The activation is the caller's
 * unless *act_done (the row parts applied an element-wise one). */
kc_status kc_dnnl_dense(const kc_exec_ctx *ctx, int *handled, int *act_done);

/* For tests: the row parts of a oneDNN Dense state (1: one primitive
 * over all rows), 0 for another kernel's state. */
int kc_dnnl_dense_parts(const kc_kernel_state *state);

/* For tests: 1 when the Dense state's primitive runs on the calling thread
 * alone (kc_dnnl_small), 0 when on the pool, -1 when state is no oneDNN
 * Dense state. */
int kc_dnnl_dense_solo(const kc_kernel_state *state);

/* For tests: 1 when the Dense state reads its own packed copy of the
 * kernel, 0 when Keras's array, -1 when state is no oneDNN Dense state. */
int kc_dnnl_dense_packed(const kc_kernel_state *state);

#endif
