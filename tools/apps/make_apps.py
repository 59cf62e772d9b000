#!/usr/bin/env python3
"""Builds kerasc's keras.applications test models (tests/apps/<name>/).

    /usr/bin/python3 tools/apps/make_apps.py [NAME ...] [--list] [--tfjs-form]

For every model in MODELS:

1. builds the architecture twice from its transcribed definition
   (tools/apps/archs.py): the Keras 3 graph and the tf.keras 2.15 graph, with
   the same deterministic weights (tools/apps/appgraph.py);
2. writes model.keras (Keras 3.6 zip, tools/zoo/kzoo.write_keras_zip) and
   model.h5 (tf.keras 2.15 legacy HDF5, appgraph.write_legacy_h5), and for
   tfjs-oracle models model.json + weights.bin (tools/zoo/keras_to_tfjs.py
   applied to model.h5);
3. computes expected_0.npy with the model's oracle, from the files as read
   back from disk:
   * "tfjs": tools/oracle/run_tfjs.js on model.json (tfjs-layers 4.22,
     pure-JS cpu backend, float32);
   * "numpy": tools/zoo/numpy_ref.py (float64) extended by
     appgraph.Executor (LayerScale, TFOpLambda), on model.keras;
4. cross-checks every form (model.keras, model.h5, model.json) with the NumPy
   reference against expected_0.npy (tolerance 1e-4 * max(1, max|expected|)),
   and for the NumPy-oracle models also runs model.h5 in tfjs after exact
   rewrites (tools/apps/tfjs_crosscheck.py);
   checks the .h5 reads back with h5py and the .keras is a valid zip, and that
   the outputs are finite, differ between the batch rows and are no one-hot
   softmax; writes meta.json.

Outputs are reproducible byte for byte (seeded generators, fixed zip dates).
"""

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in tools/apps or tools/zoo
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import appgraph  # noqa: E402  (also puts tools/zoo on sys.path)
import archs  # noqa: E402
import kzoo  # noqa: E402
import keras_to_tfjs  # noqa: E402
import tfjs_crosscheck  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
OUT = os.environ.get("APPS_OUT") or os.path.join(ROOT, "tests", "apps")
RUN_TFJS = os.path.join(ROOT, "tools", "oracle", "run_tfjs.js")
NODE_PATH = os.path.join(ROOT, "tools", "node_modules")

# Channel means / stds of keras.applications.imagenet_utils.preprocess_input.
CAFFE_MEAN_BGR = [103.939, 116.779, 123.68]
TORCH_MEAN = [0.485, 0.456, 0.406]
TORCH_STD = [0.229, 0.224, 0.225]

MODELS = [
    dict(name="resnet50", app="ResNet50", fn=archs.resnet50, size=64, batch=2, pre="caffe", oracle="tfjs",
         opts=dict(width=0.08, classes=10), names=("resnet50", "resnet50"),
         width_note="every filter count x 0.08, rounded (conv1 5, bottlenecks 5/10/20/41, block outputs 20/40/80/164)"),
    dict(name="mobilenet_v2", app="MobileNetV2", fn=archs.mobilenet_v2, size=64, batch=2, pre="tf",
         oracle="tfjs", opts=dict(alpha=0.35, classes=10),
         names=(archs.mobilenet_v2_name(0.35, 64),) * 2,
         width_note="alpha=0.35 (the Conv_1 1280 channels are not scaled below alpha 1, as in Keras)"),
    dict(name="mobilenet_v3_small", app="MobileNetV3Small", fn=archs.mobilenet_v3_small, size=64, batch=2,
         pre="raw", oracle="numpy", opts=dict(alpha=0.35, classes=10),
         names=("MobileNetV3Small", "MobilenetV3small"),
         width_note="alpha=0.35 (conv_2 keeps its 1024 channels, as in Keras)"),
    dict(name="inception_v3", app="InceptionV3", fn=archs.inception_v3, size=75, batch=2, pre="tf",
         oracle="tfjs", opts=dict(width=0.08, classes=10), names=("inception_v3", "inception_v3"),
         width_note="every filter count x 0.08, rounded (32->3, 192->15, 384->31; mixed10 has 165 channels)"),
    dict(name="xception", app="Xception", fn=archs.xception, size=75, batch=2, pre="tf", oracle="tfjs",
         opts=dict(width=0.08, classes=10), names=("xception", "xception"),
         width_note="every filter count x 0.08, rounded (32->3, 728->58, 2048->164)"),
    dict(name="densenet121", app="DenseNet121", fn=archs.densenet121, size=64, batch=2, pre="torch",
         oracle="tfjs", opts=dict(width=0.125, classes=10), names=("densenet121", "densenet121"),
         width_note="growth rate 32->4 and stem 64->8 (x 1/8)"),
    dict(name="efficientnet_b0", app="EfficientNetB0", fn=archs.efficientnet, size=64, batch=2, pre="raw",
         oracle="numpy", opts=dict(width_coefficient=0.25, classes=10), names=("efficientnetb0", "efficientnetb0"),
         normalization=archs.EFF_NORMALIZATION,
         width_note="width_coefficient=0.25 (B0 is 1.0), depth_coefficient=1.0 (all 16 blocks)"),
    dict(name="convnext_tiny", app="ConvNeXtTiny", fn=archs.convnext, size=64, batch=2, pre="raw",
         oracle="numpy", opts=dict(projection_dims=(8, 16, 32, 64), classes=10),
         names=("convnext_tiny", "convnext_tiny"),
         width_note="projection_dims (96, 192, 384, 768) x 1/12 = (8, 16, 32, 64); depths (3, 3, 9, 3)"),
    dict(name="nasnet_mobile", app="NASNetMobile", fn=archs.nasnet, size=64, batch=2, pre="tf", oracle="tfjs",
         opts=dict(penultimate_filters=192, num_blocks=4, stem_block_filters=32, classes=10),
         names=("NASNet", "NASNet"),
         width_note="penultimate_filters 1056->192 (filters 44->8); num_blocks 4, stem 32, as NASNetMobile"),
]

LAYER_NOTES = {
    "resnet50": "ZeroPadding2D, Conv2D 7x7/2 with bias, BatchNormalization eps 1.001e-5, MaxPooling2D, 16 bottleneck "
                "blocks with Add, GlobalAveragePooling2D, Dense softmax",
    "mobilenet_v2": "ReLU(max_value=6), DepthwiseConv2D (same, and valid after ZeroPadding2D(correct_pad)), "
                    "inverted residual Add, unnamed GlobalAveragePooling2D",
    "mobilenet_v3_small": "Rescaling(1/127.5, -1); .keras: hard_sigmoid as keras.src.ops.numpy Add (x + 3.0) / "
                          "Multiply (* 1/6) ops nodes around ReLU(6), hard_swish as Activation('hard_silu'); "
                          ".h5: the tf.keras form, TFOpLambda tf.__operators__.add / tf.math.multiply and "
                          "Multiply()([x, hard_sigmoid(x)]), layer names with '/' ('Conv/BatchNorm'); "
                          "squeeze-excite with GlobalAveragePooling2D(keepdims=True), 5x5 depthwise, "
                          "Dropout, 1x1 Conv2D logits, Flatten, Activation softmax",
    "inception_v3": "Conv2D without bias + BatchNormalization(scale=False), 1x7 / 7x1 kernels, "
                    "AveragePooling2D 3x3/1 same, MaxPooling2D, Concatenate (named and unnamed)",
    "xception": "SeparableConv2D (no bias), strided 1x1 Conv2D shortcuts, MaxPooling2D same, unnamed Add / "
                "BatchNormalization",
    "densenet121": "58 Concatenate (growing channel count), AveragePooling2D 2x2 transitions, unnamed "
                   "ZeroPadding2D",
    "efficientnet_b0": "Rescaling(1/255), Normalization(axis=3) with adapted mean/variance/count weights, "
                       "per-channel Rescaling list (the weights='imagenet' stem), swish (.keras 'silu'), "
                       "DepthwiseConv2D 3x3/5x5, squeeze-excite (GlobalAveragePooling2D, Reshape, Conv2D swish / "
                       "sigmoid, Multiply), Dropout(noise_shape=(None,1,1,1)), Add",
    "convnext_tiny": "Normalization with mean/variance in the config, nested Sequential stem / downsampling "
                     "blocks, Conv2D 7x7 groups=channels, LayerNormalization eps 1e-6, Dense on 4-D input, "
                     "Activation gelu (exact), LayerScale (keras.src.applications.convnext), Activation linear, "
                     "residual add as keras.src.ops.numpy Add (.keras) / TFOpLambda with a tensor y (.h5)",
    "nasnet_mobile": "SeparableConv2D 3x3/5x5/7x7 (strided after ZeroPadding2D(correct_pad)), Cropping2D, "
                     "AveragePooling2D 1x1/2 and 3x3 same, MaxPooling2D, Concatenate, many Add",
}

# HDF5 file-format bounds of model.h5 and the .keras weights member. Keras
# writes h5py defaults ("earliest": every group carries a B-tree + local heap,
# ~2 KB); these graphs have 130-770 layers, so that alone would be ~17 MB of
# tests/apps. HDF5 1.8 format (compact groups, superblock v2) holds the same
# groups / datasets / attributes in ~1/5 of the space. APPS_LIBVER=earliest
# writes Keras's own physical layout instead.
_lv = os.environ.get("APPS_LIBVER", "v108")
LIBVER = None if _lv == "earliest" else (_lv, _lv) if _lv.startswith("v1") else _lv
TOL = "max|kerasc - expected| <= 1e-4 * max(1, max|expected|)"


def make_input(m):
    shape = (m["batch"], m["size"], m["size"], 3)
    u = kzoo.uniform(f"apps/{m['name']}/input_0", shape, 1.0).astype(np.float64)  # U(-1, 1)
    pre = m["pre"]
    if pre == "tf":
        x = u
    elif pre == "caffe":
        x = 127.5 + 127.5 * u - np.array(CAFFE_MEAN_BGR)
    elif pre == "torch":
        x = ((u + 1.0) / 2.0 - np.array(TORCH_MEAN)) / np.array(TORCH_STD)
    elif pre == "raw":
        x = 127.5 + 127.5 * u
    else:
        raise ValueError(pre)
    return x.astype(np.float32)


PRE_NOTES = {"tf": "input in [-1, 1] (preprocess_input mode 'tf')",
             "caffe": "input = BGR pixels in [0, 255] minus the ImageNet means (mode 'caffe')",
             "torch": "input = ([0, 1] - ImageNet mean) / std (mode 'torch')",
             "raw": "input = pixels in [0, 255] (the model preprocesses)"}


def build(m, data):
    gen = appgraph.Weights(m["name"])
    norm = m.get("normalization")
    b3 = appgraph.Graph(m["names"][0], 3, gen, normalization_init=norm)
    y3 = m["fn"](b3, data, **m["opts"])
    k3 = b3.model(y3)
    b2 = appgraph.Graph(m["names"][1], 2, gen, weight_source=b3.weights_out, normalization_init=norm)
    y2 = m["fn"](b2, data, **m["opts"])
    k2 = b2.model(y2)
    if set(b2.weights_out) != set(b3.weights_out):
        raise ValueError("the two flavours have different weighted layers")
    d = float(np.max(np.abs(y3.value - y2.value)))
    if d > 1e-9 * max(1.0, float(np.max(np.abs(y3.value)))):
        raise ValueError(f"Keras 3 and tf.keras graphs compute different outputs (max diff {d})")
    return k3, k2, y3.value, len(b3.entries), len(b2.entries)


def verify_h5(path):
    import h5py
    with h5py.File(path, "r") as f:
        json.loads(kzoo._h5_str(f.attrs["model_config"]))
        mw = f["model_weights"]
        n = 0
        for name in kzoo._h5_str_list(mw.attrs, "layer_names"):
            g = mw[name]
            for w in kzoo._h5_str_list(g.attrs, "weight_names"):
                np.asarray(g[w])
                n += 1
    return n


def verify_keras(path):
    import h5py
    with zipfile.ZipFile(path) as z:
        if z.testzip() is not None:
            raise ValueError(f"{path}: corrupt member")
        names = sorted(i.filename for i in z.infolist())
        if names != ["config.json", "metadata.json", "model.weights.h5"]:
            raise ValueError(f"{path}: members {names}")
        json.loads(z.read("config.json"))
        json.loads(z.read("metadata.json"))
        with h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as f:
            n = []
            f.visititems(lambda k, v: n.append(k) if isinstance(v, h5py.Dataset) else None)
    return len(n)


def run_tfjs(model_json, inputs, outputs):
    cmd = ["node", RUN_TFJS, model_json]
    for i in inputs:
        cmd += ["--input", i]
    for o in outputs:
        cmd += ["--output", o]
    env = dict(os.environ, NODE_PATH=NODE_PATH)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"run_tfjs failed: {r.stderr.strip()}")


def sanity(y, name):
    y = np.asarray(y, dtype=np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{name}: non-finite outputs")
    if y.shape[0] > 1 and np.max(np.abs(y[0] - y[1])) < 1e-3:
        raise ValueError(f"{name}: batch rows give (nearly) the same output")
    if np.max(y) > 0.99:
        raise ValueError(f"{name}: softmax is (nearly) one-hot: max prob {np.max(y):.4f}")
    if np.max(y) - np.min(y) < 1e-3:
        raise ValueError(f"{name}: outputs (nearly) constant")
    return {"min": float(y.min()), "max": float(y.max()),
            "top1": [int(i) for i in np.argmax(y.reshape(y.shape[0], -1), axis=1)]}


def make(m, tfjs_form=True):
    t0 = time.time()
    d = os.path.join(OUT, m["name"])
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    data = make_input(m)
    k3, k2, eager, n3, n2 = build(m, data)
    np.save(os.path.join(d, "input_0.npy"), data)
    kpath, hpath = os.path.join(d, "model.keras"), os.path.join(d, "model.h5")
    appgraph.write_keras_zip(kpath, k3, "3.6.0", libver=LIBVER)
    appgraph.write_legacy_h5(hpath, k2, "2.15.0", libver=LIBVER)
    nk, nh = verify_keras(kpath), verify_h5(hpath)
    forms = {"keras": "model.keras", "h5": "model.h5"}
    checks = {}
    ipath = os.path.join(d, "input_0.npy")
    epath = os.path.join(d, "expected_0.npy")
    tmp = None
    if m["oracle"] == "tfjs":
        jdir = d if tfjs_form else tempfile.mkdtemp(prefix="apps_tfjs_")
        tmp = None if tfjs_form else jdir
        keras_to_tfjs.convert(hpath, jdir)
        if tfjs_form:
            forms = {"tfjs": "model.json", **forms}
        run_tfjs(os.path.join(jdir, "model.json"), [ipath], [epath])
        expected = np.load(epath)
        checks["model.json (numpy_ref)"] = appgraph.run_file(os.path.join(jdir, "model.json"), [data])[0]
        if tmp:
            shutil.rmtree(tmp)
    else:
        expected = appgraph.run_file(kpath, [data])[0].astype(np.float32)
        np.save(epath, expected)
    checks["model.keras (numpy_ref)"] = appgraph.run_file(kpath, [data])[0]
    checks["model.h5 (numpy_ref)"] = appgraph.run_file(hpath, [data])[0]
    checks["build (eager numpy)"] = eager
    xnotes = None
    if m["oracle"] == "numpy":
        y, xnotes = tfjs_crosscheck.run(hpath, ipath)
        checks["model.h5 (tfjs cross-check, tools/apps/tfjs_crosscheck.py)"] = y
    cross = {}
    for k, v in checks.items():
        ok, err = kzoo.close_enough(v, expected)
        if not ok:
            raise ValueError(f"{m['name']}: {k} differs from expected_0.npy: {err}")
        cross[k] = f"agrees: max abs diff {err:.2e}"
    st = sanity(expected, m["name"])
    params = appgraph.count_params(k3)
    sizes = {f: os.path.getsize(os.path.join(d, f)) for f in sorted(os.listdir(d))}
    meta = {
        "name": m["name"],
        "application": f"keras.applications.{m['app']}",
        "oracle": m["oracle"],
        "oracle_detail": ("tools/oracle/run_tfjs.js (tfjs-layers 4.22, cpu backend, float32) on model.json"
                          if m["oracle"] == "tfjs" else
                          "tools/zoo/numpy_ref.py (float64) + tools/apps/appgraph.Executor on model.keras"),
        "crosscheck": cross,
        **({"tfjs_crosscheck_rewrites": xnotes} if xnotes is not None else {}),
        "model_names": {"keras": m["names"][0], "h5": m["names"][1]},
        "input_size": [m["size"], m["size"]],
        "classes": m["opts"]["classes"],
        "width": m["width_note"],
        "params": params,
        "config_entries": {"keras": n3, "h5": n2},
        "weight_datasets": {"keras": nk, "h5": nh},
        "layers": LAYER_NOTES[m["name"]],
        "note": PRE_NOTES[m["pre"]] + "; include_top=True, classifier softmax; deterministic random weights "
                "(tools/apps/appgraph.Weights: He-uniform kernels, BatchNormalization moving variance "
                "calibrated on the test input, classifier logits std 2)",
        "forms": forms,
        "inputs": [{"file": "input_0.npy", "name": k3["config"]["input_layers"][0], "dtype": "float32",
                    "shape": list(data.shape)}],
        "outputs": [{"file": "expected_0.npy", "dtype": "float32", "shape": list(expected.shape)}],
        "output_stats": st,
        "file_bytes": sizes,
        "tolerance": TOL,
    }
    with open(os.path.join(d, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")
    total = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"{m['name']}: {m['size']}x{m['size']} batch {m['batch']}, {params:,} params, oracle {m['oracle']}, "
          f"{total / 1e6:.2f} MB, {time.time() - t0:.1f}s; " +
          "; ".join(f"{k} {v}" for k, v in cross.items()), flush=True)
    return meta


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--tfjs-form", action="store_true",
                    help="also keep model.json + weights.bin (the tfjs form the oracle ran) for the "
                    "tfjs-oracle models (about +8 MB)")
    a = ap.parse_args(argv)
    if a.list:
        for m in MODELS:
            print(m["name"], m["app"], m["oracle"])
        return 0
    todo = [m for m in MODELS if not a.names or m["name"] in a.names]
    if a.names and len(todo) != len(a.names):
        print(f"unknown model in {a.names}", file=sys.stderr)
        return 2
    bad = 0
    for m in todo:
        try:
            make(m, tfjs_form=a.tfjs_form)
        except Exception as e:  # report every model, fail at the end
            import traceback
            traceback.print_exc()
            print(f"{m['name']}: FAILED: {e}", flush=True)
            bad += 1
    if not a.names:
        total = 0
        for root, _, files in os.walk(OUT):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
        print(f"tests/apps total: {total / 1e6:.2f} MB")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
