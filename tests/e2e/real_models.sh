#!/usr/bin/env bash
# Every real user model in shared/models/real loads with Keras's parameter
# totals (totals cross-checked against the HDF5 datasets' sizes with h5py);
# the two holding Lambda bytecode are refused, naming the layer.
source "$(dirname "$0")/lib.bash"
M=${KC_SHARED_MODELS:?}
if [[ ! -d "$M" ]]; then echo "no $M; skipping"; echo "0 passed, 0 failed"; exit 0; fi

expect_totals "$M/age_gender_multiout_k341.keras" 143426 143426
expect_totals "$M/btc_gru_k3122.keras" 16513 16513
expect_totals "$M/cnn_bn_gap_k360.keras" 144201 143753
expect_totals "$M/denoise_ae_upsample_k380.keras" 74497 74497
expect_totals "$M/gan_generator_convT_tf2131.keras" 80097 80097
expect_totals "$M/hitsong_mlp_tf2140.keras" 751 751
expect_totals "$M/intent_lstm_embed_k3131.keras" 72452 72452
expect_totals "$M/mnist_cnn_bn_dropout_k3132.keras" 158058 157354
expect_totals "$M/ner_bilstm_embed_tf2150.keras" 81316 81316
expect_totals "$M/potato_preproc_aug_k333.keras" 186022 186022
expect_totals "$M/seizure_conv1d_k392.keras" 104897 104897
expect_totals "$M/tm_mobilenetv2_hdf5_as_keras_k240.keras" 538708 524628
expect_totals "$M/arabic_lstm_k222.h5" 120703 120703
expect_totals "$M/charlm_two_input_tf2100.h5" 89841 89841
expect_totals "$M/cnn1d_lstm_tf2131.h5" 41697 41697
expect_totals "$M/intent_lstm_embed_k321.h5" 94320 94320
expect_totals "$M/mnist_cnn_k231.h5" 93322 93322
expect_totals "$M/quora_bilstm_tf2110.h5" 133377 133377

# A Bidirectional layer's two directions run side by side on two threads
# (kernels/rnn.c; at batch 1: a larger batch runs in lanes, one thread
# each): the real BiLSTM's output has the one-thread run's bits.
X="$(dirname "$0")/../data/npy/quora_bilstm_batch1.npy" # its reference input's first row
T=${KC_TEST_TMP:-/tmp}
mkdir -p "$T"
if "$KERASC" run "$M/quora_bilstm_tf2110.h5" --input "$X" --output "$T/bilstm_t1.npy" \
     --threads 1 && "$KERASC" run "$M/quora_bilstm_tf2110.h5" --input "$X" \
     --output "$T/bilstm_t2.npy" --threads 2 && cmp -s "$T/bilstm_t1.npy" "$T/bilstm_t2.npy"; then
  pass "quora_bilstm_tf2110.h5: directions side by side give the one-thread bits"
else
  fail "quora_bilstm_tf2110.h5: --threads 2 output differs from --threads 1 (or a run failed)"
fi

expect_error "$M/siamese_embed_lambda_k3100.keras" "layer 'lambda_2' \(Lambda\).*never executes"
expect_error "$M/bc_nvidia_lambda_k111.h5" "layer 'lambda_1' \(Lambda\).*never executes"
finish
