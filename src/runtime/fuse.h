/* Session-level graph rewrites: BatchNormalization folded into the
 * preceding convolution/Dense, activations fused into it (see fuse.c). */
#ifndef KC_FUSE_H
#define KC_FUSE_H

#include "graph/graph.h"

typedef struct kc_fused {
    int *alias;          /* per value: the value it shares storage with, or -1 */
    unsigned char *skip; /* per node: absorbed into its producer */
    kc_layer **shadow;   /* per node: rewritten copy of its layer, or NULL */
    int n_fused;
    int n_released;      /* shadow kernels freed by kc_fused_release_kernel */
    int *taken;          /* kc_fuse's taken: arrays moved or freed, or NULL */
    int scope_first, scope_last; /* kc_fuse's stage range, or -1 */
    int *dw_of;          /* per plain convolution node: the depthwise node
                            that alone reads it, or -1 (fusable per plan) */
    unsigned char *dw_on; /* per such node: fused for the current plan */
    int n_dw_on;
    int *pool_of;        /* per 1x1 convolution node: the "same" stride-1
                            AveragePooling2D node whose output it alone
                            reads, or -1 (fusable per plan) */
    unsigned char *pool_on; /* per such node: fused for the current plan */
    int n_pool_on;
    int *pw_of;          /* per node with a dw_of: the 1x1 convolution node
                            that alone reads the depthwise output, or -1
                            (the three fusable per plan as one block) */
    int *dwp_of;         /* per depthwise node no 1x1 carries: the 1x1
                            convolution node that alone reads its output,
                            or -1 (the two fusable per plan as a block
                            without expansion: irb_on, irb_alias) */
    unsigned char *irb_on; /* per such node: the block fused for the plan */
    int n_irb_on;
    int *irb_alias;      /* per such node, 3 each: the aliases of the block's
                            three outputs before it was fused */
    int *maxpool_of;     /* per plain convolution node: the MaxPooling2D node
                            that alone reads its output, or -1 (fusable per
                            plan) */
    unsigned char *maxpool_on; /* per such node: fused for the current plan */
    int n_maxpool_on;
    int *upsample_of;    /* per plain convolution node: the UpSampling2D node
                            whose output it alone reads, or -1 (fusable per
                            plan) */
    unsigned char *upsample_on; /* per such node: fused for the current plan */
    int n_upsample_on;
    int *head_of;        /* per plain convolution node: the GlobalAveragePooling2D
                            node that alone reads its output when a Dense
                            node alone reads the pooling's, or -1 (fusable
                            per plan) */
    int *head_dense;     /* per such node: that Dense node */
    unsigned char *head_on; /* per such node: fused for the current plan */
    int n_head_on;
} kc_fused;

/* What kc_fuse may rewrite: nothing (disk-backed weights: a rewritten
 * layer would copy its weights into memory); only what any backend runs
 * as it is (BatchNormalization folded into weights, an activation made
 * the layer's own); or also what only the host's kernels know (a residual
 * Add as the convolution's sum, a ZeroPadding folded in as padding, and
 * the per-plan fusions). A session through the scheduler gets the
 * portable set: its devices run other kernels (the CUDA plugin's
 * convolution would overwrite where the host's adds). */
typedef enum { KC_FUSE_NONE, KC_FUSE_PORTABLE, KC_FUSE_HOST } kc_fuse_level;

/* stage = NULL, or a pipeline stage's node range {first, last}: the
 * host-only rewrites then never join a node inside it with one outside.
 * The portable ones may: every session of the model, on any backend,
 * makes them alike, so the stage before the cut runs the joined node and
 * the one after skips the absorbed one. A host-only one would be made on
 * one side only (a CPU stage before a GPU one would add a residual twice),
 * and a ZeroPadding folded into a convolution beyond the cut leaves the
 * value crossing it unwritten.
 * taken = NULL: a rewritten layer copies
 * its layer's arrays. Else the graph's arrays are the caller's to give
 * (release_packed_weights): a rewritten layer takes them over and an
 * absorbed BatchNormalization's are freed, each leaving its slot NULL
 * and counted in *taken. */
kc_status kc_fuse(const kc_graph *graph, kc_fuse_level level, const int *stage, int *taken,
                  kc_fused *out);
void kc_fused_free(kc_fused *fused, int n_nodes);

/* For a plan with value shapes `shape`: fuse each depthwise convolution
 * found by kc_fuse into its 1x1 producer (kc_conv_attrs.post_dw, the
 * depthwise node skipped, its output an alias of the 1x1 output's slot)
 * where allow is set, the batch has 2 or more images or each image runs
 * on one thread (one_thread: batch lanes; else one image is cut into row
 * parts, which the fused pair cannot be: fused, it ran no faster) and
 * oneDNN takes the pair; undo it elsewhere. n_dw_on then says how many
 * are fused: the plan's memory must be laid out again with the new
 * aliases. */
/* Before that, per pair: where the pair's depthwise output is read only
 * by a 1x1 convolution and the block kernel takes the three (kernels/
 * irb.h, allow set), the three run as one kernel on the expansion's node
 * (post_dw and post_pw), the other two skipped and every value of the
 * block in one slot: the projection's residual's when it accumulates
 * (the residual made before the block, read by nothing in it), else the
 * expansion output's. After it, a depthwise node left unfused whose
 * output only a 1x1 convolution reads (dwp_of: MobileNetV2's first
 * block, after a 3x3 convolution) runs the two as a block without
 * expansion on its own node (post_pw), its output in the projection's
 * slot. n_irb_on says how many blocks are fused. */
kc_status kc_fuse_dw_plan(kc_fused *fused, const kc_graph *graph, const kc_shape *shape, int allow,
                          int one_thread);
/* For a plan with value shapes `shape`: run each average pooling found by
 * kc_fuse after the 1x1 convolution that alone reads it instead of before
 * (kc_conv_attrs.pre_pool: the pooling node skipped, its output an alias
 * of its input), where allow is set and oneDNN takes the pair; undo it
 * elsewhere. Both are linear per pixel and the pooling's weights sum to
 * one, so pool(x) W + b = pool(x W + b); the pooling then averages the
 * convolution's channels (InceptionV3: 32-192) rather than its input's
 * (192-2048). n_pool_on says how many are fused. Call after
 * kc_fuse_dw_plan: a convolution with a fused depthwise one keeps its
 * pooling. */
kc_status kc_fuse_pool_plan(kc_fused *fused, const kc_graph *graph, const kc_shape *shape,
                            int allow);
/* For a plan with value shapes `shape`: run each max pooling found by
 * kc_fuse inside the convolution whose output it alone reads
 * (kc_conv_attrs.post_pool: the pooling node skipped, the convolution's
 * output an alias of the pooling's, so its slot is the pooled size)
 * where allow is set and the stem loop takes the pair
 * (kc_stem_pool_fusable); undo it elsewhere. Max is exact: the output
 * keeps its bits. n_maxpool_on says how many are fused. Call after
 * kc_fuse_dw_plan and kc_fuse_pool_plan. */
kc_status kc_fuse_maxpool_plan(kc_fused *fused, const kc_graph *graph, const kc_shape *shape,
                               int allow);
/* For a plan with value shapes `shape`: run each convolution found by
 * kc_fuse reading a nearest UpSampling2D's output alone on the
 * upsampling's input instead (kc_conv_attrs.pre_upsample: the upsampling
 * node skipped, its output an alias of its input, so its slot is the
 * input's size; kernels/upconv.c) where allow is set and
 * kc_upconv_fusable; undo it elsewhere. The kernel's taps are summed
 * first, which reorders the arithmetic: the caller keeps it off for
 * `exact`. n_upsample_on says how many are fused. Call after
 * kc_fuse_maxpool_plan. */
kc_status kc_fuse_upsample_plan(kc_fused *fused, const kc_graph *graph, const kc_shape *shape,
                                int allow);
/* For a plan with value shapes `shape`: run each global average pooling
 * and Dense found by kc_fuse after a 1x1 convolution inside it
 * (kc_conv_attrs.post_head, kernels/pw_head.c: both nodes skipped, the
 * convolution's and the pooling's outputs aliases of the Dense's, so
 * their slot is the Dense's size) where allow is set and
 * kc_pw_head_fusable; undo it elsewhere. The same bits as the three
 * layers apart. n_head_on says how many are fused. Call after the other
 * per-plan fusions: a convolution that carries a block keeps its head. */
kc_status kc_fuse_head_plan(kc_fused *fused, const kc_graph *graph, const kc_shape *shape,
                            int allow);
/* Free node's rewritten kernel (weight 0) once its kernel keeps a packed
 * copy of its own (kc_kernel_state.weights_cached): two copies of every
 * folded convolution would otherwise stay resident. Until kc_fuse runs
 * again, the node's shadow has no kernel array: the session redoes the
 * rewrites before any kernel could rebuild (a new plan). */
void kc_fused_release_kernel(kc_fused *fused, int node);

#endif
