#!/usr/bin/env bash
# Truncated, corrupted and hostile files: each gets a one-line error and a
# nonzero exit, never a crash or a hang. Files are made here with python3's
# standard library (zipfile, json) from a real model.
source "$(dirname "$0")/lib.bash"
M=${KC_SHARED_MODELS:?}
T=${KC_TEST_TMP:-/tmp}/hostile.$$
mkdir -p "$T"
trap 'rm -rf "$T"' EXIT
GOOD="$M/mnist_cnn_bn_dropout_k3132.keras"

expect_error "$T/does-not-exist.keras" "No such file"
: > "$T/empty.keras"; expect_error "$T/empty.keras" "not a Keras model"
head -c 4096 /dev/urandom > "$T/random.bin"; printf 'xx' | cat - "$T/random.bin" > "$T/random2.bin"
expect_error "$T/random2.bin" "not a Keras model"
if [[ -f "$GOOD" ]]; then
  head -c 100000 "$GOOD" > "$T/truncated.keras"; expect_error "$T/truncated.keras" "zip|truncated|corrupt"
  head -c 30 "$GOOD" > "$T/tiny.keras"; expect_error "$T/tiny.keras" "zip"
  python3 - "$GOOD" "$T" <<'PY'
import json, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
z = zipfile.ZipFile(src)
cfg = json.loads(z.read("config.json")); meta = z.read("metadata.json"); w = z.read("model.weights.h5")
def write(name, config=None, weights=w, extra=None, method=zipfile.ZIP_STORED, raw_config=None):
    with zipfile.ZipFile(f"{out}/{name}", "w", method) as o:
        o.writestr("metadata.json", meta)
        if raw_config is not None: o.writestr("config.json", raw_config)
        elif config is not None: o.writestr("config.json", json.dumps(config))
        if weights is not None: o.writestr("model.weights.h5", weights)
        for k, v in (extra or {}).items(): o.writestr(k, v)
write("deflate.keras", cfg, method=zipfile.ZIP_DEFLATED)       # valid: DEFLATE members
write("noconfig.keras", None)
write("noweights.keras", cfg, weights=None)
write("badjson.keras", raw_config="{\"class_name\": \"Sequential\", ")
write("npz.keras", cfg, weights=None, extra={"model.weights.npz": b"PK\x03\x04pickle"})
write("truncweights.keras", cfg, weights=w[: len(w) // 2])
deep = "[" * 100000 + "]" * 100000
write("deep.keras", raw_config=deep)
c = json.loads(json.dumps(cfg)); c["config"]["layers"][1]["config"]["filters"] = -5
write("negfilters.keras", c)
c = json.loads(json.dumps(cfg)); c["config"]["layers"][0]["config"]["batch_shape"] = [None, 10**15, 10**15, 1]
write("hugeshape.keras", c)
c = json.loads(json.dumps(cfg)); c["config"]["layers"][1]["config"]["kernel_size"] = [5, 5]
write("shapemismatch.keras", c)
c = json.loads(json.dumps(cfg)); c["config"]["layers"][1]["class_name"] = "MyBlock"; c["config"]["layers"][1]["module"] = "my_project.layers"; c["config"]["layers"][1]["registered_name"] = "Custom>MyBlock"
write("custom.keras", c)
c = json.loads(json.dumps(cfg)); c["config"]["layers"][1]["config"]["activation"] = {"class_name": "__lambda__", "config": {"value": ["ZZZ", None, None]}}
write("lambda_activation.keras", c)
# A Functional graph whose two layers feed each other: a cycle.
cyc = {"module": "keras.src.models.functional", "class_name": "Functional", "config": {"name": "cyc",
  "layers": [
   {"module": "keras.layers", "class_name": "InputLayer", "name": "in", "config": {"name": "in", "batch_shape": [None, 4]}, "inbound_nodes": []},
   {"module": "keras.layers", "class_name": "Dense", "name": "a", "config": {"name": "a", "units": 4}, "inbound_nodes": [{"args": [{"class_name": "__keras_tensor__", "config": {"keras_history": ["b", 0, 0]}}], "kwargs": {}}]},
   {"module": "keras.layers", "class_name": "Dense", "name": "b", "config": {"name": "b", "units": 4}, "inbound_nodes": [{"args": [{"class_name": "__keras_tensor__", "config": {"keras_history": ["a", 0, 0]}}], "kwargs": {}}]}],
  "input_layers": [["in", 0, 0]], "output_layers": [["b", 0, 0]]}}
write("cycle.keras", cyc)
PY
  expect_totals "$T/deflate.keras" 158058 157354
  expect_error "$T/noconfig.keras" "no config.json"
  expect_error "$T/noweights.keras" "no model.weights.h5"
  expect_error "$T/badjson.keras" "invalid JSON"
  expect_error "$T/npz.keras" "npz.*never unpickles"
  expect_error "$T/truncweights.keras" "HDF5|truncated|corrupt"
  expect_error "$T/deep.keras" "invalid JSON|nest"
  expect_error "$T/negfilters.keras" "layer 'conv2d' \(Conv2D\): filters"
  expect_error "$T/hugeshape.keras" "too large|limit|out of range"
  expect_error "$T/shapemismatch.keras" "weight kernel has shape"
  expect_error "$T/custom.keras" "custom class 'Custom>MyBlock'"
  expect_error "$T/lambda_activation.keras" "lambda"
  expect_error "$T/cycle.keras" "never computed|cycle"
  mkdir -p "$T/emptydir"; expect_error "$T/emptydir" "neither config.json"
  # A weights-only file given as a model points at --weights.
  expect_error "$M/mnist_cnn_k231.h5" "only applies to a JSON" --weights "$M/mnist_cnn_k231.h5"
fi
# A file that makes libhdf5 1.10 itself segfault: contained by the sandbox.
expect_error "$KC_TEST_DATA/h5/libhdf5_bugs/linfo_undef_btree_segv.h5" "crashed \\(signal 11\\)|failed on this file \\(exit status"
finish
