#!/usr/bin/env python3
"""Streamed-weights fidelity on a GPU: each model of tests/apps/ runs with
its variables in host memory under the tightest budget that streams
(the minimum kerasc reports + a quarter of the weights), and its output
is compared with the golden reference (expected_0.npy) at the zoo's
tolerance, 1e-4 * max(1, max|ref|).

Usage: gpu_fidelity.py KERASC DEVICE MODEL_DIR...   (DEVICE e.g. /GPU:0)
Prints one line per model and `gpu_fidelity: N passed, M failed`; exits
nonzero on any failure.
"""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def minimum_budget(kerasc, model, inp, device):
    rc, out = run([kerasc, "run", model, "--input", inp, "--output", os.devnull,
                   "--device", device, "--strict-placement", "--variables", "/CPU:0",
                   "--device-memory", "1"])
    m = re.search(r"below the minimum ([0-9.]+) (bytes|KiB|MiB|GiB)", out)
    if rc == 0 or not m:
        raise RuntimeError(f"no minimum budget reported: {out.strip()[:300]}")
    return int(float(m.group(1)) * UNITS[m.group(2)]) + 1


def check(kerasc, device, folder):
    model = os.path.join(folder, "model.keras")
    inp = os.path.join(folder, "input_0.npy")
    ref = np.load(os.path.join(folder, "expected_0.npy"))
    budget = minimum_budget(kerasc, model, inp, device) + os.path.getsize(model) // 4
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "y.npy")
        rc, text = run([kerasc, "run", model, "--input", inp, "--output", out,
                        "--device", device, "--strict-placement", "--variables", "/CPU:0",
                        "--device-memory", str(budget), "--stats"])
        if rc != 0:
            return False, f"kerasc failed: {text.strip()[:300]}"
        got = np.load(out)
    streamed = re.search(r"^streamed weights .*$", text, re.M)
    ring = re.search(r"ring (\d+) x", text)
    if not streamed or not ring or ring.group(1) == "0":
        return False, "nothing was streamed at budget %d" % budget
    tol = 1e-4 * max(1.0, float(np.abs(ref).max()))
    err = float(np.abs(got.astype(np.float64) - ref).max())
    what = f"max|diff| {err:.3g} (tol {tol:.3g}), budget {budget}, {streamed.group(0)}"
    return got.shape == ref.shape and err <= tol, what


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: gpu_fidelity.py KERASC DEVICE MODEL_DIR...")
    kerasc, device, folders = sys.argv[1], sys.argv[2], sys.argv[3:]
    passed = failed = 0
    for folder in folders:
        try:
            ok, what = check(kerasc, device, folder)
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as err:
            ok, what = False, str(err)
        print(f"{'ok  ' if ok else 'FAIL'} {folder}: {what}")
        passed += ok
        failed += not ok
    print(f"gpu_fidelity: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
