#!/usr/bin/env python3
"""Adds the Keras forms of tfjs-oracle zoo models.

    /usr/bin/python3 tools/zoo/tfjs_to_keras.py [tests/zoo/NAME ...]

For each model directory (default: every tests/zoo/*/ whose meta.json says
"oracle": "tfjs") reads model.json + weights.bin and writes, as listed in
meta.json "forms":

* model.h5    - legacy full-model HDF5 as tf.keras 2.15 writes it (§2):
                root attrs model_config (fixed-length bytes, Keras 2 JSON),
                keras_version "2.15.0", backend; /model_weights with
                layer_names and per-layer weight_names "<layer>/<var>:0".
* model.keras - Keras 3.6 zip (§1): metadata.json, config.json (module /
                class_name / config / registered_name, dict inbound_nodes with
                __keras_tensor__ args), model.weights.h5 with the
                /layers/<snake>[_k]/vars/<i> layout; members STORED.

Then reads every written form back (h5py / zipfile) and re-runs it with the
NumPy reference (tools/zoo/numpy_ref.py); any disagreement with
expected_*.npy beyond 1e-4*max(1,max|ref|) is an error.
"""

import glob
import json
import os
import sys
import zipfile

import h5py
import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kconvert  # noqa: E402
import kzoo  # noqa: E402
import numpy_ref  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def verify_h5(path):
    with h5py.File(path, "r") as f:
        json.loads(kzoo._h5_str(f.attrs["model_config"]))
        assert "keras_version" in f.attrs
        mw = f["model_weights"] if "model_weights" in f else f
        for name in kzoo._h5_str_list(mw.attrs, "layer_names"):
            g = mw[name]
            for w in kzoo._h5_str_list(g.attrs, "weight_names"):
                np.asarray(g[w])


def verify_keras(path):
    with zipfile.ZipFile(path) as z:
        names = [i.filename for i in z.infolist()]
        if sorted(names) != ["config.json", "metadata.json", "model.weights.h5"]:
            raise ValueError(f"{path}: members {names}")
        for i in z.infolist():
            if i.compress_type != zipfile.ZIP_STORED:
                raise ValueError(f"{path}: {i.filename} not STORED")
        json.loads(z.read("config.json"))
        json.loads(z.read("metadata.json"))
        import io
        with h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as f:
            f.visit(lambda n: None)


def check_form(path, inputs, expected):
    outs = numpy_ref.run_file(path, inputs)
    if len(outs) != len(expected):
        raise ValueError(f"{path}: {len(outs)} outputs, expected {len(expected)}")
    worst = 0.0
    for i, (o, r) in enumerate(zip(outs, expected)):
        ok, err = kzoo.close_enough(o, r)
        if not ok:
            raise ValueError(f"{path}: output {i} differs from the reference ({err})")
        worst = max(worst, err)
    return worst


def convert(d):
    meta = json.load(open(os.path.join(d, "meta.json")))
    forms = meta["forms"]
    mj, wmap = kzoo.read_tfjs_weights(os.path.join(d, "model.json"))
    topo = mj["modelTopology"]
    topo = topo.get("model_config", topo)
    k2 = kconvert.clean_tfjs_model({"class_name": topo["class_name"], "config": json.loads(json.dumps(topo["config"]))})
    kzoo.attach_tfjs_weights(k2, wmap)
    inputs = [np.load(os.path.join(d, i["file"])) for i in meta["inputs"]]
    expected = [np.load(os.path.join(d, o["file"])) for o in meta["outputs"]]
    ex = numpy_ref.Executor(2)
    ex.run_model(k2, inputs)  # records tensor shapes for the Keras 3 config
    report = {}
    for stale in ("model.h5", "model.keras"):
        p = os.path.join(d, stale)
        if os.path.exists(p):
            os.remove(p)
    if "h5" in forms:
        p = os.path.join(d, forms["h5"])
        kzoo.write_legacy_h5(p, k2, "2.15.0", "k2")
        verify_h5(p)
        report["h5"] = check_form(p, inputs, expected)
    if "keras" in forms:
        k3 = kconvert.k2_to_k3(k2, ex.shapes)
        p = os.path.join(d, forms["keras"])
        kzoo.write_keras_zip(p, k3, "3.6.0")
        verify_keras(p)
        report["keras"] = check_form(p, inputs, expected)
    report["tfjs"] = check_form(os.path.join(d, "model.json"), inputs, expected)
    return report


def main(argv):
    dirs = argv or sorted(glob.glob(os.path.join(ROOT, "tests", "zoo", "*", "")))
    bad = 0
    for d in dirs:
        mf = os.path.join(d, "meta.json")
        if not os.path.exists(mf) or json.load(open(mf)).get("oracle") != "tfjs":
            continue
        try:
            rep = convert(d)
            print(f"{os.path.basename(os.path.normpath(d))}: " +
                  " ".join(f"{k} ok (numpy max err {v:.1e})" for k, v in rep.items()))
        except Exception as e:  # report every model, fail at the end
            import traceback
            traceback.print_exc()
            print(f"{os.path.basename(os.path.normpath(d))}: FAILED: {e}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
