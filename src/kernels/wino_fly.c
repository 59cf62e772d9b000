/* F(4x4, 3x3) Winograd with the kernel transformed as the layer runs.
 *
 * Why: wino.c and oneDNN keep each layer's transformed kernel, 4x the
 * 3x3 kernel's bytes for F(4x4) (1.8x for oneDNN's F(2x2)). On small
 * images that copy costs more memory than it saves time: ResNet50's
 * 512 -> 512 layers on 7x7 ran direct (their F(2x2) copies cost 7.3 MB
 * each and no time; dnnl_conv.c), its 256 -> 256 layers on 14x14 on
 * oneDNN's F(2x2), whose copies added 11 MB over the Keras kernels.
 * Transforming the kernel takes 78 adds per input channel and 16 output
 * channels (g · w · g', g's entries small integers: wino_simd.inc's kc_ws_g_row), the
 * products 36 multiply-adds per tile: from 16 tiles on (one 14x14 image,
 * four 7x7 ones) that is a seventh of the products' work or less, and
 * F(4x4) multiplies 36 times per 16 outputs where direct convolution
 * multiplies 144 times. The state keeps only the 3x3 kernel (repacked:
 * the same bytes as Keras's).
 *
 * How: the tiles (at most 4 MB of transformed inputs at once) are
 * transformed first (bt · d · bt'), by each thread for itself
 * (kc_wf_part_alone). Then each thread takes a run of 16-channel output
 * vectors, up to three at a time (48 channels: 8 tiles x 3 vectors of
 * accumulators in registers; a thread done early takes vectors from the
 * back of the others' runs, base/claims.h: chains of six 14x14 256 -> 256
 * layers and of three 7x7 512 -> 512 ones 2.7% and 2.8% faster, medians
 * of eight alternating pairs), and for each piece of 64 input channels
 * transforms the piece's kernel into its buffer (36 x 64 x 48 floats,
 * 442 KB, in L2; kc_wf_kernel_a) and adds the 36 products [tiles x 64]
 * · [64 x 48] into its products buffer, fetching the next piece of 3x3
 * kernel into L2 meanwhile (kc_wf_fetch_share);
 * then the output transform (at · M · at'), the bias and the activation
 * write its channels of the output.
 *
 * One image of up to four 4x4 tiles (7x7 and 8x8 at batch 1, with 16
 * outputs or more) runs F(4x4) with the kernel transformed inside the
 * products instead (kc_wf_fused, kc_wino_simd's fused4; AVX-512): for
 * each output vector and each row of the 6 x 6 points, the six points
 * of every input channel made in registers from its 9 taps and
 * multiplied at once into six points x the tiles of accumulators; no
 * transformed kernel is stored. F(4x4) had been level with F(2x2) on 4
 * tiles (below, KC_WF_MIN_TILES): its 442 KB pieces of transformed
 * kernel were written to L2 and read back once, for 4 tiles' products.
 * The transformed inputs are read in a layout of their own
 * (kc_wf_fused_inputs): at their 24 offsets in the 36 rows the compiler
 * kept the pointers on the stack, and the layer took 0.39 ms with its
 * kernel in cache. Same operations, same order over the input channels:
 * the same bits as F(4x4) through the pieces (KC_WINOFLY_FUSED=pieces,
 * test_cuts). On the Zen 5 (12-06, two threads, alternating): chains of
 * 7x7 512 -> 512 layers 0.45-0.55 ms a layer by the machine's phase
 * (0.645 of F(2x2)'s time in one set, 0.45 against 0.70), 4x8 and
 * 4x12 images 0.56-0.59 of the time, one 4x4 image 0.80 (its layers had
 * run direct); ResNet50 batch 1, its three 7x7 layers 0.58-0.62 -> 0.46-
 * 0.49 ms each. These layers are bound by their kernel's stream from
 * memory (4.7 MB a thread a layer, ~10 GB/s a core with the products
 * running): with every vector reading the same kernel they took 0.39.
 * Not past four tiles: 14x14 256 -> 256 images as four groups of four
 * tiles (the taps made again for each group, the same bits) took 1.34x
 * the time of the pieces, whose products reuse each transformed value
 * over 8 tiles. KC_WINOFLY_FUSED=0: F(2x2) or other kernels as before.
 *
 * Measured on the 2-core AMD EPYC of bench/results, ResNet50 (alternating
 * runs, medians): four images on one thread (a lane of batch 8), its
 * six 14x14 layers 17.1 -> 13.9 ms, its three 7x7 layers 15.5 -> 8.4 ms,
 * the run 145.5 -> 135 ms; batch 8 on two lanes 18.5 -> 16.3 ms an image;
 * batch 1 on two threads level (the 14x14 layers 2.9 -> 2.7 ms, within
 * the noise) with 12 MB less peak RSS (164.8 -> 152.4 MB; batch 8 178.7
 * -> 168.1 MB). InceptionV3's 448 -> 384 layers on 8x8 at four images
 * on one thread: 3.8-4.1 -> 2.0-2.5 ms. What got it there: the buffers'
 * rows one cache line more than their length apart (16 tiles x 256
 * channels is 16 KB, and the 36 rows written at once fell in one cache
 * set: 7x7 layers at four images 5.2 -> 3.0 ms), 8 tiles a block rather
 * than 6 (16 tiles: two blocks, not 6 + 6 + 4). (The repacked kernel was
 * then kept on small pages, other layers of InceptionV3 having run up to
 * 6x slower on 2 MiB ones; on 12-05 that did not reproduce, and it is on
 * huge pages with the other packed weights: kc_calloc_weights.)
 *
 * Rounding: the same transforms as wino.c's F(4x4, 3x3), the kernel's
 * made in float rather than double: against wino.c's outputs differ by
 * 2e-6 of their scale, against direct convolution by 1.2-1.5e-5 (random
 * data, 256 and 512 channels), within the fidelity tolerance of 1e-4. */
#include "kernels/wino.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/balance.h"
#include "base/claims.h"
#include "base/env.h"
#include "base/help.h"
#include "base/mem.h"
#include "base/threads.h"
#include "kernels/dnnl_common.h"
#include "kernels/isa.h"
#include "kernels/touch.h"
#include "kernels/wino_tx.h"
#include "ops/conv.h"

#define KC_WF_MIN_CHANNELS 64
/* Images this large or larger: wino.c's kept kernel pays (wino.h). */
#define KC_WF_MAX_PIXELS 512
/* Fewer tiles: the kernel's transform outweighs what the products save
 * (a 7x7 image at batch 1 has 4). Checked again on the Zen 5 on 12-06,
 * after the kernel transform became add chains: F(4x4) down to 4 tiles
 * (ResNet50's three 7x7 layers at batch 1, 144 multiply-adds per input
 * and output channel against F(2x2)'s 256) was level, 1.792 against
 * 1.807 ms for the three (`--stats`, ten alternating runs, 5 faster);
 * InceptionV3's 8x8 layers conv2d_80 to conv2d_93 0.996 (6 runs, the
 * runs 0.978, within their noise). So F(2x2) there. */
#define KC_WF_MIN_TILES 16
/* ... except up to 4 tiles of 4x4 (one image of up to 8x8, batch 1),
 * where F(4x4) runs with its kernel transformed inside the products
 * (kc_wf_fused), on at least 16 outputs (one 4x4 image: 36 products per
 * input and output channel against direct convolution's 144). */
#define KC_WF_FUSED_MAX_TILES 4
#define KC_WF_FUSED_MIN_OUTPUTS 16
/* Transformed inputs of a block of tiles: read by every thread's
 * channels, from the shared cache. */
#define KC_WF_TILES_BYTES ((int64_t)4 << 20)
/* Input channels per piece of transformed kernel: for F(4x4) and 48
 * output channels it is 36 x 64 x 48 floats, 442 KB, within a core's L2
 * (kc_wf_u_floats). Pieces of 32 and of 128 (the products' loops half or
 * twice as long) were level on the Zen 5 on 12-06: ResNet50 batch 1
 * 1.001 and 0.998 (alternating binaries, 8 runs), batch 8 0.997 (32,
 * 14 runs) and 1.001 (128, 5 runs). */
#define KC_WF_KERNEL_CHANNELS 64
/* Output vectors a thread takes at once: the product's widest
 * (kc_wino_simd's product). */
#define KC_WF_NV KC_WINO2D_NV

typedef struct kc_wf_state {
    kc_kernel_state base;
    kc_shape in_shape;
    kc_wino2d_grid grid;             /* tiles of m x m outputs */
    int m, alpha;                    /* F(4x4, 3x3), alpha 6, or F(2x2, 3x3), alpha 4 */
    int64_t c, f, vecs;              /* channels in, out; output vectors of 16 */
    int64_t block;                   /* tiles at once */
    int act;                         /* 0 linear, 1 relu, 2 relu6, 3 the caller's */
    float at[24], bt[36], g[18];
    float *w;                        /* [vecs][c][9 taps][16], zero past f */
    kc_balance cut;                  /* parts: runs of output vectors, one per thread */
    int prefetch_l2;                 /* fetch the next piece of kernel ahead */
    const kc_wino_simd *simd;        /* the transforms and products for this CPU */
    int alone;                       /* each part transforms its own inputs */
    int touch;                       /* ... each first reading all of them in order (kc_touch) */
    /* the products' fetches (KC_WINO2D_ROWS_AHEAD: also the input
     * transform's, kc_wf_fetch_rows_wanted; KC_WINO2D_LINES_LEAD) */
    int product_flags;
    int fused;                       /* F(4x4) with the kernel made inside the products (kc_wf_fused) */
} kc_wf_state;

/* ------------------------------------------------------------ eligibility */

/* KC_WINOFLY=0: not this kernel; KC_WINO2D=0: none of kerasc's own 2-D
 * Winograd kernels; KC_WINOGRAD=0: no Winograd at all. */
static int kc_wf_off(void)
{
    return kc_env_off("KC_WINOFLY") || kc_env_off("KC_WINO2D") ||
           kc_env_off("KC_WINOGRAD");
}

/* A plain 3x3 stride-1 Conv2D, "same" or "valid", nothing fused, 64
 * channels or more in and out, under KC_WF_MAX_PIXELS outputs an image and
 * KC_WF_MIN_TILES tiles or more in all; its geometry into st, else 0. */
static int kc_wf_geometry(const kc_exec_ctx *ctx, const kc_conv_attrs *a, kc_wf_state *st)
{
    const kc_shape *in = &ctx->in_shape[0], *out = &ctx->out_shape[0];
    if (!kc_wino_plain(ctx, a) || a->spatial != 2)
        return 0;
    for (int i = 0; i < 2; i++)
        if (a->kernel[i] != 3 || a->strides[i] != 1 || a->dilation[i] != 1 ||
            a->pad_before[i] || a->pad_after[i])
            return 0;
    st->c = in->dims[3];
    st->f = out->dims[3];
    if (st->c < KC_WF_MIN_CHANNELS || st->f < KC_WF_MIN_CHANNELS ||
        out->dims[1] * out->dims[2] >= KC_WF_MAX_PIXELS)
        return 0;
    /* F(4x4) where it has the tiles; else F(2x2), whose 4x4 products per
     * 2x2 outputs still halve direct's multiplications (one 7x7 image: 16
     * tiles x 16 = 256 per input and output channel against 441): one 7x7
     * image of 512 -> 512 on one thread took 0.82x the direct
     * convolution's time, one 8x8 of 448 -> 384 0.77x. On two threads it
     * took 1.08x and 1.12x while the threads shared the transformed
     * inputs; each transforming its own (kc_wf_part_alone), ResNet50's
     * three 7x7 layers at batch 1 went from 0.88-0.95 ms (direct) to
     * 0.77-0.84 each */
    st->m = 4;
    if (!kc_wino2d_grid_init(&st->grid, in, out, 3, a->padding, 4))
        return 0;
    int few = st->grid.tiles <= KC_WF_FUSED_MAX_TILES &&
              kc_shape_count(out) / st->f >= KC_WF_FUSED_MIN_OUTPUTS;
    /* KC_WINOFLY_FUSED=pieces (tests): F(4x4) on those few tiles through
     * the pieces of transformed kernel and the products, as on 16 tiles
     * and more: the same bits as kc_wf_fused */
    const char *how = getenv("KC_WINOFLY_FUSED");
    int pieces = few && st->fused && how && !strcmp(how, "pieces");
    st->fused = st->fused && few && !pieces;
    if (!st->fused && !pieces && st->grid.tiles < KC_WF_MIN_TILES &&
        !kc_env_off("KC_WINOFLY_F2")) {
        st->m = 2;
        kc_wino2d_grid_init(&st->grid, in, out, 3, a->padding, 2);
    }
    if (st->grid.tiles < KC_WF_MIN_TILES && !st->fused && !pieces)
        return 0;
    st->alpha = st->m + 2;
    st->vecs = (st->f + 15) / 16;
    st->act = kc_wino_act(a->activation);
    return 1;
}

/* ------------------------------------------------------------ build */

static void kc_wf_free(kc_kernel_state *s)
{
    kc_wf_state *st = (kc_wf_state *)s;
    kc_free_weights(st->w);
    free(st);
}

/* Keras's kernel (3, 3, c, f) into st->w: per output vector and input
 * channel, the 9 taps' 16 channels in a row, so that one piece of kernel
 * transform reads one stream. */
static kc_status kc_wf_repack(const kc_exec_ctx *ctx, kc_wf_state *st)
{
    const float *w = kc_w(ctx, 0);
    int64_t cf = st->c * st->f;
    /* on huge pages, as kc_dnnl_pack's (kc_calloc_weights); an earlier
     * measurement had InceptionV3 at 4 images on one thread 10% slower
     * so, level on 12-05 (batch 8 in two lanes, eight alternating pairs) */
    st->w = kc_calloc_weights((size_t)(st->vecs * st->c * 9 * 16), sizeof *st->w);
    if (!st->w)
        return KC_ERR_NOMEM;
    for (int64_t v = 0; v < st->vecs; v++)
        for (int64_t ci = 0; ci < st->c; ci++)
            for (int tap = 0; tap < 9; tap++) {
                float *dst = st->w + ((v * st->c + ci) * 9 + tap) * 16;
                for (int l = 0; l < 16; l++) {
                    int64_t fo = v * 16 + l;
                    dst[l] = fo < st->f ? w[tap * cf + ci * st->f + fo] : 0.0f;
                }
            }
    return KC_OK;
}

/* Whether the input transform and the products fetch the next rows of
 * transformed inputs ahead (KC_WINO2D_ROWS_AHEAD): yes in a
 * lane (one thread, cut.parts 1), where the tiles outgrow L2; on a team
 * too, except where the CPU is Intel's. There (a 2-vCPU Sapphire/Emerald
 * Rapids Xeon, 12-07, build/envab, ABBA, both orders of 120 runs each)
 * ResNet50 at batch 1 took 0.978 of the time without it (196 of 240
 * pairs faster): its 14x14 3x3 layers 0.90, the 56x56 and 28x28 ones
 * 0.96-0.97 (a team's tiles stay in its L2, and the fetch's counters
 * cost the products' loop two of its general registers: the rows'
 * pointers came back from the stack and from vector registers at every
 * step); at batch 8 (lanes) its 14x14 layers took 1.08x the time
 * without it. KC_WINO_FETCH_ROWS=1 / =0 says otherwise anywhere. */
static int kc_wf_fetch_rows_wanted(const kc_wf_state *st)
{
    return kc_env_switch("KC_WINO_FETCH_ROWS",
                         st->cut.parts < 2 || kc_isa_vendor() != KC_CPU_INTEL);
}

/* Whether the products fetch the next piece's kernel lines two a step
 * over each block's first steps (KC_WINO2D_LINES_LEAD) rather than spread
 * over all its steps: where the CPU is Intel's, or as KC_WINO_FETCH_LEAD=1
 * / =0 says. On a 2-vCPU Sapphire/Emerald Rapids Xeon (12-07, build/envab,
 * ResNet50 batch 1, both orders of 120 pairs): its 14x14 3x3 layers 0.925
 * and 0.949 of the time, the run 0.989-0.994. The spread fetch's counter
 * cost the loop an integer multiply, a compare and a branch a step, and
 * two general registers: a 24 multiply-add step then ran 61
 * instructions, two of them moves from vector registers on a
 * multiply-add port. The same sums: the same bits. */
static int kc_wf_lead_wanted(void)
{
    return kc_env_switch("KC_WINO_FETCH_LEAD", kc_isa_vendor() == KC_CPU_INTEL);
}

/* Parts: runs of output vectors, one per thread, at least two vectors
 * each, cut where the threads' measured speeds even their times
 * (kc_balance: ResNet50's 1x1 layers on kc_pw_conv); the block of tiles. */
static void kc_wf_plan(kc_wf_state *st)
{
    kc_balance_init(&st->cut, st->vecs, kc_parallel_width(), 2);
    int64_t tile_bytes = st->alpha * st->alpha * st->c * (int64_t)sizeof(float);
    int64_t most = KC_WF_TILES_BYTES / tile_bytes;
    if (most < KC_WF_MIN_TILES)
        most = KC_WF_MIN_TILES;
    int64_t blocks = (st->grid.tiles + most - 1) / most;
    st->block = (st->grid.tiles + blocks - 1) / blocks;
}

/* ------------------------------------------------------------ kernel */

/* The kernel transform's g (kc_wino2d_f3, points 0, 1, -1, 2, -2 and
 * infinity; alpha 4 stops after -1) has small integer entries: rows
 * (1 0 0), (1 1 1), (1 -1 1), (1 2 4), (1 -2 4), (0 0 1), the input
 * transform bt carrying the scale. So each of its rows is a sum, made
 * here with adds that share the pairs' common part, not multiply-adds by
 * constants: the adds run on the FPU's two add pipes beside the two FMA
 * ones, and six rows of three taps take 8 operations where the
 * multiply-adds took 14 (kc_wf_g_ok checks g is this one). ResNet50 at
 * batch 1 on two threads, `--stats` of three alternating runs: its six
 * 14x14 layers 2.07 -> 1.95 ms, its three 7x7 ones 1.59 -> 1.47 ms; the
 * run 15.8 -> 15.4 ms (medians of eight alternating). */
static const float kc_wf_g6[18] = {1, 0, 0, 1, 1, 1, 1, -1, 1, 1, 2, 4, 1, -2, 4, 0, 0, 1};
static const float kc_wf_g4[12] = {1, 0, 0, 1, 1, 1, 1, -1, 1, 0, 0, 1};

/* Whether st's g is the one the add chains below compute. */
static int kc_wf_g_ok(const kc_wf_state *st)
{
    const float *want = st->alpha == 6 ? kc_wf_g6 : kc_wf_g4;
    return memcmp(st->g, want, (size_t)st->alpha * 3 * sizeof(float)) == 0;
}

/* ------------------------------------------------------------ run */

typedef struct kc_wf_io {
    const kc_wf_state *st;
    const float *in, *bias;
    float *out;
    float *v;                        /* [alpha^2][n][c]: tiles t0 .. t0+n-1 */
    int64_t t0, n;
    kc_status status[KC_BALANCE_MAX_PARTS];
    double seconds[KC_BALANCE_MAX_PARTS]; /* each part's time in the run */
    int64_t units[KC_BALANCE_MAX_PARTS];  /* output vectors each part ran */
    kc_claims *vectors; /* the block's runs of output vectors, shared by the parts */
} kc_wf_io;

/* Bytes of a block's transformed inputs. */
static size_t kc_wf_v_bytes(const kc_wf_state *st)
{
    return (size_t)(st->alpha * st->alpha * kc_wino2d_ld(st->block * st->c)) * sizeof(float);
}

/* The block's tiles lo .. hi-1 transformed into io->v. */
static void kc_wf_inputs(const kc_wf_state *st, const kc_wf_io *io, int64_t lo, int64_t hi)
{
    for (int64_t b = lo; b < hi; b++) {
        const float *d[36];
        kc_wino2d_cells(&st->grid, st->m, st->alpha, st->c, io->in, io->t0 + b, d);
        st->simd->in2d(st->alpha, st->bt, st->c, d, io->v + b * st->c,
                       kc_wino2d_ld(io->n * st->c), st->product_flags & KC_WINO2D_ROWS_AHEAD);
    }
}

/* Part k's share of the block's tiles, transformed into io->v. */
static void kc_wf_inputs_job(void *arg, int k)
{
    kc_wf_io *io = arg;
    const kc_wf_state *st = io->st;
    kc_wf_inputs(st, io, io->n * k / st->cut.parts, io->n * (k + 1) / st->cut.parts);
}

/* The block's products for output vectors v0 .. v0+nv-1 back into the
 * output's channels from 16 * v0. */
static void kc_wf_outputs(const kc_wf_state *st, const kc_wf_io *io, int64_t v0, int nv,
                          const float *mt)
{
    int64_t width = 16 * nv, f0 = 16 * v0;
    int64_t f_all = st->f - f0 < width ? st->f - f0 : width;
    for (int64_t b = 0; b < io->n; b++) {
        float *y[16];
        int vh, vw;
        kc_wino2d_dests(&st->grid, st->m, st->f, io->out + f0, io->t0 + b, y, &vh, &vw);
        st->simd->out2d(st->m, st->alpha, st->at, f_all, mt + b * width, kc_wino2d_ld(io->n * width),
                            io->bias ? io->bias + f0 : NULL, st->act, y, vh, vw);
    }
}

/* A piece of the 3x3 kernel: output vectors v0 .. v0+nv-1 (nv 0: none),
 * input channels c0 .. c0+cn-1: nv runs of cn x 9 taps x 16 floats, 9
 * cache lines a channel. */
typedef struct kc_wf_piece {
    int64_t v0, c0, cn;
    int nv;
} kc_wf_piece;

/* The piece after output vectors v0 .. v0+nv-1 at input channels c0: the
 * next input channels, else `then` (the next run of output vectors, at
 * channel 0; nv 0: none). */
static kc_wf_piece kc_wf_next_piece(const kc_wf_state *st, int64_t v0, int nv, int64_t c0,
                                    kc_wf_piece then)
{
    if (c0 + KC_WF_KERNEL_CHANNELS < st->c)
        then = (kc_wf_piece){v0, c0 + KC_WF_KERNEL_CHANNELS, 0, nv};
    then.cn = st->c - then.c0 < KC_WF_KERNEL_CHANNELS ? st->c - then.c0 : KC_WF_KERNEL_CHANNELS;
    return then;
}

/* Product p's share (of `products`) of piece q's lines: the products
 * are dealt out to q's vectors in turn, each vector's run of lines split
 * evenly between its products, so that every share is one run.
 *
 * Why: the kernel's transform reads a piece (110 KB for 64 input
 * channels and 48 outputs) in one pass, from memory in a model larger
 * than the caches, and waits for it: F(2x2) on one 7x7 image of 512 ->
 * 512 on one thread spent 36% of its time there (at ~17 GB/s, near what
 * one core streams here) against 44% in the products. Fetched into L2
 * during the products of the piece before, one line every few of their
 * steps (kc_wino_simd's product), it is there when the transform comes.
 * Standalone with caches flushed, alternating: that layer 0.80x the time
 * without on one thread, 0.88-0.94x on two; 14x14 images of 256 -> 256
 * level. ResNet50 batch 1, alternating `--stats`: its three 7x7 layers
 * 2.57-2.72 -> 2.27 ms, its six 14x14 ones 3.40-3.51 -> 3.19-3.23, the
 * run 23.1-23.7 -> 22.4-22.8 ms (a slow phase); batch 8 and InceptionV3
 * level. The same lines fetched in bursts, a product's share at once
 * before it, gained nothing: the core stalled on its outstanding
 * misses. KC_WINOFLY_PREFETCH=0: none.
 * Where the 7x7 layers' time goes now (ResNet50 batch 1, F(2x2), 12-06,
 * each thread's times summed over the three layers a run): the kernel's
 * transform 0.40-0.43 ms (0.84-0.86 without this fetch), the products
 * 1.13-1.19 ms (~170 GFLOP/s a core; ~200 with their data in cache), the
 * input and output transforms 0.1 ms. A thread streams 4.7 MB of 3x3
 * kernel a layer; the transform still waits on ~2/3 of it. Tried, worse:
 * fetching two pieces ahead (the transform 0.49-0.57 ms: the L2 holds
 * the thread's transformed inputs, 524 KB, and its 197 KB piece), pieces
 * of 32 or 16 input channels (the products 1.31-1.37 and 1.67 ms, the
 * transform level). Routing 28x28 images here rather than to wino.c
 * (its kept kernel): ResNet50's 128 -> 128 layers 0.27 -> 0.44 ms.
 * What bounds these layers (12-06 evening, same Zen 5, batch 1, two
 * threads): chains of twelve layers, kernels in memory (7x7 512 -> 512:
 * 113 MB; 14x14 256 -> 256: 28 MB), timing probes with wrong outputs,
 * five alternating runs. A 7x7 layer took 0.70 ms; without the kernel's
 * transform (this fetch still running) 0.63; without either, the
 * products and the input and output transforms alone, 0.42; with every
 * layer reading the first one's kernel (from L3) 0.655. A 14x14 one:
 * 0.37, 0.32, 0.286, 0.35. So the fetch's stream slows the products by
 * about its own length (each core's misses in flight are few: ~15 GB/s
 * for both cores, where one core reading alone streams 28 GB/s), and L3
 * is little faster than memory for it. Tried to get the hardware's
 * streamer to do the fetching, all slower on the 7x7 chain: fetching
 * every second or fourth line, or the first 8 to 32 lines of each 4 KB,
 * 1.08-1.16x the time; plain loads instead of fetches 1.31x; the next
 * piece transformed in slices between the products, into a second
 * buffer, its kernel read by plain loads in order, 1.15-1.24x (14x14:
 * 1.33x, its two buffers overflowing L2). Fetch hints T0, T2 and NTA:
 * level with T1. The transformed kernel kept instead (F(2x2): 16.8 MB a
 * layer, made at build, every piece's as the products read it) and read
 * by the products from memory: 1.10-1.14x the time (two sets of five
 * runs): the stream is no faster with their plain loads in order, and
 * it has more bytes. Across layers, the pool's waiting threads warming the
 * next layer's weights (their spins fetching its lines): ResNet50 batch
 * 1 0.996 of the time over 8 alternating runs, level. */
static kc_wino2d_lines kc_wf_fetch_share(const kc_wf_state *st, const kc_wf_piece *q, int p,
                                         int products)
{
    kc_wino2d_lines none = {NULL, 0};
    if (!st->prefetch_l2 || q->nv < 1)
        return none;
    int j = p * q->nv / products;                      /* the vector p serves */
    int first = (j * products + q->nv - 1) / q->nv;    /* its first product */
    int next = ((j + 1) * products + q->nv - 1) / q->nv;
    kc_wino2d_lines run = {(const char *)(st->w + ((q->v0 + j) * st->c + q->c0) * 9 * 16),
                           q->cn * 9};
    return kc_wino2d_lines_share(run, p - first, next - first);
}

/* The block's transformed inputs (io->v: [36 points][tiles][c]) into
 * vf as kc_wino_simd's fused4 reads them, [6 rows i][c / 16 blocks][6
 * columns j][tiles][16 channels, a run every KC_WINO_FUSED_RUN floats]:
 * a block of 16 channels' 6 x tiles points of a row side by side, so
 * that fused4 reads a channel's at constant offsets from one pointer
 * (read at 6 x tiles offsets from the io->v rows, they took as many
 * pointers, which the compiler kept on the stack), and this copy moves
 * whole runs of 16 channels. Channel by channel ([6 rows][c][6][tiles],
 * 24 floats a channel, copied one float at a time) it took 28 us of each
 * thread's ~0.43 ms in ResNet50's 7x7 512 -> 512 layers at batch 1; by
 * runs 10-11 us (the Zen 5 of bench/results, 12-07, means over 300
 * layers; the run level within the noise: 0.997 over 10 alternating
 * pairs). The same values in the same order: the same bits. Floats past
 * c in a run are zeros (never read). */
static void kc_wf_fused_inputs(const kc_wf_state *st, const kc_wf_io *io, float *vf)
{
    int64_t ldv = kc_wino2d_ld(io->n * st->c), n = io->n, c = st->c, blocks = kc_wino_fused_blocks(c);
    for (int i = 0; i < 6; i++)
        for (int64_t cb = 0; cb < blocks; cb++) {
            float *to = vf + (i * blocks + cb) * 6 * n * KC_WINO_FUSED_RUN;
            int64_t lanes = c - cb * 16 < 16 ? c - cb * 16 : 16;
            for (int j = 0; j < 6; j++)
                for (int64_t t = 0; t < n; t++, to += KC_WINO_FUSED_RUN) {
                    memcpy(to, io->v + (i * 6 + j) * ldv + t * c + cb * 16,
                           (size_t)lanes * sizeof(float));
                    memset(to + lanes, 0, (size_t)(KC_WINO_FUSED_RUN - lanes) * sizeof(float));
                }
        }
}

/* Floats of kc_wf_fused_inputs's layout. */
static size_t kc_wf_fused_floats(const kc_wf_state *st, int64_t tiles)
{
    return (size_t)(36 * tiles * kc_wino_fused_blocks(st->c) * KC_WINO_FUSED_RUN);
}

/* Output vectors v0 .. v0+nv-1 over the block's (at most four) tiles,
 * one vector at a time, with the kernel transformed inside the products
 * (kc_wino_simd's fused4) from the transformed inputs in vf
 * (kc_wf_fused_inputs), then its output transform; each pass of its
 * channels fetches the next pass's taps into L2, the last one the next
 * vector's first (after v0+nv-1: `then`'s).
 * Measured apart on 12-07 (the Zen 5 of bench/results, fused4 on 4
 * tiles of 512 channels, 16 vectors a thread): 14.4-15.0 us a vector on
 * one thread with its kernel in cache; streamed on two threads, each its
 * own vectors, 18-21 us with the next vector fetched ahead and 31-36
 * without (since 12-07 the fetch runs a pass of 32 channels ahead instead,
 * level with the kernel in cache: wino_simd.inc's kc_ws_fused). Not better:
 * fetching two or three vectors ahead (18-28, by the machine's phase),
 * the next vector's lines all issued in the first half or third of the
 * loop (19.5-21 against 18-18.5); in ResNet50 (batch 1, 12 alternating
 * `--stats` pairs) the part's first vector fetched before its input
 * transform: its three 7x7 layers 1.010 of the time, the run 0.995. In
 * the network a vector took 22-26 us there (means over 300 layers). */
static void kc_wf_fused(const kc_wf_state *st, const kc_wf_io *io, int64_t v0, int nv,
                        const float *vf, float *mt, kc_wf_piece then)
{
    int64_t ldm = kc_wino2d_ld(io->n * 16), vector_floats = st->c * 9 * 16;
    for (int j = 0; j < nv; j++) {
        int64_t v = v0 + j, next = j + 1 < nv ? v + 1 : then.nv > 0 ? then.v0 : -1;
        int64_t lines = next >= 0 && st->prefetch_l2 ? st->c * 9 : 0;
        st->simd->fused4(st->w + v * vector_floats, st->c, vf, (int)io->n, mt, ldm,
                         lines ? (const char *)(st->w + next * vector_floats) : NULL, lines);
        kc_wf_outputs(st, io, v, 1, mt);
    }
}

/* Output vectors v0 .. v0+nv-1 over the block's tiles, u and mt the
 * thread's kernel and products buffers; `then` the piece after its last
 * (kc_wf_next_piece). */
static void kc_wf_vectors(const kc_wf_state *st, const kc_wf_io *io, int64_t v0, int nv,
                          float *u, float *mt, kc_wf_piece then)
{
    if (st->fused) { /* u holds the transformed inputs in kc_wf_fused_inputs's layout */
        kc_wf_fused(st, io, v0, nv, u, mt, then);
        return;
    }
    int64_t width = 16 * nv, ldv = kc_wino2d_ld(io->n * st->c);
    int products = st->alpha * st->alpha;
    for (int64_t c0 = 0; c0 < st->c; c0 += KC_WF_KERNEL_CHANNELS) {
        int64_t cn = st->c - c0 < KC_WF_KERNEL_CHANNELS ? st->c - c0 : KC_WF_KERNEL_CHANNELS;
        kc_wf_piece next = kc_wf_next_piece(st, v0, nv, c0, then);
        st->simd->kernel2d(st->w, st->c, st->alpha, v0, nv, c0, cn, u, kc_wino2d_ld(cn * 16 * nv));
        for (int p = 0; p < products; p++) {
            /* the next product's inputs: the next point's, or the next piece's first */
            const float *after = p + 1 < products ? io->v + (p + 1) * ldv + c0
                                 : c0 + cn < st->c ? io->v + c0 + cn
                                                   : NULL;
            st->simd->product(io->v + p * ldv + c0, st->c, u + p * kc_wino2d_ld(cn * width), cn,
                              mt + p * kc_wino2d_ld(io->n * width), width, io->n, nv, c0 == 0,
                              kc_wf_fetch_share(st, &next, p, products), st->product_flags, after);
        }
    }
    kc_wf_outputs(st, io, v0, nv, mt);
}

/* Output vectors a part claims at once (base/claims.h): the product's
 * widest through the pieces (a piece's transformed kernel serves its
 * vectors together); one fused, where each vector runs on its own anyway
 * (kc_wf_fused), so that a part done early can take a single vector from
 * the back of the other's run. ResNet50 batch 1, its three 7x7 layers
 * (the Zen 5 of bench/results, 12-07, pool probe, three alternating runs
 * of 100): the parts' ends 79-106 -> 42-55 us apart in all, the layers
 * 1.37-1.44 -> 1.31-1.34 ms. Through the pieces, narrower pieces would
 * cut finer (each part's 8 vectors of a 14x14 256 -> 256 layer run as
 * 3, 3, 2, ~50 us a vector, and the parts' ends there are 55-80 us
 * apart, `--stats`' idle ms), but cost more than that: ResNet50 batch 1,
 * its six such layers, pieces of at most 2 vectors 3.19-3.79 ms against
 * 2.86-3.28, of 1 4.80 against 3.17 (12-07, alternating runs). */
static int kc_wf_piece_most(const kc_wf_state *st)
{
    return st->fused ? 1 : KC_WF_NV;
}

/* Floats of a thread's buffer for a piece of transformed kernel: all
 * alpha^2 rows of KC_WF_KERNEL_CHANNELS input channels and the widest run
 * of output vectors (kc_wf_kernel_a). */
static size_t kc_wf_u_floats(const kc_wf_state *st)
{
    return (size_t)(st->alpha * st->alpha * kc_wino2d_ld(KC_WF_KERNEL_CHANNELS * 16 * KC_WF_NV));
}

/* Part k's output vectors over the block, up to three at a time (one
 * fused: kc_wf_piece_most): its run, then what is left of the others'
 * (`vectors`, base/claims.h; the last pieces evened out: 8 vectors run
 * as 3, 3, 2). */
static kc_status kc_wf_part(const kc_wf_state *st, kc_wf_io *io, int k, kc_claims *vectors)
{
    /* fused: the buffer holds kc_wf_fused_inputs's copy, not a piece of kernel */
    size_t u_floats = st->fused ? kc_wf_fused_floats(st, io->n) : kc_wf_u_floats(st);
    size_t m_floats = (size_t)(st->alpha * st->alpha * kc_wino2d_ld(io->n * 16 * KC_WF_NV));
    float *u = kc_dnnl_workspace(KC_DNNL_SLOT_DST, (u_floats + m_floats) * sizeof(float));
    if (!u)
        return kc_fail(KC_ERR_NOMEM, "out of memory for a Winograd convolution's buffers");
    float *mt = u + u_floats;
    if (st->fused)
        kc_wf_fused_inputs(st, io, u);
    kc_claim next;
    for (kc_claim now = kc_claims_next(vectors, k, &next); now.count > 0;
         now = kc_claims_next(vectors, k, &next)) {
        kc_wf_piece then = {next.first, 0, 0, (int)next.count};
        kc_wf_vectors(st, io, now.first, (int)now.count, u, mt, then);
        io->units[k] += now.count;
    }
    return KC_OK;
}

static void kc_wf_vectors_job(void *arg, int k)
{
    kc_wf_io *io = arg;
    io->status[k] = kc_wf_part(io->st, io, k, io->vectors);
}

/* Part k over every block with transformed inputs of its own: each
 * thread transforms all the block's tiles (a few percent of its
 * products' work: 36 products of its output channels a tile against some
 * 200 multiply-adds of transform) rather than its share of them into a
 * buffer both then read, with a meeting in between and half of every
 * product's inputs in the other core's cache. ResNet50 at batch 1 on two
 * threads, alternating runs: its six 14x14 layers 0.54-0.57 -> 0.49-0.52
 * ms each, the run 20.9 -> 20.3 ms (medians of five). Only where a
 * thread's own transformed inputs and its piece of transformed kernel fit
 * its core's L2 together (kc_wf_alone_fits). KC_WINOFLY_ALONE=0: shared;
 * =1: each its own. */
static kc_status kc_wf_part_alone(const kc_wf_state *st, kc_wf_io *shared, int k)
{
    kc_wf_io io = *shared;
    io.v = kc_dnnl_workspace(KC_DNNL_SLOT_SRC, kc_wf_v_bytes(st));
    if (!io.v)
        return kc_fail(KC_ERR_NOMEM, "out of memory for a Winograd convolution's buffers");
    /* the input in address order first (kernels/touch.c): half of it is
     * in the other core's cache, and the transform reads a tile's 36
     * cells side by side. ResNet50 batch 1, its nine layers here, eight
     * alternating `--stats` runs: 4.16 -> 3.94 ms (faster in 8 of 8),
     * each thread's transform of its 14x14 layers' 16 tiles 56 -> 36 us
     * (28 on one thread); KC_TOUCH=0: not */
    if (st->touch)
        kc_touch(io.in, kc_shape_count(&st->in_shape) * (int64_t)sizeof(float));
    for (io.t0 = 0; io.t0 < st->grid.tiles; io.t0 += st->block) {
        io.n = st->grid.tiles - io.t0 < st->block ? st->grid.tiles - io.t0 : st->block;
        kc_wf_inputs(st, &io, 0, io.n);
        /* one block: every part has all the tiles, and takes what the
         * others leave; several: the parts go through them unmet, each
         * on its own run */
        kc_claims own;
        if (io.n < st->grid.tiles) {
            kc_claims_init(&own, &st->cut, kc_wf_piece_most(st));
            own.steal = 0; /* no other part claims from this copy of the runs */
        }
        KC_TRY(kc_wf_part(st, &io, k, io.n < st->grid.tiles ? &own : shared->vectors));
    }
    shared->units[k] = io.units[k];
    return KC_OK;
}

/* A core's L2 in bytes (1 MiB where the system does not say). */
static int64_t kc_wf_l2_bytes(void)
{
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? (int64_t)l2 : (int64_t)1 << 20;
}

/* Whether a thread's own transformed inputs (a block of tiles, all input
 * channels) and its piece of transformed kernel fit its core's L2.
 * ResNet50's 14x14 layers do, just, on a 1 MiB L2 (592 + 445 KB with the
 * rows a line apart), and run alone: on the Zen 5 of 12-06, two threads,
 * 380 us a layer alone against 439 sharing one buffer (KC_WINOFLY_ALONE=0:
 * each thread's products 211 against 266 us, half of the shared inputs
 * coming from the other core's cache). (When the piece of kernel was
 * first made whole, an earlier build of this kernel measured those layers
 * the other way round, 1.80 -> 1.71 ms for the six sharing.) Its 7x7 ones
 * (F(2x2): 524 + 197 KB) were level either way, as batch 8 (13.1 -> 12.9
 * ms) and InceptionV3 (19.0 -> 19.1). */
static int kc_wf_alone_fits(const kc_wf_state *st)
{
    /* fused: the transformed inputs twice (kc_wf_fused_inputs's copy)
     * rather than a piece of transformed kernel */
    size_t bytes = kc_wf_v_bytes(st) + (st->fused ? kc_wf_fused_floats(st, st->block)
                                                  : kc_wf_u_floats(st)) * sizeof(float);
    return (int64_t)bytes <= kc_wf_l2_bytes();
}

static void kc_wf_alone_job(void *arg, int k)
{
    kc_wf_io *io = arg;
    io->status[k] = kc_wf_part_alone(io->st, io, k);
}

/* The first of io's `parts` parts to have failed, as the layer's error. */
static kc_status kc_wf_parts_status(const kc_wf_io *io, int parts)
{
    for (int k = 0; k < parts; k++)
        if (io->status[k] != KC_OK)
            return kc_fail(io->status[k], "part %d of a Winograd convolution failed", k);
    return KC_OK;
}

/* The parts of `job` side by side, their times added to io->seconds,
 * and the first part's failure. */
static kc_status kc_wf_run_parts(const kc_wf_state *st, void (*job)(void *, int), kc_wf_io *io)
{
    kc_parallel_timed(st->cut.parts, job, io, io->seconds);
    return kc_wf_parts_status(io, st->cut.parts);
}

/* A part's vectors for a helped block; the vectors it ran. */
static long kc_wf_help_job(void *arg, int k)
{
    kc_wf_io *io = arg;
    int64_t before = io->units[k];
    io->status[k] = kc_wf_part(io->st, io, k, io->vectors);
    return (long)(io->units[k] - before);
}

/* A lane's block (one part: its thread transformed the tiles into io->v)
 * with idle lanes to help (base/help.h): the output vectors cut into
 * `parts` runs, this thread's the first, the others posted for the idle
 * lanes, each part with its own kernel and products buffers
 * (kc_wf_part). A vector is computed the same way whichever thread
 * takes it: the same bits. */
static kc_status kc_wf_run_helped(const kc_wf_state *st, kc_wf_io *io, int parts)
{
    kc_balance cut;
    kc_balance_init(&cut, st->vecs, parts, 1);
    kc_claims vectors;
    kc_claims_init(&vectors, &cut, kc_wf_piece_most(st));
    vectors.steal = 1; /* this thread takes what no helper came for */
    io->vectors = &vectors;
    for (int k = 0; k < cut.parts; k++)
        io->status[k] = KC_OK;
    kc_help_task task = {.fn = kc_wf_help_job, .arg = io, .parts = cut.parts};
    kc_help_open(&task);
    kc_wf_help_job(io, 0);
    kc_help_close(&task);
    return kc_wf_parts_status(io, cut.parts);
}

/* One run; the parts' vectors then cut again by their times (the
 * transforms of shared inputs, cut by tiles, are not counted). */
static kc_status kc_wf_execute(kc_wf_state *st, const kc_exec_ctx *ctx)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    kc_claims vectors;
    kc_wf_io io = {st,   ctx->in[0], a->use_bias ? kc_w(ctx, 1) : NULL, ctx->out[0], NULL, 0, 0,
                   {KC_OK}, {0},     {0},        &vectors};
    if (st->cut.parts > 1 && st->alone) {
        kc_claims_init(&vectors, &st->cut, kc_wf_piece_most(st));
        KC_TRY(kc_wf_run_parts(st, kc_wf_alone_job, &io));
        kc_balance_update_units(&st->cut, io.seconds, io.units);
        return KC_OK;
    }
    io.v = kc_dnnl_workspace(KC_DNNL_SLOT_SRC, kc_wf_v_bytes(st));
    if (!io.v)
        return kc_fail(KC_ERR_NOMEM, "out of memory for a Winograd convolution's buffers");
    int helpers = st->cut.parts == 1 ? kc_help_parts() : 1;
    for (io.t0 = 0; io.t0 < st->grid.tiles; io.t0 += st->block) {
        io.n = st->grid.tiles - io.t0 < st->block ? st->grid.tiles - io.t0 : st->block;
        kc_parallel(st->cut.parts, kc_wf_inputs_job, &io);
        if (helpers > 1) {
            KC_TRY(kc_wf_run_helped(st, &io, helpers));
            continue;
        }
        kc_claims_init(&vectors, &st->cut, kc_wf_piece_most(st));
        KC_TRY(kc_wf_run_parts(st, kc_wf_vectors_job, &io));
    }
    kc_balance_update_units(&st->cut, io.seconds, io.units);
    return KC_OK;
}

kc_status kc_wino_fly_conv(const kc_exec_ctx *ctx, int *handled, int *act_done)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    *handled = 0;
    *act_done = 0;
    if (!ctx->state)
        return KC_OK;
    kc_wf_state *st = (kc_wf_state *)*ctx->state;
    if (st && st->base.free != kc_wf_free)
        return KC_OK; /* another kernel's state: the layer was built another way */
    const kc_wino_simd *simd = kc_wino_simd_pick();
    if (ctx->exact || ctx->w_ext || kc_wf_off() || !kc_dnnl_ready() || !simd) {
        if (st)
            kc_kernel_state_drop(ctx);
        return KC_OK;
    }
    if (st && !kc_shape_equal(&st->in_shape, &ctx->in_shape[0]))
        st = kc_kernel_state_drop(ctx);
    if (!st) {
        kc_wf_state probe;
        memset(&probe, 0, sizeof probe);
        probe.fused = simd->fused4 && !kc_env_off("KC_WINOFLY_FUSED");
        if (!kc_wf_geometry(ctx, a, &probe) ||
            kc_wino2d_f3(probe.m, probe.at, probe.bt, probe.g) || !kc_wf_g_ok(&probe))
            return KC_OK;
        st = kc_calloc(1, sizeof *st);
        if (!st)
            return KC_ERR_NOMEM;
        *st = probe;
        st->base.free = kc_wf_free;
        st->in_shape = ctx->in_shape[0];
        st->prefetch_l2 = !kc_env_off("KC_WINOFLY_PREFETCH");
        st->simd = simd;
        kc_wf_plan(st);
        const char *alone = getenv("KC_WINOFLY_ALONE");
        st->alone = alone ? strcmp(alone, "0") != 0 : kc_wf_alone_fits(st);
        st->touch = kc_touch_wanted();
        st->product_flags = (kc_wf_fetch_rows_wanted(st) ? KC_WINO2D_ROWS_AHEAD : 0) |
                            (kc_wf_lead_wanted() ? KC_WINO2D_LINES_LEAD : 0);
        if (kc_wf_repack(ctx, st) != KC_OK) {
            kc_wf_free(&st->base);
            return KC_ERR_NOMEM;
        }
        st->base.weights_cached = 1; /* the repacked kernel is the one read now */
        *ctx->state = &st->base;
    }
    KC_TRY(kc_wf_execute(st, ctx));
    *handled = 1;
    *act_done = st->act != 3;
    return KC_OK;
}

kc_balance *kc_wino_fly_balance(kc_kernel_state *state)
{
    return state && state->free == kc_wf_free ? &((kc_wf_state *)state)->cut : NULL;
}

int kc_wino_fly_parts(const kc_kernel_state *state)
{
    if (!state || state->free != kc_wf_free)
        return 0;
    return ((const kc_wf_state *)state)->cut.parts;
}

int kc_wino_fly_touches(const kc_kernel_state *state)
{
    return state && state->free == kc_wf_free && ((const kc_wf_state *)state)->alone &&
           ((const kc_wf_state *)state)->cut.parts > 1 && ((const kc_wf_state *)state)->touch;
}

int kc_wino_fly_fetches_rows(const kc_kernel_state *state)
{
    return state && state->free == kc_wf_free &&
           (((const kc_wf_state *)state)->product_flags & KC_WINO2D_ROWS_AHEAD);
}

int kc_wino_fly_tile(const kc_kernel_state *state)
{
    if (!state || state->free != kc_wf_free)
        return 0;
    return ((const kc_wf_state *)state)->m;
}

int kc_wino_fly_claim_most(const kc_kernel_state *state)
{
    if (!state || state->free != kc_wf_free)
        return 0;
    return kc_wf_piece_most((const kc_wf_state *)state);
}

int kc_wino_fly_alone(const kc_kernel_state *state)
{
    if (!state || state->free != kc_wf_free)
        return 0;
    return ((const kc_wf_state *)state)->alone;
}
