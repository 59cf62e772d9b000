/* The CUDA plugin's op coverage: which layers it runs (supports), the
 * device workspace they need and their dispatch onto cuDNN (plain and
 * grouped convolutions), cuBLAS (Dense, the pointwise half of separable
 * convolutions) and the plugin's own kernels (everything else).
 *
 * Semantics are those of the CPU kernels (src/kernels/, one file per family): NHWC float32,
 * Keras weight layouts, TensorFlow "same" padding with the extra pixel
 * after, average pooling over the real cells only. Weights arrive per call
 * (they may have been streamed into a ring), so nothing derived from them
 * is cached; a node's state holds only shape-derived cuDNN descriptors and
 * the algorithm choice. */
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_kernels.h"
#include "ops/activation.h"
#include "ops/conv.h"
#include "ops/core.h"
#include "ops/merge.h"
#include "ops/norm.h"
#include "ops/op.h"
#include "ops/pool.h"
#include "ops/preprocess.h"
#include "ops/reshape.h"

static kc_status kc_cuda_msg(kc_backend *b, kc_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static double kc_cuda_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static kc_status kc_cuda_msg(kc_backend *b, kc_status st, const char *fmt, ...)
{
    if (!b->host.fail || b->quiet)
        return st;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return b->host.fail(st, "cuda: %s", msg);
}

/* Launch result of one of our kernels. */
#define KC_KER(b, call) KC_CU(b, call)

/* ------------------------------------------------------------ op families */

typedef enum kc_cuda_family {
    KCF_NONE,
    KCF_CONV,
    KCF_DENSE,
    KCF_ACTIVATION,  /* Activation(name) */
    KCF_ACT_LAYER,   /* ReLU, LeakyReLU, ELU, Softmax, ThresholdedReLU */
    KCF_BATCHNORM,
    KCF_MERGE,
    KCF_POOL,
    KCF_PAD,
    KCF_CROP,
    KCF_COPY,
    KCF_RESCALE
} kc_cuda_family;

static const struct {
    const char *name;
    kc_cuda_family family;
} kc_cuda_classes[] = {
    {"Conv1D", KCF_CONV}, {"Conv2D", KCF_CONV}, {"Convolution1D", KCF_CONV},
    {"Convolution2D", KCF_CONV}, {"AtrousConvolution1D", KCF_CONV},
    {"AtrousConvolution2D", KCF_CONV}, {"Conv1DTranspose", KCF_CONV},
    {"Conv2DTranspose", KCF_CONV}, {"Conv3DTranspose", KCF_CONV},
    {"Deconvolution2D", KCF_CONV}, {"DepthwiseConv1D", KCF_CONV},
    {"DepthwiseConv2D", KCF_CONV}, {"SeparableConv1D", KCF_CONV},
    {"SeparableConv2D", KCF_CONV}, {"SeparableConvolution2D", KCF_CONV},
    {"Dense", KCF_DENSE}, {"Activation", KCF_ACTIVATION},
    {"ReLU", KCF_ACT_LAYER}, {"LeakyReLU", KCF_ACT_LAYER}, {"ELU", KCF_ACT_LAYER},
    {"Softmax", KCF_ACT_LAYER}, {"ThresholdedReLU", KCF_ACT_LAYER},
    {"BatchNormalization", KCF_BATCHNORM}, {"BatchNormalizationV1", KCF_BATCHNORM},
    {"Add", KCF_MERGE}, {"Subtract", KCF_MERGE}, {"Multiply", KCF_MERGE},
    {"Average", KCF_MERGE}, {"Maximum", KCF_MERGE}, {"Minimum", KCF_MERGE},
    {"Concatenate", KCF_MERGE}, {"Merge", KCF_MERGE},
    {"MaxPooling1D", KCF_POOL}, {"MaxPooling2D", KCF_POOL}, {"MaxPooling3D", KCF_POOL},
    {"AveragePooling1D", KCF_POOL}, {"AveragePooling2D", KCF_POOL},
    {"AveragePooling3D", KCF_POOL}, {"GlobalMaxPooling1D", KCF_POOL},
    {"GlobalMaxPooling2D", KCF_POOL}, {"GlobalMaxPooling3D", KCF_POOL},
    {"GlobalAveragePooling1D", KCF_POOL}, {"GlobalAveragePooling2D", KCF_POOL},
    {"GlobalAveragePooling3D", KCF_POOL}, {"MaxPool1D", KCF_POOL}, {"MaxPool2D", KCF_POOL},
    {"AvgPool1D", KCF_POOL}, {"AvgPool2D", KCF_POOL}, {"GlobalAvgPool2D", KCF_POOL},
    {"GlobalMaxPool2D", KCF_POOL}, {"GlobalAvgPool1D", KCF_POOL},
    {"GlobalMaxPool1D", KCF_POOL},
    {"ZeroPadding1D", KCF_PAD}, {"ZeroPadding2D", KCF_PAD}, {"ZeroPadding3D", KCF_PAD},
    {"Cropping1D", KCF_CROP}, {"Cropping2D", KCF_CROP}, {"Cropping3D", KCF_CROP},
    {"Flatten", KCF_COPY}, {"Reshape", KCF_COPY}, {"Dropout", KCF_COPY},
    {"Identity", KCF_COPY},
    {"Rescaling", KCF_RESCALE},
};

static kc_cuda_family kc_cuda_family_of(const kc_layer *layer)
{
    if (layer->def && (layer->def->flags & KC_OPF_OPS_NODE))
        return KCF_NONE; /* keras.src.ops entries share some class names */
    if (layer->def && (layer->def->flags & KC_OPF_IDENTITY))
        return KCF_COPY;
    for (size_t i = 0; i < sizeof kc_cuda_classes / sizeof kc_cuda_classes[0]; i++)
        if (strcmp(kc_cuda_classes[i].name, layer->class_name) == 0)
            return kc_cuda_classes[i].family;
    return KCF_NONE;
}

/* ------------------------------------------------------------ activations */

enum { KC_SM_NONE, KC_SM_SOFTMAX, KC_SM_LOG };

static const struct {
    const char *name;
    int code;
} kc_cuda_acts[] = {
    {"linear", KCU_ACT_LINEAR},       {"relu", KCU_ACT_RELU},
    {"relu6", KCU_ACT_RELU6},         {"leaky_relu", KCU_ACT_LEAKY_RELU},
    {"elu", KCU_ACT_ELU},             {"selu", KCU_ACT_SELU},
    {"sigmoid", KCU_ACT_SIGMOID},     {"silu", KCU_ACT_SILU},
    {"swish", KCU_ACT_SILU},          {"hard_silu", KCU_ACT_HARD_SILU},
    {"hard_swish", KCU_ACT_HARD_SILU}, {"gelu", KCU_ACT_GELU},
    {"tanh", KCU_ACT_TANH},           {"softplus", KCU_ACT_SOFTPLUS},
    {"softsign", KCU_ACT_SOFTSIGN},   {"exponential", KCU_ACT_EXPONENTIAL},
    {"mish", KCU_ACT_MISH},           {"celu", KCU_ACT_CELU},
    {"hard_tanh", KCU_ACT_HARD_TANH}, {"hard_shrink", KCU_ACT_HARD_SHRINK},
    {"soft_shrink", KCU_ACT_SOFT_SHRINK}, {"tanh_shrink", KCU_ACT_TANH_SHRINK},
    {"sparse_plus", KCU_ACT_SPARSE_PLUS}, {"squareplus", KCU_ACT_SQUAREPLUS},
    {"log_sigmoid", KCU_ACT_LOG_SIGMOID},
};

/* The element-wise code of a Keras activation name (NULL = linear) and
 * whether a softmax follows; -1 if unknown. */
static int kc_cuda_act_code(const char *name, int keras_major, int *softmax)
{
    *softmax = KC_SM_NONE;
    if (!name)
        return KCU_ACT_LINEAR;
    if (strcmp(name, "hard_sigmoid") == 0)
        return keras_major >= 3 ? KCU_ACT_HARD_SIGMOID3 : KCU_ACT_HARD_SIGMOID2;
    if (strcmp(name, "softmax") == 0 || strcmp(name, "log_softmax") == 0) {
        *softmax = name[0] == 'l' ? KC_SM_LOG : KC_SM_SOFTMAX;
        return KCU_ACT_LINEAR;
    }
    for (size_t i = 0; i < sizeof kc_cuda_acts / sizeof kc_cuda_acts[0]; i++)
        if (strcmp(kc_cuda_acts[i].name, name) == 0)
            return kc_cuda_acts[i].code;
    return -1;
}

static int kc_cuda_act_known(const char *name)
{
    int sm;
    return kc_cuda_act_code(name, 3, &sm) >= 0;
}

/* y = act(x + bias) over n values whose last axis has c entries. */
static kc_status kc_cuda_activate(kc_backend *b, const float *x, float *y, const float *bias,
                                  int64_t n, int64_t c, const char *name, int keras_major)
{
    int sm;
    int code = kc_cuda_act_code(name, keras_major, &sm);
    if (code < 0)
        return kc_cuda_msg(b, KC_ERR_UNSUPPORTED, "activation '%s' is not implemented", name);
    if (code != KCU_ACT_LINEAR || bias || x != y)
        KC_KER(b, kcu_bias_act(x, y, bias, n, c, code, 0, 0, 0, b->compute));
    if (sm != KC_SM_NONE) {
        if (c < 1)
            return kc_cuda_msg(b, KC_ERR_SHAPE, "softmax over an empty axis");
        KC_KER(b, kcu_softmax(y, n / c, c, 1, sm == KC_SM_LOG, b->compute));
    }
    return KC_OK;
}

/* --------------------------------------------------------------- supports */

/* A convolution the host's fusions rewrote (runtime/fuse.c): a residual
 * sum, a folded ZeroPadding, a fused depthwise layer or pooling. The
 * session gives a scheduled graph none of these (KC_FUSE_PORTABLE); were
 * one to arrive, the kernels here would drop it, so it stays on the host. */
static int kc_cuda_host_rewrite(const kc_conv_attrs *a)
{
    for (int i = 0; i < 3; i++)
        if (a->pad_before[i] || a->pad_after[i])
            return 1;
    return a->accumulate || a->post_dw || a->pre_pool;
}

int kc_cuda_supports(kc_backend *b, const kc_layer *layer, const kc_node *node)
{
    (void)b;
    if (!layer || !layer->class_name || layer->channels_first)
        return 0;
    if (node && (node->n_outputs != 1 || node->n_consts > 0))
        return 0;
    kc_cuda_family fam = kc_cuda_family_of(layer);
    if (fam == KCF_NONE)
        return 0;
    if (fam == KCF_COPY)
        return 1;
    if (!layer->attrs)
        return 0;
    switch (fam) {
    case KCF_CONV: {
        const kc_conv_attrs *a = layer->attrs;
        if (!kc_cuda_act_known(a->activation) || a->spatial < 1 || kc_cuda_host_rewrite(a))
            return 0;
        switch (a->kind) {
        case KC_CONV_PLAIN: return a->spatial <= 2 && a->groups >= 1;
        case KC_CONV_TRANSPOSE: return a->spatial <= 3 && a->groups == 1;
        case KC_CONV_DEPTHWISE:
        case KC_CONV_SEPARABLE: return a->spatial <= 2 && a->depth_multiplier >= 1;
        }
        return 0;
    }
    case KCF_DENSE: return kc_cuda_act_known(((const kc_dense_attrs *)layer->attrs)->activation);
    case KCF_ACTIVATION:
        return kc_cuda_act_known(((const kc_activation_attrs *)layer->attrs)->activation);
    case KCF_ACT_LAYER: {
        const kc_act_layer_attrs *a = layer->attrs;
        switch (a->kind) {
        case KC_ACT_RELU:
        case KC_ACT_LEAKY:
        case KC_ACT_ELU:
        case KC_ACT_THRESHOLDED: return 1;
        case KC_ACT_SOFTMAX: return a->n_axes == 1;
        default: return 0;
        }
    }
    case KCF_BATCHNORM: return ((const kc_norm_attrs *)layer->attrs)->n_axes == 1;
    case KCF_MERGE: return ((const kc_merge_attrs *)layer->attrs)->kind != KC_MERGE_DOT;
    case KCF_POOL: {
        const kc_pool_attrs *a = layer->attrs;
        for (int i = 0; i < 3; i++)
            if (a->pad_before[i] || a->pad_after[i]) /* a folded ZeroPadding (fuse.c) */
                return 0;
        return a->spatial >= 1 && a->spatial <= 3;
    }
    case KCF_PAD:
    case KCF_CROP: {
        const kc_pad_attrs *a = layer->attrs;
        return a->spatial >= 1 && a->spatial <= 3;
    }
    case KCF_RESCALE: {
        const kc_rescaling_attrs *a = layer->attrs;
        return a->n_scale >= 1 && a->n_scale <= KCU_RESCALE_MAX && a->n_offset >= 1 &&
               a->n_offset <= KCU_RESCALE_MAX;
    }
    default: return 0;
    }
}

/* ------------------------------------------------------------- geometry */

static int64_t kc_cuda_count(const kc_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dims[i] > 0 ? s->dims[i] : (s->dims[i] == 0 ? 0 : 1);
    return n;
}

static int64_t kc_cuda_dim(const kc_shape *s, int i)
{
    return s->dims[i] >= 0 ? s->dims[i] : 1; /* an unresolved batch counts as 1 */
}

/* Spatial dims of an N...C shape over three axes (D, H, W), unused = 1. */
static void kc_cuda_spatial(const kc_shape *s, int spatial, int64_t d[3])
{
    for (int i = 0; i < 3; i++) {
        int axis = i - (3 - spatial);
        d[i] = axis >= 0 && 1 + axis < s->rank - 1 ? kc_cuda_dim(s, 1 + axis) : 1;
    }
}

/* TF padding before for a forward conv: "same" puts the extra after. */
static int64_t kc_cuda_pad_before(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d,
                                  int mode)
{
    int64_t keff = (k - 1) * d + 1;
    if (mode == 2)
        return keff - 1;
    if (mode == 0)
        return 0;
    int64_t total = (out - 1) * s + keff - in;
    return total > 0 ? total / 2 : 0;
}

static int64_t kc_cuda_pad_after(int64_t in, int64_t out, int64_t k, int64_t s, int64_t d,
                                 int mode)
{
    if (mode != 1)
        return 0;
    int64_t keff = (k - 1) * d + 1;
    int64_t total = (out - 1) * s + keff - in;
    return total > 0 ? total - total / 2 : 0;
}

static void kc_cuda_conv_geom(const kc_backend_call *call, const kc_conv_attrs *a, kcu_geom *g)
{
    const kc_shape *in = &call->in_shape[0], *out = &call->out_shape[0];
    int sp = a->spatial;
    memset(g, 0, sizeof *g);
    g->n = kc_cuda_dim(in, 0);
    g->c = kc_cuda_dim(in, in->rank - 1);
    g->f = kc_cuda_dim(out, out->rank - 1);
    g->dm = a->depth_multiplier;
    kc_cuda_spatial(in, sp, g->in);
    kc_cuda_spatial(out, sp, g->out);
    for (int i = 0; i < 3; i++) {
        int axis = i - (3 - sp);
        g->k[i] = axis >= 0 ? a->kernel[axis] : 1;
        g->s[i] = axis >= 0 ? a->strides[axis] : 1;
        g->d[i] = axis >= 0 ? a->dilation[axis] : 1;
        if (a->kind == KC_CONV_TRANSPOSE) {
            /* What the forward conv of `out` would pad (conv2d_transpose). */
            int64_t keff = (g->k[i] - 1) * g->d[i] + 1;
            int64_t total = (g->in[i] - 1) * g->s[i] + keff - g->out[i];
            g->pad[i] = a->padding == 1 && total > 0 ? total / 2 : 0;
        } else {
            g->pad[i] = axis >= 0 ? kc_cuda_pad_before(g->in[i], g->out[i], g->k[i], g->s[i],
                                                       g->d[i], a->padding)
                                  : 0;
        }
    }
}

static size_t kc_cuda_align(size_t n) { return (n + 255) & ~(size_t)255; }

/* A 1x1, stride-1, ungrouped convolution is one matrix product over the
 * pixels: (N*H*W x C) . (C x F), the HWIO weights being that C x F matrix
 * already. On cuBLAS it needs no weight transpose and no workspace, and
 * its host cost is a few microseconds where cuDNN's legacy call took
 * 40-200 on an H200, whose batch-1 runs the host's enqueueing bounds.
 * KC_CUDA_GEMM_1X1=0 keeps them on cuDNN. */
static int kc_cuda_conv_is_gemm(const kc_backend *b, const kcu_geom *g, const kc_conv_attrs *a)
{
    if (!b->gemm_1x1 || a->kind != KC_CONV_PLAIN || a->groups != 1)
        return 0;
    for (int i = 0; i < 3; i++)
        if (g->k[i] != 1 || g->s[i] != 1 || g->pad[i] != 0 || g->in[i] != g->out[i])
            return 0;
    return 1;
}

/* A strided 1x1 convolution without padding (ResNet's downsampling
 * layers) is the same product over its input subsampled into the
 * workspace (kcu_subsample): on the H200 at batch 32 cuDNN's NHWC kernels
 * took 0.11-0.30 ms on ResNet50's six, the subsample and the product
 * together 0.06-0.19.
 * The bytes of that subsample, or 0 when the layer is not one. */
static size_t kc_cuda_subsample_bytes(const kc_backend *b, const kcu_geom *g,
                                      const kc_conv_attrs *a)
{
    if (!b->gemm_1x1 || a->kind != KC_CONV_PLAIN || a->groups != 1)
        return 0;
    int strided = 0;
    for (int i = 0; i < 3; i++) {
        if (g->k[i] != 1 || g->pad[i] != 0 || (g->out[i] - 1) * g->s[i] >= g->in[i])
            return 0;
        strided |= g->s[i] != 1;
    }
    if (!strided)
        return 0;
    return kc_cuda_align((size_t)(g->n * g->out[0] * g->out[1] * g->out[2] * g->c) *
                         sizeof(float));
}

/* ------------------------------------------------------- cuDNN conv plan */

#define KC_CUDA_PLAN_TAG 0x6b63636eu /* "kccn" */

typedef struct kc_cuda_conv_plan {
    unsigned tag;
    kc_shape in_shape, out_shape;
    size_t cap;                         /* algorithm workspace cap it was planned for */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnConvolutionFwdAlgo_t algo;
    size_t algo_bytes;
    int explicit_pad;                   /* asymmetric padding done by kcu_pad */
    int nchw;                           /* run in NCHW (kc_cuda_use_nchw): xd/yd/wd
                                           are NCHW, xd_nhwc/yd_nhwc the layer's own */
    cudnnTensorDescriptor_t xd_nhwc, yd_nhwc;
    int use_direct;                     /* cuDNN declined at run: kcu_conv_direct */
    kcu_geom pad_geom;                  /* input -> padded input */
    int64_t fk, rs, cg;                 /* filter K, R*S, C per group */
    size_t off_w, off_pad, off_xt, off_yt, off_algo, total;
} kc_cuda_conv_plan;

static void kc_cuda_plan_free(kc_cuda_conv_plan *p)
{
    if (!p)
        return;
    if (p->xd)
        cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd)
        cudnnDestroyTensorDescriptor(p->yd);
    if (p->wd)
        cudnnDestroyFilterDescriptor(p->wd);
    if (p->cd)
        cudnnDestroyConvolutionDescriptor(p->cd);
    if (p->xd_nhwc)
        cudnnDestroyTensorDescriptor(p->xd_nhwc);
    if (p->yd_nhwc)
        cudnnDestroyTensorDescriptor(p->yd_nhwc);
    free(p);
}

void kc_cuda_state_free(kc_backend *b, void *state)
{
    (void)b;
    kc_cuda_conv_plan *p = state;
    if (p && p->tag == KC_CUDA_PLAN_TAG)
        kc_cuda_plan_free(p);
}

static int kc_cuda_shape_eq(const kc_shape *a, const kc_shape *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    return 1;
}

static int kc_cuda_fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

/* cuDNN's FP32 (FMA) kernels for 3x3 convolutions are faster on NCHW
 * tensors than on NHWC, enough to pay for turning the layer's input and
 * output around (cudnnTransformTensor) and its weights to KCRS. H200,
 * cuDNN 9.19, ResNet50's shapes (tools/bench/cudnn_layouts.c, 12-04), ms
 * per call NHWC -> NCHW + both transforms, two runs: batch 32 56x56x64
 * 0.32-0.36 -> 0.20-0.22, 28x28x128 0.34 -> 0.17, 14x14x256 0.34-0.40 ->
 * 0.16-0.19, 7x7x512 0.44-0.47 -> 0.16-0.17; batch 1 14x14x256
 * 0.133-0.152 -> 0.110-0.142, 7x7x512 0.199-0.207 -> 0.145-0.150, but
 * 28x28x128 0.083 -> 0.084-0.097 and 56x56x64 level. Hence: 3x3, stride
 * 1, ungrouped, undilated, symmetric padding, and 8+ images or 256+
 * input channels. The whole ResNet50 run: batch 32 0.371 -> 0.295 ms an
 * image, batch 1 2.51-2.61 -> 2.19-2.21 (--stats). Its cost is
 * workspace: 54 MiB at batch 1 where NHWC took 18, which a tight budget
 * caps (sched.c). KC_CUDA_NCHW=0: never; =1: every such layer. */
static int kc_cuda_use_nchw(const kc_backend *b, const kcu_geom *g, const kc_conv_attrs *a,
                            int explicit_pad)
{
    if (b->conv_nchw == 0 || explicit_pad || a->groups != 1 || a->spatial != 2)
        return 0;
    if (g->k[0] != 1 || g->k[1] != 3 || g->k[2] != 3)
        return 0;
    for (int i = 1; i < 3; i++)
        if (g->s[i] != 1 || g->d[i] != 1)
            return 0;
    return b->conv_nchw == 1 || g->n >= 8 || g->c >= 256;
}

/* The algorithm an NCHW plan tries first: in the same measurements cuDNN's
 * fastest (by timing, cudnnFindConvolutionForwardAlgorithmEx) was the FFT
 * on tiles on 56x56 and 28x28 images and the non-fused Winograd on 14x14
 * and 7x7, at batch 1 and 32 alike. Chosen by rule, not timed: the same
 * algorithm (and rounding) every run. */
static cudnnConvolutionFwdAlgo_t kc_cuda_nchw_algo(const kcu_geom *g)
{
    return g->out[1] * g->out[2] <= 14 * 14 ? CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED
                                             : CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING;
}

static kc_status kc_cuda_plan_build(kc_backend *b, const kc_backend_call *call, size_t cap,
                                    int allow_nchw, kc_cuda_conv_plan *p)
{
    const kc_conv_attrs *a = call->layer->attrs;
    kcu_geom g;
    kc_cuda_conv_geom(call, a, &g);
    p->in_shape = call->in_shape[0];
    p->out_shape = call->out_shape[0];
    p->cap = cap;
    int64_t groups = a->groups, before[3] = {0}, after[3] = {0};
    if (g.c % groups || g.f % groups)
        return kc_cuda_msg(b, KC_ERR_SHAPE, "groups %lld do not divide %lld -> %lld channels",
                           (long long)groups, (long long)g.c, (long long)g.f);
    for (int i = 1; i < 3; i++) {
        int used = i >= 3 - a->spatial;
        before[i] = used ? g.pad[i] : 0;
        after[i] = used ? kc_cuda_pad_after(g.in[i], g.out[i], g.k[i], g.s[i], g.d[i],
                                            a->padding)
                        : 0;
    }
    p->explicit_pad = before[1] != after[1] || before[2] != after[2];
    int64_t h = g.in[1], w = g.in[2];
    if (p->explicit_pad) {
        h += before[1] + after[1];
        w += before[2] + after[2];
        memset(&p->pad_geom, 0, sizeof p->pad_geom);
        p->pad_geom.n = g.n;
        p->pad_geom.c = g.c;
        p->pad_geom.in[0] = p->pad_geom.out[0] = 1;
        p->pad_geom.in[1] = g.in[1];
        p->pad_geom.in[2] = g.in[2];
        p->pad_geom.out[1] = h;
        p->pad_geom.out[2] = w;
        p->pad_geom.pad[1] = before[1];
        p->pad_geom.pad[2] = before[2];
    }
    p->fk = g.f;
    p->rs = g.k[1] * g.k[2];
    p->cg = g.c / groups;
    int64_t dims[] = {g.n, g.c, h, w, g.f, g.out[1], g.out[2], g.k[1], g.k[2], groups};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (!kc_cuda_fits_int(dims[i]))
            return kc_cuda_msg(b, KC_ERR_LIMIT, "convolution dimension %lld beyond cuDNN's int",
                               (long long)dims[i]);
    int pad_h = p->explicit_pad ? 0 : (int)before[1], pad_w = p->explicit_pad ? 0 : (int)before[2];
    p->nchw = allow_nchw && kc_cuda_use_nchw(b, &g, a, p->explicit_pad);
    cudnnTensorFormat_t fmt = p->nchw ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;

    KC_DNN(b, cudnnCreateTensorDescriptor(&p->xd));
    KC_DNN(b, cudnnCreateTensorDescriptor(&p->yd));
    KC_DNN(b, cudnnCreateFilterDescriptor(&p->wd));
    KC_DNN(b, cudnnCreateConvolutionDescriptor(&p->cd));
    KC_DNN(b, cudnnSetTensor4dDescriptor(p->xd, fmt, CUDNN_DATA_FLOAT, (int)g.n, (int)g.c, (int)h,
                                         (int)w));
    KC_DNN(b, cudnnSetFilter4dDescriptor(p->wd, CUDNN_DATA_FLOAT, fmt, (int)g.f, (int)p->cg,
                                         (int)g.k[1], (int)g.k[2]));
    KC_DNN(b, cudnnSetConvolution2dDescriptor(p->cd, pad_h, pad_w, (int)g.s[1], (int)g.s[2],
                                              (int)g.d[1], (int)g.d[2], CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT));
    KC_DNN(b, cudnnSetConvolutionGroupCount(p->cd, (int)groups));
    /* FMA only: no TF32 tensor-core math for float32. */
    KC_DNN(b, cudnnSetConvolutionMathType(p->cd, CUDNN_FMA_MATH));
    int on, oc, oh, ow;
    KC_DNN(b, cudnnGetConvolution2dForwardOutputDim(p->cd, p->xd, p->wd, &on, &oc, &oh, &ow));
    if (on != g.n || oc != g.f || oh != g.out[1] || ow != g.out[2])
        return kc_cuda_msg(b, KC_ERR_SHAPE,
                           "cuDNN convolution gives %dx%dx%dx%d, the layer expects "
                           "%lldx%lldx%lldx%lld",
                           on, oh, ow, oc, (long long)g.n, (long long)g.out[1],
                           (long long)g.out[2], (long long)g.f);
    KC_DNN(b, cudnnSetTensor4dDescriptor(p->yd, fmt, CUDNN_DATA_FLOAT, on, oc, oh, ow));
    if (p->nchw) {
        KC_DNN(b, cudnnCreateTensorDescriptor(&p->xd_nhwc));
        KC_DNN(b, cudnnCreateTensorDescriptor(&p->yd_nhwc));
        KC_DNN(b, cudnnSetTensor4dDescriptor(p->xd_nhwc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT,
                                             (int)g.n, (int)g.c, (int)h, (int)w));
        KC_DNN(b, cudnnSetTensor4dDescriptor(p->yd_nhwc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, on,
                                             oc, oh, ow));
    }

    /* The fastest deterministic FMA algorithm within the cap: by cuDNN's
     * heuristics (no benchmarking: the same choice every run), or with
     * KC_CUDA_CONV_ALGO=find by timing each once on this GPU. */
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0, found = 0;
    if (p->nchw && !b->conv_find) {
        size_t bytes = 0;
        cudnnConvolutionFwdAlgo_t algo = kc_cuda_nchw_algo(&g);
        if (cudnnGetConvolutionForwardWorkspaceSize(b->cudnn, p->xd, p->wd, p->cd, p->yd, algo,
                                                    &bytes) == CUDNN_STATUS_SUCCESS &&
            bytes <= cap) {
            p->algo = algo;
            p->algo_bytes = bytes;
            found = 1;
        }
    }
    if (!found && b->conv_find)
        KC_DNN(b, cudnnFindConvolutionForwardAlgorithm(b->cudnn, p->xd, p->wd, p->cd, p->yd,
                                                       CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                       &returned, perf));
    else if (!found)
        KC_DNN(b, cudnnGetConvolutionForwardAlgorithm_v7(b->cudnn, p->xd, p->wd, p->cd, p->yd,
                                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                         &returned, perf));
    for (int i = 0; i < returned && !found; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC ||
            perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
            perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION || perf[i].memory > cap)
            continue;
        size_t bytes = 0;
        if (cudnnGetConvolutionForwardWorkspaceSize(b->cudnn, p->xd, p->wd, p->cd, p->yd,
                                                    perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS ||
            bytes > cap)
            continue;
        p->algo = perf[i].algo;
        p->algo_bytes = bytes;
        found = 1;
    }
    if (!found) {
        p->algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM; /* needs no workspace */
        KC_DNN(b, cudnnGetConvolutionForwardWorkspaceSize(b->cudnn, p->xd, p->wd, p->cd, p->yd,
                                                          p->algo, &p->algo_bytes));
    }
    p->off_w = 0;
    p->off_pad = kc_cuda_align((size_t)(p->fk * p->rs * p->cg) * sizeof(float));
    p->off_xt = p->off_pad;
    if (p->explicit_pad)
        p->off_xt += kc_cuda_align((size_t)(g.n * h * w * g.c) * sizeof(float));
    p->off_yt = p->off_xt;
    if (p->nchw)
        p->off_yt += kc_cuda_align((size_t)(g.n * h * w * g.c) * sizeof(float));
    p->off_algo = p->off_yt;
    if (p->nchw)
        p->off_algo += kc_cuda_align((size_t)on * oc * oh * ow * sizeof(float));
    p->total = p->off_algo + kc_cuda_align(p->algo_bytes);
    return KC_OK;
}

/* The node's plan, reused from *call->state when it matches the shapes
 * and fits `avail` bytes of workspace (SIZE_MAX: any). *owned is set when
 * the caller must free it (no state slot). */
static kc_status kc_cuda_plan_get(kc_backend *b, const kc_backend_call *call, size_t avail,
                                  kc_cuda_conv_plan **out, int *owned)
{
    *out = NULL;
    *owned = 0;
    kc_cuda_conv_plan *p = call->state ? *call->state : NULL;
    if (p && p->tag == KC_CUDA_PLAN_TAG && kc_cuda_shape_eq(&p->in_shape, &call->in_shape[0]) &&
        kc_cuda_shape_eq(&p->out_shape, &call->out_shape[0]) && p->total <= avail) {
        *out = p;
        return KC_OK;
    }
    size_t cap = KC_CUDA_CONV_WS_CAP;
    int allow_nchw = 1;
    for (int attempt = 0; attempt < 3; attempt++) {
        kc_cuda_conv_plan *np = calloc(1, sizeof *np);
        if (!np)
            return kc_cuda_msg(b, KC_ERR_NOMEM, "out of memory for a convolution plan");
        np->tag = KC_CUDA_PLAN_TAG;
        kc_status st = kc_cuda_plan_build(b, call, cap, allow_nchw, np);
        if (st == KC_ERR_NOMEM) {
            kc_cuda_plan_free(np);
            return st;
        }
        if (st != KC_OK) {
            /* cuDNN declines this configuration: remember to use the
             * direct kernel, which needs no workspace. */
            np->use_direct = 1;
            np->total = 0;
        }
        if (b->verbose && !np->use_direct)
            fprintf(stderr, "cuda: %s: cuDNN algorithm %d%s, workspace %zu bytes%s\n",
                    call->layer->name ? call->layer->name : "?", (int)np->algo,
                    np->nchw ? " on NCHW" : "", np->algo_bytes, b->conv_find ? " (timed)" : "");
        if (np->total <= avail || attempt == 2) {
            if (call->state) {
                kc_cuda_state_free(b, *call->state);
                *call->state = np;
            } else {
                *owned = 1;
            }
            *out = np;
            return KC_OK;
        }
        /* Too big for the workspace we were given: plan again within it,
         * in NHWC when the NCHW copies alone do not fit. */
        size_t fixed = np->off_algo;
        if (np->nchw && fixed > avail) {
            allow_nchw = 0;
            fixed = np->off_xt;
        }
        cap = avail > fixed ? avail - fixed : 0;
        kc_cuda_plan_free(np);
    }
    return KC_OK; /* not reached */
}

/* ------------------------------------------------------------- workspace */

static int64_t kc_cuda_separable_mid(const kc_backend_call *call, const kc_conv_attrs *a)
{
    kcu_geom g;
    kc_cuda_conv_geom(call, a, &g);
    return g.n * g.out[0] * g.out[1] * g.out[2] * g.c * a->depth_multiplier;
}

size_t kc_cuda_workspace_bytes(kc_backend *b, const kc_backend_call *call)
{
    if (!b || !call || !call->layer || call->n_in < 1 || call->n_out < 1 || !call->in_shape ||
        !call->out_shape ||
        kc_cuda_family_of(call->layer) != KCF_CONV || !call->layer->attrs)
        return 0;
    const kc_conv_attrs *a = call->layer->attrs;
    if (a->kind == KC_CONV_SEPARABLE)
        return kc_cuda_align((size_t)kc_cuda_separable_mid(call, a) * sizeof(float));
    if (a->kind != KC_CONV_PLAIN)
        return 0;
    kcu_geom g;
    kc_cuda_conv_geom(call, a, &g);
    if (kc_cuda_conv_is_gemm(b, &g, a))
        return 0;
    size_t subsample = kc_cuda_subsample_bytes(b, &g, a);
    if (subsample && (!call->workspace_size || subsample <= call->workspace_size))
        return subsample; /* else within the host's cap on cuDNN */
    if (cudaSetDevice(b->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    kc_cuda_conv_plan *p;
    int owned;
    /* Where cuDNN declines, the node runs on the direct kernel (no
     * workspace). */
    b->quiet = 1;
    kc_status st =
        kc_cuda_plan_get(b, call, call->workspace_size ? call->workspace_size : SIZE_MAX, &p,
                         &owned);
    b->quiet = 0;
    if (st != KC_OK || !p)
        return 0;
    size_t total = p->total;
    if (owned)
        kc_cuda_plan_free(p);
    return total;
}

/* ------------------------------------------------------------------ ops */

static const float *kc_cuda_w(const kc_backend_call *call, int i)
{
    if (!call->w || i < 0 || i >= call->n_w)
        return NULL;
    return call->w[i];
}

static kc_status kc_cuda_copy(kc_backend *b, const kc_backend_call *call)
{
    size_t bytes = (size_t)kc_cuda_count(&call->out_shape[0]) * sizeof(float);
    if (call->out[0] != call->in[0] && bytes)
        KC_CU(b, cudaMemcpyAsync(call->out[0], call->in[0], bytes, cudaMemcpyDeviceToDevice,
                                 b->compute));
    return KC_OK;
}

/* Row-major C(m x n) = A(m x k) · B(k x n), as column-major C^T = B^T A^T. */
static kc_status kc_cuda_gemm(kc_backend *b, int64_t m, int64_t n, int64_t k, const float *a,
                              const float *bm, float *c)
{
    if (m == 0 || n == 0)
        return KC_OK;
    if (k == 0) {
        KC_CU(b, cudaMemsetAsync(c, 0, (size_t)(m * n) * sizeof(float), b->compute));
        return KC_OK;
    }
    if (!kc_cuda_fits_int(m) || !kc_cuda_fits_int(n) || !kc_cuda_fits_int(k))
        return kc_cuda_msg(b, KC_ERR_LIMIT, "matrix product %lldx%lldx%lld beyond cuBLAS's int",
                           (long long)m, (long long)n, (long long)k);
    const float one = 1.0f, zero = 0.0f;
    KC_BLAS(b, cublasSgemm(b->cublas, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)m, (int)k, &one, bm,
                           (int)n, a, (int)k, &zero, c, (int)n));
    return KC_OK;
}

static kc_status kc_cuda_dense(kc_backend *b, const kc_backend_call *call)
{
    const kc_dense_attrs *a = call->layer->attrs;
    const kc_shape *in = &call->in_shape[0], *out = &call->out_shape[0];
    int64_t k = kc_cuda_dim(in, in->rank - 1);
    int64_t m = kc_cuda_count(in) / (k ? k : 1);
    int64_t n = kc_cuda_dim(out, out->rank - 1);
    KC_TRY(kc_cuda_gemm(b, m, n, k, call->in[0], kc_cuda_w(call, 0), call->out[0]));
    return kc_cuda_activate(b, call->out[0], call->out[0], a->use_bias ? kc_cuda_w(call, 1) : NULL,
                            m * n, n, a->activation, call->keras_major);
}

/* The direct kernel: any groups / padding, no workspace, slower. */
static kc_status kc_cuda_conv_direct(kc_backend *b, const kc_backend_call *call,
                                     const kc_conv_attrs *a)
{
    kcu_geom g;
    kc_cuda_conv_geom(call, a, &g);
    KC_KER(b, kcu_conv_direct(call->in[0], kc_cuda_w(call, 0),
                              a->use_bias ? kc_cuda_w(call, 1) : NULL, call->out[0], g, a->groups,
                              b->compute));
    return kc_cuda_activate(b, call->out[0], call->out[0], NULL,
                            kc_cuda_count(&call->out_shape[0]), g.f, a->activation,
                            call->keras_major);
}

/* The 1x1 convolution as that product, then bias and activation. */
static kc_status kc_cuda_conv_gemm(kc_backend *b, const kc_backend_call *call,
                                   const kc_conv_attrs *a, const kcu_geom *g)
{
    int64_t rows = g->n * g->out[0] * g->out[1] * g->out[2];
    KC_TRY(kc_cuda_gemm(b, rows, g->f, g->c, call->in[0], kc_cuda_w(call, 0), call->out[0]));
    return kc_cuda_activate(b, call->out[0], call->out[0], a->use_bias ? kc_cuda_w(call, 1) : NULL,
                            rows * g->f, g->f, a->activation, call->keras_major);
}

/* The strided 1x1 convolution as a product over its subsampled input. */
static kc_status kc_cuda_conv_subsampled(kc_backend *b, const kc_backend_call *call,
                                         const kc_conv_attrs *a, const kcu_geom *g)
{
    float *sub = call->workspace;
    KC_KER(b, kcu_subsample(call->in[0], sub, *g, b->compute));
    int64_t rows = g->n * g->out[0] * g->out[1] * g->out[2];
    KC_TRY(kc_cuda_gemm(b, rows, g->f, g->c, sub, kc_cuda_w(call, 0), call->out[0]));
    return kc_cuda_activate(b, call->out[0], call->out[0], a->use_bias ? kc_cuda_w(call, 1) : NULL,
                            rows * g->f, g->f, a->activation, call->keras_major);
}

/* Plain and grouped convolutions on cuDNN: weights HWIO -> KRSC into the
 * workspace, asymmetric ("same" with an odd total, causal) padding made
 * explicit into the workspace, then cudnnConvolutionForward, then bias and
 * activation in one kernel. Configurations cuDNN declines (or a workspace
 * smaller than the plan) run on the direct kernel instead. */
static kc_status kc_cuda_conv_cudnn(kc_backend *b, const kc_backend_call *call,
                                    const kc_conv_attrs *a)
{
    kc_cuda_conv_plan *p = NULL;
    int owned = 0;
    b->quiet = 1;
    kc_status st = kc_cuda_plan_get(b, call, call->workspace_size, &p, &owned);
    b->quiet = 0;
    if (st == KC_ERR_NOMEM)
        return kc_cuda_msg(b, st, "out of memory for a convolution plan");
    if (st != KC_OK || !p || p->use_direct || p->total > call->workspace_size ||
        (p->total && !call->workspace)) {
        if (owned)
            kc_cuda_plan_free(p);
        return kc_cuda_conv_direct(b, call, a);
    }
    char *ws = call->workspace;
    float *wk = (float *)(ws + p->off_w), *y = call->out[0];
    const float *x = call->in[0];
    const float one = 1.0f, zero = 0.0f;
    cudaError_t err = p->nchw
                          ? kcu_hwio_to_kcrs(kc_cuda_w(call, 0), wk, p->rs, p->cg, p->fk,
                                             b->compute)
                          : kcu_hwio_to_krsc(kc_cuda_w(call, 0), wk, p->rs, p->cg, p->fk,
                                             b->compute);
    if (err != cudaSuccess) {
        st = kc_cuda_fail_rt(b, err, p->nchw ? "kcu_hwio_to_kcrs" : "kcu_hwio_to_krsc");
        goto done;
    }
    if (p->nchw) {
        float *xt = (float *)(ws + p->off_xt);
        cudnnStatus_t ts = cudnnTransformTensor(b->cudnn, &one, p->xd_nhwc, x, &zero, p->xd, xt);
        if (ts != CUDNN_STATUS_SUCCESS) {
            st = kc_cuda_fail_dnn(b, ts, "cudnnTransformTensor (NHWC -> NCHW)");
            goto done;
        }
        x = xt;
        y = (float *)(ws + p->off_yt);
    }
    if (p->explicit_pad) {
        float *xp = (float *)(ws + p->off_pad);
        err = kcu_pad(x, xp, p->pad_geom, b->compute);
        if (err != cudaSuccess) {
            st = kc_cuda_fail_rt(b, err, "kcu_pad");
            goto done;
        }
        x = xp;
    }
    double t0 = b->verbose ? kc_cuda_now() : 0;
    cudnnStatus_t ds = cudnnConvolutionForward(b->cudnn, &one, p->xd, x, p->wd, wk, p->cd,
                                               p->algo, p->algo_bytes ? ws + p->off_algo : NULL,
                                               p->algo_bytes, &zero, p->yd, y);
    if (b->verbose) {
        b->dnn_host_s += kc_cuda_now() - t0;
        b->dnn_calls++;
    }
    if (ds == CUDNN_STATUS_NOT_SUPPORTED || ds == CUDNN_STATUS_BAD_PARAM) {
        p->use_direct = 1; /* remembered in the node's state */
        if (owned)
            kc_cuda_plan_free(p);
        return kc_cuda_conv_direct(b, call, a);
    }
    if (ds != CUDNN_STATUS_SUCCESS) {
        st = kc_cuda_fail_dnn(b, ds, "cudnnConvolutionForward");
        goto done;
    }
    if (p->nchw) {
        ds = cudnnTransformTensor(b->cudnn, &one, p->yd, y, &zero, p->yd_nhwc, call->out[0]);
        if (ds != CUDNN_STATUS_SUCCESS) {
            st = kc_cuda_fail_dnn(b, ds, "cudnnTransformTensor (NCHW -> NHWC)");
            goto done;
        }
    }
    st = kc_cuda_activate(b, call->out[0], call->out[0], a->use_bias ? kc_cuda_w(call, 1) : NULL,
                          kc_cuda_count(&call->out_shape[0]), p->fk, a->activation,
                          call->keras_major);
done:
    if (owned)
        kc_cuda_plan_free(p);
    return st;
}

static kc_status kc_cuda_conv(kc_backend *b, const kc_backend_call *call)
{
    const kc_conv_attrs *a = call->layer->attrs;
    kcu_geom g;
    kc_cuda_conv_geom(call, a, &g);
    int64_t n_out = kc_cuda_count(&call->out_shape[0]);
    switch (a->kind) {
    case KC_CONV_PLAIN: {
        if (kc_cuda_conv_is_gemm(b, &g, a))
            return kc_cuda_conv_gemm(b, call, a, &g);
        size_t subsample = kc_cuda_subsample_bytes(b, &g, a);
        if (subsample && call->workspace && call->workspace_size >= subsample)
            return kc_cuda_conv_subsampled(b, call, a, &g);
        return kc_cuda_conv_cudnn(b, call, a);
    }
    case KC_CONV_DEPTHWISE:
        KC_KER(b, kcu_depthwise(call->in[0], kc_cuda_w(call, 0),
                                a->use_bias ? kc_cuda_w(call, 1) : NULL, call->out[0], g,
                                b->compute));
        return kc_cuda_activate(b, call->out[0], call->out[0], NULL, n_out, g.f, a->activation,
                                call->keras_major);
    case KC_CONV_SEPARABLE: {
        size_t need = (size_t)kc_cuda_separable_mid(call, a) * sizeof(float);
        if (need && (!call->workspace || call->workspace_size < need))
            return kc_cuda_msg(b, KC_ERR_NOMEM,
                               "separable convolution needs %zu bytes of workspace, the call "
                               "has %zu",
                               need, call->workspace ? call->workspace_size : 0);
        float *mid = call->workspace;
        int64_t mid_c = g.c * a->depth_multiplier;
        int64_t rows = g.n * g.out[0] * g.out[1] * g.out[2];
        KC_KER(b, kcu_depthwise(call->in[0], kc_cuda_w(call, 0), NULL, mid, g, b->compute));
        KC_TRY(kc_cuda_gemm(b, rows, g.f, mid_c, mid, kc_cuda_w(call, 1), call->out[0]));
        return kc_cuda_activate(b, call->out[0], call->out[0],
                                a->use_bias ? kc_cuda_w(call, 2) : NULL, rows * g.f, g.f,
                                a->activation, call->keras_major);
    }
    case KC_CONV_TRANSPOSE:
        KC_KER(b, kcu_conv_transpose(call->in[0], kc_cuda_w(call, 0),
                                     a->use_bias ? kc_cuda_w(call, 1) : NULL, call->out[0], g,
                                     b->compute));
        return kc_cuda_activate(b, call->out[0], call->out[0], NULL, n_out, g.f, a->activation,
                                call->keras_major);
    }
    return kc_cuda_msg(b, KC_ERR_UNSUPPORTED, "unknown convolution kind");
}

/* outer x len x inner around one axis. */
static void kc_cuda_axis_view(const kc_shape *s, int axis, int64_t *outer, int64_t *len,
                              int64_t *inner)
{
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < axis; i++)
        *outer *= kc_cuda_dim(s, i);
    *len = kc_cuda_dim(s, axis);
    for (int i = axis + 1; i < s->rank; i++)
        *inner *= kc_cuda_dim(s, i);
}

static kc_status kc_cuda_act_layer(kc_backend *b, const kc_backend_call *call)
{
    const kc_act_layer_attrs *a = call->layer->attrs;
    const kc_shape *s = &call->in_shape[0];
    int64_t n = kc_cuda_count(s);
    const float *x = call->in[0];
    float *y = call->out[0];
    switch (a->kind) {
    case KC_ACT_RELU:
        KC_KER(b, kcu_bias_act(x, y, NULL, n, 1, KCU_ACT_RELU_EX, (float)a->max_value,
                               (float)a->negative_slope, (float)a->threshold, b->compute));
        return KC_OK;
    case KC_ACT_LEAKY:
        KC_KER(b, kcu_bias_act(x, y, NULL, n, 1, KCU_ACT_LEAKY, (float)a->negative_slope, 0, 0,
                               b->compute));
        return KC_OK;
    case KC_ACT_ELU:
        KC_KER(b, kcu_bias_act(x, y, NULL, n, 1, KCU_ACT_ELU_ALPHA, (float)a->alpha, 0, 0,
                               b->compute));
        return KC_OK;
    case KC_ACT_THRESHOLDED:
        KC_KER(b, kcu_bias_act(x, y, NULL, n, 1, KCU_ACT_THRESHOLDED, (float)a->alpha, 0, 0,
                               b->compute));
        return KC_OK;
    case KC_ACT_SOFTMAX: {
        if (a->n_axes != 1)
            return kc_cuda_msg(b, KC_ERR_UNSUPPORTED, "Softmax over several axes");
        int axis = a->axes[0] < 0 ? a->axes[0] + s->rank : a->axes[0];
        if (axis < 0 || axis >= s->rank)
            return kc_cuda_msg(b, KC_ERR_SHAPE, "Softmax axis %d out of range", a->axes[0]);
        int64_t outer, len, inner;
        kc_cuda_axis_view(s, axis, &outer, &len, &inner);
        if (x != y && n)
            KC_CU(b, cudaMemcpyAsync(y, x, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice,
                                     b->compute));
        KC_KER(b, kcu_softmax(y, outer, len, inner, 0, b->compute));
        return KC_OK;
    }
    default: break;
    }
    return kc_cuda_msg(b, KC_ERR_UNSUPPORTED, "activation layer kind %d", (int)a->kind);
}

static kc_status kc_cuda_batchnorm(kc_backend *b, const kc_backend_call *call)
{
    const kc_norm_attrs *a = call->layer->attrs;
    const kc_shape *s = &call->in_shape[0];
    int w = 0;
    const float *gamma = a->scale ? kc_cuda_w(call, w++) : NULL;
    const float *beta = a->center ? kc_cuda_w(call, w++) : NULL;
    const float *mean = kc_cuda_w(call, w++), *var = kc_cuda_w(call, w++);
    if (!mean || !var)
        return kc_cuda_msg(b, KC_ERR_ARG, "BatchNormalization without moving statistics");
    int axis = a->axes[0] < 0 ? a->axes[0] + s->rank : a->axes[0];
    if (axis < 0 || axis >= s->rank)
        return kc_cuda_msg(b, KC_ERR_SHAPE, "BatchNormalization axis %d out of range",
                           a->axes[0]);
    int64_t outer, len, inner;
    kc_cuda_axis_view(s, axis, &outer, &len, &inner);
    KC_KER(b, kcu_batchnorm(call->in[0], call->out[0], gamma, beta, mean, var, outer, len, inner,
                            a->epsilon, b->compute));
    return KC_OK;
}

static kc_status kc_cuda_merge(kc_backend *b, const kc_backend_call *call)
{
    const kc_merge_attrs *a = call->layer->attrs;
    const kc_shape *os = &call->out_shape[0];
    int64_t total = kc_cuda_count(os);
    float *y = call->out[0];
    if (a->kind == KC_MERGE_CONCAT) {
        int axis = a->axis < 0 ? a->axis + os->rank : a->axis;
        if (axis < 0 || axis >= os->rank)
            return kc_cuda_msg(b, KC_ERR_SHAPE, "Concatenate axis %d out of range", a->axis);
        int64_t outer = 1;
        for (int i = 0; i < axis; i++)
            outer *= kc_cuda_dim(os, i);
        if (outer == 0 || total == 0)
            return KC_OK;
        int64_t out_block = total / outer, offset = 0;
        for (int k = 0; k < call->n_in; k++) {
            int64_t block = kc_cuda_count(&call->in_shape[k]) / outer;
            if (block && outer == 1)
                KC_CU(b, cudaMemcpyAsync(y + offset, call->in[k], (size_t)block * sizeof(float),
                                         cudaMemcpyDeviceToDevice, b->compute));
            else if (block)
                KC_CU(b, cudaMemcpy2DAsync(y + offset, (size_t)out_block * sizeof(float),
                                           call->in[k], (size_t)block * sizeof(float),
                                           (size_t)block * sizeof(float), (size_t)outer,
                                           cudaMemcpyDeviceToDevice, b->compute));
            offset += block;
        }
        return KC_OK;
    }
    int op;
    switch (a->kind) {
    case KC_MERGE_ADD:
    case KC_MERGE_AVERAGE: op = KCU_MERGE_ADD; break;
    case KC_MERGE_SUBTRACT: op = KCU_MERGE_SUB; break;
    case KC_MERGE_MULTIPLY: op = KCU_MERGE_MUL; break;
    case KC_MERGE_MAXIMUM: op = KCU_MERGE_MAX; break;
    case KC_MERGE_MINIMUM: op = KCU_MERGE_MIN; break;
    default: return kc_cuda_msg(b, KC_ERR_UNSUPPORTED, "merge kind %d", (int)a->kind);
    }
    if (os->rank > KCU_MAX_RANK)
        return kc_cuda_msg(b, KC_ERR_UNSUPPORTED, "merge of rank %d", os->rank);
    int same = call->n_in >= 2;
    for (int k = 0; k < call->n_in && same; k++)
        same = kc_cuda_shape_eq(&call->in_shape[k], os);
    if (same) {
        /* No broadcast (ResNet's residual Add): one flat pass a pair. */
        KC_KER(b, kcu_merge2(y, call->in[0], call->in[1], total, op, b->compute));
        for (int k = 2; k < call->n_in; k++)
            KC_KER(b, kcu_merge2(y, y, call->in[k], total, op, b->compute));
    }
    for (int k = 0; k < call->n_in && !same; k++) {
        const kc_shape *xs = &call->in_shape[k];
        if (xs->rank > os->rank)
            return kc_cuda_msg(b, KC_ERR_SHAPE, "merge input %d has rank %d > output rank %d",
                               k, xs->rank, os->rank);
        if (k == 0 && call->in[0] == y && kc_cuda_shape_eq(xs, os))
            continue; /* already in place */
        /* Strides of x seen through the output shape (0 on broadcast axes). */
        kcu_bcast v;
        memset(&v, 0, sizeof v);
        v.rank = os->rank;
        int64_t s = 1;
        for (int i = os->rank - 1; i >= 0; i--) {
            int ii = i - (os->rank - xs->rank);
            v.dims[i] = kc_cuda_dim(os, i);
            v.strides[i] = ii < 0 || kc_cuda_dim(xs, ii) == 1 ? 0 : s;
            if (ii >= 0)
                s *= kc_cuda_dim(xs, ii);
        }
        KC_KER(b, kcu_merge(y, call->in[k], total, v, k == 0 ? KCU_MERGE_COPY : op, b->compute));
    }
    if (a->kind == KC_MERGE_AVERAGE)
        KC_KER(b, kcu_bias_act(y, y, NULL, total, 1, KCU_ACT_DIV, (float)call->n_in, 0, 0,
                               b->compute));
    return KC_OK;
}

static kc_status kc_cuda_pool(kc_backend *b, const kc_backend_call *call)
{
    const kc_pool_attrs *a = call->layer->attrs;
    const kc_shape *is = &call->in_shape[0], *os = &call->out_shape[0];
    int is_max = a->kind == KC_POOL_MAX;
    int64_t n = kc_cuda_dim(is, 0), c = kc_cuda_dim(is, is->rank - 1);
    if (a->global) {
        int64_t cells = n * c > 0 ? kc_cuda_count(is) / (n * c) : 0;
        KC_KER(b, kcu_global_pool(call->in[0], call->out[0], n, cells, c, is_max, b->compute));
        return KC_OK;
    }
    kcu_geom g;
    memset(&g, 0, sizeof g);
    g.n = n;
    g.c = g.f = c;
    kc_cuda_spatial(is, a->spatial, g.in);
    kc_cuda_spatial(os, a->spatial, g.out);
    for (int i = 0; i < 3; i++) {
        int axis = i - (3 - a->spatial);
        g.k[i] = axis >= 0 ? a->pool[axis] : 1;
        g.s[i] = axis >= 0 ? a->strides[axis] : 1;
        g.d[i] = 1;
        int64_t total = (g.out[i] - 1) * g.s[i] + g.k[i] - g.in[i];
        g.pad[i] = a->padding && total > 0 ? total / 2 : 0;
    }
    KC_KER(b, kcu_pool(call->in[0], call->out[0], g, is_max, b->compute));
    return KC_OK;
}

static kc_status kc_cuda_pad_crop(kc_backend *b, const kc_backend_call *call, int crop)
{
    const kc_pad_attrs *a = call->layer->attrs;
    const kc_shape *is = &call->in_shape[0], *os = &call->out_shape[0];
    kcu_geom g;
    memset(&g, 0, sizeof g);
    g.n = kc_cuda_dim(is, 0);
    g.c = g.f = kc_cuda_dim(is, is->rank - 1);
    kc_cuda_spatial(is, a->spatial, g.in);
    kc_cuda_spatial(os, a->spatial, g.out);
    for (int i = 0; i < 3; i++) {
        int axis = i - (3 - a->spatial);
        g.pad[i] = axis < 0 ? 0 : crop ? -a->before[axis] : a->before[axis];
    }
    KC_KER(b, kcu_pad(call->in[0], call->out[0], g, b->compute));
    return KC_OK;
}

static kc_status kc_cuda_rescale(kc_backend *b, const kc_backend_call *call)
{
    const kc_rescaling_attrs *a = call->layer->attrs;
    const kc_shape *s = &call->in_shape[0];
    int64_t c = kc_cuda_dim(s, s->rank - 1), n = kc_cuda_count(s);
    if ((a->n_scale != 1 && a->n_scale != c) || (a->n_offset != 1 && a->n_offset != c) ||
        a->n_scale > KCU_RESCALE_MAX || a->n_offset > KCU_RESCALE_MAX)
        return kc_cuda_msg(b, KC_ERR_UNSUPPORTED,
                           "Rescaling with %lld scales / %lld offsets for %lld channels",
                           (long long)a->n_scale, (long long)a->n_offset, (long long)c);
    kcu_rescale r;
    memset(&r, 0, sizeof r);
    r.n_scale = a->n_scale;
    r.n_offset = a->n_offset;
    memcpy(r.scale, a->scale, (size_t)a->n_scale * sizeof(float));
    memcpy(r.offset, a->offset, (size_t)a->n_offset * sizeof(float));
    KC_KER(b, kcu_rescaling(call->in[0], call->out[0], n, c, r, b->compute));
    return KC_OK;
}

kc_status kc_cuda_run(kc_backend *b, const kc_backend_call *call)
{
    if (!call || !call->layer || call->n_in < 1 || call->n_out != 1 || !call->in || !call->out)
        return kc_cuda_msg(b, KC_ERR_ARG, "malformed call");
    const kc_layer *layer = call->layer;
    if (call->in_mask)
        return kc_cuda_msg(b, KC_ERR_UNSUPPORTED, "layer '%s': masked calls run on the CPU",
                           layer->name ? layer->name : "?");
    if (!kc_cuda_supports(b, layer, call->node))
        return kc_cuda_msg(b, KC_ERR_UNSUPPORTED, "layer '%s' (%s) is not supported",
                           layer->name ? layer->name : "?", layer->class_name);
    if (layer->n_weights > 0 && (!call->w || call->n_w < layer->n_weights))
        return kc_cuda_msg(b, KC_ERR_ARG,
                           "layer '%s': %d weights must be passed in device memory (call->w)",
                           layer->name ? layer->name : "?", layer->n_weights);
    for (int i = 0; i < call->n_in; i++)
        if (call->in_shape[i].rank < 1)
            return kc_cuda_msg(b, KC_ERR_SHAPE, "layer '%s': scalar input",
                               layer->name ? layer->name : "?");
    KC_CU(b, cudaSetDevice(b->device));
    switch (kc_cuda_family_of(layer)) {
    case KCF_CONV: return kc_cuda_conv(b, call);
    case KCF_DENSE: return kc_cuda_dense(b, call);
    case KCF_ACTIVATION: {
        const kc_shape *s = &call->out_shape[0];
        return kc_cuda_activate(b, call->in[0], call->out[0], NULL, kc_cuda_count(s),
                                kc_cuda_dim(s, s->rank - 1),
                                ((const kc_activation_attrs *)layer->attrs)->activation,
                                call->keras_major);
    }
    case KCF_ACT_LAYER: return kc_cuda_act_layer(b, call);
    case KCF_BATCHNORM: return kc_cuda_batchnorm(b, call);
    case KCF_MERGE: return kc_cuda_merge(b, call);
    case KCF_POOL: return kc_cuda_pool(b, call);
    case KCF_PAD: return kc_cuda_pad_crop(b, call, 0);
    case KCF_CROP: return kc_cuda_pad_crop(b, call, 1);
    case KCF_COPY: return kc_cuda_copy(b, call);
    case KCF_RESCALE: return kc_cuda_rescale(b, call);
    case KCF_NONE: break;
    }
    return kc_cuda_msg(b, KC_ERR_UNSUPPORTED, "layer '%s' (%s) is not supported",
                       layer->name ? layer->name : "?", layer->class_name);
}
