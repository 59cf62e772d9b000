#!/usr/bin/env python3
"""Runs build/kerasc on every form of every tests/apps model and compares with expected_0.npy.

    /usr/bin/python3 tools/apps/check_kerasc.py [--kerasc build/kerasc] [DIR ...]

DIR defaults to every tests/apps/*/. For each form listed in meta.json:
``kerasc summary`` must load it and ``kerasc run`` must reproduce
expected_0.npy within the tolerance in meta.json,
max|kerasc - expected| <= 1e-4 * max(1, max|expected|). Exit status 1 on any
failure. Test tooling only; nothing here is part of kerasc.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def check(kerasc, d):
    meta = json.load(open(os.path.join(d, "meta.json")))
    inputs = [os.path.join(d, i["file"]) for i in meta["inputs"]]
    expected = [np.load(os.path.join(d, o["file"])) for o in meta["outputs"]]
    rows = []
    for form, fname in meta["forms"].items():
        path = os.path.join(d, fname)
        r = subprocess.run([kerasc, "summary", path], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            rows.append((form, False, f"summary failed: {r.stderr.strip()[-300:]}"))
            continue
        with tempfile.TemporaryDirectory(prefix="apps_run_") as tmp:
            outs = [os.path.join(tmp, f"out_{i}.npy") for i in range(len(expected))]
            cmd = [kerasc, "run", path]
            for i in inputs:
                cmd += ["--input", i]
            for o in outs:
                cmd += ["--output", o]
            t0 = time.time()
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            dt = time.time() - t0
            if r.returncode != 0:
                rows.append((form, False, f"run failed: {r.stderr.strip()[-300:]}"))
                continue
            worst, ok = 0.0, True
            for o, e in zip(outs, expected):
                y = np.load(o)
                if y.shape != e.shape:
                    ok = False
                    worst = float("nan")
                    break
                err = float(np.max(np.abs(y.astype(np.float64) - e)))
                worst = max(worst, err)
                ok = ok and err <= 1e-4 * max(1.0, float(np.max(np.abs(e))))
            rows.append((form, ok, f"max abs diff {worst:.3e} ({dt:.2f}s)"))
    return rows


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kerasc", default=os.path.join(ROOT, "build", "kerasc"))
    ap.add_argument("dirs", nargs="*")
    a = ap.parse_args(argv)
    dirs = a.dirs or sorted(glob.glob(os.path.join(ROOT, "tests", "apps", "*", "")))
    bad = 0
    for d in dirs:
        name = os.path.basename(os.path.normpath(d))
        for form, ok, msg in check(a.kerasc, d):
            print(f"{name} {form}: {'ok' if ok else 'FAIL'} {msg}", flush=True)
            bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
