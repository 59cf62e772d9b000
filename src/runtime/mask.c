#include "runtime/mask.h"

#include <stdlib.h>
#include <string.h>

#include "ops/core.h"
#include "ops/op.h"
#include "ops/rnn.h"

static const char *const kc_mask_passers[] = {
    "Activation", "Dense", "BatchNormalization", "LayerNormalization", "TimeDistributed",
    "ReLU", "LeakyReLU", "PReLU", "ELU", "Softmax", "ThresholdedReLU", NULL};

static int kc_mask_passes(const kc_layer *layer)
{
    if (layer->def && (layer->def->flags & KC_OPF_IDENTITY))
        return 1;
    for (int i = 0; kc_mask_passers[i]; i++)
        if (strcmp(layer->class_name, kc_mask_passers[i]) == 0)
            return 1;
    const char *c = layer->class_name;
    if (!strcmp(c, "LSTM") || !strcmp(c, "GRU") || !strcmp(c, "SimpleRNN") ||
        !strcmp(c, "CuDNNLSTM") || !strcmp(c, "CuDNNGRU"))
        return ((const kc_rnn_attrs *)layer->attrs)->return_sequences;
    if (!strcmp(c, "Bidirectional"))
        return ((const kc_bidirectional_attrs *)layer->attrs)->fwd_attrs.return_sequences;
    return 0;
}

unsigned char *kc_mask_after(const kc_node *node, const float *in0, const kc_shape *in0_shape,
                             const kc_shape *out0_shape, unsigned char *in_mask, int *owned)
{
    const kc_layer *layer = node->layer;
    *owned = 0;
    if (!strcmp(layer->class_name, "Masking") && in0_shape->rank == 3) {
        const kc_masking_attrs *a = layer->attrs;
        int64_t n = in0_shape->dims[0] * in0_shape->dims[1], f = in0_shape->dims[2];
        unsigned char *m = malloc((size_t)(n ? n : 1));
        if (!m)
            return NULL;
        for (int64_t i = 0; i < n; i++) {
            m[i] = 0;
            for (int64_t j = 0; j < f && !m[i]; j++)
                m[i] = in0[i * f + j] != (float)a->mask_value;
        }
        *owned = 1;
        return m;
    }
    if (!strcmp(layer->class_name, "Embedding") && in0_shape->rank == 2 &&
        ((const kc_embedding_attrs *)layer->attrs)->mask_zero) {
        int64_t n = in0_shape->dims[0] * in0_shape->dims[1];
        unsigned char *m = malloc((size_t)(n ? n : 1));
        if (!m)
            return NULL;
        for (int64_t i = 0; i < n; i++)
            m[i] = (int64_t)in0[i] != 0;
        *owned = 1;
        return m;
    }
    if (in_mask && out0_shape->rank >= 2 && in0_shape->rank >= 2 &&
        out0_shape->dims[1] == in0_shape->dims[1] && kc_mask_passes(layer))
        return in_mask;
    return NULL;
}
