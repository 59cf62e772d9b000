/* Graph rewrites done once per session, on session-owned copies (the
 * model and its weights are never modified):
 *  - BatchNormalization after a convolution (a separable one's pointwise
 *    kernel, a transposed one's second to last axis) or Dense is folded
 *    into its weights: W'[.., c] = W[.., c] *
 *    s[c], b'[c] = (b[c] - mean[c]) * s[c] + beta[c] with s = gamma /
 *    sqrt(var + eps) — the same inference arithmetic, reassociated;
 *  - a BatchNormalization that no layer before it takes (after a relu)
 *    folds into the Dense or unpadded convolution after it, through
 *    poolings and a Flatten that carry a per-channel affine
 *    (kc_fold_bn_forward);
 *  - an Activation / ReLU layer after a convolution or Dense with a linear
 *    activation becomes that layer's own activation.
 *  - an Add of a convolution's output and an earlier value r (a residual
 *    connection) becomes the convolution writing into r's slot with
 *    `accumulate` set (oneDNN's sum post-op), when nothing reads r after
 *    the convolution; an activation after that Add becomes the
 *    convolution's (applied after the sum, as Keras does after the Add).
 *  - a ZeroPadding whose only reader is a "valid" plain/depthwise
 *    convolution becomes that convolution's own (asymmetric) padding; one
 *    whose only reader is a "valid" max pooling of non-negative values
 *    becomes padding the pooling ignores.
 *  - per plan (kc_fuse_dw_plan): a 3x3 depthwise convolution that alone
 *    reads a 1x1 convolution's output runs inside it (MobileNet's expand
 *    and depthwise layers), when the session runs on the host CPU, the
 *    batch has several images and oneDNN takes the pair. kc_fuse only
 *    finds the pairs (dw_of).
 *  - per plan (kc_fuse_pool_plan): a "same" stride-1 average pooling that
 *    only a 1x1 convolution reads runs after it, inside its kernel
 *    (InceptionV3's branch_pool). kc_fuse only finds the pairs (pool_of).
 *  - per plan (kc_fuse_maxpool_plan, kc_fuse_upsample_plan): a max
 *    pooling inside the stem loop's convolution before it; a 3x3
 *    convolution over a nearest UpSampling2D by 2 run on the upsampling's
 *    input (maxpool_of, upsample_of).
 *  - per plan (kc_fuse_head_plan): a global average pooling and the
 *    Dense after it, run inside the 1x1 convolution before them
 *    (MobileNetV2's classifier at batch 1: head_of, head_dense).
 * The absorbed node then produces nothing: its output is an alias of its
 * input (plan.c gives both one arena slot). KC_FUSE=0 turns this off. */
#include "runtime/fuse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/error.h"
#include "base/mem.h"
#include "base/spill.h"
#include "kernels/dnnl_conv.h"
#include "kernels/stem.h"
#include "kernels/irb.h"
#include "kernels/pw.h"
#include "kernels/upconv.h"
#include "ops/activation.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "runtime/plan.h"
#include "ops/core.h"
#include "ops/merge.h"
#include "ops/norm.h"
#include "ops/op.h"
#include "ops/pool.h"
#include "ops/preprocess.h"
#include "ops/reshape.h"

/* The producing node of value v, or -1. */
static int kc_producer(const kc_graph *g, int v) { return g->values[v].producer; }

/* Number of nodes reading value v (through aliases already made). */
static int kc_readers(const kc_graph *g, int v)
{
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_inputs; j++)
            n += g->nodes[i].inputs[j] == v;
    for (int i = 0; i < g->n_outputs; i++)
        n += g->outputs[i] == v; /* a model output must stay materialised */
    return n;
}

typedef enum { KC_HOST_NONE, KC_HOST_CONV, KC_HOST_DENSE } kc_host_kind;

/* MaxPooling1D-3D / MaxPool1D-2D: windowed max pooling (kc_pool_attrs). */
static int kc_is_maxpool(const kc_layer *l) { return !strncmp(l->class_name, "MaxPool", 7); }

static kc_host_kind kc_host_of(const kc_layer *layer, const char **activation)
{
    const char *c = layer->class_name;
    if (!strcmp(c, "Dense")) {
        *activation = ((const kc_dense_attrs *)layer->attrs)->activation;
        return KC_HOST_DENSE;
    }
    if (!strcmp(c, "Conv1D") || !strcmp(c, "Conv2D") || !strcmp(c, "Conv3D") ||
        !strcmp(c, "Convolution1D") || !strcmp(c, "Convolution2D") ||
        !strcmp(c, "DepthwiseConv2D") || !strcmp(c, "DepthwiseConv1D") ||
        !strcmp(c, "SeparableConv1D") || !strcmp(c, "SeparableConv2D") ||
        !strcmp(c, "SeparableConvolution2D") || !strcmp(c, "Conv1DTranspose") ||
        !strcmp(c, "Conv2DTranspose") || !strcmp(c, "Conv3DTranspose") ||
        !strcmp(c, "Deconvolution2D")) {
        *activation = ((const kc_conv_attrs *)layer->attrs)->activation;
        return KC_HOST_CONV;
    }
    return KC_HOST_NONE;
}

/* A session-owned copy of a host layer whose attrs and weights may be
 * rewritten. */
static kc_layer *kc_fuse_own(kc_fused *f, int node, const kc_graph *g)
{
    if (f->shadow[node])
        return f->shadow[node];
    kc_layer *src = g->nodes[node].layer;
    kc_layer *l = kc_calloc(1, sizeof *l);
    if (!l)
        return NULL;
    *l = *src;
    size_t attrs_size = !strcmp(src->class_name, "Dense")      ? sizeof(kc_dense_attrs)
                        : kc_is_maxpool(src)                      ? sizeof(kc_pool_attrs)
                                                                  : sizeof(kc_conv_attrs);
    l->attrs = kc_calloc(1, attrs_size);
    l->weights = kc_calloc(KC_MAX_WEIGHT_SPECS, sizeof *l->weights);
    if (!l->attrs || !l->weights) {
        free(l->attrs);
        free(l->weights);
        free(l);
        return NULL;
    }
    f->shadow[node] = l; /* owned from here on, freed by kc_fused_free */
    memcpy(l->attrs, src->attrs, attrs_size);
    for (int i = 0; i < src->n_weights; i++) {
        l->weights[i] = src->weights[i];
        if (f->taken && src->n_calls == 1) { /* the only reader from here on */
            src->weights[i].data = NULL;
            ++*f->taken;
            continue;
        }
        int64_t n = kc_shape_count(&src->weights[i].shape);
        l->weights[i].data = kc_calloc((size_t)(n ? n : 1), sizeof(float));
        if (!l->weights[i].data)
            return NULL;
        memcpy(l->weights[i].data, src->weights[i].data, (size_t)n * sizeof(float));
    }
    return l;
}

static int *kc_host_use_bias(kc_layer *l)
{
    if (!strcmp(l->class_name, "Dense"))
        return &((kc_dense_attrs *)l->attrs)->use_bias;
    return &((kc_conv_attrs *)l->attrs)->use_bias;
}

static int *kc_host_accumulate(kc_layer *l)
{
    if (!strcmp(l->class_name, "Dense"))
        return &((kc_dense_attrs *)l->attrs)->accumulate;
    return &((kc_conv_attrs *)l->attrs)->accumulate;
}

static const char **kc_host_activation(kc_layer *l)
{
    if (!strcmp(l->class_name, "Dense"))
        return &((kc_dense_attrs *)l->attrs)->activation;
    return &((kc_conv_attrs *)l->attrs)->activation;
}

/* The weight a BatchNormalization after host layer l scales: the kernel,
 * or a separable layer's pointwise one (its weight 1; 0 is the depthwise
 * kernel, whose channels are the input's). */
static int kc_fold_kernel_index(const kc_layer *l)
{
    if (strcmp(l->class_name, "Dense") != 0 &&
        ((const kc_conv_attrs *)l->attrs)->kind == KC_CONV_SEPARABLE)
        return 1;
    return 0;
}

/* A host's kernel with its output channels (the last axis, c of them)
 * scaled: row by row, in memory order (channel by channel, a stride of c
 * floats, missed the cache on every element of a large kernel: 0.35 s of
 * ResNet50's load). */
static void kc_fold_scale_kernel(kc_weight *kernel, int64_t c, const double *scale)
{
    int64_t kn = kc_shape_count(&kernel->shape);
    for (int64_t row = 0; row < kn; row += c)
        for (int64_t j = 0; j < c && row + j < kn; j++)
            kernel->data[row + j] = (float)(kernel->data[row + j] * scale[j]);
}

/* The same for host l's kernel (weight ki): a transposed convolution's
 * output channels are its kernel's second to last axis ((k..., c, in)):
 * each row of `in` floats scaled by its channel's factor. */
static void kc_fold_scale_host(kc_layer *l, int ki, int64_t c, const double *scale)
{
    kc_weight *kernel = &l->weights[ki];
    if (!strcmp(l->class_name, "Dense") ||
        ((const kc_conv_attrs *)l->attrs)->kind != KC_CONV_TRANSPOSE) {
        kc_fold_scale_kernel(kernel, c, scale);
        return;
    }
    int64_t kn = kc_shape_count(&kernel->shape), in = kernel->shape.dims[kernel->shape.rank - 1];
    for (int64_t row = 0; in > 0 && row * in < kn; row++)
        for (int64_t i = 0; i < in; i++)
            kernel->data[row * in + i] = (float)(kernel->data[row * in + i] * scale[row % c]);
}

/* Node n folded into a neighbour: its output is value `becomes` (the
 * host's output, or its own input where it folded forward), it runs no
 * more, and its arrays are freed where they are the caller's to give. */
static void kc_fold_absorbed(kc_fused *f, const kc_graph *g, int becomes, int n)
{
    kc_layer *b = g->nodes[n].layer;
    f->alias[g->nodes[n].outputs[0]] = becomes;
    f->skip[n] = 1;
    for (int i = 0; f->taken && b->n_calls == 1 && i < b->n_weights; i++) { /* folded */
        kc_wfree(b->weights[i].data);
        b->weights[i].data = NULL;
        ++*f->taken;
    }
    f->n_fused++;
}

/* Host l's bias (weight bi, n floats): a zero one added where it has
 * none, since a fold gives it one. */
static kc_status kc_fold_bias(kc_layer *l, int bi, int64_t n)
{
    int *use_bias = kc_host_use_bias(l);
    if (*use_bias)
        return KC_OK;
    l->weights[bi].data = kc_calloc((size_t)n, sizeof(float));
    if (!l->weights[bi].data)
        return KC_ERR_NOMEM;
    l->weights[bi].shape = (kc_shape){.rank = 1, .dims = {n}};
    l->n_weights = bi + 1;
    *use_bias = 1;
    return KC_OK;
}

/* A BatchNormalization's arrays (gamma and beta NULL where the layer has
 * none) and its epsilon. */
typedef struct kc_bn_arrays {
    const float *gamma, *beta, *mean, *var;
    double epsilon;
} kc_bn_arrays;

static kc_bn_arrays kc_bn_arrays_of(const kc_layer *b)
{
    const kc_norm_attrs *na = b->attrs;
    kc_bn_arrays r = {NULL, NULL, NULL, NULL, na->epsilon};
    int w = 0;
    r.gamma = na->scale ? b->weights[w++].data : NULL;
    r.beta = na->center ? b->weights[w++].data : NULL;
    r.mean = b->weights[w++].data;
    r.var = b->weights[w++].data;
    return r;
}

/* Channel j's scale gamma / sqrt(var + eps), in double. */
static double kc_bn_scale(const kc_bn_arrays *bn, int64_t j)
{
    return (bn->gamma ? bn->gamma[j] : 1.0) / sqrt((double)bn->var[j] + bn->epsilon);
}

/* Fold BN (node bn) into host node h. */
static kc_status kc_fold_bn(kc_fused *f, const kc_graph *g, int h, int bn)
{
    kc_layer *b = g->nodes[bn].layer;
    const kc_norm_attrs *na = b->attrs;
    const kc_shape *out = &g->values[g->nodes[h].outputs[0]].shape;
    if (na->n_axes != 1 || (na->axes[0] != -1 && na->axes[0] != out->rank - 1))
        return KC_OK; /* only the channel (last) axis folds into the kernel */
    kc_layer *l = kc_fuse_own(f, h, g);
    if (!l)
        return KC_ERR_NOMEM;
    kc_bn_arrays w = kc_bn_arrays_of(b);
    int64_t c = out->dims[out->rank - 1];
    /* a separable layer's output channels are its pointwise kernel's:
     * weights (depthwise, pointwise, bias) */
    int ki = kc_fold_kernel_index(l), bi = ki + 1;
    KC_TRY(kc_fold_bias(l, bi, c));
    float *bias = l->weights[bi].data;
    double *scale = kc_calloc((size_t)c, sizeof *scale);
    if (!scale)
        return KC_ERR_NOMEM;
    for (int64_t j = 0; j < c; j++) {
        scale[j] = kc_bn_scale(&w, j);
        bias[j] = (float)((bias[j] - w.mean[j]) * scale[j] + (w.beta ? w.beta[j] : 0.0));
    }
    kc_fold_scale_host(l, ki, c, scale);
    free(scale);
    kc_fold_absorbed(f, g, g->nodes[h].outputs[0], bn);
    return KC_OK;
}

/* Fold LayerScale (node ls: x * gamma over the last axis, ConvNeXt's and
 * CaiT's) into host node h's kernel and bias, as a BatchNormalization's
 * scale folds: one multiplication a run less (ConvNeXtTiny's 18 took 0.8
 * ms of its 34 at batch 1). The products round once more or less than
 * Keras's; nothing else changes. */
static kc_status kc_fold_layer_scale(kc_fused *f, const kc_graph *g, int h, int ls)
{
    kc_layer *s = g->nodes[ls].layer;
    const kc_shape *out = &g->values[g->nodes[h].outputs[0]].shape;
    int64_t c = out->dims[out->rank - 1];
    if (s->n_weights != 1 || !s->weights[0].data || kc_shape_count(&s->weights[0].shape) != c ||
        g->nodes[h].layer->channels_first)
        return KC_OK; /* the last axis must be the kernel's output channels */
    kc_layer *l = kc_fuse_own(f, h, g);
    if (!l)
        return KC_ERR_NOMEM;
    const float *gamma = s->weights[0].data;
    /* in double as kc_fold_bn's scale: a float product is exact there, so
     * the bits of float's multiplication */
    double *scale = kc_calloc((size_t)c, sizeof *scale);
    if (!scale)
        return KC_ERR_NOMEM;
    for (int64_t j = 0; j < c; j++)
        scale[j] = gamma[j];
    int ki = kc_fold_kernel_index(l);
    kc_fold_scale_host(l, ki, c, scale);
    free(scale);
    if (*kc_host_use_bias(l))
        for (int64_t j = 0; j < c; j++)
            l->weights[ki + 1].data[j] *= gamma[j];
    kc_fold_absorbed(f, g, g->nodes[h].outputs[0], ls);
    return KC_OK;
}

/* The activation name an Activation/ReLU layer computes, or NULL. */
static const char *kc_plain_activation(const kc_layer *l)
{
    if (!strcmp(l->class_name, "Activation")) {
        const char *a = ((const kc_activation_attrs *)l->attrs)->activation;
        /* softmax and friends need the last axis, which hosts have too */
        return a;
    }
    if (!strcmp(l->class_name, "ReLU")) {
        const kc_act_layer_attrs *a = l->attrs;
        if (a->negative_slope != 0 || a->threshold != 0)
            return NULL;
        if (a->max_value < 0)
            return "relu";
        if (a->max_value == 6)
            return "relu6";
    }
    return NULL;
}

static int kc_resolve(const kc_fused *f, int v) { return kc_plan_root(f->alias, v); }

/* ------------------------------------------------- residual Add fusion */

static int kc_is_output(const kc_graph *g, int v)
{
    for (int i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == v)
            return 1;
    return 0;
}

/* Check every value stored in root's slot: none is a model output, each
 * was produced before node `before`, and no node other than `except`
 * (and nodes absorbed by fusion) reads one at or after `before`. */
static int kc_slot_free_after(const kc_graph *g, const kc_fused *f, int root, int before,
                              int except)
{
    for (int v = 0; v < g->n_values; v++) {
        if (kc_resolve(f, v) != root)
            continue;
        if (kc_is_output(g, v) || kc_producer(g, v) < 0 || kc_producer(g, v) >= before)
            return 0;
        for (int i = before; i < g->n_nodes; i++) {
            if (i == except || f->skip[i])
                continue;
            for (int j = 0; j < g->nodes[i].n_inputs; j++)
                if (g->nodes[i].inputs[j] == v)
                    return 0;
        }
    }
    return 1;
}

/* Readers (node index >= from) of any value in root's slot, not counting
 * absorbed nodes; *only is the last one found. A model output counts as
 * many readers. */
static int kc_slot_readers(const kc_graph *g, const kc_fused *f, int root, int from, int *only)
{
    int n = 0;
    for (int v = 0; v < g->n_values; v++) {
        if (kc_resolve(f, v) != root)
            continue;
        if (kc_is_output(g, v))
            return 99;
        for (int i = from; i < g->n_nodes; i++) {
            if (f->skip[i])
                continue;
            for (int j = 0; j < g->nodes[i].n_inputs; j++)
                if (g->nodes[i].inputs[j] == v) {
                    n++;
                    *only = i;
                }
        }
    }
    return n;
}

/* The node whose output `v` (resolved) is, when it can take a fused sum:
 * a plain or depthwise convolution or a Dense (a transformer's and
 * ConvNeXt's residuals), channels_last, called once, linear. */
static int kc_sum_host(const kc_graph *g, const kc_fused *f, int v)
{
    int h = kc_producer(g, v);
    const char *act = NULL;
    if (h < 0 || g->nodes[h].n_outputs != 1 || g->nodes[h].layer->n_calls != 1 ||
        g->nodes[h].layer->channels_first)
        return -1;
    kc_host_kind kind = kc_host_of(g->nodes[h].layer, &act);
    kc_layer *l = f->shadow[h] ? f->shadow[h] : g->nodes[h].layer;
    if (kind == KC_HOST_NONE)
        return -1;
    if (kind == KC_HOST_CONV) {
        const kc_conv_attrs *a = l->attrs;
        if (a->kind != KC_CONV_PLAIN && a->kind != KC_CONV_DEPTHWISE)
            return -1;
    }
    return *kc_host_accumulate(l) || strcmp(*kc_host_activation(l), "linear") != 0 ? -1 : h;
}

static int kc_static_shape_equal(const kc_shape *a, const kc_shape *b)
{
    if (a->rank != b->rank || a->rank < 2)
        return 0;
    for (int d = 1; d < a->rank; d++)
        if (a->dims[d] < 0 || a->dims[d] != b->dims[d])
            return 0;
    return 1;
}

/* Whether host-only rewrites may join nodes a and b: both on the same
 * side of the stage's range (kc_fuse's stage), or no stage. */
static int kc_same_stage(const kc_fused *f, int a, int b)
{
    if (f->scope_first < 0)
        return 1;
    int side_a = a < f->scope_first ? 0 : a <= f->scope_last ? 1 : 2;
    int side_b = b < f->scope_first ? 0 : b <= f->scope_last ? 1 : 2;
    return side_a == side_b;
}

/* Fold Rescaling node rs (x * scale, no offset: Keras's Rescaling(1/255)
 * before a model's first convolution) into the one layer that reads it,
 * node h, a plain or depthwise convolution (not grouped) or a Dense: its
 * kernel's input-channel rows take the scale. The zeros a "same"
 * convolution pads with stay zeros, which an offset would not. One pass
 * over the input image less a run; the products round once more or less
 * than Keras's. */
static kc_status kc_fold_rescaling(kc_fused *f, const kc_graph *g, int rs)
{
    const kc_node *n = &g->nodes[rs];
    const kc_rescaling_attrs *ra = n->layer->attrs;
    int h = -1;
    if (n->n_inputs != 1 || n->n_outputs != 1 || n->layer->n_calls != 1 ||
        kc_slot_readers(g, f, kc_resolve(f, n->outputs[0]), rs + 1, &h) != 1 || h < 0 ||
        !kc_same_stage(f, rs, h) || g->nodes[h].n_inputs != 1 ||
        kc_resolve(f, g->nodes[h].inputs[0]) != kc_resolve(f, n->outputs[0]) ||
        g->nodes[h].layer->n_calls != 1)
        return KC_OK;
    for (int64_t i = 0; i < ra->n_offset; i++)
        if (ra->offset[i] != 0.0f)
            return KC_OK;
    const char *act = NULL;
    kc_host_kind kind = kc_host_of(g->nodes[h].layer, &act);
    const kc_shape *in = &g->values[n->outputs[0]].shape;
    int64_t cin = in->dims[in->rank - 1];
    if (kind == KC_HOST_NONE || ra->n_scale < 1 || (ra->n_scale != 1 && ra->n_scale != cin) ||
        (ra->n_scale > 1 && ra->scale_shape.rank > 0 &&
         ra->scale_shape.dims[ra->scale_shape.rank - 1] != cin))
        return KC_OK;
    if (kind == KC_HOST_CONV) {
        const kc_conv_attrs *a = g->nodes[h].layer->attrs;
        if ((a->kind != KC_CONV_PLAIN && a->kind != KC_CONV_DEPTHWISE) || a->groups > 1 ||
            g->nodes[h].layer->channels_first)
            return KC_OK;
    }
    kc_layer *l = kc_fuse_own(f, h, g);
    if (!l)
        return KC_ERR_NOMEM;
    /* Keras kernels run (..., in channels, out per in): the input channel
     * is the index over the last axis's stride, mod cin */
    kc_weight *kernel = &l->weights[0];
    const kc_shape *ks = &kernel->shape;
    int64_t per = ks->dims[ks->rank - 1], kn = kc_shape_count(ks);
    for (int64_t i = 0; i < kn; i++)
        kernel->data[i] *= ra->scale[ra->n_scale == 1 ? 0 : (i / per) % cin];
    f->alias[n->outputs[0]] = kc_resolve(f, n->inputs[0]);
    f->skip[rs] = 1;
    f->n_fused++;
    return KC_OK;
}

/* ------------------------------------- BatchNormalization folded forward */

/* Whether layer l is one of the pooling layers (ops/pool.c). */
static int kc_is_pool(const kc_layer *l)
{
    for (int i = 0; kc_ops_pool[i]; i++)
        if (l->def == kc_ops_pool[i])
            return 1;
    return 0;
}

/* Whether node k may carry a per-channel affine a * x + b (every a >= 0
 * when nonneg_scale) from its input to its output unchanged in form:
 * average poolings (weights that sum to 1, padding not counted), max
 * poolings for a >= 0 (a monotone map commutes with max; a = 0 gives b
 * either way), Flatten (channels_last: the channel is the fastest axis). */
static int kc_affine_passes(const kc_layer *l, int nonneg_scale)
{
    if (l->channels_first)
        return 0;
    if (l->def == kc_op_lookup(NULL, "Flatten"))
        return 1;
    if (!kc_is_pool(l))
        return 0;
    const kc_pool_attrs *a = l->attrs;
    for (int d = 0; d < 3; d++)
        if (a->pad_before[d] || a->pad_after[d])
            return 0; /* padding the pooling ignores stands for values >= 0 */
    return a->kind == KC_POOL_AVG || nonneg_scale;
}

/* Node h may take an affine over its input channels into its kernel: a
 * Dense, or a plain ungrouped channels_last convolution that pads
 * nothing (a padded border reads zeros, not b). */
static int kc_affine_host(const kc_layer *l)
{
    const char *act = NULL;
    kc_host_kind kind = kc_host_of(l, &act);
    if (kind == KC_HOST_DENSE)
        return 1;
    if (kind != KC_HOST_CONV || l->channels_first)
        return 0;
    const kc_conv_attrs *a = l->attrs;
    if (a->kind != KC_CONV_PLAIN || a->groups > 1 || a->padding != 0)
        return 0;
    for (int d = 0; d < 3; d++)
        if (a->pad_before[d] || a->pad_after[d])
            return 0;
    return 1;
}

/* The node that alone reads the slot of value v, from node `after` on
 * (called once, one input and output, in the stage of node `with`), or -1. */
static int kc_sole_reader(const kc_fused *f, const kc_graph *g, int v, int after, int with)
{
    int only = -1, root = kc_resolve(f, v);
    if (kc_slot_readers(g, f, root, 0, &only) != 1 || only <= after)
        return -1;
    const kc_node *n = &g->nodes[only];
    if (n->n_inputs != 1 || n->n_outputs != 1 || n->layer->n_calls != 1 ||
        kc_resolve(f, n->inputs[0]) != root || !kc_same_stage(f, with, only))
        return -1;
    return only;
}

/* Host h's kernel reads a[c] * x + b[c] on its `cin` input channels: the
 * bias takes sum W * b (in double, before the kernel is scaled), the
 * kernel's rows a[c]. Keras kernels run (..., in, out): the input
 * channel of element i is (i / out) % cin, which also holds for a Dense
 * after a Flatten of channels_last data. */
static kc_status kc_fold_affine_in(kc_layer *l, int64_t cin, const double *a, const double *b)
{
    kc_weight *kernel = &l->weights[0];
    int64_t out = kernel->shape.dims[kernel->shape.rank - 1], kn = kc_shape_count(&kernel->shape);
    KC_TRY(kc_fold_bias(l, 1, out));
    double *shift = kc_calloc((size_t)out, sizeof *shift);
    if (!shift)
        return KC_ERR_NOMEM;
    for (int64_t i = 0; i < kn; i++) {
        int64_t c = (i / out) % cin;
        shift[i % out] += kernel->data[i] * b[c];
        kernel->data[i] = (float)(kernel->data[i] * a[c]);
    }
    float *bias = l->weights[1].data;
    for (int64_t o = 0; o < out; o++)
        bias[o] = (float)(bias[o] + shift[o]);
    free(shift);
    return KC_OK;
}

/* A BatchNormalization no layer before it can take (after a relu: Conv2D
 * with activation="relu" then BatchNormalization, as many tutorials
 * write) folds into the layer after it instead: through poolings and a
 * Flatten that carry its per-channel affine a * x + b (kc_affine_passes;
 * a max pooling only where every a >= 0) into a Dense or an unpadded
 * convolution, whose kernel takes a on its input rows and whose bias
 * takes sum W * b. The layers between then read the unnormalised values.
 * One pass over the tensor less a run: cnn_bn_gap_k360's three took a
 * fifth of its time. The products round once more or less than Keras's.
 * KC_BN_FORWARD=0 leaves them layers. */
static kc_status kc_fold_bn_forward(kc_fused *f, const kc_graph *g, int bn)
{
    const kc_node *n = &g->nodes[bn];
    kc_layer *b = n->layer;
    const kc_norm_attrs *na = b->attrs;
    const kc_shape *shape = &g->values[n->outputs[0]].shape;
    if (n->n_inputs != 1 || n->n_outputs != 1 || b->n_calls != 1 || na->n_axes != 1 ||
        (na->axes[0] != -1 && na->axes[0] != shape->rank - 1) || shape->rank < 2 ||
        shape->dims[shape->rank - 1] < 1)
        return KC_OK;
    int64_t c = shape->dims[shape->rank - 1];
    kc_bn_arrays w = kc_bn_arrays_of(b);
    if (!w.mean || !w.var || (na->scale && !w.gamma) || (na->center && !w.beta))
        return KC_OK;
    double *a = kc_calloc(2 * (size_t)c, sizeof *a);
    if (!a)
        return KC_ERR_NOMEM;
    double *shift = a + c;
    int nonneg = 1;
    for (int64_t j = 0; j < c; j++) {
        a[j] = kc_bn_scale(&w, j);
        shift[j] = (w.beta ? w.beta[j] : 0.0) - w.mean[j] * a[j];
        nonneg &= a[j] >= 0.0;
    }
    kc_status st = KC_OK;
    int at = bn, v = n->outputs[0];
    for (;;) {
        int next = kc_sole_reader(f, g, v, at, bn);
        if (next < 0 || f->skip[next])
            break;
        const kc_layer *l = g->nodes[next].layer;
        if (kc_affine_passes(l, nonneg)) {
            at = next;
            v = g->nodes[next].outputs[0];
            continue;
        }
        const kc_shape *in = &g->values[g->nodes[next].inputs[0]].shape;
        if (!kc_affine_host(l) || in->dims[in->rank - 1] % c != 0)
            break;
        kc_layer *host = kc_fuse_own(f, next, g);
        if (!host) {
            st = KC_ERR_NOMEM;
            break;
        }
        st = kc_fold_affine_in(host, c, a, shift);
        if (st == KC_OK)
            kc_fold_absorbed(f, g, kc_resolve(f, n->inputs[0]), bn);
        break;
    }
    free(a);
    return st;
}

/* Whether node n adds its two inputs: the Add merge layer, or Keras 3's
 * ops add of two tensors (ConvNeXt's residuals, `inputs + x` in a
 * functional model), not of a constant. */
static int kc_is_two_input_add(const kc_node *n)
{
    if (n->n_inputs != 2 || strcmp(n->layer->class_name, "Add") != 0)
        return 0;
    if (n->layer->def == kc_op_lookup(NULL, "Add"))
        return ((const kc_merge_attrs *)n->layer->attrs)->kind == KC_MERGE_ADD;
    if (n->layer->def != kc_op_lookup("keras.src.ops.numpy", "Add"))
        return 0;
    const kc_top_attrs *t = n->layer->attrs;
    return t->kind == KC_TOP_BINARY && t->ew == KC_EW_ADD && t->n_operands == 2 &&
           t->operand[0].kind == KC_OPND_INPUT && t->operand[1].kind == KC_OPND_INPUT;
}

/* Fuse Add node i (and an activation reading it) into a convolution or
 * Dense. */
static kc_status kc_fuse_add(kc_fused *f, const kc_graph *g, int i)
{
    const kc_node *n = &g->nodes[i];
    if (n->n_outputs != 1 || n->layer->n_calls != 1 || !kc_is_two_input_add(n) ||
        !kc_static_shape_equal(&g->values[n->inputs[0]].shape,
                               &g->values[n->inputs[1]].shape) ||
        !kc_static_shape_equal(&g->values[n->inputs[0]].shape,
                               &g->values[n->outputs[0]].shape))
        return KC_OK;
    int best = -1, best_c = -1, best_r = -1;
    for (int k = 0; k < 2; k++) {
        int c = kc_resolve(f, n->inputs[k]), r = kc_resolve(f, n->inputs[1 - k]);
        int h = kc_sum_host(g, f, c), only = -1;
        if (h < 0 || h <= best || c == r || !kc_same_stage(f, h, i) ||
            kc_slot_readers(g, f, c, 0, &only) != 1 || only != i ||
            !kc_slot_free_after(g, f, r, h, i))
            continue;
        best = h;
        best_c = c;
        best_r = r;
    }
    if (best < 0)
        return KC_OK;
    kc_layer *l = kc_fuse_own(f, best, g);
    if (!l)
        return KC_ERR_NOMEM;
    *kc_host_accumulate(l) = 1;
    f->alias[best_c] = best_r;
    f->alias[n->outputs[0]] = best_r;
    f->skip[i] = 1;
    f->n_fused++;
    /* An activation that alone reads the sum runs as the conv's own. */
    int reader = -1;
    if (kc_slot_readers(g, f, best_r, i + 1, &reader) != 1 || !kc_same_stage(f, i, reader))
        return KC_OK;
    const kc_node *an = &g->nodes[reader];
    const char *act = an->n_inputs == 1 && an->n_outputs == 1 && an->layer->n_calls == 1
                          ? kc_plain_activation(an->layer)
                          : NULL;
    if (act && kc_resolve(f, an->inputs[0]) == best_r) {
        *kc_host_activation(l) = act;
        f->alias[an->outputs[0]] = best_r;
        f->skip[reader] = 1;
        f->n_fused++;
    }
    return KC_OK;
}

/* ---------------------------------------------- ZeroPadding folding */

/* Whether value v cannot hold a negative number: the output of a relu or
 * relu6, as a layer of its own or as its producer's activation. */
static int kc_value_nonnegative(const kc_fused *f, const kc_graph *g, int v)
{
    int p = kc_producer(g, v);
    if (p < 0)
        return 0;
    const kc_layer *l = f->shadow[p] ? f->shadow[p] : g->nodes[p].layer;
    const char *act = kc_plain_activation(l);
    if (!act && kc_host_of(l, &act) == KC_HOST_NONE)
        return 0;
    return act && (!strcmp(act, "relu") || !strcmp(act, "relu6"));
}

/* A ZeroPadding read only by a "valid" max pooling (reader, checked like
 * a convolution reader by kc_fuse_zeropad) of non-negative values
 * (ResNet's pool1_pad after conv1's relu) becomes padding the pooling
 * ignores: a zero never beats a real cell there. */
static kc_status kc_fuse_zeropad_pool(kc_fused *f, const kc_graph *g, int i, int reader)
{
    const kc_node *pn = &g->nodes[reader], *n = &g->nodes[i];
    const kc_pad_attrs *p = n->layer->attrs;
    const kc_pool_attrs *a = pn->layer->attrs;
    if (pn->n_inputs != 1 || a->global || a->padding || a->spatial != p->spatial ||
        !kc_value_nonnegative(f, g, n->inputs[0]))
        return KC_OK;
    for (int d = 0; d < p->spatial; d++)
        if (p->before[d] >= a->pool[d] || p->after[d] >= a->pool[d])
            return KC_OK; /* a window of padding alone would be 0, not ignored */
    kc_layer *l = kc_fuse_own(f, reader, g);
    if (!l)
        return KC_ERR_NOMEM;
    kc_pool_attrs *la = l->attrs;
    for (int d = 0; d < p->spatial; d++) {
        la->pad_before[d] += p->before[d];
        la->pad_after[d] += p->after[d];
    }
    f->alias[n->outputs[0]] = kc_resolve(f, n->inputs[0]);
    f->skip[i] = 1;
    f->n_fused++;
    return KC_OK;
}

static kc_status kc_fuse_zeropad(kc_fused *f, const kc_graph *g, int i)
{
    const kc_node *n = &g->nodes[i];
    const char *c = n->layer->class_name;
    if ((strcmp(c, "ZeroPadding1D") && strcmp(c, "ZeroPadding2D")) || n->n_inputs != 1 ||
        n->n_outputs != 1 || n->layer->n_calls != 1 || n->layer->channels_first)
        return KC_OK;
    int out = n->outputs[0], reader = -1;
    if (kc_slot_readers(g, f, out, 0, &reader) != 1 || reader <= i ||
        !kc_same_stage(f, i, reader))
        return KC_OK;
    const kc_node *cn = &g->nodes[reader];
    const char *act = NULL;
    if (cn->inputs[0] != out || cn->n_outputs != 1 || cn->layer->n_calls != 1 ||
        cn->layer->channels_first)
        return KC_OK;
    if (kc_is_maxpool(cn->layer))
        return kc_fuse_zeropad_pool(f, g, i, reader);
    if (kc_host_of(cn->layer, &act) != KC_HOST_CONV)
        return KC_OK;
    const kc_conv_attrs *a = f->shadow[reader] ? f->shadow[reader]->attrs : cn->layer->attrs;
    const kc_pad_attrs *p = n->layer->attrs;
    if ((a->kind != KC_CONV_PLAIN && a->kind != KC_CONV_DEPTHWISE) || a->padding != 0 ||
        a->spatial != p->spatial)
        return KC_OK;
    kc_layer *l = kc_fuse_own(f, reader, g);
    if (!l)
        return KC_ERR_NOMEM;
    kc_conv_attrs *la = l->attrs;
    for (int d = 0; d < p->spatial; d++) {
        la->pad_before[d] += p->before[d];
        la->pad_after[d] += p->after[d];
    }
    f->alias[out] = kc_resolve(f, n->inputs[0]);
    f->skip[i] = 1;
    f->n_fused++;
    return KC_OK;
}

/* ------------------------------------ depthwise after 1x1 (per plan) */

static const kc_conv_attrs *kc_conv_attrs_of(const kc_fused *f, const kc_graph *g, int i)
{
    return f->shadow[i] ? f->shadow[i]->attrs : g->nodes[i].layer->attrs;
}

/* A convolution node of `kind`, called once, one input and output,
 * channels_last. Whether a pair's geometry suits the fusion (a 1x1
 * stride-1 convolution, a 3x3 depthwise one oneDNN can run after it) is
 * the kernel's to say, per plan (kc_dnnl_conv_dw_fusable). */
static int kc_is_conv_node(const kc_fused *f, const kc_graph *g, int i, kc_conv_kind kind)
{
    const kc_node *n = &g->nodes[i];
    const char *act = NULL;
    return n->n_inputs == 1 && n->n_outputs == 1 && n->layer->n_calls == 1 &&
           !n->layer->channels_first && kc_host_of(n->layer, &act) == KC_HOST_CONV &&
           kc_conv_attrs_of(f, g, i)->kind == kind;
}

static kc_status kc_fuse_dw_pair(kc_fused *f, const kc_graph *g, int i)
{
    int r = -1;
    if (kc_is_conv_node(f, g, i, KC_CONV_PLAIN) &&
        kc_slot_readers(g, f, kc_resolve(f, g->nodes[i].outputs[0]), i + 1, &r) == 1 &&
        kc_is_conv_node(f, g, r, KC_CONV_DEPTHWISE))
        f->dw_of[i] = r;
    return KC_OK;
}

/* Fuse (on) or unfuse pair i. Both layers get their session copies when
 * first fused, not before: a model without BatchNormalization would
 * otherwise hold a second copy of their weights at batch 1 too. */
static kc_status kc_fuse_dw_set(kc_fused *f, const kc_graph *g, int i, int on)
{
    int r = f->dw_of[i];
    if (on && (!kc_fuse_own(f, i, g) || !kc_fuse_own(f, r, g)))
        return KC_ERR_NOMEM;
    if (!f->shadow[i])
        return KC_OK; /* never fused */
    ((kc_conv_attrs *)f->shadow[i]->attrs)->post_dw = on ? f->shadow[r] : NULL;
    f->skip[r] = (unsigned char)on;
    f->alias[g->nodes[r].outputs[0]] = on ? g->nodes[i].outputs[0] : -1;
    f->n_dw_on += on - f->dw_on[i];
    f->dw_on[i] = (unsigned char)on;
    return KC_OK;
}

/* ------------------- the whole inverted-residual block (per plan) */

/* Depthwise node r's projection: the 1x1 convolution node that alone
 * reads its output, or -1. */
static int kc_fuse_proj_of(const kc_fused *f, const kc_graph *g, int r)
{
    int p = -1;
    int d = kc_resolve(f, g->nodes[r].outputs[0]);
    if (kc_slot_readers(g, f, d, r + 1, &p) != 1 || !kc_is_conv_node(f, g, p, KC_CONV_PLAIN) ||
        kc_resolve(f, g->nodes[p].inputs[0]) != d)
        return -1;
    return p;
}

/* Where the output of the block from node i to projection p goes (d:
 * the depthwise output): the projection's residual (the slot it
 * accumulates into) when it has one, else the output's own slot (sized
 * for it, not for the 6x wider expansion; the plan places it when the
 * block's first node runs). -1 when neither works: the residual is made
 * after the block starts or read by another node before its end, or the
 * projection widens the depthwise output (every view of the one slot
 * must hold at least the output). */
static int kc_fuse_irb_target(const kc_fused *f, const kc_graph *g, const kc_shape *shape,
                              int i, int d, int p)
{
    int o = g->nodes[p].outputs[0];
    int t = kc_resolve(f, o);
    /* the slot's smallest view must be what it holds (kc_head_lists) */
    if (kc_shape_count(&shape[o]) > kc_shape_count(&shape[d]))
        return -1;
    if (t == o)
        return o; /* the slot is the output's size, placed when the block starts */
    int made = kc_producer(g, t);
    if (made >= i || kc_is_output(g, t))
        return -1;
    for (int j = i + 1; j <= p; j++)
        for (int k = 0; !f->skip[j] && k < g->nodes[j].n_inputs; k++)
            if (kc_resolve(f, g->nodes[j].inputs[k]) == t)
                return -1;
    return t;
}

/* Block i's nodes: its depthwise node *r (-1 for a block without
 * expansion, whose depthwise node is i itself) and its projection *p
 * (-1: none). */
static void kc_fuse_block_nodes(const kc_fused *f, int i, int *r, int *p)
{
    *r = f->dw_of[i];
    *p = *r >= 0 ? f->pw_of[i] : f->dwp_of[i];
}

/* Run block i (expansion i, its depthwise node, its projection; or
 * depthwise node i and its projection) as one kernel on node i (on) or
 * as the layers it was (off). On, every value of the block shares the
 * target's slot; the aliases it replaces are kept to be put back. */
static kc_status kc_fuse_block_set(kc_fused *f, const kc_graph *g, int i, int target, int on)
{
    int r, p;
    kc_fuse_block_nodes(f, i, &r, &p);
    int *v = &f->irb_alias[3 * i];
    const int vals[3] = {g->nodes[i].outputs[0], r >= 0 ? g->nodes[r].outputs[0] : -1,
                         g->nodes[p].outputs[0]};
    if (on == f->irb_on[i])
        return KC_OK;
    if (on) {
        if (!kc_fuse_own(f, i, g) || (r >= 0 && !kc_fuse_own(f, r, g)) || !kc_fuse_own(f, p, g))
            return KC_ERR_NOMEM;
        for (int k = 0; k < 3; k++)
            if (vals[k] >= 0)
                v[k] = f->alias[vals[k]];
        int e = vals[0];
        f->alias[e] = target; /* the residual's root, or the output itself */
        if (r >= 0)
            f->alias[vals[1]] = e;
    } else
        for (int k = 0; k < 3; k++)
            if (vals[k] >= 0)
                f->alias[vals[k]] = v[k];
    kc_conv_attrs *a = f->shadow[i]->attrs;
    a->post_dw = on && r >= 0 ? f->shadow[r] : NULL;
    a->post_pw = on ? f->shadow[p] : NULL;
    if (r >= 0)
        f->skip[r] = (unsigned char)on;
    f->skip[p] = (unsigned char)on;
    f->n_irb_on += on - f->irb_on[i];
    f->irb_on[i] = (unsigned char)on;
    return KC_OK;
}

/* Whether block i is wanted whole for this plan, and where its output
 * goes (*target). A node a pair or block before it took (skipped)
 * carries none: MobileNetV1's 1x1 layers are one block's projection and
 * the next block's expansion, and a block on a skipped node never ran
 * (its kernel refused the run: the projection it was given carried a
 * block of its own). */
static int kc_fuse_block_wanted(const kc_fused *f, const kc_graph *g, const kc_shape *shape, int i,
                                int *target)
{
    int r, p;
    kc_fuse_block_nodes(f, i, &r, &p);
    if (p < 0 || f->skip[i])
        return 0;
    int d = r >= 0 ? r : i; /* the depthwise node */
    const kc_layer *dl = f->shadow[d] ? f->shadow[d] : g->nodes[d].layer;
    const kc_layer *pl = f->shadow[p] ? f->shadow[p] : g->nodes[p].layer;
    const kc_conv_attrs *ex = r >= 0 ? kc_conv_attrs_of(f, g, i) : NULL;
    if (!kc_irb_fusable(ex, dl, pl, &shape[g->nodes[i].inputs[0]]))
        return 0;
    *target = kc_fuse_irb_target(f, g, shape, i, g->nodes[d].outputs[0], p);
    return *target >= 0;
}

kc_status kc_fuse_dw_plan(kc_fused *f, const kc_graph *g, const kc_shape *shape, int allow,
                          int one_thread)
{
    for (int i = 0; f->dw_of && i < g->n_nodes; i++)
        if (f->irb_on[i])
            KC_TRY(kc_fuse_block_set(f, g, i, -1, 0)); /* judged on the plain layers */
    for (int i = 0; f->dw_of && i < g->n_nodes; i++) {
        if (f->dw_of[i] < 0)
            continue;
        const kc_node *n = &g->nodes[i];
        const kc_shape *in = &shape[n->inputs[0]], *mid = &shape[n->outputs[0]];
        int target = -1;
        KC_TRY(kc_fuse_dw_set(f, g, i, 0));
        if (allow && kc_fuse_block_wanted(f, g, shape, i, &target)) {
            KC_TRY(kc_fuse_block_set(f, g, i, target, 1));
            continue;
        }
        int r = f->dw_of[i];
        const kc_layer *dl = f->shadow[r] ? f->shadow[r] : g->nodes[r].layer;
        /* one image on several threads: only where its rows are cut */
        int want = allow && !f->skip[i] && in->rank == 4 &&
                   (in->dims[0] >= 2 || one_thread ||
                    kc_dnnl_conv_dw_row_parts(kc_conv_attrs_of(f, g, i), dl, in, mid) > 1);
        if (want)
            want = kc_dnnl_conv_dw_fusable(kc_conv_attrs_of(f, g, i), dl, in, mid);
        KC_TRY(kc_fuse_dw_set(f, g, i, want));
    }
    /* blocks without expansion last: not where the projection carries a
     * pair or block of its own (decided above) */
    for (int i = 0; f->dwp_of && i < g->n_nodes; i++) {
        int target = -1, p = f->dwp_of[i];
        if (p >= 0 && !f->irb_on[p] && !f->dw_on[p] && allow &&
            kc_fuse_block_wanted(f, g, shape, i, &target))
            KC_TRY(kc_fuse_block_set(f, g, i, target, 1));
    }
    return KC_OK;
}

/* ------------------------------- average pooling before 1x1 (per plan) */

/* A 2-D average pooling node, called once, one input and output,
 * channels_last. Whether its window suits the fusion ("same", stride 1)
 * is the kernel's to say, per plan (kc_dnnl_conv_pool_fusable). */
static int kc_is_avgpool2d_node(const kc_node *n)
{
    const char *c = n->layer->class_name;
    return (!strcmp(c, "AveragePooling2D") || !strcmp(c, "AvgPool2D")) && n->n_inputs == 1 &&
           n->n_outputs == 1 && n->layer->n_calls == 1 && !n->layer->channels_first;
}

static kc_status kc_fuse_pool_pair(kc_fused *f, const kc_graph *g, int i)
{
    int r = -1;
    if (!kc_is_avgpool2d_node(&g->nodes[i]) ||
        kc_slot_readers(g, f, kc_resolve(f, g->nodes[i].outputs[0]), i + 1, &r) != 1 ||
        !kc_is_conv_node(f, g, r, KC_CONV_PLAIN) || g->nodes[r].inputs[0] != g->nodes[i].outputs[0])
        return KC_OK;
    f->pool_of[r] = i;
    return KC_OK;
}

/* Fuse (on) or unfuse the pooling that feeds convolution c. */
static kc_status kc_fuse_pool_set(kc_fused *f, const kc_graph *g, int c, int on)
{
    int p = f->pool_of[c];
    if (on && !kc_fuse_own(f, c, g))
        return KC_ERR_NOMEM;
    if (!f->shadow[c])
        return KC_OK; /* never fused */
    ((kc_conv_attrs *)f->shadow[c]->attrs)->pre_pool = on ? g->nodes[p].layer : NULL;
    f->skip[p] = (unsigned char)on;
    f->alias[g->nodes[p].outputs[0]] = on ? kc_resolve(f, g->nodes[p].inputs[0]) : -1;
    f->n_pool_on += on - f->pool_on[c];
    f->pool_on[c] = (unsigned char)on;
    return KC_OK;
}

kc_status kc_fuse_pool_plan(kc_fused *f, const kc_graph *g, const kc_shape *shape, int allow)
{
    for (int c = 0; f->pool_of && c < g->n_nodes; c++) {
        if (f->pool_of[c] < 0)
            continue;
        const kc_node *p = &g->nodes[f->pool_of[c]];
        int want = allow && !f->dw_on[c] && !f->irb_on[c] &&
                   kc_dnnl_conv_pool_fusable(kc_conv_attrs_of(f, g, c), p->layer,
                                             &shape[p->inputs[0]]);
        KC_TRY(kc_fuse_pool_set(f, g, c, want));
    }
    return KC_OK;
}

/* ------------------------------------ max pooling after a convolution */

/* Convolution node i's output read by a MaxPooling2D node alone (2-D,
 * channels_last, called once, no folded ZeroPadding): remember it. */
static kc_status kc_fuse_maxpool_pair(kc_fused *f, const kc_graph *g, int i)
{
    int r = -1;
    int out = g->nodes[i].outputs[0];
    if (!kc_is_conv_node(f, g, i, KC_CONV_PLAIN) || f->alias[out] >= 0 ||
        kc_conv_attrs_of(f, g, i)->accumulate ||
        kc_slot_readers(g, f, out, i + 1, &r) != 1 || !kc_same_stage(f, i, r))
        return KC_OK;
    const kc_node *p = &g->nodes[r];
    if (!kc_is_maxpool(p->layer) || p->n_inputs != 1 || p->n_outputs != 1 ||
        p->layer->n_calls != 1 || p->layer->channels_first || f->shadow[r] ||
        kc_resolve(f, p->inputs[0]) != out || f->alias[p->outputs[0]] >= 0)
        return KC_OK;
    f->maxpool_of[i] = r;
    return KC_OK;
}

/* Fuse (on) or unfuse the max pooling that reads convolution c. */
static kc_status kc_fuse_maxpool_set(kc_fused *f, const kc_graph *g, int c, int on)
{
    int p = f->maxpool_of[c];
    if (on == f->maxpool_on[c])
        return KC_OK;
    if (on && !kc_fuse_own(f, c, g))
        return KC_ERR_NOMEM;
    ((kc_conv_attrs *)f->shadow[c]->attrs)->post_pool = on ? g->nodes[p].layer : NULL;
    f->skip[p] = (unsigned char)on;
    f->alias[g->nodes[c].outputs[0]] = on ? g->nodes[p].outputs[0] : -1;
    f->n_maxpool_on += on - f->maxpool_on[c];
    f->maxpool_on[c] = (unsigned char)on;
    return KC_OK;
}

kc_status kc_fuse_maxpool_plan(kc_fused *f, const kc_graph *g, const kc_shape *shape, int allow)
{
    for (int c = 0; f->maxpool_of && c < g->n_nodes; c++) {
        if (f->maxpool_of[c] < 0)
            continue;
        const kc_node *p = &g->nodes[f->maxpool_of[c]];
        const kc_node *n = &g->nodes[c];
        int want = allow && !f->dw_on[c] && !f->irb_on[c] && !f->pool_on[c] &&
                   kc_stem_pool_fusable(kc_conv_attrs_of(f, g, c), p->layer->attrs,
                                        &shape[n->inputs[0]], &shape[n->outputs[0]]);
        KC_TRY(kc_fuse_maxpool_set(f, g, c, want));
    }
    return KC_OK;
}

/* ---------------------- pooling and Dense after a 1x1 convolution */

/* Convolution node i's output read by a GlobalAveragePooling2D node
 * alone, whose output a Dense node alone reads (each called once, in
 * the same stage, no output of the model among them): remember both.
 * Whether the three suit (kc_pw_head_fusable) is decided per plan.
 * Not after a residual sum: tried on 12-06 for ResNet50's classifier
 * (its last 1x1 layer's output aliased to the Dense's slot, the residual
 * read from its own slot through the kernel's context; the same output
 * bits), the three layers at batch 1 on the Zen 5 of bench/results took
 * 0.942, 1.000 and 1.037 of their time apart over three sets of 8-10
 * alternating runs (0.50-0.56 ms), fetching the Dense's rows in a burst
 * per block 1.002: the 8 MB of Dense weights stream no faster beside the
 * layer's own 4 MB than after them. */
static void kc_fuse_head_pair(kc_fused *f, const kc_graph *g, int i)
{
    int p = -1, d = -1;
    int out = g->nodes[i].outputs[0];
    if (!kc_is_conv_node(f, g, i, KC_CONV_PLAIN) || f->alias[out] >= 0 ||
        kc_conv_attrs_of(f, g, i)->accumulate || kc_slot_readers(g, f, out, i + 1, &p) != 1 ||
        !kc_same_stage(f, i, p))
        return;
    const kc_node *pn = &g->nodes[p];
    if (strcmp(pn->layer->class_name, "GlobalAveragePooling2D") != 0 || pn->n_inputs != 1 ||
        pn->n_outputs != 1 || pn->layer->n_calls != 1 || f->shadow[p] ||
        kc_resolve(f, pn->inputs[0]) != out || f->alias[pn->outputs[0]] >= 0 ||
        kc_slot_readers(g, f, pn->outputs[0], p + 1, &d) != 1 || !kc_same_stage(f, p, d))
        return;
    const kc_node *dn = &g->nodes[d];
    if (strcmp(dn->layer->class_name, "Dense") != 0 || dn->n_inputs != 1 || dn->n_outputs != 1 ||
        dn->layer->n_calls != 1 || kc_resolve(f, dn->inputs[0]) != pn->outputs[0] ||
        f->alias[dn->outputs[0]] >= 0)
        return;
    f->head_of[i] = p;
    f->head_dense[i] = d;
}

/* The Dense layer of convolution c's head: its session copy where it
 * has one (a BatchNormalization folded forward, an activation taken). */
static const kc_layer *kc_fuse_head_dense(const kc_fused *f, const kc_graph *g, int c)
{
    int d = f->head_dense[c];
    return f->shadow[d] ? f->shadow[d] : g->nodes[d].layer;
}

/* Fuse (on) or unfuse the pooling and Dense after convolution c. */
static kc_status kc_fuse_head_set(kc_fused *f, const kc_graph *g, int c, int on)
{
    int p = f->head_of[c], d = f->head_dense[c];
    if (on == f->head_on[c])
        return KC_OK;
    if (on && !kc_fuse_own(f, c, g))
        return KC_ERR_NOMEM;
    ((kc_conv_attrs *)f->shadow[c]->attrs)->post_head = on ? kc_fuse_head_dense(f, g, c) : NULL;
    f->skip[p] = f->skip[d] = (unsigned char)on;
    int to = on ? g->nodes[d].outputs[0] : -1;
    f->alias[g->nodes[c].outputs[0]] = to;
    f->alias[g->nodes[p].outputs[0]] = to;
    f->n_head_on += on - f->head_on[c];
    f->head_on[c] = (unsigned char)on;
    return KC_OK;
}

kc_status kc_fuse_head_plan(kc_fused *f, const kc_graph *g, const kc_shape *shape, int allow)
{
    for (int c = 0; f->head_of && c < g->n_nodes; c++) {
        if (f->head_of[c] < 0)
            continue;
        const kc_node *n = &g->nodes[c];
        int want = allow && !f->skip[c] && !f->dw_on[c] && !f->irb_on[c] && !f->pool_on[c] &&
                   !f->maxpool_on[c] && !f->upsample_on[c] &&
                   kc_pw_head_fusable(kc_conv_attrs_of(f, g, c), &shape[n->inputs[0]],
                                      &shape[n->outputs[0]], g->nodes[f->head_of[c]].layer,
                                      kc_fuse_head_dense(f, g, c));
        KC_TRY(kc_fuse_head_set(f, g, c, want));
    }
    return KC_OK;
}

/* ------------------------------ nearest upsampling before a 3x3 conv */

/* UpSampling2D node i (2-D, channels_last, called once) whose output a
 * plain convolution node alone reads, in the same stage: remember it.
 * Whether the pair suits (kc_upconv_fusable) is decided per plan. */
static kc_status kc_fuse_upsample_pair(kc_fused *f, const kc_graph *g, int i)
{
    const kc_node *n = &g->nodes[i];
    int r = -1;
    if (strcmp(n->layer->class_name, "UpSampling2D") != 0 || n->n_inputs != 1 ||
        n->n_outputs != 1 || n->layer->n_calls != 1 || n->layer->channels_first ||
        f->alias[n->outputs[0]] >= 0 || kc_slot_readers(g, f, n->outputs[0], i + 1, &r) != 1 ||
        !kc_is_conv_node(f, g, r, KC_CONV_PLAIN) || g->nodes[r].inputs[0] != n->outputs[0] ||
        g->nodes[r].layer->channels_first || !kc_same_stage(f, i, r))
        return KC_OK;
    f->upsample_of[r] = i;
    return KC_OK;
}

/* Fuse (on) or unfuse the upsampling that feeds convolution c. */
static kc_status kc_fuse_upsample_set(kc_fused *f, const kc_graph *g, int c, int on)
{
    int u = f->upsample_of[c];
    if (on == f->upsample_on[c])
        return KC_OK;
    if (on && !kc_fuse_own(f, c, g))
        return KC_ERR_NOMEM;
    ((kc_conv_attrs *)f->shadow[c]->attrs)->pre_upsample = on ? g->nodes[u].layer : NULL;
    f->skip[u] = (unsigned char)on;
    f->alias[g->nodes[u].outputs[0]] = on ? kc_resolve(f, g->nodes[u].inputs[0]) : -1;
    f->n_upsample_on += on - f->upsample_on[c];
    f->upsample_on[c] = (unsigned char)on;
    return KC_OK;
}

kc_status kc_fuse_upsample_plan(kc_fused *f, const kc_graph *g, const kc_shape *shape, int allow)
{
    for (int c = 0; f->upsample_of && c < g->n_nodes; c++) {
        if (f->upsample_of[c] < 0)
            continue;
        const kc_node *u = &g->nodes[f->upsample_of[c]];
        int want = allow && !f->dw_on[c] && !f->irb_on[c] && !f->pool_on[c] &&
                   !f->maxpool_on[c] &&
                   kc_upconv_fusable(kc_conv_attrs_of(f, g, c), u->layer->attrs,
                                     &shape[u->inputs[0]]);
        KC_TRY(kc_fuse_upsample_set(f, g, c, want));
    }
    return KC_OK;
}

/* A layer that is the identity at inference (Dropout, noise, the Random*
 * augmentations; kc_identity_kernel copies) or an Activation("linear")
 * (ConvNeXt's `identity` layers) produces nothing: its output shares its
 * input's slot, as a folded layer's does, and the copy is gone (ConvNeXtTiny
 * spent 7% of a run in such copies). */
static void kc_fuse_identity(kc_fused *f, const kc_graph *g, int i)
{
    const kc_node *n = &g->nodes[i];
    const kc_layer *l = n->layer;
    int identity = l->def && (l->def->flags & KC_OPF_IDENTITY);
    if (!identity && !strcmp(l->class_name, "Activation"))
        identity = !strcmp(((const kc_activation_attrs *)l->attrs)->activation, "linear");
    if (!identity || n->n_inputs != 1 || n->n_outputs != 1 ||
        !kc_shape_equal(&g->values[n->inputs[0]].shape, &g->values[n->outputs[0]].shape))
        return;
    f->alias[n->outputs[0]] = kc_resolve(f, n->inputs[0]);
    f->skip[i] = 1;
    f->n_fused++;
}

kc_status kc_fuse(const kc_graph *g, kc_fuse_level level, const int *stage, int *taken,
                  kc_fused *f)
{
    memset(f, 0, sizeof *f);
    f->taken = taken;
    f->scope_first = stage ? stage[0] : -1;
    f->scope_last = stage ? stage[1] : -1;
    f->alias = kc_calloc((size_t)g->n_values + 1, sizeof *f->alias);
    f->skip = kc_calloc((size_t)g->n_nodes + 1, 1);
    f->shadow = kc_calloc((size_t)g->n_nodes + 1, sizeof *f->shadow);
    f->dw_of = kc_calloc((size_t)g->n_nodes + 1, sizeof *f->dw_of);
    f->dw_on = kc_calloc((size_t)g->n_nodes + 1, 1);
    f->pool_of = kc_calloc((size_t)g->n_nodes + 1, sizeof *f->pool_of);
    f->pool_on = kc_calloc((size_t)g->n_nodes + 1, 1);
    f->pw_of = kc_calloc((size_t)g->n_nodes + 1, sizeof *f->pw_of);
    f->dwp_of = kc_calloc((size_t)g->n_nodes + 1, sizeof *f->dwp_of);
    f->irb_on = kc_calloc((size_t)g->n_nodes + 1, 1);
    f->irb_alias = kc_calloc(3 * ((size_t)g->n_nodes + 1), sizeof *f->irb_alias);
    f->maxpool_of = kc_calloc((size_t)g->n_nodes + 1, sizeof *f->maxpool_of);
    f->maxpool_on = kc_calloc((size_t)g->n_nodes + 1, 1);
    f->upsample_of = kc_calloc((size_t)g->n_nodes + 1, sizeof *f->upsample_of);
    f->upsample_on = kc_calloc((size_t)g->n_nodes + 1, 1);
    f->head_of = kc_calloc((size_t)g->n_nodes + 1, sizeof *f->head_of);
    f->head_dense = kc_calloc((size_t)g->n_nodes + 1, sizeof *f->head_dense);
    f->head_on = kc_calloc((size_t)g->n_nodes + 1, 1);
    if (!f->alias || !f->skip || !f->shadow || !f->dw_of || !f->dw_on || !f->pool_of ||
        !f->pool_on || !f->pw_of || !f->dwp_of || !f->irb_on || !f->irb_alias ||
        !f->maxpool_of || !f->maxpool_on || !f->upsample_of || !f->upsample_on ||
        !f->head_of || !f->head_dense || !f->head_on)
        return KC_ERR_NOMEM;
    for (int i = 0; i < g->n_nodes; i++)
        f->dw_of[i] = f->pool_of[i] = f->pw_of[i] = f->dwp_of[i] = f->maxpool_of[i] =
            f->upsample_of[i] = f->head_of[i] = f->head_dense[i] = -1;
    for (int v = 0; v < g->n_values; v++)
        f->alias[v] = -1;
    if (level == KC_FUSE_NONE || kc_env_off("KC_FUSE"))
        return KC_OK;
    for (int i = 0; i < g->n_nodes; i++)
        kc_fuse_identity(f, g, i);
    for (int i = 0; i < g->n_nodes; i++) {
        const kc_node *n = &g->nodes[i];
        if (n->n_inputs != 1 || n->n_outputs != 1 || n->layer->n_calls != 1)
            continue;
        int in = kc_resolve(f, n->inputs[0]);
        /* through an absorbed identity layer every reader of the slot
         * counts: a folded BatchNormalization rewrites what they read */
        int only = -1;
        if (in != n->inputs[0] && (kc_slot_readers(g, f, in, 0, &only) != 1 || only != i))
            continue;
        int h = kc_producer(g, in);
        if (h < 0 || g->nodes[h].n_outputs != 1 || g->nodes[h].layer->n_calls != 1)
            continue;
        /* The host's output must feed only this node. */
        if (kc_readers(g, g->nodes[h].outputs[0]) != 1 && !f->shadow[h])
            continue;
        if (f->shadow[h] && kc_readers(g, n->inputs[0]) != 1)
            continue;
        const char *host_act = NULL;
        if (kc_host_of(g->nodes[h].layer, &host_act) == KC_HOST_NONE)
            continue;
        if (f->shadow[h])
            host_act = *kc_host_activation(f->shadow[h]);
        if (strcmp(host_act, "linear") != 0)
            continue;
        if (!strcmp(n->layer->class_name, "BatchNormalization") && !f->shadow[h]) {
            KC_TRY(kc_fold_bn(f, g, h, i));
            continue;
        }
        if (!strcmp(n->layer->class_name, "LayerScale") && !f->shadow[h]) {
            KC_TRY(kc_fold_layer_scale(f, g, h, i));
            continue;
        }
        const char *act = kc_plain_activation(n->layer);
        if (act) {
            kc_layer *l = kc_fuse_own(f, h, g);
            if (!l)
                return KC_ERR_NOMEM;
            *kc_host_activation(l) = act;
            f->alias[n->outputs[0]] = in;
            f->skip[i] = 1;
            f->n_fused++;
        }
    }
    for (int i = 0; i < g->n_nodes; i++)
        if (!f->skip[i] && !strcmp(g->nodes[i].layer->class_name, "Rescaling"))
            KC_TRY(kc_fold_rescaling(f, g, i));
    int bn_forward = !kc_env_off("KC_BN_FORWARD");
    for (int i = g->n_nodes - 1; bn_forward && i >= 0; i--)
        if (!f->skip[i] && !strcmp(g->nodes[i].layer->class_name, "BatchNormalization"))
            KC_TRY(kc_fold_bn_forward(f, g, i));
    if (level < KC_FUSE_HOST)
        return KC_OK;
    for (int i = 0; i < g->n_nodes; i++)
        if (!f->skip[i] && !strcmp(g->nodes[i].layer->class_name, "Add"))
            KC_TRY(kc_fuse_add(f, g, i));
    for (int i = 0; i < g->n_nodes; i++)
        if (!f->skip[i])
            KC_TRY(kc_fuse_zeropad(f, g, i));
    for (int i = 0; i < g->n_nodes; i++)
        if (!f->skip[i])
            KC_TRY(kc_fuse_dw_pair(f, g, i));
    for (int i = 0; i < g->n_nodes; i++)
        if (f->dw_of[i] >= 0)
            f->pw_of[i] = kc_fuse_proj_of(f, g, f->dw_of[i]);
    for (int i = 0; i < g->n_nodes; i++)
        if (!f->skip[i] && kc_is_conv_node(f, g, i, KC_CONV_DEPTHWISE))
            f->dwp_of[i] = kc_fuse_proj_of(f, g, i);
    for (int i = 0; i < g->n_nodes; i++)
        if (!f->skip[i])
            KC_TRY(kc_fuse_pool_pair(f, g, i));
    for (int i = 0; i < g->n_nodes; i++)
        if (!f->skip[i])
            KC_TRY(kc_fuse_maxpool_pair(f, g, i));
    for (int i = 0; i < g->n_nodes; i++)
        if (!f->skip[i])
            KC_TRY(kc_fuse_upsample_pair(f, g, i));
    for (int i = 0; i < g->n_nodes; i++)
        if (!f->skip[i])
            kc_fuse_head_pair(f, g, i);
    return KC_OK;
}

void kc_fused_release_kernel(kc_fused *f, int node)
{
    kc_layer *l = f->shadow ? f->shadow[node] : NULL;
    if (!l || !l->weights[0].data)
        return;
    /* its pages given back: a hole the larger copies cannot reuse */
    size_t bytes = (size_t)kc_shape_count(&l->weights[0].shape) * sizeof(float);
    kc_mem_free_pages(l->weights[0].data, bytes);
    l->weights[0].data = NULL;
    f->n_released++;
}

void kc_fused_free(kc_fused *f, int n_nodes)
{
    if (f->shadow)
        for (int i = 0; i < n_nodes; i++) {
            kc_layer *l = f->shadow[i];
            if (!l)
                continue;
            for (int w = 0; w < KC_MAX_WEIGHT_SPECS; w++)
                free(l->weights[w].data);
            free(l->weights);
            free(l->attrs);
            free(l);
        }
    free(f->shadow);
    free(f->alias);
    free(f->skip);
    free(f->dw_of);
    free(f->dw_on);
    free(f->pw_of);
    free(f->dwp_of);
    free(f->irb_on);
    free(f->irb_alias);
    free(f->pool_of);
    free(f->pool_on);
    free(f->maxpool_of);
    free(f->maxpool_on);
    free(f->upsample_of);
    free(f->upsample_on);
    free(f->head_of);
    free(f->head_dense);
    free(f->head_on);
    memset(f, 0, sizeof *f);
}
