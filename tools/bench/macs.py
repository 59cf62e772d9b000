#!/usr/bin/env python3
"""Multiply-accumulates per image of a Keras model, counted analytically.

    /usr/bin/python3 tools/bench/macs.py MODEL [--kerasc build/kerasc]

Reads the layer table of `kerasc summary MODEL --json` (output shapes,
parameter counts, inbound layers) and counts, per image:

* Conv2D: H_out * W_out * (kernel parameters), kernel = kh*kw*C_in*C_out
  (parameters minus the bias, which is present iff the count is not a
  multiple of C_in*C_out);
* DepthwiseConv2D: H_out * W_out * kh*kw*C*depth_multiplier (parameters minus
  the bias; kh*kw is the perfect square among params/C_out and that minus 1);
* SeparableConv2D: depthwise + pointwise, H_out * W_out * (parameters minus
  bias);
* Dense: positions * (parameters - units).

BatchNormalization, activations, pooling, adds and concatenations are not
counted (the usual convention: they are <1% of the arithmetic of these
convnets and are memory-bound anyway). GFLOP/s = 2 * MACs / time.

Prints "macs_per_image: N". Checked against published counts: Keras
MobileNetV2 1.0/224 300.8 M (paper: 300 M multiply-adds), InceptionV3 5.71 G
(torchvision docs: 5.71), ResNet50 v1 3.86 G (the fvcore/torchvision count
for v1.5 is 4.09 G; v1 strides the 1x1 conv instead of the 3x3).
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def _is_square(n):
    r = int(round(math.sqrt(n)))
    return r * r == n


def count(summary):
    layers = {l["name"]: l for l in summary["layers"]}
    total = 0
    for l in summary["layers"]:
        cls, p, out = l["class_name"], int(l["params"]), l["output_shape"]
        if not p or cls not in ("Conv2D", "DepthwiseConv2D", "SeparableConv2D", "Dense"):
            continue
        src = re.findall(r"([^\s,\[]+)\[\d+\]\[\d+\]", l.get("connected_to", ""))
        if not src or src[0] not in layers:
            raise ValueError(f"{l['name']}: cannot find its input in {l.get('connected_to')!r}")
        in_shape = layers[src[0]]["output_shape"]
        if isinstance(in_shape[0], list):
            in_shape = in_shape[0]
        cin, cout = int(in_shape[-1]), int(out[-1])
        positions = 1
        for d in out[1:-1]:
            positions *= int(d)
        if cls == "Conv2D":
            k = p if p % (cin * cout) == 0 else p - cout
        elif cls == "DepthwiseConv2D":
            k = p if _is_square(p // cout) and p % cout == 0 else p - cout
        elif cls == "SeparableConv2D":
            # depthwise kh*kw*cin*m + pointwise cin*m*cout (+ cout)
            k = p - cout if (p - cout) % cin == 0 and p % cin != 0 else p
        else:  # Dense
            k = p - cout if p % cin != 0 or p // cin != cout else p
        total += positions * k
    return total


def macs_of(model, kerasc=None):
    kerasc = kerasc or os.path.join(ROOT, "build", "kerasc")
    r = subprocess.run([kerasc, "summary", model, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip())
    return count(json.loads(r.stdout))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--kerasc", default=None)
    a = ap.parse_args(argv)
    print(f"macs_per_image: {macs_of(a.model, a.kerasc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
