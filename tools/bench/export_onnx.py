#!/usr/bin/env python3
"""Exports the torchvision peers of the Keras benchmark models to ONNX.

    /usr/bin/python3 tools/bench/export_onnx.py [--out bench/models] [NAME ...]

Writes OUT/<name>.onnx (NCHW float32 input "input", output "logits", dynamic
batch axis "N", opset 13, weights constant-folded) for

* mobilenet_v2  torchvision.models.mobilenet_v2()            224x224
* inception_v3  torchvision.models.inception_v3(aux_logits=False,
                init_weights=True)                              299x299
* resnet50      torchvision.models.resnet50() with the stride-2 of each
                stage's first bottleneck moved from the 3x3 conv (torchvision's
                "v1.5") to the 1x1 conv, i.e. ResNet50 v1 as keras.applications
                defines it (resnet.py: residual_block_v1 strides its first 1x1
                and the shortcut). Keras's convs also carry biases (use_bias
                default True) that torchvision's lack: < 0.01% of the work.

All with random weights (torchvision's default initialisation, seeded): the
benchmark compares speed on the same architecture, not accuracy. BatchNorm is
in eval mode, so the exporter folds nothing away that ORT would not (ORT
fuses Conv+BN itself with graph optimisations "all").

Also writes OUT/<name>.pt (the state_dict, for tools/bench/peer_torch.py)
and OUT/torch_macs.json: multiply-accumulates per image of each model,
counted with forward hooks on every Conv2d / Linear (MACs = output elements x
kernel elements per output / groups); BatchNorm, activations, pooling and
adds are not counted, the usual convention. Published numbers for comparison
(torchvision's model docs, "GFLOPS" column, which counts MACs): mobilenet_v2
0.30, inception_v3 5.71, resnet50 4.09 (v1.5; v1 as exported here: 3.86,
the Keras ResNet50 figure).
"""

import argparse
import json
import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

MODELS = {
    "mobilenet_v2": 224,
    "inception_v3": 299,
    "resnet50": 224,
}


def build(name, init=True):
    """The torchvision module in eval mode. init=False skips InceptionV3's
    (slow) truncated-normal initialisation, for callers that load weights."""
    import torch
    import torchvision

    torch.manual_seed(0)
    if name == "mobilenet_v2":
        m = torchvision.models.mobilenet_v2(weights=None)
    elif name == "inception_v3":
        m = torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=init)
    elif name == "resnet50":
        m = torchvision.models.resnet50(weights=None)
        for layer in (m.layer2, m.layer3, m.layer4):
            blk = layer[0]
            # torchvision: conv1 1x1/1, conv2 3x3/s; Keras v1: conv1 1x1/s, conv2 3x3/1.
            blk.conv1.stride = blk.conv2.stride
            blk.conv2.stride = (1, 1)
    else:
        raise ValueError(name)
    return m.eval()


def count_macs(model, size):
    import torch

    total = [0]

    def conv_hook(mod, inp, out):
        k = mod.kernel_size[0] * mod.kernel_size[1] * (mod.in_channels // mod.groups)
        total[0] += out.numel() // out.shape[0] * k

    def lin_hook(mod, inp, out):
        total[0] += out.numel() // out.shape[0] * mod.in_features

    hs = []
    for mod in model.modules():
        if isinstance(mod, torch.nn.Conv2d):
            hs.append(mod.register_forward_hook(conv_hook))
        elif isinstance(mod, torch.nn.Linear):
            hs.append(mod.register_forward_hook(lin_hook))
    with torch.inference_mode():
        model(torch.zeros(1, 3, size, size))
    for h in hs:
        h.remove()
    return total[0]


def export(name, out_dir):
    import torch

    size = MODELS[name]
    m = build(name)
    macs = count_macs(m, size)
    path = os.path.join(out_dir, f"{name}.onnx")
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    t0 = time.time()
    with torch.no_grad():
        torch.onnx.export(m, x, path, input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
                          opset_version=13, do_constant_folding=True)
    import onnx
    onnx.checker.check_model(onnx.load(path))
    torch.save(m.state_dict(), os.path.join(out_dir, f"{name}.pt"))  # for tools/bench/peer_torch.py
    print(f"export_onnx: {path}: {os.path.getsize(path) / 1e6:.1f} MB, "
          f"{macs / 1e9:.3f} GMAC/image, {time.time() - t0:.1f}s", flush=True)
    return macs


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help=f"subset of {sorted(MODELS)}")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "models"))
    ap.add_argument("--force", action="store_true", help="re-export existing files")
    a = ap.parse_args(argv)
    names = a.names or list(MODELS)
    for n in names:
        if n not in MODELS:
            print(f"export_onnx: unknown model {n}", file=sys.stderr)
            return 2
    os.makedirs(a.out, exist_ok=True)
    mpath = os.path.join(a.out, "torch_macs.json")
    macs = {}
    if os.path.exists(mpath):
        with open(mpath) as fh:
            macs = json.load(fh)
    for n in names:
        have = all(os.path.exists(os.path.join(a.out, f"{n}.{e}")) for e in ("onnx", "pt"))
        if not a.force and have and n in macs:
            continue
        macs[n] = export(n, a.out)
        with open(mpath, "w") as fh:
            json.dump(macs, fh, indent=1, sort_keys=True)
            fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
