/* A MobileNet inverted-residual block as one kernel: 1x1 expansion, 3x3
 * depthwise convolution, 1x1 projection (and the block's residual sum),
 * a few rows at a time, the wide expanded rows never leaving the core's
 * cache (irb.c). The expansion layer's node runs it when the plan fused
 * the three (kc_conv_attrs.post_dw and post_pw, runtime/fuse.c). */
#ifndef KC_IRB_H
#define KC_IRB_H

#include "kernels/kernel.h"
#include "ops/conv.h"

/* Whether the block kernel runs expansion `ex` (attrs of a plain
 * convolution reading `in`, NHWC), depthwise layer `dw` after it and
 * projection layer `pw` after that: the geometry and activations it
 * knows, on a CPU with AVX-512; with AVX2 only where KC_IRB=1 (not
 * faster there than the three layers: irb.c); KC_IRB=0: never. ex NULL:
 * a block without expansion, `dw` reading `in` (MobileNetV2's first
 * block), whose projection adds no residual. ex may be a stem instead of
 * a 1x1: a convolution stem.h's loop takes (kc_stem_block_takes; not
 * with KC_IRB_STEM=0), its rows the expanded ones (MobileNetV2's Conv1
 * and first block). */
int kc_irb_fusable(const kc_conv_attrs *ex, const kc_layer *dw, const kc_layer *pw,
                   const kc_shape *in);

/* Run the fused block: ctx is the expansion node's (its layer's attrs
 * carry post_dw and post_pw), or the depthwise node's of a block without
 * expansion (its attrs carry post_pw); ctx->out[0] receives the projection's
 * output, and holds the residual beforehand when the projection
 * accumulates (it may be ctx->in[0] itself). */
kc_status kc_irb_conv(const kc_exec_ctx *ctx);

/* For tests: the cut of a block's state (one image's rows, moved by the
 * parts' times after each run; set on the first run; none, 0 parts, for
 * a block cut by channels), NULL for another kernel's state. */
struct kc_balance *kc_irb_balance(kc_kernel_state *state);

/* For tests: 1 when a block's state runs its narrow 1x1 products on
 * AVX-512's 256-bit build (kc_isa_vec_bits 256), else 0. */
int kc_irb_narrow(const kc_kernel_state *state);

#endif
