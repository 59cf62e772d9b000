#!/usr/bin/env python3
"""Write the tiny .npy fixtures used by tests/unit/test_npy.c.

Run from the repository root with a Python that has NumPy:
    python3 tools/make_npy_fixtures.py
It rewrites tests/data/npy/ and the seed corpus fuzz/corpus/npy/. The files
are committed; rerun only to change them. test_npy.c checks the values, so
keep value() below and kc_npy_test_value() in the test in sync.
"""
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "npy")
CORPUS = os.path.join(ROOT, "fuzz", "corpus", "npy")

# descr -> file stem; one 2x3 array of each dtype kerasc loads.
DTYPES = ["<f2", "<f4", "<f8", "|i1", "<i2", "<i4", "<i8",
          "|u1", "<u2", "<u4", "<u8", "|b1"]


def value(dtype, n):
    """Element k of a fixture: exact in every dtype, negative for signed."""
    k = np.arange(n)
    kind = np.dtype(dtype).kind
    if kind == "f":
        return (k * 0.5 - 1.0).astype(dtype)
    if kind == "i":
        return (k - 3).astype(dtype)
    if kind == "u":
        return (k * 40).astype(dtype)
    return (k % 3 == 0).astype(dtype)


def save(name, array, version=None):
    path = os.path.join(DATA, name)
    with open(path, "wb") as f:
        np.lib.format.write_array(f, array, version=version, allow_pickle=True)
    return path


def main():
    os.makedirs(DATA, exist_ok=True)
    os.makedirs(CORPUS, exist_ok=True)
    for d in DTYPES:
        stem = np.dtype(d).name  # float32, uint8, bool, ...
        save(stem + "_2x3.npy", value(d, 6).reshape(2, 3))
    save("f8_scalar.npy", np.array(3.25, dtype="<f8"))
    save("i4_2x3x4.npy", value("<i4", 24).reshape(2, 3, 4))
    save("u1_5.npy", value("|u1", 5))
    save("f4_0x3.npy", np.zeros((0, 3), dtype="<f4"))
    save("i2_3_v2.npy", value("<i2", 3), version=(2, 0))
    save("f4_2_v3.npy", value("<f4", 2), version=(3, 0))
    # Files kerasc must reject, exactly as NumPy writes them.
    save("f4_2_bigendian.npy", value(">f4", 2))
    save("f4_2x3_fortran.npy", np.asfortranarray(value("<f4", 6).reshape(2, 3)))
    save("object.npy", np.array([1, "a"], dtype=object))

    # Seed corpus: small valid files of different dtypes, ranks, versions.
    for name in ["float32_2x3.npy", "f8_scalar.npy", "i4_2x3x4.npy",
                 "i2_3_v2.npy", "bool_2x3.npy"]:
        with open(os.path.join(DATA, name), "rb") as src:
            data = src.read()
        with open(os.path.join(CORPUS, name), "wb") as dst:
            dst.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
