#!/usr/bin/env bash
# Embedding(mask_zero=True) -> GlobalAveragePooling1D averages only the
# real (non-zero-token) timesteps, as Keras does; the reference is the
# Keras formula computed here in NumPy.
source "$(dirname "$0")/lib.bash"
PY=/usr/bin/python3
T=${KC_TEST_TMP:-/tmp}/maskpool.$$
mkdir -p "$T"
trap 'rm -rf "$T"' EXIT
$PY - "$T" <<'PY'
import json, sys
import h5py, numpy as np
out = sys.argv[1]
rng = np.random.default_rng(3)
emb = rng.standard_normal((10, 4)).astype("f4")
W, b = rng.standard_normal((4, 2)).astype("f4"), rng.standard_normal(2).astype("f4")
cfg = {"class_name": "Sequential", "config": {"name": "s", "layers": [
    {"class_name": "InputLayer", "config": {"name": "tok", "batch_input_shape": [None, 6], "dtype": "int32"}},
    {"class_name": "Embedding", "config": {"name": "e", "input_dim": 10, "output_dim": 4, "mask_zero": True}},
    {"class_name": "Dropout", "config": {"name": "dr", "rate": 0.5}},
    {"class_name": "GlobalAveragePooling1D", "config": {"name": "gap", "data_format": "channels_last"}},
    {"class_name": "Dense", "config": {"name": "d", "units": 2, "activation": "linear", "use_bias": True}}]}}
with h5py.File(f"{out}/m.h5", "w") as f:
    f.attrs["model_config"] = json.dumps(cfg).encode()
    f.attrs["keras_version"] = "2.15.0"
    mw = f.create_group("model_weights")
    mw.attrs["layer_names"] = np.array([b"e", b"dr", b"gap", b"d"])
    g = mw.create_group("e"); g.attrs["weight_names"] = np.array([b"e/embeddings:0"]); g["e/embeddings:0"] = emb
    for n in ("dr", "gap"):
        mw.create_group(n).attrs["weight_names"] = np.array([], dtype="S1")
    g = mw.create_group("d"); g.attrs["weight_names"] = np.array([b"d/kernel:0", b"d/bias:0"])
    g["d/kernel:0"] = W; g["d/bias:0"] = b
x = np.array([[3, 5, 1, 0, 0, 0], [7, 2, 9, 4, 8, 6], [0, 4, 0, 2, 0, 0]], dtype="i4")
np.save(f"{out}/x.npy", x)
m = (x != 0).astype("f8")[..., None]
pooled = (emb[x] * m).sum(1) / m.sum(1)
np.save(f"{out}/want.npy", (pooled @ W + b).astype("f4"))
PY
if "$KERASC" run "$T/m.h5" --input "$T/x.npy" --output "$T/got.npy"; then
  if $PY -c "
import numpy as np, sys
a = np.load('$T/got.npy'); b = np.load('$T/want.npy'); d = np.abs(a - b).max()
print('max diff', d); sys.exit(0 if d <= 1e-4 * max(1, np.abs(b).max()) else 1)"; then
    pass "masked GlobalAveragePooling1D matches sum(x*mask)/sum(mask)"
  else
    fail "masked GlobalAveragePooling1D differs from the Keras formula"
  fi
else
  fail "kerasc run failed"
fi
finish
