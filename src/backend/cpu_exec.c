/* One node on the CPU kernels (see cpu_exec.h). */
#include "backend/cpu_exec.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/plan.h"

/* NC(spatial) <-> N(spatial)C for channels_first layers. */
static void kc_relayout(const float *in, float *out, const kc_shape *s, int to_last)
{
    int64_t n = s->dims[0], c = s->rank >= 3 ? (to_last ? s->dims[1] : s->dims[s->rank - 1]) : 1;
    int64_t per = n ? kc_count(s) / n : 0, sp = c ? per / c : 0;
    if (s->rank < 3) {
        memcpy(out, in, (size_t)kc_count(s) * sizeof *out);
        return;
    }
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t p = 0; p < sp; p++) {
                if (to_last)
                    out[b * per + p * c + ch] = in[b * per + ch * sp + p];
                else
                    out[b * per + ch * sp + p] = in[b * per + p * c + ch];
            }
}

/* Run a channels_first layer's NHWC kernel between two transposes. */
static kc_status kc_run_channels_first(kc_kernel_fn fn, const kc_exec_ctx *ctx)
{
    kc_shape in_shape[KC_MAX_NODE_IO], out_shape[KC_MAX_OUTPUTS];
    float *tout[KC_MAX_OUTPUTS] = {0};
    const float *in[KC_MAX_NODE_IO];
    for (int i = 0; i < ctx->n_in; i++) {
        in_shape[i] = ctx->in_shape[i];
        in[i] = ctx->in[i];
    }
    kc_shape_to_channels_last(&in_shape[0]);
    float *in0 = kc_scratch(kc_count(&ctx->in_shape[0]));
    kc_status st = in0 ? KC_OK : KC_ERR_NOMEM;
    if (st == KC_OK) {
        kc_relayout(ctx->in[0], in0, &ctx->in_shape[0], 1);
        in[0] = in0;
    }
    for (int i = 0; st == KC_OK && i < ctx->n_out; i++) {
        out_shape[i] = ctx->out_shape[i];
        kc_shape_to_channels_last(&out_shape[i]);
        if (!(tout[i] = kc_scratch(kc_count(&out_shape[i]))))
            st = KC_ERR_NOMEM;
    }
    kc_exec_ctx sub = *ctx;
    sub.in = in;
    sub.in_shape = in_shape;
    sub.out = tout;
    sub.out_shape = out_shape;
    if (st == KC_OK)
        st = fn(&sub);
    for (int i = 0; st == KC_OK && i < ctx->n_out; i++)
        kc_relayout(tout[i], ctx->out[i], &out_shape[i], 0);
    for (int i = 0; i < ctx->n_out; i++)
        free(tout[i]);
    free(in0);
    return st;
}

kc_status kc_cpu_exec(kc_kernel_fn fn, const kc_backend_call *call, kc_kernel_state **state,
                      int whole)
{
    kc_exec_ctx ctx = {
        .node = call->node,
        .layer = call->layer,
        .in = call->in,
        .in_shape = call->in_shape,
        .n_in = call->n_in,
        .out = call->out,
        .out_shape = call->out_shape,
        .n_out = call->n_out,
        .keras_major = call->keras_major,
        .in_mask = call->in_mask,
        .state = state,
        .w_ext = call->w,
        .exact = call->exact,
        .whole = whole,
        .wino_budget = call->wino_budget,
        .spare = call->spare,
        .spare_bytes = call->spare_bytes,
    };
    if (ctx.layer->channels_first && ctx.n_in > 0)
        return kc_run_channels_first(fn, &ctx);
    return fn(&ctx);
}
