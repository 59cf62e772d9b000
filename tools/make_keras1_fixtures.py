#!/usr/bin/env python3
"""Write tiny Keras 1.x-layout HDF5 models for the binder tests.

Keras 1 LSTM/GRU with consume_less='cpu' store one W, U, b per gate
(LSTM in i, c, f, o order; GRU z, r, h); kerasc must fuse them as Keras 2's
loader does. Values are arange-based so a test can check every position.
Run with Debian's python3-h5py: /usr/bin/python3 tools/make_keras1_fixtures.py
"""
import json
import sys

import h5py
import numpy as np

out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/h5/keras1_rnn.h5"
IN, U = 3, 2
config = {"class_name": "Sequential", "config": [
    {"class_name": "LSTM", "config": {"name": "lstm_1", "output_dim": U, "consume_less": "cpu",
     "activation": "tanh", "inner_activation": "hard_sigmoid", "return_sequences": True,
     "batch_input_shape": [None, 4, IN], "input_dim": IN, "input_length": 4, "trainable": True}},
    {"class_name": "GRU", "config": {"name": "gru_1", "output_dim": U, "consume_less": "mem",
     "activation": "tanh", "inner_activation": "hard_sigmoid", "trainable": True}},
]}
with h5py.File(out, "w") as f:
    f.attrs["model_config"] = json.dumps(config).encode()
    f.attrs["keras_version"] = b"1.2.2"
    mw = f.create_group("model_weights")
    mw.attrs["layer_names"] = np.array([b"lstm_1", b"gru_1"])
    # value = 100 * gate_position_in_file + running index, so the fused
    # order is visible in every element.
    for layer, gates, in_dim in (("lstm_1", "icfo", IN), ("gru_1", "zrh", U)):
        g = mw.create_group(layer)
        names = []
        for k, gate in enumerate(gates):
            for kind, shape in (("W", (in_dim, U)), ("U", (U, U)), ("b", (U,))):
                name = f"{layer}_{kind}_{gate}:0"
                n = int(np.prod(shape))
                g.create_dataset(name, data=(100 * k + np.arange(n)).reshape(shape).astype("f4"))
                names.append(name.encode())
        g.attrs["weight_names"] = np.array(names)
