/* Windowed pooling through oneDNN: NHWC in and out, threaded on the same
 * OpenMP pool as the convolutions. Keras's "same" average pooling divides
 * by the real cells of each window (avg_exclude_padding); max pooling
 * ignores the padding. A primitive is built once per node and shape. */
#include "kernels/dnnl_pool.h"

#include <stdlib.h>

#include "base/mem.h"
#include "kernels/dnnl_common.h"
#include "ops/pool.h"

typedef struct kc_dnnl_pool_state {
    kc_kernel_state base;
    kc_shape in_shape;
    kc_dnnl_prim prim;
} kc_dnnl_pool_state;

static void kc_dnnl_pool_free(kc_kernel_state *s)
{
    kc_dnnl_pool_state *p = (kc_dnnl_pool_state *)s;
    kc_dnnl_prim_destroy(&p->prim);
    free(p);
}

static kc_status kc_dnnl_pool_build(const kc_exec_ctx *ctx, const kc_pool_attrs *a,
                                    kc_dnnl_pool_state *st)
{
    static const dnnl_format_tag_t tag[] = {dnnl_nwc, dnnl_nhwc, dnnl_ndhwc};
    const kc_shape *in = &ctx->in_shape[0], *out = &ctx->out_shape[0];
    int sp = a->spatial, nd = sp + 2;
    dnnl_dims_t src = {in->dims[0], in->dims[in->rank - 1]};
    dnnl_dims_t dst = {out->dims[0], out->dims[out->rank - 1]};
    dnnl_dims_t strides, kernel, dilation, pad_l, pad_r;
    for (int i = 0; i < sp; i++) {
        src[2 + i] = in->dims[1 + i];
        dst[2 + i] = out->dims[1 + i];
        int64_t total = (dst[2 + i] - 1) * a->strides[i] + a->pool[i] - src[2 + i];
        strides[i] = a->strides[i];
        kernel[i] = a->pool[i];
        dilation[i] = 0;
        pad_l[i] = a->padding && total > 0 ? total / 2 : 0;
        pad_r[i] = total - pad_l[i] > 0 ? total - pad_l[i] : 0;
    }
    dnnl_memory_desc_t src_md, dst_md;
    dnnl_pooling_v2_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_t attr = kc_dnnl_attr_new();
    dnnl_alg_kind_t alg =
        a->kind == KC_POOL_MAX ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding;
    if (!attr || dnnl_memory_desc_init_by_tag(&src_md, nd, src, dnnl_f32, tag[sp - 1]) ||
        dnnl_memory_desc_init_by_tag(&dst_md, nd, dst, dnnl_f32, tag[sp - 1]) ||
        dnnl_pooling_v2_forward_desc_init(&desc, dnnl_forward_inference, alg, &src_md, &dst_md,
                                          strides, kernel, dilation, pad_l, pad_r) ||
        dnnl_primitive_desc_create(&pd, &desc, attr, kc_dnnl_engine(), NULL)) {
        if (attr)
            dnnl_primitive_attr_destroy(attr);
        return KC_ERR_UNSUPPORTED;
    }
    dnnl_primitive_attr_destroy(attr);
    static const int args[2] = {DNNL_ARG_SRC, DNNL_ARG_DST};
    const dnnl_memory_desc_t *mds[2] = {&src_md, &dst_md};
    kc_status s = kc_dnnl_prim_init(&st->prim, pd, 2, args, mds);
    dnnl_primitive_desc_destroy(pd);
    st->in_shape = *in;
    return s;
}

kc_status kc_dnnl_pool(const kc_exec_ctx *ctx, int *handled)
{
    const kc_pool_attrs *a = ctx->layer->attrs;
    *handled = 0;
    if (!ctx->state || a->global || a->spatial < 1 || a->spatial > 3 || !kc_dnnl_ready())
        return KC_OK;
    kc_dnnl_pool_state *st = (kc_dnnl_pool_state *)*ctx->state;
    if (st && !kc_shape_equal(&st->in_shape, &ctx->in_shape[0]))
        st = kc_kernel_state_drop(ctx);
    if (!st) {
        st = kc_calloc(1, sizeof *st);
        if (!st)
            return KC_ERR_NOMEM;
        st->base.free = kc_dnnl_pool_free;
        int64_t work = kc_count(&ctx->out_shape[0]);
        for (int i = 0; i < a->spatial; i++)
            work *= a->pool[i];
        int solo = work < KC_DNNL_SOLO_WORK;
        int prev = kc_dnnl_solo_enter(solo);
        kc_status bst = kc_dnnl_pool_build(ctx, a, st);
        kc_dnnl_solo_leave(solo, prev);
        st->prim.solo = solo;
        if (bst != KC_OK) {
            kc_dnnl_pool_free(&st->base);
            kc_error_clear();
            return KC_OK; /* not handled: the loops run instead */
        }
        *ctx->state = &st->base;
    }
    void *ptrs[2] = {(void *)ctx->in[0], ctx->out[0]};
    KC_TRY(kc_dnnl_run(&st->prim, ptrs));
    *handled = 1;
    return KC_OK;
}
