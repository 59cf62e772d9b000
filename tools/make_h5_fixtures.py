#!/usr/bin/python3
"""Write the tiny HDF5 fixtures of tests/unit/test_h5.c into tests/data/h5/.

Run with Debian's /usr/bin/python3 (python3-h5py), not a pyenv python:
    /usr/bin/python3 tools/make_h5_fixtures.py [outdir]

Each file exercises one thing the hardened reader must handle (string
attribute flavours, dtypes Keras writes) or refuse (soft/external links,
external and virtual storage, implausible sizes, truncation). The outputs
are committed; rerun only when adding a fixture.
"""
import os
import sys

import h5py
import numpy as np

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "h5")


def path(name):
    return os.path.join(OUT, name)


def fixed_attr(obj, name, values, pad, size):
    """A fixed-length string attribute with an explicit padding mode, which
    h5py's high-level API cannot choose (it always writes NULLPAD)."""
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(size)
    tid.set_strpad(pad)
    arr = np.array(values, dtype="S%d" % size)
    space = h5py.h5s.create_simple(arr.shape) if arr.shape else h5py.h5s.create(h5py.h5s.SCALAR)
    attr = h5py.h5a.create(obj.id, name.encode(), tid, space)
    attr.write(arr, mtype=tid)


def make_strings():
    with h5py.File(path("strings.h5"), "w") as f:
        f.attrs["fixed_scalar"] = np.bytes_(b'{"class_name": "Sequential"}')
        f.attrs["vlen_scalar"] = "2.15.0"
        f.attrs["fixed_array"] = np.array([b"conv2d", b"dense", b"dense_1"], dtype="S8")
        f.attrs.create("vlen_array", ["alpha", "b\u00e9ta", ""], dtype=h5py.string_dtype())
        f.attrs["utf8_scalar"] = "caf\u00e9"
        fixed_attr(f, "space_padded", [b"ab", b"cde"], h5py.h5t.STR_SPACEPAD, 6)
        fixed_attr(f, "null_term", b"xyz", h5py.h5t.STR_NULLTERM, 8)
        # Keras splits attributes over 64 KiB into name0, name1, ...
        f.attrs["layer_names0"] = np.array([b"input_1", b"conv1"], dtype="S7")
        f.attrs["layer_names1"] = np.array([b"bn1", b"dense_out"], dtype="S9")
        f.attrs["numeric"] = np.int32(7)
        f.attrs["numeric_array"] = np.arange(3, dtype=np.float32)
        f.attrs["empty_array"] = np.array([], dtype="S4")
        f.attrs["matrix"] = np.array([[b"a", b"b"], [b"c", b"d"]], dtype="S1")
        g = f.create_group("model_weights")
        g.attrs["layer_names"] = np.array([b"dense"], dtype="S5")
        d = g.create_group("dense")
        d.attrs["weight_names"] = np.array([b"dense/kernel:0", b"dense/bias:0"], dtype="S14")
        d.create_dataset("dense/kernel:0", data=np.ones((2, 3), np.float32))
        d.create_dataset("dense/bias:0", data=np.zeros((3,), np.float32))
        # Keras writes a weightless layer's weight_names as np.array([]),
        # which numpy makes an empty float64 array.
        g.create_group("flatten").attrs["weight_names"] = np.array([])


def make_dtypes():
    with h5py.File(path("dtypes.h5"), "w") as f:
        f["f16"] = np.array([1.0, -2.5, 65504.0, 6.1035156e-05], dtype=np.float16)
        f["f32"] = np.arange(6, dtype=np.float32).reshape(2, 3)
        f["f32be"] = np.array([1.5, -3.0], dtype=">f4")
        f["f64"] = np.array([[0.25, -1e10]], dtype=np.float64)
        f["i8"] = np.array([-128, 127], dtype=np.int8)
        f["u8"] = np.array([0, 255], dtype=np.uint8)
        f["i64"] = np.array([-(2 ** 40), 3], dtype=np.int64)
        f["u64be"] = np.array([2 ** 33, 1], dtype=">u8")
        f["bool"] = np.array([True, False, True], dtype=bool)
        f["scalar"] = np.float32(3.25)
        f["empty"] = np.zeros((0, 4), np.float32)
        f["rank8"] = np.ones((1, 1, 1, 1, 1, 1, 2, 1), np.float32)
        f["rank9"] = np.ones((1,) * 9, np.float32)
        f.create_dataset("gzip", data=np.arange(100, dtype=np.float32), chunks=(10,),
                         compression="gzip", shuffle=True)
        # bfloat16 as Keras writes it: 2-byte opaque + dtype attribute.
        bits = np.array([0x3F80, 0xC040, 0x0000, 0x7F80], dtype="<u2")  # 1, -3, 0, inf
        bf = f.create_dataset("bf16", data=bits.view("V2"))
        bf.attrs["dtype"] = "bfloat16"
        f.create_dataset("opaque", data=bits.view("V2"))  # no dtype attr
        f["text"] = np.array([b"a", b"b"], dtype="S1")
        f["compound"] = np.zeros(2, dtype=[("a", "<i4"), ("b", "<f4")])
        # Declares 2^33 float32 (32 GiB) in a file of a few KB: no chunk is
        # ever written, so h5py stores nothing. Must be refused before read.
        f.create_dataset("huge", shape=(2 ** 33,), dtype=np.float32, chunks=(1024,))
        # 2 GiB declared: below 4 GiB, so plausible by Keras's rule.
        f.create_dataset("big_ok", shape=(2 ** 29,), dtype=np.float32, chunks=(1024,))
        g = f.create_group("model_weights/dense/dense")
        g["kernel:0"] = np.full((2, 2), 0.5, np.float32)


def make_links():
    with h5py.File(path("links.h5"), "w") as f:
        g = f.create_group("layers/dense/vars")
        g["0"] = np.ones(3, np.float32)
        f["layers/soft"] = h5py.SoftLink("/layers/dense")
        f["layers/ext"] = h5py.ExternalLink("dtypes.h5", "/f32")
        f["alias"] = f["layers/dense"]  # a second hard link: allowed
        f["layers/dense"].attrs["name"] = "dense"


def make_external():
    raw = path("external.bin")
    with open(raw, "wb") as fp:
        fp.write(np.arange(4, dtype=np.float32).tobytes())
    with h5py.File(path("external.h5"), "w") as f:
        f.create_dataset("ext", shape=(4,), dtype=np.float32,
                         external=[("external.bin", 0, 16)])


def make_virtual():
    with h5py.File(path("vds_src.h5"), "w") as f:
        f["data"] = np.arange(4, dtype=np.float32)
    layout = h5py.VirtualLayout(shape=(4,), dtype=np.float32)
    layout[:] = h5py.VirtualSource("vds_src.h5", "data", shape=(4,))
    with h5py.File(path("virtual.h5"), "w", libver="latest") as f:
        f.create_virtual_dataset("vds", layout, fillvalue=0)


def make_userblock():
    with h5py.File(path("userblock.h5"), "w", userblock_size=512) as f:
        f["x"] = np.array([7.0], np.float32)
    with open(path("userblock.h5"), "r+b") as fp:
        fp.write(b"not hdf5: a user block")


def make_truncated():
    with open(path("dtypes.h5"), "rb") as fp:
        data = fp.read()
    with open(path("truncated.h5"), "wb") as fp:
        fp.write(data[: len(data) // 2])


def patch(src, dst, fn):
    with open(path(src), "rb") as fp:
        data = bytearray(fp.read())
    fn(data)
    with open(path(dst), "wb") as fp:
        fp.write(bytes(data))


def break_gheap(data):
    """libhdf5 1.10 walks a global heap collection by each object's size; a
    first object claiming 256 bytes lands it on zeroed free space (index 0,
    size 0), where it loops forever. The reader must refuse the file."""
    g = data.find(b"GCOL")
    assert g >= 0
    data[g + 24:g + 32] = (256).to_bytes(8, "little")


def break_lheap(data):
    """A local heap whose data segment does not end in NUL: libhdf5 1.10
    strdup()s link names from it without a bound (heap over-read)."""
    h = data.find(b"HEAP")
    assert h >= 0
    size = int.from_bytes(data[h + 8:h + 16], "little")
    addr = int.from_bytes(data[h + 24:h + 32], "little")
    data[addr + size - 1] = ord("A")


def make_bad_heaps():
    with h5py.File(path("heaps.h5"), "w") as f:
        f.create_group("layers").attrs["name"] = "dense"  # vlen: global heap
    patch("heaps.h5", "bad_gheap.h5", break_gheap)
    patch("heaps.h5", "bad_lheap.h5", break_lheap)
    os.remove(path("heaps.h5"))


def main():
    os.makedirs(OUT, exist_ok=True)
    make_strings()
    make_dtypes()
    make_links()
    make_external()
    make_virtual()
    make_userblock()
    make_truncated()
    make_bad_heaps()


if __name__ == "__main__":
    main()
