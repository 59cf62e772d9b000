#!/usr/bin/env bash
# Every container form: .keras zip, the same unzipped in a directory, legacy
# .h5 (also one named .keras), JSON architecture + Keras 3 .weights.h5,
# JSON architecture + legacy weights-only .h5, TensorFlow.js (nsfwjs's real
# models, JS-wrapped; and its graph model refused).
source "$(dirname "$0")/lib.bash"
M=${KC_SHARED_MODELS:?}
N=${KC_NSFWJS_DIR:-}
T=${KC_TEST_TMP:-/tmp}/formats.$$
mkdir -p "$T"
trap 'rm -rf "$T"' EXIT
PY=/usr/bin/python3

if [[ -f "$M/cnn_bn_gap_k360.keras" ]]; then
  mkdir -p "$T/unzipped"
  $PY -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$M/cnn_bn_gap_k360.keras" "$T/unzipped"
  expect_totals "$T/unzipped" 144201 143753
  # JSON architecture + Keras 3 weights-only file (same layout as the member).
  cp "$T/unzipped/config.json" "$T/arch3.json"
  cp "$T/unzipped/model.weights.h5" "$T/w3.weights.h5"
  expect_totals "$T/arch3.json" 144201 143753 --weights "$T/w3.weights.h5"
  # The architecture alone loads too (shapes and counts, no weights).
  expect_totals "$T/arch3.json" 144201 143753
fi

if [[ -f "$M/mnist_cnn_k231.h5" ]] && $PY -c "import h5py" 2>/dev/null; then
  # Keras 2 model.to_json() + save_weights(): weights at the file root.
  $PY - "$M/mnist_cnn_k231.h5" "$T" <<'PY'
import h5py, sys
src, out = sys.argv[1], sys.argv[2]
with h5py.File(src, "r") as f:
    cfg = f.attrs["model_config"]
    open(f"{out}/arch2.json", "wb").write(cfg if isinstance(cfg, bytes) else cfg.encode())
    with h5py.File(f"{out}/w2.h5", "w") as w:
        for k, v in f["model_weights"].attrs.items():
            w.attrs[k] = v
        for name in f["model_weights"]:
            f.copy(f"model_weights/{name}", w, name=name)
PY
  expect_totals "$T/arch2.json" 93322 93322 --weights "$T/w2.h5"
  expect_error "$T/arch2.json" "weight kernel has shape" --weights "$T/w3.weights.h5"
fi

if [[ -f "$M/bc_nvidia_lambda_k111.h5" ]] && $PY -c "import h5py" 2>/dev/null; then
  # The Keras 1.1.1 file without its Lambda: Convolution2D (nb_filter,
  # nb_row, subsample, border_mode, dim_ordering tf), Keras 1 weight names
  # (convolution2d_1_W:0), bare-list Sequential config.
  $PY - "$M/bc_nvidia_lambda_k111.h5" "$T/keras1.h5" <<'PY'
import h5py, json, shutil, sys
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    cfg = json.loads(f.attrs["model_config"])
    layers = cfg["config"]
    shape = layers[0]["config"]["batch_input_shape"]
    del layers[0]
    layers[0]["config"]["batch_input_shape"] = shape
    f.attrs["model_config"] = json.dumps(cfg).encode()
    names = [n for n in f["model_weights"].attrs["layer_names"] if n != b"lambda_1"]
    f["model_weights"].attrs["layer_names"] = names
PY
  expect_totals "$T/keras1.h5" 252219 252219
fi

if [[ -n "$N" && -d "$N" ]]; then
  expect_totals "$N/mobilenet_v2/model.min.js" 2619461 2279365
  expect_totals "$N/inception_v3/model.min.js" 22360869 17076261
  expect_error "$N/mobilenet_v2_mid/model.min.js" "graph model, not a Keras layers model"
else
  echo "nsfwjs not installed (run scripts/deps.sh); skipping its models"
fi
finish
