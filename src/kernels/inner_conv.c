/* A convolution run inside another kernel (inner_conv.h). */
#include "kernels/inner_conv.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/threads.h"

kc_status kc_inner_conv_init(kc_inner_conv *ic, const kc_layer *outer,
                             const kc_conv_attrs *attrs, const kc_shape *kernel)
{
    memset(ic, 0, sizeof *ic);
    ic->attrs = *attrs;
    ic->layer = *outer;
    ic->layer.attrs = &ic->attrs;
    ic->layer.weights = ic->weights;
    ic->layer.n_weights = attrs->use_bias ? 2 : 1;
    ic->weights[0] = (kc_weight){.name = "kernel", .shape = *kernel};
    ic->weights[1] = (kc_weight){.name = "bias", .shape = {1, {attrs->filters}}};
    ic->weights[0].data = kc_calloc((size_t)kc_count(kernel), sizeof(float));
    if (attrs->use_bias)
        ic->weights[1].data = kc_calloc((size_t)attrs->filters, sizeof(float));
    if (!ic->weights[0].data || (attrs->use_bias && !ic->weights[1].data)) {
        kc_inner_conv_free(ic);
        return KC_ERR_NOMEM;
    }
    return KC_OK;
}

kc_status kc_inner_conv_run(kc_inner_conv *ic, const kc_exec_ctx *ctx, kc_kernel_fn conv,
                            const float *in, const kc_shape *in_shape, float *out,
                            const kc_shape *out_shape, void *spare, size_t spare_bytes)
{
    const float *const ins[1] = {in};
    float *const outs[1] = {out};
    kc_exec_ctx inner = *ctx;
    inner.layer = &ic->layer;
    inner.in = ins;
    inner.in_shape = in_shape;
    inner.n_in = 1;
    inner.out = outs;
    inner.out_shape = out_shape;
    inner.n_out = 1;
    inner.in_mask = NULL;
    inner.state = &ic->state;
    inner.w_ext = NULL; /* its own weights */
    inner.spare = spare;
    inner.spare_bytes = spare ? spare_bytes : 0;
    return conv(&inner);
}

void kc_inner_conv_free(kc_inner_conv *ic)
{
    if (ic->state)
        ic->state->free(ic->state);
    free(ic->weights[0].data);
    free(ic->weights[1].data);
    for (int i = 0; i < KC_INNER_LANES; i++)
        free(ic->out[i]);
    memset(ic, 0, sizeof *ic);
}

float *kc_inner_conv_buffer(kc_inner_conv *ic, const kc_exec_ctx *ctx, size_t bytes, void **rest,
                            size_t *rest_bytes)
{
    uintptr_t at = ((uintptr_t)ctx->spare + 63) & ~(uintptr_t)63;
    size_t skip = ctx->spare ? (size_t)(at - (uintptr_t)ctx->spare) : 0;
    *rest = ctx->spare;
    *rest_bytes = ctx->spare ? ctx->spare_bytes : 0;
    if (ctx->spare && ctx->spare_bytes >= skip + bytes) {
        *rest = (char *)at + bytes;
        *rest_bytes = ctx->spare_bytes - skip - bytes;
        return (float *)at;
    }
    int lane = kc_batch_lane() > 0 ? kc_batch_lane() : 0;
    if (lane >= KC_INNER_LANES)
        return NULL;
    if (!ic->out[lane])
        ic->out[lane] = kc_calloc(bytes / sizeof(float) + 1, sizeof(float));
    return ic->out[lane];
}
