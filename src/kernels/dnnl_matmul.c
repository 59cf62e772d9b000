/* Dense as a oneDNN matmul primitive, built once per node and input
 * shape: x (m, k) · W (k, n) + b. Unlike dnnl_sgemm, which allocates its
 * packing buffers on every call with more than one row, a primitive packs
 * into the user scratchpad (dnnl_common.c).
 *
 * From KC_DNNL_MATMUL_PACK_ROWS rows on, W is reordered once, at build,
 * into the layout the primitive picks, and the session may then free
 * Keras's array (weights_cached): read in Keras's layout, the primitive
 * repacks blocks of W on every run. Measured here, 2 threads, weights
 * cold: 8 x 2048 x 1000 (a classifier at batch 8) 0.29 -> 0.21 ms,
 * 128 x 3072 x 768 2.32 -> 1.74 ms, 32 x 4096 x 4096 7.0 -> 3.9 ms. With
 * fewer rows the product is bound by reading W either way (1 x 2048 x
 * 1000: 0.15-0.27 ms both), so W is read in place, as it always is when
 * streamed (ctx->w_ext).
 *
 * Without AVX-512 oneDNN 2.6's matmul is its gemm:jit, whose sums for one
 * row (a gemv) and for several run in different orders: a batch of two
 * on two threads and the same images in lanes of one (runtime/lanes.c)
 * differed in the last bits of ResNet50's classifier, where the whole
 * and the split runs must agree bit for bit (test_stage). There each row
 * runs on its own, as a lane of one image runs it (gemv's sums do not
 * depend on the thread count: its threads take columns). Such layers
 * normally run on dense.c's loop instead; this is its fallback
 * (streamed weights, KC_DENSE_OWN=0, a CPU without AVX2). */
#include "kernels/dnnl_matmul.h"

#include <stdlib.h>

#include "base/mem.h"
#include "kernels/dnnl_common.h"
#include "ops/core.h"

#define KC_DNNL_MATMUL_PACK_ROWS 8

typedef struct kc_dnnl_matmul_state {
    kc_kernel_state base;
    kc_shape in_shape;
    kc_dnnl_prim prim;
    int has_bias;
    int w_plain;            /* built for streamed weights (ctx->w_ext) */
    int64_t rows, calls;    /* rows per run of the primitive, runs per layer */
    float *packed;          /* W in the primitive's layout, or NULL: Keras's */
} kc_dnnl_matmul_state;

static void kc_dnnl_matmul_free(kc_kernel_state *s)
{
    kc_dnnl_matmul_state *m = (kc_dnnl_matmul_state *)s;
    kc_dnnl_prim_destroy(&m->prim);
    free(m->packed);
    free(m);
}

static kc_status kc_dnnl_matmul_build(const kc_exec_ctx *ctx, kc_dnnl_matmul_state *st)
{
    const kc_dense_attrs *a = ctx->layer->attrs;
    const kc_shape *in = &ctx->in_shape[0];
    int64_t k = in->dims[in->rank - 1];
    dnnl_dims_t src = {st->rows, k}, w = {k, a->units}, dst = {src[0], a->units};
    dnnl_dims_t b = {1, a->units};
    dnnl_memory_desc_t src_md, w_md, b_md, dst_md, keras_w_md;
    int pack = !ctx->w_ext && src[0] >= KC_DNNL_MATMUL_PACK_ROWS;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_t attr = kc_dnnl_attr_new();
    st->has_bias = a->use_bias;
    if (!attr || k < 1 || src[0] < 1 ||
        dnnl_memory_desc_init_by_tag(&src_md, 2, src, dnnl_f32, dnnl_ab) ||
        dnnl_memory_desc_init_by_tag(&keras_w_md, 2, w, dnnl_f32, dnnl_ab) ||
        dnnl_memory_desc_init_by_tag(&w_md, 2, w, dnnl_f32,
                                     pack ? dnnl_format_tag_any : dnnl_ab) ||
        dnnl_memory_desc_init_by_tag(&b_md, 2, b, dnnl_f32, dnnl_ab) ||
        dnnl_memory_desc_init_by_tag(&dst_md, 2, dst, dnnl_f32, dnnl_ab) ||
        dnnl_matmul_desc_init(&desc, &src_md, &w_md, st->has_bias ? &b_md : NULL, &dst_md) ||
        dnnl_primitive_desc_create(&pd, &desc, attr, kc_dnnl_engine(), NULL)) {
        if (attr)
            dnnl_primitive_attr_destroy(attr);
        return KC_ERR_UNSUPPORTED;
    }
    dnnl_primitive_attr_destroy(attr);
    w_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    kc_status s = KC_OK;
    if (!dnnl_memory_desc_equal(&w_md, &keras_w_md))
        s = kc_dnnl_pack(&keras_w_md, &w_md, kc_w(ctx, 0), ctx->spare, ctx->spare_bytes, &st->packed);
    static const int args[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
    const dnnl_memory_desc_t *mds[4] = {&src_md, &w_md, &dst_md, &b_md};
    if (s == KC_OK)
        s = kc_dnnl_prim_init(&st->prim, pd, st->has_bias ? 4 : 3, args, mds);
    dnnl_primitive_desc_destroy(pd);
    st->in_shape = *in;
    st->w_plain = ctx->w_ext != NULL;
    st->base.weights_cached = st->packed != NULL;
    return s;
}

kc_status kc_dnnl_dense(const kc_exec_ctx *ctx, int *handled)
{
    *handled = 0;
    if (!ctx->state || !kc_dnnl_ready())
        return KC_OK;
    kc_dnnl_matmul_state *st = (kc_dnnl_matmul_state *)*ctx->state;
    if (st && (!kc_shape_equal(&st->in_shape, &ctx->in_shape[0]) ||
               st->w_plain != (ctx->w_ext != NULL)))
        st = kc_kernel_state_drop(ctx);
    if (!st) {
        st = kc_calloc(1, sizeof *st);
        if (!st)
            return KC_ERR_NOMEM;
        st->base.free = kc_dnnl_matmul_free;
        const kc_dense_attrs *a = ctx->layer->attrs;
        const kc_shape *in = &ctx->in_shape[0];
        int64_t k = in->dims[in->rank - 1], rows = k > 0 ? kc_count(in) / k : 0;
        int by_row = !kc_dnnl_avx512();
        st->rows = by_row ? 1 : rows;
        st->calls = by_row ? rows : 1;
        int solo = kc_dnnl_small(st->rows * a->units, (int64_t)sizeof(float) * k * a->units);
        int prev = kc_dnnl_solo_enter(solo);
        kc_status bst = kc_dnnl_matmul_build(ctx, st);
        kc_dnnl_solo_leave(solo, prev);
        st->prim.solo = solo;
        if (bst != KC_OK) {
            kc_dnnl_matmul_free(&st->base);
            kc_error_clear();
            return KC_OK; /* not handled: the GEMM path runs instead */
        }
        *ctx->state = &st->base;
    }
    const float *w = st->packed ? st->packed : kc_w(ctx, 0);
    const kc_shape *in = &ctx->in_shape[0];
    int64_t k = in->dims[in->rank - 1], units = ((const kc_dense_attrs *)ctx->layer->attrs)->units;
    for (int64_t c = 0; c < st->calls; c++) {
        void *ptrs[4] = {(void *)(ctx->in[0] + c * st->rows * k), (void *)w,
                         ctx->out[0] + c * st->rows * units, (void *)kc_w(ctx, 1)};
        KC_TRY(kc_dnnl_run(&st->prim, ptrs));
    }
    *handled = 1;
    return KC_OK;
}

int kc_dnnl_dense_packed(const kc_kernel_state *state)
{
    if (!state || state->free != kc_dnnl_matmul_free)
        return -1;
    return ((const kc_dnnl_matmul_state *)state)->packed != NULL;
}

int kc_dnnl_dense_solo(const kc_kernel_state *state)
{
    if (!state || state->free != kc_dnnl_matmul_free)
        return -1;
    return ((const kc_dnnl_matmul_state *)state)->prim.solo;
}
