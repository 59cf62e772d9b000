/* 1x1 convolutions on few output pixels, the output channels split
 * between the threads, the weights packed once into 48-channel panels
 * (pw.c). */
#ifndef KC_KERNELS_PW_H
#define KC_KERNELS_PW_H

#include "kernels/kernel.h"
#include "ops/conv.h"

/* Run the layer of ctx on this kernel where it qualifies (*handled 1),
 * else leave it to the next (*handled 0). *act_done: its activation was
 * applied too. Needs ctx->state (the kernel's packed weights); never
 * with ctx->w_ext or ctx->whole, nor with KC_PW=0. */
kc_status kc_pw_conv(const kc_exec_ctx *ctx, int *handled, int *act_done);

/* Whether the layer (attrs a, input and output shapes) can run with
 * GlobalAveragePooling2D layer `gap` then Dense layer `dense` inside it
 * (kc_conv_attrs.post_head, pw_head.c): a 1x1 convolution this kernel
 * takes by output vectors, stride 1, one image, on AVX-512. */
int kc_pw_head_fusable(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out,
                       const struct kc_layer *gap, const struct kc_layer *dense);

/* For tests: the parts (threads) a state of this kernel runs in, 0 for
 * another kernel's state. */
int kc_pw_parts(const kc_kernel_state *state);

/* For tests: 1 where a state of this kernel fetches each part's next
 * panel of weights into L2 as a panel runs (by default on Intel's CPUs,
 * KC_PW_PREFETCH), else 0. */
int kc_pw_fetches_panels(const kc_kernel_state *state);

/* For tests: 1 where a state of this kernel fetches its panels' lines two
 * a step over each block's first steps (kc_pw_lead_wanted), else 0. */
int kc_pw_fetch_leads(const kc_kernel_state *state);

/* For tests: the input channels a pass of a panel's blocks runs over
 * by pixels (kc_pw_panel_passes), 0 for one pass or another kernel. */
int kc_pw_pass_channels(const kc_kernel_state *state);

/* For tests: 1 where a state of this kernel runs alone (one thread) with
 * a residual sum and fetches each block's next block's sums into L1
 * (KC_PW_RESIDUAL_FETCH=0: not), else 0. */
int kc_pw_fetches_residual(const kc_kernel_state *state);

/* For tests: 1 where a state of this kernel runs by pixels on a team and
 * asks for each block's output lines for writing as it starts
 * (KC_PW_PREFETCHW=0: not), else 0. */
int kc_pw_claims_outputs(const kc_kernel_state *state);

/* For tests: the cut of a state of this kernel (its parts' runs of
 * output vectors, moved by their times after each run), NULL for another
 * kernel's state. */
struct kc_balance *kc_pw_balance(kc_kernel_state *state);

#endif
