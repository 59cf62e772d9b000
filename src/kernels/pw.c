/* 1x1 stride-1 convolutions on few pixels (ResNet50's 14x14 and 7x7
 * stages, InceptionV3's 8x8 one, MobileNetV2's last 1x1, at batch 1):
 * kerasc's own product, the output channels split between the threads.
 *
 * There the weights outweigh the image (ResNet50's 7x7 2048 -> 512: 4 MB
 * of weights against 0.4 MB of input) and come from memory on every run
 * (the model's 100 MB stay in no cache). oneDNN 2.6's brgconv_1x1, run
 * on its own threads, took 0.32-0.40 ms for ResNet50's 14x14 and 7x7
 * 1x1 layers on the 2-core Zen 5 of bench/results, where ONNX Runtime's
 * pointwise kernel (output channels split between threads) took 0.28-
 * 0.31. Here each thread owns a run of 16-channel output vectors, their
 * kernel packed once at build ([vector][input channel][16]), and reads
 * only those, in panels of up to 3 vectors over all the pixels, register
 * blocks of 8 pixels x 48 channels; while a panel runs, the part's next
 * one is fetched into L2, a share of its lines in each block's loop (the
 * 7x7 layers 0.33-0.36 ms with the fetch against 0.37-0.40 without).
 * The parts' cut follows the threads' measured speeds (kc_balance): one
 * vCPU ran 10-20% slower than the other here, and with even halves the
 * 14x14 layers took 0.32-0.38 ms against 0.30-0.35 balanced. Bias, the
 * residual already in the output and relu / relu6 are applied as each
 * block is stored.
 *
 * Only cut between 2+ threads: in a lane of a batch (one thread, four
 * images) oneDNN's kernel was level or ahead (ResNet50 batch 8, its 7x7
 * layers 2.55-2.72 against 2.53-2.83 ms). Plain float32 sums over the
 * input channels in order: the same rounding class as oneDNN's direct
 * kernel, so `exact` keeps it. */
#include "kernels/pw.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "base/balance.h"
#include "base/clock.h"
#include "base/env.h"
#include "base/mem.h"
#include "base/threads.h"
#include "kernels/wino.h"
#include "kernels/wino_tx.h"

#define KC_PW_MR 8           /* pixels a register block */
#define KC_PW_NR 48          /* output channels a panel: 3 vectors */
/* At most this many pixels (images x rows x columns) in a call: beyond
 * that the image outweighs the weights and oneDNN's kernel, which cuts
 * pixels, is level or ahead. */
#define KC_PW_MAX_PIXELS 256
/* At least this many input and output channels: below, the weights are
 * small enough to stay in cache and the product too thin. */
#define KC_PW_MIN_CHANNELS 64

typedef struct kc_pw_state {
    kc_kernel_state base;
    kc_shape in_shape;
    int64_t pixels, k, n;    /* pixels, input channels, output channels */
    int64_t vectors;         /* of 16 output channels, the last maybe partly zeros */
    float *w;                /* packed: vector v's k rows of 16 at w + k * 16 * v */
    int act;                 /* kc_wino_act's codes; 3: applied by the caller */
    int residual;            /* the output holds a sum to add to */
    int prefetch;            /* the next panel fetched into L2 (KC_PW_PREFETCH=0: not) */
    kc_balance cut;          /* parts: runs of vectors, one per thread */
} kc_pw_state;

/* What a part's blocks read and write. */
typedef struct kc_pw_io {
    const kc_pw_state *st;
    const float *in, *bias;
    float *out;
    double seconds[KC_BALANCE_MAX_PARTS]; /* each part's time this run */
} kc_pw_io;

/* ------------------------------------------------------------ geometry */

static int kc_pw_off(void) { return kc_env_off("KC_PW"); }

/* A plain 2-D 1x1 convolution, stride 1, unpadded, on NHWC of at most
 * KC_PW_MAX_PIXELS pixels in all. */
static int kc_pw_geometry(const kc_exec_ctx *ctx, const kc_conv_attrs *a, kc_pw_state *st)
{
    const kc_shape *in = &ctx->in_shape[0], *out = &ctx->out_shape[0];
    if (a->kind != KC_CONV_PLAIN || a->spatial != 2 || a->groups != 1 || a->post_dw ||
        a->post_pw || a->pre_pool || in->rank != 4 || out->rank != 4)
        return 0;
    for (int i = 0; i < 2; i++)
        if (a->kernel[i] != 1 || a->strides[i] != 1 || a->dilation[i] != 1 ||
            a->pad_before[i] || a->pad_after[i] || in->dims[1 + i] != out->dims[1 + i])
            return 0;
    st->pixels = in->dims[0] * in->dims[1] * in->dims[2];
    st->k = in->dims[3];
    st->n = out->dims[3];
    if (st->pixels < 1 || st->pixels > KC_PW_MAX_PIXELS || st->k < KC_PW_MIN_CHANNELS ||
        st->n < KC_PW_MIN_CHANNELS || out->dims[0] != in->dims[0] || kc_parallel_width() < 2)
        return 0;
    st->vectors = (st->n + 15) / 16;
    st->act = kc_wino_act(a->activation);
    st->residual = a->accumulate;
    return 1;
}

/* ------------------------------------------------------------ build */

static void kc_pw_free(kc_kernel_state *s)
{
    kc_pw_state *st = (kc_pw_state *)s;
    free(st->w);
    free(st);
}

/* Panel j of the run of `count` vectors from `lo`: its first vector and
 * its vectors (at most 3, the run's vectors evened over its panels); 0
 * past its last. */
static int kc_pw_panel_at(int64_t lo, int64_t count, int64_t j, int64_t *v0)
{
    int64_t panels = (count + KC_PW_NR / 16 - 1) / (KC_PW_NR / 16);
    if (j >= panels)
        return 0;
    *v0 = lo + count * j / panels;
    return (int)(lo + count * (j + 1) / panels - *v0);
}

/* Keras's (1, 1, k, n) kernel into vectors: vector v's k rows of 16
 * floats, one per input channel, zeros past the last output channel. A
 * panel of nv vectors reads nv streams, which keeps the packing the same
 * wherever the parts' cuts move. */
static kc_status kc_pw_pack(const kc_exec_ctx *ctx, kc_pw_state *st)
{
    const float *w = kc_w(ctx, 0);
    if (!w)
        return kc_fail(KC_ERR_UNSUPPORTED, "the 1x1 convolution's kernel is gone");
    st->w = kc_calloc((size_t)(st->k * st->vectors * 16), sizeof *st->w);
    if (!st->w)
        return KC_ERR_NOMEM;
    for (int64_t v = 0; v < st->vectors; v++) {
        int64_t n0 = 16 * v, nn = st->n - n0 < 16 ? st->n - n0 : 16;
        for (int64_t r = 0; r < st->k; r++)
            memcpy(st->w + (v * st->k + r) * 16, w + r * st->n + n0, (size_t)nn * sizeof *w);
    }
    return KC_OK;
}

/* ------------------------------------------------------------ run */

__attribute__((target("avx512f"), always_inline)) static inline __m512 kc_pw_apply(__m512 v,
                                                                                  int act)
{
    if (act == 1 || act == 2)
        v = _mm512_max_ps(v, _mm512_setzero_ps());
    return act == 2 ? _mm512_min_ps(v, _mm512_set1_ps(6.0f)) : v;
}

/* Pixels [p0, p0 + mr) x nv vectors from `b` (vector j at b + k * 16 * j; output channels from
 * n0, the last vector's lanes `last`), all k input channels; `fetch`'s
 * lines fetched into L2 spread over the loop. Inlined with mr and nv
 * constants, the accumulators stay in registers. */
__attribute__((target("avx512f"), always_inline)) static inline void
kc_pw_block(const kc_pw_io *io, const float *b, int64_t p0, int64_t n0, int mr, int nv,
            __mmask16 last, kc_wino2d_lines fetch)
{
    const kc_pw_state *st = io->st;
    int64_t k = st->k, ldc = st->n;
    __m512 acc[KC_PW_MR][3];
    #pragma GCC unroll 3
    for (int j = 0; j < nv; j++) {
        __mmask16 mask = j == nv - 1 ? last : (__mmask16)0xFFFF;
        __m512 bias = io->bias ? _mm512_maskz_loadu_ps(mask, io->bias + n0 + 16 * j)
                               : _mm512_setzero_ps();
        #pragma GCC unroll 8
        for (int i = 0; i < mr; i++)
            acc[i][j] = bias;
    }
    const float *a = io->in + p0 * k;
    const char *pf = fetch.at;
    int64_t issued = 0;
    for (int64_t kk = 0; kk < k; kk++, b += 16) {
        for (; issued * k < fetch.n * (kk + 1); issued++)
            _mm_prefetch(pf + issued * 64, _MM_HINT_T1);
        __m512 bv[3];
        #pragma GCC unroll 3
        for (int j = 0; j < nv; j++)
            bv[j] = _mm512_loadu_ps(b + k * 16 * j);
        #pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            __m512 x = _mm512_set1_ps(a[i * k + kk]);
            #pragma GCC unroll 3
            for (int j = 0; j < nv; j++)
                acc[i][j] = _mm512_fmadd_ps(x, bv[j], acc[i][j]);
        }
    }
    #pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
        #pragma GCC unroll 3
        for (int j = 0; j < nv; j++) {
            __mmask16 mask = j == nv - 1 ? last : (__mmask16)0xFFFF;
            float *c = io->out + (p0 + i) * ldc + n0 + 16 * j;
            __m512 v = acc[i][j];
            if (st->residual)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, c));
            _mm512_mask_storeu_ps(c, mask, kc_pw_apply(v, st->act));
        }
}

#define KC_PW_NVS(mr_)                                                                             \
    do {                                                                                           \
        if (nv == 3)                                                                               \
            kc_pw_block(io, b, lo, n0, mr_, 3, last, mine);                                        \
        else if (nv == 2)                                                                          \
            kc_pw_block(io, b, lo, n0, mr_, 2, last, mine);                                        \
        else                                                                                       \
            kc_pw_block(io, b, lo, n0, mr_, 1, last, mine);                                        \
    } while (0)

/* The panel of nv vectors from v0 over pixels [p_lo, p_hi), in blocks of
 * at most KC_PW_MR evened out (as kc_wino2d_product's: a block of one or
 * two pixels has too few accumulator chains to cover the multiply-add's
 * latency); `fetch` (the next panel) a share per block. */
__attribute__((target("avx512f"))) static void kc_pw_panel(const kc_pw_io *io, int64_t v0, int nv,
                                                           int64_t p_lo, int64_t p_hi,
                                                           kc_wino2d_lines fetch)
{
    const kc_pw_state *st = io->st;
    int64_t n0 = 16 * v0, rem = st->n - 16 * (v0 + nv - 1);
    __mmask16 last = rem >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rem) - 1);
    const float *b = st->w + st->k * 16 * v0;
    int64_t pixels = p_hi - p_lo, blocks = (pixels + KC_PW_MR - 1) / KC_PW_MR;
    for (int64_t blk = 0; blk < blocks; blk++) {
        int64_t lo = p_lo + pixels * blk / blocks, hi = p_lo + pixels * (blk + 1) / blocks;
        kc_wino2d_lines mine = kc_wino2d_lines_share(fetch, blk, blocks);
        switch (hi - lo) {
        case 8: KC_PW_NVS(8); break;
        case 7: KC_PW_NVS(7); break;
        case 6: KC_PW_NVS(6); break;
        case 5: KC_PW_NVS(5); break;
        case 4: KC_PW_NVS(4); break;
        case 3: KC_PW_NVS(3); break;
        case 2: KC_PW_NVS(2); break;
        default: KC_PW_NVS(1); break;
        }
    }
}

/* Cut by vectors: part `part`'s panels over all the pixels, each
 * fetching the next into L2 as it runs. */
static void kc_pw_vectors_job(void *arg, int part)
{
    kc_pw_io *io = arg;
    double start = kc_now();
    const kc_pw_state *st = io->st;
    int64_t v0, next_v0, lo = st->cut.lo[part], count = st->cut.lo[part + 1] - lo;
    int nv = kc_pw_panel_at(lo, count, 0, &v0);
    for (int64_t j = 0; nv > 0; j++) {
        int next_nv = kc_pw_panel_at(lo, count, j + 1, &next_v0);
        kc_wino2d_lines fetch = {NULL, 0};
        if (st->prefetch && next_nv > 0) {
            fetch.at = (const char *)(st->w + st->k * 16 * next_v0);
            fetch.n = st->k * 16 * next_nv * (int64_t)sizeof(float) / 64;
        }
        kc_pw_panel(io, v0, nv, 0, st->pixels, fetch);
        nv = next_nv;
        v0 = next_v0;
    }
    io->seconds[part] = kc_now() - start;
}

kc_status kc_pw_conv(const kc_exec_ctx *ctx, int *handled, int *act_done)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    *handled = 0;
    *act_done = 0;
    if (!ctx->state)
        return KC_OK;
    kc_pw_state *st = (kc_pw_state *)*ctx->state;
    if (st && st->base.free != kc_pw_free)
        return KC_OK; /* another kernel's state: the layer was built another way */
    if (ctx->w_ext || ctx->whole || kc_pw_off() || !__builtin_cpu_supports("avx512f")) {
        if (st)
            kc_kernel_state_drop(ctx);
        return KC_OK;
    }
    if (st && !kc_shape_equal(&st->in_shape, &ctx->in_shape[0]))
        st = kc_kernel_state_drop(ctx);
    if (!st) {
        kc_pw_state probe;
        memset(&probe, 0, sizeof probe);
        if (!kc_pw_geometry(ctx, a, &probe))
            return KC_OK;
        st = kc_calloc(1, sizeof *st);
        if (!st)
            return KC_ERR_NOMEM;
        *st = probe;
        st->base.free = kc_pw_free;
        st->in_shape = ctx->in_shape[0];
        st->prefetch = !kc_env_off("KC_PW_PREFETCH");
        kc_balance_init(&st->cut, st->vectors, kc_parallel_width(), 4);
        kc_status packed = kc_pw_pack(ctx, st);
        if (packed != KC_OK) {
            kc_pw_free(&st->base);
            return packed;
        }
        st->base.weights_cached = 1; /* the packed kernel is the one read now */
        *ctx->state = &st->base;
    }
    kc_pw_io io = {st, ctx->in[0], a->use_bias ? kc_w(ctx, 1) : NULL, ctx->out[0], {0}};
    kc_parallel(st->cut.parts, kc_pw_vectors_job, &io);
    kc_balance_update(&st->cut, io.seconds);
    *handled = 1;
    *act_done = st->act != 3;
    return KC_OK;
}

kc_balance *kc_pw_balance(kc_kernel_state *state)
{
    return state && state->free == kc_pw_free ? &((kc_pw_state *)state)->cut : NULL;
}

int kc_pw_parts(const kc_kernel_state *state)
{
    if (!state || state->free != kc_pw_free)
        return 0;
    return ((const kc_pw_state *)state)->cut.parts;
}
