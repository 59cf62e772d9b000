/* kerasc's own Winograd convolutions, 1-D and 2-D, on kerasc's own
 * products (kc_wino_simd's product, as wino_fly.c's; KC_WINO_OWN=0:
 * oneDNN's batched matmul).
 *
 * 1-D, F(m, r): the (1, 7) and (7, 1) layers that make up a quarter of
 * InceptionV3's work (and Conv1D, and other (1, r) / (r, 1) kernels),
 * which oneDNN 2.6 runs only as direct convolutions. Along the kernel's
 * axis the output is cut into tiles of m; each tile reads alpha = m + r - 1
 * inputs. For every tile and channel the input is transformed (bt · d,
 * alpha values), the alpha products with the transformed kernel (g · w,
 * made once at build) are alpha independent matrix products [tiles x C] ·
 * [C x F] (kc_w2_own_products, per block of tiles), and the output
 * transform (at · M) gives m outputs, then bias and activation. F(4, 7)
 * multiplies 10 times per 4 outputs where direct convolution multiplies
 * 28 times; on 17 outputs (5 tiles, 3 outputs wasted) that is 2.4x fewer.
 * One thread here, InceptionV3's 160 -> 160 (1, 7) layer on 17x17:
 * oneDNN's direct kernel 0.44 ms, the batched product of F(4, 7) 0.21 ms.
 *
 * 2-D, F(4x4, 3x3): the same with the transforms on both axes, 36
 * products per 4x4 tile (direct: 144). oneDNN 2.6 has this kernel too,
 * but its scratchpad holds a whole image's transformed tiles and is sized
 * from the CPU's caches: on this AMD EPYC 21 MB for one 71x71 image of
 * InceptionV3's 80 -> 192 layer, which then ran direct (its buffers do
 * not fit beside the activations). Here a block of tiles' buffers stay
 * under KC_WINO_BLOCK_BYTES. That layer at batch 1: 3.3 ms direct, 1.8
 * ms here; InceptionV3's 96 -> 96 layers on 35x35: 0.49-0.62 ms with
 * oneDNN's F(4x4), 0.29-0.31 here; ResNet50's 64 -> 64 layers on 56x56
 * (with the transforms unrolled) 0.30-0.41 with oneDNN's F(4x4),
 * 0.24-0.28 here (batch 1, 2 threads, alternating runs; 1 thread 0.63-0.71
 * against 0.50-0.66), and without oneDNN's 7 MB scratchpad per thread.
 * Below 64 channels oneDNN runs direct, and this kernel wins from 32:
 * InceptionV3's stem layers on 147x147 at batch 1, 32 -> 32 1.01 -> 0.86 ms, 32 -> 64 2.0 ->
 * 1.3 ms (oneDNN's own Winograd was 1.4-2x slower than direct on them).
 *
 * Rounding: 1-D, the points 0, 1, -1, 2, -2, 1/2, -1/2, 3, -1/3 (and
 * infinity) keep F(4, 7)'s error at about 23x that of a direct float32
 * sum (3e-6 of an output of unit scale, 160 channels; the other point
 * choices tried gave 24-46x), far inside the fidelity tolerance of 1e-4;
 * alpha stays at most 10. 2-D uses 0, 1, -1, 2, -2 (as oneDNN's F(4x4)).
 * --exact, KC_WINOGRAD=0, KC_WINO1D=0 / KC_WINO2D=0 keep other kernels.
 *
 * The tiles are cut into parts, one per thread, each part into blocks
 * whose transformed inputs and products stay within KC_WINO_BLOCK_BYTES
 * (or the transformed kernel's size, when larger), in the thread's
 * workspaces. The transforms and products are wino_simd.inc's, for
 * AVX-512 or AVX2 (with the loops over the tile unrolled, the values stay
 * in registers: without, they took half the 2-D layers' time); without
 * either the layer runs on oneDNN's kernels. */
#include "kernels/wino.h"
#include "kernels/wino_tx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/balance.h"
#include "base/env.h"
#include "base/mem.h"
#include "base/threads.h"
#include "kernels/dnnl_common.h"
#include "ops/conv.h"

#define KC_WINO_MAX_PARTS 8
#define KC_WINO1D_MIN_CHANNELS 32
#define KC_WINO1D_ALPHA_MAX 10
#define KC_WINO1D_MIN_PIXELS 100
#define KC_WINO2D_MIN_CHANNELS 32
/* The transformed kernel is 4x the 3x3 one: on few outputs per image
 * it costs more memory than it saves time (the 2-D rule of dnnl_conv.c).
 * ResNet50's 128 -> 128 layers on 28x28 (784 outputs): 0.44-0.50 ms with
 * oneDNN's F(4x4), 0.35-0.42 here, at batch 1. */
#define KC_WINO2D_MIN_PIXELS 512
/* A block's transformed inputs and products: within one core's L2 ... */
#define KC_WINO_BLOCK_BYTES ((int64_t)768 << 10)
/* ... unless the transformed kernel is larger (kc_w1_plan). */
#define KC_WINO_BLOCK_MAX_BYTES ((int64_t)4 << 20)
/* Tiles below which a layer runs as one part on the calling thread. */
#define KC_WINO_PART_MIN_TILES 16

typedef struct kc_w1_part {
    kc_dnnl_prim prim;              /* the batched product, one block */
} kc_w1_part;

typedef struct kc_w1_state {
    kc_kernel_state base;
    kc_shape in_shape;
    int dims;                       /* 1: along one axis; 2: F(m x m, r x r) */
    int m, r, alpha;
    int prods;                      /* products per tile: alpha, or alpha^2 */
    int64_t c, f;                   /* input and output channels */
    kc_wino2d_grid grid;            /* 2-D: images, sizes, pad, tiles */
    int64_t outer, inner;           /* lines: outer x inner, each along the axis */
    int64_t len_in, len_out, pad;   /* along the axis */
    int64_t tiles_per_line, tiles, block;
    float at[KC_WINO_MAX_ALPHA * KC_WINO_MAX_ALPHA];
    float bt[KC_WINO_MAX_ALPHA * KC_WINO_MAX_ALPHA];
    float *packed;                  /* g · w in the product's layout */
    int act;                        /* 0 linear, 1 relu, 2 relu6, 3 the caller's */
    const kc_wino_simd *simd;       /* the transforms and products for this CPU */
    /* own: the products by kc_wino_simd's rather than oneDNN's batched
     * matmul (kc_w2_own); packed is then [prods][groups][c][16 * width
     * of the group], the output vectors in groups of up to three. */
    int own;
    int fetch_rows;                 /* the input transform fetches ahead (kc_wino2d_fetch_rows_wanted) */
    int64_t vecs, groups;           /* own: output vectors of 16, their groups */
    int64_t mf;                     /* a product row's floats: f, or vecs * 16 (own) */
    size_t v_bytes, m_bytes;
    kc_wino_budget *budget;
    size_t paid;
    kc_balance cut;                 /* parts (cut.parts): runs of tiles, one per thread */
    kc_w1_part part[KC_WINO_MAX_PARTS];
} kc_w1_state;

/* ------------------------------------------------------------ transforms */

/* The interpolation points: the first alpha - 1 of these, then infinity. */
static const double kc_w1_points[KC_WINO_MAX_ALPHA - 1] = {
    0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -1.0 / 3.0, -3.0, 1.0 / 3.0};

/* inv = v^-1 (n x n, row-major) by Gauss-Jordan with partial pivoting;
 * 0 on success. */
static int kc_w1_invert(const double *v, int n, double *inv)
{
    double a[KC_WINO_MAX_ALPHA][2 * KC_WINO_MAX_ALPHA];
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 2 * n; j++)
            a[i][j] = j < n ? v[i * n + j] : (j - n == i);
    for (int col = 0; col < n; col++) {
        int piv = col;
        for (int i = col + 1; i < n; i++)
            if (fabs(a[i][col]) > fabs(a[piv][col]))
                piv = i;
        if (fabs(a[piv][col]) < 1e-12)
            return 1;
        for (int j = 0; j < 2 * n; j++) {
            double t = a[col][j];
            a[col][j] = a[piv][j];
            a[piv][j] = t;
        }
        double d = a[col][col];
        for (int j = 0; j < 2 * n; j++)
            a[col][j] /= d;
        for (int i = 0; i < n; i++)
            if (i != col && a[i][col] != 0.0) {
                double k = a[i][col];
                for (int j = 0; j < 2 * n; j++)
                    a[i][j] -= k * a[col][j];
            }
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            inv[i * n + j] = a[i][n + j];
    return 0;
}

/* Toom-Cook by the transposition principle: the linear convolution of an
 * r-long kernel with an m-long signal is evaluation at alpha points (the
 * kernel: g, the signal: at's transpose), a pointwise product, and
 * interpolation (the inverse of the alpha-point evaluation matrix); the
 * correlation a convolution layer computes is its transpose, so bt is
 * that inverse transposed. Infinity evaluates a polynomial's leading
 * coefficient. */
int kc_wino_transforms(int m, int r, double *at, double *g, double *bt)
{
    int alpha = m + r - 1;
    if (m < 1 || r < 1 || alpha > KC_WINO_MAX_ALPHA || alpha < 2)
        return 1;
    double v[KC_WINO_MAX_ALPHA * KC_WINO_MAX_ALPHA] = {0};
    double inv[KC_WINO_MAX_ALPHA * KC_WINO_MAX_ALPHA];
    for (int j = 0; j < alpha; j++) {
        int inf = j == alpha - 1;
        double p = inf ? 0.0 : kc_w1_points[j], pw = 1.0;
        for (int i = 0; i < alpha; i++, pw *= p)
            v[j * alpha + i] = inf ? (i == alpha - 1) : pw;
        pw = 1.0;
        for (int i = 0; i < m; i++, pw *= p)
            at[i * alpha + j] = inf ? (i == m - 1) : pw;
        pw = 1.0;
        for (int k = 0; k < r; k++, pw *= p)
            g[j * r + k] = inf ? (k == r - 1) : pw;
    }
    if (kc_w1_invert(v, alpha, inv))
        return 1;
    for (int i = 0; i < alpha; i++)
        for (int j = 0; j < alpha; j++)
            bt[i * alpha + j] = inv[j * alpha + i];
    return 0;
}

/* The output tile for a kernel of r along an axis of len outputs: the one
 * with the fewest multiplications per line (alpha x tiles), alpha at most
 * KC_WINO1D_ALPHA_MAX; 0 when none saves at least 30% of direct. */
static int kc_w1_pick_tile(int r, int64_t len)
{
    int best = 0;
    int64_t best_cost = 0;
    /* the larger tiles' error grows fast: F(8, 3) measured 27-43x a
     * direct sum's, F(6, 3) 5x, F(4, 7) 23x (this file's header) */
    int m_max = r == 3 ? 6 : 4;
    for (int m = 2; m <= m_max && m + r - 1 <= KC_WINO1D_ALPHA_MAX; m++) {
        int64_t cost = (int64_t)(m + r - 1) * ((len + m - 1) / m);
        if (!best || cost < best_cost) {
            best = m;
            best_cost = cost;
        }
    }
    return best && best_cost * 10 <= 7 * (int64_t)r * len ? best : 0;
}

/* ------------------------------------------------------------ eligibility */

int kc_wino_plain(const kc_exec_ctx *ctx, const kc_conv_attrs *a)
{
    int rank = a->spatial + 2;
    return a->kind == KC_CONV_PLAIN && a->groups == 1 && !a->accumulate && !a->post_dw &&
           !a->pre_pool && ctx->in_shape[0].rank == rank && ctx->out_shape[0].rank == rank;
}

int kc_wino_act(const char *act)
{
    if (!act || !strcmp(act, "linear"))
        return 0;
    if (!strcmp(act, "relu"))
        return 1;
    return !strcmp(act, "relu6") ? 2 : 3;
}

/* The layer's geometry as lines along its kernel's axis, into st; 0 when
 * the layer does not qualify (see wino.h). */
static int kc_w1_geometry(const kc_exec_ctx *ctx, const kc_conv_attrs *a, kc_w1_state *st)
{
    const kc_shape *in = &ctx->in_shape[0], *out = &ctx->out_shape[0];
    int sp = a->spatial;
    if (kc_env_off("KC_WINO1D") || !kc_wino_plain(ctx, a) || (sp != 1 && sp != 2))
        return 0;
    int axis = -1; /* the spatial axis the kernel spans */
    for (int i = 0; i < sp; i++) {
        if (a->strides[i] != 1 || a->dilation[i] != 1 || a->pad_before[i] || a->pad_after[i])
            return 0;
        if (a->kernel[i] != 1) {
            if (axis >= 0)
                return 0;
            axis = i;
        }
    }
    if (axis < 0 || a->kernel[axis] < 3 || a->kernel[axis] > 7)
        return 0;
    st->r = (int)a->kernel[axis];
    st->c = in->dims[in->rank - 1];
    st->f = out->dims[out->rank - 1];
    if (st->c < KC_WINO1D_MIN_CHANNELS || st->f < KC_WINO1D_MIN_CHANNELS)
        return 0;
    for (int i = 0; i < sp; i++)
        if (i != axis && in->dims[1 + i] != out->dims[1 + i])
            return 0;
    /* Few outputs in an image: the transformed kernel (alpha / r times
     * the bytes) is read whole for every image's few tiles, from memory at
     * batch 1 (InceptionV3's (1, 3) layers on 8x8, 384 -> 384: 2.5x slower
     * than direct), as for the 2-D Winograd kernels (dnnl_conv.c). */
    int64_t pixels = 1;
    for (int i = 0; i < sp; i++)
        pixels *= out->dims[1 + i];
    if (pixels < KC_WINO1D_MIN_PIXELS)
        return 0;
    st->len_in = in->dims[1 + axis];
    st->len_out = out->dims[1 + axis];
    st->outer = in->dims[0] * (sp == 2 && axis == 1 ? in->dims[1] : 1);
    st->inner = sp == 2 && axis == 0 ? in->dims[2] : 1;
    st->pad = kc_conv_pad_before(st->len_in, st->len_out, st->r, 1, a->padding);
    if (st->len_out != (a->padding == 0 ? st->len_in - st->r + 1 : st->len_in) ||
        st->len_out < 1)
        return 0;
    st->m = kc_w1_pick_tile(st->r, st->len_out);
    if (!st->m)
        return 0;
    st->dims = 1;
    st->alpha = st->m + st->r - 1;
    st->prods = st->alpha;
    st->tiles_per_line = (st->len_out + st->m - 1) / st->m;
    st->tiles = st->outer * st->inner * st->tiles_per_line;
    st->act = kc_wino_act(a->activation);
    return 1;
}

/* F(4x4, 3x3) on a 3x3, F(2x2, 5x5) on a 5x5 stride-1 Conv2D whose images
 * have at least KC_WINO2D_MIN_PIXELS outputs and at least
 * KC_WINO2D_MIN_CHANNELS input and output channels; into st, 0 when the
 * layer does not qualify. Both have alpha = 6 and the same points, so the
 * same input transform. */
static int kc_w2_geometry(const kc_exec_ctx *ctx, const kc_conv_attrs *a, kc_w1_state *st)
{
    const kc_shape *in = &ctx->in_shape[0], *out = &ctx->out_shape[0];
    if (kc_env_off("KC_WINO2D") || !kc_wino_plain(ctx, a) || a->spatial != 2 || a->padding == 2)
        return 0;
    for (int i = 0; i < 2; i++)
        if (a->kernel[i] != a->kernel[0] || a->strides[i] != 1 || a->dilation[i] != 1 ||
            a->pad_before[i] || a->pad_after[i])
            return 0;
    st->c = in->dims[3];
    st->f = out->dims[3];
    int r = (int)a->kernel[0];
    if (st->c < KC_WINO2D_MIN_CHANNELS || st->f < KC_WINO2D_MIN_CHANNELS ||
        out->dims[1] * out->dims[2] < KC_WINO2D_MIN_PIXELS || (r != 3 && r != 5))
        return 0;
    st->m = r == 3 ? 4 : 2; /* alpha 6 either way: F(4x4, 3x3), F(2x2, 5x5) */
    if (!kc_wino2d_grid_init(&st->grid, in, out, r, a->padding, st->m))
        return 0;
    st->dims = 2;
    st->r = r;
    st->alpha = 6;
    st->prods = 36;
    st->tiles = st->grid.tiles;
    st->act = kc_wino_act(a->activation);
    return 1;
}

int kc_wino2d_grid_init(kc_wino2d_grid *g, const kc_shape *in, const kc_shape *out, int r,
                        int padding, int m)
{
    g->n = in->dims[0];
    g->h_in = in->dims[1];
    g->w_in = in->dims[2];
    g->h_out = out->dims[1];
    g->w_out = out->dims[2];
    int64_t shrink = padding == 0 ? r - 1 : 0;
    if (padding == 2 || g->h_out != g->h_in - shrink || g->w_out != g->w_in - shrink ||
        g->h_out < 1 || g->w_out < 1)
        return 0;
    g->pad = padding == 1 ? (r - 1) / 2 : 0; /* "same", odd r, stride 1: even */
    g->tiles_h = (g->h_out + m - 1) / m;
    g->tiles_w = (g->w_out + m - 1) / m;
    g->tiles = g->n * g->tiles_h * g->tiles_w;
    return 1;
}

/* ------------------------------------------------------------ build */

static void kc_w1_free(kc_kernel_state *s)
{
    kc_w1_state *st = (kc_w1_state *)s;
    if (st->budget && st->budget->left != SIZE_MAX)
        st->budget->left += st->paid;
    for (int k = 0; k < st->cut.parts; k++)
        kc_dnnl_prim_destroy(&st->part[k].prim);
    kc_free_weights(st->packed);
    free(st);
}

/* Whether the 2-D transforms' zeros (at: m x alpha, bt: alpha x alpha)
 * are where the unrolled loops skip them. */
static int kc_w2_zeros_ok(const float *at, const float *bt, int m, int alpha)
{
    for (int i = 0; i < alpha * alpha; i++)
        if ((bt[i] != 0.0f) != kc_wino2d_bt_nz(alpha, i / alpha, i % alpha) ||
            (i < m * alpha && (at[i] != 0.0f) != kc_wino2d_at_nz(i / alpha, m, alpha, i % alpha)))
            return 0;
    return 1;
}

/* The transforms in float; 1 when they cannot be made, or (2-D) when
 * their zeros are not where the 2-D transforms skip them. */
static int kc_w1_set_transforms(kc_w1_state *st, double *g)
{
    double at[KC_WINO_MAX_ALPHA * KC_WINO_MAX_ALPHA], bt[KC_WINO_MAX_ALPHA * KC_WINO_MAX_ALPHA];
    if (kc_wino_transforms(st->m, st->r, at, g, bt))
        return 1;
    for (int i = 0; i < st->m * st->alpha; i++)
        st->at[i] = (float)at[i];
    for (int i = 0; i < st->alpha * st->alpha; i++)
        st->bt[i] = (float)bt[i];
    return st->dims == 2 && !kc_w2_zeros_ok(st->at, st->bt, st->m, st->alpha);
}

int kc_wino2d_f3(int m, float *at, float *bt, float *g)
{
    double at_d[KC_WINO_MAX_ALPHA * KC_WINO_MAX_ALPHA], bt_d[KC_WINO_MAX_ALPHA * KC_WINO_MAX_ALPHA],
        g_d[KC_WINO_MAX_ALPHA * KC_WINO_MAX_ALPHA];
    int alpha = m + 2;
    if ((m != 2 && m != 4) || kc_wino_transforms(m, 3, at_d, g_d, bt_d))
        return 1;
    for (int i = 0; i < alpha * alpha; i++)
        bt[i] = (float)bt_d[i];
    for (int i = 0; i < m * alpha; i++)
        at[i] = (float)at_d[i];
    for (int i = 0; i < alpha * 3; i++) {
        g[i] = (float)g_d[i];
        if ((g[i] != 0.0f) != kc_wino2d_g_nz(alpha, i / 3, i % 3))
            return 1;
    }
    return !kc_w2_zeros_ok(at, bt, m, alpha);
}

/* The batched product for blocks of st->block tiles: [alpha, block, C] x
 * [alpha, C, F] -> [alpha, block, F], on the calling thread alone; its
 * weights layout into *w_md. */
static kc_status kc_w1_prim(const kc_w1_state *st, kc_dnnl_prim *p, dnnl_memory_desc_t *w_md)
{
    dnnl_dims_t sd = {st->prods, st->block, st->c}, wd = {st->prods, st->c, st->f},
                dd = {st->prods, st->block, st->f};
    dnnl_memory_desc_t s_md, d_md;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_t attr = kc_dnnl_attr_new();
    int prev = kc_dnnl_solo_enter(1);
    int bad = !attr || dnnl_memory_desc_init_by_tag(&s_md, 3, sd, dnnl_f32, dnnl_abc) ||
              dnnl_memory_desc_init_by_tag(w_md, 3, wd, dnnl_f32, dnnl_format_tag_any) ||
              dnnl_memory_desc_init_by_tag(&d_md, 3, dd, dnnl_f32, dnnl_abc) ||
              dnnl_matmul_desc_init(&desc, &s_md, w_md, NULL, &d_md) ||
              dnnl_primitive_desc_create(&pd, &desc, attr, kc_dnnl_engine(), NULL);
    kc_dnnl_solo_leave(1, prev);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (bad)
        return kc_fail(KC_ERR_UNSUPPORTED, "oneDNN has no batched matmul for Winograd");
    *w_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    static const int args[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
    const dnnl_memory_desc_t *mds[3] = {&s_md, w_md, &d_md};
    kc_status s = kc_dnnl_prim_init(p, pd, 3, args, mds);
    dnnl_primitive_desc_destroy(pd);
    p->solo = 1;
    return s;
}

/* Output vectors lo .. hi-1 of group g (kc_w2_own): the vectors evened
 * out over the groups (8 vectors: 3, 3, 2). */
static void kc_w2_group(const kc_w1_state *st, int64_t g, int64_t *lo, int64_t *hi)
{
    *lo = st->vecs * g / st->groups;
    *hi = st->vecs * (g + 1) / st->groups;
}

/* The transformed kernel u ([prods][C][F]) into st->packed in the own
 * products' layout, zero past F. In the weights heap, as kc_dnnl_pack's
 * (kc_calloc_weights). */
static kc_status kc_w2_own_pack(kc_w1_state *st, const float *u)
{
    int64_t cf = st->c * st->f, width_all = st->vecs * 16;
    st->packed = kc_calloc_weights((size_t)(st->prods * st->c * width_all), sizeof *st->packed);
    if (!st->packed)
        return KC_ERR_NOMEM;
    float *dst = st->packed;
    for (int p = 0; p < st->prods; p++)
        for (int64_t g = 0; g < st->groups; g++) {
            int64_t lo, hi;
            kc_w2_group(st, g, &lo, &hi);
            for (int64_t ci = 0; ci < st->c; ci++)
                for (int64_t fo = lo * 16; fo < hi * 16; fo++)
                    *dst++ = fo < st->f ? u[p * cf + ci * st->f + fo] : 0.0f;
        }
    return KC_OK;
}

/* g · w for every alpha point, [alpha][C][F] (2-D: g · w · g' for every
 * pair of points, [alpha^2][C][F]), packed into the product's layout w_md. */
static kc_status kc_w1_pack_kernel(const kc_exec_ctx *ctx, kc_w1_state *st, const double *g,
                                   const dnnl_memory_desc_t *w_md)
{
    const float *w = kc_w(ctx, 0); /* (k..., C, F): hwio */
    int64_t cf = st->c * st->f;
    float *u = kc_alloc_array((size_t)(st->prods * cf), sizeof *u); /* written whole below */
    if (!u)
        return KC_ERR_NOMEM;
    for (int p = 0; p < st->prods; p++) {
        int xi = st->dims == 2 ? p / st->alpha : p, eta = st->dims == 2 ? p % st->alpha : 0;
        for (int64_t i = 0; i < cf; i++) {
            double sum = 0.0;
            if (st->dims == 1)
                for (int k = 0; k < st->r; k++)
                    sum += g[xi * st->r + k] * (double)w[k * cf + i];
            else
                for (int k = 0; k < st->r; k++)
                    for (int l = 0; l < st->r; l++)
                        sum += g[xi * st->r + k] * g[eta * st->r + l] *
                               (double)w[(k * st->r + l) * cf + i];
            u[p * cf + i] = (float)sum;
        }
    }
    if (st->own) {
        kc_status s = kc_w2_own_pack(st, u);
        kc_mem_free_pages(u, (size_t)(st->prods * cf) * sizeof *u);
        return s;
    }
    dnnl_dims_t wd = {st->prods, st->c, st->f};
    dnnl_memory_desc_t plain;
    kc_status s = dnnl_memory_desc_init_by_tag(&plain, 3, wd, dnnl_f32, dnnl_abc)
                      ? kc_fail(KC_ERR_UNSUPPORTED, "oneDNN refused a weights layout")
                      : kc_dnnl_pack(&plain, w_md, u, ctx->spare, ctx->spare_bytes, &st->packed);
    kc_mem_free_pages(u, (size_t)(st->prods * cf) * sizeof *u); /* no resident hole */
    return s;
}

/* Whether the transformed kernel's extra bytes fit the session's
 * Winograd budget; paid from it when they do. */
static int kc_w1_pay(kc_w1_state *st, size_t kernel_bytes)
{
    int64_t taps = st->dims == 2 ? st->r * st->r : st->r;
    size_t keras = (size_t)(taps * st->c * st->f) * sizeof(float);
    size_t cost = kernel_bytes > keras ? kernel_bytes - keras : 0;
    if (!st->budget || st->budget->left == SIZE_MAX)
        return 1;
    if (cost > st->budget->left)
        return 0;
    st->budget->left -= cost;
    st->paid = cost;
    return 1;
}

/* The distance between two of the products' rows of a block's
 * transformed inputs (v) and of its products (mt), in floats: for the own
 * products one cache line more than a block's floats (kc_wino2d_ld; one
 * thread, 40 tiles of 64 channels, ResNet50's 56x56 layers: the input
 * transforms 13.8 -> 12.0 us a block, the output ones 9.2 -> 7.7 us).
 * oneDNN's batched product (KC_WINO_OWN=0) reads dense rows. */
static int64_t kc_w1_ld(const kc_w1_state *st, int64_t floats)
{
    return st->own ? kc_wino2d_ld(floats) : floats;
}
static int64_t kc_w1_ldv(const kc_w1_state *st) { return kc_w1_ld(st, st->block * st->c); }
static int64_t kc_w1_ldm(const kc_w1_state *st) { return kc_w1_ld(st, st->block * st->mf); }

/* Parts (one per thread, their runs of tiles cut where the threads'
 * measured speeds even their times) and the largest block.
 *
 * Why the cut moves: on the shared 2-vCPU machines of bench/results one
 * vCPU runs 10-30% slower than the other for the life of a process
 * (base/balance.h). Cut evenly, ResNet50's seven layers here at batch 1
 * waited on the slow one: their parts took 270 and 340 us, 265 and 356,
 * 253 and 352, 316 and 289 (means over 700 calls, four processes), the
 * calls 366, 367, 357 and 334 us; with the cut moving, the parts 309 and
 * 306 us, 318 and 319, 295 and 304, 326 and 327, the calls 327, 360, 328
 * and 348 (the 2-core Zen 5 of bench/results, 12-06; whole runs within
 * their noise). A tile's sums do not depend on the part or block that
 * runs it: the outputs keep their bits wherever the cut falls. */
static void kc_w1_plan(kc_w1_state *st)
{
    int threads = kc_threads_max();
    int64_t n = st->tiles / KC_WINO_PART_MIN_TILES;
    if (n > threads)
        n = threads;
    if (n > KC_WINO_MAX_PARTS)
        n = KC_WINO_MAX_PARTS;
    if (n < 1)
        n = 1;
    kc_balance_init(&st->cut, st->tiles, (int)n, KC_WINO_PART_MIN_TILES / 2);
    int64_t per = (st->tiles + st->cut.parts - 1) / st->cut.parts;
    /* Each block reads the whole transformed kernel: where it outweighs
     * the L2-sized block, blocks as large as it (up to
     * KC_WINO_BLOCK_MAX_BYTES, from the shared cache) read it fewer times.
     * ResNet50's 128 -> 128 layers on 28x28 at batch 1 (49 tiles, a 2.4
     * MB kernel): 3 blocks -> 1, 0.45-0.58 -> 0.37-0.51 ms in alternating
     * runs, 0.4 MB more peak RSS. */
    int64_t tile_bytes = (int64_t)st->prods * (st->c + st->f) * (int64_t)sizeof(float);
    int64_t kernel_bytes = (int64_t)st->prods * st->c * st->f * (int64_t)sizeof(float);
    int64_t limit = KC_WINO_BLOCK_BYTES;
    if (kernel_bytes > limit)
        limit = kernel_bytes < KC_WINO_BLOCK_MAX_BYTES ? kernel_bytes : KC_WINO_BLOCK_MAX_BYTES;
    int64_t max_block = limit / tile_bytes;
    if (max_block < 8)
        max_block = 8;
    int64_t blocks = (per + max_block - 1) / max_block;
    int64_t even = (per + blocks - 1) / blocks;
    /* room for a part up to a quarter over its even share in as many
     * blocks (a 28x28 image's part of 25 tiles, one block, up to 31):
     * one more block would read the transformed kernel once more */
    st->block = even + even / 4;
    if (st->block > max_block) /* even <= max_block */
        st->block = max_block;
    if (st->block > st->tiles)
        st->block = st->tiles;
    st->v_bytes = kc_dnnl_align64((size_t)(st->prods * kc_w1_ldv(st)) * sizeof(float));
    st->m_bytes = kc_dnnl_align64((size_t)(st->prods * kc_w1_ldm(st)) * sizeof(float));
}

static kc_status kc_w1_build(const kc_exec_ctx *ctx, kc_w1_state *st)
{
    double g[KC_WINO_MAX_ALPHA * KC_WINO_MAX_ALPHA];
    if (kc_w1_set_transforms(st, g))
        return kc_fail(KC_ERR_UNSUPPORTED, "no Winograd transform F(%d, %d)", st->m, st->r);
    st->own = !kc_env_off("KC_WINO_OWN");
    st->fetch_rows = kc_wino2d_fetch_rows_wanted();
    st->vecs = (st->f + 15) / 16;
    st->groups = (st->vecs + KC_WINO2D_NV - 1) / KC_WINO2D_NV;
    st->mf = st->own ? st->vecs * 16 : st->f;
    kc_w1_plan(st);
    if (st->own) {
        size_t bytes = (size_t)(st->prods * st->c * st->vecs * 16) * sizeof(float);
        if (!kc_w1_pay(st, bytes))
            return kc_fail(KC_ERR_LIMIT, "the Winograd memory budget is spent");
        return kc_w1_pack_kernel(ctx, st, g, NULL);
    }
    dnnl_memory_desc_t w_md;
    for (int k = 0; k < st->cut.parts; k++)
        KC_TRY(kc_w1_prim(st, &st->part[k].prim, &w_md));
    if (!kc_w1_pay(st, dnnl_memory_desc_get_size(&w_md)))
        return kc_fail(KC_ERR_LIMIT, "the Winograd memory budget is spent");
    KC_TRY(kc_w1_pack_kernel(ctx, st, g, &w_md));
    return st->cut.parts > 1 ? kc_dnnl_lanes(st->cut.parts) : KC_OK;
}

/* ------------------------------------------------------------ run */

/* Tile t's line (outer index o, inner index i) and position j on it. */
static void kc_w1_tile_at(const kc_w1_state *st, int64_t t, int64_t *o, int64_t *j, int64_t *i)
{
    *i = t % st->inner;
    int64_t rest = t / st->inner;
    *j = rest % st->tiles_per_line;
    *o = rest / st->tiles_per_line;
}

/* Tile t's alpha input cells d[xi], NULL where it reads padding. */
static void kc_w1_cells(const kc_w1_state *st, const float *in, int64_t t, const float **d)
{
    int64_t o, j, i;
    kc_w1_tile_at(st, t, &o, &j, &i);
    for (int xi = 0; xi < st->alpha; xi++) {
        int64_t p = j * st->m - st->pad + xi;
        d[xi] = p >= 0 && p < st->len_in ? in + ((o * st->len_in + p) * st->inner + i) * st->c
                                         : NULL;
    }
}

/* Tile t's output cells y[q], q < the count returned (the last tile of a
 * line may have fewer than m). */
static int kc_w1_dests(const kc_w1_state *st, float *out, int64_t t, float **y)
{
    int64_t o, j, i;
    kc_w1_tile_at(st, t, &o, &j, &i);
    int valid = 0;
    for (; valid < st->m && j * st->m + valid < st->len_out; valid++)
        y[valid] = out + ((o * st->len_out + j * st->m + valid) * st->inner + i) * st->f;
    return valid;
}

/* 2-D tile t's image and top-left output. */
static void kc_w2_tile_at(const kc_wino2d_grid *g, int m, int64_t t, int64_t *img, int64_t *oy,
                          int64_t *ox)
{
    *ox = (t % g->tiles_w) * m;
    int64_t rest = t / g->tiles_w;
    *oy = (rest % g->tiles_h) * m;
    *img = rest / g->tiles_h;
}

void kc_wino2d_cells(const kc_wino2d_grid *g, int m, int alpha, int64_t c, const float *in,
                     int64_t t, const float **d)
{
    int64_t img, oy, ox;
    kc_w2_tile_at(g, m, t, &img, &oy, &ox);
    for (int i = 0; i < alpha; i++)
        for (int j = 0; j < alpha; j++) {
            int64_t y = oy - g->pad + i, x = ox - g->pad + j;
            d[i * alpha + j] = y >= 0 && y < g->h_in && x >= 0 && x < g->w_in
                               ? in + ((img * g->h_in + y) * g->w_in + x) * c
                               : NULL;
        }
}

void kc_wino2d_dests(const kc_wino2d_grid *g, int m, int64_t f, float *out, int64_t t, float **y,
                     int *vh, int *vw)
{
    int64_t img, oy, ox;
    kc_w2_tile_at(g, m, t, &img, &oy, &ox);
    *vh = g->h_out - oy < m ? (int)(g->h_out - oy) : m;
    *vw = g->w_out - ox < m ? (int)(g->w_out - ox) : m;
    for (int p = 0; p < *vh; p++)
        for (int q = 0; q < *vw; q++)
            y[p * 4 + q] = out + ((img * g->h_out + oy + p) * g->w_out + ox + q) * f;
}

/* Tiles lo .. lo+n-1 transformed into the block's rows of v. */
static void kc_w_inputs(const kc_w1_state *st, const float *in, int64_t lo, int64_t n, float *v)
{
    int64_t ldv = kc_w1_ldv(st);
    for (int64_t b = 0; b < n; b++) {
        const float *d[36];
        if (st->dims == 2) {
            kc_wino2d_cells(&st->grid, st->m, 6, st->c, in, lo + b, d);
            st->simd->in2d(6, st->bt, st->c, d, v + b * st->c, ldv, st->fetch_rows);
        } else {
            kc_w1_cells(st, in, lo + b, d);
            st->simd->in1d(st->alpha, st->bt, st->c, d, v + b * st->c, ldv);
        }
    }
    /* a short last block: its unused rows enter oneDNN's product; zero
     * them (the own products take the n tiles alone) */
    for (int p = 0; p < st->prods && n < st->block && !st->own; p++)
        memset(v + p * ldv + n * st->c, 0, (size_t)((st->block - n) * st->c) * sizeof *v);
}

/* The products of tiles lo .. lo+n-1 transformed back into the output. */
static void kc_w_outputs(const kc_w1_state *st, const float *mt, int64_t lo, int64_t n,
                         const float *bias, float *out)
{
    int64_t ldm = kc_w1_ldm(st);
    for (int64_t b = 0; b < n; b++) {
        float *y[16];
        if (st->dims == 2) {
            int vh, vw;
            kc_wino2d_dests(&st->grid, st->m, st->f, out, lo + b, y, &vh, &vw);
            st->simd->out2d(st->m, st->alpha, st->at, st->f, mt + b * st->mf, ldm, bias, st->act,
                            y, vh, vw);
        } else {
            int valid = kc_w1_dests(st, out, lo + b, y);
            st->simd->out1d(st->m, st->alpha, st->at, st->f, mt + b * st->mf, ldm, bias, st->act,
                            y, valid);
        }
    }
}

typedef struct kc_w1_io {
    const kc_w1_state *st;
    const float *in, *bias;
    float *out;
    kc_status status[KC_WINO_MAX_PARTS];
} kc_w1_io;

/* The products of a block of n tiles (own): for each point, each group
 * of output vectors; the next piece of the transformed kernel (or, with
 * `more` blocks to come, the first) fetched into L2 along the way.
 *
 * Why not oneDNN's batched matmul: on two threads each thread reads the
 * whole transformed kernel (2.4 MB for 128 -> 128), from memory in a
 * model larger than the caches, and oneDNN's product waited on it
 * (single-thread 86% of this kernel's speed, on two threads 20% more
 * time a thread). ResNet50 at batch 1 on two threads, `--stats` of five
 * alternating runs: its seven such layers (56x56 and 28x28) 1.65 -> 1.44
 * ms, the run 16.1 -> 15.6 ms; batch 8 13.9 -> 13.6 ms, InceptionV3 at
 * batch 1 20.1 -> 19.8 ms (medians of 3-5). The 1-D layers (InceptionV3's
 * (1, 7) and (7, 1), alpha 10) took oneDNN's until 12-05; on the Zen 4
 * here they give the same bits (each product a chain over C in order, as
 * oneDNN's brg matmul), InceptionV3 batch 1 0.978 of the time (8
 * alternating pairs, each faster), batch 8 level (1.001), and 252 of its
 * 488 allocations an inference at batch 1 (1416 of 2232 at batch 8) go:
 * each oneDNN execution allocates. KC_WINO_OWN=0: oneDNN's. */
static void kc_w2_own_products(const kc_w1_state *st, const float *v, float *mt, int64_t n,
                               int more)
{
    int64_t ldv = kc_w1_ldv(st), ldm = kc_w1_ldm(st);
    const float *b = st->packed, *end = st->packed + st->prods * st->c * st->vecs * 16;
    for (int p = 0; p < st->prods; p++)
        for (int64_t g = 0; g < st->groups; g++) {
            int64_t lo, hi;
            kc_w2_group(st, g, &lo, &hi);
            int nv = (int)(hi - lo);
            const float *next = b + st->c * nv * 16;
            kc_wino2d_lines fetch = {NULL, 0};
            if (next < end || more) {
                int64_t glo, ghi; /* the next piece's group */
                kc_w2_group(st, g + 1 < st->groups ? g + 1 : 0, &glo, &ghi);
                fetch.at = (const char *)(next < end ? next : st->packed);
                fetch.n = st->c * (ghi - glo) * 16 * (int64_t)sizeof(float) / 64;
            }
            /* no rows fetched ahead (kc_wino_simd's product): here a call's
             * kernel rows span all input channels (up to 36 KB for 192),
             * which stay in L1 across its blocks, and the fetched input
             * rows evicted them: ResNet50 at batch 1 1.019x the time (8 of
             * 8 alternating runs slower), InceptionV3 1.047x; wino_fly.c's
             * pieces of 64 channels (12 KB) leave room */
            st->simd->product(v + p * ldv, st->c, b, st->c, mt + p * ldm + lo * 16, st->mf, n,
                              nv, 1, fetch, 0, NULL);
            b = next;
        }
}

/* Blocks a part of `tiles` tiles runs in: as few as st->block allows,
 * evened out. */
static int64_t kc_w1_part_blocks(const kc_w1_state *st, int64_t tiles)
{
    return (tiles + st->block - 1) / st->block;
}

/* Part `lane`'s run of tiles, block by block. */
static kc_status kc_w1_run_part(const kc_w1_state *st, kc_w1_part *pt, int lane,
                                const kc_w1_io *io)
{
    float *v = kc_dnnl_workspace(KC_DNNL_SLOT_SRC, st->v_bytes);
    float *mt = kc_dnnl_workspace(KC_DNNL_SLOT_DST, st->m_bytes);
    if (!v || !mt)
        return kc_fail(KC_ERR_NOMEM, "out of memory for a Winograd convolution's buffers");
    int64_t first = st->cut.lo[lane], tiles = st->cut.lo[lane + 1] - first;
    int64_t blocks = kc_w1_part_blocks(st, tiles);
    for (int64_t b = 0; b < blocks; b++) {
        int64_t lo = first + tiles * b / blocks, n = first + tiles * (b + 1) / blocks - lo;
        kc_w_inputs(st, io->in, lo, n, v);
        if (st->own) {
            kc_w2_own_products(st, v, mt, n, b + 1 < blocks);
        } else {
            void *ptrs[3] = {v, st->packed, mt};
            KC_TRY(kc_dnnl_run_lane(&pt->prim, ptrs, lane));
        }
        kc_w_outputs(st, mt, lo, n, io->bias, io->out);
    }
    return KC_OK;
}

static void kc_w1_job(void *arg, int k)
{
    kc_w1_io *io = arg;
    kc_w1_state *st = (kc_w1_state *)io->st;
    io->status[k] = kc_w1_run_part(st, &st->part[k], k, io);
}

static kc_status kc_w1_execute(kc_w1_state *st, const kc_exec_ctx *ctx)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    kc_w1_io io = {st, ctx->in[0], a->use_bias ? kc_w(ctx, 1) : NULL, ctx->out[0], {KC_OK}};
    if (st->cut.parts == 1)
        return kc_w1_run_part(st, &st->part[0], 0, &io);
    double seconds[KC_BALANCE_MAX_PARTS] = {0};
    kc_parallel_timed(st->cut.parts, kc_w1_job, &io, seconds);
    for (int k = 0; k < st->cut.parts; k++)
        if (io.status[k] != KC_OK)
            return kc_fail(io.status[k], "part %d of a Winograd convolution failed", k);
    kc_balance_update(&st->cut, seconds);
    return KC_OK;
}

kc_status kc_wino_conv(const kc_exec_ctx *ctx, int *handled, int *act_done)
{
    const kc_conv_attrs *a = ctx->layer->attrs;
    *handled = 0;
    *act_done = 0;
    if (!ctx->state)
        return KC_OK;
    kc_w1_state *st = (kc_w1_state *)*ctx->state;
    if (st && st->base.free != kc_w1_free)
        return KC_OK; /* another kernel's state: the layer was built another way */
    const kc_wino_simd *simd = kc_wino_simd_pick();
    if (ctx->exact || ctx->w_ext || kc_env_off("KC_WINOGRAD") || !kc_dnnl_ready() || !simd) {
        if (st) /* the kernel that runs the layer now keeps a state of its own there */
            kc_kernel_state_drop(ctx);
        return KC_OK;
    }
    if (st && !kc_shape_equal(&st->in_shape, &ctx->in_shape[0]))
        st = kc_kernel_state_drop(ctx);
    if (!st) {
        kc_w1_state probe;
        memset(&probe, 0, sizeof probe);
        if (!kc_w1_geometry(ctx, a, &probe) && !kc_w2_geometry(ctx, a, &probe))
            return KC_OK;
        st = kc_calloc(1, sizeof *st);
        if (!st)
            return KC_ERR_NOMEM;
        *st = probe;
        st->base.free = kc_w1_free;
        st->in_shape = ctx->in_shape[0];
        st->budget = ctx->wino_budget;
        st->simd = simd;
        if (kc_w1_build(ctx, st) != KC_OK) {
            kc_w1_free(&st->base);
            kc_error_clear();
            return KC_OK; /* not handled: the direct convolution runs instead */
        }
        st->base.weights_cached = 1;
        *ctx->state = &st->base;
    }
    KC_TRY(kc_w1_execute(st, ctx));
    *handled = 1;
    *act_done = st->act != 3;
    return KC_OK;
}

int kc_wino_tile(const kc_kernel_state *state)
{
    if (!state || state->free != kc_w1_free)
        return 0;
    return ((const kc_w1_state *)state)->m;
}

int kc_wino_blocks(const kc_kernel_state *state)
{
    if (!state || state->free != kc_w1_free)
        return 0;
    const kc_w1_state *st = (const kc_w1_state *)state;
    int64_t most = 0;
    for (int k = 0; k < st->cut.parts; k++) {
        int64_t blocks = kc_w1_part_blocks(st, st->cut.lo[k + 1] - st->cut.lo[k]);
        most = blocks > most ? blocks : most;
    }
    return (int)most;
}

int64_t kc_wino_row_floats(const kc_kernel_state *state)
{
    if (!state || state->free != kc_w1_free)
        return 0;
    return kc_w1_ldv((const kc_w1_state *)state);
}

kc_balance *kc_wino_balance(kc_kernel_state *state)
{
    return state && state->free == kc_w1_free ? &((kc_w1_state *)state)->cut : NULL;
}

int kc_wino_dims(const kc_kernel_state *state)
{
    if (!state || state->free != kc_w1_free)
        return 0;
    return ((const kc_w1_state *)state)->dims;
}

int kc_wino_own(const kc_kernel_state *state)
{
    if (!state || state->free != kc_w1_free)
        return 0;
    return ((const kc_w1_state *)state)->own;
}
