/* Normalization: BatchNormalization (moving statistics), Layer-, Group-
 * and UnitNormalization. Statistics are accumulated in double: a 1e-4
 * tolerance leaves no room for cancellation in float. */
#include <math.h>
#include <string.h>

#include "base/threads.h"
#include "kernels/isa.h"
#include "kernels/kernel.h"
#include "ops/norm.h"

static int kc_norm_axis(const kc_norm_attrs *a, int k, int rank)
{
    return a->axes[k] < 0 ? a->axes[k] + rank : a->axes[k];
}

/* outer x len x inner view around one axis. */
static void kc_axis_view(const kc_shape *s, int axis, int64_t *outer, int64_t *len,
                         int64_t *inner)
{
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < axis; i++)
        *outer *= s->dims[i];
    *len = s->dims[axis];
    for (int i = axis + 1; i < s->rank; i++)
        *inner *= s->dims[i];
}

/* BatchNormalization as a per-channel scale and shift, in double as
 * before: y = (float)(x * scale + shift), scale = gamma / sqrt(var +
 * eps), shift = beta - mean * scale. Cut over the threads by positions
 * before the axis (pixels, channels-last) or by planes (the axis not
 * last), each position's channels read in order. */
typedef struct kc_bn_job {
    const float *x, *gamma, *beta, *mean, *var;
    float *y;
    double epsilon;
    int64_t len, inner;
} kc_bn_job;

/* Channels a stack block of scales and shifts holds (8 KiB). */
#define KC_BN_BLOCK 512

static void kc_bn_coeffs(const kc_bn_job *j, int64_t c, double *scale, double *shift)
{
    *scale = (j->gamma ? j->gamma[c] : 1.0) / sqrt((double)j->var[c] + j->epsilon);
    *shift = (j->beta ? j->beta[c] : 0.0) - j->mean[c] * *scale;
}

/* Positions [lo, hi) of a channels-last tensor (inner == 1). */
static void kc_bn_pixels(void *arg, int64_t lo, int64_t hi)
{
    const kc_bn_job *j = arg;
    double scale[KC_BN_BLOCK], shift[KC_BN_BLOCK];
    for (int64_t c0 = 0; c0 < j->len; c0 += KC_BN_BLOCK) {
        int64_t nc = j->len - c0 < KC_BN_BLOCK ? j->len - c0 : KC_BN_BLOCK;
        for (int64_t c = 0; c < nc; c++)
            kc_bn_coeffs(j, c0 + c, &scale[c], &shift[c]);
        for (int64_t o = lo; o < hi; o++) {
            const float *x = j->x + o * j->len + c0;
            float *y = j->y + o * j->len + c0;
            for (int64_t c = 0; c < nc; c++)
                y[c] = (float)(x[c] * scale[c] + shift[c]);
        }
    }
}

/* Planes [lo, hi): plane p is channel p % len of position p / len. */
static void kc_bn_planes(void *arg, int64_t lo, int64_t hi)
{
    const kc_bn_job *j = arg;
    for (int64_t p = lo; p < hi; p++) {
        double scale, shift;
        kc_bn_coeffs(j, p % j->len, &scale, &shift);
        const float *x = j->x + p * j->inner;
        float *y = j->y + p * j->inner;
        for (int64_t i = 0; i < j->inner; i++)
            y[i] = (float)(x[i] * scale + shift);
    }
}

static kc_status kc_batchnorm(const kc_exec_ctx *ctx)
{
    const kc_norm_attrs *a = ctx->layer->attrs;
    int w = 0;
    kc_bn_job j = {.x = ctx->in[0], .y = ctx->out[0], .epsilon = a->epsilon};
    j.gamma = a->scale ? kc_w(ctx, w++) : NULL;
    j.beta = a->center ? kc_w(ctx, w++) : NULL;
    j.mean = kc_w(ctx, w++);
    j.var = kc_w(ctx, w++);
    int64_t outer;
    kc_axis_view(&ctx->in_shape[0], kc_norm_axis(a, 0, ctx->in_shape[0].rank), &outer, &j.len,
                 &j.inner);
    int64_t bytes = 2 * kc_count(&ctx->in_shape[0]) * (int64_t)sizeof(float);
    if (j.inner == 1)
        kc_parallel_for(outer, bytes, 1, kc_bn_pixels, &j);
    else
        kc_parallel_for(outer * j.len, bytes, 1, kc_bn_planes, &j);
    return KC_OK;
}

/* LayerNormalization's rows [lo, hi): each row's statistics in double,
 * in a fixed order whichever thread takes it. */
typedef void (*kc_ln_row_fn)(const float *x, float *y, int64_t n, double eps, const float *gamma,
                             const float *beta);
typedef struct kc_ln_job {
    const kc_norm_attrs *a;
    const float *in;
    float *out;
    const float *gamma, *beta;
    int64_t len;
    kc_ln_row_fn row; /* the instruction set's row (ln_simd.inc), or the plain one */
} kc_ln_job;
void kc_ln_row_avx512(const float *, float *, int64_t, double, const float *, const float *);
void kc_ln_row_avx2(const float *, float *, int64_t, double, const float *, const float *);

/* The sums of a row's x[i] - shift and of their squares run in
 * KC_LN_CHAINS chains (value i in chain i mod KC_LN_CHAINS), added
 * pairwise at the end: one chain was a dependent double add per value (4
 * cycles each), which took ConvNeXtTiny's 56x56 LayerNormalization 0.4
 * ms for 301 K values; eight chains vectorise and overlap. The order is
 * fixed, so a row's bits do not depend on the thread or the cut. */
#define KC_LN_CHAINS 8

static double kc_ln_chains_total(const double *acc)
{
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* The sum of x[i], i < n. */
static double kc_ln_sum(const float *x, int64_t n)
{
    double acc[KC_LN_CHAINS] = {0};
    int64_t i = 0;
    for (; i + KC_LN_CHAINS <= n; i += KC_LN_CHAINS)
        for (int k = 0; k < KC_LN_CHAINS; k++)
            acc[k] += x[i + k];
    for (int k = 0; i < n; i++, k++)
        acc[k] += x[i];
    return kc_ln_chains_total(acc);
}

/* The sum of (x[i] - mean)^2, i < n. */
static double kc_ln_sum_sq(const float *x, int64_t n, double mean)
{
    double acc[KC_LN_CHAINS] = {0};
    int64_t i = 0;
    for (; i + KC_LN_CHAINS <= n; i += KC_LN_CHAINS)
        for (int k = 0; k < KC_LN_CHAINS; k++) {
            double d = x[i + k] - mean;
            acc[k] += d * d;
        }
    for (int k = 0; i < n; i++, k++) {
        double d = x[i] - mean;
        acc[k] += d * d;
    }
    return kc_ln_chains_total(acc);
}

/* y = (x - mean) * inv * gamma + beta in float, as Keras computes it
 * (its statistics here in double): one loop per case, so that each
 * vectorises (in double, with the per-value selects, the pass took most
 * of the layer's time). */
static void kc_ln_apply(const float *x, float *y, int64_t len, float mean, float inv,
                        const float *gamma, const float *beta)
{
    if (gamma && beta)
        for (int64_t i = 0; i < len; i++)
            y[i] = (x[i] - mean) * inv * gamma[i] + beta[i];
    else if (gamma)
        for (int64_t i = 0; i < len; i++)
            y[i] = (x[i] - mean) * inv * gamma[i];
    else if (beta)
        for (int64_t i = 0; i < len; i++)
            y[i] = (x[i] - mean) * inv + beta[i];
    else
        for (int64_t i = 0; i < len; i++)
            y[i] = (x[i] - mean) * inv;
}

/* One row on the plain loops (ln_simd.inc's have the same bits). */
static void kc_ln_row_plain(const float *x, float *y, int64_t n, double eps, const float *gamma,
                            const float *beta)
{
    double mean = kc_ln_sum(x, n) / (double)n;
    double var = kc_ln_sum_sq(x, n, mean) / (double)n;
    kc_ln_apply(x, y, n, (float)mean, (float)(1.0 / sqrt(var + eps)), gamma, beta);
}

static void kc_ln_rows(void *arg, int64_t lo, int64_t hi)
{
    const kc_ln_job *j = arg;
    const kc_norm_attrs *a = j->a;
    const float *gamma = j->gamma, *beta = j->beta;
    int64_t len = j->len;
    for (int64_t r = lo; r < hi; r++) {
        const float *x = j->in + r * len;
        float *y = j->out + r * len;
        if (!a->rms_scaling) {
            j->row(x, y, len, a->epsilon, gamma, beta);
            continue;
        }
        /* Keras: x * rsqrt(mean(x^2) + eps) * gamma */
        double mean = kc_ln_sum(x, len) / (double)len;
        double ms = kc_ln_sum_sq(x, len, mean) / (double)len + mean * mean;
        double inv = 1.0 / sqrt(ms + a->epsilon);
        for (int64_t i = 0; i < len; i++)
            y[i] = (float)(x[i] * inv * (gamma ? gamma[i] : 1.0));
    }
}

/* LayerNormalization over trailing axes (the form Keras models use). */
static kc_status kc_layernorm(const kc_exec_ctx *ctx)
{
    const kc_norm_attrs *a = ctx->layer->attrs;
    const kc_shape *s = &ctx->in_shape[0];
    int first = s->rank;
    for (int k = 0; k < a->n_axes; k++) {
        int ax = kc_norm_axis(a, k, s->rank);
        first = ax < first ? ax : first;
    }
    if (first + a->n_axes != s->rank)
        return kc_fail(KC_ERR_UNSUPPORTED, "LayerNormalization over non-trailing axes");
    int64_t len = 1;
    for (int i = first; i < s->rank; i++)
        len *= s->dims[i];
    int64_t rows = kc_count(s) / (len ? len : 1);
    const float *gamma = (a->scale || a->rms_scaling) ? kc_w(ctx, 0) : NULL;
    const float *beta = (a->center && !a->rms_scaling) ? kc_w(ctx, gamma ? 1 : 0) : NULL;
    kc_isa_level isa = kc_isa();
    kc_ln_job job = {a, ctx->in[0], ctx->out[0], gamma, beta, len,
                     isa == KC_ISA_AVX512 ? kc_ln_row_avx512
                     : isa == KC_ISA_AVX2 ? kc_ln_row_avx2 : kc_ln_row_plain};
    kc_parallel_for(rows, 2 * rows * len * (int64_t)sizeof(float), 1, kc_ln_rows, &job);
    return KC_OK;
}

/* GroupNormalization over the channel axis (last), statistics per sample
 * and group over all other axes. */
static kc_status kc_groupnorm(const kc_exec_ctx *ctx)
{
    const kc_norm_attrs *a = ctx->layer->attrs;
    const kc_shape *s = &ctx->in_shape[0];
    if (kc_norm_axis(a, 0, s->rank) != s->rank - 1)
        return kc_fail(KC_ERR_UNSUPPORTED, "GroupNormalization on a non-last axis");
    int64_t n = s->dims[0], c = s->dims[s->rank - 1];
    int64_t groups = a->groups == -1 ? c : a->groups, cg = c / groups;
    int64_t cells = n * c > 0 ? kc_count(s) / (n * c) : 0;
    int w = 0;
    const float *gamma = a->scale ? kc_w(ctx, w++) : NULL;
    const float *beta = a->center ? kc_w(ctx, w++) : NULL;
    for (int64_t b = 0; b < n; b++)
        for (int64_t g = 0; g < groups; g++) {
            double mean = 0, var = 0;
            const float *x = ctx->in[0] + b * cells * c + g * cg;
            for (int64_t i = 0; i < cells; i++)
                for (int64_t j = 0; j < cg; j++)
                    mean += x[i * c + j];
            mean /= (double)(cells * cg);
            for (int64_t i = 0; i < cells; i++)
                for (int64_t j = 0; j < cg; j++)
                    var += (x[i * c + j] - mean) * (x[i * c + j] - mean);
            var /= (double)(cells * cg);
            double inv = 1.0 / sqrt(var + a->epsilon);
            float *y = ctx->out[0] + b * cells * c + g * cg;
            for (int64_t i = 0; i < cells; i++)
                for (int64_t j = 0; j < cg; j++) {
                    int64_t ch = g * cg + j;
                    y[i * c + j] = (float)((x[i * c + j] - mean) * inv * (gamma ? gamma[ch] : 1.0) +
                                           (beta ? beta[ch] : 0.0));
                }
        }
    return KC_OK;
}

/* x / max(||x||_2, 1e-12) over the axis (last-axis form). */
static kc_status kc_unitnorm(const kc_exec_ctx *ctx)
{
    const kc_norm_attrs *a = ctx->layer->attrs;
    const kc_shape *s = &ctx->in_shape[0];
    int64_t outer, len, inner;
    kc_axis_view(s, kc_norm_axis(a, 0, s->rank), &outer, &len, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *x = ctx->in[0] + o * len * inner + i;
            float *y = ctx->out[0] + o * len * inner + i;
            double ss = 0;
            for (int64_t k = 0; k < len; k++)
                ss += (double)x[k * inner] * x[k * inner];
            double inv = 1.0 / fmax(sqrt(ss), 1e-12);
            for (int64_t k = 0; k < len; k++)
                y[k * inner] = (float)(x[k * inner] * inv);
        }
    return KC_OK;
}

const kc_kernel_entry kc_kernels_norm[] = {
    {"BatchNormalization", 0, kc_batchnorm},
    {"BatchNormalizationV1", 0, kc_batchnorm},
    {"LayerNormalization", 0, kc_layernorm},
    {"GroupNormalization", 0, kc_groupnorm},
    {"UnitNormalization", 0, kc_unitnorm},
    {NULL, 0, NULL},
};
