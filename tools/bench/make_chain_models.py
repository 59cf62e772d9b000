#!/usr/bin/env python3
"""Writes chains of ResNet bottleneck blocks, as Keras and as ONNX, to time
one kind of layer apart from a whole network.

    /usr/bin/python3 tools/bench/make_chain_models.py --name q7 --size 7 \\
        --channels 2048 --mid 512 --blocks 2 [--no-3x3] [--no-residual] \\
        [--out bench/models/chains] [--no-onnx]

Each block is ResNet50's: x -> 1x1 channels -> mid (relu) -> 3x3 mid -> mid
"same" (relu; --no-3x3: none) -> 1x1 mid -> channels, added to x, then relu
(--no-residual: no sum, the relu on the 1x1). Layers are named b<i>_1,
b<i>_2, b<i>_3 (and b<i>_add, b<i>_out), so that `kerasc bench --stats`
lines group by kind:

    build/kerasc bench bench/models/chains/q7.keras --batch 1 --stats

Why: a layer's time in a network depends on what ran before it and on the
machine's phase, which moves times by 15% and more within minutes here; two
chains that differ in one thing, run in turns, tell that one thing apart.
For instance, two and twelve blocks of 7x7 2048/512 layers (16 MB of
weights, which stay in the last-level cache between runs, against 96 MB,
which come from memory) measured what memory costs those 1x1 layers
(src/kernels/pw.c, kc_pw_build).

OUT/<name>.keras is a Keras 3 zip (tools/apps/appgraph.py: He-uniform
kernels, seeded). OUT/<name>.onnx (opset 13, NCHW input "input" and output
"logits", dynamic batch axis) is the same architecture in torch, with
torch's own seeded weights: for tools/bench/peer_ort.js, speed only. The
ONNX export needs Debian's python3-torch (tools/bench/install_peers.sh);
--no-onnx skips it.
"""

import argparse
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "apps"))
import numpy as np  # noqa: E402
import appgraph  # noqa: E402
import make_apps  # noqa: E402  (LIBVER: the Keras version the zip records)


def keras_chain(path, name, size, channels, mid, blocks, three, residual):
    data = np.random.RandomState(0).uniform(0, 1, (1, size, size, channels))
    g = appgraph.Graph(name, 3, appgraph.Weights("chains/" + name))
    x = g.input(data.shape[1:], data)
    for i in range(blocks):
        y = g.layer("Conv2D", x, filters=mid, kernel_size=1, activation="relu", name=f"b{i}_1")
        if three:
            y = g.layer("Conv2D", y, filters=mid, kernel_size=3, padding="SAME", activation="relu",
                        name=f"b{i}_2")
        if residual:
            y = g.layer("Conv2D", y, filters=channels, kernel_size=1, name=f"b{i}_3")
            y = g.layer("Add", [y, x], name=f"b{i}_add")
            x = g.layer("Activation", y, activation="relu", name=f"b{i}_out")
        else:
            x = g.layer("Conv2D", y, filters=channels, kernel_size=1, activation="relu", name=f"b{i}_3")
    appgraph.write_keras_zip(path, g.model(x), "3.6.0", libver=make_apps.LIBVER)


def onnx_chain(path, size, channels, mid, blocks, three, residual):
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(channels, mid, 1)
            self.c2 = nn.Conv2d(mid, mid, 3, padding=1) if three else None
            self.c3 = nn.Conv2d(mid, channels, 1)

        def forward(self, x):
            y = torch.relu(self.c1(x))
            if self.c2 is not None:
                y = torch.relu(self.c2(y))
            y = self.c3(y)
            return torch.relu(y + x) if residual else torch.relu(y)

    torch.manual_seed(0)
    model = nn.Sequential(*[Block() for _ in range(blocks)]).eval()
    x = torch.randn(1, channels, size, size)
    torch.onnx.export(model, x, path, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}}, opset_version=13)


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1: %s" % text)
    return value


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--name", required=True)
    ap.add_argument("--size", type=positive, required=True, help="image height and width")
    ap.add_argument("--channels", type=positive, required=True, help="the blocks' input and output")
    ap.add_argument("--mid", type=positive, required=True, help="the bottleneck's channels")
    ap.add_argument("--blocks", type=positive, required=True)
    ap.add_argument("--no-3x3", dest="three", action="store_false")
    ap.add_argument("--no-residual", dest="residual", action="store_false")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "models", "chains"))
    ap.add_argument("--no-onnx", dest="onnx", action="store_false")
    a = ap.parse_args(argv)
    if not a.name.replace("_", "").isalnum():
        ap.error("--name: letters, digits and _ only: %s" % a.name)
    os.makedirs(a.out, exist_ok=True)
    shape = (a.size, a.channels, a.mid, a.blocks, a.three, a.residual)
    keras_path = os.path.join(a.out, a.name + ".keras")
    keras_chain(keras_path, a.name, *shape)
    print(keras_path)
    if a.onnx:
        onnx_path = os.path.join(a.out, a.name + ".onnx")
        onnx_chain(onnx_path, *shape)
        print(onnx_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
