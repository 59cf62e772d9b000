/* Convolutions over few input channels: an image's RGB stem.
 *
 * Why: on oneDNN such a layer is one dnnl_primitive_execute per part and
 * image, and that call allocates its argument map every time (README,
 * tests/alloc); with the stem and the classifier (dense.c) on kerasc's own
 * loops MobileNetV2 makes no heap allocation at all in a run at batch 1.
 * And oneDNN's brgconv reaches little of the machine on 3 input channels
 * (MobileNetV2's 3 -> 32 3x3 stride 2: 0.10 ms on the 2-core Zen 5 of
 * bench/results, ~220 GFLOP/s).
 *
 * How (stem_simd.inc): the kernel packed once per 16 output channels,
 * its taps in Keras's order; blocks of output pixels of a row x vectors
 * of channels in registers, one multiply-add per tap; the threads take
 * runs of output rows over the batch, cut where their measured speeds
 * even their times (kc_balance). Each output is the sum over its taps
 * inside the image in order, then the bias: the same bits on any rows,
 * threads, lane or instruction set, so where this kernel is on it takes
 * the layer everywhere, alone on one thread too.
 *
 * Kernels wider than 3x3 (ResNet's 7x7 stride-2 conv1, 147 taps) run on
 * the wide loop (stem.h): each kernel row's kw x c taps are one run of a
 * padded input row, so a block's pixels are offsets of one pointer and
 * its 64 channels of another, with no table of taps. The same sums
 * (oneDNN's brgconv sums them in this order too: ResNet50's outputs kept
 * their bits). Why: ResNet50 then makes no oneDNN call, and no heap
 * allocation in a run (16 an inference at batch 1, 64 at batch 8, each
 * oneDNN execution allocating). On the Zen 5 of 12-06 at batch 1
 * (`--stats`, alternating runs): conv1 0.70-0.74 ms against oneDNN's
 * 0.70-0.72, and the max pooling after it 0.09 against 0.15 ms (it read
 * oneDNN's output back as from memory: 110 us a thread, 37 us apart on
 * an input in cache); the run level (1.000 over 10 alternating pairs).
 * Tried, not landed: ResNet's overlapping 3x3 stride-2 pooling run
 * inside the layer as the non-overlapping ones are (kc_stem_pooled_rows),
 * the convolution's rows kept in a ring of three: conv1 and its pooling
 * 0.74-0.80 ms, but the first block's 64 -> 256 layer with the residual
 * sum then 0.05 ms slower (0.35 against 0.30, in every pair, even cuts
 * too), the run 1.015-1.018 at batch 1, level at batch 8 and on one
 * thread.
 * Against ONNX Runtime (12-07, the stem alone: ZeroPadding2D, conv1 with
 * its ReLU, the padded 3x3 stride-2 max pooling, alternating runs of 100
 * at batch 1): 0.71-0.75 ms against ORT's 0.70-0.75, level; after a 128
 * MB Dense that evicts the caches, conv1 0.68-0.80 and its pooling
 * 0.08-0.13 ms here against ORT's 0.69 and 0.12 (its own profile). */
#include "kernels/stem.h"

#include <stdlib.h>
#include <string.h>

#include "base/balance.h"
#include "base/env.h"
#include "base/mem.h"
#include "base/threads.h"
#include "kernels/conv_geom.h"
#include "kernels/dnnl_common.h"
#include "kernels/isa.h"
#include "kernels/maxpool_nhwc.h"
#include "kernels/wino_tx.h"

/* At most this many input channels: beyond, the taps are many and
 * oneDNN's blocked kernels keep their lead. */
#define KC_STEM_MAX_CHANNELS 4
/* At least this many output channels: one vector. */
#define KC_STEM_MIN_FILTERS 16
/* At most this kernel extent on the loop of taps (stem_simd.inc's
 * kc_stem_rows): the 3x3 stems are level with oneDNN there
 * (MobileNetV2's 0.099-0.102 against 0.101-0.104 ms, InceptionV3's
 * 3 -> 32 on 299x299 0.19-0.21 against 0.19-0.20). ResNet50's 7x7
 * 3 -> 64 took 0.76-0.92 ms on it against oneDNN's 0.61-0.62 (147 taps,
 * each an offset from a table, and four vectors in two passes of two;
 * 0.71-0.73 in one pass of 6 pixels x 4 vectors). Wider kernels, up to
 * KC_STEM_WIDE_MAX_KERNEL, run on the wide loop instead (stem.h), whose
 * taps are runs of a padded row (see kc_stem_wide_wanted). */
#define KC_STEM_MAX_KERNEL 3

typedef void (*kc_stem_rows_fn)(const kc_stem_geom *, const kc_stem_kernel *, const float *,
                                float *, int64_t, int64_t);
typedef void (*kc_stem_wide_fn)(const kc_stem_geom *, const float *, const float *, const float *,
                                kc_stem_ring *, float *, int64_t, int64_t);

/* A max pooling run inside the layer (kc_conv_attrs.post_pool): its
 * window (= its strides) and the pooled rows and columns; kh 0: none. */
typedef struct kc_stem_pool {
    int64_t kh, kw, out_h, out_w;
} kc_stem_pool;

typedef struct kc_stem_state {
    kc_kernel_state base;
    kc_shape in_shape;
    kc_stem_geom g;
    kc_stem_pool pool;
    const void *post_pool; /* the pooling layer it was built for, or NULL */
    kc_stem_rows_fn rows;
    float *w, *bias;
    int32_t *off;
    /* a kernel wider than 3x3: the wide loop, its kernel in groups of
     * `wide_nv` vectors (stem.h); NULL: the loop of taps */
    kc_stem_wide_fn wide;
    float *w4;
    int64_t wide_nv;
    kc_balance cut; /* parts: runs of output rows over the batch */
    int width;      /* the threads the cut was made for */
} kc_stem_state;

static void kc_stem_free(kc_kernel_state *s)
{
    kc_stem_state *st = (kc_stem_state *)s;
    free(st->w);
    free(st->bias);
    free(st->off);
    free(st->w4);
    free(st);
}

int kc_stem_owns(const kc_kernel_state *state) { return state && state->free == kc_stem_free; }

/* The geometry of layer a from input value shape `in` to `out` (NHWC),
 * into g; 0 when the layer does not qualify (stem.h). The layers a may
 * carry (post_dw, post_pw) aside: kc_stem_geometry refuses those. */
static int kc_stem_geometry_alone(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out,
                                  int wide_ok, kc_stem_geom *g)
{
    int64_t most = wide_ok ? KC_STEM_WIDE_MAX_KERNEL : KC_STEM_MAX_KERNEL;
    if (a->kind != KC_CONV_PLAIN || a->spatial != 2 || a->groups != 1 || a->padding == 2 ||
        a->accumulate || a->pre_pool || in->rank != 4 ||
        out->rank != 4 || out->dims[0] != in->dims[0] || in->dims[3] < 1 ||
        in->dims[3] > KC_STEM_MAX_CHANNELS || out->dims[3] < KC_STEM_MIN_FILTERS)
        return 0;
    int64_t s = a->strides[0];
    for (int i = 0; i < 2; i++)
        if (a->kernel[i] < 1 || a->kernel[i] > most || a->strides[i] != s ||
            s < 1 || a->dilation[i] != 1 || a->pad_before[i] < 0 || a->pad_after[i] < 0)
            return 0;
    int64_t dims[2], pad[2];
    kc_conv_window_2d(a, in, out, dims, pad);
    if (dims[0] < 1 || dims[1] < 1 || out->dims[1] < 1 || out->dims[2] < 1)
        return 0;
    /* every output's window must start inside the padded image */
    for (int i = 0; i < 2; i++)
        if (pad[i] >= a->kernel[i] || (out->dims[1 + i] - 1) * s - pad[i] >= dims[i])
            return 0;
    *g = (kc_stem_geom){.in_h = dims[0], .in_w = dims[1], .c = in->dims[3],
                        .out_h = out->dims[1], .out_w = out->dims[2], .f = out->dims[3],
                        .kh = a->kernel[0], .kw = a->kernel[1], .s = s, .pad_t = pad[0],
                        .pad_l = pad[1], .act = kc_wino_act(a->activation)};
    g->taps = g->kh * g->kw * g->c;
    return 1;
}

/* Whether geometry g runs on the wide loop: a kernel wider than 3x3. */
static int kc_stem_wide_wanted(const kc_stem_geom *g)
{
    return g->kh > KC_STEM_MAX_KERNEL || g->kw > KC_STEM_MAX_KERNEL;
}

/* kc_stem_geometry_alone for a layer run alone (wide kernels too): one
 * that carries a block (post_dw, post_pw) is the block kernel's
 * (kc_stem_block_takes). */
static int kc_stem_geometry(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out,
                            kc_stem_geom *g)
{
    if (a->post_dw || a->post_pw)
        return 0;
    return kc_stem_geometry_alone(a, in, out, 1, g);
}

/* The max pooling p over a convolution output of `out` (NHWC) into
 * *pool; 0 when it does not qualify (kc_stem_pool_fusable). */
static int kc_stem_pool_geometry(const kc_pool_attrs *p, const kc_shape *out, kc_stem_pool *pool)
{
    if (p->kind != KC_POOL_MAX || p->spatial != 2 || p->global || out->rank != 4)
        return 0;
    int64_t k[2], n[2];
    for (int i = 0; i < 2; i++) {
        k[i] = p->pool[i];
        if (k[i] < 1 || p->strides[i] != k[i] || p->pad_before[i] || p->pad_after[i] ||
            (p->padding == 1 && out->dims[1 + i] % k[i]))
            return 0; /* overlapping windows, or padding */
        n[i] = out->dims[1 + i] / k[i]; /* "valid" drops the rest; "same" has none */
        if (n[i] < 1)
            return 0;
    }
    *pool = (kc_stem_pool){k[0], k[1], n[0], n[1]};
    return 1;
}

/* The bias (f floats) copied into *pb, allocated where NULL; nothing
 * without one. */
static kc_status kc_stem_copy_bias(const kc_stem_geom *g, const float *bias, float **pb)
{
    if (!bias)
        return KC_OK;
    if (!*pb)
        *pb = kc_calloc_aligned((size_t)g->f, sizeof **pb);
    if (!*pb)
        return KC_ERR_NOMEM;
    memcpy(*pb, bias, (size_t)g->f * sizeof *bias);
    return KC_OK;
}

/* Keras's (kh, kw, c, f) kernel into 16-channel vectors of taps, the bias
 * copied, the taps' input offsets for the image's width: into *pw, *pb
 * and *poff, allocated where NULL (streamed weights are packed again
 * into the same arrays). */
static kc_status kc_stem_pack_into(const kc_stem_geom *g, const float *w, const float *bias,
                                   float **pw, float **pb, int32_t **poff)
{
    int64_t vecs = (g->f + 15) / 16;
    if (!*pw)
        *pw = kc_calloc_aligned((size_t)(vecs * g->taps * 16), sizeof **pw);
    if (!*poff)
        *poff = kc_calloc((size_t)g->taps, sizeof **poff);
    if (!*pw || !*poff)
        return KC_ERR_NOMEM;
    KC_TRY(kc_stem_copy_bias(g, bias, pb));
    for (int64_t v = 0; v < vecs; v++) {
        int64_t n = g->f - 16 * v < 16 ? g->f - 16 * v : 16;
        for (int64_t t = 0; t < g->taps; t++)
            memcpy(*pw + (v * g->taps + t) * 16, w + t * g->f + 16 * v, (size_t)n * sizeof *w);
    }
    for (int64_t ky = 0; ky < g->kh; ky++)
        for (int64_t kx = 0; kx < g->kw; kx++)
            for (int64_t ci = 0; ci < g->c; ci++)
                (*poff)[(ky * g->kw + kx) * g->c + ci] =
                    (int32_t)((ky * g->in_w + kx) * g->c + ci);
    return KC_OK;
}

/* The wide loop's copy of Keras's kernel (stem.h: groups of nv vectors,
 * each tap's nv * 16 channels side by side, zeros past f), into *pw4,
 * allocated where NULL. */
static kc_status kc_stem_pack_wide(const kc_stem_geom *g, const float *w, int64_t nv, float **pw4)
{
    int64_t width = 16 * nv, groups = (g->f + width - 1) / width;
    if (!*pw4)
        *pw4 = kc_calloc_aligned((size_t)(groups * g->taps * width), sizeof **pw4);
    if (!*pw4)
        return KC_ERR_NOMEM;
    for (int64_t q = 0; q < groups; q++)
        for (int64_t t = 0; t < g->taps; t++)
            for (int64_t l = 0; l < width; l++) {
                int64_t fo = q * width + l;
                (*pw4)[(q * g->taps + t) * width + l] = fo < g->f ? w[t * g->f + fo] : 0.0f;
            }
    return KC_OK;
}

/* The copies the layer's loop reads, the bias with them: the loop of
 * taps' vectors and offsets, or the wide loop's groups (streamed weights
 * are packed at every run: only those). */
static kc_status kc_stem_pack(kc_stem_state *st, const float *w, const float *bias)
{
    if (!st->wide)
        return kc_stem_pack_into(&st->g, w, bias, &st->w, &st->bias, &st->off);
    KC_TRY(kc_stem_copy_bias(&st->g, bias, &st->bias));
    return kc_stem_pack_wide(&st->g, w, st->wide_nv, &st->w4);
}

/* The tap offsets are int32: an image too wide for them stays on oneDNN. */
static int kc_stem_offsets_fit(const kc_stem_geom *g)
{
    return (g->kh * g->in_w + g->kw) * g->c <= INT32_MAX;
}

static kc_status kc_stem_build(const kc_exec_ctx *ctx, const kc_stem_geom *g,
                               const kc_stem_pool *pool, kc_isa_level isa, kc_stem_state **out)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    const float *w, *bias;
    KC_TRY(kc_kernel_and_bias(ctx, a->use_bias, &w, &bias));
    if (!kc_stem_offsets_fit(g))
        return KC_OK;
    kc_stem_state *st = kc_calloc(1, sizeof *st);
    if (!st)
        return KC_ERR_NOMEM;
    st->base.free = kc_stem_free;
    st->in_shape = ctx->in_shape[0];
    st->g = *g;
    st->pool = *pool;
    st->post_pool = a->post_pool;
    st->rows = isa == KC_ISA_AVX512 ? kc_stem_rows_avx512 : kc_stem_rows_avx2;
    if (kc_stem_wide_wanted(g)) {
        st->wide = isa == KC_ISA_AVX512 ? kc_stem_wide_rows_avx512 : kc_stem_wide_rows_avx2;
        st->wide_nv = isa == KC_ISA_AVX512 ? KC_STEM_WIDE_NV_AVX512 : KC_STEM_WIDE_NV_AVX2;
    }
    st->width = 0; /* the cut is made at the first run */
    if (kc_stem_pack(st, w, bias) != KC_OK) {
        kc_stem_free(&st->base);
        return KC_ERR_NOMEM;
    }
    /* the packed kernel (and bias copy) are what runs read, unless the
     * weights are streamed (ctx->w_ext): then packed again every run */
    st->base.weights_cached = !ctx->w_ext;
    *out = st;
    return KC_OK;
}

typedef struct kc_stem_job {
    const kc_stem_state *st;
    const float *in;
    float *out;
    int failed; /* a part found no memory for its rows (pooled runs, the wide loop's ring) */
} kc_stem_job;

/* The wide loop's ring of padded input rows (stem.h) in this thread's
 * workspace, empty: 1, or 0 with job->failed set when there is no
 * memory; 1 at once for the loop of taps, which has none. */
static int kc_stem_ring_init(kc_stem_job *job, kc_stem_ring *ring)
{
    const kc_stem_geom *g = &job->st->g;
    if (!job->st->wide)
        return 1;
    ring->row_floats = ((g->out_w - 1) * g->s + g->kw) * g->c;
    size_t floats = (size_t)((g->kh + 1) * ring->row_floats);
    float *buf = kc_dnnl_workspace(KC_DNNL_SLOT_SRC, floats * sizeof(float));
    if (!buf) {
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
        return 0;
    }
    float *zeros = buf + g->kh * ring->row_floats;
    memset(zeros, 0, (size_t)ring->row_floats * sizeof *zeros);
    ring->rows = buf;
    ring->zeros = zeros;
    ring->image = NULL;
    for (int k = 0; k < KC_STEM_WIDE_MAX_KERNEL; k++)
        ring->iy[k] = -1;
    return 1;
}

/* Output rows [y0, y1) of image `in` into `out` (at row y0), on the wide
 * loop (with `ring`) or the loop of taps. */
static void kc_stem_conv_rows(const kc_stem_state *st, const float *in, kc_stem_ring *ring,
                              float *out, int64_t y0, int64_t y1)
{
    if (st->wide) {
        st->wide(&st->g, st->w4, st->bias, in, ring, out, y0, y1);
        return;
    }
    kc_stem_kernel kernel = {st->w, st->bias, st->off};
    st->rows(&st->g, &kernel, in, out, y0, y1);
}

/* One image's run of output rows. */
static void kc_stem_image_rows(void *arg, int64_t img, int64_t y0, int64_t y1)
{
    kc_stem_job *job = arg;
    const kc_stem_state *st = job->st;
    const kc_stem_geom *g = &st->g;
    kc_stem_ring ring;
    if (!kc_stem_ring_init(job, &ring))
        return;
    int64_t in_image = g->in_h * g->in_w * g->c, out_image = g->out_h * g->out_w * g->f;
    kc_stem_conv_rows(st, job->in + img * in_image, &ring,
                      job->out + img * out_image + y0 * g->out_w * g->f, y0, y1);
}

/* One image's run of pooled rows [p0, p1): for each, the convolution's
 * rows under it into this thread's buffer (in the cache), then their
 * maxima over each window into the output. Max is exact: the bits of the
 * convolution then the pooling layer (maxpool_nhwc.c's loops). */
static void kc_stem_pooled_rows(void *arg, int64_t img, int64_t p0, int64_t p1)
{
    kc_stem_job *job = arg;
    const kc_stem_state *st = job->st;
    const kc_stem_geom *g = &st->g;
    const kc_stem_pool *pool = &st->pool;
    int64_t row = g->out_w * g->f;
    float *strip = kc_dnnl_workspace(KC_DNNL_SLOT_DST, (size_t)(pool->kh * row) * sizeof(float));
    if (!strip) {
        __atomic_store_n(&job->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    kc_maxpool_geom mg = {.n = 1, .ih = pool->kh, .iw = g->out_w, .c = g->f, .oh = 1,
                          .ow = pool->out_w, .kh = pool->kh, .kw = pool->kw, .sh = pool->kh,
                          .sw = pool->kw};
    const float *in = job->in + img * g->in_h * g->in_w * g->c;
    float *out = job->out + img * pool->out_h * pool->out_w * g->f;
    kc_stem_ring ring;
    if (!kc_stem_ring_init(job, &ring))
        return;
    for (int64_t py = p0; py < p1; py++) {
        kc_stem_conv_rows(st, in, &ring, strip, py * pool->kh, (py + 1) * pool->kh);
        kc_maxpool_nhwc(strip, out + py * pool->out_w * g->f, &mg);
    }
}

/* Whether this kernel takes layers here: with AVX-512 (KC_STEM=0: never;
 * =1: with AVX2 too). Its AVX2 build was slower than oneDNN's AVX2
 * kernel: MobileNetV2's stem 0.120-0.144 against 0.109-0.136 ms (oneDNN
 * and kerasc capped to AVX2 on the Zen 5, 4 runs each), where the layers
 * around stay on oneDNN anyway. */
static int kc_stem_wanted(kc_isa_level isa)
{
    const char *env = getenv("KC_STEM");
    if (env)
        return strcmp(env, "0") != 0 && isa != KC_ISA_NONE;
    return isa == KC_ISA_AVX512;
}

/* Whether this kernel takes convolution a from `in` to `out` (NHWC), with
 * max pooling p run inside it (NULL: none): its geometry into *g and the
 * pooling's into *pool (kh 0 without). The pooling needs an activation
 * that commutes with the max (not the caller's) and the CPU's max
 * pooling loops. */
static int kc_stem_takes(const kc_conv_attrs *a, const kc_pool_attrs *p, const kc_shape *in,
                         const kc_shape *out, kc_stem_geom *g, kc_stem_pool *pool)
{
    *pool = (kc_stem_pool){0, 0, 0, 0};
    if (!kc_stem_geometry(a, in, out, g))
        return 0;
    return !p ||
           (g->act != 3 && kc_maxpool_nhwc_available() && kc_stem_pool_geometry(p, out, pool));
}

int kc_stem_pool_fusable(const kc_conv_attrs *a, const kc_pool_attrs *p, const kc_shape *in,
                         const kc_shape *out)
{
    kc_stem_geom g;
    kc_stem_pool pool;
    return kc_stem_wanted(kc_isa()) && kc_dnnl_ready() &&
           kc_stem_takes(a, p, in, out, &g, &pool) && kc_stem_offsets_fit(&g);
}

kc_status kc_stem_conv(const kc_exec_ctx *ctx, int *handled, int *act_done)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    *handled = 0;
    *act_done = 0;
    if (!ctx->state || a->kind != KC_CONV_PLAIN)
        return KC_OK;
    kc_stem_state *st = (kc_stem_state *)*ctx->state;
    int mine = kc_stem_owns(*ctx->state);
    kc_isa_level isa = kc_isa(); /* KC_ISA may cap it below the CPU's */
    /* KC_DNNL=0 (kc_dnnl_ready) keeps the plain path, the tests'
     * reference. Streamed weights (ctx->w_ext) and the residency
     * manager's whole layers (ctx->whole) run here too, as in narrow.c:
     * the same bits on the host loop and through the scheduler */
    if (!kc_stem_wanted(isa) || !kc_dnnl_ready()) {
        if (mine)
            kc_kernel_state_drop(ctx);
        return KC_OK;
    }
    if (!mine || !kc_shape_equal(&st->in_shape, &ctx->in_shape[0]) ||
        st->post_pool != (const void *)a->post_pool) {
        kc_stem_geom g;
        kc_stem_pool pool;
        int takes = kc_stem_takes(a, a->post_pool ? a->post_pool->attrs : NULL, &ctx->in_shape[0],
                                  &ctx->out_shape[0], &g, &pool);
        /* as kc_pw_conv: another kernel's state goes only where this one
         * takes the layer */
        if (st && (mine || takes))
            kc_kernel_state_drop(ctx);
        if (!takes)
            return KC_OK;
        st = NULL;
        KC_TRY(kc_stem_build(ctx, &g, &pool, isa, &st));
        if (!st)
            return KC_OK;
        *ctx->state = &st->base;
    }
    if (ctx->w_ext) {
        const float *w, *bias;
        KC_TRY(kc_kernel_and_bias(ctx, a->use_bias, &w, &bias));
        KC_TRY(kc_stem_pack(st, w, bias));
    }
    /* 1 in a lane of a batch; under the residency manager one part, on
     * this thread, leaving the copy thread a core */
    int width = ctx->whole ? 1 : kc_parallel_width();
    kc_stem_job job = {st, ctx->in[0], ctx->out[0], 0};
    if (st->pool.kh)
        kc_balanced_image_rows(&st->cut, &st->width, width, st->in_shape.dims[0], st->pool.out_h,
                               kc_stem_pooled_rows, &job);
    else
        kc_balanced_image_rows(&st->cut, &st->width, width, st->in_shape.dims[0], st->g.out_h,
                               kc_stem_image_rows, &job);
    if (job.failed)
        return kc_fail(KC_ERR_NOMEM, "out of memory for a stem convolution's rows");
    *handled = 1;
    *act_done = st->g.act != 3;
    return KC_OK;
}

/* ------------------------------------------------ inside a block */

int kc_stem_block_takes(const kc_conv_attrs *a, const kc_shape *in, kc_stem_geom *g)
{
    if (!kc_stem_wanted(kc_isa()) || !kc_dnnl_ready() || in->rank != 4 || a->spatial != 2)
        return 0;
    kc_shape out = *in;
    for (int i = 0; i < 2; i++)
        out.dims[1 + i] = kc_conv_out_len(in->dims[1 + i], a->kernel[i], a->strides[i],
                                          a->dilation[i], a->padding != 0);
    out.dims[3] = a->filters;
    return kc_stem_geometry_alone(a, in, &out, 0, g) && kc_stem_offsets_fit(g) && g->act != 3;
}

kc_status kc_stem_loop_build(const kc_stem_geom *g, const float *w, const float *bias,
                             kc_stem_loop *loop)
{
    memset(loop, 0, sizeof *loop);
    loop->g = *g;
    loop->rows = kc_isa() == KC_ISA_AVX512 ? kc_stem_rows_avx512 : kc_stem_rows_avx2;
    kc_status status = kc_stem_pack_into(g, w, bias, &loop->w, &loop->bias, &loop->off);
    if (status != KC_OK) {
        kc_stem_loop_free(loop);
        return status;
    }
    loop->k = (kc_stem_kernel){loop->w, loop->bias, loop->off};
    return KC_OK;
}

void kc_stem_loop_free(kc_stem_loop *loop)
{
    free(loop->w);
    free(loop->bias);
    free(loop->off);
    memset(loop, 0, sizeof *loop);
}
