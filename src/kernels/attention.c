/* Attention: MultiHeadAttention (Keras einsum form: per-head projections,
 * scaled dot product, masked softmax, output projection), Attention (dot /
 * concat scores) and AdditiveAttention. Masked positions get Keras's
 * large negative number (-1e9) before the softmax. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernel.h"
#include "ops/attention.h"

#define KC_MASK_NEG (-1e9f)

static int kc_kwarg_true(const kc_exec_ctx *ctx, const char *key)
{
    const cJSON *v = ctx->node->call_kwargs
                         ? cJSON_GetObjectItemCaseSensitive(ctx->node->call_kwargs, key)
                         : NULL;
    return cJSON_IsTrue(v);
}

/* (rows, f) · W (f, h*d) + b -> (rows, h*d): a Dense over the projection. */
static void kc_project(const float *x, int64_t rows, int64_t f, const float *w, const float *b,
                       int64_t hd, float *out)
{
    if (b)
        for (int64_t r = 0; r < rows; r++)
            memcpy(out + r * hd, b, (size_t)hd * sizeof *out);
    kc_gemm(rows, hd, f, x, w, out, b != NULL);
}

/* Mask value for (batch b, query i, key j): attention_mask (B, Tq, Tv)
 * broadcast, query/value masks (B, T), and the causal triangle. */
static int kc_attend(const kc_exec_ctx *ctx, const kc_attention_inputs *io, int causal, int64_t b,
                     int64_t i, int64_t j, int64_t tq, int64_t tv)
{
    if (causal && j > i)
        return 0;
    if (io->attention_mask >= 0) {
        const kc_shape *ms = &ctx->in_shape[io->attention_mask];
        int64_t mq = ms->dims[ms->rank - 2], mv = ms->dims[ms->rank - 1];
        int64_t mb = ms->rank == 3 ? ms->dims[0] : 1;
        const float *m = ctx->in[io->attention_mask];
        if (m[((mb > 1 ? b : 0) * mq + (mq > 1 ? i : 0)) * mv + (mv > 1 ? j : 0)] == 0.0f)
            return 0;
    }
    if (io->query_mask >= 0 && ctx->in[io->query_mask][b * tq + i] == 0.0f)
        return 0;
    if (io->value_mask >= 0 && ctx->in[io->value_mask][b * tv + j] == 0.0f)
        return 0;
    return 1;
}

/* Softmax the scores p[0..tv) (max mx already found), store them in
 * scores_row if non-NULL, and accumulate o = sum_j p[j] * v_j where row j
 * of the values starts at v + j * v_stride. */
static void kc_attend_row(float *p, int64_t tv, float mx, float *scores_row, const float *v,
                          int64_t v_stride, int64_t dv, float *o)
{
    double sum = 0;
    for (int64_t j = 0; j < tv; j++) {
        p[j] = expf(p[j] - mx);
        sum += p[j];
    }
    memset(o, 0, (size_t)dv * sizeof *o);
    for (int64_t j = 0; j < tv; j++) {
        p[j] = (float)(p[j] / sum);
        if (scores_row)
            scores_row[j] = p[j];
        const float *vj = v + j * v_stride;
        for (int64_t d = 0; d < dv; d++)
            o[d] += p[j] * vj[d];
    }
}

static kc_status kc_mha(const kc_exec_ctx *ctx)
{
    const kc_mha_attrs *a = ctx->layer->attrs;
    kc_attention_inputs io;
    kc_mha_bind_inputs(ctx->node->input_roles, ctx->n_in, &io);
    if (io.query < 0 || io.value < 0)
        return kc_fail(KC_ERR_FORMAT, "MultiHeadAttention call without query and value");
    if (io.key < 0)
        io.key = io.value;
    const kc_shape *qs = &ctx->in_shape[io.query], *vs = &ctx->in_shape[io.value],
                   *ks = &ctx->in_shape[io.key];
    int64_t B = qs->dims[0], fq = qs->dims[qs->rank - 1], fv = vs->dims[vs->rank - 1],
            fk = ks->dims[ks->rank - 1];
    int64_t tq = kc_count(qs) / (B * fq), tv = kc_count(vs) / (B * fv);
    int64_t H = a->num_heads, dk = a->key_dim, dv = a->value_dim;
    const kc_shape *os = &ctx->out_shape[0];
    int64_t dout = os->dims[os->rank - 1];
    int w = 0;
    const float *wq = kc_w(ctx, w++), *bq = a->use_bias ? kc_w(ctx, w++) : NULL;
    const float *wk = kc_w(ctx, w++), *bk = a->use_bias ? kc_w(ctx, w++) : NULL;
    const float *wv = kc_w(ctx, w++), *bv = a->use_bias ? kc_w(ctx, w++) : NULL;
    const float *wo = kc_w(ctx, w++), *bo = a->use_bias ? kc_w(ctx, w++) : NULL;
    float *Q = kc_scratch(B * tq * H * dk), *K = kc_scratch(B * tv * H * dk);
    float *V = kc_scratch(B * tv * H * dv), *ctxv = kc_scratch(B * tq * H * dv);
    float *p = kc_scratch(tv);
    if (!Q || !K || !V || !ctxv || !p) {
        free(Q), free(K), free(V), free(ctxv), free(p);
        return KC_ERR_NOMEM;
    }
    kc_project(ctx->in[io.query], B * tq, fq, wq, bq, H * dk, Q);
    kc_project(ctx->in[io.key], B * tv, fk, wk, bk, H * dk, K);
    kc_project(ctx->in[io.value], B * tv, fv, wv, bv, H * dv, V);
    int causal = kc_kwarg_true(ctx, "use_causal_mask");
    float scale = 1.0f / sqrtf((float)dk);
    float *scores = ctx->n_out > 1 ? ctx->out[1] : NULL; /* (B, H, Tq, Tv) */
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < tq; i++) {
                const float *q = Q + ((b * tq + i) * H + h) * dk;
                float mx = -INFINITY;
                for (int64_t j = 0; j < tv; j++) {
                    const float *k = K + ((b * tv + j) * H + h) * dk;
                    double s = 0;
                    for (int64_t d = 0; d < dk; d++)
                        s += (double)q[d] * scale * k[d];
                    p[j] = (float)s;
                    if (!kc_attend(ctx, &io, causal, b, i, j, tq, tv))
                        p[j] += KC_MASK_NEG;
                    mx = fmaxf(mx, p[j]);
                }
                kc_attend_row(p, tv, mx, scores ? scores + ((b * H + h) * tq + i) * tv : NULL,
                              V + ((b * tv) * H + h) * dv, H * dv, dv,
                              ctxv + ((b * tq + i) * H + h) * dv);
            }
    /* output: (B*Tq, H*dv) · Wo (H*dv, dout) + bo */
    kc_project(ctxv, B * tq, H * dv, wo, bo, dout, ctx->out[0]);
    free(Q), free(K), free(V), free(ctxv), free(p);
    return KC_OK;
}

/* Attention / AdditiveAttention on (B, Tq, d) query and (B, Tv, d) value. */
static kc_status kc_dot_attention(const kc_exec_ctx *ctx)
{
    const kc_dot_attention_attrs *a = ctx->layer->attrs;
    kc_attention_inputs io;
    kc_dot_attention_bind_inputs(ctx->node->input_roles, ctx->n_in, &io);
    if (io.query < 0 || io.value < 0)
        return kc_fail(KC_ERR_FORMAT, "attention call without query and value");
    if (io.key < 0)
        io.key = io.value;
    const kc_shape *qs = &ctx->in_shape[io.query], *vs = &ctx->in_shape[io.value];
    int64_t B = qs->dims[0], tq = qs->dims[1], d = qs->dims[2], tv = vs->dims[1],
            dv = vs->dims[2];
    const float *q = ctx->in[io.query], *k = ctx->in[io.key], *v = ctx->in[io.value];
    int w = 0;
    const float *scale = a->use_scale ? kc_w(ctx, w++) : NULL;
    const float *concat_w = (!a->additive && a->score_mode == KC_SCORE_CONCAT) ? kc_w(ctx, w++) : NULL;
    int causal = a->causal || kc_kwarg_true(ctx, "use_causal_mask");
    /* Keras masks the scores with the value mask only; a masked query row
     * is zeroed in the output afterwards. */
    int query_mask = io.query_mask;
    io.query_mask = -1;
    float *p = kc_scratch(tv);
    if (!p)
        return KC_ERR_NOMEM;
    float *scores = ctx->n_out > 1 ? ctx->out[1] : NULL;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < tq; i++) {
            const float *qi = q + (b * tq + i) * d;
            float mx = -INFINITY;
            for (int64_t j = 0; j < tv; j++) {
                const float *kj = k + (b * tv + j) * d;
                double s = 0;
                for (int64_t c = 0; c < d; c++) {
                    if (a->additive)
                        s += (scale ? scale[c] : 1.0) * tanh((double)qi[c] + kj[c]);
                    else if (concat_w)
                        s += tanh((scale ? scale[0] : 1.0) * ((double)qi[c] + kj[c]));
                    else
                        s += (double)qi[c] * kj[c];
                }
                if (concat_w)
                    s *= concat_w[0];
                if (!a->additive && !concat_w && scale)
                    s *= scale[0];
                p[j] = (float)s;
                if (!kc_attend(ctx, &io, causal, b, i, j, tq, tv))
                    p[j] += KC_MASK_NEG;
                mx = fmaxf(mx, p[j]);
            }
            float *o = ctx->out[0] + (b * tq + i) * dv;
            kc_attend_row(p, tv, mx, scores ? scores + (b * tq + i) * tv : NULL,
                          v + b * tv * dv, dv, dv, o);
            if (query_mask >= 0 && ctx->in[query_mask][b * tq + i] == 0.0f)
                memset(o, 0, (size_t)dv * sizeof *o);
        }
    free(p);
    return KC_OK;
}

const kc_kernel_entry kc_kernels_attention[] = {
    {"MultiHeadAttention", 0, kc_mha},
    {"Attention", 0, kc_dot_attention},
    {"AdditiveAttention", 0, kc_dot_attention},
    {NULL, 0, NULL},
};
