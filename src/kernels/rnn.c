/* Recurrent layers: LSTM, GRU (reset_after both ways), SimpleRNN, the
 * CuDNN variants, Bidirectional and TimeDistributed. The input projection
 * x·W of every timestep is one GEMM; each step then adds h·U. Gate
 * formulas follow Keras (LSTM gates i, f, c, o; GRU z, r, h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/threads.h"
#include "kernels/kernel.h"
#include "ops/rnn.h"

typedef struct kc_rnn_weights {
    const float *kernel;     /* (in, G) */
    const float *recurrent;  /* (u, G) */
    const float *bias;       /* (G) input bias, or NULL */
    const float *rec_bias;   /* (G) recurrent bias (GRU reset_after, CuDNN), or NULL */
} kc_rnn_weights;

static int64_t kc_rnn_gates(const kc_rnn_attrs *a)
{
    switch (a->kind) {
    case KC_RNN_LSTM: case KC_RNN_CUDNN_LSTM: return 4;
    case KC_RNN_GRU: case KC_RNN_CUDNN_GRU: return 3;
    default: return 1;
    }
}

/* The layer's weights from index `first` on (kc_w: streamed or own). */
static kc_rnn_weights kc_rnn_bind(const kc_rnn_attrs *a, const kc_exec_ctx *ctx, int first)
{
    const float *w[3] = {kc_w(ctx, first), kc_w(ctx, first + 1), kc_w(ctx, first + 2)};
    kc_rnn_weights r = {w[0], w[1], NULL, NULL};
    int64_t g = kc_rnn_gates(a) * a->units;
    if (a->kind == KC_RNN_CUDNN_LSTM || a->kind == KC_RNN_CUDNN_GRU ||
        (a->kind == KC_RNN_GRU && a->reset_after)) {
        r.bias = a->use_bias ? w[2] : NULL;
        r.rec_bias = a->use_bias ? w[2] + g : NULL;
    } else if (a->use_bias) {
        r.bias = w[2];
    }
    return r;
}

/* Activation of the gates with this layer's Keras version semantics. */
static kc_status kc_act(const char *name, int keras_major, float *x, int64_t n)
{
    return kc_activation_apply(name, keras_major, x, n, n);
}

/* Run one direction over x (N, T, in). seq (N, T, u) receives every step's
 * output in processing order when non-NULL; h and c receive final states.
 * mask (N, T) skips steps (state carried, output repeated) when non-NULL. */
static kc_status kc_rnn_run(const kc_rnn_attrs *a, const kc_rnn_weights *w, const float *x,
                            int64_t n, int64_t t, int64_t in, const unsigned char *mask,
                            int zero_masked, float *seq, float *h, float *c)
{
    int64_t u = a->units, G = kc_rnn_gates(a) * u;
    int km = a->keras_major;
    float *xw = kc_scratch(n * t * G), *hu = kc_scratch(n * G), *tmp = kc_scratch(n * G);
    if (!xw || !hu || !tmp) {
        free(xw);
        free(hu);
        free(tmp);
        return KC_ERR_NOMEM;
    }
    kc_gemm(n * t, G, in, x, w->kernel, xw, 0);
    memset(h, 0, (size_t)(n * u) * sizeof *h);
    if (c)
        memset(c, 0, (size_t)(n * u) * sizeof *c);
    kc_status st = KC_OK;
    /* hu = h·U's columns a step reads: a reset_after=False GRU's
     * candidate takes (r * h)·U_h below, not h·U_h (its third of hu is
     * that product's scratch) */
    int64_t read = a->kind == KC_RNN_GRU && !a->reset_after ? 2 * u : G;
    for (int64_t step = 0; step < t && st == KC_OK; step++) {
        int64_t ts = a->go_backwards ? t - 1 - step : step;
        kc_gemm_ld(n, read, u, h, u, w->recurrent, G, 0, hu, G, 0);
        for (int64_t b = 0; b < n; b++) {
            float *z = tmp + b * G;
            const float *xz = xw + (b * t + ts) * G;
            float *hz = hu + b * G;
            float *hb = h + b * u;
            if (mask && !mask[b * t + ts]) {
                /* A masked step leaves the state alone; its output is the
                 * previous output (zeros inside Bidirectional, Keras's
                 * zero_output_for_mask). */
                if (seq && zero_masked)
                    memset(seq + (b * t + step) * u, 0, (size_t)u * sizeof *hb);
                else if (seq)
                    memcpy(seq + (b * t + step) * u, hb, (size_t)u * sizeof *hb);
                continue;
            }
            if (a->kind == KC_RNN_GRU || a->kind == KC_RNN_CUDNN_GRU) {
                int after = a->kind == KC_RNN_CUDNN_GRU || a->reset_after;
                for (int64_t j = 0; j < 2 * u; j++)
                    z[j] = xz[j] + hz[j] + (w->bias ? w->bias[j] : 0) +
                           (w->rec_bias ? w->rec_bias[j] : 0);
                st = kc_act(a->recurrent_activation, km, z, 2 * u);
                if (st != KC_OK)
                    break;
                float *cand = z + 2 * u;
                if (after) {
                    for (int64_t j = 0; j < u; j++)
                        cand[j] = xz[2 * u + j] + (w->bias ? w->bias[2 * u + j] : 0) +
                                  z[u + j] * (hz[2 * u + j] + (w->rec_bias ? w->rec_bias[2 * u + j] : 0));
                } else {
                    /* x·W_h + b_h + (r * h)·U_h, as Keras computes it (in
                     * float), one GEMV per sample (its bits whatever the
                     * batch). It was a loop in double down U_h's columns
                     * (stride 3u): a 128-unit layer over 100 steps took
                     * 1.8 ms at batch 1. rh borrows hu's candidate third,
                     * which this form does not read. */
                    float *rh = hz + 2 * u;
                    for (int64_t j = 0; j < u; j++) {
                        rh[j] = z[u + j] * hb[j];
                        cand[j] = xz[2 * u + j] + (w->bias ? w->bias[2 * u + j] : 0);
                    }
                    kc_gemm_ld(1, u, u, rh, u, w->recurrent + 2 * u, G, 0, cand, u, 1);
                }
                st = kc_act(a->activation, km, cand, u);
                for (int64_t j = 0; j < u; j++)
                    hb[j] = z[j] * hb[j] + (1.0f - z[j]) * cand[j];
            } else if (a->kind == KC_RNN_LSTM || a->kind == KC_RNN_CUDNN_LSTM) {
                for (int64_t j = 0; j < G; j++)
                    z[j] = xz[j] + hz[j] + (w->bias ? w->bias[j] : 0) +
                           (w->rec_bias ? w->rec_bias[j] : 0);
                /* i, f, o through the recurrent activation; c~ through act */
                st = kc_act(a->recurrent_activation, km, z, 2 * u);
                if (st == KC_OK)
                    st = kc_act(a->recurrent_activation, km, z + 3 * u, u);
                if (st == KC_OK)
                    st = kc_act(a->activation, km, z + 2 * u, u);
                float *cb = c + b * u;
                for (int64_t j = 0; j < u && st == KC_OK; j++)
                    cb[j] = z[u + j] * cb[j] + z[j] * z[2 * u + j];
                memcpy(hb, cb, (size_t)u * sizeof *hb);
                if (st == KC_OK)
                    st = kc_act(a->activation, km, hb, u);
                for (int64_t j = 0; j < u; j++)
                    hb[j] *= z[3 * u + j];
            } else {
                for (int64_t j = 0; j < u; j++)
                    hb[j] = xz[j] + hz[j] + (w->bias ? w->bias[j] : 0);
                st = kc_act(a->activation, km, hb, u);
            }
            if (seq)
                memcpy(seq + (b * t + step) * u, hb, (size_t)u * sizeof *hb);
        }
    }
    free(xw);
    free(hu);
    free(tmp);
    return st;
}

static kc_status kc_rnn_layer(const kc_exec_ctx *ctx)
{
    const kc_rnn_attrs *a = ctx->layer->attrs;
    if (ctx->n_in > 1)
        return kc_fail(KC_ERR_UNSUPPORTED, "recurrent layer with initial states or an explicit "
                       "mask input");
    const kc_shape *s = &ctx->in_shape[0];
    int64_t n = s->dims[0], t = s->dims[1], in = s->dims[2], u = a->units;
    kc_rnn_weights w = kc_rnn_bind(a, ctx, 0);
    float *h = kc_scratch(n * u), *c = kc_scratch(n * u);
    if (!h || !c) {
        free(h);
        free(c);
        return KC_ERR_NOMEM;
    }
    int o = 0;
    kc_status st = kc_rnn_run(a, &w, ctx->in[0], n, t, in, ctx->in_mask, 0,
                              a->return_sequences ? ctx->out[o] : NULL, h, c);
    if (st == KC_OK && !a->return_sequences)
        memcpy(ctx->out[o], h, (size_t)(n * u) * sizeof *h);
    o++;
    if (st == KC_OK && a->return_state) {
        memcpy(ctx->out[o++], h, (size_t)(n * u) * sizeof *h);
        if (a->n_states == 2)
            memcpy(ctx->out[o++], c, (size_t)(n * u) * sizeof *c);
    }
    free(h);
    free(c);
    return st;
}

/* The two directions of a Bidirectional layer, run side by side. */
typedef struct kc_bidir_job {
    const kc_rnn_attrs *attrs[2];
    const kc_rnn_weights *w[2];
    const float *x;
    int64_t n, t, in;
    const unsigned char *mask;
    int seqs;
    float *seq[2], *h[2], *c[2];
    kc_status status[2];
} kc_bidir_job;

static void kc_bidir_direction(void *arg, int k)
{
    kc_bidir_job *j = arg;
    j->status[k] = kc_rnn_run(j->attrs[k], j->w[k], j->x, j->n, j->t, j->in, j->mask, j->seqs,
                              j->seq[k], j->h[k], j->c[k]);
}

/* Bidirectional: the backward layer runs on the reversed sequence; its
 * per-step outputs are re-reversed so step t lines up with the forward
 * output at t, then both are merged. The directions are independent: on
 * two or more threads each runs on its own (a step's small GEMMs ran on
 * the calling thread alone anyway; the input projections then too: the
 * same bits as one thread, tests/e2e/real_models.sh). The real
 * `quora_bilstm_tf2110.h5` (128 units, 222 steps) at batch 1 on the 2-core
 * Zen 5: 1.90 -> 0.98-1.02 ms (1.34-1.37 -> 0.75-0.77 in a faster
 * phase). */
static kc_status kc_bidirectional(const kc_exec_ctx *ctx)
{
    const kc_bidirectional_attrs *a = ctx->layer->attrs;
    const kc_rnn_attrs *fa = &a->fwd_attrs, *ba = &a->bwd_attrs;
    if (ctx->n_in > 1)
        return kc_fail(KC_ERR_UNSUPPORTED, "Bidirectional with initial states or a mask input");
    const kc_shape *s = &ctx->in_shape[0];
    int64_t n = s->dims[0], t = s->dims[1], in = s->dims[2], u = fa->units;
    int seqs = fa->return_sequences;
    int64_t steps = seqs ? t : 1;
    kc_rnn_weights fw = kc_rnn_bind(fa, ctx, 0);
    kc_rnn_weights bw = kc_rnn_bind(ba, ctx, a->n_forward_specs);
    float *fseq = kc_scratch(n * t * u), *bseq = kc_scratch(n * t * u);
    float *fh = kc_scratch(n * u), *fc = kc_scratch(n * u);
    float *bh = kc_scratch(n * u), *bc = kc_scratch(n * u);
    kc_status st = (fseq && bseq && fh && fc && bh && bc) ? KC_OK : KC_ERR_NOMEM;
    kc_bidir_job job = {{fa, ba}, {&fw, &bw}, ctx->in[0], n, t, in, ctx->in_mask, seqs,
                        {fseq, bseq}, {fh, bh}, {fc, bc}, {KC_OK, KC_OK}};
    /* below ~2^18 multiply-adds waking the second thread costs more */
    int64_t work = n * t * kc_rnn_gates(fa) * u * (in + u);
    if (st == KC_OK && kc_parallel_width() >= 2 && work >= ((int64_t)1 << 18)) {
        kc_parallel(2, kc_bidir_direction, &job);
        for (int k = 0; k < 2 && st == KC_OK; k++)
            if (job.status[k] != KC_OK) /* the message stayed on that thread */
                st = kc_fail(job.status[k], "the %s direction of the Bidirectional layer failed",
                             k ? "backward" : "forward");
    } else if (st == KC_OK) {
        for (int k = 0; k < 2 && st == KC_OK; k++) {
            kc_bidir_direction(&job, k);
            st = job.status[k];
        }
    }
    for (int64_t b = 0; st == KC_OK && b < n; b++)
        for (int64_t k = 0; k < steps; k++) {
            const float *f = seqs ? fseq + (b * t + k) * u : fh + b * u;
            /* the backward layer processed step t-1-k at position k */
            const float *r = seqs ? bseq + (b * t + (t - 1 - k)) * u : bh + b * u;
            if (a->merge_mode == KC_MERGE_CONCAT) {
                float *o = ctx->out[0] + (b * steps + k) * 2 * u;
                memcpy(o, f, (size_t)u * sizeof *o);
                memcpy(o + u, r, (size_t)u * sizeof *o);
            } else if (a->merge_mode == KC_MERGE_NONE) {
                memcpy(ctx->out[0] + (b * steps + k) * u, f, (size_t)u * sizeof(float));
                memcpy(ctx->out[1] + (b * steps + k) * u, r, (size_t)u * sizeof(float));
            } else {
                float *o = ctx->out[0] + (b * steps + k) * u;
                for (int64_t j = 0; j < u; j++)
                    o[j] = a->merge_mode == KC_MERGE_SUM   ? f[j] + r[j]
                           : a->merge_mode == KC_MERGE_MUL ? f[j] * r[j]
                                                           : (f[j] + r[j]) * 0.5f;
            }
        }
    int o = a->merge_mode == KC_MERGE_NONE ? 2 : 1;
    if (st == KC_OK && fa->return_state) {
        memcpy(ctx->out[o++], fh, (size_t)(n * u) * sizeof(float));
        if (fa->n_states == 2)
            memcpy(ctx->out[o++], fc, (size_t)(n * u) * sizeof(float));
        memcpy(ctx->out[o++], bh, (size_t)(n * u) * sizeof(float));
        if (ba->n_states == 2)
            memcpy(ctx->out[o++], bc, (size_t)(n * u) * sizeof(float));
    }
    free(fseq);
    free(bseq);
    free(fh);
    free(fc);
    free(bh);
    free(bc);
    return st;
}

/* TimeDistributed: the inner layer's kernel on (N*T, ...). */
static kc_status kc_time_distributed(const kc_exec_ctx *ctx)
{
    const kc_time_distributed_attrs *a = ctx->layer->attrs;
    kc_kernel_fn fn = kc_kernel_lookup(a->inner.def);
    if (!fn)
        return kc_fail(KC_ERR_UNSUPPORTED, "no CPU kernel for the wrapped %s",
                       a->inner.class_name);
    kc_shape in = ctx->in_shape[0], out = ctx->out_shape[0];
    /* fold time into batch */
    kc_shape fin = {.rank = in.rank - 1}, fout = {.rank = out.rank - 1};
    fin.dims[0] = in.dims[0] * in.dims[1];
    fout.dims[0] = out.dims[0] * out.dims[1];
    for (int i = 2; i < in.rank; i++)
        fin.dims[i - 1] = in.dims[i];
    for (int i = 2; i < out.rank; i++)
        fout.dims[i - 1] = out.dims[i];
    kc_layer inner = a->inner;
    inner.weights = ctx->layer->weights;
    inner.n_weights = ctx->layer->n_weights;
    kc_exec_ctx sub = *ctx;
    sub.layer = &inner;
    sub.in_shape = &fin;
    sub.out_shape = &fout;
    sub.n_in = 1;
    sub.n_out = 1;
    return fn(&sub);
}

const kc_kernel_entry kc_kernels_rnn[] = {
    {"LSTM", 0, kc_rnn_layer},      {"GRU", 0, kc_rnn_layer},
    {"SimpleRNN", 0, kc_rnn_layer}, {"RNN", 0, kc_rnn_layer}, {"CuDNNLSTM", 0, kc_rnn_layer},
    {"CuDNNGRU", 0, kc_rnn_layer},  {"Bidirectional", 0, kc_bidirectional},
    {"TimeDistributed", 0, kc_time_distributed}, {NULL, 0, NULL},
};
