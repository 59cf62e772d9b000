/* Activation layers with parameters: ReLU, LeakyReLU, PReLU, ELU, Softmax,
 * ThresholdedReLU. */
#include <math.h>
#include <string.h>

#include "base/threads.h"
#include "kernels/kernel.h"
#include "ops/activation.h"

/* Keras ReLU: max_value if x >= max_value; x if threshold <= x;
 * negative_slope * (x - threshold) otherwise. */
static float kc_relu_ex(float x, const kc_act_layer_attrs *a)
{
    if (a->max_value >= 0 && x >= a->max_value)
        return (float)a->max_value;
    if (x >= a->threshold)
        return x;
    return (float)(a->negative_slope * (x - a->threshold));
}

/* ReLU, LeakyReLU, ELU and ThresholdedReLU over elements [lo, hi). */
typedef struct kc_act_layer_job {
    const kc_act_layer_attrs *a;
    const float *x;
    float *y;
} kc_act_layer_job;

static void kc_act_layer_range(void *arg, int64_t lo, int64_t hi)
{
    const kc_act_layer_job *j = arg;
    const kc_act_layer_attrs *a = j->a;
    const float *x = j->x;
    float *y = j->y;
    switch (a->kind) {
    case KC_ACT_RELU:
        for (int64_t i = lo; i < hi; i++)
            y[i] = kc_relu_ex(x[i], a);
        break;
    case KC_ACT_LEAKY:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] >= 0 ? x[i] : (float)a->negative_slope * x[i];
        break;
    case KC_ACT_ELU:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] > 0 ? x[i] : (float)a->alpha * expm1f(x[i]);
        break;
    case KC_ACT_THRESHOLDED:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] > a->alpha ? x[i] : 0.0f;
        break;
    default: break;
    }
}

static kc_status kc_act_layer(const kc_exec_ctx *ctx)
{
    const kc_act_layer_attrs *a = ctx->layer->attrs;
    const kc_shape *s = &ctx->in_shape[0];
    int64_t n = kc_count(s);
    const float *x = ctx->in[0];
    float *y = ctx->out[0];
    switch (a->kind) {
    case KC_ACT_RELU: case KC_ACT_LEAKY: case KC_ACT_ELU: case KC_ACT_THRESHOLDED: {
        kc_act_layer_job job = {a, x, y};
        kc_parallel_for(n, 2 * n * (int64_t)sizeof(float), 16, kc_act_layer_range, &job);
        return KC_OK;
    }
    case KC_ACT_PRELU: {
        /* alpha has the per-sample shape with shared axes of size 1. */
        const float *alpha = kc_w(ctx, 0);
        const kc_shape *as = &ctx->layer->weights[0].shape;
        int64_t per = n / s->dims[0], idx[KC_MAX_RANK] = {0};
        for (int64_t i = 0; i < n; i++) {
            int64_t j = i % per, off = 0, stride = 1;
            for (int d = s->rank - 1; d >= 1; d--) {
                idx[d] = j % s->dims[d];
                j /= s->dims[d];
                int64_t ad = as->dims[d - 1];
                off += (ad == 1 ? 0 : idx[d]) * stride;
                stride *= ad;
            }
            y[i] = x[i] >= 0 ? x[i] : alpha[off] * x[i];
        }
        return KC_OK;
    }
    case KC_ACT_SOFTMAX: {
        if (a->n_axes != 1)
            return kc_fail(KC_ERR_UNSUPPORTED, "Softmax over several axes");
        int axis = a->axes[0] < 0 ? a->axes[0] + s->rank : a->axes[0];
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < axis; i++)
            outer *= s->dims[i];
        for (int i = axis + 1; i < s->rank; i++)
            inner *= s->dims[i];
        memcpy(y, x, (size_t)n * sizeof *y);
        kc_softmax_axis(y, outer, s->dims[axis], inner);
        return KC_OK;
    }
    }
    return kc_fail(KC_ERR_UNSUPPORTED, "unknown activation layer kind");
}

const kc_kernel_entry kc_kernels_act[] = {
    {"ReLU", 0, kc_act_layer},    {"LeakyReLU", 0, kc_act_layer},
    {"PReLU", 0, kc_act_layer},   {"ELU", 0, kc_act_layer},
    {"Softmax", 0, kc_act_layer}, {"ThresholdedReLU", 0, kc_act_layer},
    {NULL, 0, NULL},
};
