/* CPU kernels: one plain function per op, looked up by class name.
 *
 * A kernel reads its inputs and writes its outputs as dense float32 NHWC
 * (row-major, batch first) buffers whose shapes are fully known at run
 * time (the batch and any variable length resolved). Weights are the
 * layer's bound float32 weights in the order its op declared them. */
#ifndef KC_KERNEL_H
#define KC_KERNEL_H

#include "base/error.h"
#include "base/tensor.h"
#include "graph/graph.h"
#include "ops/op.h"

/* Per-node state a kernel keeps between runs (e.g. a oneDNN primitive);
 * the session frees it through `free`. */
typedef struct kc_kernel_state {
    void (*free)(struct kc_kernel_state *state);
    /* Set when the kernel has copied the layer's weight 0 into a layout of
     * its own (oneDNN's packed weights) and reads only that copy until the
     * state is rebuilt for another input shape: the session may then free
     * the layer's array where it owns it (a fused copy, see fuse.h). */
    int weights_cached;
} kc_kernel_state;

/* What Winograd convolutions may still add to a session's memory over
 * direct ones (kc_session_options.winograd_memory): a layer takes
 * Winograd only when its cost fits in `left`, and pays it from there. */
typedef struct kc_wino_budget {
    size_t left;             /* bytes; SIZE_MAX: no bound */
    /* Scratchpads are per thread and shared by every layer a thread runs
     * (dnnl_common.c's workspaces), so a layer pays only for the growth
     * past the largest scratchpad paid so far, on each thread it uses. */
    size_t scratch_paid;
} kc_wino_budget;

typedef struct kc_exec_ctx {
    const kc_node *node;
    const kc_layer *layer;
    const float *const *in;
    const kc_shape *in_shape;
    int n_in;
    float *const *out;
    const kc_shape *out_shape;
    int n_out;
    int keras_major;          /* activation semantics (hard_sigmoid) */
    const unsigned char *in_mask; /* Keras mask of input 0, (batch, time), or NULL */
    kc_kernel_state **state;  /* this node's state slot, or NULL */
    /* Weights supplied for this run only (streamed into a budgeted device
     * buffer by the residency manager), or NULL: the layer's own. When set,
     * a kernel reads them afresh each run and caches nothing derived from
     * them (it may still cache shape-only state such as a primitive). */
    const float *const *w_ext;
    /* Direct convolutions only (no Winograd): kc_session_options.exact. */
    int exact;
    /* 1: run the layer whole on oneDNN's own threading, never cut into
     * per-thread parts (kc_dnnl_plan_cuts): under the residency manager a
     * copy thread streams the next layers' weights beside the compute,
     * and a cut layer holding every core left it none. */
    int whole;
    kc_wino_budget *wino_budget; /* the session's, or NULL: no bound */
    /* Arena memory no live value occupies while this node runs (the
     * plan's spare range), free for the kernel's scratch use during the
     * call; NULL when none. */
    void *spare;
    size_t spare_bytes;
} kc_exec_ctx;

typedef kc_status (*kc_kernel_fn)(const kc_exec_ctx *ctx);

typedef struct kc_kernel_entry {
    const char *class_name;
    int ops_node;             /* 1 for keras.src.ops entries */
    kc_kernel_fn fn;
} kc_kernel_entry;

/* The kernel for an op definition, or NULL. */
kc_kernel_fn kc_kernel_lookup(const kc_op_def *def);

/* Families register NULL-terminated tables. */
extern const kc_kernel_entry kc_kernels_core[];
extern const kc_kernel_entry kc_kernels_conv[];
extern const kc_kernel_entry kc_kernels_pool[];
extern const kc_kernel_entry kc_kernels_norm[];
extern const kc_kernel_entry kc_kernels_reshape[];
extern const kc_kernel_entry kc_kernels_merge[];
extern const kc_kernel_entry kc_kernels_rnn[];
extern const kc_kernel_entry kc_kernels_preprocess[];
extern const kc_kernel_entry kc_kernels_act[];
extern const kc_kernel_entry kc_kernels_tensor_ops[];
extern const kc_kernel_entry kc_kernels_attention[];

/* ------------------------------------------------------------ helpers */

int64_t kc_count(const kc_shape *s);
/* Weight i of the executing layer (NULL if absent). */
const float *kc_w(const kc_exec_ctx *ctx, int i);
/* A convolution's kernel (weight 0) and, with use_bias, its bias (weight
 * 1, else NULL), failing when either is absent (released, or not
 * streamed in). */
kc_status kc_kernel_and_bias(const kc_exec_ctx *ctx, int use_bias, const float **w,
                             const float **bias);
/* Free the node's kernel state (built for another input shape or mode)
 * and empty its slot; returns NULL, the state the kernel now has. */
void *kc_kernel_state_drop(const kc_exec_ctx *ctx);
/* Rows [lo, hi) of a batch of images `rows` rows each, counted over the
 * batch (a part's share of a cut by output rows), run image by image:
 * fn(arg, image, y0, y1) for each image's run of rows [y0, y1). */
void kc_for_image_rows(int64_t lo, int64_t hi, int64_t rows,
                       void (*fn)(void *arg, int64_t image, int64_t y0, int64_t y1), void *arg);
/* A layer's output rows, `rows` an image over `images` images, cut over
 * `width` threads in the parts of `cut` (kc_balance: a cut made for
 * *cut_width threads, made again when that changes), each part run by
 * kc_for_image_rows and timed, the times moving the next run's cuts. */
struct kc_balance;
void kc_balanced_image_rows(struct kc_balance *cut, int *cut_width, int width, int64_t images,
                            int64_t rows,
                            void (*fn)(void *arg, int64_t image, int64_t y0, int64_t y1),
                            void *arg);
/* Apply a Keras activation by name in place over n values. Element-wise
 * ones run over ranges on the threads (kc_parallel_for): the same bits
 * as one pass. */
kc_status kc_activation_apply(const char *name, int keras_major, float *x, int64_t n,
                             int64_t last_dim);
/* Whether activation `name` is element-wise (kc_activation_apply on any
 * range of values gives those values' results). */
int kc_activation_elementwise(const char *name, int keras_major);
/* out = activation(in) over n values (kc_activation_apply's result, with
 * the copy done range by range as each is activated). */
kc_status kc_activation_apply_from(const char *name, int keras_major, const float *in,
                                   float *out, int64_t n, int64_t last_dim);
/* Softmax over `axis_len` contiguous groups with the given inner stride. */
void kc_softmax_axis(float *x, int64_t outer, int64_t axis_len, int64_t inner);
/* C = A(m x k) · B(k x n) (+ C if accumulate), row-major. */
void kc_gemm(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
             int accumulate);
/* The same with leading dimensions and an optional transposed B. */
void kc_gemm_ld(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                int64_t ldb, int trans_b, float *c, int64_t ldc, int accumulate);
/* Scratch memory for a kernel (freed by the caller with free()). */
float *kc_scratch(int64_t floats);

#endif
