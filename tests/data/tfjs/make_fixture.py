#!/usr/bin/env python3
"""Writes the tiny TF.js layers-model fixture used by tests/unit/test_tfjs.c.

One weight group cut into two shard files at byte 28, so that bn/gamma
(uint16-quantized, bytes 27..30) straddles the boundary in the middle of its
first element. The expected decoded values are in test_tfjs.c; rerun this
only if you change both.
"""
import json
import struct

weights = []
blob = b""


def add(name, shape, dtype, data, quantization=None):
    global blob
    entry = {"name": name, "shape": shape, "dtype": dtype}
    if quantization:
        entry["quantization"] = quantization
    weights.append(entry)
    blob += data


# float32 as is
add("dense/kernel", [2, 3], "float32",
    struct.pack("<6f", 0.5, -1.25, 2.0, 3.75, -0.125, 100.0))
# uint8 affine: q * 0.5 - 1 -> -1, 0, 126.5
add("dense/bias", [3], "float32", bytes([0, 2, 255]),
    {"dtype": "uint8", "min": -1.0, "scale": 0.5, "original_dtype": "float32"})
# uint16 affine: q * 0.125 + 0.25 -> 1.25, 125.25 (straddles the shards)
add("bn/gamma", [2], "float32", struct.pack("<2H", 8, 1000),
    {"dtype": "uint16", "min": 0.25, "scale": 0.125, "original_dtype": "float32"})
# float16: 1, -2, 0.333251953125, 2^-24 (smallest subnormal)
add("bn/beta", [4], "float32", struct.pack("<4H", 0x3C00, 0xC000, 0x3555, 0x0001),
    {"dtype": "float16"})
# int32 scalar
add("optimizer/step", [], "int32", struct.pack("<i", -7))
# bool
add("mask", [3], "bool", bytes([1, 0, 1]))
# int32 from uint8: Math.round(q * 0.25 - 0.5) -> 0, 1, 1
add("counts", [3], "int32", bytes([0, 4, 7]),
    {"dtype": "uint8", "min": -0.5, "scale": 0.25, "original_dtype": "int32"})

assert len(blob) == 49
cut = 28
with open("group1-shard1of2.bin", "wb") as f:
    f.write(blob[:cut])
with open("group1-shard2of2.bin", "wb") as f:
    f.write(blob[cut:])

model = {
    "format": "layers-model",
    "generatedBy": "keras v2.15.0",
    "convertedBy": "TensorFlow.js Converter v4.22.0",
    "modelTopology": {
        "keras_version": "2.15.0",
        "backend": "tensorflow",
        "model_config": {
            "class_name": "Sequential",
            "config": {
                "name": "fixture",
                "layers": [
                    {"class_name": "InputLayer",
                     "config": {"batch_input_shape": [None, 2], "dtype": "float32",
                                "name": "input"}},
                    {"class_name": "Dense",
                     "config": {"name": "dense", "units": 3, "activation": "linear",
                                "use_bias": True}},
                ],
            },
        },
    },
    "weightsManifest": [
        {"paths": ["group1-shard1of2.bin", "./group1-shard2of2.bin"], "weights": weights}
    ],
}
with open("model.json", "w") as f:
    json.dump(model, f, indent=1)
    f.write("\n")
