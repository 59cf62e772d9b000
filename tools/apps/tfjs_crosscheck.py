#!/usr/bin/env python3
"""tfjs cross-check for the NumPy-oracle keras.applications models.

    /usr/bin/python3 tools/apps/tfjs_crosscheck.py tests/apps/NAME [...]

tfjs-layers cannot load MobileNetV3 / EfficientNet / ConvNeXt as saved, so
their expected outputs come from the NumPy reference. This second opinion
runs them in tfjs (cpu backend, float32) after exact, weight-preserving
rewrites of the tf.keras config read from model.h5:

* Conv2D(groups == filters == input channels) -> DepthwiseConv2D with the
  kernel's last two axes swapped ((kh, kw, 1, C) -> (kh, kw, C, 1));
* GlobalAveragePooling2D(keepdims=True) -> GlobalAveragePooling2D + Reshape((1, 1, C));
* TFOpLambda tf.__operators__.add with a tensor ``y`` -> Add layer;
* TFOpLambda with a constant ``y`` -> ConstOp (the constant in its config);
  LayerScale, Normalization and ConstOp are run by the classes in
  tools/apps/tfjs_custom.js.

Prints max|tfjs - expected_0.npy| per model; used by make_apps.py (meta.json
"crosscheck").
"""

import copy
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in tools/apps or tools/zoo
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import appgraph  # noqa: E402,F401  (LayerScale var specs; tools/zoo on sys.path)
import keras_to_tfjs  # noqa: E402
import kzoo  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
NODE_PATH = os.path.join(ROOT, "tools", "node_modules")


def _rewrite_model(m, notes, shapes):
    layers = kzoo.model_layers(m)
    rename = {}  # old producer name -> new producer name (same node/tensor)
    out = []
    for e in layers:
        cls, c = e["class_name"], e["config"]
        if kzoo.is_model(e):
            _rewrite_model(e, notes, shapes)
            out.append(e)
            continue
        if cls == "Conv2D" and c.get("groups", 1) > 1:
            k = np.asarray(e["__weights__"][0])
            if not (k.shape[2] == 1 and c["groups"] == c["filters"]):
                raise NotImplementedError(f"{c['name']}: general grouped conv")
            nc = {kk: c[kk] for kk in ("name", "trainable", "dtype", "kernel_size", "strides", "padding",
                                       "data_format", "dilation_rate", "activation", "use_bias")}
            nc.update(depth_multiplier=1, depthwise_initializer=None, bias_initializer=None,
                      depthwise_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                      depthwise_constraint=None, bias_constraint=None)
            ne = dict(e, class_name="DepthwiseConv2D", config=nc)
            ne["__weights__"] = [np.ascontiguousarray(np.transpose(k, (0, 1, 3, 2)))] + list(e["__weights__"][1:])
            notes.add("grouped Conv2D -> DepthwiseConv2D")
            out.append(ne)
            continue
        if cls == "GlobalAveragePooling2D" and c.get("keepdims"):
            nc = dict(c, keepdims=False)
            out.append(dict(e, config=nc))
            rname = c["name"] + "__reshape"
            chans = shapes[c["name"]]
            out.append({"class_name": "Reshape",
                        "config": {"name": rname, "trainable": True, "dtype": "float32", "target_shape": [1, 1, chans]},
                        "name": rname, "inbound_nodes": [[[c["name"], 0, 0, {}]]]})
            rename[c["name"]] = rname
            notes.add("GlobalAveragePooling2D(keepdims) -> + Reshape")
            continue
        if cls == "TFOpLambda" and isinstance(e["inbound_nodes"][0][0][3].get("y"), list):
            x = e["inbound_nodes"][0][0]
            y = x[3]["y"]
            out.append({"class_name": "Add", "config": {"name": c["name"], "trainable": True, "dtype": "float32"},
                        "name": e["name"], "inbound_nodes": [[[x[0], x[1], x[2], {}], [y[0], y[1], y[2], {}]]]})
            notes.add("TFOpLambda add(x, tensor) -> Add")
            continue
        if cls == "TFOpLambda":
            # tfjs does not pass a node's call kwargs to call() in predict():
            # the constant y goes into the config of a ConstOp (tfjs_custom.js)
            x = e["inbound_nodes"][0][0]
            out.append({"class_name": "ConstOp",
                        "config": {"name": c["name"], "trainable": True, "dtype": "float32",
                                   "op": {"__operators__.add": "add", "math.multiply": "mul"}[c["function"]],
                                   "y": float(x[3]["y"])},
                        "name": e["name"], "inbound_nodes": [[[x[0], x[1], x[2], {}]]]})
            notes.add("TFOpLambda(x, constant) -> ConstOp")
            continue
        out.append(e)
    for e in out:
        for node in e.get("inbound_nodes", []):
            for item in node:
                if item[0] in rename and not (e["class_name"] == "Reshape" and e["name"] == rename[item[0]]):
                    item[0] = rename[item[0]]
                kw = item[3] if len(item) > 3 else {}
                if isinstance(kw.get("y"), list) and kw["y"][0] in rename:
                    kw["y"][0] = rename[kw["y"][0]]
    if isinstance(m["config"], dict) and "output_layers" in m["config"]:
        for o in m["config"]["output_layers"]:
            if o[0] in rename:
                o[0] = rename[o[0]]
    layers[:] = out


def to_tfjs(h5_path, out_dir, example_input):
    cfg, _ = kzoo.load_any(h5_path)
    # channel counts of keepdims poolings, from a NumPy run
    ex = appgraph.Executor(2)
    ex.run_model(cfg, [example_input])
    shapes = {}

    def rec(m):
        for e in kzoo.model_layers(m):
            if kzoo.is_model(e):
                rec(e)
            elif id(e) in ex.shapes:
                shapes[kzoo.entry_name(e)] = ex.shapes[id(e)][0]["out"][0][-1]

    rec(cfg)
    notes = set()
    k2 = copy.deepcopy(cfg)
    _rewrite_model(k2, notes, shapes)
    k2 = keras_to_tfjs.tfjs_compat(k2)
    specs, arrays = keras_to_tfjs.tfjs_weights(k2)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "weights.bin"), "wb") as fh:
        for a in arrays:
            fh.write(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes())
    mj = {"format": "layers-model", "generatedBy": "keras v2", "convertedBy": "kerasc tools/apps/tfjs_crosscheck.py",
          "modelTopology": {"keras_version": "2", "backend": "tensorflow", "model_config": kzoo.strip_private(k2)},
          "weightsManifest": [{"paths": ["weights.bin"], "weights": specs}]}
    with open(os.path.join(out_dir, "model.json"), "w") as fh:
        json.dump(mj, fh)
    return os.path.join(out_dir, "model.json"), sorted(notes)


def run(h5_path, input_path):
    """Returns (tfjs output, rewrites applied)."""
    x = np.load(input_path)
    with tempfile.TemporaryDirectory(prefix="apps_xcheck_") as tmp:
        mj, notes = to_tfjs(h5_path, tmp, x)
        out = os.path.join(tmp, "y.npy")
        r = subprocess.run(["node", os.path.join(HERE, "tfjs_custom.js"), mj, "--input", input_path,
                            "--output", out], capture_output=True, text=True,
                           env=dict(os.environ, NODE_PATH=NODE_PATH))
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip()[-2000:])
        return np.load(out), notes


def main(argv):
    bad = 0
    for d in argv:
        y, notes = run(os.path.join(d, "model.h5"), os.path.join(d, "input_0.npy"))
        e = np.load(os.path.join(d, "expected_0.npy"))
        ok, err = kzoo.close_enough(y, e)
        print(f"{os.path.basename(os.path.normpath(d))}: tfjs vs expected max abs diff {err:.2e} "
              f"{'ok' if ok else 'MISMATCH'} (rewrites: {', '.join(notes) or 'none'})")
        bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
