/* Core layers: Dense, Activation, Embedding, Masking. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dense.h"
#include "kernels/dnnl_matmul.h"
#include "kernels/kernel.h"
#include "ops/core.h"

/* y = act(x·W + b) over the last axis of an N-D input. */
static kc_status kc_dense(const kc_exec_ctx *ctx)
{
    const kc_dense_attrs *a = ctx->layer->attrs;
    const kc_shape *in = &ctx->in_shape[0];
    int64_t k = in->dims[in->rank - 1];
    int64_t m = kc_count(in) / (k ? k : 1);
    int64_t n = a->units;
    float *y = ctx->out[0];
    int handled = 0, act_done = 0;
    KC_TRY(kc_dense_own(ctx, &handled));
    if (!handled)
        KC_TRY(kc_dnnl_dense(ctx, &handled, &act_done));
    if (handled)
        return act_done ? KC_OK : kc_activation_apply(a->activation, ctx->keras_major, y, m * n, n);
    /* a fused residual (accumulate): y holds it; the product goes to a
     * buffer and is added after, as the Add layer would */
    float *t = a->accumulate ? kc_scratch(m * n) : y;
    if (!t)
        return KC_ERR_NOMEM;
    const float *bias = a->use_bias ? kc_w(ctx, 1) : NULL;
    if (bias)
        for (int64_t r = 0; r < m; r++)
            memcpy(t + r * n, bias, (size_t)n * sizeof *t);
    kc_gemm(m, n, k, ctx->in[0], kc_w(ctx, 0), t, bias != NULL);
    if (t != y) {
        for (int64_t i = 0; i < m * n; i++)
            y[i] += t[i];
        free(t);
    }
    return kc_activation_apply(a->activation, ctx->keras_major, y, m * n, n);
}

static kc_status kc_activation_layer(const kc_exec_ctx *ctx)
{
    const kc_activation_attrs *a = ctx->layer->attrs;
    const kc_shape *s = &ctx->out_shape[0];
    int64_t n = kc_count(s);
    return kc_activation_apply_from(a->activation, ctx->keras_major, ctx->in[0], ctx->out[0], n,
                                    s->rank ? s->dims[s->rank - 1] : 1);
}

/* Rows of the embedding matrix by index; an index outside [0, input_dim)
 * is an error (Keras on CPU raises too). */
static kc_status kc_embedding(const kc_exec_ctx *ctx)
{
    const kc_embedding_attrs *a = ctx->layer->attrs;
    const float *table = kc_w(ctx, 0);
    int64_t n = kc_count(&ctx->in_shape[0]);
    for (int64_t i = 0; i < n; i++) {
        /* Keras casts float indices to int32 (truncation) before the
         * lookup. */
        float f = ctx->in[0][i];
        if (!(f > -1.0f) || !(f < (float)a->input_dim))
            return kc_fail(KC_ERR_ARG, "index %g at position %lld is outside [0, %lld)",
                           (double)f, (long long)i, (long long)a->input_dim);
        int64_t idx = (int64_t)f;
        memcpy(ctx->out[0] + i * a->output_dim, table + idx * a->output_dim,
               (size_t)a->output_dim * sizeof(float));
    }
    return KC_OK;
}

/* Masking passes values through; the mask it implies is consumed by the
 * recurrent kernels, which skip timesteps whose features all equal
 * mask_value (see rnn.c). */
static kc_status kc_masking(const kc_exec_ctx *ctx)
{
    memcpy(ctx->out[0], ctx->in[0], (size_t)kc_count(&ctx->out_shape[0]) * sizeof(float));
    return KC_OK;
}

const kc_kernel_entry kc_kernels_core[] = {
    {"Dense", 0, kc_dense},
    {"Activation", 0, kc_activation_layer},
    {"Embedding", 0, kc_embedding},
    {"Masking", 0, kc_masking},
    {NULL, 0, NULL},
};
