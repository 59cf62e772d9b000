/* Convolutions through oneDNN (the library TensorFlow itself uses on x86):
 * plain, grouped and depthwise, 1-D to 3-D, NHWC activations, Keras's
 * (k..., in/groups, filters) kernels read in place as hwio / hwigo.
 * A primitive is created once per node and input shape and kept in the
 * node's state; a shape change rebuilds it. */
#include "kernels/dnnl_conv.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/mem.h"
#include "base/threads.h"
#include "graph/graph.h"
#include "kernels/dnnl_common.h"
#include "kernels/dnnl_pool.h"
#include "kernels/dw.h"
#include "kernels/residual.h"
#include "kernels/wino_tx.h"
#include "ops/conv.h"
#include "ops/op.h"
#include "ops/pool.h"

/* Row counts an own_dw part has a 1x1 primitive for besides its strips'
 * (one row, then the remainders its strips need). */
#define KC_DNNL_OWN_SIZES 6

/* An own_dw part's strips (kc_dnnl_conv_part.own). */
typedef struct kc_dnnl_own_dw {
    kc_dw_geom dw_geom;
    float *dw_w, *dw_b;
    /* the 1x1 over rows_of[i] rows: rows_of[0] is 1, the rest the
     * remainders (fewer than strip_new) its strips need, so that a strip
     * runs one primitive for them rather than one per row (a part of 7
     * rows on 14x14 ran 9) */
    kc_dnnl_prim rows_prim[KC_DNNL_OWN_SIZES];
    int64_t rows_of[KC_DNNL_OWN_SIZES];
    int n_sizes;
    int64_t strip_rows, strip_new;  /* prim's rows: strip_rows x stride, at most the image's */
    size_t strip_floats;
} kc_dnnl_own_dw;

/* A part's copy of a weight array in the layout its primitive wants. */
typedef struct kc_dnnl_wcopy {
    dnnl_memory_desc_t prim_md;
    float *packed;          /* reordered into prim_md, or NULL: read in Keras layout */
    int owner;              /* packed is this part's (else an earlier part's) */
} kc_dnnl_wcopy;

/* One part of the layer, run by one thread: a primitive for its images or
 * output rows, reading and writing at these offsets (floats) into the
 * layer's whole NHWC buffers. */
typedef struct kc_dnnl_conv_part {
    kc_dnnl_prim prim;      /* with its src, weights, (bias,) dst memories */
    dnnl_memory_desc_t src_md, dst_md;
    kc_dnnl_wcopy w;        /* the weights in the layout the primitive wants */
    size_t src_off, dst_off;
    /* Winograd: the primitive reads and writes blocked layouts; NHWC is
     * reordered into and out of per-thread buffers around it. */
    int wino;
    int wino_f4;            /* with oneDNN's F(4x4, 3x3) kernel */
    dnnl_memory_desc_t src_blk_md, dst_blk_md;
    /* A thread's buffers for it (kc_dnnl_wino_lane_bytes): blocked input,
     * blocked output, then the scratchpad, each 64-byte aligned. */
    size_t src_blk_bytes, dst_blk_bytes, lane_bytes;
    kc_dnnl_prim to_src, from_dst;
    kc_dnnl_wcopy dw;       /* those of a fused depthwise post-op (post_dw) */
    /* pre_pool: the average pooling run after the convolution, from the
     * per-thread buffer of tmp_bytes the convolution writes, to dst. */
    kc_dnnl_prim pool;
    size_t tmp_bytes;
    /* A fused pair's primitive is built for one image and run once per
     * image of the part, these many floats apart in input and output. */
    int64_t images;
    size_t src_image, dst_image;
    /* add_after (kc_dnnl_add_after): built for one image without the sum
     * and activation post-ops; each image's output goes to a per-thread
     * buffer, then kc_residual_add adds it into dst with add_act. */
    int add_after, add_act;
    /* gather (kc_dnnl_gather_wanted): built for one image of the
     * subsampled input, which each run first copies into a per-thread
     * buffer: rows and columns gather_h x gather_w of `channels`, taken
     * every stride_h rows and stride_w columns of rows src_w wide. */
    int gather;
    int64_t gather_h, gather_w, channels, stride_h, stride_w, src_w;
    /* im2col (kc_dnnl_im2col_wanted): built for one image as a 1x1
     * convolution of kh * kw * channels inputs, read from a per-thread
     * buffer each run first fills: for each output pixel its taps' input
     * pixels, zeros in the padding, from an image of src_h x src_w
     * (`channels`, src_w, stride_h, stride_w as above) padded by pad_t
     * and pad_left before. */
    int im2col;
    int64_t col_h, col_w, kh, kw, src_h, pad_t, pad_left;
    /* own_dw (kc_dnnl_own_dw_geometry): a post_dw pair whose depthwise
     * layer runs on kernels/dw.c's loop, image by image (or one image's
     * rows cut between threads: kc_dnnl_conv_state.row_parts), in strips
     * of own->strip_rows output rows: the 1x1 primitive (`prim` for
     * strip_rows x stride input rows, own->rows_prim for fewer) writes the
     * strip's input rows to a per-thread buffer of own->strip_floats,
     * which the loop reads with own's dw_geom, dw_w (kc_dw_weights') and
     * dw_b. */
    int own_dw;
    struct kc_dnnl_own_dw *own;  /* its own allocation: every part would carry 0.7 KB more */
} kc_dnnl_conv_part;

typedef struct kc_dnnl_conv_state {
    kc_kernel_state base;
    kc_shape in_shape;      /* the shape the primitives were built for */
    dnnl_memory_desc_t w_md, b_md;
    int has_bias;
    int act_fused;          /* the activation runs as a oneDNN post-op */
    int w_plain;            /* weights read in Keras layout (ctx->w_ext) */
    int exact;              /* built for ctx->exact (direct only) */
    int n_parts;            /* 1: one primitive over the whole layer */
    /* post_dw: the depthwise layer built for, its Keras-layout weight and
     * bias descriptors, and zeros for a bias either layer lacks. */
    const void *post_dw;
    const void *pre_pool;   /* the pooling layer built for (pre_pool) */
    dnnl_memory_desc_t dw_w_md, dw_b_md;
    float *zero_bias;
    /* Winograd's cost, paid from the session's budget (NULL: unbounded)
     * at the first part and refunded when the state goes; lanes: threads
     * running parts side by side, each with a scratchpad of its own. */
    kc_wino_budget *budget;
    size_t wino_paid;
    int lanes;
    /* An own_dw pair on one image: its output rows cut between this many
     * threads (kc_dnnl_row_parts), each running the part's solo
     * primitives on its rows; 0 when the part runs whole. */
    int row_parts;
    /* n_parts of them, allocated for the cuts planned: a part holds six
     * oneDNN memory descriptors (~4.7 KB), and a fixed array for
     * KC_DNNL_MAX_CUTS made every convolution's state 300 KB, 16 MB over
     * ResNet50's 53 convolutions. */
    kc_dnnl_conv_part *part;
} kc_dnnl_conv_state;

static void kc_dnnl_conv_part_free(kc_dnnl_conv_part *p)
{
    kc_dnnl_prim_destroy(&p->prim);
    kc_dnnl_prim_destroy(&p->to_src);
    kc_dnnl_prim_destroy(&p->from_dst);
    kc_dnnl_prim_destroy(&p->pool);
    if (p->w.owner)
        kc_free_weights(p->w.packed);
    if (p->dw.owner)
        kc_free_weights(p->dw.packed);
    if (p->own) {
        for (int i = 0; i < p->own->n_sizes; i++)
            kc_dnnl_prim_destroy(&p->own->rows_prim[i]);
        free(p->own->dw_w);
        free(p->own->dw_b);
        free(p->own);
    }
    memset(p, 0, sizeof *p);
}

/* Give back what the layer's transformed kernel cost; the scratchpads it
 * grew stay paid, as the per-thread workspaces never shrink. */
static void kc_dnnl_wino_refund(kc_dnnl_conv_state *st)
{
    if (st->budget && st->budget->left != SIZE_MAX)
        st->budget->left += st->wino_paid;
    st->wino_paid = 0;
}

static void kc_dnnl_conv_free(kc_kernel_state *s)
{
    kc_dnnl_conv_state *c = (kc_dnnl_conv_state *)s;
    kc_dnnl_wino_refund(c);
    for (int i = 0; i < c->n_parts; i++)
        kc_dnnl_conv_part_free(&c->part[i]);
    free(c->part);
    free(c->zero_bias);
    free(c);
}

/* Whether activation `act` runs as a oneDNN post-op (or is linear). */
static int kc_dnnl_act_fusable(const char *act)
{
    return !act || !strcmp(act, "linear") || !strcmp(act, "relu") || !strcmp(act, "relu6");
}

/* Append `act` as an eltwise post-op (nothing for linear); 1 on failure. */
static int kc_dnnl_append_act(dnnl_post_ops_t ops, const char *act)
{
    int relu = act && !strcmp(act, "relu"), relu6 = act && !strcmp(act, "relu6");
    if (!relu && !relu6)
        return 0;
    return dnnl_post_ops_append_eltwise(ops, 1.0f, relu ? dnnl_eltwise_relu : dnnl_eltwise_clip,
                                        0.0f, relu ? 0.0f : 6.0f) != dnnl_success;
}

/* The attr: user scratchpad (dnnl_common.c) and post-ops: a fused
 * residual Add becomes a sum (dst += the residual the output buffer
 * holds), then relu / relu6 an eltwise post-op; then, with dw (a fused
 * depthwise convolution, its geometry), the depthwise post-op and its own
 * activation. NULL on failure (the caller's build then fails and the GEMM
 * path runs). *fused: every activation runs inside the primitive. */
static dnnl_primitive_attr_t kc_dnnl_post_ops_attr(const char *act, int accumulate,
                                                   const kc_dnnl_window *dw, const char *dw_act,
                                                   int *fused)
{
    *fused = 0;
    dnnl_primitive_attr_t attr = kc_dnnl_attr_new();
    dnnl_post_ops_t ops = NULL;
    int bad = !attr || dnnl_post_ops_create(&ops) ||
              (accumulate && dnnl_post_ops_append_sum(ops, 1.0f));
    if (!bad)
        bad = kc_dnnl_append_act(ops, act);
    if (!bad && dw)
        bad = dnnl_post_ops_append_dw(ops, dnnl_f32, dnnl_f32, dnnl_f32, 3, dw->strides[0],
                                      dw->pad_l[0], 0, 0, NULL) != dnnl_success ||
              kc_dnnl_append_act(ops, dw_act);
    if (!bad)
        bad = dnnl_primitive_attr_set_post_ops(attr, ops) != dnnl_success;
    if (ops)
        dnnl_post_ops_destroy(ops);
    if (bad) {
        if (attr)
            dnnl_primitive_attr_destroy(attr);
        return NULL;
    }
    *fused = kc_dnnl_act_fusable(act) && (!dw || kc_dnnl_act_fusable(dw_act));
    return attr;
}

/* The whole layer's geometry. The padding follows TensorFlow: for "same"
 * the extra pixel goes after; "causal" pads only before; a folded
 * ZeroPadding adds its own. */
static void kc_dnnl_window_of(const kc_shape *in, const kc_shape *out, const kc_conv_attrs *a,
                              kc_dnnl_window *g)
{
    int sp = a->spatial;
    int64_t dims[KC_MAX_RANK];
    memcpy(dims, in->dims, sizeof dims);
    kc_conv_data_shape(a, dims, in->rank);
    memset(g, 0, sizeof *g);
    g->sp = sp;
    g->src[0] = in->dims[0];
    g->src[1] = in->dims[in->rank - 1];
    g->dst[0] = out->dims[0];
    g->dst[1] = out->dims[out->rank - 1];
    for (int i = 0; i < sp; i++) {
        int64_t len = in->dims[1 + i], olen = out->dims[1 + i];
        int64_t keff = (a->kernel[i] - 1) * a->dilation[i] + 1;
        int64_t total = (olen - 1) * a->strides[i] + keff - len;
        g->src[2 + i] = dims[1 + i];
        g->dst[2 + i] = olen;
        g->strides[i] = a->strides[i];
        g->dilates[i] = a->dilation[i] - 1;
        if (i == 0)
            g->extent0 = keff;
        g->pad_l[i] = kc_conv_pad_before(len, olen, keff, a->strides[i], a->padding);
        /* TF same: the rest after; causal: none */
        g->pad_r[i] = a->padding == 1 && total > 0 ? total - g->pad_l[i] : 0;
        g->pad_l[i] += a->pad_before[i];
        g->pad_r[i] += a->pad_after[i];
    }
}

static void kc_dnnl_window_whole(const kc_exec_ctx *ctx, const kc_conv_attrs *a, kc_dnnl_window *g)
{
    kc_dnnl_window_of(&ctx->in_shape[0], &ctx->out_shape[0], a, g);
}

/* The geometry of a depthwise convolution d fused after a 1x1 one whose
 * output (d's input data) has shape mid, over `batch` images; 0 when
 * oneDNN's depthwise post-op cannot take it: it runs a 3x3 kernel, one
 * stride and one leading pad on both axes, no dilation, no depth
 * multiplier, the trailing pad implied by the sizes. */
static int kc_dnnl_dw_window(const kc_shape *mid, const kc_conv_attrs *d, int64_t batch,
                             kc_dnnl_window *w)
{
    if (d->kind != KC_CONV_DEPTHWISE || d->depth_multiplier != 1 || d->spatial != 2 ||
        d->padding == 2 || d->accumulate || d->post_dw || mid->rank != 4)
        return 0;
    kc_shape in = *mid, out = *mid;
    for (int i = 0; i < 2; i++) {
        if (d->kernel[i] != 3 || d->dilation[i] != 1 || d->strides[i] != d->strides[0])
            return 0;
        in.dims[1 + i] += d->pad_before[i] + d->pad_after[i]; /* the value's padded shape */
        out.dims[1 + i] = kc_conv_out_len(in.dims[1 + i], 3, d->strides[i], 1, d->padding == 1);
        if (out.dims[1 + i] < 1)
            return 0;
    }
    in.dims[0] = out.dims[0] = batch;
    kc_dnnl_window_of(&in, &out, d, w);
    return w->pad_l[0] == w->pad_l[1] && w->pad_l[0] >= 0 && w->pad_l[0] <= 2;
}

/* Memory descriptors for a part: NHWC activations, Keras's hwio / hwigo
 * weights, the bias. Weights (O, I, k...) or (G, O/G, I/G, k...). */
static kc_status kc_dnnl_descs(const kc_dnnl_window *g, int64_t groups, const int64_t *kernel,
                               kc_dnnl_conv_state *st, kc_dnnl_conv_part *pt)
{
    static const dnnl_format_tag_t act_tag[] = {dnnl_nwc, dnnl_nhwc, dnnl_ndhwc};
    static const dnnl_format_tag_t w_tag[] = {dnnl_wio, dnnl_hwio, dnnl_dhwio};
    static const dnnl_format_tag_t gw_tag[] = {dnnl_wigo, dnnl_hwigo, dnnl_dhwigo};
    int sp = g->sp, nd = sp + 2;
    int64_t cin = g->src[1], cout = g->dst[1];
    dnnl_dims_t w;
    int wnd;
    if (groups == 1) {
        w[0] = cout;
        w[1] = cin;
        for (int i = 0; i < sp; i++)
            w[2 + i] = kernel[i];
        wnd = nd;
    } else {
        w[0] = groups;
        w[1] = cout / groups;
        w[2] = cin / groups;
        for (int i = 0; i < sp; i++)
            w[3 + i] = kernel[i];
        wnd = nd + 1;
    }
    dnnl_dims_t b = {cout};
    if (dnnl_memory_desc_init_by_tag(&pt->src_md, nd, g->src, dnnl_f32, act_tag[sp - 1]) ||
        dnnl_memory_desc_init_by_tag(&pt->dst_md, nd, g->dst, dnnl_f32, act_tag[sp - 1]) ||
        dnnl_memory_desc_init_by_tag(&st->w_md, wnd, w, dnnl_f32,
                                     groups == 1 ? w_tag[sp - 1] : gw_tag[sp - 1]) ||
        dnnl_memory_desc_init_by_tag(&st->b_md, 1, b, dnnl_f32, dnnl_a))
        return kc_fail(KC_ERR_UNSUPPORTED, "oneDNN rejected the convolution's memory layout");
    return KC_OK;
}

/* Winograd F(2x2|4x4, 3x3) does the 3x3 stride-1 convolutions (most of
 * ResNet's and Inception's 3x3 work) in about half the time of direct
 * convolution on this AVX-512 class of CPU, and its rounding stays inside
 * the fidelity tolerance (test_zoo). Direct convolution instead: with
 * ctx->exact (kc_session_options.exact, `--exact`), KC_WINOGRAD=0,
 * streamed weights (Winograd weights are a transformed copy), or a fused
 * residual sum (no model at hand exercises that combination), or fewer
 * than KC_DNNL_WINO_MIN_CHANNELS input or output channels, or fewer than
 * KC_DNNL_WINO_MIN_PIXELS output pixels over all the images (unless
 * KC_WINOGRAD=1). */
#define KC_DNNL_WINO_MIN_CHANNELS 64
#define KC_DNNL_WINO_MIN_PIXELS 100
/* KC_WINOGRAD=1: Winograd on every 3x3 stride-1 layer oneDNN takes. */
static int kc_dnnl_wino_forced(void)
{
    const char *env = getenv("KC_WINOGRAD");
    return env && !strcmp(env, "1");
}

static int kc_dnnl_wino_eligible(const kc_exec_ctx *ctx, const kc_conv_attrs *a, int64_t groups,
                                 const kc_dnnl_conv_state *st)
{
    const kc_shape *in = &ctx->in_shape[0];
    if (ctx->exact || st->w_plain || a->accumulate || kc_env_off("KC_WINOGRAD"))
        return 0;
    /* Few channels: the tile transforms and the reorders around them cost
     * more than the multiplications saved. InceptionV3's 32 -> 32 and
     * 32 -> 64 stem layers ran 2.0x and 1.4x slower than direct at batch
     * 8; from 64 channels on (ResNet50, InceptionV3's 64 -> 96, 80 ->
     * 192) it wins, by 1.2-1.7x. */
    int always = kc_dnnl_wino_forced(); /* whatever the channels */
    if (!always && (in->dims[in->rank - 1] < KC_DNNL_WINO_MIN_CHANNELS ||
                    a->filters < KC_DNNL_WINO_MIN_CHANNELS))
        return 0;
    /* Few pixels in an image: the transformed weights (1.8x the kernel
     * for F(2x2), 4x for F(4x4)) cost the same bytes whatever the run,
     * and Winograd parts run one image at a time, so the pixels of one
     * image are what it has to save time on. ResNet50's three 512 -> 512
     * layers on 7x7 cost 7.3 MB each: at batch 1 dropping them (and
     * InceptionV3's 8x8 ones) cut peak RSS by 38 MB (ResNet50) and 20 MB
     * (InceptionV3) at the same speed (alternating runs: 0.99-1.01); at
     * batch 8 by 21 MB (ResNet50 217.7 -> 196.5 MB, now inside weights +
     * arena + 64 MiB) with the three layers' share of the run level
     * (0.0994 -> 0.1005, 4 runs each), and by 9 MB on InceptionV3, whose
     * 8x8 layers' share grew 0.027 -> 0.034 (3 runs each). */
    const kc_shape *out = &ctx->out_shape[0];
    if (!always && out->rank == 4 && out->dims[1] * out->dims[2] < KC_DNNL_WINO_MIN_PIXELS)
        return 0;
    return a->kind == KC_CONV_PLAIN && a->spatial == 2 && groups == 1 && a->kernel[0] == 3 &&
           a->kernel[1] == 3 && a->strides[0] == 1 && a->strides[1] == 1 &&
           a->dilation[0] == 1 && a->dilation[1] == 1;
}

static kc_status kc_dnnl_reorder_prim(kc_dnnl_prim *p, const dnnl_memory_desc_t *from,
                                      const dnnl_memory_desc_t *to)
{
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_attr_t attr = kc_dnnl_attr_new();
    if (!attr || dnnl_reorder_primitive_desc_create(&rpd, from, kc_dnnl_engine(), to,
                                                    kc_dnnl_engine(), attr) != dnnl_success) {
        if (attr)
            dnnl_primitive_attr_destroy(attr);
        return KC_ERR_UNSUPPORTED;
    }
    dnnl_primitive_attr_destroy(attr);
    static const int args[2] = {DNNL_ARG_FROM, DNNL_ARG_TO};
    const dnnl_memory_desc_t *mds[2] = {from, to};
    kc_status s = kc_dnnl_prim_init(p, rpd, 2, args, mds);
    dnnl_primitive_desc_destroy(rpd);
    return s;
}

static dnnl_primitive_desc_t kc_dnnl_pd_named(const dnnl_convolution_desc_t *desc,
                                              const_dnnl_primitive_attr_t attr, const char *impl);

/* oneDNN's F(2x2, 3x3) kernel saves 2.25x the multiplications, less than
 * its F(4x4) one, and its transforms cost per input and output channel:
 * with few channels (ic*oc/(ic+oc) < 64) it gains little. Such a layer
 * takes the F(4x4) kernel where oneDNN offers both (it lists F(2x2) first
 * for one image, which is how Winograd parts run) and a part has 2048
 * output pixels or more. One image, one thread, F(2x2) and F(4x4) against
 * direct: InceptionV3's 80 -> 192 on 71x71 (ic*oc/(ic+oc) = 56) 0.81 and
 * 0.37, its 96 -> 96 on 35x35 0.63 and 0.43, ResNet50's 64 -> 64 on 56x56
 * 0.59 and 0.44; but 64 -> 64 on 10x10 0.57 and 0.72, on 6x6 0.73 and
 * 1.25. In InceptionV3 at batch 8 the 80 -> 192 layer's share of the run
 * fell 0.105-0.117 -> 0.065-0.069 (5 runs each; peak RSS +2 MB). Its
 * narrow layers on 35x35 (1225 pixels) took the same share with either
 * kernel, F(4x4)'s larger kernels costing 3 MB of peak RSS: hence 2048
 * pixels. KC_WINOGRAD_F4=0: never F(4x4) (F(2x2) where oneDNN offers
 * it, else direct; which kernel oneDNN lists first depends on the CPU,
 * see kc_dnnl_wino_pick). Whichever
 * kernel, a narrow layer puts at most KC_DNNL_NARROW_OUTSIDE_MAX of its
 * lanes' buffers outside the arena's free range (kc_dnnl_wino_pay; such
 * buffers are shared by every layer, so what counts is one layer's):
 * InceptionV3's 80 -> 192 layer at batch 1, in half-image parts, was no
 * faster than direct with F(2x2) (share 0.114-0.116 against
 * 0.110-0.114) for 2 x 13.5 MB of scratchpad outside the arena, and
 * F(4x4)'s 2 x 11.8 MB there put the real nsfwjs
 * InceptionV3 at its peak-RSS bound (160.9 MiB of 160.9); at batch 8 its
 * images' buffers fit in the arena. ResNet50's 64 -> 64 layers at batch 1
 * (2 x 7.6 MB, row parts) took 0.019 of the run each, direct 0.027.
 * ResNet50's 256 -> 256 layers on 14x14 (128) take 0.75 of the direct
 * time with F(2x2). Either kernel keeps outputs far inside the tolerance
 * (the bench's InceptionV3 at 299x299 against --exact: at most 1% of it
 * with F(4x4) on every eligible layer, 0.7% with F(2x2)). */
#define KC_DNNL_WINO_2X3_MIN_CHANNELS 64
#define KC_DNNL_WINO_F4_MIN_PIXELS 2048
#define KC_DNNL_NARROW_OUTSIDE_MAX ((size_t)16 << 20)
static int kc_dnnl_wino_narrow(int64_t ic, int64_t oc)
{
    return ic * oc < KC_DNNL_WINO_2X3_MIN_CHANNELS * (ic + oc);
}

static int kc_dnnl_wino_f4_wanted(const kc_dnnl_conv_part *pt, const kc_dnnl_window *g)
{
    if (g->sp != 2)
        return 0;
    return kc_dnnl_wino_narrow(pt->src_md.dims[1], pt->dst_md.dims[1]) &&
           g->dst[2] * g->dst[3] >= KC_DNNL_WINO_F4_MIN_PIXELS;
}

/* pd's implementation name ("" when oneDNN gives none). */
static const char *kc_dnnl_pd_impl(const_dnnl_primitive_desc_t pd)
{
    const char *name = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) != dnnl_success || !name)
        return "";
    return name;
}

/* Whether pd's implementation name contains `part`. */
static int kc_dnnl_pd_is(const_dnnl_primitive_desc_t pd, const char *part)
{
    return strstr(kc_dnnl_pd_impl(pd), part) != NULL;
}

/* The Winograd primitive descriptor (blocked src/dst): oneDNN's kernel
 * whose implementation name starts with `impl`, or its first choice when
 * impl is NULL; NULL if none. */
static dnnl_primitive_desc_t kc_dnnl_wino_pd(const kc_dnnl_conv_state *st,
                                             const kc_dnnl_conv_part *pt,
                                             const dnnl_memory_desc_t *w_any,
                                             const kc_dnnl_window *g,
                                             const_dnnl_primitive_attr_t attr, const char *impl)
{
    dnnl_memory_desc_t src_any = pt->src_md, dst_any = pt->dst_md;
    src_any.format_kind = dnnl_format_kind_any;
    dst_any.format_kind = dnnl_format_kind_any;
    dnnl_dims_t strides = {1, 1};
    dnnl_convolution_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_convolution_forward_desc_init(&desc, dnnl_forward_inference,
                                           dnnl_convolution_winograd, &src_any, w_any,
                                           st->has_bias ? &st->b_md : NULL, &dst_any, strides,
                                           g->pad_l, g->pad_r) != dnnl_success)
        return NULL;
    if (impl)
        return kc_dnnl_pd_named(&desc, attr, impl);
    if (dnnl_primitive_desc_create(&pd, &desc, attr, kc_dnnl_engine(), NULL) != dnnl_success)
        return NULL;
    return pd;
}

/* The bytes one thread's buffers for Winograd primitive pd take: its
 * blocked input (*src_bytes) and output (*dst_bytes) and its scratchpad,
 * each 64-byte aligned. */
static size_t kc_dnnl_wino_lane_bytes(const_dnnl_primitive_desc_t pd, size_t *src_bytes,
                                      size_t *dst_bytes)
{
    *src_bytes = kc_dnnl_align64(kc_dnnl_pd_bytes(pd, dnnl_query_src_md));
    *dst_bytes = kc_dnnl_align64(kc_dnnl_pd_bytes(pd, dnnl_query_dst_md));
    size_t scratch = kc_dnnl_pd_bytes(pd, dnnl_query_scratchpad_md);
    return *src_bytes + *dst_bytes + kc_dnnl_align64(scratch);
}

/* The reorders around a Winograd primitive whose pd is given. */
static kc_status kc_dnnl_wino_setup(kc_dnnl_conv_part *pt, const_dnnl_primitive_desc_t pd)
{
    pt->src_blk_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    pt->dst_blk_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    pt->lane_bytes = kc_dnnl_wino_lane_bytes(pd, &pt->src_blk_bytes, &pt->dst_blk_bytes);
    KC_TRY(kc_dnnl_reorder_prim(&pt->to_src, &pt->src_md, &pt->src_blk_md));
    KC_TRY(kc_dnnl_reorder_prim(&pt->from_dst, &pt->dst_blk_md, &pt->dst_md));
    pt->wino = 1;
    pt->wino_f4 = kc_dnnl_pd_is(pd, "wino_4x3");
    return KC_OK;
}

/* Whether the layer may take Winograd primitive pd at part k, paying its
 * cost from the session's budget: the transformed kernel's bytes beyond
 * the Keras kernel's, and the scratchpad's growth past what is paid on
 * each lane. The first part decides for the layer (its parts share one
 * kernel copy). ResNet50 at batch 8 adds 40 MB of transformed kernels
 * and 2 x 10.5 MB of scratchpads for 11% less time; without a bound its
 * peak RSS passed weights + activations + 64 MiB by 41 MiB. */
static int kc_dnnl_wino_pay(const kc_exec_ctx *ctx, kc_dnnl_conv_state *st, int k,
                            const_dnnl_primitive_desc_t pd)
{
    kc_wino_budget *b = st->budget;
    if (k > 0)
        return st->part[0].wino;
    size_t kernel = kc_dnnl_pd_bytes(pd, dnnl_query_weights_md);
    size_t keras = dnnl_memory_desc_get_size(&st->w_md);
    size_t scratch = kc_dnnl_pd_bytes(pd, dnnl_query_scratchpad_md);
    size_t src_bytes, dst_bytes, lane = kc_dnnl_wino_lane_bytes(pd, &src_bytes, &dst_bytes);
    /* Lanes whose buffers fit in the arena's free range cost nothing. */
    int in_arena = 0;
    while (in_arena < st->lanes && kc_dnnl_lane_spare(ctx->spare, ctx->spare_bytes, in_arena, lane))
        in_arena++;
    if (in_arena < st->lanes && !kc_dnnl_wino_forced() &&
        kc_dnnl_wino_narrow(st->part[0].src_md.dims[1], st->part[0].dst_md.dims[1]) &&
        (size_t)(st->lanes - in_arena) * lane > KC_DNNL_NARROW_OUTSIDE_MAX)
        return 0;
    if (!b)
        return 1;
    size_t kernel_cost = kernel > keras ? kernel - keras : 0;
    size_t scratch_cost = in_arena < st->lanes && scratch > b->scratch_paid
                              ? (scratch - b->scratch_paid) * (size_t)(st->lanes - in_arena)
                              : 0;
    if (b->left != SIZE_MAX) {
        if (kernel_cost + scratch_cost > b->left)
            return 0;
        b->left -= kernel_cost + scratch_cost;
        st->wino_paid = kernel_cost;
    }
    if (scratch > b->scratch_paid)
        b->scratch_paid = scratch;
    return 1;
}

/* The Winograd primitive part k takes, paid for (kc_dnnl_wino_pay), or
 * NULL for direct: the F(4x4) kernel where wanted and affordable, else
 * the F(2x2) one (a narrow layer's F(4x4) scratchpads may not fit the
 * arena where F(2x2)'s do: ResNet50's 64 -> 64 layers at batch 8), else
 * oneDNN's first choice. By name: which kernels oneDNN offers, and in
 * which order, depends on the CPU (its cache sizes): for one 48x48 image
 * of 96 channels the Intel Xeon listed F(2x2) first, this AMD EPYC
 * offers only F(4x4), and the layer runs direct when that does not fit. */
static dnnl_primitive_desc_t kc_dnnl_wino_pick(const kc_exec_ctx *ctx, kc_dnnl_conv_state *st,
                                               int k, const kc_dnnl_conv_part *pt,
                                               const dnnl_memory_desc_t *w_any,
                                               const kc_dnnl_window *g,
                                               const_dnnl_primitive_attr_t attr)
{
    static const char *const f4_impl = "jit_wino_4x3", *const f2_impl = "jit_fp32_wino_2x3";
    const char *impls[3]; /* in order; NULL: oneDNN's first choice */
    int n = 0;
    if (k > 0) /* the first part decided for the layer (kc_dnnl_wino_pay): its kernel */
        impls[n++] = st->part[0].wino_f4 ? f4_impl : f2_impl;
    else if (kc_env_off("KC_WINOGRAD_F4"))
        impls[n++] = f2_impl;
    else {
        if (kc_dnnl_wino_f4_wanted(pt, g)) {
            impls[n++] = f4_impl;
            impls[n++] = f2_impl;
        }
        impls[n++] = NULL;
    }
    for (int i = 0; i < n; i++) {
        dnnl_primitive_desc_t pd = kc_dnnl_wino_pd(st, pt, w_any, g, attr, impls[i]);
        if (pd && kc_dnnl_wino_pay(ctx, st, k, pd))
            return pd;
        if (pd)
            dnnl_primitive_desc_destroy(pd);
    }
    return NULL;
}

/* A residual sum on a wide 1x1 convolution: brgconv's sum post-op costs
 * far more there than oneDNN's older direct kernel's. One thread, 4
 * images of 56x56, 64 -> 256 channels (ResNet50's conv2_block*_3 parts at
 * batch 8): 3.1-4.1 ms against 2.4-3.5 (0.76-0.86 in 6 runs); at 28x28,
 * 128 -> 512 level (0.88-1.04), and with 256 input channels brgconv wins.
 * With at most 64 input channels the direct kernel wins from 1 MB of
 * output a part: on the AMD EPYC of bench/results, ResNet50's three
 * conv2_block*_3 layers took 0.87-1.05 ms against 0.94-1.19 as half-image
 * parts (batch 1, 2 threads) and 1.62-1.78 against 1.64-2.23 one image at
 * a time (one thread, as a lane's image-major head runs them), in each of
 * six alternating runs; with 128 (conv3's, one image at a time) brgconv
 * stayed ahead (2.07-2.56 against 2.50-2.94 ms for the four). */
#define KC_DNNL_SUM_WIDE_BYTES ((int64_t)8 << 20)
#define KC_DNNL_SUM_WIDE_BYTES_64 ((int64_t)1 << 20)
static int kc_dnnl_wide_sum(const kc_conv_attrs *a, const kc_dnnl_window *g, int sum)
{
    int64_t out_bytes = 4 * g->dst[0] * g->dst[1];
    for (int i = 0; i < g->sp; i++)
        out_bytes *= g->dst[2 + i];
    int one = 1;
    for (int i = 0; i < g->sp; i++)
        one &= a->kernel[i] == 1 && a->strides[i] == 1;
    int64_t from = g->src[1] <= 64 ? KC_DNNL_SUM_WIDE_BYTES_64 : KC_DNNL_SUM_WIDE_BYTES;
    return sum && one && g->src[1] <= 128 && out_bytes >= from;
}

/* The implementation to take when oneDNN offers it (kc_dnnl_conv_pd), or
 * NULL for oneDNN's own first choice. Fixed preferences, not timings at
 * run time: every process picks the same kernel, so split runs stay
 * bit-identical to local ones. For a depthwise convolution on NHWC data
 * oneDNN 2.x lists brdgmm_dw first, but its jit_dw kernel measured faster
 * on every MobileNetV2 shape here (e.g. 32x112x112: 0.047 against 0.064
 * ms; 144x56x56: 0.052 against 0.070); for a wide residual sum, above,
 * its direct kernel. */
static const char *kc_dnnl_preferred_impl(const kc_conv_attrs *a, const kc_dnnl_window *g,
                                          int sum)
{
    if (a->kind == KC_CONV_DEPTHWISE && a->depth_multiplier == 1)
        return "jit_dw:";
    return kc_dnnl_wide_sum(a, g, sum) ? "jit:" : NULL;
}

/* A residual sum done after the convolution rather than inside it
 * (kc_residual_add): a direct convolution accumulating into its output,
 * with an activation the pass applies, whose part writes
 * KC_DNNL_ADD_AFTER_BYTES or more in all and KC_DNNL_ADD_AFTER_IMAGE or
 * more an image, where oneDNN runs without AVX-512. There its sum post-op
 * reads the residual inside its kernel, slowly once the residual is out
 * of cache; here the convolution writes one image at a time into a
 * per-thread buffer and the pass adds it in. ResNet50 on an AVX2 build
 * of both (ONEDNN_MAX_CPU_ISA=AVX2 KC_ISA=avx2, 2-core Zen 5, 6
 * alternating pairs): batch 1 1.7% slower without it (0/6 pairs faster),
 * batch 8 level.
 *
 * Not with AVX-512, where the sum post-op is the faster (the pass writes
 * and reads each image's output once more). On the 2-core Zen 5 of
 * bench/results, ResNet50 without the pass against with it, alternating
 * whole runs: batch 8 0.958 of the time (7 of 8 pairs faster; its 56x56
 * expansions into their residuals 4.6-4.8 -> 3.97-4.07 ms a lane of four
 * images, the layers after them 0.1-0.4 ms less), batch 1 0.987 (6 of
 * 10; the same layers 0.33-0.39 -> 0.30 ms). On the earlier AVX-512 EPYC
 * the pass had gained 10-20% on those layers at batch 8 with the run as a
 * whole level (0.99, six pairs). KC_ADD_AFTER=1 takes the pass there too,
 * KC_ADD_AFTER=0 never. */
#define KC_DNNL_ADD_AFTER_BYTES ((int64_t)1 << 20)
#define KC_DNNL_ADD_AFTER_IMAGE ((int64_t)256 << 10)
static int kc_dnnl_add_after(const kc_conv_attrs *a, const kc_dnnl_window *g)
{
    int64_t image_bytes = 4 * g->dst[1];
    for (int i = 0; i < g->sp; i++)
        image_bytes *= g->dst[2 + i];
    int wanted = kc_env_on("KC_ADD_AFTER") || (!kc_env_off("KC_ADD_AFTER") && !kc_dnnl_avx512());
    return wanted && a->accumulate && !a->post_dw && !a->pre_pool &&
           kc_wino_act(a->activation) != 3 &&
           image_bytes >= KC_DNNL_ADD_AFTER_IMAGE &&
           image_bytes * g->dst[0] >= KC_DNNL_ADD_AFTER_BYTES;
}

/* A strided 1x1 convolution run as a stride-1 one on its input
 * subsampled first (kc_dnnl_gather): 2-D, unpadded, 512 input channels
 * or more and at least twice as many outputs. oneDNN 2.6's strided
 * brgconv_1x1 is slow on some such shapes. Standalone: 512 -> 1024 from
 * 28x28 (ResNet50's conv4_block1_0) four images on one thread 7.3 -> 4.65
 * ms, one image on two threads 0.83 -> 0.65; 512 -> 2048 15.4 -> 9.6;
 * 1024 -> 2048 from 14x14 level. Narrower layers gained less or lost
 * (256 -> 512 from 56x56: -4% on one thread, +15% on two; 256 -> 128:
 * +10%) and keep the strided kernel. Without AVX-512 oneDNN has no
 * strided 1x1 kernel (jit_1x1:avx2 refuses most; its direct jit:avx2
 * took 3.8 ms for ResNet50's 256 -> 512 from 56x56 at batch 1 on an AVX2
 * AMD EPYC, where its stride-1 1x1 kernel takes the same work in 1.7), so
 * there every unpadded strided 1x1 layer is gathered. KC_GATHER=0: never. */
#define KC_DNNL_GATHER_MIN_CHANNELS 512
static int kc_dnnl_gather_wanted(const kc_conv_attrs *a, const kc_dnnl_window *g)
{
    if (kc_env_off("KC_GATHER") || g->sp != 2 || a->kind != KC_CONV_PLAIN ||
        a->groups != 1 || a->post_dw || a->pre_pool)
        return 0;
    for (int i = 0; i < 2; i++)
        if (a->kernel[i] != 1 || g->pad_l[i] || g->pad_r[i])
            return 0;
    if (g->strides[0] < 2 && g->strides[1] < 2)
        return 0;
    return !kc_dnnl_avx512() ||
           (g->src[1] >= KC_DNNL_GATHER_MIN_CHANNELS && g->dst[1] >= 2 * g->src[1]);
}

/* The part's one-image window `one` turned into the stride-1 window over
 * its subsampled input; pt records how to subsample. */
static void kc_dnnl_gather_window(kc_dnnl_conv_part *pt, kc_dnnl_window *one)
{
    pt->gather_h = one->dst[2];
    pt->gather_w = one->dst[3];
    pt->channels = one->src[1];
    pt->stride_h = one->strides[0];
    pt->stride_w = one->strides[1];
    pt->src_w = one->src[3];
    for (int i = 0; i < 2; i++) {
        one->src[2 + i] = one->dst[2 + i];
        one->strides[i] = 1;
    }
    one->extent0 = 1;
}

/* One image's subsampled input (kc_dnnl_gather_window) from src into to. */
static void kc_dnnl_gather(const kc_dnnl_conv_part *pt, const float *src, float *to)
{
    size_t row = (size_t)pt->channels * sizeof(float);
    for (int64_t y = 0; y < pt->gather_h; y++) {
        const float *from = src + y * pt->stride_h * pt->src_w * pt->channels;
        for (int64_t x = 0; x < pt->gather_w; x++, to += pt->channels)
            memcpy(to, from + x * pt->stride_w * pt->channels, row);
    }
}

/* Where oneDNN runs without AVX-512, two kinds of 2-D convolution (one
 * group, undilated) run as a 1x1 convolution over their taps laid side
 * by side (kc_dnnl_im2col). Keras's (kh, kw, in, out) kernel read as
 * (kh * kw * in, out) is that 1x1 convolution's: no weights change.
 *  - A one-dimensional kernel ((1, k) or (k, 1)), stride 1, on images
 *    of at most KC_DNNL_IM2COL_MAX_PIXELS output pixels. oneDNN 2.6's
 *    direct jit:avx2 kernel took InceptionV3's 8x8 (1, 3) and (3, 1)
 *    layers (384 -> 384) in 1.5-1.8 ms on one thread of an AVX2 Zen 3,
 *    32-39 GFLOP/s, where its stride-1 1x1 kernel runs at 55-65; ONNX
 *    Runtime took them in 0.55. Larger images go to the 1-D Winograd
 *    kernel (wino.c, from KC_WINO1D's 100 pixels) before they come here.
 *  - A strided kernel of several taps on KC_DNNL_IM2COL_STRIDED_MIN_IN+
 *    input channels, when one image's buffer stays within
 *    KC_DNNL_IM2COL_MAX_BYTES. The same direct kernel ran 3x3 stride-2
 *    layers at 74-85 GFLOP/s on one thread, the 1x1 one over their taps
 *    at 91-98 (InceptionV3's Mixed_7a 192 -> 320 on 17x17: 0.91 -> 0.72
 *    ms); level from 57x57 with 64-96 channels, slower with 32 (113x113
 *    32 -> 64: 1.24 -> 1.30 ms). Larger buffers would pay too (Mixed_6a's
 *    96 -> 96, 1 MB: 0.57 -> 0.51 ms; its 288 -> 384, 3 MB: 7.1 -> 6.0;
 *    2 threads, 28x28 256 -> 256 1.92 -> 1.39), but at batch 8 the lanes'
 *    arenas had no room for them there (0 and 0.44 MB free), and the
 *    buffers of their own took the real nsfwjs InceptionV3 past its
 *    peak-RSS bound (tests/alloc/peak_rss.sh, bound 195771 KB: 196988
 *    with both, 193868-196492 with the 1 MB one, 194232-194436 with
 *    neither, as before).
 * With a fused residual sum, pooling or depthwise layer, never.
 * KC_IM2COL=0: never. */
#define KC_DNNL_IM2COL_MAX_PIXELS 256
#define KC_DNNL_IM2COL_STRIDED_MIN_IN 64
#define KC_DNNL_IM2COL_MAX_BYTES ((int64_t)512 << 10)
static int kc_dnnl_im2col_strided(const kc_conv_attrs *a, int64_t cin, int64_t pixels)
{
    int64_t taps = a->kernel[0] * a->kernel[1];
    return (a->strides[0] > 1 || a->strides[1] > 1) && taps > 1 &&
           cin >= KC_DNNL_IM2COL_STRIDED_MIN_IN &&
           pixels * taps * cin * (int64_t)sizeof(float) <= KC_DNNL_IM2COL_MAX_BYTES;
}

static int kc_dnnl_im2col_wanted(const kc_exec_ctx *ctx, const kc_conv_attrs *a,
                                 int64_t groups)
{
    const kc_shape *in = &ctx->in_shape[0], *out = &ctx->out_shape[0];
    if (kc_env_off("KC_IM2COL") || kc_dnnl_avx512() || a->spatial != 2 || groups != 1 ||
        a->kind != KC_CONV_PLAIN || a->accumulate || a->post_dw || a->pre_pool ||
        in->rank != 4 || out->rank != 4 || a->dilation[0] != 1 || a->dilation[1] != 1)
        return 0;
    int64_t pixels = out->dims[1] * out->dims[2];
    if (kc_dnnl_im2col_strided(a, in->dims[3], pixels))
        return 1;
    if (pixels > KC_DNNL_IM2COL_MAX_PIXELS || a->strides[0] != 1 || a->strides[1] != 1)
        return 0;
    return (a->kernel[0] == 1) != (a->kernel[1] == 1);
}

/* The part's one-image window `one` turned into the 1x1 window over its
 * im2col buffer; pt records how to fill it. */
static void kc_dnnl_im2col_window(kc_dnnl_conv_part *pt, const int64_t *kernel,
                                  kc_dnnl_window *one)
{
    pt->col_h = one->dst[2];
    pt->col_w = one->dst[3];
    pt->channels = one->src[1];
    pt->src_h = one->src[2];
    pt->src_w = one->src[3];
    pt->kh = kernel[0];
    pt->kw = kernel[1];
    pt->stride_h = one->strides[0];
    pt->stride_w = one->strides[1];
    pt->pad_t = one->pad_l[0];
    pt->pad_left = one->pad_l[1];
    one->src[1] = pt->kh * pt->kw * pt->channels;
    for (int i = 0; i < 2; i++) {
        one->src[2 + i] = one->dst[2 + i];
        one->pad_l[i] = one->pad_r[i] = 0;
        one->strides[i] = 1;
    }
    one->extent0 = 1;
}

/* One image's im2col buffer (kc_dnnl_im2col_window) from src into to:
 * per output pixel, its taps in Keras's kernel order (row, column), each
 * `channels` floats. */
static void kc_dnnl_im2col(const kc_dnnl_conv_part *pt, const float *src, float *to)
{
    size_t row = (size_t)pt->channels * sizeof(float);
    for (int64_t y = 0; y < pt->col_h; y++)
        for (int64_t x = 0; x < pt->col_w; x++)
            for (int64_t ky = 0; ky < pt->kh; ky++)
                for (int64_t kx = 0; kx < pt->kw; kx++, to += pt->channels) {
                    int64_t iy = y * pt->stride_h + ky - pt->pad_t;
                    int64_t ix = x * pt->stride_w + kx - pt->pad_left;
                    if (iy < 0 || iy >= pt->src_h || ix < 0 || ix >= pt->src_w)
                        memset(to, 0, row);
                    else
                        memcpy(to, src + (iy * pt->src_w + ix) * pt->channels, row);
                }
}

/* The first of the first 8 implementations oneDNN offers for desc whose
 * name starts with `impl`, or NULL. */
static dnnl_primitive_desc_t kc_dnnl_pd_named(const dnnl_convolution_desc_t *desc,
                                              const_dnnl_primitive_attr_t attr, const char *impl)
{
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_desc_iterator_t it = NULL;
    if (dnnl_primitive_desc_iterator_create(&it, desc, attr, kc_dnnl_engine(), NULL) !=
        dnnl_success)
        return NULL;
    for (int tries = 0; !pd && tries < 8; tries++) {
        dnnl_primitive_desc_t cand = dnnl_primitive_desc_iterator_fetch(it);
        if (cand && !strncmp(kc_dnnl_pd_impl(cand), impl, strlen(impl)))
            pd = cand;
        else if (cand)
            dnnl_primitive_desc_destroy(cand);
        if (!pd && dnnl_primitive_desc_iterator_next(it) != dnnl_success)
            break;
    }
    dnnl_primitive_desc_iterator_destroy(it);
    return pd;
}

static dnnl_primitive_desc_t kc_dnnl_conv_pd(const dnnl_convolution_desc_t *desc,
                                             const_dnnl_primitive_attr_t attr, const char *prefer)
{
    dnnl_primitive_desc_t pd = prefer ? kc_dnnl_pd_named(desc, attr, prefer) : NULL;
    if (!pd && dnnl_primitive_desc_create(&pd, desc, attr, kc_dnnl_engine(), NULL) != dnnl_success)
        return NULL;
    return pd;
}

static kc_dnnl_wcopy *kc_dnnl_wcopy_of(kc_dnnl_conv_part *pt, int dw)
{
    return dw ? &pt->dw : &pt->w;
}

/* Part k's copy of weights w (Keras layout keras_md; dw: the fused
 * depthwise ones): none when the primitive reads that layout, an earlier
 * part's packed copy when it wants the same layout (the usual case: parts
 * differ only in rows or images), else a copy of its own. */
static kc_status kc_dnnl_part_copy(const kc_exec_ctx *ctx, kc_dnnl_conv_state *st, int k,
                                   int dw, const dnnl_memory_desc_t *keras_md, const float *w)
{
    kc_dnnl_wcopy *c = kc_dnnl_wcopy_of(&st->part[k], dw);
    if (dnnl_memory_desc_equal(&c->prim_md, keras_md))
        return KC_OK;
    for (int j = 0; j < k; j++) {
        const kc_dnnl_wcopy *e = kc_dnnl_wcopy_of(&st->part[j], dw);
        if (e->packed && dnnl_memory_desc_equal(&e->prim_md, &c->prim_md)) {
            c->packed = e->packed;
            return KC_OK;
        }
    }
    KC_TRY(kc_dnnl_pack(keras_md, &c->prim_md, w, ctx->spare, ctx->spare_bytes, &c->packed));
    c->owner = 1;
    return KC_OK;
}

static kc_status kc_dnnl_part_weights(const kc_exec_ctx *ctx, kc_dnnl_conv_state *st, int k)
{
    return kc_dnnl_part_copy(ctx, st, k, 0, &st->w_md, kc_w(ctx, 0));
}

/* A fused depthwise post-op's Keras-layout descriptors: its (3, 3, C, 1)
 * kernel read as hwigo with C groups, and its bias. */
static kc_status kc_dnnl_dw_descs(int64_t channels, kc_dnnl_conv_state *st)
{
    dnnl_dims_t w = {channels, 1, 1, 3, 3}, b = {channels};
    if (dnnl_memory_desc_init_by_tag(&st->dw_w_md, 5, w, dnnl_f32, dnnl_hwigo) ||
        dnnl_memory_desc_init_by_tag(&st->dw_b_md, 1, b, dnnl_f32, dnnl_a))
        return kc_fail(KC_ERR_UNSUPPORTED, "oneDNN rejected the depthwise weights' layout");
    return KC_OK;
}

/* The primitive descriptor of a 1x1 convolution (src_md -> dst_md, the
 * window g) with depthwise convolution d run as its post-op, or NULL. It
 * must produce exactly the output Keras's depthwise layer would: the
 * sizes oneDNN derives are checked against d's own. */
static dnnl_primitive_desc_t kc_dnnl_fused_dw_pd(const kc_conv_attrs *a, const kc_conv_attrs *d,
                                                 const dnnl_memory_desc_t *src_md,
                                                 const dnnl_memory_desc_t *w_any,
                                                 const dnnl_memory_desc_t *b_md,
                                                 const dnnl_memory_desc_t *dst_md,
                                                 const kc_dnnl_window *g, int *act_fused)
{
    kc_shape mid = {.rank = 4, .dims = {g->dst[0], g->dst[2], g->dst[3], g->dst[1]}};
    kc_dnnl_window dw;
    if (!kc_dnnl_dw_window(&mid, d, g->dst[0], &dw))
        return NULL;
    dnnl_primitive_attr_t attr =
        kc_dnnl_post_ops_attr(a->activation, 0, &dw, d->activation, act_fused);
    dnnl_convolution_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    /* Only oneDNN's generic fusion (the 1x1 and depthwise primitives run
     * in turn over a scratchpad): its 1x1 kernel with the depthwise
     * post-op built in ("jit_1x1", which it prefers for large NHWC
     * tensors) computes wrong values in 2.6 (reproduced outside kerasc:
     * 16 -> 48 channels on 112x112, errors up to 1e37, some runs crash). */
    if (attr && dnnl_dilated_convolution_forward_desc_init(
                    &desc, dnnl_forward_inference, dnnl_convolution_direct, src_md, w_any, b_md,
                    dst_md, g->strides, g->dilates, g->pad_l, g->pad_r) == dnnl_success)
        pd = kc_dnnl_pd_named(&desc, attr, "ref_fused_convolution");
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    const dnnl_memory_desc_t *out = pd ? dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0)
                                       : NULL;
    int same = out && out->ndims == 4;
    for (int i = 0; same && i < 4; i++)
        same = out->dims[i] == dw.dst[i];
    if (!same && pd) {
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
    }
    return pd;
}

/* The window of one image of part (2-D), into *one; pt is set to run it
 * once per image of the part (kc_dnnl_execute_part), images a whole
 * image of part's input and output apart. */
static const kc_dnnl_window *kc_dnnl_one_image(const kc_dnnl_window *part, kc_dnnl_conv_part *pt,
                                               kc_dnnl_window *one)
{
    *one = *part;
    one->src[0] = one->dst[0] = 1;
    pt->images = part->src[0];
    pt->src_image = (size_t)(part->src[1] * part->src[2] * part->src[3]);
    pt->dst_image = (size_t)(part->dst[1] * part->dst[2] * part->dst[3]);
    return one;
}

/* Part k of a 1x1 convolution with a depthwise one fused after it
 * (a->post_dw): one primitive, the arguments SRC, WEIGHTS, DST (the
 * depthwise output), BIAS, then the depthwise weights and bias. Parts
 * cover whole images only, so the output offset counts output images.
 * The primitive takes one image at a time: oneDNN runs the two
 * convolutions in turn over its scratchpad, and a part's whole expanded
 * tensor falls out of cache. One thread, MobileNetV2's block_1 (16 -> 96
 * channels on 112x112, 4.8 MB expanded per image): 0.34 ms for one
 * image, 0.84 for two, 3.1 for four. */
static kc_status kc_dnnl_build_fused_part(const kc_exec_ctx *ctx, const kc_conv_attrs *a,
                                          kc_dnnl_conv_state *st, int k,
                                          const kc_dnnl_window *part)
{
    kc_dnnl_conv_part *pt = &st->part[k];
    const kc_layer *dl = a->post_dw;
    kc_dnnl_window one;
    const kc_dnnl_window *g = kc_dnnl_one_image(part, pt, &one);
    KC_TRY(kc_dnnl_descs(g, 1, a->kernel, st, pt));
    KC_TRY(kc_dnnl_dw_descs(g->dst[1], st));
    dnnl_memory_desc_t w_any = st->w_md;
    w_any.format_kind = dnnl_format_kind_any;
    dnnl_primitive_desc_t pd = kc_dnnl_fused_dw_pd(a, dl->attrs, &pt->src_md, &w_any, &st->b_md,
                                                   &pt->dst_md, g, &st->act_fused);
    if (!pd)
        return kc_fail(KC_ERR_UNSUPPORTED, "oneDNN cannot fuse depthwise layer '%s'", dl->name);
    pt->w.prim_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    pt->dw.prim_md = *dnnl_primitive_desc_query_md(
        pd, dnnl_query_exec_arg_md, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS);
    /* the output is the depthwise layer's: offsets count its images */
    size_t mid_image = pt->dst_image;
    pt->dst_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
    pt->dst_image = (size_t)(pt->dst_md.dims[1] * pt->dst_md.dims[2] * pt->dst_md.dims[3]);
    pt->dst_off = pt->dst_off / mid_image * pt->dst_image;
    static const int args[6] = {DNNL_ARG_SRC,  DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS,
                                DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS,
                                DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS};
    const dnnl_memory_desc_t *mds[6] = {&pt->src_md, &pt->w.prim_md,  &pt->dst_md,
                                        &st->b_md,   &pt->dw.prim_md, &st->dw_b_md};
    kc_status s = kc_dnnl_prim_init(&pt->prim, pd, 6, args, mds);
    dnnl_primitive_desc_destroy(pd);
    if (s != KC_OK)
        return s;
    return kc_dnnl_part_copy(ctx, st, k, 1, &st->dw_w_md, dl->weights[0].data);
}

/* Whether pair a (a->post_dw) runs its depthwise layer on kernels/dw.c's
 * loop rather than inside oneDNN's fused primitive, and its geometry for
 * one image of window g (the 1x1's: its output is the depthwise input).
 * oneDNN's fused primitive runs the 1x1 over a whole image into its
 * scratchpad, then the depthwise layer out of it (4.8 MB an image at
 * MobileNetV2's block_1: out of L3); here the two alternate strip by
 * strip (KC_DNNL_STRIP_BYTES of input rows, in L2), stride 1 or 2. The
 * loop's sums are jit_dw:avx2's, so the same bits. MobileNetV2 batch 4
 * on one thread (a batch-8 lane), Zen 3: block_1 3.13 -> 2.60 ms, block_2
 * 2.22 -> 1.79; batch 8 on 2 threads 3.86 -> 3.67 ms an image
 * (alternating, 9 rounds, against the binary before own_dw). */
static int kc_dnnl_own_dw_geometry(const kc_conv_attrs *a, const kc_conv_attrs *d,
                                   const kc_dnnl_window *g, kc_dw_geom *dg)
{
    if (!kc_dw_enabled() || a->post_pw || !kc_dnnl_act_fusable(a->activation) ||
        kc_wino_act(d->activation) == 3 || g->sp != 2)
        return 0;
    kc_shape in = {.rank = 4, .dims = {1, g->dst[2], g->dst[3], g->dst[1]}}, out = in;
    for (int i = 0; i < 2; i++) {
        in.dims[1 + i] += d->pad_before[i] + d->pad_after[i]; /* the value's padded shape */
        out.dims[1 + i] = kc_conv_out_len(in.dims[1 + i], 3, d->strides[i], 1, d->padding == 1);
    }
    return kc_dw_geometry(d, &in, &out, 2, dg);
}

/* How many threads an own_dw pair on one image (window g) cuts its
 * output rows between: the team's width, where the depthwise layer runs
 * on dw.c's loop (kc_dnnl_own_dw_geometry) and KC_DW_ROWS is not 0; else
 * 0 (the pair runs whole). */
static int kc_dnnl_row_parts(const kc_conv_attrs *a, const kc_conv_attrs *d,
                             const kc_dnnl_window *g)
{
    kc_dw_geom dg;
    int width = kc_parallel_width();
    if (g->src[0] != 1 || width < 2 || kc_env_off("KC_DW_ROWS") ||
        !kc_dnnl_own_dw_geometry(a, d, g, &dg) || dg.out_h < 2 * width)
        return 0;
    /* each part binds a lane's memories (kc_dnnl_prim.shared) */
    return width < KC_DNNL_MAX_BATCH_LANES ? width : KC_DNNL_MAX_BATCH_LANES;
}

/* A strip's input rows, at most this many bytes: the strip stays in the
 * core's L2 (512 KB on the Zen 3) between the 1x1 that writes it and the
 * depthwise loop that reads it. MobileNetV2's block_1 (112x112x96, 43 KB
 * a row, stride 2) takes 4 output rows a strip, its block_2 (56x56x144)
 * 10. */
#define KC_DNNL_STRIP_BYTES ((int64_t)400 << 10)

/* The 1x1 primitive of pair a over `rows` rows of one image (window
 * one), into p; its weights' layout must be `want` when given. */
static kc_status kc_dnnl_strip_prim(const kc_conv_attrs *a, kc_dnnl_conv_state *st,
                                    kc_dnnl_conv_part *pt, const kc_dnnl_window *one,
                                    int64_t rows, kc_dnnl_prim *p,
                                    const dnnl_memory_desc_t *want)
{
    kc_dnnl_window g = *one;
    g.src[2] = g.dst[2] = rows;
    KC_TRY(kc_dnnl_descs(&g, 1, a->kernel, st, pt));
    int act_fused = 0;
    dnnl_primitive_attr_t attr = kc_dnnl_post_ops_attr(a->activation, 0, NULL, NULL, &act_fused);
    dnnl_memory_desc_t w_any = st->w_md;
    w_any.format_kind = dnnl_format_kind_any;
    dnnl_convolution_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    if (attr && act_fused &&
        dnnl_dilated_convolution_forward_desc_init(
            &desc, dnnl_forward_inference, dnnl_convolution_direct, &pt->src_md, &w_any,
            &st->b_md, &pt->dst_md, g.strides, g.dilates, g.pad_l, g.pad_r) == dnnl_success)
        pd = kc_dnnl_conv_pd(&desc, attr, kc_dnnl_preferred_impl(a, &g, 0));
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (!pd)
        return kc_fail(KC_ERR_UNSUPPORTED, "oneDNN has no 1x1 convolution before '%s'",
                       a->post_dw->name);
    const dnnl_memory_desc_t *w_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    if (want && !dnnl_memory_desc_equal(w_md, want)) {
        dnnl_primitive_desc_destroy(pd);
        return kc_fail(KC_ERR_UNSUPPORTED, "oneDNN wants the weights of '%s' in two layouts",
                       a->post_dw->name);
    }
    pt->w.prim_md = *w_md;
    static const int args[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
    const dnnl_memory_desc_t *mds[4] = {&pt->src_md, &pt->w.prim_md, &pt->dst_md, &st->b_md};
    kc_status s = kc_dnnl_prim_init(p, pd, 4, args, mds);
    dnnl_primitive_desc_destroy(pd);
    return s;
}

/* The primitive over `want` rows where the part has one, else over one
 * row; *rows: its rows. */
static kc_dnnl_prim *kc_dnnl_own_dw_prim(kc_dnnl_own_dw *own, int64_t want, int64_t *rows)
{
    for (int i = own->n_sizes - 1; i > 0; i--)
        if (own->rows_of[i] == want) {
            *rows = want;
            return &own->rows_prim[i];
        }
    *rows = 1;
    return &own->rows_prim[0];
}

/* The strip of output rows from y0 (before y_end): its end *y1, and the
 * input rows [*r0, *r1) it reads. kc_dnnl_own_dw_image runs the strips
 * and kc_dnnl_own_dw_walk plans their primitives; both step through them
 * here, so the plan is what runs. */
static void kc_dnnl_own_dw_strip(const kc_dnnl_own_dw *own, int64_t y0, int64_t y_end,
                                 int64_t *y1, int64_t *r0, int64_t *r1)
{
    const kc_dw_geom *g = &own->dw_geom;
    *y1 = y0 + own->strip_rows < y_end ? y0 + own->strip_rows : y_end;
    *r0 = y0 * g->s - g->pad_t;
    *r1 = (*y1 - 1) * g->s - g->pad_t + 3;
    *r0 = *r0 < 0 ? 0 : *r0;
    *r1 = *r1 > g->in_h ? g->in_h : *r1;
}

/* The remainders (input rows fewer than a strip's) that output rows
 * [y_lo, y_hi) of an image need, as kc_dnnl_own_dw_image walks them:
 * at most `most` into want; returns how many. */
static int kc_dnnl_own_dw_walk(const kc_dnnl_own_dw *own, int64_t y_lo, int64_t y_hi,
                               int64_t *want, int most)
{
    int n = 0;
    int64_t have1 = 0, y1 = 0, r0 = 0, r1 = 0;
    for (int64_t y0 = y_lo; y0 < y_hi; y0 = y1) {
        kc_dnnl_own_dw_strip(own, y0, y_hi, &y1, &r0, &r1);
        int64_t next = have1 > r0 ? have1 : r0;
        next += (r1 - next) / own->strip_new * own->strip_new;
        if (next < r1 && n < most)
            want[n++] = r1 - next;
        have1 = r1;
    }
    return n;
}

/* Part k of pair a on window `part` with its depthwise layer on dw.c's
 * loop (geometry dg): the 1x1 primitives for a strip's rows, for one row
 * and for the remainders the strips of an image, or of each of its
 * row_parts shares (kc_dnnl_rows_part), need; their activation a
 * post-op, and the depthwise layer's kernel packed. Offsets into the
 * output count the depthwise layer's images. */
static kc_status kc_dnnl_build_own_dw_part(const kc_conv_attrs *a, kc_dnnl_conv_state *st, int k,
                                           const kc_dnnl_window *part, const kc_dw_geom *dg,
                                           int row_parts)
{
    kc_dnnl_conv_part *pt = &st->part[k];
    const kc_layer *dl = a->post_dw;
    const kc_conv_attrs *d = dl->attrs;
    kc_dnnl_window one;
    kc_dnnl_one_image(part, pt, &one);
    int64_t row_floats = dg->in_w * dg->c, rows = KC_DNNL_STRIP_BYTES / (row_floats * 4);
    kc_dnnl_own_dw *own = pt->own = kc_calloc(1, sizeof *pt->own);
    if (!own)
        return KC_ERR_NOMEM;
    own->strip_rows = (rows + dg->s - 3) / dg->s / 2 * 2; /* (r - 1) * s + 3 rows: pairs */
    if (own->strip_rows < 2)
        own->strip_rows = 2;
    own->strip_floats = (size_t)(((own->strip_rows - 1) * dg->s + 3) * row_floats);
    /* a strip's new rows but the first's and last's */
    own->strip_new = own->strip_rows * dg->s < dg->in_h ? own->strip_rows * dg->s : dg->in_h;
    own->dw_geom = *dg;
    own->rows_of[0] = 1;
    own->n_sizes = 1;
    KC_TRY(kc_dnnl_strip_prim(a, st, pt, &one, 1, &own->rows_prim[0], NULL));
    dnnl_memory_desc_t row_w = pt->w.prim_md;
    KC_TRY(kc_dnnl_strip_prim(a, st, pt, &one, own->strip_new, &pt->prim, &row_w));
    /* the remainders of the image's strips, or of each row part's */
    int parts = row_parts > 1 ? row_parts : 1;
    for (int q = 0; q < parts; q++) {
        int64_t want[KC_DNNL_OWN_SIZES];
        int n = kc_dnnl_own_dw_walk(own, dg->out_h * q / parts, dg->out_h * (q + 1) / parts,
                                    want, KC_DNNL_OWN_SIZES);
        for (int i = 0; i < n && own->n_sizes < KC_DNNL_OWN_SIZES; i++) {
            int64_t got = 0;
            kc_dnnl_own_dw_prim(own, want[i], &got);
            if (got == want[i])
                continue;
            own->rows_of[own->n_sizes] = want[i];
            KC_TRY(kc_dnnl_strip_prim(a, st, pt, &one, want[i], &own->rows_prim[own->n_sizes],
                                      &row_w));
            own->n_sizes++;
        }
    }
    const float *dw_w = dl->weights[0].data, *dw_b = d->use_bias ? dl->weights[1].data : NULL;
    if (!dw_w || (d->use_bias && !dw_b))
        return kc_fail(KC_ERR_UNSUPPORTED, "the weights of '%s' are gone", dl->name);
    KC_TRY(kc_dw_weights(dw_w, dw_b, dg->c, &own->dw_w, &own->dw_b)); /* freed with the part */
    pt->own_dw = 1;
    /* the output is the depthwise layer's: offsets count its images */
    size_t mid_image = pt->dst_image;
    pt->dst_image = (size_t)(dg->out_h * dg->out_w * dg->c);
    pt->dst_off = pt->dst_off / mid_image * pt->dst_image;
    st->act_fused = 1; /* the 1x1's as a post-op, the depthwise layer's in the loop */
    return KC_OK;
}

/* Output rows [y_lo, y_hi) of one image of an own_dw part (y_hi 0: all
 * of them), strip by strip: each strip's input rows [r0, r1) in buf (the
 * rows the last strip also read moved to its front, the others made by
 * the 1x1: R x stride at a time, the rest one by one), then its output
 * rows from there. */
static kc_status kc_dnnl_own_dw_image(kc_dnnl_conv_part *pt, int lane, void *w, const float *b,
                                      const float *src, float *dst, float *buf, int64_t y_lo,
                                      int64_t y_hi)
{
    kc_dnnl_own_dw *own = pt->own;
    const kc_dw_geom *g = &own->dw_geom;
    int64_t row_floats = g->in_w * g->c, src_row = pt->src_image / (size_t)g->in_h;
    int64_t steady = own->strip_new, have0 = 0, have1 = 0; /* rows in buf */
    int64_t y_end = y_hi > 0 && y_hi < g->out_h ? y_hi : g->out_h, y1 = 0, r0 = 0, r1 = 0;
    for (int64_t y0 = y_lo; y0 < y_end; y0 = y1) {
        kc_dnnl_own_dw_strip(own, y0, y_end, &y1, &r0, &r1);
        int64_t keep = have1 > r0 ? have1 - r0 : 0, next = r0 + keep;
        if (keep)
            memmove(buf, buf + (r0 - have0) * row_floats, (size_t)(keep * row_floats) * sizeof *buf);
        while (next < r1) {
            int64_t rows = steady;
            kc_dnnl_prim *p = r1 - next >= steady ? &pt->prim
                                                  : kc_dnnl_own_dw_prim(own, r1 - next, &rows);
            void *ptrs[4] = {(void *)(src + next * src_row), w, buf + (next - r0) * row_floats,
                             (void *)b};
            KC_TRY(kc_dnnl_run_lane(p, ptrs, lane));
            next += rows;
        }
        have0 = r0;
        have1 = r1;
        kc_dw_geom strip = *g; /* buf's row 0 is the image's row r0 */
        strip.pad_t += r0;
        strip.in_h -= r0;
        kc_dw_rows_avx2(&strip, buf, own->dw_w, own->dw_b, dst, y0, y1);
    }
    return KC_OK;
}

/* Direct convolution a over part pt's descriptors (window g, weights
 * w_any, attr's post-ops, `sum` a fused residual), the implementation
 * preferred (kc_dnnl_preferred_impl); NULL when oneDNN has none. */
static dnnl_primitive_desc_t kc_dnnl_direct_pd(const kc_conv_attrs *a,
                                               const kc_dnnl_conv_state *st,
                                               const kc_dnnl_conv_part *pt,
                                               const dnnl_memory_desc_t *w_any,
                                               const kc_dnnl_window *g,
                                               const_dnnl_primitive_attr_t attr, int sum)
{
    dnnl_convolution_desc_t desc;
    if (dnnl_dilated_convolution_forward_desc_init(
            &desc, dnnl_forward_inference, dnnl_convolution_direct, &pt->src_md, w_any,
            st->has_bias ? &st->b_md : NULL, &pt->dst_md, g->strides, g->dilates, g->pad_l,
            g->pad_r) != dnnl_success)
        return NULL;
    return kc_dnnl_conv_pd(&desc, attr, kc_dnnl_preferred_impl(a, g, sum));
}

static kc_status kc_dnnl_build_part(const kc_exec_ctx *ctx, const kc_conv_attrs *a,
                                    kc_dnnl_conv_state *st, int64_t groups, int k,
                                    const kc_dnnl_window *g, int row_parts)
{
    kc_dnnl_conv_part *pt = &st->part[k];
    kc_dw_geom dg;
    if (a->post_dw && kc_dnnl_own_dw_geometry(a, a->post_dw->attrs, g, &dg)) {
        KC_TRY(kc_dnnl_build_own_dw_part(a, st, k, g, &dg, row_parts));
        return kc_dnnl_part_weights(ctx, st, k);
    }
    if (a->post_dw) {
        KC_TRY(kc_dnnl_build_fused_part(ctx, a, st, k, g));
        return kc_dnnl_part_weights(ctx, st, k);
    }
    /* Winograd one image at a time: a part's transformed tiles then stay
     * in cache. ResNet50 batch 8, per layer: level at 56x56, 0.85-0.96
     * of the batched time at 28x28, 0.82-0.89 at 14x14; whole layers
     * -1.6% (ResNet50), -4.2% (InceptionV3), and peak RSS 398 -> 272 MB
     * and 467 -> 319 MB (smaller scratchpads). */
    const kc_dnnl_window *part = g;
    kc_dnnl_window one;
    pt->add_after = kc_dnnl_add_after(a, g);
    pt->gather = kc_dnnl_gather_wanted(a, g);
    /* all of a layer's parts or none: they share the weights' descriptor */
    pt->im2col = kc_dnnl_im2col_wanted(ctx, a, groups);
    /* never with add_after (Winograd takes no sum) or gather (nor 1x1) */
    int wino_one = g->src[0] > 1 && kc_dnnl_wino_eligible(ctx, a, groups, st);
    if (wino_one || pt->add_after || pt->gather || pt->im2col)
        g = kc_dnnl_one_image(part, pt, &one);
    if (pt->gather)
        kc_dnnl_gather_window(pt, &one);
    static const int64_t one_by_one[2] = {1, 1};
    if (pt->im2col)
        kc_dnnl_im2col_window(pt, a->kernel, &one);
    KC_TRY(kc_dnnl_descs(g, groups, pt->im2col ? one_by_one : a->kernel, st, pt));
    /* Weights in whatever blocked layout the fastest implementation
     * wants ("any"), reordered once below; activations stay NHWC. */
    dnnl_memory_desc_t w_any = st->w_md;
    /* Streamed weights arrive fresh each run: read them in Keras layout
     * rather than keep a packed copy outside the device budget. */
    if (!st->w_plain)
        w_any.format_kind = dnnl_format_kind_any;
    dnnl_primitive_desc_t pd = NULL;
    int sum = a->accumulate && !pt->add_after; /* oneDNN's sum post-op */
    dnnl_primitive_attr_t attr = kc_dnnl_post_ops_attr(pt->add_after ? NULL : a->activation, sum,
                                                        NULL, NULL, &st->act_fused);
    if (!attr)
        return kc_fail(KC_ERR_UNSUPPORTED, "oneDNN rejected the convolution's post-ops");
    if (pt->add_after) { /* kc_residual_add applies it */
        pt->add_act = kc_wino_act(a->activation);
        st->act_fused = 1;
    }
    if (kc_dnnl_wino_eligible(ctx, a, groups, st))
        pd = kc_dnnl_wino_pick(ctx, st, k, pt, &w_any, g, attr);
    if (pd && kc_dnnl_wino_setup(pt, pd) != KC_OK) {
        kc_error_clear();
        kc_dnnl_prim_destroy(&pt->to_src);
        kc_dnnl_prim_destroy(&pt->from_dst);
        pt->wino = 0;
        dnnl_primitive_desc_destroy(pd);
        pd = NULL;
    }
    if (!pd && wino_one) { /* no Winograd after all: direct, on the whole part */
        g = part;
        pt->images = 0;
        kc_status ds = kc_dnnl_descs(g, groups, a->kernel, st, pt);
        if (ds != KC_OK) {
            dnnl_primitive_attr_destroy(attr);
            return ds;
        }
    }
    if (!pd && !(pd = kc_dnnl_direct_pd(a, st, pt, &w_any, g, attr, sum))) {
        dnnl_primitive_attr_destroy(attr);
        return kc_fail(KC_ERR_UNSUPPORTED, "oneDNN has no convolution for this configuration");
    }
    dnnl_primitive_attr_destroy(attr);
    pt->w.prim_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    static const int args[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
    const dnnl_memory_desc_t *mds[4] = {pt->wino ? &pt->src_blk_md : &pt->src_md, &pt->w.prim_md,
                                        pt->wino ? &pt->dst_blk_md : &pt->dst_md, &st->b_md};
    kc_status s = kc_dnnl_prim_init(&pt->prim, pd, st->has_bias ? 4 : 3, args, mds);
    dnnl_primitive_desc_destroy(pd);
    if (s != KC_OK)
        return s;
    if (!st->w_plain)
        KC_TRY(kc_dnnl_part_weights(ctx, st, k));
    return KC_OK;
}

/* pre_pool: the average pooling's window over the convolution's output
 * (F channels, the input's spatial size): Keras's "same", the extra cell
 * after. Cut like any pooling, it says which rows of the convolution
 * each part needs. */
static void kc_dnnl_pool_window_of(const kc_exec_ctx *ctx, const kc_pool_attrs *p,
                                   kc_dnnl_window *g)
{
    const kc_shape *out = &ctx->out_shape[0];
    memset(g, 0, sizeof *g);
    g->sp = 2;
    g->src[0] = g->dst[0] = out->dims[0];
    g->src[1] = g->dst[1] = out->dims[3];
    for (int i = 0; i < 2; i++) {
        g->src[2 + i] = g->dst[2 + i] = out->dims[1 + i];
        g->strides[i] = 1;
        g->pad_l[i] = (p->pool[i] - 1) / 2;
        g->pad_r[i] = p->pool[i] - 1 - g->pad_l[i];
    }
    g->extent0 = p->pool[0];
}

/* Part k's pooling: NHWC from the convolution's buffer (window g's
 * source) to its output rows, averaging the real cells only, with the
 * layer's activation as a post-op. */
static kc_status kc_dnnl_build_pool_part(const kc_conv_attrs *a, const kc_pool_attrs *p,
                                         const kc_dnnl_window *g, kc_dnnl_conv_part *pt)
{
    int fused = 0;
    dnnl_primitive_attr_t attr = kc_dnnl_post_ops_attr(a->activation, 0, NULL, NULL, &fused);
    kc_status s = attr ? kc_dnnl_pool_prim_init(p, g, attr, &pt->pool) : KC_ERR_UNSUPPORTED;
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (s != KC_OK)
        return kc_fail(s, "oneDNN cannot pool after this convolution");
    pt->tmp_bytes = sizeof(float) * (size_t)(g->src[0] * g->src[1] * g->src[2] * g->src[3]);
    return KC_OK;
}

/* Part k of a 1x1 convolution with its pooling moved after it: g is the
 * pooling's part (its source rows are the rows the convolution must
 * produce), src_off its offset into the F-channel buffer. The
 * convolution runs linear over those rows of the input, which has the
 * same spatial size; the activation comes after the pooling. */
static kc_status kc_dnnl_build_pooled_part(const kc_exec_ctx *ctx, const kc_conv_attrs *a,
                                           kc_dnnl_conv_state *st, int k,
                                           const kc_dnnl_window *g, size_t src_off)
{
    kc_dnnl_conv_part *pt = &st->part[k];
    int64_t cin = ctx->in_shape[0].dims[3];
    kc_dnnl_window cw = *g;
    cw.src[1] = cin;
    cw.dst[2] = cw.src[2];
    memset(cw.pad_l, 0, sizeof cw.pad_l);
    memset(cw.pad_r, 0, sizeof cw.pad_r);
    cw.extent0 = 1;
    kc_conv_attrs linear = *a;
    linear.activation = NULL;
    linear.pre_pool = NULL;
    KC_TRY(kc_dnnl_build_part(ctx, &linear, st, 1, k, &cw, 0));
    pt->src_off = src_off / (size_t)g->src[1] * (size_t)cin;
    KC_TRY(kc_dnnl_build_pool_part(a, a->pre_pool->attrs, g, pt));
    st->act_fused = kc_dnnl_act_fusable(a->activation);
    return KC_OK;
}

/* What building a part needs (kc_dnnl_build_cut's callback). */
typedef struct kc_dnnl_conv_build {
    const kc_exec_ctx *ctx;
    const kc_conv_attrs *a;
    kc_dnnl_conv_state *st;
    int64_t groups;
    int row_parts;          /* an own_dw pair's on one image (kc_dnnl_row_parts) */
} kc_dnnl_conv_build;

static kc_status kc_dnnl_conv_build_one(void *arg, int k, const kc_dnnl_window *g,
                                        size_t src_off, size_t dst_off, int solo)
{
    kc_dnnl_conv_build *b = arg;
    kc_dnnl_conv_part *pt = &b->st->part[k];
    pt->src_off = src_off;
    pt->dst_off = dst_off;
    b->st->n_parts = k + 1;
    kc_status s = b->a->pre_pool
                      ? kc_dnnl_build_pooled_part(b->ctx, b->a, b->st, k, g, src_off)
                      : kc_dnnl_build_part(b->ctx, b->a, b->st, b->groups, k, g, b->row_parts);
    pt->prim.solo = pt->to_src.solo = pt->from_dst.solo = pt->pool.solo = solo;
    for (int i = 0; pt->own && i < pt->own->n_sizes; i++)
        pt->own->rows_prim[i].solo = solo;
    return s;
}

/* Cut when kc_dnnl_plan_cuts says so; should oneDNN refuse a part, the
 * layer runs whole instead (a cut is only ever a speed choice). */
static kc_status kc_dnnl_build(const kc_exec_ctx *ctx, const kc_conv_attrs *a,
                               kc_dnnl_conv_state *st, int64_t groups, int64_t work)
{
    kc_dnnl_window whole;
    if (a->pre_pool) /* cut by the pooling's window, which reaches past its rows */
        kc_dnnl_pool_window_of(ctx, a->pre_pool->attrs, &whole);
    else
        kc_dnnl_window_whole(ctx, a, &whole);
    kc_dnnl_cut cuts[KC_DNNL_MAX_CUTS];
    int64_t act = (int64_t)(kc_count(&ctx->in_shape[0]) + kc_count(&ctx->out_shape[0])) * 4;
    const kc_shape *in = &ctx->in_shape[0];
    int64_t wbytes = (int64_t)sizeof(float) * whole.dst[1] * (in->dims[in->rank - 1] / groups);
    for (int i = 0; i < a->spatial; i++)
        wbytes *= a->kernel[i];
    int n = ctx->whole ? 1 : kc_dnnl_plan_cuts(whole.src[0], whole.dst[2], act, wbytes, cuts);
    /* A fused depthwise pair is cut by images only (its post-op pads both
     * axes alike: no row parts); one image runs whole, or, where its
     * depthwise layer runs on dw.c's loop, cut by output rows between the
     * threads (kc_dnnl_row_parts). */
    int row_parts = 0;
    if (a->post_dw && whole.src[0] == 1) {
        n = 1;
        row_parts = ctx->whole ? 0 : kc_dnnl_row_parts(a, a->post_dw->attrs, &whole);
    }
    st->in_shape = ctx->in_shape[0];
    if (!(st->part = kc_calloc((size_t)n, sizeof *st->part)))
        return KC_ERR_NOMEM;
    kc_dnnl_conv_build b = {ctx, a, st, groups, row_parts};
    int small = kc_dnnl_small(work, wbytes) || row_parts > 1; /* row parts: solo primitives */
    /* A layer run whole by the team has one scratchpad for all threads. */
    st->lanes = n > 1 ? (n < kc_threads_max() ? n : kc_threads_max()) : 1;
    kc_status s = kc_dnnl_build_cut(&whole, cuts, n, small, kc_dnnl_conv_build_one, &b);
    if (s == KC_OK && row_parts > 1 && st->part[0].own_dw) {
        st->row_parts = row_parts;
        st->lanes = row_parts;
        st->part[0].prim.shared = 1;
        for (int i = 0; i < st->part[0].own->n_sizes; i++)
            st->part[0].own->rows_prim[i].shared = 1;
        s = kc_dnnl_lanes(row_parts);
    }
    if (s == KC_OK || n == 1)
        return s;
    kc_error_clear();
    kc_dnnl_wino_refund(st);
    for (int k = 0; k < st->n_parts; k++)
        kc_dnnl_conv_part_free(&st->part[k]);
    st->n_parts = 0;
    st->lanes = 1;
    return kc_dnnl_build_cut(&whole, cuts, 1, small, kc_dnnl_conv_build_one, &b);
}

/* A run's buffers: input, Keras-layout weights, bias, output, and a
 * fused depthwise post-op's Keras-layout weights and bias (NULL when
 * none). */
typedef struct kc_dnnl_conv_io {
    const float *src, *w, *b;
    float *dst;
    const float *dw_w, *dw_b;
    void *spare;            /* the arena's free range during the call */
    size_t spare_bytes;
    int64_t rows_lo, rows_hi; /* an own_dw pair's output rows to make (rows_hi 0: all) */
    /* an element-wise activation no post-op runs, applied to each part's
     * output as soon as the part has made it (still in its core's
     * cache), or NULL */
    const char *act;
    int keras_major;
} kc_dnnl_conv_io;

/* io's activation over the part's output at dst (pt->dst_md's values:
 * whole output rows in NHWC, so a contiguous run). */
static kc_status kc_dnnl_part_act(const kc_dnnl_conv_part *pt, const kc_dnnl_conv_io *io,
                                  float *dst)
{
    if (!io->act)
        return KC_OK;
    int64_t n = 1;
    for (int d = 0; d < pt->dst_md.ndims; d++)
        n *= pt->dst_md.dims[d];
    return kc_activation_apply(io->act, io->keras_major, dst, n, pt->dst_md.dims[1]);
}

/* bytes for one part's run: in the arena's free range (slot's share of
 * it) when that has room, costing no memory of its own, else in the
 * thread's workspace `ws_slot`. */
static void *kc_dnnl_part_buffer(const kc_dnnl_conv_io *io, int slot, int ws_slot, size_t bytes)
{
    char *spare = kc_dnnl_lane_spare(io->spare, io->spare_bytes, slot, bytes);
    return spare ? (void *)spare : kc_dnnl_workspace(ws_slot, bytes);
}

/* The part's primitive once, on src and dst (already offset). */
static kc_status kc_dnnl_execute_once(kc_dnnl_conv_part *pt, int lane, const kc_dnnl_conv_io *io,
                                      const float *src, float *dst)
{
    void *wp = pt->w.packed ? (void *)pt->w.packed : (void *)io->w;
    void *dwp = pt->dw.packed ? (void *)pt->dw.packed : (void *)io->dw_w;
    const float *b = io->b;
    if (pt->pool.prim) {
        void *tmp = kc_dnnl_workspace(KC_DNNL_SLOT_DST, pt->tmp_bytes);
        if (!tmp)
            return kc_fail(KC_ERR_NOMEM, "out of memory for a pooled convolution's buffer");
        void *conv[4] = {(void *)src, wp, tmp, (void *)b}, *pool[2] = {tmp, dst};
        KC_TRY(kc_dnnl_run_lane(&pt->prim, conv, lane));
        return kc_dnnl_run_lane(&pt->pool, pool, lane);
    }
    /* by thread, not part: a thread runs its parts one after another; a
     * batch lane has a spare range (and arena) of its own */
    int slot = kc_batch_lane() > 0 ? 0 : kc_thread_index();
    if (pt->gather) {
        size_t bytes = (size_t)(pt->gather_h * pt->gather_w * pt->channels) * sizeof(float);
        float *sub = kc_dnnl_workspace(KC_DNNL_SLOT_SRC, bytes);
        if (!sub)
            return kc_fail(KC_ERR_NOMEM, "out of memory for a strided convolution's buffer");
        kc_dnnl_gather(pt, src, sub);
        src = sub;
    }
    if (pt->im2col) {
        size_t bytes = (size_t)(pt->col_h * pt->col_w * pt->kh * pt->kw * pt->channels) *
                       sizeof(float);
        float *cols = kc_dnnl_part_buffer(io, slot, KC_DNNL_SLOT_SRC, bytes);
        if (!cols)
            return kc_fail(KC_ERR_NOMEM, "out of memory for a convolution's im2col buffer");
        kc_dnnl_im2col(pt, src, cols);
        src = cols;
    }
    if (pt->own_dw) {
        float *buf = kc_dnnl_part_buffer(io, slot, KC_DNNL_SLOT_DST,
                                         pt->own->strip_floats * sizeof(float));
        if (!buf)
            return kc_fail(KC_ERR_NOMEM, "out of memory for a 1x1 convolution's buffer");
        return kc_dnnl_own_dw_image(pt, lane, wp, b, src, dst, buf, io->rows_lo, io->rows_hi);
    }
    if (pt->add_after) {
        size_t bytes = pt->dst_image * sizeof(float);
        float *tmp = kc_dnnl_part_buffer(io, slot, KC_DNNL_SLOT_DST, bytes);
        if (!tmp)
            return kc_fail(KC_ERR_NOMEM, "out of memory for a residual convolution's buffer");
        void *ptrs[4] = {(void *)src, wp, tmp, (void *)b};
        KC_TRY(kc_dnnl_run_lane(&pt->prim, ptrs, lane));
        kc_residual_add(dst, tmp, (int64_t)pt->dst_image, pt->add_act);
        return KC_OK;
    }
    if (!pt->wino) {
        void *ptrs[6] = {(void *)src, wp, dst, (void *)b, dwp, (void *)io->dw_b};
        KC_TRY(kc_dnnl_run_lane(&pt->prim, ptrs, lane));
        return kc_dnnl_part_act(pt, io, dst);
    }
    char *spare = kc_dnnl_lane_spare(io->spare, io->spare_bytes, slot, pt->lane_bytes);
    void *sb = spare ? spare : kc_dnnl_workspace(KC_DNNL_SLOT_SRC, pt->src_blk_bytes);
    void *db = spare ? spare + pt->src_blk_bytes
                     : kc_dnnl_workspace(KC_DNNL_SLOT_DST, pt->dst_blk_bytes);
    if (!sb || !db)
        return kc_fail(KC_ERR_NOMEM, "out of memory for a Winograd convolution's buffers");
    void *in[2] = {(void *)src, sb}, *conv[4] = {sb, wp, db, (void *)b}, *out[2] = {db, dst};
    KC_TRY(kc_dnnl_run_lane(&pt->to_src, in, lane));
    KC_TRY(kc_dnnl_run_in(&pt->prim, conv, lane,
                          spare ? spare + pt->src_blk_bytes + pt->dst_blk_bytes : NULL));
    KC_TRY(kc_dnnl_run_lane(&pt->from_dst, out, lane));
    return kc_dnnl_part_act(pt, io, dst);
}

/* A part: its primitive once, or once per image when it was built for
 * one image (pt->images). */
static kc_status kc_dnnl_execute_part(kc_dnnl_conv_part *pt, int lane, const kc_dnnl_conv_io *io)
{
    const float *src = io->src + pt->src_off;
    float *dst = io->dst + pt->dst_off;
    for (int64_t i = 1; i < pt->images; i++)
        KC_TRY(kc_dnnl_execute_once(pt, lane, io, src + i * pt->src_image, dst + i * pt->dst_image));
    return kc_dnnl_execute_once(pt, lane, io, src, dst);
}

/* A cut layer's run (or an own_dw pair's row parts): the buffers, and
 * each part's outcome. */
typedef struct kc_dnnl_conv_job {
    kc_dnnl_conv_state *st;
    const kc_dnnl_conv_io *io;
    kc_status status[KC_DNNL_MAX_CUTS];
} kc_dnnl_conv_job;

static void kc_dnnl_conv_job_part(void *arg, int k)
{
    kc_dnnl_conv_job *job = arg;
    job->status[k] = kc_dnnl_execute_part(&job->st->part[k], k, job->io);
}

/* Row part k of an own_dw pair on one image: its even share of the
 * output rows. (Not kc_balance's cut: the primitives for the strips'
 * remainders are built for these shares, and a moved cut would fall back
 * to one row at a time.) */
static void kc_dnnl_rows_part(void *arg, int k)
{
    kc_dnnl_conv_job *job = arg;
    kc_dnnl_conv_state *st = job->st;
    int64_t rows = st->part[0].own->dw_geom.out_h;
    kc_dnnl_conv_io io = *job->io;
    io.rows_lo = rows * k / st->row_parts;
    io.rows_hi = rows * (k + 1) / st->row_parts;
    job->status[k] = io.rows_hi > io.rows_lo ? kc_dnnl_execute_part(&st->part[0], k, &io) : KC_OK;
}

static kc_status kc_dnnl_execute(kc_dnnl_conv_state *st, const kc_dnnl_conv_io *io)
{
    /* inside a batch lane (one thread) the part runs whole: the same bits */
    int by_rows = st->row_parts > 1 && kc_parallel_width() > 1;
    if (st->n_parts == 1 && !by_rows)
        return kc_dnnl_execute_part(&st->part[0], 0, io);
    kc_dnnl_conv_job job = {st, io, {KC_OK}};
    int n = by_rows ? st->row_parts : st->n_parts;
    kc_parallel(n, by_rows ? kc_dnnl_rows_part : kc_dnnl_conv_job_part, &job);
    for (int k = 0; k < n; k++)
        if (job.status[k] != KC_OK) /* the message stayed on the failing thread */
            return kc_fail(job.status[k], "oneDNN failed on part %d of a convolution", k);
    return KC_OK;
}

/* Multiply-accumulates of the convolution (all images). */
static int64_t kc_dnnl_conv_work(const kc_exec_ctx *ctx, const kc_conv_attrs *a, int64_t groups)
{
    const kc_shape *in = &ctx->in_shape[0];
    int64_t macs = kc_count(&ctx->out_shape[0]) * (in->dims[in->rank - 1] / (groups ? groups : 1));
    for (int i = 0; i < a->spatial; i++)
        macs *= a->kernel[i];
    return macs;
}

kc_status kc_dnnl_conv(const kc_exec_ctx *ctx, int *handled, int *act_done)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    *handled = 0;
    *act_done = 0;
    if (!ctx->state || (a->kind != KC_CONV_PLAIN && a->kind != KC_CONV_DEPTHWISE) ||
        !kc_dnnl_ready())
        return KC_OK;
    int64_t cin = ctx->in_shape[0].dims[ctx->in_shape[0].rank - 1];
    int64_t groups = a->kind == KC_CONV_DEPTHWISE ? cin : a->groups;
    kc_dnnl_conv_state *st = (kc_dnnl_conv_state *)*ctx->state;
    if (st && (!kc_shape_equal(&st->in_shape, &ctx->in_shape[0]) ||
               st->w_plain != (ctx->w_ext != NULL) || st->exact != ctx->exact ||
               st->post_dw != (const void *)a->post_dw ||
               st->pre_pool != (const void *)a->pre_pool))
        st = kc_kernel_state_drop(ctx);
    const kc_conv_attrs *dw = a->post_dw ? a->post_dw->attrs : NULL;
    if (!st) {
        st = kc_calloc(1, sizeof *st);
        if (!st)
            return KC_ERR_NOMEM;
        st->base.free = kc_dnnl_conv_free;
        st->has_bias = a->use_bias || dw; /* a fused pair always binds both biases */
        st->post_dw = a->post_dw;
        st->pre_pool = a->pre_pool;
        if (dw && (!a->use_bias || !dw->use_bias) &&
            !(st->zero_bias = kc_calloc((size_t)a->filters + 1, sizeof(float)))) {
            free(st);
            return KC_ERR_NOMEM;
        }
        st->w_plain = ctx->w_ext != NULL;
        st->exact = ctx->exact;
        st->budget = ctx->wino_budget;
        kc_status bst = kc_dnnl_build(ctx, a, st, groups, kc_dnnl_conv_work(ctx, a, groups));
        if (bst != KC_OK) {
            kc_dnnl_conv_free(&st->base);
            return KC_OK; /* not handled: the GEMM path runs instead */
        }
        st->base.weights_cached = 1;
        for (int k = 0; k < st->n_parts; k++)
            st->base.weights_cached &= st->part[k].w.packed != NULL;
        *ctx->state = &st->base;
    }
    kc_dnnl_conv_io io = {ctx->in[0], kc_w(ctx, 0), a->use_bias ? kc_w(ctx, 1) : st->zero_bias,
                          ctx->out[0], NULL, NULL, ctx->spare, ctx->spare_bytes};
    /* an activation no post-op runs, by part where the parts are the
     * plain ones (a pooled, residual-after or own-depthwise part has its
     * own ending): EfficientNet's swish after each convolution was one
     * more parallel pass over the whole output, cut otherwise than the
     * convolution and read back from memory (EfficientNetB0 at batch 8:
     * 5.56-5.64 -> 5.49 ms an image) */
    int by_part = !st->act_fused && !a->pre_pool && !dw &&
                  kc_activation_elementwise(a->activation, ctx->keras_major);
    for (int k = 0; by_part && k < st->n_parts; k++)
        by_part = !st->part[k].own_dw && !st->part[k].add_after && !st->part[k].pool.prim;
    if (by_part) {
        io.act = a->activation;
        io.keras_major = ctx->keras_major;
    }
    if (dw) {
        io.dw_w = a->post_dw->weights[0].data;
        io.dw_b = dw->use_bias ? a->post_dw->weights[1].data : st->zero_bias;
    }
    KC_TRY(kc_dnnl_execute(st, &io));
    *handled = 1;
    *act_done = st->act_fused || io.act != NULL;
    return KC_OK;
}

int kc_dnnl_conv_parts(const kc_kernel_state *state)
{
    if (!state || state->free != kc_dnnl_conv_free)
        return 0;
    return ((const kc_dnnl_conv_state *)state)->n_parts;
}

/* Parts of state with the flag at byte offset `flag` of their part set. */
static int kc_dnnl_count_flag(const kc_kernel_state *state, size_t flag)
{
    if (!state || state->free != kc_dnnl_conv_free)
        return 0;
    const kc_dnnl_conv_state *st = (const kc_dnnl_conv_state *)state;
    int n = 0;
    for (int k = 0; k < st->n_parts; k++)
        n += *(const int *)((const char *)&st->part[k] + flag) != 0;
    return n;
}

int kc_dnnl_conv_wino_parts(const kc_kernel_state *state)
{
    return kc_dnnl_count_flag(state, offsetof(kc_dnnl_conv_part, wino));
}

const char *kc_dnnl_conv_impl(const kc_kernel_state *state, int part)
{
    if (!state || state->free != kc_dnnl_conv_free)
        return NULL;
    const kc_dnnl_conv_state *st = (const kc_dnnl_conv_state *)state;
    const_dnnl_primitive_desc_t pd = NULL;
    if (part < 0 || part >= st->n_parts || !st->part[part].prim.prim ||
        dnnl_primitive_get_primitive_desc(st->part[part].prim.prim, &pd) != dnnl_success)
        return NULL;
    return kc_dnnl_pd_impl(pd);
}

int kc_dnnl_conv_wino_f4_parts(const kc_kernel_state *state)
{
    return kc_dnnl_count_flag(state, offsetof(kc_dnnl_conv_part, wino_f4));
}

int kc_dnnl_conv_add_after_parts(const kc_kernel_state *state)
{
    return kc_dnnl_count_flag(state, offsetof(kc_dnnl_conv_part, add_after));
}

int kc_dnnl_conv_gather_parts(const kc_kernel_state *state)
{
    return kc_dnnl_count_flag(state, offsetof(kc_dnnl_conv_part, gather));
}

int kc_dnnl_conv_im2col_parts(const kc_kernel_state *state)
{
    return kc_dnnl_count_flag(state, offsetof(kc_dnnl_conv_part, im2col));
}

int kc_dnnl_conv_row_parts(const kc_kernel_state *state)
{
    if (!state || state->free != kc_dnnl_conv_free)
        return 0;
    return ((const kc_dnnl_conv_state *)state)->row_parts;
}

int kc_dnnl_conv_own_dw_parts(const kc_kernel_state *state)
{
    return kc_dnnl_count_flag(state, offsetof(kc_dnnl_conv_part, own_dw));
}

int kc_dnnl_conv_pool_fusable(const kc_conv_attrs *a, const kc_layer *pool, const kc_shape *in)
{
    const kc_pool_attrs *p = pool->attrs;
    int plain_1x1 = a->kind == KC_CONV_PLAIN && a->spatial == 2 && a->groups == 1 &&
                    !a->accumulate && !a->post_dw && a->padding != 2;
    for (int i = 0; plain_1x1 && i < 2; i++)
        plain_1x1 = a->kernel[i] == 1 && a->strides[i] == 1 && a->dilation[i] == 1 &&
                    !a->pad_before[i] && !a->pad_after[i];
    return kc_dnnl_ready() && plain_1x1 && kc_dnnl_act_fusable(a->activation) &&
           p->kind == KC_POOL_AVG && p->spatial == 2 && !p->global && p->padding == 1 &&
           p->strides[0] == 1 && p->strides[1] == 1 && in->rank == 4;
}

int kc_dnnl_conv_dw_row_parts(const kc_conv_attrs *a, const kc_layer *dw, const kc_shape *in,
                              const kc_shape *mid)
{
    if (!kc_dnnl_ready() || a->kind != KC_CONV_PLAIN || a->spatial != 2 || in->rank != 4 ||
        mid->rank != 4 || in->dims[0] != 1)
        return 0;
    kc_dnnl_window whole;
    kc_dnnl_window_of(in, mid, a, &whole);
    return kc_dnnl_row_parts(a, dw->attrs, &whole);
}

int kc_dnnl_conv_dw_fusable(const kc_conv_attrs *a, const kc_layer *dw, const kc_shape *in,
                            const kc_shape *mid)
{
    const kc_conv_attrs *d = dw->attrs;
    if (!kc_dnnl_ready() || a->kind != KC_CONV_PLAIN || a->spatial != 2 || a->groups != 1 ||
        a->accumulate || a->post_dw || !kc_dnnl_act_fusable(a->activation) ||
        !kc_dnnl_act_fusable(d->activation) || in->rank != 4 || mid->rank != 4 ||
        dw->n_weights < 1 + d->use_bias)
        return 0;
    for (int i = 0; i < 2; i++)
        if (a->kernel[i] != 1 || a->strides[i] != 1 || a->dilation[i] != 1 ||
            a->pad_before[i] || a->pad_after[i])
            return 0;
    kc_dnnl_conv_part part = {0};
    kc_dnnl_conv_state *st = kc_calloc(1, sizeof *st);
    if (!st)
        return 0;
    st->part = &part;
    /* judged on one image: the pair is built and run one image at a time */
    kc_dnnl_window whole, one;
    kc_dnnl_window_of(in, mid, a, &whole);
    const kc_dnnl_window *g = kc_dnnl_one_image(&whole, &st->part[0], &one);
    int fused = 0;
    dnnl_primitive_desc_t pd = NULL;
    if (kc_dnnl_descs(g, 1, a->kernel, st, &st->part[0]) == KC_OK) {
        dnnl_memory_desc_t w_any = st->w_md;
        w_any.format_kind = dnnl_format_kind_any;
        pd = kc_dnnl_fused_dw_pd(a, d, &st->part[0].src_md, &w_any, &st->b_md,
                                 &st->part[0].dst_md, g, &fused);
    }
    kc_error_clear();
    int ok = pd && fused;
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    free(st);
    return ok;
}

int kc_dnnl_conv_sum_direct(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out)
{
    if (a->spatial != 2 || in->rank != 4 || out->rank != 4)
        return 0;
    kc_dnnl_window g;
    kc_dnnl_window_of(in, out, a, &g);
    return a->accumulate && !kc_dnnl_add_after(a, &g) && kc_dnnl_wide_sum(a, &g, 1);
}

dnnl_primitive_desc_t kc_dnnl_conv_image_pd(const kc_conv_attrs *a, const kc_shape *in,
                                            const kc_shape *out)
{
    if (!kc_dnnl_ready() || a->kind != KC_CONV_PLAIN || a->spatial != 2 || a->groups != 1 ||
        a->post_dw || a->pre_pool || in->rank != 4 || out->rank != 4)
        return NULL;
    kc_dnnl_conv_part part = {0};
    kc_dnnl_conv_state *st = kc_calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->part = &part;
    st->has_bias = a->use_bias;
    kc_dnnl_window whole, one;
    kc_dnnl_window_of(in, out, a, &whole);
    const kc_dnnl_window *g = kc_dnnl_one_image(&whole, &part, &one);
    dnnl_primitive_desc_t pd = NULL;
    int fused = 0;
    dnnl_primitive_attr_t attr =
        kc_dnnl_descs(g, 1, a->kernel, st, &part) == KC_OK
            ? kc_dnnl_post_ops_attr(a->activation, a->accumulate, NULL, NULL, &fused)
            : NULL;
    dnnl_memory_desc_t w_any = st->w_md;
    w_any.format_kind = dnnl_format_kind_any;
    if (attr) {
        pd = kc_dnnl_direct_pd(a, st, &part, &w_any, g, attr, a->accumulate);
        dnnl_primitive_attr_destroy(attr);
    }
    kc_error_clear();
    free(st);
    return pd;
}
