/* How oneDNN's direct convolution orders the sums of a layer of several
 * taps, learned by running it.
 *
 * kernels/pw.c runs such layers itself and keeps their outputs equal to
 * oneDNN's bit for bit (no output depends on which of the two ran a
 * layer). oneDNN 2.6's brgconv sums an output as chains over (kernel
 * row, kernel column, input channel) from zero, one chain per run of
 * input channels, the chains' sums added in order. How many channels a
 * run holds it decides from the image, the filters and the core's
 * caches: on the Zen 5 of bench/results, 288 input channels onto 17x17
 * (InceptionV3's Mixed_6a) run as 272 then 16 with 384 filters but 256
 * then 32 with 96; 384 channels as one run onto 8x8 and as 256 + 128
 * onto 10x10 (found with probes of +-2^24 on one tap each). Rather than
 * copy that heuristic, which follows the CPU, kerasc asks the primitive
 * itself: it runs the layer once on random data at build and finds the
 * run length whose sums give the same bits on a sample of outputs. */
#include "kernels/dnnl_order.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "base/mem.h"
#include "kernels/dnnl_common.h"
#include "kernels/dnnl_conv.h"
#include "ops/conv.h"

/* A probe's layer, as the answer's key. */
typedef struct kc_order_key {
    int64_t in[4], out[4], kernel[2], strides[2], pad_before[2], pad_after[2];
    int padding, use_bias, kind, groups, pre_pool, post_dw;
    char act[16];
} kc_order_key;

/* Answers kept for the process, grown as layers are asked: a session's
 * plan asks the same layer several times, a layer left on oneDNN is
 * asked again at each run (kernels/pw.c), and each probe builds and runs
 * a primitive. */
typedef struct kc_order_answer {
    kc_order_key key;
    int64_t run;
} kc_order_answer;
static kc_order_answer *kc_order_memo;
static int kc_order_memo_n, kc_order_memo_cap;
static pthread_mutex_t kc_order_lock = PTHREAD_MUTEX_INITIALIZER;

/* Keep an answer (dropped when there is no memory for it: asked again). */
static void kc_order_keep(const kc_order_key *key, int64_t run)
{
    if (kc_order_memo_n == kc_order_memo_cap) {
        int cap = kc_order_memo_cap ? 2 * kc_order_memo_cap : 16;
        kc_order_answer *grown = realloc(kc_order_memo, (size_t)cap * sizeof *grown);
        if (!grown)
            return;
        kc_order_memo = grown;
        kc_order_memo_cap = cap;
    }
    kc_order_memo[kc_order_memo_n].key = *key;
    kc_order_memo[kc_order_memo_n++].run = run;
}

static void kc_order_key_of(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out,
                            kc_order_key *k)
{
    memset(k, 0, sizeof *k);
    for (int i = 1; i < 4; i++) {
        k->in[i] = in->dims[i];
        k->out[i] = out->dims[i];
    }
    for (int i = 0; i < 2; i++) {
        k->kernel[i] = a->kernel[i];
        k->strides[i] = a->strides[i];
        k->pad_before[i] = a->pad_before[i];
        k->pad_after[i] = a->pad_after[i];
    }
    k->padding = a->padding;
    k->use_bias = a->use_bias;
    k->kind = (int)a->kind;
    k->groups = (int)a->groups;
    k->pre_pool = a->pre_pool != NULL;
    k->post_dw = a->post_dw != NULL;
    if (a->activation)
        strncpy(k->act, a->activation, sizeof k->act - 1);
}

/* The probe's data: x in [0, 1), the kernel in [0, 2 / taps), so every
 * sum is positive and below 1, where each activation oneDNN is given
 * (relu, relu6) leaves it as it is. A fixed generator: the same answer
 * in every process. */
static float kc_order_uniform(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)(*state >> 40) * (1.0f / 16777216.0f);
}

typedef struct kc_order_probe {
    const kc_conv_attrs *a;
    int64_t ih, iw, c, oh, ow, n, kh, kw;
    int64_t pad_t, pad_l; /* the window's padding before the image */
    const float *x, *w;   /* NHWC image, Keras's (kh, kw, c, n) kernel */
    const float *y;       /* oneDNN's output, NHWC */
} kc_order_probe;

/* Output (oy, ox, o) summed in chains over runs of `run` input channels,
 * each over (ky, kx, channel) from zero, taps outside the image left out
 * (a zero product adds nothing to a sum that is not -0), the chains'
 * sums added in order, as kernels/pw.c sums with that run (its bias is
 * zero here). */
static float kc_order_sum(const kc_order_probe *p, int64_t oy, int64_t ox, int64_t o,
                          int64_t run)
{
    float total = 0.0f;
    for (int64_t c0 = 0; c0 < p->c; c0 += run) {
        int64_t c1 = c0 + run < p->c ? c0 + run : p->c;
        float acc = 0.0f;
        for (int64_t ky = 0; ky < p->kh; ky++) {
            int64_t iy = oy * p->a->strides[0] - p->pad_t + ky;
            for (int64_t kx = 0; iy >= 0 && iy < p->ih && kx < p->kw; kx++) {
                int64_t ix = ox * p->a->strides[1] - p->pad_l + kx;
                if (ix < 0 || ix >= p->iw)
                    continue;
                const float *xs = p->x + (iy * p->iw + ix) * p->c;
                const float *ws = p->w + ((ky * p->kw + kx) * p->c) * p->n + o;
                for (int64_t ci = c0; ci < c1; ci++)
                    acc = fmaf(xs[ci], ws[ci * p->n], acc);
            }
        }
        total = c0 == 0 ? acc : total + acc;
    }
    return total;
}

/* Whether runs of `run` channels give oneDNN's bits on a sample of
 * outputs: the corners and middle of the image, every 7th filter. */
static int kc_order_matches(const kc_order_probe *p, int64_t run)
{
    const int64_t ys[3] = {0, p->oh / 2, p->oh - 1}, xs[3] = {0, p->ow / 2, p->ow - 1};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int64_t o = (i * 3 + j) % 7; o < p->n; o += 7) {
                float want = p->y[(ys[i] * p->ow + xs[j]) * p->n + o];
                float got = kc_order_sum(p, ys[i], xs[j], o, run);
                if (memcmp(&want, &got, sizeof want))
                    return 0;
            }
    return 1;
}

/* The image's rows and columns and the padding before it from oneDNN's
 * window (a ZeroPadding folded into the layer pads there); 0 if none. */
static int kc_order_window(const_dnnl_primitive_desc_t pd, kc_order_probe *p)
{
    const dnnl_convolution_desc_t *d = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_convolution_d, 0, &d) != dnnl_success || !d)
        return 0;
    p->ih = d->src_desc.dims[2];
    p->iw = d->src_desc.dims[3];
    p->pad_t = d->padding[0][0];
    p->pad_l = d->padding[0][1];
    return p->ih > 0 && p->iw > 0;
}

/* Run pd on the probe's data into y, its kernel reordered into pd's
 * layout and a zero bias; 0 on failure. */
static int kc_order_run(const_dnnl_primitive_desc_t pd, kc_order_probe *p, float *y)
{
    dnnl_memory_desc_t w_md;
    dnnl_dims_t w_dims = {p->n, p->c, p->kh, p->kw};
    if (dnnl_memory_desc_init_by_tag(&w_md, 4, w_dims, dnnl_f32, dnnl_hwio))
        return 0;
    const dnnl_memory_desc_t *w_prim = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    /* NULL without a bias, then not bound */
    const dnnl_memory_desc_t *b_md = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 1);
    static const int args[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS};
    const dnnl_memory_desc_t *mds[4] = {dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0),
                                        w_prim,
                                        dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0),
                                        b_md};
    kc_dnnl_prim prim;
    memset(&prim, 0, sizeof prim);
    float *packed = NULL, *bias = kc_calloc((size_t)p->n, sizeof *bias);
    int ok = bias && w_prim && kc_dnnl_pack(&w_md, w_prim, p->w, NULL, 0, &packed) == KC_OK &&
             kc_dnnl_prim_init(&prim, pd, p->a->use_bias ? 4 : 3, args, mds) == KC_OK;
    /* its own scratchpad: the thread's workspace (kc_dnnl_run) would grow
     * to it and stay so for a primitive no run executes */
    void *scratch = ok && prim.scratch_bytes ? kc_calloc(prim.scratch_bytes + 64, 1) : NULL;
    void *aligned = scratch ? (void *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63) : NULL;
    void *ptrs[4] = {(void *)p->x, packed, y, bias};
    /* on the calling batch lane's stream (kc_dnnl_run_in) */
    ok = ok && (!prim.scratch_bytes || scratch) && kc_dnnl_run_in(&prim, ptrs, 0, aligned) == KC_OK;
    kc_dnnl_prim_destroy(&prim);
    free(scratch);
    kc_free_weights(packed);
    free(bias);
    return ok;
}

/* The probe itself (no memo): 0 when no run length matches. */
static int64_t kc_order_find(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out)
{
    kc_order_probe p = {.a = a,
                        .c = in->dims[3],
                        .oh = out->dims[1],
                        .ow = out->dims[2],
                        .n = out->dims[3],
                        .kh = a->kernel[0],
                        .kw = a->kernel[1]};
    dnnl_primitive_desc_t pd = kc_dnnl_conv_image_pd(a, in, out);
    const char *impl = NULL;
    if (!pd || dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) !=
                   dnnl_success || !impl || strncmp(impl, "brgconv:", 8) ||
        !kc_order_window(pd, &p)) {
        if (pd)
            dnnl_primitive_desc_destroy(pd);
        kc_error_clear();
        return 0;
    }
    size_t xs = (size_t)(p.ih * p.iw * p.c), ws = (size_t)(p.kh * p.kw * p.c * p.n);
    float *x = kc_calloc(xs, sizeof *x), *w = kc_calloc(ws, sizeof *w);
    float *y = kc_calloc((size_t)(p.oh * p.ow * p.n), sizeof *y);
    int64_t found = 0;
    if (x && w && y) {
        uint64_t state = 0x6b657261736321ull;
        float scale = 2.0f / (float)(p.kh * p.kw * p.c);
        for (size_t i = 0; i < xs; i++)
            x[i] = kc_order_uniform(&state);
        for (size_t i = 0; i < ws; i++)
            w[i] = kc_order_uniform(&state) * scale;
        p.x = x;
        p.w = w;
        p.y = y;
        if (kc_order_run(pd, &p, y)) {
            /* one chain first, then runs of whole vectors, longest first */
            if (kc_order_matches(&p, p.c))
                found = p.c;
            for (int64_t run = (p.c - 1) / 16 * 16; !found && run >= 16; run -= 16)
                if (kc_order_matches(&p, run))
                    found = run;
        }
    }
    free(x);
    free(w);
    free(y);
    dnnl_primitive_desc_destroy(pd);
    kc_error_clear();
    return found;
}

int64_t kc_dnnl_taps_run(const kc_conv_attrs *a, const kc_shape *in, const kc_shape *out)
{
    if (!kc_dnnl_ready() || in->rank != 4 || out->rank != 4 || a->spatial != 2 ||
        a->dilation[0] != 1 || a->dilation[1] != 1 || a->accumulate)
        return 0;
    kc_order_key key;
    kc_order_key_of(a, in, out, &key);
    pthread_mutex_lock(&kc_order_lock);
    for (int i = 0; i < kc_order_memo_n; i++)
        if (!memcmp(&kc_order_memo[i].key, &key, sizeof key)) {
            int64_t run = kc_order_memo[i].run;
            pthread_mutex_unlock(&kc_order_lock);
            return run;
        }
    int64_t run = kc_order_find(a, in, out);
    kc_order_keep(&key, run);
    pthread_mutex_unlock(&kc_order_lock);
    return run;
}
