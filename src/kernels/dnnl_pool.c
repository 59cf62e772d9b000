/* Windowed pooling through oneDNN: NHWC in and out, threaded on the same
 * OpenMP pool as the convolutions, and cut into parts the same way. Keras's "same" average pooling divides
 * by the real cells of each window (avg_exclude_padding); max pooling
 * ignores the padding. A primitive is built once per node and shape. */
#include "kernels/dnnl_pool.h"

#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/threads.h"
#include "kernels/dnnl_common.h"
#include "kernels/maxpool_nhwc.h"
#include "ops/pool.h"

typedef struct kc_dnnl_pool_part {
    kc_dnnl_prim prim;
    int hand;                /* runs kc_maxpool_nhwc over geom, not prim */
    kc_maxpool_geom geom;
    size_t src_off, dst_off; /* floats into the whole input and output */
} kc_dnnl_pool_part;

/* Cut like the convolutions around it (kc_dnnl_plan_cuts), so that a
 * pool reads what the same thread's convolution part just wrote. */
typedef struct kc_dnnl_pool_state {
    kc_kernel_state base;
    kc_shape in_shape;
    int n_parts;
    kc_dnnl_pool_part part[KC_DNNL_MAX_CUTS];
} kc_dnnl_pool_state;

static void kc_dnnl_pool_free(kc_kernel_state *s)
{
    kc_dnnl_pool_state *p = (kc_dnnl_pool_state *)s;
    for (int k = 0; k < p->n_parts; k++)
        kc_dnnl_prim_destroy(&p->part[k].prim);
    free(p);
}

/* The whole layer: Keras's "same" puts the extra cell after. */
static void kc_dnnl_pool_window(const kc_exec_ctx *ctx, const kc_pool_attrs *a, kc_dnnl_window *g)
{
    const kc_shape *in = &ctx->in_shape[0], *out = &ctx->out_shape[0];
    memset(g, 0, sizeof *g);
    g->sp = a->spatial;
    g->src[0] = in->dims[0];
    g->src[1] = in->dims[in->rank - 1];
    g->dst[0] = out->dims[0];
    g->dst[1] = out->dims[out->rank - 1];
    for (int i = 0; i < a->spatial; i++) {
        /* a folded ZeroPadding (max pooling): padding oneDNN ignores */
        g->src[2 + i] = in->dims[1 + i] - a->pad_before[i] - a->pad_after[i];
        g->dst[2 + i] = out->dims[1 + i];
        int64_t total = (g->dst[2 + i] - 1) * a->strides[i] + a->pool[i] - g->src[2 + i];
        g->strides[i] = a->strides[i];
        g->pad_l[i] = kc_conv_pad_before(g->src[2 + i], g->dst[2 + i], a->pool[i], a->strides[i],
                                         a->padding ? 1 : 0) +
                      a->pad_before[i];
        g->pad_r[i] = total - g->pad_l[i] > 0 ? total - g->pad_l[i] : 0;
    }
    g->extent0 = a->pool[0];
}

kc_status kc_dnnl_pool_prim_init(const kc_pool_attrs *a, const kc_dnnl_window *g,
                                 const_dnnl_primitive_attr_t attr, kc_dnnl_prim *p)
{
    static const dnnl_format_tag_t tag[] = {dnnl_nwc, dnnl_nhwc, dnnl_ndhwc};
    int nd = g->sp + 2;
    dnnl_dims_t kernel, dilation = {0, 0, 0};
    for (int i = 0; i < g->sp; i++)
        kernel[i] = a->pool[i];
    dnnl_memory_desc_t src_md, dst_md;
    dnnl_pooling_v2_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_alg_kind_t alg =
        a->kind == KC_POOL_MAX ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding;
    if (dnnl_memory_desc_init_by_tag(&src_md, nd, g->src, dnnl_f32, tag[g->sp - 1]) ||
        dnnl_memory_desc_init_by_tag(&dst_md, nd, g->dst, dnnl_f32, tag[g->sp - 1]) ||
        dnnl_pooling_v2_forward_desc_init(&desc, dnnl_forward_inference, alg, &src_md, &dst_md,
                                          g->strides, kernel, dilation, g->pad_l, g->pad_r) ||
        dnnl_primitive_desc_create(&pd, &desc, attr, kc_dnnl_engine(), NULL))
        return KC_ERR_UNSUPPORTED;
    static const int args[2] = {DNNL_ARG_SRC, DNNL_ARG_DST};
    const dnnl_memory_desc_t *mds[2] = {&src_md, &dst_md};
    kc_status s = kc_dnnl_prim_init(p, pd, 2, args, mds);
    dnnl_primitive_desc_destroy(pd);
    return s;
}

/* Part window g as kc_maxpool_nhwc's geometry, when it is a 2-D max
 * pooling whose every window holds an input cell and the CPU has
 * AVX-512 (maxpool_nhwc.c: 1.6-2.3x faster than oneDNN's kernel). */
static int kc_dnnl_pool_hand_geom(const kc_pool_attrs *a, const kc_dnnl_window *g,
                                  kc_maxpool_geom *m)
{
    if (a->kind != KC_POOL_MAX || g->sp != 2 || !kc_maxpool_nhwc_available())
        return 0;
    *m = (kc_maxpool_geom){.n = g->src[0], .c = g->src[1], .ih = g->src[2], .iw = g->src[3],
                           .oh = g->dst[2], .ow = g->dst[3], .kh = a->pool[0], .kw = a->pool[1],
                           .sh = g->strides[0], .sw = g->strides[1], .pad_top = g->pad_l[0],
                           .pad_left = g->pad_l[1]};
    const int64_t len[2] = {m->ih, m->iw}, out[2] = {m->oh, m->ow}, k[2] = {m->kh, m->kw},
                  st[2] = {m->sh, m->sw}, pad[2] = {m->pad_top, m->pad_left};
    for (int i = 0; i < 2; i++) /* the first window must reach the input, the last start in it */
        if (out[i] < 1 || k[i] - pad[i] < 1 || (out[i] - 1) * st[i] - pad[i] >= len[i])
            return 0;
    return 1;
}

/* team: the layer runs whole on oneDNN's threads, which the hand loop
 * (one thread) would not use. */
static kc_status kc_dnnl_pool_build_part(const kc_pool_attrs *a, const kc_dnnl_window *g,
                                         int team, kc_dnnl_pool_part *pt)
{
    if (!team && (pt->hand = kc_dnnl_pool_hand_geom(a, g, &pt->geom)))
        return KC_OK;
    dnnl_primitive_attr_t attr = kc_dnnl_attr_new();
    if (!attr)
        return KC_ERR_UNSUPPORTED;
    kc_status s = kc_dnnl_pool_prim_init(a, g, attr, &pt->prim);
    dnnl_primitive_attr_destroy(attr);
    return s;
}

typedef struct kc_dnnl_pool_build_arg {
    const kc_pool_attrs *a;
    kc_dnnl_pool_state *st;
    int team; /* one part on oneDNN's threads */
} kc_dnnl_pool_build_arg;

static kc_status kc_dnnl_pool_build_one(void *arg, int k, const kc_dnnl_window *g,
                                        size_t src_off, size_t dst_off, int solo)
{
    kc_dnnl_pool_build_arg *b = arg;
    kc_dnnl_pool_part *pt = &b->st->part[k];
    pt->src_off = src_off;
    pt->dst_off = dst_off;
    b->st->n_parts = k + 1;
    kc_status s = kc_dnnl_pool_build_part(b->a, g, b->team, pt);
    pt->prim.solo = solo;
    return s;
}

static kc_status kc_dnnl_pool_build(const kc_exec_ctx *ctx, const kc_pool_attrs *a,
                                    kc_dnnl_pool_state *st)
{
    kc_dnnl_window whole;
    kc_dnnl_pool_window(ctx, a, &whole);
    int64_t work = kc_count(&ctx->out_shape[0]);
    for (int i = 0; i < a->spatial; i++)
        work *= a->pool[i];
    int64_t act = (kc_count(&ctx->in_shape[0]) + kc_count(&ctx->out_shape[0])) * 4;
    kc_dnnl_cut cuts[KC_DNNL_MAX_CUTS];
    int n = ctx->whole ? 1 : kc_dnnl_plan_cuts(whole.src[0], whole.dst[2], act, 0, cuts);
    st->in_shape = ctx->in_shape[0];
    int small = kc_dnnl_small(work, 0);
    kc_dnnl_pool_build_arg b = {a, st, n == 1 && !small};
    kc_status s = kc_dnnl_build_cut(&whole, cuts, n, small, kc_dnnl_pool_build_one, &b);
    if (s == KC_OK || n == 1)
        return s;
    kc_error_clear(); /* a part refused: the layer runs whole */
    for (int k = 0; k < st->n_parts; k++)
        kc_dnnl_prim_destroy(&st->part[k].prim);
    st->n_parts = 0;
    b.team = !small;
    return kc_dnnl_build_cut(&whole, cuts, 1, small, kc_dnnl_pool_build_one, &b);
}

typedef struct kc_dnnl_pool_job {
    kc_dnnl_pool_state *st;
    const float *src;
    float *dst;
    kc_status status[KC_DNNL_MAX_CUTS];
} kc_dnnl_pool_job;

static void kc_dnnl_pool_job_part(void *arg, int k)
{
    kc_dnnl_pool_job *job = arg;
    kc_dnnl_pool_part *pt = &job->st->part[k];
    if (pt->hand) {
        kc_maxpool_nhwc(job->src + pt->src_off, job->dst + pt->dst_off, &pt->geom);
        job->status[k] = KC_OK;
        return;
    }
    void *ptrs[2] = {(void *)(job->src + pt->src_off), job->dst + pt->dst_off};
    job->status[k] = kc_dnnl_run_lane(&pt->prim, ptrs, k);
}

int kc_dnnl_pool_parts(const kc_kernel_state *state)
{
    if (!state || state->free != kc_dnnl_pool_free)
        return 0;
    return ((const kc_dnnl_pool_state *)state)->n_parts;
}

int kc_dnnl_pool_hand_parts(const kc_kernel_state *state)
{
    int n = 0;
    if (state && state->free == kc_dnnl_pool_free)
        for (int k = 0; k < ((const kc_dnnl_pool_state *)state)->n_parts; k++)
            n += ((const kc_dnnl_pool_state *)state)->part[k].hand;
    return n;
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
        if (kc_dnnl_pool_build(ctx, a, st) != KC_OK) {
            kc_dnnl_pool_free(&st->base);
            kc_error_clear();
            return KC_OK; /* not handled: the loops run instead */
        }
        *ctx->state = &st->base;
    }
    kc_dnnl_pool_job job = {st, ctx->in[0], ctx->out[0], {KC_OK}};
    if (st->n_parts == 1)
        kc_dnnl_pool_job_part(&job, 0);
    else
        kc_parallel(st->n_parts, kc_dnnl_pool_job_part, &job);
    for (int k = 0; k < st->n_parts; k++)
        if (job.status[k] != KC_OK) /* the message stayed on the failing thread */
            return kc_fail(job.status[k], "oneDNN failed on part %d of a pooling", k);
    *handled = 1;
    return KC_OK;
}
