/* Launchers of the CUDA plugin's own kernels (cuda_kernels.cu). Plain C
 * and C++ both: the .cu side includes no kerasc header, so everything
 * crosses this line as pointers, integers and small by-value structs.
 * Every launcher enqueues on `stream` and returns cudaGetLastError(). */
#ifndef KC_CUDA_KERNELS_H
#define KC_CUDA_KERNELS_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element-wise activations (formulas of src/kernels/common.c and act.c).
 * softmax / log_softmax are not element-wise: see kcu_softmax. */
typedef enum kcu_act {
    KCU_ACT_LINEAR = 0,
    KCU_ACT_RELU,
    KCU_ACT_RELU6,
    KCU_ACT_LEAKY_RELU,     /* Keras activation name: slope 0.2 */
    KCU_ACT_ELU,            /* alpha 1 */
    KCU_ACT_SELU,
    KCU_ACT_SIGMOID,
    KCU_ACT_HARD_SIGMOID2,  /* Keras 2: 0.2x + 0.5 */
    KCU_ACT_HARD_SIGMOID3,  /* Keras 3: x/6 + 0.5 */
    KCU_ACT_SILU,
    KCU_ACT_HARD_SILU,
    KCU_ACT_GELU,           /* exact erf form */
    KCU_ACT_TANH,
    KCU_ACT_SOFTPLUS,
    KCU_ACT_SOFTSIGN,
    KCU_ACT_EXPONENTIAL,
    KCU_ACT_MISH,
    KCU_ACT_CELU,
    KCU_ACT_HARD_TANH,
    KCU_ACT_HARD_SHRINK,
    KCU_ACT_SOFT_SHRINK,
    KCU_ACT_TANH_SHRINK,
    KCU_ACT_SPARSE_PLUS,
    KCU_ACT_SQUAREPLUS,
    KCU_ACT_LOG_SIGMOID,
    /* Parametrised (activation layers); p0..p2 below. */
    KCU_ACT_RELU_EX,        /* ReLU layer: max_value p0 (< 0 none), negative_slope p1, threshold p2 */
    KCU_ACT_LEAKY,          /* LeakyReLU layer: slope p0 */
    KCU_ACT_ELU_ALPHA,      /* ELU layer: alpha p0 */
    KCU_ACT_THRESHOLDED,    /* ThresholdedReLU: theta p0 */
    KCU_ACT_DIV,            /* x / p0 (Average) */
    KCU_ACT_COUNT
} kcu_act;

/* y[i] = act(x[i] + (bias ? bias[i % c] : 0)); x may equal y. */
cudaError_t kcu_bias_act(const float *x, float *y, const float *bias, int64_t n, int64_t c,
                         int act, float p0, float p1, float p2, cudaStream_t stream);

/* In place softmax over `len` elements strided by `inner` (outer groups). */
cudaError_t kcu_softmax(float *y, int64_t outer, int64_t len, int64_t inner, int log_softmax,
                        cudaStream_t stream);

/* Geometry over three spatial axes (D, H, W); unused axes have size 1. */
typedef struct kcu_geom {
    int64_t n, c, f;            /* batch, input channels, output channels */
    int64_t in[3], out[3];
    int64_t k[3], s[3], d[3];
    int64_t pad[3];             /* padding before (forward conv / pool) */
    int64_t dm;                 /* depth multiplier (depthwise) */
} kcu_geom;

/* y[b, o..., c] = x[b, o - shift..., c] where inside, else 0. Uses
 * g.n, g.c, g.in, g.out and g.pad as the shift (negative: cropping). */
cudaError_t kcu_pad(const float *x, float *y, kcu_geom g, cudaStream_t stream);

/* y[b, o..., c] = x[b, o * s..., c] (g.n, g.c, g.in, g.out, g.s): the input
 * of a strided 1x1 convolution, subsampled. */
cudaError_t kcu_subsample(const float *x, float *y, kcu_geom g, cudaStream_t stream);

/* Depthwise: y[.., c*dm + m] = bias + sum_k x[.., c] * w[k, c, m]. */
cudaError_t kcu_depthwise(const float *x, const float *w, const float *bias, float *y,
                          kcu_geom g, cudaStream_t stream);

/* Direct (grouped) convolution, the fallback when cuDNN declines a
 * configuration: w is Keras's (k..., c/groups, f). */
cudaError_t kcu_conv_direct(const float *x, const float *w, const float *bias, float *y,
                            kcu_geom g, int64_t groups, cudaStream_t stream);

/* Transposed convolution, gather form: w is (k..., f, c). */
cudaError_t kcu_conv_transpose(const float *x, const float *w, const float *bias, float *y,
                               kcu_geom g, cudaStream_t stream);

/* Windowed pooling (max, or average over the real cells). */
cudaError_t kcu_pool(const float *x, float *y, kcu_geom g, int is_max, cudaStream_t stream);
/* Global pooling of (n, cells, c) to (n, c). */
cudaError_t kcu_global_pool(const float *x, float *y, int64_t n, int64_t cells, int64_t c,
                            int is_max, cudaStream_t stream);

/* Broadcast view of an input seen through the output shape. */
#define KCU_MAX_RANK 8
typedef struct kcu_bcast {
    int rank;
    int64_t dims[KCU_MAX_RANK];     /* output dims */
    int64_t strides[KCU_MAX_RANK];  /* input strides, 0 on broadcast axes */
} kcu_bcast;

enum { KCU_MERGE_COPY = 0, KCU_MERGE_ADD, KCU_MERGE_SUB, KCU_MERGE_MUL, KCU_MERGE_MAX,
       KCU_MERGE_MIN };
/* acc[o] = op(acc[o], x[bcast(o)]) over n outputs (COPY: acc = x). */
cudaError_t kcu_merge(float *acc, const float *x, int64_t n, kcu_bcast v, int op,
                      cudaStream_t stream);
/* y[i] = op(a[i], b[i]) over n elements of three same-shaped tensors (y
 * may be a or b): one pass where a merge through kcu_merge takes two. */
cudaError_t kcu_merge2(float *y, const float *a, const float *b, int64_t n, int op,
                       cudaStream_t stream);

/* Inference BatchNormalization on the axis of length len (double math):
 * y = (x - mean) * gamma / sqrt(var + eps) + beta; gamma/beta may be NULL. */
cudaError_t kcu_batchnorm(const float *x, float *y, const float *gamma, const float *beta,
                          const float *mean, const float *var, int64_t outer, int64_t len,
                          int64_t inner, double eps, cudaStream_t stream);

#define KCU_RESCALE_MAX 64
typedef struct kcu_rescale {
    int64_t n_scale, n_offset;      /* 1 or c */
    float scale[KCU_RESCALE_MAX];
    float offset[KCU_RESCALE_MAX];
} kcu_rescale;
/* y = x * scale + offset, per channel (last axis of length c) or scalar. */
cudaError_t kcu_rescaling(const float *x, float *y, int64_t n, int64_t c, kcu_rescale r,
                          cudaStream_t stream);

/* Weight layout change: src (rs, c, k) -> dst (k, rs, c); Keras HWIO to
 * cuDNN's NHWC filter layout KRSC. */
cudaError_t kcu_hwio_to_krsc(const float *src, float *dst, int64_t rs, int64_t c, int64_t k,
                             cudaStream_t stream);
/* The same to cuDNN's NCHW filter layout KCRS: dst (k, c, rs). */
cudaError_t kcu_hwio_to_kcrs(const float *src, float *dst, int64_t rs, int64_t c, int64_t k,
                             cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
