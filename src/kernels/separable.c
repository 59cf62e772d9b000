/* SeparableConv1D/2D as what it is: a depthwise convolution (no bias,
 * linear) into a buffer, then a 1x1 convolution of it with the layer's
 * bias and activation, each run by the convolution kernels' own dispatch
 * (kerasc's depthwise loops or oneDNN; the 1x1 on pw.c or oneDNN), with
 * their states kept here. Before, the layer ran a scalar depthwise loop
 * on one thread and a GEMM into a buffer allocated on every run:
 * Xception's 34 separable layers took 121 ms of its 143 at batch 1.
 *
 * The buffer is the plan's spare range when it fits, else one of the
 * state's, made once per input shape. Keras's weights are read where they
 * are (the depthwise kernel (k.., c, m), the pointwise (1.., c*m, f), the
 * bias): the layers made here point at them, so the session never frees
 * them for a packed copy of this layer's (weights_cached stays 0). */
#include "kernels/separable.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "ops/conv.h"
#include "ops/op.h"

typedef struct kc_sep_state {
    kc_kernel_state base;
    kc_shape in_shape, mid_shape;
    kc_conv_attrs dw_attrs, pw_attrs;
    kc_layer dw, pw;
    kc_weight dw_w[1], pw_w[2];
    kc_kernel_state *dw_state, *pw_state;
    float *mid;      /* the state's buffer, or NULL: the spare range */
    int64_t mid_floats;
} kc_sep_state;

static void kc_sep_free_sub(kc_kernel_state **s)
{
    if (*s && (*s)->free)
        (*s)->free(*s);
    *s = NULL;
}

static void kc_sep_free(kc_kernel_state *s)
{
    kc_sep_state *st = (kc_sep_state *)s;
    kc_sep_free_sub(&st->dw_state);
    kc_sep_free_sub(&st->pw_state);
    free(st->mid);
    free(st);
}

/* The depthwise and 1x1 layers of separable layer `l` (attrs a). */
static int kc_sep_layers(const kc_layer *l, const kc_conv_attrs *a, kc_sep_state *st)
{
    const char *dw_class = a->spatial == 1 ? "DepthwiseConv1D" : "DepthwiseConv2D";
    const char *pw_class = a->spatial == 1 ? "Conv1D" : "Conv2D";
    st->dw_attrs = *a;
    st->dw_attrs.kind = KC_CONV_DEPTHWISE;
    st->dw_attrs.filters = 0;
    st->dw_attrs.use_bias = 0;
    st->dw_attrs.activation = "linear";
    st->dw_attrs.accumulate = 0;
    st->pw_attrs = *a;
    st->pw_attrs.kind = KC_CONV_PLAIN;
    st->pw_attrs.depth_multiplier = 1;
    st->pw_attrs.groups = 1;
    st->pw_attrs.padding = 0;
    for (int i = 0; i < 3; i++) {
        st->pw_attrs.kernel[i] = st->pw_attrs.strides[i] = st->pw_attrs.dilation[i] = 1;
        st->pw_attrs.pad_before[i] = st->pw_attrs.pad_after[i] = 0;
    }
    st->dw = (kc_layer){.name = l->name, .class_name = (char *)dw_class,
                        .def = kc_op_lookup(NULL, dw_class), .attrs = &st->dw_attrs,
                        .weights = st->dw_w, .n_weights = 1, .n_calls = 1};
    st->pw = (kc_layer){.name = l->name, .class_name = (char *)pw_class,
                        .def = kc_op_lookup(NULL, pw_class), .attrs = &st->pw_attrs,
                        .weights = st->pw_w, .n_weights = a->use_bias ? 2 : 1, .n_calls = 1};
    if (l->n_weights < (a->use_bias ? 3 : 2) || !st->dw.def || !st->pw.def ||
        !kc_kernel_lookup(st->dw.def) || !kc_kernel_lookup(st->pw.def))
        return 0;
    st->dw_w[0].shape = l->weights[0].shape;
    st->pw_w[0].shape = l->weights[1].shape;
    if (a->use_bias)
        st->pw_w[1].shape = l->weights[2].shape;
    return 1;
}

static kc_status kc_sep_build(const kc_exec_ctx *ctx, const kc_conv_attrs *a, kc_sep_state **out)
{
    *out = NULL;
    kc_sep_state *st = kc_calloc(1, sizeof *st);
    if (!st)
        return KC_ERR_NOMEM;
    st->base.free = kc_sep_free;
    if (!kc_sep_layers(ctx->layer, a, st)) {
        free(st);
        return KC_OK; /* not taken: the plain path runs */
    }
    st->in_shape = ctx->in_shape[0];
    st->mid_shape = ctx->out_shape[0];
    int last = st->mid_shape.rank - 1;
    st->mid_shape.dims[last] = ctx->in_shape[0].dims[last] * a->depth_multiplier;
    st->mid_floats = kc_shape_count(&st->mid_shape);
    *out = st;
    return KC_OK;
}

/* The depthwise output's buffer: the spare range when it holds it
 * (*rest then what is left of the range), else the state's own. */
static float *kc_sep_mid(const kc_exec_ctx *ctx, kc_sep_state *st, void **rest, size_t *rest_bytes)
{
    size_t bytes = (size_t)st->mid_floats * sizeof(float);
    uintptr_t at = ((uintptr_t)ctx->spare + 63) & ~(uintptr_t)63;
    size_t skip = ctx->spare ? at - (uintptr_t)ctx->spare : 0;
    *rest = NULL;
    *rest_bytes = 0;
    if (ctx->spare && ctx->spare_bytes >= skip + bytes) {
        *rest = (char *)at + bytes;
        *rest_bytes = ctx->spare_bytes - skip - bytes;
        return (float *)at;
    }
    if (!st->mid)
        st->mid = kc_alloc_array((size_t)st->mid_floats, sizeof(float));
    return st->mid;
}

kc_status kc_separable_conv(const kc_exec_ctx *ctx, int *handled)
{
    *handled = 0;
    const kc_conv_attrs *a = ctx->layer->attrs;
    if (!ctx->state || a->kind != KC_CONV_SEPARABLE || a->spatial > 2 || a->accumulate ||
        ctx->n_in != 1)
        return KC_OK;
    kc_sep_state *st = (kc_sep_state *)*ctx->state;
    if (st && (st->base.free != kc_sep_free || !kc_shape_equal(&st->in_shape, &ctx->in_shape[0])))
        st = kc_kernel_state_drop(ctx);
    if (!st) {
        KC_TRY(kc_sep_build(ctx, a, &st));
        if (!st)
            return KC_OK;
        *ctx->state = &st->base;
    }
    void *rest;
    size_t rest_bytes;
    float *mid = kc_sep_mid(ctx, st, &rest, &rest_bytes);
    if (!mid)
        return KC_ERR_NOMEM;
    const float *dw_ext[1] = {kc_w(ctx, 0)}, *pw_ext[2] = {kc_w(ctx, 1), kc_w(ctx, 2)};
    st->dw_w[0].data = (float *)dw_ext[0];
    st->pw_w[0].data = (float *)pw_ext[0];
    st->pw_w[1].data = (float *)pw_ext[1];
    float *mid_out[1] = {mid}, *const *final_out = ctx->out;
    const float *mid_in[1] = {mid};
    kc_exec_ctx sub = *ctx;
    sub.layer = &st->dw;
    sub.out = mid_out;
    sub.out_shape = &st->mid_shape;
    sub.n_out = 1;
    sub.state = &st->dw_state;
    sub.w_ext = ctx->w_ext ? dw_ext : NULL;
    sub.spare = rest;
    sub.spare_bytes = rest_bytes;
    KC_TRY(kc_kernel_lookup(st->dw.def)(&sub));
    sub.layer = &st->pw;
    sub.in = mid_in;
    sub.in_shape = &st->mid_shape;
    sub.out = final_out;
    sub.out_shape = ctx->out_shape;
    sub.state = &st->pw_state;
    sub.w_ext = ctx->w_ext ? pw_ext : NULL;
    KC_TRY(kc_kernel_lookup(st->pw.def)(&sub));
    *handled = 1;
    return KC_OK;
}
