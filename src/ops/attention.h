/* Attributes of the attention layers (MultiHeadAttention, Attention,
 * AdditiveAttention). */
#ifndef KC_OPS_ATTENTION_H
#define KC_OPS_ATTENTION_H

#include <stdint.h>

#include "base/tensor.h"

/* MultiHeadAttention. Weights, in order (Keras 3 groups query_dense,
 * key_dense, value_dense, output_dense; Keras 2 query, key, value,
 * attention_output): query kernel (qf, h, kd) [bias (h, kd)], key kernel
 * (kf, h, kd) [bias (h, kd)], value kernel (vf, h, vd) [bias (h, vd)],
 * output kernel (h, vd, *out) [bias (*out)]. Attention runs over every axis
 * between batch and features (the default attention_axes), so inputs of
 * rank > 3 flatten those axes. return_attention_scores and use_causal_mask
 * are call kwargs (node->call_kwargs); output 1, when present, is the
 * scores (batch, heads, *query_axes, *value_axes). */
typedef struct kc_mha_attrs {
    int64_t num_heads;
    int64_t key_dim;
    int64_t value_dim;          /* key_dim when the config leaves it unset */
    int use_bias;
    int64_t output_shape[KC_MAX_RANK];
    int n_output_shape;         /* 0: the query's feature size */
    int n_attention_axes;       /* -1: default (null); else raw values below */
    int attention_axes[KC_MAX_RANK];
    double dropout;             /* training only */
} kc_mha_attrs;

/* Which call input plays which part (-1 = absent). MultiHeadAttention
 * takes query, value, key positionally or by keyword; Attention and
 * AdditiveAttention take [query, value(, key)] as a list and masks by
 * keyword. Masks never change shapes. */
typedef struct kc_attention_inputs {
    int query, value, key;
    int query_mask, value_mask, key_mask, attention_mask;
} kc_attention_inputs;

/* Fills *out from the input roles of one call (kc_node.input_roles). */
int kc_mha_bind_inputs(char *const *roles, int n_in, kc_attention_inputs *out);
int kc_dot_attention_bind_inputs(char *const *roles, int n_in, kc_attention_inputs *out);

typedef enum kc_score_mode { KC_SCORE_DOT, KC_SCORE_CONCAT } kc_score_mode;

/* Attention (Luong, additive = 0) and AdditiveAttention (Bahdanau,
 * additive = 1). Weights: Attention "scale" () if use_scale, then
 * "concat_score_weight" () if score_mode is concat; AdditiveAttention
 * "scale" (dim,) if use_scale. */
typedef struct kc_dot_attention_attrs {
    int additive;
    int use_scale;
    kc_score_mode score_mode;
    int causal;                 /* Keras 2 config "causal"; Keras 3 passes
                                   use_causal_mask at call time */
    double dropout;             /* training only */
} kc_dot_attention_attrs;

#endif
