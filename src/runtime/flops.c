/* A node's floating-point operations, for the residency cost model and the
 * stats (multiply-adds count as two, as every benchmark counts them). */
#include <string.h>

#include "ops/conv.h"
#include "ops/core.h"
#include "ops/op.h"
#include "runtime/sched.h"

double kc_node_flops(const kc_node *node, const kc_layer *layer, const kc_plan *plan)
{
    if (!node->n_outputs)
        return 0;
    const kc_shape *out = &plan->shape[node->outputs[0]];
    double out_count = (double)kc_shape_count(out);
    const char *c = layer->class_name;
    if (strstr(c, "Conv") && node->n_inputs && layer->attrs) {
        const kc_conv_attrs *a = layer->attrs;
        const kc_shape *in = &plan->shape[node->inputs[0]];
        double window = 1;
        for (int i = 0; i < a->spatial && i < 3; i++)
            window *= (double)a->kernel[i];
        double cin = (double)in->dims[in->rank - 1];
        if (a->kind == KC_CONV_DEPTHWISE)
            return 2 * out_count * window;
        if (a->kind == KC_CONV_SEPARABLE)
            return 2 * (double)kc_shape_count(in) * window + 2 * out_count * cin;
        double groups = a->groups > 0 ? (double)a->groups : 1;
        return 2 * out_count * window * cin / groups;
    }
    if (!strcmp(c, "Dense") && node->n_inputs) {
        const kc_shape *in = &plan->shape[node->inputs[0]];
        return 2 * out_count * (double)in->dims[in->rank - 1];
    }
    /* Everything else is proportional to what it writes. */
    return out_count;
}
