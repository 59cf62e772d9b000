#!/usr/bin/env python3
"""Python half of the zoo build; run after `node tools/zoo/make_zoo.js`:

    node tools/zoo/make_zoo.js && /usr/bin/python3 tools/zoo/make_all.py

1. tfjs_to_keras.py     model.h5 + model.keras for the tfjs-oracle zoo models
2. make_numpy_zoo.py    the NumPy-oracle zoo models (.keras + .h5)
3. make_real_refs.py    tests/real_refs/ (real models + nsfwjs)
4. crosscheck_numpy.js  tfjs-core kernels vs the weight-free NumPy models
5. verify               every form of every zoo model read back (h5py / zipfile)
                        and re-run with numpy_ref.py against expected_*.npy;
                        sizes.

`make_all.py --verify` runs step 5 only.
"""

import glob
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import make_numpy_zoo  # noqa: E402
import make_real_refs  # noqa: E402
import tfjs_to_keras  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
MAX_FORM_BYTES = 200 * 1024


def du(path):
    total = 0
    for dp, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(dp, f)) for f in files)
    return total


def verify():
    bad = 0
    zoo = sorted(glob.glob(os.path.join(ROOT, "tests", "zoo", "*", "meta.json")))
    for mf in zoo:
        d = os.path.dirname(mf)
        meta = json.load(open(mf))
        name = meta["name"]
        try:
            ins = [np.load(os.path.join(d, i["file"])) for i in meta["inputs"]]
            exp = [np.load(os.path.join(d, o["file"])) for o in meta["outputs"]]
            for a, i in zip(ins, meta["inputs"]):
                assert list(a.shape) == i["shape"] and str(a.dtype) == i["dtype"], f"{i['file']} != meta"
            for a, o in zip(exp, meta["outputs"]):
                assert list(a.shape) == o["shape"] and a.dtype == np.float32, f"{o['file']} != meta"
            for form, fn in meta["forms"].items():
                p = os.path.join(d, fn)
                size = os.path.getsize(p) + (os.path.getsize(os.path.join(d, "weights.bin")) if form == "tfjs" else 0)
                assert size < MAX_FORM_BYTES, f"{fn}: {size} bytes"
                if form == "h5":
                    tfjs_to_keras.verify_h5(p)
                elif form == "keras":
                    tfjs_to_keras.verify_keras(p)
                tfjs_to_keras.check_form(p, ins, exp)
        except Exception as e:  # noqa: BLE001
            print(f"verify: {name}: {e}")
            bad += 1
    refs = sorted(glob.glob(os.path.join(ROOT, "tests", "real_refs", "*", "meta.json")))
    for mf in refs:
        d = os.path.dirname(mf)
        meta = json.load(open(mf))
        for f in meta["inputs"] + meta["outputs"]:
            a = np.load(os.path.join(d, f["file"]))
            if list(a.shape) != f["shape"]:
                print(f"verify: {d}: {f['file']} shape")
                bad += 1
    zb, rb = du(os.path.join(ROOT, "tests", "zoo")), du(os.path.join(ROOT, "tests", "real_refs"))
    print(f"verify: {len(zoo)} zoo models ({'all forms agree with expected' if not bad else f'{bad} FAILED'}), "
          f"{len(refs)} real refs; sizes tests/zoo {zb / 1e6:.2f} MB, tests/real_refs {rb / 1e6:.2f} MB, "
          f"total {(zb + rb) / 1e6:.2f} MB")
    return bad


def main(argv):
    if argv == ["--verify"]:
        return 1 if verify() else 0
    rc = tfjs_to_keras.main([])
    rc |= make_numpy_zoo.main([])
    rc |= make_real_refs.main([])
    rc |= subprocess.call(["node", os.path.join(HERE, "crosscheck_numpy.js")])
    rc |= 1 if verify() else 0
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
