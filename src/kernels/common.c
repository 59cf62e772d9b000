/* Shared kernel helpers: activations, softmax, GEMM, registry lookup. */
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/balance.h"
#include "base/pool.h"
#include "base/threads.h"
#include "kernels/fastmath.h"
#include "kernels/isa.h"
#include "kernels/kernel.h"

static const kc_kernel_entry *const kc_kernel_families[] = {
    kc_kernels_core,    kc_kernels_conv,  kc_kernels_pool, kc_kernels_norm,
    kc_kernels_reshape, kc_kernels_merge, kc_kernels_rnn,  kc_kernels_preprocess,
    kc_kernels_act,     kc_kernels_tensor_ops, kc_kernels_attention,
};

/* Training-only layers (dropout, noise, augmentation): a copy. */
static kc_status kc_identity_kernel(const kc_exec_ctx *ctx)
{
    if (ctx->out[0] != ctx->in[0])
        memcpy(ctx->out[0], ctx->in[0], (size_t)kc_count(&ctx->out_shape[0]) * sizeof(float));
    return KC_OK;
}

kc_kernel_fn kc_kernel_lookup(const kc_op_def *def)
{
    if (!def)
        return NULL;
    if (def->flags & KC_OPF_IDENTITY)
        return kc_identity_kernel;
    int ops = (def->flags & KC_OPF_OPS_NODE) != 0;
    for (size_t f = 0; f < sizeof kc_kernel_families / sizeof kc_kernel_families[0]; f++)
        for (const kc_kernel_entry *e = kc_kernel_families[f]; e->class_name; e++)
            if (e->ops_node == ops && strcmp(e->class_name, def->class_name) == 0)
                return e->fn;
    return NULL;
}

int64_t kc_count(const kc_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dims[i];
    return n;
}

const float *kc_w(const kc_exec_ctx *ctx, int i)
{
    if (i < 0 || i >= ctx->layer->n_weights)
        return NULL;
    return ctx->w_ext ? ctx->w_ext[i] : ctx->layer->weights[i].data;
}

kc_status kc_kernel_and_bias(const kc_exec_ctx *ctx, int use_bias, const float **w,
                             const float **bias)
{
    *w = kc_w(ctx, 0);
    *bias = use_bias ? kc_w(ctx, 1) : NULL;
    if (!*w || (use_bias && !*bias))
        return kc_fail(KC_ERR_UNSUPPORTED, ctx->w_ext
                                               ? "the convolution's streamed weights are missing"
                                               : "the convolution's weights are gone");
    return KC_OK;
}

void kc_gemm(int64_t m, int64_t n, int64_t k, const float *a, const float *b, float *c,
             int accumulate)
{
    if (m == 0 || n == 0)
        return;
    if (k == 0) {
        if (!accumulate)
            memset(c, 0, (size_t)(m * n) * sizeof *c);
        return;
    }
    kc_gemm_ld(m, n, k, a, k, b, n, 0, c, n, accumulate);
}

/* Below this many multiply-adds a GEMM runs on the calling thread: waking
 * OpenMP's sleeping workers for it cost more than it saved. A real
 * bidirectional LSTM (quora_bilstm_tf2110.h5: 128 units, 222 steps) makes
 * one 1 x 128 x 512 GEMM a step and direction at batch 1, and took 10.2
 * ms a run on two threads (most of it in the kernel's futex wake-ups)
 * against 5.1 for a batch of two. */
#define KC_GEMM_SERIAL_MACS ((int64_t)1 << 20)

void kc_gemm_ld(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                int64_t ldb, int trans_b, float *c, int64_t ldc, int accumulate)
{
    if (m == 0 || n == 0 || k == 0)
        return;
    /* oneDNN's GEMM shares the OpenMP pool with the convolutions (see
     * base/threads.c); OpenBLAS is the plain path. */
    if (kc_dnnl_enabled()) {
        int serial = m * n * k < KC_GEMM_SERIAL_MACS;
        int previous = serial ? kc_threads_serial_begin() : 0;
        kc_pool_team_note(); /* oneDNN's OpenMP team may start (base/pool.c) */
        dnnl_status_t st = dnnl_sgemm('N', trans_b ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb,
                                      accumulate ? 1.0f : 0.0f, c, ldc);
        if (serial)
            kc_threads_serial_end(previous);
        if (st == dnnl_success)
            return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (blasint)m,
                (blasint)n, (blasint)k, 1.0f, a, (blasint)lda, b, (blasint)ldb,
                accumulate ? 1.0f : 0.0f, c, (blasint)ldc);
}

void *kc_kernel_state_drop(const kc_exec_ctx *ctx)
{
    kc_kernel_state *st = *ctx->state;
    *ctx->state = NULL;
    if (st)
        st->free(st);
    return NULL;
}

void kc_for_image_rows(int64_t lo, int64_t hi, int64_t rows,
                       void (*fn)(void *arg, int64_t image, int64_t y0, int64_t y1), void *arg)
{
    while (lo < hi) {
        int64_t image = lo / rows, y0 = lo % rows;
        int64_t y1 = hi - image * rows < rows ? hi - image * rows : rows;
        fn(arg, image, y0, y1);
        lo = image * rows + y1;
    }
}

typedef struct kc_balanced_rows {
    const kc_balance *cut;
    int64_t rows;
    void (*fn)(void *arg, int64_t image, int64_t y0, int64_t y1);
    void *arg;
} kc_balanced_rows;

static void kc_balanced_rows_part(void *arg, int k)
{
    const kc_balanced_rows *run = arg;
    kc_for_image_rows(run->cut->lo[k], run->cut->lo[k + 1], run->rows, run->fn, run->arg);
}

void kc_balanced_image_rows(kc_balance *cut, int *cut_width, int width, int64_t images,
                            int64_t rows,
                            void (*fn)(void *arg, int64_t image, int64_t y0, int64_t y1),
                            void *arg)
{
    if (*cut_width != width) {
        *cut_width = width;
        kc_balance_init(cut, images * rows, width, 2);
    }
    kc_balanced_rows run = {cut, rows, fn, arg};
    double seconds[KC_BALANCE_MAX_PARTS] = {0};
    kc_parallel_timed(cut->parts, kc_balanced_rows_part, &run, seconds);
    kc_balance_update(cut, seconds);
}

float *kc_scratch(int64_t floats)
{
    if (floats < 1)
        floats = 1;
    /* on a cache line's start, as the arena's tensors: the kernels' vector
     * loads then never span two lines */
    void *p = NULL;
    if (posix_memalign(&p, 64, (size_t)floats * sizeof(float)))
        p = NULL;
    if (!p)
        kc_fail(KC_ERR_NOMEM, "out of memory for %lld floats of scratch", (long long)floats);
    return p;
}

void kc_softmax_axis(float *x, int64_t outer, int64_t axis_len, int64_t inner)
{
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            float *p = x + o * axis_len * inner + i;
            float mx = -INFINITY;
            for (int64_t a = 0; a < axis_len; a++)
                mx = fmaxf(mx, p[a * inner]);
            double sum = 0;
            for (int64_t a = 0; a < axis_len; a++) {
                p[a * inner] = expf(p[a * inner] - mx);
                sum += p[a * inner];
            }
            for (int64_t a = 0; a < axis_len; a++)
                p[a * inner] = (float)(p[a * inner] / sum);
        }
}

/* fastmath.h: vectorised, no overflow for large -x (libm's expf(-x) did) */
static float kc_sigmoid(float x) { return kc_sigmoid_fast(x); }
static float kc_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
static float kc_clamp(float x, float lo, float hi) { return x < lo ? lo : x > hi ? hi : x; }

/* Element-wise activations; formulas per keras-formats.md §5.5. 1 when
 * `name` is one of them (with n = 0 nothing else happens), else 0. */
static int kc_activation_scalar(const char *name, int keras_major, float *x, int64_t n)
{
#define KC_MAP(expr)                      \
    do {                                  \
        for (int64_t i = 0; i < n; i++) { \
            float v = x[i];               \
            x[i] = (expr);                \
        }                                 \
        return 1;                         \
    } while (0)
    if (strcmp(name, "linear") == 0)
        return 1;
    if (strcmp(name, "relu") == 0)
        KC_MAP(v > 0 ? v : 0);
    if (strcmp(name, "relu6") == 0)
        KC_MAP(kc_clamp(v, 0, 6));
    if (strcmp(name, "leaky_relu") == 0)
        KC_MAP(v >= 0 ? v : 0.2f * v);
    if (strcmp(name, "elu") == 0)
        KC_MAP(v > 0 ? v : expm1f(v));
    if (strcmp(name, "selu") == 0)
        KC_MAP(1.0507009873554805f * (v > 0 ? v : 1.6732632423543772f * expm1f(v)));
    if (strcmp(name, "sigmoid") == 0)
        KC_MAP(kc_sigmoid(v));
    if (strcmp(name, "hard_sigmoid") == 0) {
        if (keras_major >= 3)
            KC_MAP(kc_clamp(v / 6.0f + 0.5f, 0, 1));
        KC_MAP(kc_clamp(0.2f * v + 0.5f, 0, 1));
    }
    if (strcmp(name, "silu") == 0 || strcmp(name, "swish") == 0)
        KC_MAP(v * kc_sigmoid(v));
    if (strcmp(name, "hard_silu") == 0 || strcmp(name, "hard_swish") == 0)
        KC_MAP(v * kc_clamp(v + 3.0f, 0, 6) / 6.0f);
    if (strcmp(name, "gelu") == 0)
        KC_MAP(kc_gelu_erf(v)); /* fastmath.h: vectorised, within 1e-7 |v| of erff's */
    if (strcmp(name, "tanh") == 0)
        KC_MAP(kc_tanh_fast(v)); /* fastmath.h: vectorised, within 2.4e-7 of tanh */
    if (strcmp(name, "softplus") == 0)
        KC_MAP(kc_softplus(v));
    if (strcmp(name, "softsign") == 0)
        KC_MAP(v / (1.0f + fabsf(v)));
    if (strcmp(name, "exponential") == 0)
        KC_MAP(expf(v));
    if (strcmp(name, "mish") == 0)
        KC_MAP(v * tanhf(kc_softplus(v)));
    if (strcmp(name, "celu") == 0)
        KC_MAP(v > 0 ? v : expm1f(v));
    if (strcmp(name, "hard_tanh") == 0)
        KC_MAP(kc_clamp(v, -1, 1));
    if (strcmp(name, "hard_shrink") == 0)
        KC_MAP(fabsf(v) > 0.5f ? v : 0);
    if (strcmp(name, "soft_shrink") == 0)
        KC_MAP(v > 0.5f ? v - 0.5f : v < -0.5f ? v + 0.5f : 0);
    if (strcmp(name, "tanh_shrink") == 0)
        KC_MAP(v - tanhf(v));
    if (strcmp(name, "sparse_plus") == 0)
        KC_MAP(v <= -1 ? 0 : v >= 1 ? v : (v + 1) * (v + 1) / 4);
    if (strcmp(name, "squareplus") == 0)
        KC_MAP((v + sqrtf(v * v + 4.0f)) / 2.0f);
    if (strcmp(name, "log_sigmoid") == 0)
        KC_MAP(-kc_softplus(-v));
#undef KC_MAP
    return 0;
}

/* An element-wise activation over ranges: each range copied (when in
 * and out differ) and activated while it is in the cache. */
typedef struct kc_act_job {
    const char *name;
    int keras_major;
    const float *in;
    float *out;
    void (*simd)(float *x, int64_t n); /* kc_act_simd's loop, or NULL */
} kc_act_job;

void kc_act_gelu_avx512(float *x, int64_t n);
void kc_act_swish_avx512(float *x, int64_t n);
void kc_act_sigmoid_avx512(float *x, int64_t n);
void kc_act_gelu_avx2(float *x, int64_t n);
void kc_act_swish_avx2(float *x, int64_t n);
void kc_act_sigmoid_avx2(float *x, int64_t n);
void kc_act_tanh_avx512(float *x, int64_t n);
void kc_act_tanh_avx2(float *x, int64_t n);

/* The instruction set's loop for the costly activations (act_simd.inc:
 * kc_activation_scalar's formulas with fused multiply-adds, the same bits
 * on AVX-512 and AVX2, within rounding of the scalar ones), or NULL. */
typedef void (*kc_act_fn)(float *x, int64_t n);
static kc_act_fn kc_act_simd(const char *name)
{
    kc_isa_level isa = kc_isa();
    if (isa == KC_ISA_NONE)
        return NULL;
    int wide = isa == KC_ISA_AVX512;
    if (!strcmp(name, "gelu"))
        return wide ? kc_act_gelu_avx512 : kc_act_gelu_avx2;
    if (!strcmp(name, "silu") || !strcmp(name, "swish"))
        return wide ? kc_act_swish_avx512 : kc_act_swish_avx2;
    if (!strcmp(name, "sigmoid"))
        return wide ? kc_act_sigmoid_avx512 : kc_act_sigmoid_avx2;
    if (!strcmp(name, "tanh"))
        return wide ? kc_act_tanh_avx512 : kc_act_tanh_avx2;
    return NULL;
}

static void kc_act_range(void *arg, int64_t lo, int64_t hi)
{
    const kc_act_job *job = arg;
    if (job->in != job->out)
        memcpy(job->out + lo, job->in + lo, (size_t)(hi - lo) * sizeof(float));
    if (job->simd)
        job->simd(job->out + lo, hi - lo);
    else
        kc_activation_scalar(job->name, job->keras_major, job->out + lo, hi - lo);
}

/* Values an element-wise range takes at least: whole cache lines. */
#define KC_ACT_GRAIN 16

kc_status kc_activation_apply_from(const char *name, int keras_major, const float *in,
                                   float *out, int64_t n, int64_t last_dim)
{
    if (!name || !strcmp(name, "linear")) {
        if (in != out)
            memcpy(out, in, (size_t)n * sizeof *out);
        return KC_OK;
    }
    /* n = 0 applies nothing and says whether the name is element-wise */
    if (kc_activation_scalar(name, keras_major, out, 0)) {
        kc_act_job job = {name, keras_major, in, out, kc_act_simd(name)};
        kc_parallel_for(n, 2 * n * (int64_t)sizeof(float), KC_ACT_GRAIN, kc_act_range, &job);
        return KC_OK;
    }
    if (strcmp(name, "softmax") == 0 || strcmp(name, "log_softmax") == 0) {
        if (last_dim < 1)
            return kc_fail(KC_ERR_SHAPE, "softmax over an empty axis");
        if (in != out)
            memcpy(out, in, (size_t)n * sizeof *out);
        kc_softmax_axis(out, n / last_dim, last_dim, 1);
        if (name[0] == 'l')
            for (int64_t i = 0; i < n; i++)
                out[i] = logf(out[i]);
        return KC_OK;
    }
    return kc_fail(KC_ERR_UNSUPPORTED, "activation '%s' is not implemented on the CPU", name);
}

int kc_activation_elementwise(const char *name, int keras_major)
{
    /* n = 0 applies nothing and says whether the name is element-wise */
    return name && kc_activation_scalar(name, keras_major, NULL, 0);
}

kc_status kc_activation_apply(const char *name, int keras_major, float *x, int64_t n,
                              int64_t last_dim)
{
    return kc_activation_apply_from(name, keras_major, x, x, n, last_dim);
}
