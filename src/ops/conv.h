/* Attributes of the convolution layers (1-D, 2-D, 3-D; plain, transposed,
 * depthwise, separable). Arrays are indexed by spatial axis. */
#ifndef KC_OPS_CONV_H
#define KC_OPS_CONV_H

#include <stdint.h>

typedef enum kc_conv_kind {
    KC_CONV_PLAIN,
    KC_CONV_TRANSPOSE,
    KC_CONV_DEPTHWISE,
    KC_CONV_SEPARABLE
} kc_conv_kind;

typedef struct kc_conv_attrs {
    kc_conv_kind kind;
    int spatial;                /* 1, 2 or 3 */
    int64_t filters;            /* 0 for depthwise */
    int64_t kernel[3];
    int64_t strides[3];
    int64_t dilation[3];
    int64_t output_padding[3];  /* transposed only; -1 = None */
    int padding;                /* 0 valid, 1 same, 2 causal */
    int64_t groups;
    int64_t depth_multiplier;
    int use_bias;
    const char *activation;
    /* Set only on session-owned copies (runtime/fuse.c): the output buffer
     * holds a residual the convolution adds to before its activation (a
     * fused Add). Plain and depthwise kinds, channels_last. */
    int accumulate;
    /* Also session copies only: a ZeroPadding folded into this "valid"
     * convolution. The input value then has the padded shape but holds
     * the unpadded data; the kernel pads by these instead. */
    int64_t pad_before[3], pad_after[3];
    /* Also session copies only, and only for the plan that set it
     * (runtime/fuse.c, kc_fuse_dw_plan): a 3x3 depthwise convolution that
     * alone reads this 1x1 convolution's output, run with it as one
     * oneDNN primitive (its depthwise post-op: the two convolutions in
     * turn, the wide expanded tensor of a MobileNet block in the thread's
     * scratchpad rather than the arena), one call per part of the pair
     * instead of one per layer. The output buffer then receives the
     * depthwise convolution's output. The layer is the depthwise node's
     * own session copy (its attrs and folded weights). */
    const struct kc_layer *post_dw;
    /* Also session copies only, per plan, with post_dw (kc_fuse_dw_plan):
     * the 1x1 convolution that alone reads the depthwise output, run in
     * the same kernel (kernels/irb.c, MobileNet's inverted-residual
     * block): the output buffer then receives its output, and holds its
     * residual beforehand when it accumulates. Its own session copy. */
    const struct kc_layer *post_pw;
    /* Also session copies only, per plan (kc_fuse_pool_plan): a "same"
     * stride-1 AveragePooling2D that alone feeds this 1x1 convolution,
     * run after it instead: the input value is the pooling's input (same
     * shape), the convolution (with its bias) writes a per-thread buffer
     * and the pooling, with this layer's activation, the output. */
    const struct kc_layer *pre_pool;
    /* Also session copies only, per plan (kc_fuse_maxpool_plan): a 2-D
     * MaxPooling2D whose windows tile the output (pool size = strides, no
     * padding) that alone reads this convolution's output, run inside it
     * (kernels/stem.c): the output value then shares the pooling's slot,
     * and the output buffer receives the pooled output, the convolution's
     * own never written whole. */
    const struct kc_layer *post_pool;
    /* Also session copies only, per plan (kc_fuse_upsample_plan): a
     * nearest-neighbour UpSampling2D by 2 that alone feeds this 3x3
     * stride-1 convolution, never run: the input value keeps the
     * upsampled shape but its slot holds the upsampling's input, and the
     * convolution runs as a 2x2 one on it (kernels/upconv.c). */
    const struct kc_layer *pre_upsample;
    /* Also session copies only, per plan (kc_fuse_head_plan): the Dense
     * layer after a GlobalAveragePooling2D that alone reads this 1x1
     * convolution's output (its own output read by the Dense alone), both
     * run inside it (kernels/pw.c, pw_head.c): the output value then
     * shares the Dense's slot and the output buffer receives the Dense's
     * output, activation applied; the convolution's and the pooling's
     * outputs stay in the kernel's buffers. */
    const struct kc_layer *post_head;
} kc_conv_attrs;

/* The shape of the data a convolution really reads: `in` less a folded
 * ZeroPadding (pad_before/pad_after), NHWC-style (spatial axes 1..). */
static inline void kc_conv_data_shape(const kc_conv_attrs *a, int64_t *dims, int rank)
{
    for (int i = 0; i < a->spatial && 1 + i < rank; i++)
        dims[1 + i] -= a->pad_before[i] + a->pad_after[i];
}

#endif
