#!/usr/bin/env python3
"""PyTorch peer of `kerasc bench` (see bench/README.md).

    /usr/bin/python3 tools/bench/peer_torch.py NAME [--batch B] [--iters N] [--warmup W] [--threads T]
        [--models bench/models]

NAME: mobilenet_v2 | inception_v3 | resnet50, the torchvision architectures
that tools/bench/export_onnx.py exports (same module, same ResNet50 v1
stride placement). Eager torchvision model in eval mode, run under
torch.inference_mode(), torch.set_num_threads(T) (and interop threads 1).

load_ms: building the torchvision module and loading the weights the ONNX
export used (bench/models/NAME.pt, a state_dict) - the analogue of loading a
model file. Then the protocol of `kerasc bench`: W warm-up runs (the first
timed as first_run_ms), N timed runs on a seeded uniform [0, 1) NCHW input of
batch B, the median; peak_rss_kb is ru_maxrss of the process (the Python
interpreter and libtorch, ~150 MB before any model, included).
"""

import argparse
import os
import resource
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in tools/bench
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--models", default=os.path.join(ROOT, "bench", "models"))
    a = ap.parse_args(argv)
    if a.batch < 1 or a.iters < 1 or a.warmup < 0:
        ap.error("--batch and --iters must be >= 1, --warmup >= 0")

    import torch  # imported after argument parsing: its import time is not load time

    if a.threads:
        torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    sys.path.insert(0, HERE)
    import export_onnx  # the one definition of the exported architectures

    if a.name not in export_onnx.MODELS:
        ap.error(f"unknown model {a.name} (known: {', '.join(export_onnx.MODELS)})")
    size = export_onnx.MODELS[a.name]
    wpath = os.path.join(a.models, a.name + ".pt")

    t0 = time.perf_counter()
    model = export_onnx.build(a.name, init=not os.path.exists(wpath))
    if os.path.exists(wpath):
        model.load_state_dict(torch.load(wpath))
    model.eval()
    load_ms = (time.perf_counter() - t0) * 1e3

    g = torch.Generator().manual_seed(0x9E3779B9)
    x = torch.rand(a.batch, 3, size, size, generator=g, dtype=torch.float32)
    times = []
    first_ms = 0.0
    with torch.inference_mode():
        for it in range(a.warmup + a.iters):
            s = time.perf_counter()
            y = model(x)
            dt = (time.perf_counter() - s) * 1e3
            del y
            if it == 0:
                first_ms = dt
            if it >= a.warmup:
                times.append(dt)
    times.sort()
    n = len(times)
    median = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
    print(f"model: {a.name} (torchvision)\nruntime: torch {torch.__version__}\nbatch: {a.batch}\n"
          f"iters: {a.iters}\nthreads: {a.threads or 'all'}\nload_ms: {load_ms:.1f}\n"
          f"first_run_ms: {first_ms:.2f}\nmedian_ms: {median:.3f}\n"
          f"median_ms_per_image: {median / a.batch:.3f}\nmin_ms: {times[0]:.3f}\nmax_ms: {times[-1]:.3f}\n"
          f"peak_rss_kb: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
