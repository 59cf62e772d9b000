/* A classifier run inside the 1x1 convolution before it: MobileNetV2's
 * Conv_1 (320 -> 1280 on 7x7) -> GlobalAveragePooling2D -> Dense (1280 ->
 * 1000), as one kernel at batch 1 (pw.c runs the convolution, this file
 * the rest; runtime/fuse.c's kc_fuse_head_plan decides).
 *
 * Why: at batch 1 the Dense reads its 5 MB of weights for 1.3 M
 * multiply-adds, from L3 or memory: 0.064 ms a run in MobileNetV2 on the
 * 2-core Zen 4 (0.037 on the layer alone, its weights in L3), while the
 * 0.19 ms convolution before it, bound by its multiply-adds, leaves the
 * memory idle. Here, as each panel of the convolution's output channels
 * is done, the thread that ran it pools those channels and multiplies
 * them into the Dense's rows for them, rows it had fetched into L2
 * while the panel ran (pw.c), so the weights stream in beside the
 * convolution's arithmetic. The pooling's and the Dense's outputs are
 * never written to the arena.
 *
 * The same bits as the three layers run one by one (KC_FUSE_HEAD=0):
 * the convolution is pw.c's (the sums of oneDNN's brgconv_1x1, which it
 * matches), the pooling gpool_simd.inc's loop on the same channels, and
 * each Dense output the sum dense_simd.inc's loop makes: blocks of 16
 * inputs, each from zero in order (here: block b is output vector b of
 * the convolution, whichever thread ran it), added in order at the end,
 * then the bias and the activation. */
#include "kernels/pw_head.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "kernels/dense.h"
#include "kernels/kernel.h"
#include "ops/core.h"
#include "ops/pool.h"

/* pool.c's global pooling loop (gpool_simd.inc) */
void kc_gpool_cells_avx512(const float *p, int64_t cells, int64_t stride, int64_t len, int max,
                           float *o);

#define KC_PW_HEAD_BLOCK KC_DENSE_BLOCK /* inputs a block: the Dense loop's (dense.h) */

int kc_pw_head_layers_ok(const kc_layer *gap, const kc_layer *dense, int64_t channels)
{
    const kc_pool_attrs *p = gap->attrs;
    const kc_dense_attrs *d = dense->attrs;
    if (!p || !d || strcmp(gap->class_name, "GlobalAveragePooling2D") != 0 ||
        strcmp(dense->class_name, "Dense") != 0 || p->kind != KC_POOL_AVG || !p->global ||
        p->spatial != 2 || p->keepdims || gap->channels_first || d->accumulate ||
        d->units < 1 || dense->n_weights < 1 + (d->use_bias != 0))
        return 0;
    const kc_shape *ks = &dense->weights[0].shape;
    return ks->rank == 2 && ks->dims[0] == channels && ks->dims[1] == d->units;
}

void kc_pw_head_free(kc_pw_head *h)
{
    if (!h)
        return;
    kc_free_weights(h->w);
    free(h->bias);
    free(h->conv);
    free(h->pooled);
    free(h->partial);
    free(h);
}

/* Keras's (k, units) kernel by blocks of 16 inputs: block b's rows
 * [uvec][input][16], zeros past k and units. */
static void kc_pw_head_pack(kc_pw_head *h, const float *kernel)
{
    for (int64_t b = 0; b < h->blocks; b++)
        for (int64_t u = 0; u < h->uvecs; u++) {
            int64_t cols = h->units - 16 * u < 16 ? h->units - 16 * u : 16;
            for (int64_t i = 0; i < KC_PW_HEAD_BLOCK && 16 * b + i < h->k; i++)
                memcpy(h->w + ((b * h->uvecs + u) * KC_PW_HEAD_BLOCK + i) * 16,
                       kernel + (16 * b + i) * h->units + 16 * u, (size_t)cols * sizeof(float));
        }
}

/* n zeroed floats on a cache line's start (kc_alloc_array's: the sums'
 * loads and stores whole lines). */
static float *kc_pw_head_floats(size_t n)
{
    float *p = kc_alloc_array(n, sizeof(float));
    if (p)
        memset(p, 0, n * sizeof *p);
    return p;
}

kc_status kc_pw_head_new(const kc_layer *dense, int64_t k, int64_t cells, kc_pw_head **out)
{
    const kc_dense_attrs *d = dense->attrs;
    const float *kernel = dense->weights[0].data;
    const float *bias = d->use_bias ? dense->weights[1].data : NULL;
    if (!kernel || (d->use_bias && !bias))
        return kc_fail(KC_ERR_UNSUPPORTED, "the Dense layer fused into this 1x1 convolution "
                                           "has no weights loaded");
    kc_pw_head *h = calloc(1, sizeof *h);
    if (!h)
        return KC_ERR_NOMEM;
    h->k = k;
    h->cells = cells;
    h->units = d->units;
    h->uvecs = (d->units + 15) / 16;
    h->blocks = (k + KC_PW_HEAD_BLOCK - 1) / KC_PW_HEAD_BLOCK;
    h->activation = d->activation;
    size_t row = (size_t)(h->uvecs * 16);
    h->w = kc_calloc_weights((size_t)h->blocks * row * KC_PW_HEAD_BLOCK, sizeof(float));
    h->conv = kc_pw_head_floats((size_t)(cells * k));
    h->pooled = kc_pw_head_floats((size_t)(h->blocks * KC_PW_HEAD_BLOCK));
    h->partial = kc_pw_head_floats((size_t)h->blocks * row);
    h->bias = bias ? kc_pw_head_floats(row) : NULL;
    if (!h->w || !h->conv || !h->pooled || !h->partial || (bias && !h->bias)) {
        kc_pw_head_free(h);
        return KC_ERR_NOMEM;
    }
    if (bias)
        memcpy(h->bias, bias, (size_t)h->units * sizeof(float));
    kc_pw_head_pack(h, kernel);
    *out = h;
    return KC_OK;
}

const char *kc_pw_head_rows(const kc_pw_head *h, int64_t v0, int64_t nv, int64_t *bytes)
{
    int64_t per_block = h->uvecs * 16 * KC_PW_HEAD_BLOCK;
    *bytes = nv * per_block * (int64_t)sizeof(float);
    return (const char *)(h->w + v0 * per_block);
}

/* Block b's sums for units vectors [u, u + nu): one chain a vector over
 * the block's n inputs, from zero. Inlined with nu constant. */
__attribute__((target("avx512f"), always_inline)) static inline void
kc_pw_head_chains(const float *x, int n, const float *w, float *sums, int nu)
{
    __m512 acc[8];
    #pragma GCC unroll 8
    for (int q = 0; q < nu; q++)
        acc[q] = _mm512_setzero_ps();
    for (int i = 0; i < n; i++) {
        __m512 xi = _mm512_set1_ps(x[i]);
        #pragma GCC unroll 8
        for (int q = 0; q < nu; q++)
            acc[q] = _mm512_fmadd_ps(xi, _mm512_loadu_ps(w + (q * KC_PW_HEAD_BLOCK + i) * 16),
                                     acc[q]);
    }
    #pragma GCC unroll 8
    for (int q = 0; q < nu; q++)
        _mm512_store_ps(sums + 16 * q, acc[q]);
}

__attribute__((target("avx512f"))) void kc_pw_head_vectors(const kc_pw_head *h, int64_t v0,
                                                            int64_t nv)
{
    int64_t c0 = 16 * v0, c1 = 16 * (v0 + nv) < h->k ? 16 * (v0 + nv) : h->k;
    kc_gpool_cells_avx512(h->conv + c0, h->cells, h->k, c1 - c0, 0, h->pooled + c0);
    for (int64_t b = v0; b < v0 + nv; b++) {
        int n = h->k - 16 * b < KC_PW_HEAD_BLOCK ? (int)(h->k - 16 * b) : KC_PW_HEAD_BLOCK;
        const float *x = h->pooled + 16 * b;
        const float *w = h->w + b * h->uvecs * 16 * KC_PW_HEAD_BLOCK;
        float *sums = h->partial + b * h->uvecs * 16;
        int64_t u = 0;
        /* eight chains at once: the multiply-add's latency covered */
        for (; u + 8 <= h->uvecs; u += 8)
            kc_pw_head_chains(x, n, w + u * 16 * KC_PW_HEAD_BLOCK, sums + 16 * u, 8);
        for (; u < h->uvecs; u++)
            kc_pw_head_chains(x, n, w + u * 16 * KC_PW_HEAD_BLOCK, sums + 16 * u, 1);
    }
}

/* Units vectors [u, u + nu) of y: the blocks' sums in order from zero,
 * then the bias. Inlined with nu constant: nu chains of adds at once. */
__attribute__((target("avx512f"), always_inline)) static inline void
kc_pw_head_units(const kc_pw_head *h, int64_t u, int nu, float *y)
{
    __m512 t[8];
    #pragma GCC unroll 8
    for (int q = 0; q < nu; q++)
        t[q] = _mm512_setzero_ps();
    for (int64_t b = 0; b < h->blocks; b++) {
        const float *s = h->partial + (b * h->uvecs + u) * 16;
        #pragma GCC unroll 8
        for (int q = 0; q < nu; q++)
            t[q] = _mm512_add_ps(t[q], _mm512_load_ps(s + 16 * q));
    }
    for (int q = 0; q < nu; q++) {
        int64_t cols = h->units - 16 * (u + q);
        __mmask16 mask = cols >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cols) - 1);
        if (h->bias)
            t[q] = _mm512_add_ps(t[q], _mm512_load_ps(h->bias + 16 * (u + q)));
        _mm512_mask_storeu_ps(y + 16 * (u + q), mask, t[q]);
    }
}

__attribute__((target("avx512f"))) void kc_pw_head_total(const kc_pw_head *h, float *y, int part,
                                                          int parts)
{
    int64_t u = h->uvecs * part / parts, end = h->uvecs * (part + 1) / parts;
    for (; u + 8 <= end; u += 8)
        kc_pw_head_units(h, u, 8, y);
    for (; u < end; u++)
        kc_pw_head_units(h, u, 1, y);
}

kc_status kc_pw_head_activate(const kc_pw_head *h, float *y, int keras_major)
{
    return kc_activation_apply(h->activation, keras_major, y, h->units, h->units);
}
