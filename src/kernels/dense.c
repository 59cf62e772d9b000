/* Dense on kerasc's own loop.
 *
 * Why: without AVX-512 oneDNN 2.6's matmul is gemm:jit, whose sums for
 * one row (its gemv) and for several run in different orders, so a lane
 * of one image and a whole batch gave different bits (test_stage), and
 * its gemv was slow: MobileNetV2's 1280 -> 1000 classifier 0.57 ms at
 * batch 1 against ONNX Runtime's 0.31 on an AVX2 AMD EPYC (Zen 3), where
 * reading its 5 MB of weights is the work. Here each output's sum runs
 * in one order (blocks of 16 inputs, each from zero, added in order, then
 * the bias: dense_simd.inc), the same for any row count and any cut, and
 * the same as kernels/pw_head.c's, which runs a classifier inside the 1x1
 * convolution before it; each thread reads only its
 * panels of the weights, packed once at build (the Keras array may then
 * be freed).
 *
 * How: the weights in panels of 16 output units, [k][16] each; the
 * threads take runs of panels; a panel runs its rows four at a time
 * with AVX-512 (one at a time with AVX2), four blocks of each row's sums
 * at once (dense_simd.inc), the last panel masked. */
#include "kernels/dense.h"

#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/mem.h"
#include "base/threads.h"
#include "kernels/dnnl_common.h"
#include "kernels/isa.h"
#include "ops/core.h"

/* Vectors (16 output units) a thread takes at least. */
#define KC_DENSE_MIN_VECTORS 4

typedef void (*kc_dense_panel_fn)(const float *x, int64_t rows, int64_t k, const float *w,
                                  const float *bias, float *y, int64_t ldy, int64_t cols, int add);
void kc_dense_panel_avx512(const float *, int64_t, int64_t, const float *, const float *, float *,
                           int64_t, int64_t, int);
void kc_dense_panel_avx2(const float *, int64_t, int64_t, const float *, const float *, float *,
                         int64_t, int64_t, int);

typedef struct kc_dense_state {
    kc_kernel_state base;
    kc_shape in_shape;
    kc_dense_panel_fn panel;
    int64_t k, n, rows, vecs;
    float *packed; /* vector v at packed + v * k * 16: [k][16], zero past n */
    int parts;
} kc_dense_state;

static void kc_dense_free(kc_kernel_state *s)
{
    kc_dense_state *st = (kc_dense_state *)s;
    kc_free_weights(st->packed);
    free(st);
}

/* Output units of vector v: 16, fewer in the last. */
static int64_t kc_dense_cols(const kc_dense_state *st, int64_t v)
{
    return st->n - 16 * v < 16 ? st->n - 16 * v : 16;
}

/* A span: the blocks the loop runs at once (dense.h). */
#define KC_DENSE_SPAN (KC_DENSE_CHAINS * KC_DENSE_BLOCK)

/* Input r's row in a panel: in whole spans, interleaved as the loop
 * reads them (input b * 16 + i of a span at its row i * 4 + b), so that
 * the panel streams in order; past them, in order. */
static int64_t kc_dense_row(int64_t r, int64_t k)
{
    int64_t span0 = r / KC_DENSE_SPAN * KC_DENSE_SPAN, in = r - span0;
    if (span0 + KC_DENSE_SPAN > k)
        return r;
    return span0 + in % KC_DENSE_BLOCK * (KC_DENSE_SPAN / KC_DENSE_BLOCK) + in / KC_DENSE_BLOCK;
}

/* Keras's kernel (k, n) into the vectors' panels. */
static kc_status kc_dense_pack(kc_dense_state *st, const float *w)
{
    st->packed = kc_calloc_weights((size_t)(st->k * st->vecs * 16), sizeof *st->packed);
    if (!st->packed)
        return KC_ERR_NOMEM;
    for (int64_t v = 0; v < st->vecs; v++) {
        float *dst = st->packed + v * st->k * 16;
        for (int64_t r = 0; r < st->k; r++)
            memcpy(dst + kc_dense_row(r, st->k) * 16, w + r * st->n + 16 * v,
                   (size_t)kc_dense_cols(st, v) * sizeof *w);
    }
    return KC_OK;
}

typedef struct kc_dense_io {
    const kc_dense_state *st;
    const float *x, *bias;
    float *y;
    int add; /* a fused residual (kc_dense_attrs.accumulate) */
} kc_dense_io;

/* Part `part`'s run of vectors over all rows. */
static void kc_dense_job(void *arg, int part)
{
    const kc_dense_io *io = arg;
    const kc_dense_state *st = io->st;
    int64_t lo = st->vecs * part / st->parts, hi = st->vecs * (part + 1) / st->parts;
    for (int64_t v = lo; v < hi; v++)
        st->panel(io->x, st->rows, st->k, st->packed + v * st->k * 16,
                  io->bias ? io->bias + 16 * v : NULL, io->y + 16 * v, st->n, kc_dense_cols(st, v),
                  io->add);
}

/* Whether this kernel takes Dense layers (see dense.h): wherever kerasc's
 * vector kernels have an instruction set, KC_DENSE_OWN=0 never. With
 * AVX-512 too since four rows share each weight vector loaded
 * (dense_simd.inc): on the 2-core Zen 5 of bench/results, `--stats`, 4
 * runs each, oneDNN's brg matmul against this loop: batch 1 MobileNetV2's
 * 1280 -> 1000 0.064-0.071 -> 0.050-0.060 ms, InceptionV3's 2048 -> 1000
 * 0.19-0.23 -> 0.17-0.19, ResNet50's 0.175-0.216 -> 0.158-0.228; batch 8
 * (two lanes of four rows) MobileNetV2 0.196-0.206 -> 0.175-0.210,
 * ResNet50 0.30-0.37 -> 0.30-0.31 (one outlier 0.49), InceptionV3
 * 0.33-0.36 -> 0.33-0.39. And a run makes one oneDNN call fewer per lane:
 * its dnnl_primitive_execute allocates (README, tests/alloc). */
static int kc_dense_wanted(void)
{
    const char *env = getenv("KC_DENSE_OWN");
    return !env || strcmp(env, "0") != 0;
}

/* A Dense over many rows an image (ConvNeXt's pointwise layers over its
 * pixels, a transformer's over its tokens) is a GEMM, where this loop,
 * made for classifier rows, reads four rows per weight vector. From this
 * many rows an image (ConvNeXt's 7x7 stage has 49), with AVX-512,
 * oneDNN's brgemm matmul takes it, one call for all rows: its sums for a
 * row do not depend on the rows beside it (test_cuts checks one image
 * against a batch of three). ConvNeXtTiny at batch 1: 52-62 -> 44-48 ms
 * a run. The choice is per image, so lanes and micro-batches make the
 * same one. */
#define KC_DENSE_GEMM_ROWS 32
static int kc_dense_gemm_shape(const kc_shape *in, kc_isa_level isa)
{
    if (isa != KC_ISA_AVX512 || !kc_dnnl_avx512() || in->rank < 3 || in->dims[0] < 1)
        return 0;
    int64_t per_image = kc_count(in) / in->dims[0] / in->dims[in->rank - 1];
    return per_image >= KC_DENSE_GEMM_ROWS;
}

static kc_status kc_dense_build(const kc_exec_ctx *ctx, kc_isa_level isa, kc_dense_state **out)
{
    const kc_dense_attrs *a = ctx->layer->attrs;
    const kc_shape *in = &ctx->in_shape[0];
    kc_dense_state *st = kc_calloc(1, sizeof *st);
    if (!st)
        return KC_ERR_NOMEM;
    st->base.free = kc_dense_free;
    st->in_shape = *in;
    st->panel = isa == KC_ISA_AVX512 ? kc_dense_panel_avx512 : kc_dense_panel_avx2;
    st->k = in->dims[in->rank - 1];
    st->n = a->units;
    st->rows = kc_count(in) / st->k;
    st->vecs = (st->n + 15) / 16;
    int64_t parts = st->vecs / KC_DENSE_MIN_VECTORS;
    int width = kc_parallel_width();
    if (parts > width)
        parts = width;
    st->parts = parts < 1 ? 1 : (int)parts;
    kc_status s = kc_dense_pack(st, kc_w(ctx, 0));
    if (s != KC_OK) {
        kc_dense_free(&st->base);
        return s;
    }
    st->base.weights_cached = 1; /* the packed kernel is the one read now */
    *out = st;
    return KC_OK;
}

kc_status kc_dense_own(const kc_exec_ctx *ctx, int *handled)
{
    *handled = 0;
    if (!ctx->state)
        return KC_OK;
    kc_dense_state *st = (kc_dense_state *)*ctx->state;
    int mine = st && st->base.free == kc_dense_free;
    kc_isa_level isa = kc_isa();
    const kc_shape *in = &ctx->in_shape[0];
    if (ctx->w_ext || isa == KC_ISA_NONE || !kc_dnnl_ready() || !kc_dense_wanted() ||
        in->rank < 1 || in->dims[in->rank - 1] < 1 || kc_count(in) < 1 ||
        kc_dense_gemm_shape(in, isa)) {
        if (mine) /* oneDNN's kernel keeps a state of its own in the slot */
            kc_kernel_state_drop(ctx);
        return KC_OK;
    }
    if (st && (!mine || !kc_shape_equal(&st->in_shape, in))) {
        kc_kernel_state_drop(ctx); /* this kernel takes every shape: no history */
        st = NULL;
    }
    if (!st) {
        if (!kc_w(ctx, 0)) /* packed by another kernel, Keras's array freed */
            return kc_fail(KC_ERR_UNSUPPORTED, "the Dense kernel's weights are gone");
        KC_TRY(kc_dense_build(ctx, isa, &st));
        *ctx->state = &st->base;
    }
    const kc_dense_attrs *a = ctx->layer->attrs;
    kc_dense_io io = {st, ctx->in[0], a->use_bias ? kc_w(ctx, 1) : NULL, ctx->out[0],
                      a->accumulate};
    kc_parallel(st->parts, kc_dense_job, &io);
    *handled = 1;
    return KC_OK;
}

int kc_dense_own_state(const kc_kernel_state *state)
{
    return state && state->free == kc_dense_free;
}
