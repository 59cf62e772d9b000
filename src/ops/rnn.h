/* Attributes of the recurrent layers and the wrappers around layers
 * (LSTM, GRU, SimpleRNN, RNN(cell), CuDNNLSTM, CuDNNGRU, Bidirectional,
 * TimeDistributed). */
#ifndef KC_OPS_RNN_H
#define KC_OPS_RNN_H

#include <stdint.h>

#include "graph/graph.h"

typedef enum kc_rnn_kind {
    KC_RNN_SIMPLE,     /* h = act(x·W + h·U + b) */
    KC_RNN_LSTM,       /* gates i, f, c, o */
    KC_RNN_GRU,        /* gates z, r, h; reset_after selects the bias layout */
    KC_RNN_CUDNN_LSTM, /* tf.keras 1.x CuDNNLSTM: bias (8u,) = input bias ++ recurrent bias */
    KC_RNN_CUDNN_GRU,  /* CuDNNGRU: bias (6u,), reset-after semantics */
} kc_rnn_kind;

/* Input 0 of a call is the (batch, time, features) sequence; any further
 * inputs except role "mask" are initial states (role "initial_state"), in
 * state order (h, then c for LSTM). */
typedef struct kc_rnn_attrs {
    kc_rnn_kind kind;
    int64_t units;
    const char *activation;           /* "tanh" for the CuDNN layers */
    const char *recurrent_activation; /* gate activation; "sigmoid" for CuDNN, unused by
                                         SimpleRNN */
    int keras_major;                  /* "hard_sigmoid" is 0.2x+0.5 for <= 2, x/6+0.5 for 3 */
    int use_bias;
    int reset_after;                  /* GRU: bias (2, 3u) and r applied after U·h */
    int return_sequences;
    int return_state;
    int go_backwards;
    int stateful;                     /* accepted: one call from zero state is the same */
    int unroll;
    int n_states;                     /* 2 for LSTM kinds, else 1 */
} kc_rnn_attrs;

typedef enum kc_merge_mode {
    KC_MERGE_CONCAT, KC_MERGE_SUM, KC_MERGE_MUL, KC_MERGE_AVE, KC_MERGE_NONE
} kc_merge_mode;

#define KC_WRAP_GROUP_MAX 64

/* Bidirectional: two RNN layers parsed in place (their attrs point at
 * fwd_attrs / bwd_attrs, names and configs are borrowed from the file's
 * JSON). The wrapper's weights are the forward layer's (the first
 * n_forward_specs) then the backward layer's. Outputs: merged output (two
 * with merge_mode None), then forward states, then backward states. */
typedef struct kc_bidirectional_attrs {
    kc_merge_mode merge_mode;
    kc_layer forward;
    kc_layer backward;
    kc_rnn_attrs fwd_attrs;
    kc_rnn_attrs bwd_attrs;
    int n_forward_specs;
    char groups[KC_MAX_WEIGHT_SPECS][KC_WRAP_GROUP_MAX];
} kc_bidirectional_attrs;

/* TimeDistributed: the inner layer, parsed by its own def (inner.attrs is
 * owned here and freed by the def's free_attrs). Its weights are all of
 * the wrapper's weights, in order. The executor runs inner.def on the
 * input with the time axis folded into the batch. */
typedef struct kc_time_distributed_attrs {
    kc_layer inner;
    char groups[KC_MAX_WEIGHT_SPECS][KC_WRAP_GROUP_MAX];
} kc_time_distributed_attrs;

#endif
