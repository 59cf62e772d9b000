#!/usr/bin/env python3
"""Converts a Keras model file to a TensorFlow.js layers model (for the oracle).

    /usr/bin/python3 tools/zoo/keras_to_tfjs.py MODEL OUT_DIR

MODEL: Keras 3 .keras (also tf.keras 2.13-2.15 ones), unzipped-free; legacy
full-model .h5 (Keras 2.x / tf.keras / Keras 3 writer). Read with h5py +
json only (tools/zoo/kzoo.py); nothing from the file is executed.

Writes OUT_DIR/model.json + OUT_DIR/weights.bin:
* modelTopology.model_config: Keras 2 style config - Keras 3 dict
  inbound_nodes turned into list form (nested-model node indices +1),
  batch_shape -> batch_input_shape, DTypePolicy objects -> dtype strings,
  module / registered_name / build_config dropped, Keras 3 initializer
  dicts -> Keras 2 ones, LeakyReLU negative_slope -> alpha.
* tfjs compatibility (inference semantics unchanged): regularizers and
  constraints nulled, InputLayer batch dimension set to null, Random*
  augmentation layers (identity at inference) dropped from Sequentials,
  with example inputs (convert(..., example_inputs)): Reshape -1 resolved,
  Resizing to the size the input already has (identity) dropped.
* weightsManifest: one group, float32, names "<layer>/<var>" the way
  tfjs-layers names its variables ("lstm/kernel",
  "bidirectional/forward_lstm/kernel", sub-layers of nested models by their
  own name).
"""

import json
import os
import sys

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kconvert  # noqa: E402
import kzoo  # noqa: E402


# Layers that are the identity at inference and unknown to tfjs-layers.
IDENTITY = ("RandomFlip", "RandomRotation", "RandomZoom", "RandomContrast", "RandomTranslation",
            "RandomBrightness", "RandomHeight", "RandomWidth", "ActivityRegularization")


REWRITES = []  # what the last convert() changed for tfjs (reported in real_refs meta.json)


def tfjs_compat(k2):
    """Rewrites that keep inference semantics but let tfjs-layers 4.22 load the model."""
    def walk_layer(e):
        c = e["config"]
        for k in list(c):
            if k.endswith(("_regularizer", "_constraint")):
                c[k] = None  # training-only; Keras 3 regularizer dicts are unknown to tfjs
        if e["class_name"] == "InputLayer" and c.get("batch_input_shape"):
            c["batch_input_shape"] = [None] + list(c["batch_input_shape"][1:])
        for sub in ("layer", "backward_layer"):
            if isinstance(c.get(sub), dict):
                walk_layer(c[sub])
        if kzoo.is_model(e):
            walk_model(e)

    def walk_model(m):
        layers = kzoo.model_layers(m)
        if m["class_name"] == "Sequential":
            keep = []
            for e in layers:
                if e["class_name"] in IDENTITY:
                    REWRITES.append(f"dropped {e['class_name']} {e['config'].get('name')} (identity at inference)")
                    continue
                if kzoo.is_model(e):
                    walk_model(e)
                    if e["class_name"] == "Sequential" and all(
                            x["class_name"] == "InputLayer" for x in kzoo.model_layers(e)):
                        REWRITES.append(f"dropped the now empty Sequential {e['config'].get('name')}")
                        continue  # nothing but identity layers was inside
                else:
                    walk_layer(e)
                keep.append(e)
            layers[:] = keep
        else:
            for e in layers:
                if e["class_name"] in IDENTITY:
                    raise NotImplementedError(f"{e['class_name']} inside a Functional model")
                walk_layer(e)

    walk_model(k2)
    return k2


def resolve_static(k2, example_inputs, keras_major):
    """Uses the static shapes of a NumPy run: tfjs cannot infer a -1 of
    Reshape.target_shape (filled in), and tfjs' Resizing computes a wrong
    output rank (a Resizing to the size it already has is the identity: dropped
    from Sequentials)."""
    import numpy_ref
    ex = numpy_ref.Executor(keras_major)
    ex.run_model(k2, [np.asarray(a) for a in example_inputs])

    def rec(m):
        layers = kzoo.model_layers(m)
        for e in list(layers):
            if kzoo.is_model(e):
                rec(e)
            elif e["class_name"] == "Reshape" and any(d in (-1, None) for d in e["config"]["target_shape"]):
                out = ex.shapes[id(e)][0]["out"][0]
                REWRITES.append(f"Reshape {e['config'].get('name')} target_shape {e['config']['target_shape']} -> {out[1:]}")
                e["config"]["target_shape"] = list(out[1:])
            elif e["class_name"] == "Resizing" and m["class_name"] == "Sequential":
                rec_ = ex.shapes[id(e)][0]
                if rec_["in"][0] == rec_["out"][0]:
                    REWRITES.append(f"dropped Resizing {e['config'].get('name')} (to the size it already has: identity)")
                    layers.remove(e)
    rec(k2)


def to_k2(cfg):
    if cfg["class_name"] == "Sequential" and isinstance(cfg["config"], list):
        cfg = {"class_name": "Sequential", "config": {"name": "sequential", "layers": cfg["config"]}}
    return kconvert.k3_to_k2(cfg)


def tfjs_weights(k2):
    specs, arrays = [], []

    def rec(m):
        for e in kzoo.weighted_sublayers(m):
            if kzoo.is_model(e):
                rec(e)
                continue
            vs = kzoo.var_specs(e)
            ws = e.get("__weights__", [])
            if len(vs) != len(ws):
                raise ValueError(f"{kzoo.entry_name(e)}: {len(ws)} arrays for {len(vs)} variables")
            for s, a in zip(vs, ws):
                a = np.asarray(a)
                dt = "int32" if a.dtype.kind in "iu" else "float32"
                a = a.astype(np.int32 if dt == "int32" else np.float32)
                specs.append({"name": f"{kzoo.entry_name(e)}/{s['tfjs']}", "shape": list(a.shape), "dtype": dt})
                arrays.append(a)

    rec(k2)
    return specs, arrays


def convert(model_path, out_dir, example_inputs=None):
    cfg, major = kzoo.load_any(model_path)
    kv = "3" if major >= 3 else "2"
    del REWRITES[:]
    k2 = tfjs_compat(to_k2(cfg))
    if example_inputs is not None:
        resolve_static(k2, example_inputs, major)
    specs, arrays = tfjs_weights(k2)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "weights.bin"), "wb") as fh:
        for a in arrays:
            fh.write(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes())
    mj = {
        "format": "layers-model",
        "generatedBy": f"keras v{kv}",
        "convertedBy": "kerasc tools/zoo/keras_to_tfjs.py",
        "modelTopology": {"keras_version": kv, "backend": "tensorflow",
                          "model_config": kzoo.strip_private(k2)},
        "weightsManifest": [{"paths": ["weights.bin"], "weights": specs}],
    }
    with open(os.path.join(out_dir, "model.json"), "w") as fh:
        json.dump(mj, fh)
    return os.path.join(out_dir, "model.json")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    print(convert(sys.argv[1], sys.argv[2]))
