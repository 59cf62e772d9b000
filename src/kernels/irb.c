/* MobileNet's inverted-residual block (1x1 expansion, 3x3 depthwise, 1x1
 * projection, the residual sum) as one kernel, a band of rows at a time.
 *
 * Run as three layers, the block writes its expanded tensor (6x the
 * block's channels: 4.8 MB for MobileNetV2's 112x112 block at batch 1),
 * reads it back for the depthwise convolution, writes that and reads it
 * again for the projection, and each of the ~50 layers pays its own fork
 * and join. Here each thread owns a run of output rows, cut into bands:
 * for a band it expands only the input rows the band's depthwise rows
 * read (keeping the last ones for the next band), runs the depthwise rows
 * from them and projects the band straight into the output, the residual
 * added in the same pass; the band's rows stay in the core's L2. On the
 * 2-core AMD EPYC of bench/results, MobileNetV2 at batch 1, 2 threads,
 * the 16 blocks against the three layers each: 112x112 -> 56x56 0.24
 * against 0.37 ms, 56x56 0.25 against 0.34, 28x28 0.09 against 0.11-0.12,
 * 14x14 and 7x7 level; the model 2.6 against 3.0-3.2 ms (batch 8 level,
 * peak RSS 58 against 66 MB). With the depthwise rows four columns at a
 * time (below): 2.40 ms at batch 1, 1.99 ms per image at batch 8.
 *
 * Where the block's weights outweigh its image (the 7x7 blocks: 1.2 MB
 * of weights), threads own expanded channels instead of rows: each reads
 * its share of the weights only, projects its channels into a partial
 * sum of every output, and a second pass adds the partials.
 *
 * The vector loops are irb_simd.inc's, built for AVX-512 and for AVX2:
 * the 1x1 products a small kernel (6 pixels x 48 channels of accumulators
 * on AVX-512, 6 x 16 on AVX2) on weights packed once at build, a block's
 * channels to a panel; the depthwise rows a vector of channels at a time
 * (on AVX2, where it takes the layer, dw.h's two-row loop instead). Plain
 * float32 sums in another order than oneDNN's: the same rounding class
 * as any direct convolution, so `exact` keeps it. By default the kernel
 * runs with AVX-512 only (kc_irb_wanted).
 *
 * A block without expansion (a 3x3 depthwise layer that no 1x1 feeds,
 * read only by a 1x1 projection: MobileNetV2's first block, after its
 * 3x3 stem) runs here too, on the depthwise node: its depthwise rows
 * read the input's rows where they are, and go straight into the
 * projection, never written whole. MobileNetV2, 2-vCPU Zen 5, --stats,
 * alternating: that block at batch 1 0.236-0.256 -> 0.185-0.200 ms (the
 * run ~3% faster), batch 8 level; the arena 3.2 -> 2.4 MB at batch 1,
 * 10.4 -> 8.8 at batch 8. It takes no residual: its output would go
 * over the input rows its neighbours' depthwise rows still read.
 *
 * Where that depthwise layer reads a stem (a convolution over an image's
 * few channels that stem.h's loop takes: MobileNetV2's 3x3 stride-2
 * Conv1), the stem is the block's expansion instead: its rows are
 * computed band by band into the core's cache (kc_stem_loop, the same
 * bits as the layer alone), and its 1.6 MB output is never written.
 * Alone, the stem wrote it and the depthwise rows read it back at half
 * their speed on cached rows. MobileNetV2, the 2-vCPU Zen 4, ten
 * alternating pairs: stem and block 0.269 -> 0.236 ms at batch 1, the
 * run 0.987 of the time; 2.58 -> 1.94 ms a batch at batch 8 (0.972).
 *
 * In place: a block with a residual writes its output over its input
 * (the sum's slot, runtime/fuse.c). A thread's rows then overwrite input
 * rows a neighbouring thread's depthwise rows still read, so with rows
 * cut between threads each thread first expands those border rows (a
 * first parallel pass), then runs its rows (a second). */
#include "kernels/irb.h"

#include <stdlib.h>
#include <string.h>

#include "base/balance.h"
#include "base/env.h"
#include "base/mem.h"
#include "base/threads.h"
#include "kernels/dnnl_common.h"
#include "kernels/dw.h"
#include "kernels/irb_simd.h"
#include "kernels/isa.h"
#include "kernels/stem.h"

#define KC_IRB_MAX_PARTS 16

/* ------------------------------------------------------------ eligibility */

static int kc_irb_act(const char *act)
{
    if (!act || !strcmp(act, "linear"))
        return 0;
    if (!strcmp(act, "relu"))
        return 1;
    return !strcmp(act, "relu6") ? 2 : -1;
}

/* A 2-D convolution of `kind` with a (k, k) kernel, equal strides, no
 * dilation, one group, no pooling fused into it (nor, but for the
 * expansion, which carries them, other layers). */
static int kc_irb_conv_is(const kc_conv_attrs *a, kc_conv_kind kind, int64_t k, int carrier)
{
    if (a->kind != kind || a->spatial != 2 || a->groups != 1 ||
        (!carrier && (a->post_dw || a->post_pw)) || a->pre_pool || a->padding == 2 ||
        kc_irb_act(a->activation) < 0)
        return 0;
    for (int i = 0; i < 2; i++)
        if (a->kernel[i] != k || a->dilation[i] != 1 || a->strides[i] != a->strides[0])
            return 0;
    return 1;
}

/* The depthwise layer's output length and padding before, along an axis
 * of `len` data values (a folded ZeroPadding adds before / after). */
static int kc_irb_axis(const kc_conv_attrs *d, int axis, int64_t len, int64_t *out,
                       int64_t *pad)
{
    int64_t s = d->strides[axis];
    int64_t padded = len + d->pad_before[axis] + d->pad_after[axis];
    *pad = d->pad_before[axis];
    if (d->padding == 1) {
        *out = (padded + s - 1) / s;
        *pad += kc_conv_pad_before(padded, *out, 3, s, 1);
    } else
        *out = padded >= 3 ? (padded - 3) / s + 1 : 0;
    return *out > 0;
}

/* Whether expansion ex is a stem, a convolution over few input channels
 * that stem.h's loop takes (MobileNetV2's 3x3 stride-2 Conv1 from RGB),
 * rather than a 1x1: its geometry into *sg. Why: run alone, the stem
 * wrote its 1.6 MB output (112x112x32) for the first block's depthwise
 * rows to read back, and those rows ran at half the speed they reach on
 * rows in the core's cache (0.064 against 0.032 ms a thread, the Zen 4).
 * KC_IRB_STEM=0: never. */
static int kc_irb_stem_of(const kc_conv_attrs *ex, const kc_shape *in, kc_stem_geom *sg)
{
    return ex && (ex->kernel[0] != 1 || ex->kernel[1] != 1) && !kc_env_off("KC_IRB_STEM") &&
           kc_stem_block_takes(ex, in, sg);
}

/* The block's geometry: expansion ex (NULL: none, the depthwise layer
 * reads the input itself; a 1x1, or a stem: its geometry into *sg where
 * sg is not NULL), depthwise layer dw, projection pw, the input `in`. A
 * block without expansion adds no residual: its output would go over the
 * input rows its depthwise rows still read (irb.c's halo rows are
 * expanded ones); nor does a stem's, whose input is an image of another
 * shape. */
static int kc_irb_geometry(const kc_conv_attrs *ex, const kc_layer *dw, const kc_layer *pw,
                           const kc_shape *in, kc_irb_geom *g, kc_stem_geom *sg)
{
    const kc_conv_attrs *d = dw->attrs, *p = pw->attrs;
    kc_stem_geom stem_geom;
    int stem = kc_irb_stem_of(ex, in, &stem_geom);
    if ((ex && !stem &&
         (!kc_irb_conv_is(ex, KC_CONV_PLAIN, 1, 1) || ex->accumulate || ex->strides[0] != 1)) ||
        !kc_irb_conv_is(d, KC_CONV_DEPTHWISE, 3, !ex) || d->accumulate ||
        (!ex && (d->post_dw || p->accumulate)) ||
        d->depth_multiplier != 1 || (d->strides[0] != 1 && d->strides[0] != 2) ||
        !kc_irb_conv_is(p, KC_CONV_PLAIN, 1, 0) || p->strides[0] != 1 || in->rank != 4)
        return 0;
    for (int i = 0; i < 2; i++)
        if ((ex && !stem && (ex->pad_before[i] || ex->pad_after[i])) || p->pad_before[i] ||
            p->pad_after[i])
            return 0;
    memset(g, 0, sizeof *g);
    /* a depthwise carrier's input value counts a folded ZeroPadding in:
     * the rows and columns of data are the value's less the padding */
    int64_t dims[KC_MAX_RANK];
    memcpy(dims, in->dims, sizeof dims);
    if (!ex)
        kc_conv_data_shape(d, dims, in->rank);
    if (stem) { /* the depthwise layer reads the stem's output */
        dims[1] = stem_geom.out_h;
        dims[2] = stem_geom.out_w;
        if (sg)
            *sg = stem_geom;
    }
    g->n = dims[0];
    g->h = dims[1];
    g->w = dims[2];
    g->cin = dims[3];
    g->cm = ex ? ex->filters : g->cin;
    g->cout = p->filters;
    g->s = d->strides[0];
    g->identity = !ex;
    g->stem = stem;
    if (g->n < 1 || g->cin < 1 || g->cm < 1 || g->cout < 1 ||
        !kc_irb_axis(d, 0, g->h, &g->ho, &g->pt) || !kc_irb_axis(d, 1, g->w, &g->wo, &g->pl))
        return 0;
    if (!dw->weights || !pw->weights || !dw->weights[0].data || !pw->weights[0].data ||
        kc_count(&dw->weights[0].shape) != 9 * g->cm ||
        kc_count(&pw->weights[0].shape) != g->cm * g->cout ||
        (d->use_bias && (dw->n_weights < 2 || !dw->weights[1].data)) ||
        (p->use_bias && (pw->n_weights < 2 || !pw->weights[1].data)))
        return 0;
    g->act_e = ex ? kc_irb_act(ex->activation) : 0;
    g->act_d = kc_irb_act(d->activation);
    g->act_p = kc_irb_act(p->activation);
    return 1;
}

/* Why AVX2 only where asked (KC_IRB=1): there oneDNN's 1x1 convolutions
 * run about as fast as the block's 1x1 products, so the block gains only
 * what it saves around them (the expanded tensors' trips to L3, two of
 * every three forks and joins), and that was not enough. MobileNetV2 on
 * the 2-core Zen 3, alternating with the three layers: one image on two
 * threads 1.04 (0.99-1.10) of their time when the machine ran quiet
 * (4.2-4.8 ms), 0.93 (0.90-1.03) in a slow phase (5.9-6.7 ms); one
 * thread 1.08-1.09; 8 images 1.08-1.10. With the stride-2 blocks'
 * depthwise rows (after a folded ZeroPadding) on dw.h's loop too: two
 * threads 1.01 (0.99-1.04), one thread 1.05-1.09. */
static int kc_irb_wanted(void)
{
    const char *env = getenv("KC_IRB");
    if (env && !strcmp(env, "0"))
        return 0;
    kc_isa_level isa = kc_isa();
    return isa == KC_ISA_AVX512 || (isa == KC_ISA_AVX2 && env && !strcmp(env, "1"));
}

int kc_irb_fusable(const kc_conv_attrs *ex, const kc_layer *dw, const kc_layer *pw,
                   const kc_shape *in)
{
    kc_irb_geom g;
    return kc_irb_wanted() && kc_irb_geometry(ex, dw, pw, in, &g, NULL);
}

/* ------------------------------------------------------------ 1x1 packing */

/* n channels padded to whole 16-float vectors. */
static int64_t kc_irb_vectors(int64_t n) { return (n + 15) / 16 * 16; }

/* Floats kc_irb_pack writes for a k x n kernel. */
static int64_t kc_irb_packed_floats(int64_t k, int64_t n) { return k * kc_irb_vectors(n); }

/* Keras's 1x1 kernel w (k x n, row-major) into packed, in panels of
 * `panel` output channels (see kc_irb_mm). */
static void kc_irb_pack(const float *w, int64_t k, int64_t n, int64_t panel, float *packed)
{
    for (int64_t n0 = 0; n0 < n; n0 += panel) {
        int64_t nn = n - n0 < panel ? n - n0 : panel;
        int64_t width = kc_irb_vectors(nn);
        float *at = packed + k * n0;
        for (int64_t r = 0; r < k; r++) {
            memcpy(at + r * width, w + r * n + n0, (size_t)nn * sizeof *w);
            memset(at + r * width + nn, 0, (size_t)(width - nn) * sizeof *w);
        }
    }
}

/* ------------------------------------------------------------ the block */

/* Built for one input shape; what it holds is the layers' values (copies:
 * the layers a new plan fuses again are new copies of the same values). */
typedef struct kc_irb_state {
    kc_kernel_state base;
    kc_shape in_shape;
    kc_irb_geom g;
    float *packed;            /* we, wp, be, bp, wd, bd: one allocation */
    kc_irb_w w;
    const kc_irb_ops *ops;    /* the loops of the instruction set it was built on */
    const kc_irb_ops *narrow; /* or NULL: the 1x1 products of KC_IRB_NARROW outputs */
    /* AVX2, 8k channels: the depthwise rows on dw.h's loop, its
     * geometry and weights (dw_w NULL: on ops->dw_cols) */
    kc_dw_geom dwg;
    float *dw_w, *dw_b;
    /* one image cut by rows: where the threads' measured speeds even
     * their times (kc_balance) */
    kc_balance cut;
    kc_stem_loop stem; /* g.stem: the expansion's loop */
} kc_irb_state;

static void kc_irb_free(kc_kernel_state *s)
{
    kc_irb_state *st = (kc_irb_state *)s;
    kc_stem_loop_free(&st->stem);
    kc_free_weights(st->packed);
    free(st->dw_w);
    free(st->dw_b);
    free(st);
}

/* Copy n values of v (zeros where v is NULL) and pad to whole vectors. */
static float *kc_irb_put_bias(float *at, const float *v, int64_t n)
{
    int64_t width = kc_irb_vectors(n);
    memset(at, 0, (size_t)width * sizeof *at);
    if (v)
        memcpy(at, v, (size_t)n * sizeof *at);
    return at + width;
}

/* The block's depthwise layer d as dw.h's loop sees it, one image of
 * the expanded rows in; 0 where that loop does not take it. Why that
 * loop on AVX2: two output rows at a time, each input vector read once
 * for both. With ops->dw_cols' one row (8 channels a vector), the
 * blocks' depthwise rows took 0.85 ms of MobileNetV2's 5.6 at batch 1 on
 * the Zen 3, where the layers alone took 0.33. */
static int kc_irb_dw_geometry(const kc_irb_geom *g, const kc_conv_attrs *d, kc_dw_geom *out)
{
    /* the layer's input value as the layer sees it: a folded ZeroPadding
     * counted in (kc_conv_data_shape takes it off again) */
    kc_shape mid = {.rank = 4,
                    .dims = {1, g->h + d->pad_before[0] + d->pad_after[0],
                             g->w + d->pad_before[1] + d->pad_after[1], g->cm}};
    kc_shape dw_out = {.rank = 4, .dims = {1, g->ho, g->wo, g->cm}};
    return kc_dw_geometry(d, &mid, &dw_out, 2, out) && out->pad_t == g->pt &&
           out->pad_l == g->pl;
}

/* The state for ctx's block, of geometry *g: its 1x1 kernels packed.
 * ctx's layer is the expansion, or the depthwise layer of a block
 * without one. */
static kc_status kc_irb_build(const kc_exec_ctx *ctx, const kc_irb_geom *g,
                              const kc_stem_geom *sg, kc_irb_state **out)
{
    const kc_conv_attrs *carrier = ctx->layer->attrs;
    const kc_layer *pw = carrier->post_pw;
    const kc_conv_attrs *d = g->identity ? carrier : carrier->post_dw->attrs;
    const kc_conv_attrs *p = pw->attrs;
    const float *we = g->identity ? NULL : kc_w(ctx, 0);
    const float *wd_from = g->identity ? kc_w(ctx, 0) : carrier->post_dw->weights[0].data;
    const float *bd_from = !d->use_bias ? NULL
                           : g->identity ? kc_w(ctx, 1)
                                         : carrier->post_dw->weights[1].data;
    if ((!g->identity && !we) || !wd_from || (d->use_bias && !bd_from))
        return kc_fail(KC_ERR_UNSUPPORTED, "the block's weights are gone");
    kc_isa_level isa = kc_isa();
    if (isa == KC_ISA_NONE)
        return kc_fail(KC_ERR_UNSUPPORTED, "the block kernel needs AVX2 or AVX-512 (KC_ISA)");
    int64_t ne = g->identity || g->stem ? 0 : kc_irb_packed_floats(g->cin, g->cm);
    int64_t np = kc_irb_packed_floats(g->cm, g->cout);
    int64_t biases = 2 * kc_irb_vectors(g->cm) + kc_irb_vectors(g->cout);
    int64_t total = ne + np + biases + 9 * g->cm;
    kc_irb_state *st = kc_calloc(1, sizeof *st);
    /* read at every run: in the weights heap, on huge pages (mem.h) */
    if (!st || !(st->packed = kc_calloc_weights((size_t)total, sizeof(float)))) {
        free(st);
        return KC_ERR_NOMEM;
    }
    st->base.free = kc_irb_free;
    st->ops = isa == KC_ISA_AVX512 ? &kc_irb_ops_avx512 : &kc_irb_ops_avx2;
    st->narrow = isa == KC_ISA_AVX512 && kc_isa_vec_bits() == 256 ? &kc_irb_ops_avx512y : NULL;
    st->in_shape = ctx->in_shape[0];
    st->g = *g;
    float *at = st->packed;
    if (g->stem &&
        kc_stem_loop_build(sg, we, carrier->use_bias ? kc_w(ctx, 1) : NULL, &st->stem) != KC_OK) {
        kc_irb_free(&st->base);
        return KC_ERR_NOMEM;
    }
    if (we && !g->stem)
        kc_irb_pack(we, g->cin, g->cm, st->ops->panel, at);
    kc_irb_pack(pw->weights[0].data, g->cm, g->cout, st->ops->panel, at + ne);
    st->w.we = we && !g->stem ? at : NULL;
    st->w.wp = at + ne;
    st->w.be = at + ne + np;
    st->w.bp = kc_irb_put_bias(at + ne + np, !we || !carrier->use_bias ? NULL : kc_w(ctx, 1),
                               g->cm);
    float *wd = kc_irb_put_bias((float *)st->w.bp, p->use_bias ? pw->weights[1].data : NULL,
                                g->cout);
    /* copies, as of the 1x1 kernels: a new plan fuses the layers again,
     * into new session copies, and may free these (kc_session_refuse) */
    memcpy(wd, wd_from, (size_t)(9 * g->cm) * sizeof *wd);
    st->w.wd = wd;
    st->w.bd = wd + 9 * g->cm;
    kc_irb_put_bias((float *)st->w.bd, bd_from, g->cm);
    if (isa == KC_ISA_AVX2 && !kc_env_off("KC_DW") && kc_irb_dw_geometry(g, d, &st->dwg) &&
        kc_dw_weights(wd, st->w.bd, g->cm, &st->dw_w, &st->dw_b) != KC_OK) {
        kc_irb_free(&st->base);
        return KC_ERR_NOMEM;
    }
    /* the expansion's kernel is read packed now; a depthwise carrier's
     * is copied too */
    st->base.weights_cached = 1;
    *out = st;
    return KC_OK;
}

/* The expanded rows of a band of output rows: within this much of the
 * core's L2 (1 MB here), beside the band's depthwise outputs and a block
 * of weights. Bands, not single rows: each 1x1 product then reads its
 * weights once per band; row by row, the 7x7 blocks (7 pixels a row)
 * read their 1.2 MB of weights 16 times per image and ran at a third of
 * the speed of the three layers. */
#define KC_IRB_BAND_BYTES ((int64_t)384 << 10)
/* Several images of a part, each small enough, run whole together (their
 * 1x1 products one each) within this much of expanded rows: MobileNetV2's
 * 7x7 blocks, 4 images on one thread, 0.70 against 0.75 ms (and 1.00
 * against 1.07 for the 160 -> 960 -> 320 one) one image at a time. */
#define KC_IRB_GROUP_BYTES ((int64_t)1024 << 10)

/* A part: output rows [y0, y1) of images [i0, i1); border rows expanded
 * beforehand (in place, rows cut between threads) in halo, their input
 * row numbers in halo_row (-1: none). */
typedef struct kc_irb_part {
    int64_t i0, i1, y0, y1;
    int64_t halo_row[2];
    float *halo;
    int64_t c0, c1;        /* cut by channels: its expanded channels */
    int64_t p0, p1;        /* and its output pixels in the sum */
} kc_irb_part;

typedef struct kc_irb_run {
    const kc_irb_geom *g;
    kc_irb_w w;
    const kc_irb_ops *ops;
    const kc_irb_ops *narrow; /* kc_irb_state's */
    const kc_dw_geom *dwg;  /* the depthwise rows on dw.h's loop, or NULL */
    const float *dw_w, *dw_b;
    const float *in;
    float *out;
    const kc_stem_loop *stem; /* g->stem: the expansion's loop */
    int residual;          /* the projection adds to what out holds */
    int64_t band;          /* output rows per band */
    int64_t images;        /* small images: how many run whole together */
    int by_channel;        /* parts own expanded channels (kc_irb_cut_channels) */
    float *halo;           /* in place, cut by rows: two border rows a part */
    float *partial;        /* cut by channels: each part's projection */
    int n_parts;
    kc_irb_part part[KC_IRB_MAX_PARTS];
    int failed[KC_IRB_MAX_PARTS];
} kc_irb_run;

/* At most this many output channels, a 1x1 product runs on AVX-512's
 * 256-bit vectors where its 512-bit ones run on 256-bit halves (the Zen
 * 4): MobileNetV2's 24-channel projections as 3 x 8 channels, 57.8 GMAC/s
 * a core against 50.9 as 16 + 8 (kc_irb_block_24), its 16-channel one
 * 55.3 against 50.2 (the peak 58.7); from 32 channels on level, and
 * wider blocks over few input channels slower (16 -> 96: 50.6 against
 * 53.9), as are the depthwise rows (half the channels a load). The same
 * sums in the same order: the same bits. */
#define KC_IRB_NARROW 24

/* The loops for a 1x1 product of n output channels. */
static const kc_irb_ops *kc_irb_gemm_ops(const kc_irb_run *run, int64_t n)
{
    return run->narrow && n <= KC_IRB_NARROW ? run->narrow : run->ops;
}

/* The three expanded input rows output row y reads: input row iy at
 * first + (iy - first_row) * stride, NULL outside the image (padding). */
static void kc_irb_taps(const kc_irb_geom *g, int64_t y, const float *first, int64_t first_row,
                        int64_t stride, const float *rows[3])
{
    for (int i = 0; i < 3; i++) {
        int64_t iy = y * g->s - g->pt + i;
        rows[i] = iy >= 0 && iy < g->h ? first + (iy - first_row) * stride : NULL;
    }
}

/* Depthwise output rows [yb, ye) of an image into out (rows of wo x
 * cm), from its expanded rows [have_lo, have_hi) at ex: all the rows
 * they read. On dw.h's loop, ex seen as an image of have_hi - have_lo
 * rows whose padding before is what is left of the image's: none past
 * the first band (ex then starts at the band's first row read). */
static void kc_irb_dw_band(const kc_irb_run *run, const float *ex, int64_t have_lo,
                           int64_t have_hi, int64_t yb, int64_t ye, float *out)
{
    const kc_irb_geom *g = run->g;
    int64_t pad_t = g->pt + have_lo - yb * g->s;
    if (run->dwg && pad_t >= 0 && pad_t <= g->pt) {
        kc_dw_geom band = *run->dwg;
        band.in_h = have_hi - have_lo;
        band.out_h = ye - yb;
        band.pad_t = pad_t;
        kc_dw_rows_avx2(&band, ex, run->dw_w, run->dw_b, out, 0, ye - yb);
        return;
    }
    for (int64_t y = yb; y < ye; y++) {
        const float *rows[3];
        kc_irb_taps(g, y, ex, have_lo, g->w * g->cm, rows); /* all in [have_lo, have_hi) */
        run->ops->dw_cols(g, &run->w, rows, g->cm, 0, g->cm, out + (y - yb) * g->wo * g->cm);
    }
}

/* Expand input rows [iy, iy + rows) of image img (contiguous, NHWC)
 * into dst, rows x w x cm. */
static void kc_irb_expand(const kc_irb_run *run, int64_t img, int64_t iy, int64_t rows,
                          float *dst)
{
    const kc_irb_geom *g = run->g;
    if (g->stem) { /* the stem's rows, image by image where they run on */
        const kc_stem_geom *sg = &run->stem->g;
        for (int64_t left = rows; left > 0;) {
            int64_t image = img + iy / g->h, y = iy % g->h;
            int64_t n = g->h - y < left ? g->h - y : left;
            run->stem->rows(sg, &run->stem->k, run->in + image * sg->in_h * sg->in_w * sg->c, dst,
                            y, y + n);
            dst += n * g->w * g->cm;
            iy += n;
            left -= n;
        }
        return;
    }
    kc_irb_mm m = {g->cin, run->in + ((img * g->h + iy) * g->w) * g->cin, g->cin, run->w.we,
                   run->w.be, dst, g->cm, NULL, g->act_e, 0, 0};
    kc_irb_gemm_ops(run, g->cm)->gemm(&m, rows * g->w, g->cm);
}

static int64_t kc_irb_row_floats(const kc_irb_geom *g) { return g->w * g->cm; }

/* Expanded rows a band reads at most. */
static int64_t kc_irb_band_rows(const kc_irb_run *run) { return run->band * run->g->s + 2; }

/* The thread's buffers: a band's expanded rows (or a group of whole
 * images'); a band's depthwise outputs in *dw_band (or the group's).
 * Without expansion the depthwise rows read the input: *ex NULL. 0 when
 * out of memory. */
static int kc_irb_buffers(const kc_irb_run *run, float **ex, float **dw_band)
{
    const kc_irb_geom *g = run->g;
    int64_t rows = kc_irb_band_rows(run), out_rows = run->band;
    if (run->images > 1) {
        rows = rows > run->images * g->h ? rows : run->images * g->h;
        out_rows = out_rows > run->images * g->ho ? out_rows : run->images * g->ho;
    }
    *ex = g->identity ? NULL
                      : kc_dnnl_workspace(KC_DNNL_SLOT_SRC,
                                          (size_t)(rows * kc_irb_row_floats(g)) * sizeof(float));
    *dw_band = kc_dnnl_workspace(KC_DNNL_SLOT_DST,
                                 (size_t)(out_rows * g->wo * g->cm) * sizeof(float));
    return (*ex || g->identity) && *dw_band;
}

/* Image img's input row iy: where a block without expansion reads its
 * depthwise rows. */
static const float *kc_irb_in_row(const kc_irb_run *run, int64_t img, int64_t iy)
{
    const kc_irb_geom *g = run->g;
    return run->in + (img * g->h + iy) * g->w * g->cin;
}

/* Border row iy of part pt, expanded beforehand, or NULL. */
static const float *kc_irb_halo(const kc_irb_run *run, const kc_irb_part *pt, int64_t iy)
{
    for (int k = 0; pt->halo && k < 2; k++)
        if (pt->halo_row[k] == iy)
            return pt->halo + k * kc_irb_row_floats(run->g);
    return NULL;
}

/* Expanded rows [*lo, *hi) of image img held at ex's top: extend them to
 * [lo, hi), keeping those the band still reads (moved to the top), taking
 * border rows from the halo and expanding the rest at once. */
static void kc_irb_fill(const kc_irb_run *run, const kc_irb_part *pt, float *ex, int64_t img,
                        int64_t lo, int64_t hi, int64_t *have_lo, int64_t *have_hi)
{
    int64_t row = kc_irb_row_floats(run->g);
    int64_t keep = lo > *have_lo ? lo : *have_lo;
    if (keep < *have_hi) {
        memmove(ex, ex + (keep - *have_lo) * row, (size_t)((*have_hi - keep) * row) * sizeof *ex);
        *have_lo = keep;
    } else
        *have_lo = *have_hi = lo;
    for (int64_t next = *have_hi; next < hi;) {
        float *dst = ex + (next - *have_lo) * row;
        const float *border = kc_irb_halo(run, pt, next);
        if (border) {
            memcpy(dst, border, (size_t)row * sizeof *dst);
            next++;
            continue;
        }
        int64_t end = next + 1;
        while (end < hi && !kc_irb_halo(run, pt, end))
            end++;
        kc_irb_expand(run, img, next, end - next, dst);
        next = end;
    }
    *have_hi = hi;
}

/* Part pt's output rows of image img, band after band: the band's
 * expanded rows, its depthwise rows, its projection (one product each). */
static void kc_irb_rows(const kc_irb_run *run, const kc_irb_part *pt, float *ex, float *dw_band,
                        int64_t img)
{
    const kc_irb_geom *g = run->g;
    int64_t have_lo = 0, have_hi = 0;
    for (int64_t yb = pt->y0; yb < pt->y1; yb += run->band) {
        int64_t ye = yb + run->band < pt->y1 ? yb + run->band : pt->y1;
        int64_t lo = yb * g->s - g->pt, hi = (ye - 1) * g->s - g->pt + 3;
        lo = lo < 0 ? 0 : lo;
        hi = hi > g->h ? g->h : hi;
        if (g->identity)
            kc_irb_dw_band(run, kc_irb_in_row(run, img, lo), lo, hi, yb, ye, dw_band);
        else {
            kc_irb_fill(run, pt, ex, img, lo, hi, &have_lo, &have_hi);
            kc_irb_dw_band(run, ex, have_lo, have_hi, yb, ye, dw_band);
        }
        float *dst = run->out + ((img * g->ho + yb) * g->wo) * g->cout;
        kc_irb_mm m = {g->cm, dw_band, g->cm, run->w.wp, run->w.bp,
                       dst, g->cout, run->residual ? dst : NULL, g->act_p};
        kc_irb_gemm_ops(run, g->cout)->gemm(&m, (ye - yb) * g->wo, g->cout);
    }
}

/* Images [img, img + n) whole at once: their expanded rows in one
 * product, their depthwise rows, their projection in one product, so
 * that the 1x1 weights are read once for the n images. */
static void kc_irb_images(const kc_irb_run *run, float *ex, float *dw, int64_t img, int64_t n)
{
    const kc_irb_geom *g = run->g;
    const float *rows = ex; /* the images' rows follow */
    if (g->identity)
        rows = kc_irb_in_row(run, img, 0);
    else
        kc_irb_expand(run, img, 0, n * g->h, ex);
    for (int64_t j = 0; j < n; j++)
        kc_irb_dw_band(run, rows + j * g->h * kc_irb_row_floats(g), 0, g->h, 0, g->ho,
                       dw + j * g->ho * g->wo * g->cm);
    float *dst = run->out + img * g->ho * g->wo * g->cout;
    kc_irb_mm m = {g->cm, dw, g->cm, run->w.wp, run->w.bp,
                   dst, g->cout, run->residual ? dst : NULL, g->act_p};
    kc_irb_gemm_ops(run, g->cout)->gemm(&m, n * g->ho * g->wo, g->cout);
}

static void kc_irb_job(void *arg, int k)
{
    kc_irb_run *run = arg;
    kc_irb_part *pt = &run->part[k];
    float *dw_band, *ex;
    if (!kc_irb_buffers(run, &ex, &dw_band)) {
        run->failed[k] = 1;
        return;
    }
    for (int64_t img = pt->i0; img < pt->i1;) {
        int64_t n = pt->i1 - img < run->images ? pt->i1 - img : run->images;
        if (n > 1)
            kc_irb_images(run, ex, dw_band, img, n);
        else
            kc_irb_rows(run, pt, ex, dw_band, img);
        img += n;
    }
}

/* First pass of an in-place block cut by rows: part k expands the input
 * rows its depthwise rows read but other parts overwrite, into its two
 * border rows (run->halo, set by the caller: the parts may share a
 * thread, and so its buffers). */
static void kc_irb_halo_job(void *arg, int k)
{
    kc_irb_run *run = arg;
    kc_irb_part *pt = &run->part[k];
    const kc_irb_geom *g = run->g;
    pt->halo = run->halo + 2 * k * kc_irb_row_floats(g);
    for (int i = 0; i < 2; i++)
        if (pt->halo_row[i] >= 0)
            kc_irb_expand(run, 0, pt->halo_row[i], 1, pt->halo + i * kc_irb_row_floats(g));
}

/* Cut by channels, first pass: part k expands the image into its share
 * of the expanded channels (whole blocks of the packed kernel), runs
 * their depthwise rows and projects them, a partial sum over its
 * channels of every output. Each thread reads only its share of the
 * weights, and every expanded row once. */
static void kc_irb_chan_job(void *arg, int k)
{
    kc_irb_run *run = arg;
    const kc_irb_part *pt = &run->part[k];
    const kc_irb_geom *g = run->g;
    int64_t nc = pt->c1 - pt->c0, pixels = g->ho * g->wo;
    float *ex = kc_dnnl_workspace(KC_DNNL_SLOT_SRC, (size_t)(g->h * g->w * nc) * sizeof(float));
    float *dw = kc_dnnl_workspace(KC_DNNL_SLOT_DST, (size_t)(pixels * nc) * sizeof(float));
    if (!ex || !dw) {
        run->failed[k] = 1;
        return;
    }
    kc_irb_mm e = {g->cin, run->in, g->cin, run->w.we + g->cin * pt->c0, run->w.be + pt->c0,
                   ex, nc, NULL, g->act_e, 0, 0};
    kc_irb_gemm_ops(run, nc)->gemm(&e, g->h * g->w, nc);
    for (int64_t y = 0; y < g->ho; y++) {
        const float *rows[3];
        kc_irb_taps(g, y, ex, 0, g->w * nc, rows);
        run->ops->dw_cols(g, &run->w, rows, nc, pt->c0, nc, dw + y * g->wo * nc);
    }
    kc_irb_mm p = {nc, dw, nc, run->w.wp, NULL, run->partial + k * pixels * g->cout, g->cout,
                   NULL, 0, g->cm, pt->c0};
    kc_irb_gemm_ops(run, g->cout)->gemm(&p, pixels, g->cout);
}

/* Second pass (the same team, after a barrier: kc_parallel_two): part k
 * sums the partials of its output pixels, with the bias, the residual
 * and the activation. */
static void kc_irb_sum_job(void *arg, int k)
{
    const kc_irb_run *run = arg;
    const kc_irb_part *pt = &run->part[k];
    const kc_irb_geom *g = run->g;
    for (int t = 0; t < run->n_parts; t++)
        if (run->failed[t])
            return; /* a part's partial sums are missing: kc_irb_check says so */
    kc_irb_sum sum = {run->w.bp, run->partial, run->out, g->ho * g->wo * g->cout, g->cout,
                      pt->p0, pt->p1, run->n_parts, run->residual, g->act_p};
    run->ops->sum(&sum);
}

/* Cut by channels (one image, 2+ threads) where the block's 1x1 weights
 * weigh 9/10 of its expanded image or more. Cut by rows, each thread
 * reads all of the weights and expands the rows beside its own again (a
 * 14x14 image on two threads: one row in seven more), and in place pays
 * a first pass for those border rows; by channels, it adds its partial
 * sums in a second. On the 2-vCPU Zen 5 MobileNetV2's 7x7 blocks (1.2 MB
 * of weights, 6.5 times the expanded image) took 0.156-0.215 ms by
 * channels against 0.178-0.235 by rows, its 14x14 ones (0.65-1.3 times)
 * 0.20-0.21 against 0.20: the cut was at 4 times. On the 2-vCPU Zen 4
 * (AVX-512 on 256-bit halves: the 1x1 products set the pace), `kerasc
 * bench --stats`, alternating pairs in a quiet and in a slow phase: the
 * 14x14 blocks at 0.98 and 1.3 times (11-13) took 2-9% less by
 * channels in both, the model 0.991 of the time (ten pairs); those at
 * 0.65 and 0.82 (7-10) 3-5% less in the quiet phase, 1-5% more in the
 * slow one; the 28x28 ones (0.08) 20-26% more, block 6 (0.12) 9% more. */
static int kc_irb_by_channel(const kc_irb_geom *g, int parts)
{
    int64_t blocks = (g->cm + KC_IRB_NR - 1) / KC_IRB_NR;
    int64_t weights = g->cm * (g->cin + g->cout);
    return g->n == 1 && parts > 1 && blocks >= parts && !g->identity && !g->stem &&
           10 * weights >= 9 * g->h * g->w * g->cm;
}

static void kc_irb_cut_channels(kc_irb_run *run, int parts)
{
    const kc_irb_geom *g = run->g;
    int64_t blocks = (g->cm + KC_IRB_NR - 1) / KC_IRB_NR, pixels = g->ho * g->wo;
    run->n_parts = parts;
    run->by_channel = 1;
    for (int k = 0; k < parts; k++) {
        kc_irb_part *pt = &run->part[k];
        *pt = (kc_irb_part){0, 1, 0, g->ho, {-1, -1}, NULL, 0, 0, 0, 0};
        pt->c0 = blocks * k / parts * KC_IRB_NR;
        pt->c1 = blocks * (k + 1) / parts * KC_IRB_NR;
        pt->c1 = pt->c1 > g->cm ? g->cm : pt->c1;
        pt->p0 = pixels * k / parts;
        pt->p1 = pixels * (k + 1) / parts;
    }
}

/* Cut the run: one image at a time by rows (in place: with the border
 * rows each part reads outside its own), else by images; and each part's
 * rows into bands. One image's rows go where `cut` says (set to an even
 * cut of them where it holds other rows or parts: a first run); images
 * and channel blocks always evenly: channel blocks' partial sums are
 * added in part order, so a moved cut would move the output's last bits. */
static void kc_irb_cut(kc_irb_run *run, int threads, int in_place, kc_balance *cut)
{
    const kc_irb_geom *g = run->g;
    int64_t n = g->n == 1 ? g->ho : g->n;
    int parts = threads < 1 ? 1 : threads > KC_IRB_MAX_PARTS ? KC_IRB_MAX_PARTS : threads;
    if (kc_irb_by_channel(g, parts)) {
        kc_irb_cut_channels(run, parts);
        return;
    }
    if (parts > n)
        parts = (int)n;
    run->n_parts = parts;
    int64_t fit = KC_IRB_BAND_BYTES / (kc_irb_row_floats(g) * (int64_t)sizeof(float));
    run->band = fit > 2 + g->s ? (fit - 2) / g->s : 1;
    if (g->n == 1 && (cut->units != n || cut->parts != parts))
        kc_balance_init(cut, n, parts, 1);
    for (int k = 0; k < parts; k++) {
        kc_irb_part *pt = &run->part[k];
        int64_t lo = g->n == 1 ? cut->lo[k] : n * k / parts;
        int64_t hi = g->n == 1 ? cut->lo[k + 1] : n * (k + 1) / parts;
        *pt = (kc_irb_part){0, g->n, 0, g->ho, {-1, -1}, NULL, 0, 0, 0, 0};
        if (g->n != 1) {
            pt->i0 = lo;
            pt->i1 = hi;
            continue;
        }
        pt->y0 = lo;
        pt->y1 = hi;
        if (!in_place || parts == 1)
            continue;
        /* in place: stride 1, output row y over input row y */
        int h = 0;
        for (int64_t iy = lo - g->pt; iy < hi - g->pt + 2 && h < 2; iy++)
            if (iy >= 0 && iy < g->h && (iy < lo || iy >= hi))
                pt->halo_row[h++] = iy;
    }
    if (run->band > g->ho)
        run->band = g->ho;
    /* several small images per part: whole images together, within
     * KC_IRB_GROUP_BYTES of expanded rows */
    int64_t image = g->h * kc_irb_row_floats(g) * (int64_t)sizeof(float);
    run->images = g->n > 1 && image <= KC_IRB_GROUP_BYTES ? KC_IRB_GROUP_BYTES / image : 1;
}

static kc_status kc_irb_check(const kc_irb_run *run)
{
    for (int k = 0; k < run->n_parts; k++)
        if (run->failed[k])
            return kc_fail(KC_ERR_NOMEM, "out of memory for a fused block's rows");
    return KC_OK;
}

/* One run of the block with state st (built for this input shape). */
static kc_status kc_irb_execute(const kc_exec_ctx *ctx, kc_irb_state *st)
{
    const kc_irb_geom *g = &st->g;
    const kc_conv_attrs *p = ((const kc_conv_attrs *)ctx->layer->attrs)->post_pw->attrs;
    kc_irb_run run = {.g = g, .w = st->w, .ops = st->ops, .narrow = st->narrow,
                      .dwg = st->dw_w ? &st->dwg : NULL, .dw_w = st->dw_w, .dw_b = st->dw_b,
                      .in = ctx->in[0], .out = ctx->out[0], .stem = &st->stem,
                      .residual = p->accumulate};
    int in_place = (const float *)run.out == run.in;
    if (in_place && (g->s != 1 || g->ho != g->h || g->wo != g->w || g->cin != g->cout ||
                     !run.residual || g->stem))
        return kc_fail(KC_ERR_SHAPE, "a block written over its input must keep its shape");
    kc_irb_cut(&run, kc_parallel_width(), in_place, &st->cut);
    if (run.by_channel) {
        run.partial = kc_dnnl_workspace(KC_DNNL_SLOT_SCRATCHPAD,
                                        (size_t)(run.n_parts * g->ho * g->wo * g->cout) *
                                            sizeof(float));
        if (!run.partial)
            return kc_fail(KC_ERR_NOMEM, "out of memory for a fused block's rows");
        kc_parallel_two(run.n_parts, kc_irb_chan_job, kc_irb_sum_job, &run, NULL, NULL);
        return kc_irb_check(&run);
    }
    if (in_place && run.n_parts > 1 && g->n == 1) {
        run.halo = kc_dnnl_workspace(KC_DNNL_SLOT_SCRATCHPAD,
                                     (size_t)(2 * run.n_parts * kc_irb_row_floats(g)) *
                                         sizeof(float));
        if (!run.halo)
            return kc_fail(KC_ERR_NOMEM, "out of memory for a fused block's rows");
    }
    double seconds[KC_BALANCE_MAX_PARTS] = {0};
    if (run.halo)
        kc_parallel_two(run.n_parts, kc_irb_halo_job, kc_irb_job, &run, NULL, seconds);
    else
        kc_parallel_timed(run.n_parts, kc_irb_job, &run, seconds);
    KC_TRY(kc_irb_check(&run));
    if (g->n == 1)
        kc_balance_update(&st->cut, seconds);
    return KC_OK;
}

kc_balance *kc_irb_balance(kc_kernel_state *state)
{
    return state && state->free == kc_irb_free ? &((kc_irb_state *)state)->cut : NULL;
}

int kc_irb_narrow(const kc_kernel_state *state)
{
    return state && state->free == kc_irb_free && ((const kc_irb_state *)state)->narrow;
}

kc_status kc_irb_conv(const kc_exec_ctx *ctx)
{
    const kc_conv_attrs *carrier = ctx->layer->attrs;
    /* a depthwise carrier: the block has no expansion */
    const kc_conv_attrs *ex = carrier->kind == KC_CONV_DEPTHWISE ? NULL : carrier;
    const kc_layer *dw = ex ? ex->post_dw : ctx->layer;
    kc_irb_state *st = ctx->state ? (kc_irb_state *)*ctx->state : NULL;
    if (st && (st->base.free != kc_irb_free || !kc_shape_equal(&st->in_shape, &ctx->in_shape[0])))
        st = kc_kernel_state_drop(ctx);
    if (!st) {
        kc_irb_geom g;
        kc_stem_geom sg;
        if (!dw || !carrier->post_pw ||
            !kc_irb_geometry(ex, dw, carrier->post_pw, &ctx->in_shape[0], &g, &sg))
            return kc_fail(KC_ERR_UNSUPPORTED,
                           "the fused depthwise and projection layers after this one do not "
                           "fit the block kernel");
        KC_TRY(kc_irb_build(ctx, &g, &sg, &st));
        if (ctx->state)
            *ctx->state = &st->base;
    }
    kc_status status = kc_irb_execute(ctx, st);
    if (!ctx->state)
        kc_irb_free(&st->base);
    return status;
}
