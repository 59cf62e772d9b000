/* oneDNN convolution (see dnnl_conv.c). */
#ifndef KC_DNNL_CONV_H
#define KC_DNNL_CONV_H

#include <oneapi/dnnl/dnnl.h>

#include "kernels/kernel.h"

/* Run the convolution with oneDNN when it supports it; *handled = 0 means
 * the caller must use its own path (KC_DNNL=0 forces that). *act_done
 * says the layer's activation already ran as a fused post-op. */
kc_status kc_dnnl_conv(const kc_exec_ctx *ctx, int *handled, int *act_done);

/* How many parts (threads) a node's oneDNN convolution state runs in:
 * 1 whole, more when cut (kc_dnnl_plan_cuts); 0 for no such state. */
int kc_dnnl_conv_parts(const kc_kernel_state *state);

/* How many of those parts run a Winograd primitive; how many of these
 * run oneDNN's F(4x4, 3x3) kernel. */
int kc_dnnl_conv_wino_parts(const kc_kernel_state *state);
int kc_dnnl_conv_wino_f4_parts(const kc_kernel_state *state);

/* How many of its parts add a residual after the convolution
 * (kc_residual_add) rather than in oneDNN's sum post-op. */
int kc_dnnl_conv_add_after_parts(const kc_kernel_state *state);
/* How many run on their input subsampled first (a strided 1x1). */
int kc_dnnl_conv_gather_parts(const kc_kernel_state *state);
/* How many run as a 1x1 convolution over their taps (im2col: a 1-D
 * kernel on a small image, without AVX-512). */
int kc_dnnl_conv_im2col_parts(const kc_kernel_state *state);
/* How many run a fused depthwise layer on kernels/dw.c's loop (own_dw). */
int kc_dnnl_conv_own_dw_parts(const kc_kernel_state *state);
/* For tests: the threads an own_dw pair on one image cuts its output
 * rows between (0: it runs whole). */
int kc_dnnl_conv_row_parts(const kc_kernel_state *state);

/* The oneDNN implementation part `part` of that state runs (its name, as
 * ONEDNN_VERBOSE prints it: "brgconv_1x1:avx512_core", "jit:avx512_core"),
 * or NULL. */
const char *kc_dnnl_conv_impl(const kc_kernel_state *state, int part);

/* 1 when 1x1 convolution a (input shape in, output shape mid) can run
 * depthwise layer dw, which alone reads its output, as a fused post-op
 * (kc_conv_attrs.post_dw) with the same result: oneDNN is in use, both
 * activations run inside the primitive, and oneDNN takes the geometry
 * for one image (the pair runs one image at a time). */
struct kc_conv_attrs;
int kc_dnnl_conv_dw_fusable(const struct kc_conv_attrs *a, const kc_layer *dw,
                            const kc_shape *in, const kc_shape *mid);

/* For pair a + dw on a batch of one (input shape in, 1x1 output mid):
 * the threads its output rows are cut between when fused
 * (kc_dnnl_conv_dw_fusable), 0 when a fused pair would run whole. */
int kc_dnnl_conv_dw_row_parts(const struct kc_conv_attrs *a, const kc_layer *dw,
                              const kc_shape *in, const kc_shape *mid);

/* 1 when "same" stride-1 average pooling layer `pool` (input shape in)
 * can run after 1x1 convolution a, which alone reads it
 * (kc_conv_attrs.pre_pool): oneDNN is in use and runs the activation
 * after the pooling. */
int kc_dnnl_conv_pool_fusable(const struct kc_conv_attrs *a, const kc_layer *pool,
                              const kc_shape *in);

/* Whether oneDNN, given this layer whole (one part of all its images,
 * as ctx->whole runs it) with a fused residual sum, takes its direct
 * kernel (kc_dnnl_preferred_impl: a wide 1x1 sum), which adds the
 * residual before the bias, rather than brgconv_1x1, which adds the
 * bias first. kernels/pw.c sums as the one oneDNN would take. */
int kc_dnnl_conv_sum_direct(const struct kc_conv_attrs *a, const kc_shape *in,
                            const kc_shape *out);

/* The primitive descriptor of the direct convolution oneDNN gives one
 * image of layer a (input shape in, output out; their first dimension
 * ignored), built as a part of it would be (the same post-ops, the same
 * preferred implementation, weights in oneDNN's layout); NULL when none.
 * For kernels/dnnl_order.c, which runs it to learn how it sums. */
dnnl_primitive_desc_t kc_dnnl_conv_image_pd(const struct kc_conv_attrs *a, const kc_shape *in,
                                            const kc_shape *out);

#endif
