#!/usr/bin/env bash
# data_format="channels_first" layers (Keras 2 models trained that way):
# the same network with the same weights, written once channels_last and
# once channels_first, must give the same outputs on transposed inputs.
# The channels_last path is checked against the oracle in test_zoo.
source "$(dirname "$0")/lib.bash"
PY=/usr/bin/python3
T=${KC_TEST_TMP:-/tmp}/chfirst.$$
mkdir -p "$T"
trap 'rm -rf "$T"' EXIT
if ! $PY -c "import h5py, numpy" 2>/dev/null; then
  echo "python3-h5py missing (scripts/deps.sh installs it)"; echo "0 passed, 1 failed"; exit 1
fi
$PY - "$T" <<'PY'
import json, sys
import h5py, numpy as np
out = sys.argv[1]
rng = np.random.default_rng(7)
W = {"c1": [rng.standard_normal((3, 3, 3, 4)).astype("f4") * 0.3, rng.standard_normal(4).astype("f4")],
     "c2": [rng.standard_normal((2, 2, 4, 5)).astype("f4") * 0.3, rng.standard_normal(5).astype("f4")],
     "d": [rng.standard_normal((5 * 5 * 5, 3)).astype("f4") * 0.2, rng.standard_normal(3).astype("f4")]}
def layers(fmt):
    f = {"data_format": fmt}
    first = [None, 3, 9, 9] if fmt == "channels_first" else [None, 9, 9, 3]
    return [
        {"class_name": "InputLayer", "config": {"name": "x", "batch_input_shape": first}},
        {"class_name": "Conv2D", "config": dict(name="c1", filters=4, kernel_size=[3, 3], strides=[1, 1], padding="same", activation="relu", use_bias=True, dilation_rate=[1, 1], **f)},
        {"class_name": "ZeroPadding2D", "config": dict(name="zp", padding=[[1, 0], [0, 1]], **f)},
        {"class_name": "MaxPooling2D", "config": dict(name="mp", pool_size=[2, 2], strides=[2, 2], padding="valid", **f)},
        {"class_name": "UpSampling2D", "config": dict(name="up", size=[2, 2], interpolation="nearest", **f)},
        {"class_name": "Conv2D", "config": dict(name="c2", filters=5, kernel_size=[2, 2], strides=[2, 2], padding="valid", activation="linear", use_bias=True, dilation_rate=[1, 1], **f)},
        {"class_name": "BatchNormalization", "config": {"name": "bn", "axis": 1 if fmt == "channels_first" else -1, "epsilon": 0.001, "center": True, "scale": True}},
        {"class_name": "Flatten", "config": dict(name="fl", **f)},
        {"class_name": "Dense", "config": {"name": "d", "units": 3, "activation": "softmax", "use_bias": True}},
    ]
bn = [np.linspace(0.5, 1.5, 5).astype("f4"), np.linspace(-1, 1, 5).astype("f4"),
      np.linspace(-0.2, 0.2, 5).astype("f4"), np.linspace(0.5, 2.0, 5).astype("f4")]
for fmt in ("channels_last", "channels_first"):
    cfg = {"class_name": "Sequential", "config": {"name": "s", "layers": layers(fmt)}}
    with h5py.File(f"{out}/{fmt}.h5", "w") as f:
        f.attrs["model_config"] = json.dumps(cfg).encode()
        f.attrs["keras_version"] = "2.15.0"
        mw = f.create_group("model_weights")
        mw.attrs["layer_names"] = np.array([b"c1", b"zp", b"mp", b"up", b"c2", b"bn", b"fl", b"d"])
        for name in ["zp", "mp", "up", "fl"]:
            mw.create_group(name).attrs["weight_names"] = np.array([], dtype="S1")
        for name, (k, b) in W.items():
            g = mw.create_group(name)
            g.attrs["weight_names"] = np.array([f"{name}/kernel:0".encode(), f"{name}/bias:0".encode()])
            g[f"{name}/kernel:0"] = k
            g[f"{name}/bias:0"] = b
        g = mw.create_group("bn")
        names = ["gamma", "beta", "moving_mean", "moving_variance"]
        g.attrs["weight_names"] = np.array([f"bn/{n}:0".encode() for n in names])
        for n, v in zip(names, bn):
            g[f"bn/{n}:0"] = v
x = rng.standard_normal((2, 9, 9, 3)).astype("f4")
np.save(f"{out}/x_last.npy", x)
np.save(f"{out}/x_first.npy", np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
PY
if "$KERASC" run "$T/channels_last.h5" --input "$T/x_last.npy" --output "$T/y_last.npy" &&
   "$KERASC" run "$T/channels_first.h5" --input "$T/x_first.npy" --output "$T/y_first.npy"; then
  if $PY -c "
import numpy as np, sys
a = np.load('$T/y_last.npy'); b = np.load('$T/y_first.npy')
d = np.abs(a - b).max(); print('max diff', d); sys.exit(0 if d <= 1e-5 and a.shape == (2, 3) else 1)"; then
    pass "channels_first conv/pad/pool/upsample/BN(axis=1)/flatten equals channels_last"
  else
    fail "channels_first outputs differ"
  fi
else
  fail "kerasc run failed"
fi
finish
