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

#include "base/env.h"
#include "base/mem.h"
#include "base/threads.h"
#include "kernels/dnnl_common.h"
#include "ops/core.h"

#define KC_DNNL_MATMUL_PACK_ROWS 8

/* From this many rows (with AVX-512, where one call takes all of them),
 * when the activations outweigh the weights every part reads (as
 * kc_dnnl_plan_cuts has it for convolutions), the rows are cut between
 * the threads, each part a primitive of its own run alone on its thread,
 * which then applies the layer's element-wise activation to its rows
 * while they are in its cache. oneDNN 2.6's brg matmul on two threads was
 * no faster than on one for many rows and few input channels: on the
 * 2-core Zen 5 of bench/results ConvNeXtTiny's 3136 x 96 -> 384 (its
 * 56x56 stage) took 1.87 ms on two threads against 2.21 on one, 3136 x
 * 384 -> 96 1.31 against 1.23, its 28x28 stage's 784 x 192 <-> 768 1.18
 * against 1.23; cut, the first with its GELU 1.70 -> 1.03-1.06 ms, and
 * the whole model at batch 1 40.5-41.7 -> 32.2-33.9 ms. Its 14x14 and 7x7
 * stages (196 and 49 rows, weights larger than the activations) took
 * half the time on two threads uncut, and 5-30% more cut; a transformer's
 * 512 x 768 -> 3072 was level either way. A row's sums run over the
 * input channels in the same blocks whatever the rows beside it
 * (test_cuts), so a cut changes no bits. KC_CUT=0: never. */
#define KC_DNNL_MATMUL_CUT_ROWS 512

typedef struct kc_dnnl_matmul_state {
    kc_kernel_state base;
    kc_shape in_shape;
    kc_dnnl_prim prim;
    int has_bias;
    int w_plain;            /* built for streamed weights (ctx->w_ext) */
    int64_t rows, calls;    /* rows per run of the primitive, runs per layer */
    float *packed;          /* W in the primitive's layout, or NULL: Keras's */
    dnnl_memory_desc_t w_md;  /* that layout (every part's) */
    /* parts > 1: the rows cut between the threads, part k's [lo[k],
     * lo[k + 1]) on its own primitive part[k] (part[0] is prim) */
    int parts;
    int64_t lo[KC_DNNL_MAX_CUTS + 1];
    kc_dnnl_prim part[KC_DNNL_MAX_CUTS];
} kc_dnnl_matmul_state;

static void kc_dnnl_matmul_free(kc_kernel_state *s)
{
    kc_dnnl_matmul_state *m = (kc_dnnl_matmul_state *)s;
    kc_dnnl_prim_destroy(&m->prim);
    for (int k = 1; k < m->parts; k++)
        kc_dnnl_prim_destroy(&m->part[k]);
    kc_free_weights(m->packed);
    free(m);
}

/* attr with a sum post-op: dst = (x·W + b) + what dst held, a fused
 * residual (kc_dense_attrs.accumulate) added after the bias as the Add
 * layer would. */
static kc_status kc_dnnl_attr_sum(dnnl_primitive_attr_t attr)
{
    dnnl_post_ops_t ops = NULL;
    int bad = dnnl_post_ops_create(&ops) != dnnl_success ||
              dnnl_post_ops_append_sum(ops, 1.0f) != dnnl_success ||
              dnnl_primitive_attr_set_post_ops(attr, ops) != dnnl_success;
    if (ops)
        dnnl_post_ops_destroy(ops);
    return bad ? KC_ERR_UNSUPPORTED : KC_OK;
}

/* The primitive for `rows` rows into *prim. The first one built packs W
 * (when it packs: pack_rows rows or more); a later one must want the same
 * layout. */
static kc_status kc_dnnl_matmul_build(const kc_exec_ctx *ctx, kc_dnnl_matmul_state *st,
                                      int64_t rows, int64_t pack_rows, kc_dnnl_prim *prim)
{
    const kc_dense_attrs *a = ctx->layer->attrs;
    const kc_shape *in = &ctx->in_shape[0];
    int64_t k = in->dims[in->rank - 1];
    dnnl_dims_t src = {rows, k}, w = {k, a->units}, dst = {src[0], a->units};
    dnnl_dims_t b = {1, a->units};
    dnnl_memory_desc_t src_md, w_md, b_md, dst_md, keras_w_md;
    int pack = !ctx->w_ext && pack_rows >= KC_DNNL_MATMUL_PACK_ROWS;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_t attr = kc_dnnl_attr_new();
    st->has_bias = a->use_bias;
    if (attr && a->accumulate && kc_dnnl_attr_sum(attr) != KC_OK) {
        dnnl_primitive_attr_destroy(attr);
        return KC_ERR_UNSUPPORTED;
    }
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
    if (prim != &st->prim) { /* a later part: the first's layout */
        if (!dnnl_memory_desc_equal(&w_md, &st->w_md))
            s = KC_ERR_UNSUPPORTED;
    } else if (!dnnl_memory_desc_equal(&w_md, &keras_w_md))
        s = kc_dnnl_pack(&keras_w_md, &w_md, kc_w(ctx, 0), ctx->spare, ctx->spare_bytes, &st->packed);
    st->w_md = w_md;
    static const int args[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
    const dnnl_memory_desc_t *mds[4] = {&src_md, &w_md, &dst_md, &b_md};
    if (s == KC_OK)
        s = kc_dnnl_prim_init(prim, pd, st->has_bias ? 4 : 3, args, mds);
    dnnl_primitive_desc_destroy(pd);
    return s;
}

/* How many row parts for `rows` rows of k inputs and `units` outputs
 * (1: one primitive over them all). */
static int kc_dnnl_matmul_parts(const kc_exec_ctx *ctx, int64_t rows, int64_t k, int64_t units)
{
    int n = kc_threads_max() < KC_DNNL_MAX_CUTS ? kc_threads_max() : KC_DNNL_MAX_CUTS;
    int64_t act_bytes = (int64_t)sizeof(float) * rows * (k + units);
    int64_t weight_bytes = (int64_t)sizeof(float) * k * units;
    if (ctx->whole || ctx->w_ext || n < 2 || rows < KC_DNNL_MATMUL_CUT_ROWS ||
        act_bytes < weight_bytes * (n - 1) || kc_env_off("KC_CUT"))
        return 1;
    return n;
}

/* The state's primitives: one over all rows (st->rows of them, st->calls
 * times) or one per row part, each built for one thread. */
static kc_status kc_dnnl_matmul_plan(const kc_exec_ctx *ctx, kc_dnnl_matmul_state *st)
{
    const kc_dense_attrs *a = ctx->layer->attrs;
    const kc_shape *in = &ctx->in_shape[0];
    int64_t k = in->dims[in->rank - 1], rows = k > 0 ? kc_count(in) / k : 0;
    int by_row = !kc_dnnl_avx512();
    st->rows = by_row ? 1 : rows;
    st->calls = by_row ? rows : 1;
    int parts = by_row ? 1 : kc_dnnl_matmul_parts(ctx, rows, k, a->units);
    if (parts > 1) {
        int prev = kc_dnnl_solo_enter(1);
        kc_status s = KC_OK;
        for (int p = 0; p <= parts; p++)
            st->lo[p] = rows * p / parts;
        for (int p = 0; p < parts && s == KC_OK; p++) {
            s = kc_dnnl_matmul_build(ctx, st, st->lo[p + 1] - st->lo[p], rows,
                                     p ? &st->part[p] : &st->prim);
            st->parts = p + 1; /* the built ones are freed with the state */
        }
        kc_dnnl_solo_leave(1, prev);
        st->prim.solo = 1;
        for (int p = 1; p < st->parts; p++)
            st->part[p].solo = 1;
        if (s == KC_OK)
            s = kc_dnnl_lanes(parts);
        if (s == KC_OK)
            return KC_OK;
        /* a part oneDNN refused: one primitive over all rows instead */
        kc_error_clear();
        for (int p = 1; p < st->parts; p++)
            kc_dnnl_prim_destroy(&st->part[p]);
        kc_dnnl_prim_destroy(&st->prim);
        kc_free_weights(st->packed);
        st->packed = NULL;
        st->parts = 0;
    }
    int solo = kc_dnnl_small(st->rows * a->units, (int64_t)sizeof(float) * k * a->units);
    int prev = kc_dnnl_solo_enter(solo);
    kc_status s = kc_dnnl_matmul_build(ctx, st, st->rows, st->rows, &st->prim);
    kc_dnnl_solo_leave(solo, prev);
    st->prim.solo = solo;
    return s;
}

/* A run of the row parts: the buffers, each part's outcome. */
typedef struct kc_dnnl_matmul_job {
    kc_dnnl_matmul_state *st;
    const kc_exec_ctx *ctx;
    const float *w;
    const char *act;     /* applied by each part to its rows, or NULL */
    kc_status status[KC_DNNL_MAX_CUTS];
} kc_dnnl_matmul_job;

/* prim over the rows from `lo` on (as many as it was built for), W at w,
 * on stream lane `lane`. */
static kc_status kc_dnnl_matmul_rows(const kc_exec_ctx *ctx, kc_dnnl_prim *prim, const float *w,
                                     int64_t lo, int lane)
{
    const kc_shape *in = &ctx->in_shape[0];
    int64_t k = in->dims[in->rank - 1], units = ((const kc_dense_attrs *)ctx->layer->attrs)->units;
    void *ptrs[4] = {(void *)(ctx->in[0] + lo * k), (void *)w, ctx->out[0] + lo * units,
                     (void *)kc_w(ctx, 1)};
    return kc_dnnl_run_lane(prim, ptrs, lane);
}

static void kc_dnnl_matmul_part(void *arg, int p)
{
    kc_dnnl_matmul_job *job = arg;
    kc_dnnl_matmul_state *st = job->st;
    const kc_exec_ctx *ctx = job->ctx;
    int64_t units = ((const kc_dense_attrs *)ctx->layer->attrs)->units, lo = st->lo[p];
    kc_status s = kc_dnnl_matmul_rows(ctx, p ? &st->part[p] : &st->prim, job->w, lo, p);
    if (s == KC_OK && job->act)
        s = kc_activation_apply(job->act, ctx->keras_major, ctx->out[0] + lo * units,
                                (st->lo[p + 1] - lo) * units, units);
    job->status[p] = s;
}

kc_status kc_dnnl_dense(const kc_exec_ctx *ctx, int *handled, int *act_done)
{
    *handled = 0;
    *act_done = 0;
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
        if (kc_dnnl_matmul_plan(ctx, st) != KC_OK) {
            kc_dnnl_matmul_free(&st->base);
            kc_error_clear();
            return KC_OK; /* not handled: the GEMM path runs instead */
        }
        st->in_shape = ctx->in_shape[0];
        st->w_plain = ctx->w_ext != NULL;
        st->base.weights_cached = st->packed != NULL;
        *ctx->state = &st->base;
    }
    const float *w = st->packed ? st->packed : kc_w(ctx, 0);
    const kc_dense_attrs *a = ctx->layer->attrs;
    if (st->parts > 1) {
        int act = kc_activation_elementwise(a->activation, ctx->keras_major);
        kc_dnnl_matmul_job job = {st, ctx, w, act ? a->activation : NULL, {KC_OK}};
        kc_parallel(st->parts, kc_dnnl_matmul_part, &job);
        for (int p = 0; p < st->parts; p++)
            if (job.status[p] != KC_OK) /* the message stayed on the failing thread */
                return kc_fail(job.status[p], "oneDNN failed on part %d of a Dense layer", p);
        *handled = 1;
        *act_done = act;
        return KC_OK;
    }
    for (int64_t c = 0; c < st->calls; c++)
        KC_TRY(kc_dnnl_matmul_rows(ctx, &st->prim, w, c * st->rows, 0));
    *handled = 1;
    return KC_OK;
}

/* For tests: the row parts of a state of this kernel (1: uncut), 0 for
 * another kernel's state. */
int kc_dnnl_dense_parts(const kc_kernel_state *state)
{
    if (!state || state->free != kc_dnnl_matmul_free)
        return 0;
    const kc_dnnl_matmul_state *st = (const kc_dnnl_matmul_state *)state;
    return st->parts > 1 ? st->parts : 1;
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
