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


def make_chunked_scalar():
    """A chunked dataset whose dataspace says scalar (rank 0) while its
    chunks are rank 1: libhdf5 1.10 then loops in H5Dread, allocating
    without bound. libhdf5 never writes this; the reader must refuse it
    before reading."""
    with h5py.File(path("chunked_scalar.h5"), "w") as f:
        f.create_dataset("c", data=np.arange(100, dtype=np.float32), chunks=(10,))

    def to_scalar(data):
        # dataspace message v1: version 1, rank 1, flags 1 (max dims), dims 100
        i = data.find(b"\x01\x01\x01\x00\x00\x00\x00\x00" + (100).to_bytes(8, "little"))
        assert i >= 0
        data[i + 1] = 0
    patch("chunked_scalar.h5", "chunked_scalar.h5", to_scalar)


def unknown_pipeline(data):
    """/gzip's filter pipeline message (type 0x000b, 56 bytes) turned into
    an unknown message type: libhdf5 1.10 then takes the dataset as
    unfiltered and reads each 24-27 byte compressed chunk as a raw one of
    40 bytes, copying 40 bytes out of the shorter buffer (heap over-read,
    found by fuzz_h5). The reader must refuse the chunks before reading."""
    pattern = b"\x0b\x00\x38\x00\x01\x00\x00\x00\x01\x02"
    i = data.find(pattern)
    assert i >= 0 and data.find(pattern, i + 1) < 0
    data[i + 1] = 0x01


def make_short_raw_chunks():
    patch("dtypes.h5", "short_raw_chunks.h5", unknown_pipeline)


def make_bad_heaps():
    with h5py.File(path("heaps.h5"), "w") as f:
        f.create_group("layers").attrs["name"] = "dense"  # vlen: global heap
    patch("heaps.h5", "bad_gheap.h5", break_gheap)
    patch("heaps.h5", "bad_lheap.h5", break_lheap)
    os.remove(path("heaps.h5"))


def break_linfo(data):
    """libhdf5 1.10.8 bug, NOT preventable before calling it: a link info
    message (new-style group) with a defined fractal heap address but an
    undefined (all-ones) name-index B-tree address. Listing the group reads
    metadata at HADDR_UNDEF; addr + size wraps past the EOA check and
    H5F__accum_read memcpy()s from the NULL accumulator buffer: SIGSEGV
    (H5Literate -> H5G__obj_iterate -> H5G__obj_get_linfo -> H5B2_open ->
    H5C_protect -> H5F_block_read -> H5F__accum_read). h5py crashes too."""
    # v1 message header (type 2, size 24) + version 0, flags 0, both addresses undefined
    pattern = b"\x02\x00\x18\x00\x00\x00\x00\x00\x00\x00" + b"\xff" * 16
    i = data.find(pattern)
    assert i >= 0
    data[i + 10:i + 18] = (0x60).to_bytes(8, "little")


def break_enum_base(data):
    """libhdf5 1.10.8 bug, NOT preventable before calling it: an enum
    datatype message (here /bool's) whose base integer claims 1024 bytes.
    The decoder memcpy()s nmembs * base size (2048) bytes of member values
    from a 40-byte message: heap over-read in H5Odtype.c's decode helper,
    reached from H5Dopen (H5Oopen -> H5D_open -> H5O_msg_read). Silent
    without ASan (the values come from neighbouring heap memory)."""
    pattern = b"\x18\x02\x00\x00\x01\x00\x00\x00\x10\x08\x00\x00\x01\x00\x00\x00"
    i = data.find(pattern)
    assert i >= 0
    data[i + 12:i + 16] = (1024).to_bytes(4, "little")


def break_attr_size(data):
    """libhdf5 1.10.8 bug, NOT preventable before calling it: the attribute
    decoder (H5Oattr.c) only checks the data size against the whole
    message, not against what is left after the name, datatype and
    dataspace. The root's last attribute message ("matrix", 2x2 strings,
    72-byte message) gets a 1-byte string type widened to 18 bytes: 4 * 18
    = 72 passes the check, and memcpy reads 56 bytes past the message and
    its header chunk (H5Aexists -> H5O__attr_exists ->
    H5O__msg_iterate_real -> attribute decode). The fuzzer found it as a
    heap over-read or use-after-free depending on the neighbouring heap."""
    i = data.find(b"matrix\x00\x00\x13")  # name padded to 8, then a string type
    assert i >= 0
    data[i + 12:i + 16] = (18).to_bytes(4, "little")


def make_libhdf5_repros():
    """Inputs that crash libhdf5 itself, kept to document the findings of
    fuzz/fuzz_h5.c. Never open them in-process."""
    os.makedirs(os.path.join(OUT, "libhdf5_bugs"), exist_ok=True)
    patch("links.h5", "libhdf5_bugs/linfo_undef_btree_segv.h5", break_linfo)
    patch("dtypes.h5", "libhdf5_bugs/enum_base_size_overread.h5", break_enum_base)
    patch("strings.h5", "libhdf5_bugs/attr_data_overread.h5", break_attr_size)


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
    make_chunked_scalar()
    make_short_raw_chunks()
    make_libhdf5_repros()


if __name__ == "__main__":
    main()
