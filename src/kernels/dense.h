/* Dense on kerasc's own loop (dense.c): the weights packed once into
 * panels of 16 output units, split between the threads; each output's
 * sum in one order, whatever the rows and threads. */
#ifndef KC_KERNELS_DENSE_H
#define KC_KERNELS_DENSE_H

#include "kernels/kernel.h"

/* That order: the inputs in blocks of KC_DENSE_BLOCK, each block's sum a
 * chain of multiply-adds from zero in input order, the blocks' sums
 * added in order to a total from zero, then the bias. The loop runs
 * KC_DENSE_CHAINS blocks at once (dense_simd.inc), their rows of a
 * panel interleaved as it reads them (dense.c); kernels/pw_head.c sums
 * a classifier in the same blocks. */
#define KC_DENSE_BLOCK 16
#define KC_DENSE_CHAINS 4

/* Run the Dense layer of ctx (x·W + b, no activation) on this kernel
 * where it qualifies (*handled 1), else leave it to oneDNN's (*handled
 * 0). Takes the layer wherever kerasc's vector kernels have an
 * instruction set (KC_DENSE_OWN=0: never), never with ctx->w_ext. */
kc_status kc_dense_own(const kc_exec_ctx *ctx, int *handled);

/* For tests: 1 when the state is this kernel's, else 0. */
int kc_dense_own_state(const kc_kernel_state *state);

#endif
