#!/usr/bin/env python3
"""Builds the NumPy-oracle part of kerasc's zoo (tests/zoo/<name>/, "oracle": "numpy").

    /usr/bin/python3 tools/zoo/make_numpy_zoo.py [NAME ...]

These models use what tfjs-layers cannot build or computes differently from
Keras: Keras 3 ops nodes (x + 3.0, x * (1/6): MobileNetV3's hard-swish),
Rescaling, Normalization (adapted weights and config constants), Resizing
(bilinear, half-pixel), CenterCrop, UpSampling2D(bilinear), MultiHeadAttention
(with and without attention_mask), GroupNormalization, hard_swish / Keras 3
hard_sigmoid, GRU(reset_after=True), Conv1D causal, Conv2D groups, Subtract,
ELU(alpha), Softmax(axis=1), ReLU(negative_slope, threshold).

Each model is written directly as a Keras 3.6 .keras zip and (except the ops
model) as a legacy .h5 the way Keras 3.6 writes it (§2.6: Keras 3 config,
dict inbound_nodes, weight_names without ":0"). Inputs are seeded; the
expected outputs are computed by tools/zoo/numpy_ref.py from model.keras as
read back from disk, and checked against model.h5 and the eager build.
"""

import json
import os
import shutil
import sys

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kconvert  # noqa: E402
import kzoo  # noqa: E402
import numpy_ref  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ZOO = os.path.join(ROOT, "tests", "zoo")
B = 2


def _init(cls, **cfg):
    return {"module": "keras.initializers", "class_name": cls, "config": cfg, "registered_name": None}


GLOROT = _init("GlorotUniform", seed=None)
ZEROS = _init("Zeros")
ONES = _init("Ones")
ORTHO = _init("Orthogonal", gain=1.0, seed=None)

# Default Keras 3 config keys per class (merged under the given ones).
DEFAULTS = {
    "Dense": dict(units=None, activation="linear", use_bias=True, kernel_initializer=GLOROT,
                  bias_initializer=ZEROS, kernel_regularizer=None, bias_regularizer=None,
                  kernel_constraint=None, bias_constraint=None),
    "Conv1D": dict(filters=None, kernel_size=None, strides=[1], padding="valid", data_format="channels_last",
                   dilation_rate=[1], groups=1, activation="linear", use_bias=True, kernel_initializer=GLOROT,
                   bias_initializer=ZEROS, kernel_regularizer=None, bias_regularizer=None,
                   activity_regularizer=None, kernel_constraint=None, bias_constraint=None),
    "Conv2D": dict(filters=None, kernel_size=None, strides=[1, 1], padding="valid", data_format="channels_last",
                   dilation_rate=[1, 1], groups=1, activation="linear", use_bias=True, kernel_initializer=GLOROT,
                   bias_initializer=ZEROS, kernel_regularizer=None, bias_regularizer=None,
                   activity_regularizer=None, kernel_constraint=None, bias_constraint=None),
    "GRU": dict(units=None, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                kernel_initializer=GLOROT, recurrent_initializer=ORTHO, bias_initializer=ZEROS,
                kernel_regularizer=None, recurrent_regularizer=None, bias_regularizer=None,
                activity_regularizer=None, kernel_constraint=None, recurrent_constraint=None,
                bias_constraint=None, dropout=0.0, recurrent_dropout=0.0, reset_after=True, seed=None,
                return_sequences=False, return_state=False, go_backwards=False, stateful=False,
                unroll=False, zero_output_for_mask=False),
    "ReLU": dict(max_value=None, negative_slope=0.0, threshold=0.0),
    "ELU": dict(alpha=1.0),
    "LeakyReLU": dict(negative_slope=0.3),
    "Softmax": dict(axis=-1),
    "Rescaling": dict(scale=1.0, offset=0.0),
    "Normalization": dict(axis=[-1], mean=None, variance=None, invert=False),
    "Resizing": dict(height=None, width=None, interpolation="bilinear", crop_to_aspect_ratio=False,
                     pad_to_aspect_ratio=False, fill_mode="constant", fill_value=0.0, antialias=False,
                     data_format="channels_last"),
    "CenterCrop": dict(height=None, width=None, data_format="channels_last"),
    "UpSampling2D": dict(size=[2, 2], data_format="channels_last", interpolation="nearest"),
    "GroupNormalization": dict(groups=32, axis=-1, epsilon=0.001, center=True, scale=True,
                               beta_initializer=ZEROS, gamma_initializer=ONES, beta_regularizer=None,
                               gamma_regularizer=None, beta_constraint=None, gamma_constraint=None),
    "MultiHeadAttention": dict(num_heads=None, key_dim=None, value_dim=None, dropout=0.0, use_bias=True,
                               output_shape=None, attention_axes=None, kernel_initializer=GLOROT,
                               bias_initializer=ZEROS, kernel_regularizer=None, bias_regularizer=None,
                               activity_regularizer=None, kernel_constraint=None, bias_constraint=None,
                               seed=None),
}


def weight_shapes(cls, c, ins):
    """[(var name, shape, dtype)] in canonical (vars) order, from the input shapes."""
    x = ins[0]
    if cls == "Dense":
        return [("kernel", (x[-1], c["units"]), "float32")] + ([("bias", (c["units"],), "float32")] if c["use_bias"] else [])
    if cls in ("Conv1D", "Conv2D"):
        k = tuple(c["kernel_size"])
        return [("kernel", k + (x[-1] // c["groups"], c["filters"]), "float32")] + \
            ([("bias", (c["filters"],), "float32")] if c["use_bias"] else [])
    if cls == "GRU":
        u = c["units"]
        return [("kernel", (x[-1], 3 * u), "float32"), ("recurrent_kernel", (u, 3 * u), "float32"),
                ("bias", (2, 3 * u) if c["reset_after"] else (3 * u,), "float32")]
    if cls == "Bidirectional":
        ws = weight_shapes(c["layer"]["class_name"], c["layer"]["config"], ins)
        return ws + ws
    if cls == "GroupNormalization":
        out = []
        if c["scale"]:
            out.append(("gamma", (x[-1],), "float32"))
        if c["center"]:
            out.append(("beta", (x[-1],), "float32"))
        return out
    if cls == "Normalization":
        if c["mean"] is not None:
            return []
        return [("mean", (x[-1],), "float32"), ("variance", (x[-1],), "float32"), ("count", (), "int64")]
    if cls == "MultiHeadAttention":
        q, v = ins[0], ins[1]
        kdim = ins[2][-1] if len(ins) > 2 and ins[2] is not None else v[-1]
        n, kd = c["num_heads"], c["key_dim"]
        vd = c["value_dim"] or kd
        out = []
        for nm, shp, bshp in (("query", (q[-1], n, kd), (n, kd)), ("key", (kdim, n, kd), (n, kd)),
                              ("value", (v[-1], n, vd), (n, vd)), ("attention_output", (n, vd, q[-1]), (q[-1],))):
            out.append((nm + "/kernel", shp, "float32"))
            if c["use_bias"]:
                out.append((nm + "/bias", bshp, "float32"))
        return out
    return []


class H:
    """A symbolic tensor of the model being built, with its eager value."""

    def __init__(self, name, node, tensor, value, mask=None):
        self.name, self.node, self.tensor, self.value, self.mask = name, node, tensor, value, mask

    def kt(self):
        v = np.asarray(self.value)
        dt = "int32" if v.dtype.kind in "iu" else "float32"
        return {"class_name": "__keras_tensor__",
                "config": {"shape": [None] + list(v.shape[1:]), "dtype": dt,
                           "keras_history": [self.name, self.node, self.tensor]}}


class Builder:
    def __init__(self, name):
        self.name = name
        self.entries = []
        self.counts = {}
        self.rng = kzoo.Lcg(kzoo.fnv1a(f"{name}/weights"))
        self.ex = numpy_ref.Executor(3)
        self.inputs = []
        self.input_arrays = []

    def _uniq(self, base):
        k = self.counts.get(base, -1) + 1
        self.counts[base] = k
        return base if k == 0 else f"{base}_{k}"

    def input(self, shape, dtype="float32", scale=1.0, data=None):
        n = self._uniq("input_layer")
        i = len(self.inputs)
        if data is None:
            data = kzoo.uniform(f"{self.name}/input_{i}", (B,) + tuple(shape), scale)
        data = np.asarray(data)
        self.entries.append({"module": "keras.layers", "class_name": "InputLayer",
                             "config": {"batch_shape": [None] + list(shape), "dtype": dtype, "sparse": False, "name": n},
                             "registered_name": None, "name": n, "inbound_nodes": []})
        h = H(n, 0, 0, data.astype(np.float64) if dtype == "float32" else data)
        self.inputs.append(h)
        self.input_arrays.append(data)
        return h

    def _ser(self, obj):
        if isinstance(obj, H):
            return obj.kt()
        if isinstance(obj, (list, tuple)):
            return [self._ser(a) for a in obj]
        return obj

    def _val(self, obj):
        if isinstance(obj, H):
            return obj.value
        if isinstance(obj, (list, tuple)):
            return [self._val(a) for a in obj]
        return obj

    def _mask(self, obj):
        if isinstance(obj, H):
            return obj.mask
        if isinstance(obj, (list, tuple)):
            return [self._mask(a) for a in obj]
        return None

    def layer(self, cls, *args, kwargs=None, name=None, weights=None, **cfg):
        kwargs = kwargs or {}
        n = name or self._uniq(kzoo.snake_case(cls))
        c = {"name": n, "trainable": True, "dtype": dict(kconvert.POLICY, config={"name": "float32"})}
        c.update(json.loads(json.dumps(DEFAULTS.get(cls, {}))))
        c.update(cfg)
        if cls == "Bidirectional":
            inner = c["layer"]
            base = inner["config"]["name"]
            f = json.loads(json.dumps(inner))
            f["config"]["name"] = "forward_" + base
            b = json.loads(json.dumps(inner))
            b["config"]["name"] = "backward_" + base
            b["config"]["go_backwards"] = not inner["config"]["go_backwards"]
            c["layer"], c["backward_layer"] = f, b
        entry = {"module": "keras.layers", "class_name": cls, "config": c, "registered_name": None}
        in_shapes = [[None] + list(np.shape(self._val(a)))[1:] if isinstance(a, H) else None for a in args]
        if cls == "MultiHeadAttention":
            key = kwargs.get("key")
            shp = [in_shapes[0], in_shapes[1], [None] + list(np.shape(key.value))[1:] if key is not None else None]
            ws = weight_shapes(cls, c, shp)
            entry["build_config"] = {"shapes_dict": {"query_shape": shp[0], "value_shape": shp[1], "key_shape": shp[2]}}
        else:
            first = args[0]
            if isinstance(first, (list, tuple)):
                bshape = [[None] + list(np.shape(a.value))[1:] for a in first]
            else:
                bshape = [None] + list(np.shape(first.value))[1:]
            ws = weight_shapes(cls, c, [bshape] if not isinstance(first, (list, tuple)) else bshape)
            entry["build_config"] = {"input_shape": bshape}
        if weights is not None:
            entry["__weights__"] = weights
        elif ws:
            arrs = []
            for vn, shp, dt in ws:
                if dt == "int64":
                    arrs.append(np.array(100, dtype=np.int64))
                else:
                    arrs.append(kzoo.weight_values(self.rng, vn, list(shp)))
            entry["__weights__"] = arrs
        entry["name"] = n
        entry["inbound_nodes"] = [{"args": self._ser(list(args)),
                                   "kwargs": {k: self._ser(v) for k, v in kwargs.items()}}]
        self.entries.append(entry)
        outs, masks = self.ex.call_layer(entry, self._val(list(args)),
                                         {k: self._val(v) for k, v in kwargs.items()}, self._mask(list(args)))
        hs = [H(n, 0, i, o, m) for i, (o, m) in enumerate(zip(outs, masks))]
        return hs[0] if len(hs) == 1 else hs

    def op(self, cls, *args):
        n = self._uniq(kzoo.snake_case(cls))
        entry = {"module": "keras.src.ops.numpy", "class_name": cls, "config": {"name": n},
                 "registered_name": cls, "name": n,
                 "inbound_nodes": [{"args": self._ser(list(args)), "kwargs": {}}]}
        self.entries.append(entry)
        outs, _ = self.ex.call_layer(entry, self._val(list(args)), {}, [None] * len(args))
        return H(n, 0, 0, outs[0])

    def functional(self, outputs):
        outputs = outputs if isinstance(outputs, list) else [outputs]
        io = lambda hs: [[h.name, h.node, h.tensor] for h in hs]  # noqa: E731
        ins, outs = io(self.inputs), io(outputs)
        cfg = {"name": f"zoo_{self.name}", "trainable": True, "layers": self.entries,
               "input_layers": ins[0] if len(ins) == 1 else ins,
               "output_layers": outs[0] if len(outs) == 1 else outs}
        self.outputs = outputs
        return {"module": "keras.src.models.functional", "class_name": "Functional", "config": cfg,
                "registered_name": "Functional", "build_config": {"input_shape": None}}

    def sequential(self, output):
        layers = []
        for e in self.entries:
            e = {k: v for k, v in e.items() if k not in ("name", "inbound_nodes")}
            layers.append(e)
        shape = layers[0]["config"]["batch_shape"]
        self.outputs = [output]
        return {"module": "keras", "class_name": "Sequential",
                "config": {"name": f"zoo_{self.name}", "trainable": True, "dtype": dict(kconvert.POLICY),
                           "layers": layers, "build_input_shape": shape},
                "registered_name": None, "build_config": {"input_shape": shape}}


def rnn_cfg(cls, name, **kw):
    c = {"name": name, "trainable": True, "dtype": dict(kconvert.POLICY)}
    c.update(json.loads(json.dumps(DEFAULTS[cls])))
    c.update(kw)
    return {"module": "keras.layers", "class_name": cls, "config": c, "registered_name": None}


# ---------------------------------------------------------------------------
# Models: name -> (builder function, layer list, note, forms)

MODELS = []


def model(name, layers, note="", forms=("keras", "h5")):
    def deco(fn):
        MODELS.append(dict(name=name, fn=fn, layers=layers, note=note, forms=forms))
        return fn
    return deco


@model("conv1d_causal", ["Conv1D"], "padding='causal' (left pad (k-1)*d), k3 and k2 with dilation 2 (tfjs lacks causal)")
def _(b):
    x = b.input([10, 2])
    y = b.layer("Conv1D", x, filters=4, kernel_size=[3], padding="causal")
    y = b.layer("Conv1D", y, filters=3, kernel_size=[2], padding="causal", dilation_rate=[2], activation="tanh")
    return b.functional(y)


@model("conv2d_groups", ["Conv2D"], "groups=2 (kernel (kh, kw, in/groups, filters))")
def _(b):
    x = b.input([6, 6, 4])
    y = b.layer("Conv2D", x, filters=6, kernel_size=[3, 3], padding="same", groups=2)
    y = b.layer("Conv2D", y, filters=4, kernel_size=[1, 1], groups=2, activation="relu")
    return b.functional(y)


@model("gru_reset_after", ["GRU", "Bidirectional"], "reset_after=True (Keras 2 TF2 / Keras 3 default; bias (2, 3u)); tfjs cannot")
def _(b):
    x = b.input([6, 4])
    a = b.layer("GRU", x, units=5, return_sequences=True)
    c = b.layer("GRU", a, units=3, go_backwards=True)
    d = b.layer("Bidirectional", x, merge_mode="concat",
                layer=rnn_cfg("GRU", "gru_2", units=2, return_sequences=True))
    return b.functional([a, c, d])


@model("ops_hard_swish", ["ops.numpy.Add", "ops.numpy.Multiply", "ops.numpy.Subtract", "ops.numpy.TrueDivide",
                          "ReLU", "Multiply", "Conv2D"],
       "Keras 3 ops nodes as MobileNetV3 writes them: ReLU(6)(x + 3.0) * (1/6), then x * hard_sigmoid(x); "
       "also 1.0 - t (constant first), t / 2.0 and tensor*tensor; .keras only (a legacy .h5 cannot tell ops from layers)",
       forms=("keras",))
def _(b):
    x = b.input([5, 5, 3], scale=3.0)
    c = b.layer("Conv2D", x, filters=4, kernel_size=[1, 1])
    a = b.op("Add", c, 3.0)
    r = b.layer("ReLU", a, max_value=6.0)
    hs = b.op("Multiply", r, 1.0 / 6.0)
    y = b.layer("Multiply", [c, hs])
    z = b.op("Subtract", 1.0, hs)
    w = b.op("TrueDivide", y, 2.0)
    p = b.op("Multiply", c, z)
    return b.functional([y, z, w, p])


@model("k3_activations", ["Dense", "Activation"],
       "Keras 3 semantics: hard_sigmoid = relu6(x+3)/6, hard_swish/hard_silu = x*relu6(x+3)/6, leaky_relu slope 0.2, silu, relu6, log_softmax")
def _(b):
    x = b.input([8], scale=4.0)
    outs = [b.layer("Dense", x, units=6, activation="hard_sigmoid")]
    for act in ("hard_sigmoid", "hard_swish", "hard_silu", "relu6", "leaky_relu", "silu", "log_softmax"):
        outs.append(b.layer("Activation", x, activation=act))
    return b.functional(outs)


@model("activation_layers_k3", ["ELU", "Softmax", "LeakyReLU", "ReLU"],
       "ELU(alpha=0.5), Softmax(axis=1), LeakyReLU(negative_slope=0.2), ReLU(max_value=4, negative_slope=0.1, threshold=0.5)")
def _(b):
    x = b.input([4, 5, 3], scale=3.0)
    return b.functional([
        b.layer("ELU", x, alpha=0.5),
        b.layer("Softmax", x, axis=1),
        b.layer("LeakyReLU", x, negative_slope=0.2),
        b.layer("ReLU", x, max_value=4.0, negative_slope=0.1, threshold=0.5),
    ])


@model("subtract", ["Subtract", "Dense"], "tfjs-layers has no Subtract")
def _(b):
    x = b.input([5])
    y = b.input([5])
    d = b.layer("Subtract", [x, y])
    return b.functional(b.layer("Dense", d, units=3))


@model("preprocessing_seq", ["Sequential", "Rescaling", "Normalization"],
       "Sequential: Rescaling(1/127.5, -1), Normalization with adapted mean/variance/count weights, "
       "per-channel Rescaling lists, Normalization with mean/variance in the config; input in [0, 255]")
def _(b):
    x = b.input([6, 7, 3], data=(kzoo.uniform("preprocessing_seq/input_0", (B, 6, 7, 3)) + 1.0) * 127.5)
    y = b.layer("Rescaling", x, scale=1.0 / 127.5, offset=-1.0)
    y = b.layer("Normalization", y, axis=[-1])
    y = b.layer("Rescaling", y, scale=[0.5, 1.0, 2.0], offset=[0.1, 0.0, -0.1])
    y = b.layer("Normalization", y, axis=[-1], mean=[0.2, -0.1, 0.0], variance=[0.25, 4.0, 1.0])
    return b.sequential(y)


@model("resizing_bilinear", ["Resizing"], "bilinear, half-pixel centres, no antialias: 4x5 -> 6x10, 9x9 -> 5x7, 4x5 -> 7x3")
def _(b):
    x = b.input([4, 5, 2])
    y = b.input([9, 9, 2])
    return b.functional([b.layer("Resizing", x, height=6, width=10),
                         b.layer("Resizing", y, height=5, width=7),
                         b.layer("Resizing", x, height=7, width=3)])


@model("center_crop", ["CenterCrop"], "8x9 -> 5x4 (offsets 1, 2) and 8x9 -> 3x7 (offsets 2, 1)")
def _(b):
    x = b.input([8, 9, 2])
    return b.functional([b.layer("CenterCrop", x, height=5, width=4), b.layer("CenterCrop", x, height=3, width=7)])


@model("upsampling2d_bilinear", ["UpSampling2D"],
       "interpolation='bilinear' = half-pixel resize (tf.image.resize); tfjs uses the legacy non-half-pixel form")
def _(b):
    x = b.input([3, 4, 2])
    return b.functional([b.layer("UpSampling2D", x, size=[2, 3], interpolation="bilinear"),
                         b.layer("UpSampling2D", x, size=[2, 2], interpolation="bilinear")])


@model("mha_self", ["MultiHeadAttention"], "self-attention mha(x, x), 2 heads, key_dim 4")
def _(b):
    x = b.input([5, 6])
    a = b.layer("MultiHeadAttention", x, x, num_heads=2, key_dim=4)
    return b.functional(a)


@model("mha_cross_mask", ["MultiHeadAttention"],
       "cross-attention with attention_mask (B,T,S) float 0/1 input (each row keeps >= 1 key); "
       "second MHA with a separate key tensor, use_bias=False, value_dim != key_dim")
def _(b):
    q = b.input([4, 6])
    v = b.input([5, 7])
    k = b.input([5, 3])
    mask = (kzoo.uniform("mha_cross_mask/mask", (B, 4, 5)) > -0.2).astype(np.float32)
    mask[:, :, 0] = 1.0
    m = b.input([4, 5], data=mask)
    a = b.layer("MultiHeadAttention", q, v, kwargs={"attention_mask": m}, num_heads=2, key_dim=3, value_dim=5)
    c = b.layer("MultiHeadAttention", q, v, kwargs={"key": k}, num_heads=1, key_dim=4, use_bias=False)
    return b.functional([a, c])


@model("group_norm", ["GroupNormalization", "Conv2D"], "groups=2 (eps 1e-3) and groups=3 with scale=False, eps 1e-5")
def _(b):
    x = b.input([4, 4, 6])
    c = b.layer("Conv2D", x, filters=6, kernel_size=[3, 3], padding="same")
    g = b.layer("GroupNormalization", c, groups=2)
    h = b.layer("GroupNormalization", x, groups=3, epsilon=1e-5, scale=False)
    return b.functional([g, h])


# ---------------------------------------------------------------------------


def build(spec):
    name = spec["name"]
    d = os.path.join(ZOO, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    b = Builder(name)
    entry = spec["fn"](b)
    inputs = b.input_arrays
    for i, a in enumerate(inputs):
        np.save(os.path.join(d, f"input_{i}.npy"), a.astype(np.float32) if a.dtype.kind == "f" else a.astype(np.int32))
    inputs = [np.load(os.path.join(d, f"input_{i}.npy")) for i in range(len(inputs))]
    forms = {}
    kp = os.path.join(d, "model.keras")
    kzoo.write_keras_zip(kp, entry, "3.6.0")
    forms["keras"] = "model.keras"
    if "h5" in spec["forms"]:
        kzoo.write_legacy_h5(os.path.join(d, "model.h5"), entry, "3.6.0", "k3")
        forms["h5"] = "model.h5"
    # The reference: model.keras read back from disk.
    outs = numpy_ref.run_file(kp, inputs)
    for o, h in zip(outs, b.outputs):
        if not np.allclose(o, h.value, rtol=0, atol=1e-9):
            raise ValueError(f"{name}: eager build and file disagree")
    if "h5" in forms:
        for o, r in zip(numpy_ref.run_file(os.path.join(d, "model.h5"), inputs), outs):
            if not np.allclose(o, r, rtol=0, atol=1e-9):
                raise ValueError(f"{name}: .h5 and .keras disagree")
    for i, o in enumerate(outs):
        if not np.all(np.isfinite(o)):
            raise ValueError(f"{name}: non-finite output")
        kzoo.save_npy(os.path.join(d, f"expected_{i}.npy"), o)
    meta = {
        "name": name, "oracle": "numpy", "layers": spec["layers"], "note": spec["note"], "forms": forms,
        "inputs": [{"file": f"input_{i}.npy", "name": h.name, "dtype": str(a.dtype), "shape": list(a.shape)}
                   for i, (h, a) in enumerate(zip(b.inputs, inputs))],
        "outputs": [{"file": f"expected_{i}.npy", "dtype": "float32", "shape": list(o.shape)} for i, o in enumerate(outs)],
        "tolerance": "max|kerasc - expected| <= 1e-4 * max(1, max|expected|)",
    }
    with open(os.path.join(d, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")
    return meta


def main(argv):
    names = set(argv)
    known = {m["name"] for m in MODELS}
    if not names and os.path.isdir(ZOO):
        for dname in os.listdir(ZOO):
            mf = os.path.join(ZOO, dname, "meta.json")
            if os.path.exists(mf) and json.load(open(mf)).get("oracle") == "numpy" and dname not in known:
                shutil.rmtree(os.path.join(ZOO, dname))
    for spec in MODELS:
        if names and spec["name"] not in names:
            continue
        meta = build(spec)
        print(f"{spec['name']}: {' '.join(str(o['shape']) for o in meta['outputs'])} forms {sorted(meta['forms'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
