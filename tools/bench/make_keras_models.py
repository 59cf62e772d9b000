#!/usr/bin/env python3
"""Writes the full-size Keras models of the benchmark (random weights).

    /usr/bin/python3 tools/bench/make_keras_models.py [--out bench/models] [--force] [NAME ...]

For each NAME in mobilenet_v2 (MobileNetV2 alpha 1.0, 224), inception_v3
(InceptionV3, 299), resnet50 (ResNet50, 224), all 1000 classes, writes

    OUT/<name>.keras          Keras 3 zip (what kerasc benchmarks)
    OUT/<name>_tfjs/model.json + weights.bin   the same model as a tfjs
                              layers model (what tfjs-wasm benchmarks)

tools/apps/make_apps.py builds these architectures but only at the reduced
widths and input sizes of tests/apps (its MODELS table has no full-size
option and must not be edited), so this script drives the same pieces at full
size: the transcribed Keras definitions (tools/apps/archs.py), the graph
builder and seeded weights (tools/apps/appgraph.py: He-uniform kernels,
BatchNormalization statistics calibrated on one random input image), the
Keras 3 zip writer (appgraph.write_keras_zip) and the tfjs converter
(tools/zoo/keras_to_tfjs.py). No oracle run: speed, not accuracy, is
measured here (tests/apps checks the same definitions numerically).
Deterministic: the same bytes on every run. Takes ~1-2 minutes in all.
"""

import argparse
import os
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "apps"))
import appgraph  # noqa: E402  (puts tools/zoo on sys.path)
import archs  # noqa: E402
import keras_to_tfjs  # noqa: E402
import make_apps  # noqa: E402  (make_input: seeded input in the model's preprocess range)

MODELS = [
    dict(name="mobilenet_v2", fn=archs.mobilenet_v2, size=224, pre="tf", opts=dict(alpha=1.0, classes=1000),
         model_name=archs.mobilenet_v2_name(1.0, 224)),
    dict(name="inception_v3", fn=archs.inception_v3, size=299, pre="tf", opts=dict(width=1.0, classes=1000),
         model_name="inception_v3"),
    dict(name="resnet50", fn=archs.resnet50, size=224, pre="caffe", opts=dict(width=1.0, classes=1000),
         model_name="resnet50"),
]


def make(m, out):
    t0 = time.time()
    m = dict(m, batch=1)
    data = make_apps.make_input(m)  # (1, S, S, 3): the BN calibration batch
    g = appgraph.Graph(m["model_name"], 3, appgraph.Weights("bench/" + m["name"]))
    y = m["fn"](g, data, **m["opts"])
    k3 = g.model(y)
    kpath = os.path.join(out, m["name"] + ".keras")
    tmp = kpath + ".tmp"
    appgraph.write_keras_zip(tmp, k3, "3.6.0", libver=make_apps.LIBVER)
    os.replace(tmp, kpath)
    keras_to_tfjs.convert(kpath, os.path.join(out, m["name"] + "_tfjs"))
    print(f"make_keras_models: {kpath}: {appgraph.count_params(k3):,} params, "
          f"{os.path.getsize(kpath) / 1e6:.1f} MB, {len(g.entries)} layers, {time.time() - t0:.1f}s", flush=True)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "models"))
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    known = {m["name"]: m for m in MODELS}
    for n in a.names:
        if n not in known:
            print(f"make_keras_models: unknown model {n} (known: {', '.join(known)})", file=sys.stderr)
            return 2
    os.makedirs(a.out, exist_ok=True)
    for m in MODELS:
        if a.names and m["name"] not in a.names:
            continue
        done = (os.path.exists(os.path.join(a.out, m["name"] + ".keras")) and
                os.path.exists(os.path.join(a.out, m["name"] + "_tfjs", "model.json")))
        if done and not a.force:
            continue
        make(m, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
