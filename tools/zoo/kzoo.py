"""Shared helpers for kerasc's model zoo tools (pure Python + numpy + h5py).

Written from the file-format notes in /work/shared/docs/keras-formats.md
(section numbers below refer to it), independently of kerasc's C code.

In-memory model representation used by every tool here: a model config dict
exactly as it appears in a file (Keras 2 style ``{"class_name", "config"}``
or Keras 3 style with ``module``/``registered_name``), where each layer entry
that owns variables carries an extra private key ``"__weights__"``: the list
of numpy arrays in the canonical order given by :func:`var_specs` (the
Keras 3 ``vars/<i>`` order flattened over sub-objects, which is also the
Keras 2 ``weight_names`` order). Writers strip private keys.
"""

import copy
import io
import json
import re
import zipfile

import h5py
import numpy as np

# ---------------------------------------------------------------------------
# Deterministic numbers (same generator as tools/zoo/make_zoo.js)


def fnv1a(s):
    h = 0x811C9DC5
    for ch in s.encode("utf-8"):
        h ^= ch
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


class Lcg:
    def __init__(self, seed):
        self.s = seed & 0xFFFFFFFF

    def next(self):
        self.s = (1664525 * self.s + 1013904223) & 0xFFFFFFFF
        return self.s

    def u01(self, n=None):
        if n is None:
            return (self.next() >> 8) / 16777216.0
        return np.array([(self.next() >> 8) / 16777216.0 for _ in range(n)], dtype=np.float64)

    def sym(self, n=None):
        if n is None:
            return 2.0 * self.u01() - 1.0
        return 2.0 * self.u01(n) - 1.0


def uniform(seed_str, shape, scale=1.0):
    n = int(np.prod(shape)) if len(shape) else 1
    return (scale * Lcg(fnv1a(seed_str)).sym(n)).reshape(shape).astype(np.float32)


def weight_values(rng, var_name, shape):
    """Same scheme as make_zoo.js weightValues: activations stay O(1)."""
    n = int(np.prod(shape)) if len(shape) else 1
    leaf = var_name.split("/")[-1]
    if leaf in ("moving_variance", "gamma", "variance"):
        v = 0.5 + rng.u01(n)
    elif leaf in ("moving_mean", "beta", "bias", "mean"):
        v = 0.3 * rng.sym(n)
    elif leaf == "alpha":
        v = 0.05 + 0.4 * rng.u01(n)
    elif leaf == "embeddings":
        v = rng.sym(n)
    else:
        fan_in = int(np.prod(shape[:-1])) if len(shape) >= 2 else 1
        if leaf == "depthwise_kernel":
            fan_in = shape[0] * (shape[1] if len(shape) == 4 else 1)
        v = np.sqrt(3.0 / max(fan_in, 1)) * rng.sym(n)
    return v.reshape(shape).astype(np.float32)


# ---------------------------------------------------------------------------
# Names


def snake_case(name):
    """keras.src.utils.naming.to_snake_case (§1.8.2)."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    name = re.sub("([a-z])([A-Z])", r"\1_\2", name)
    return name.lower()


MODEL_CLASSES = ("Functional", "Model", "Sequential")
RNN_CELL = {"LSTM": "lstm_cell", "GRU": "gru_cell", "SimpleRNN": "simple_rnn_cell",
            "CuDNNLSTM": "cudnn_lstm", "CuDNNGRU": "cudnn_gru"}


def is_model(entry):
    return entry.get("class_name") in MODEL_CLASSES


def is_op(entry):
    m = entry.get("module") or ""
    return m.startswith("keras.src.ops") or m.startswith("keras.ops")


def entry_name(entry):
    return entry.get("name") or entry["config"].get("name")


def model_layers(entry):
    """Layer entries of a model config (Sequential may be a bare list)."""
    cfg = entry["config"]
    if isinstance(cfg, list):
        return cfg
    return cfg["layers"]


def weighted_sublayers(entry):
    """model.layers: Functional -> all entries except ops; Sequential -> without InputLayer."""
    out = []
    for e in model_layers(entry):
        if is_op(e):
            continue
        if entry["class_name"] == "Sequential" and e["class_name"] == "InputLayer":
            continue
        out.append(e)
    return out


# ---------------------------------------------------------------------------
# Variable layout per layer class
#
# var_specs(entry) -> list of dicts, one per variable, canonical order:
#   k2: Keras 2 variable name relative to the layer (weight_names entry minus
#       "<layer>/" and ":0"), e.g. "kernel", "lstm_cell/kernel",
#       "forward_lstm/lstm_cell/kernel", "query/kernel"
#   trainable: bool (legacy .h5 order = trainable then non-trainable)
#   sub: Keras 3 sub-object path ("" = the layer's own vars), e.g. "cell",
#       "forward_layer/cell", "query_dense"
#   idx: index inside <sub>/vars
#   tfjs: tfjs-layers weight name relative to the layer ("kernel",
#       "forward_lstm/kernel"), as tfjs-layers names them


def _cfg(entry):
    return entry.get("config", {})


def _own_specs(cls, c):
    ub = c.get("use_bias", True)
    if cls in ("Dense", "Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose", "Conv2DTranspose",
               "Conv3DTranspose", "Convolution1D", "Convolution2D", "Deconvolution2D"):
        return [("kernel", True)] + ([("bias", True)] if ub else [])
    if cls in ("DepthwiseConv1D", "DepthwiseConv2D"):
        return [("depthwise_kernel", True)] + ([("bias", True)] if ub else [])
    if cls in ("SeparableConv1D", "SeparableConv2D"):
        return [("depthwise_kernel", True), ("pointwise_kernel", True)] + ([("bias", True)] if ub else [])
    if cls == "BatchNormalization":
        s = []
        if c.get("scale", True):
            s.append(("gamma", True))
        if c.get("center", True):
            s.append(("beta", True))
        return s + [("moving_mean", False), ("moving_variance", False)]
    if cls in ("LayerNormalization", "GroupNormalization"):
        s = []
        if c.get("scale", True) or c.get("rms_scaling", False):
            s.append(("gamma", True))
        if c.get("center", True) and not c.get("rms_scaling", False):
            s.append(("beta", True))
        return s
    if cls == "Embedding":
        return [("embeddings", True)]
    if cls == "PReLU":
        return [("alpha", True)]
    if cls == "Normalization":
        if c.get("mean") is None:
            return [("mean", False), ("variance", False), ("count", False)]
        return []
    return []


def var_specs(entry):
    cls = entry["class_name"]
    c = _cfg(entry)
    if cls in RNN_CELL:
        cell = RNN_CELL[cls]
        names = ["kernel", "recurrent_kernel"] + (["bias"] if c.get("use_bias", True) else [])
        return [dict(k2=f"{cell}/{n}", trainable=True, sub="cell", idx=i, tfjs=n) for i, n in enumerate(names)]
    if cls == "Bidirectional":
        inner = c["layer"]
        base = inner["config"]["name"]
        for p in ("forward_",):
            if base.startswith(p):
                base = base[len(p):]
        back = c.get("backward_layer") or inner
        out = []
        for direction, sub_entry in (("forward", inner), ("backward", back)):
            for s in var_specs(sub_entry):
                out.append(dict(k2=f"{direction}_{base}/{s['k2']}", trainable=s["trainable"],
                                sub=f"{direction}_layer/{s['sub']}".rstrip("/"), idx=s["idx"],
                                tfjs=f"{direction}_{base}/{s['tfjs']}"))
        return out
    if cls == "TimeDistributed":
        return [dict(k2=s["k2"], trainable=s["trainable"], sub=("layer/" + s["sub"]).rstrip("/"),
                     idx=s["idx"], tfjs=s["tfjs"]) for s in var_specs(c["layer"])]
    if cls == "MultiHeadAttention":
        out = []
        for k2n, sub in (("query", "query_dense"), ("key", "key_dense"), ("value", "value_dense"),
                         ("attention_output", "output_dense")):
            names = ["kernel"] + (["bias"] if c.get("use_bias", True) else [])
            for i, n in enumerate(names):
                out.append(dict(k2=f"{k2n}/{n}", trainable=True, sub=sub, idx=i, tfjs=f"{k2n}/{n}"))
        return out
    specs = _own_specs(cls, c)
    return [dict(k2=n, trainable=t, sub="", idx=i, tfjs=n) for i, (n, t) in enumerate(specs)]


def sub_object_names(entry):
    """Keras 3 vars-group 'name' attributes for sub-objects (§1.8.1, >= 3.6)."""
    cls = entry["class_name"]
    c = _cfg(entry)
    name = entry_name(entry)
    out = {"": name}
    if cls in RNN_CELL:
        out["cell"] = RNN_CELL[cls]
    elif cls == "Bidirectional":
        f = c["layer"]
        b = c.get("backward_layer") or f
        fn, bn = f["config"]["name"], b["config"]["name"]
        if not fn.startswith("forward_"):
            fn = "forward_" + fn
        if not bn.startswith("backward_"):
            bn = "backward_" + bn
        out["forward_layer"] = fn
        out["backward_layer"] = bn
        for d, e in (("forward_layer", f), ("backward_layer", b)):
            for k, v in sub_object_names(e).items():
                if k:
                    out[f"{d}/{k}"] = v
    elif cls == "TimeDistributed":
        out["layer"] = c["layer"]["config"]["name"]
    elif cls == "MultiHeadAttention":
        out.update(query_dense="query", key_dense="key", value_dense="value", output_dense="attention_output")
    return out


def all_weight_entries(entry):
    """(sublayer entry, spec) pairs of a nested model, in h5 order: trainable first."""
    flat = []

    def rec(m):
        for e in weighted_sublayers(m):
            if is_model(e):
                rec(e)
            else:
                for i, s in enumerate(var_specs(e)):
                    flat.append((e, s, i))

    rec(entry)
    return [x for x in flat if x[1]["trainable"]] + [x for x in flat if not x[1]["trainable"]]


def strip_private(obj):
    if isinstance(obj, dict):
        return {k: strip_private(v) for k, v in obj.items() if not k.startswith("__")}
    if isinstance(obj, list):
        return [strip_private(v) for v in obj]
    return obj


# ---------------------------------------------------------------------------
# Legacy HDF5 writer (§2)


def _fixed_str_array(strings):
    if not strings:
        return np.array([], dtype=np.float64)  # what Keras writes for an empty list
    return np.array([s.encode("utf8") for s in strings])


def write_legacy_h5(path, model_entry, keras_version, flavour):
    """flavour 'k2': weight names '<layer>/<k2 name>:0' (Keras 2.x);
    'k3': '<layer>/<k2 name>' (Keras 3 legacy .h5, §2.6)."""
    suffix = ":0" if flavour == "k2" else ""
    cfg = strip_private(model_entry)
    if flavour == "k3":
        cfg = _k3_legacy_config(cfg)
    with h5py.File(path, "w", track_order=False) as f:
        f.attrs["backend"] = "tensorflow"
        f.attrs["keras_version"] = keras_version
        # numpy.bytes_ -> HDF5 fixed-length string (what Keras' json.dumps(..).encode() gives
        # with h5py 2.x); plain str -> variable-length UTF-8.
        f.attrs["model_config"] = np.bytes_(json.dumps(cfg).encode("utf8"))
        mw = f.create_group("model_weights")
        layers = weighted_sublayers(model_entry)
        mw.attrs["layer_names"] = _fixed_str_array([entry_name(e) for e in layers])
        mw.attrs["backend"] = np.bytes_(b"tensorflow")
        mw.attrs["keras_version"] = np.bytes_(keras_version.encode("utf8"))
        for e in layers:
            g = mw.create_group(entry_name(e))
            names, arrays = [], []
            if is_model(e):
                for sub, spec, i in all_weight_entries(e):
                    names.append(f"{entry_name(sub)}/{spec['k2']}{suffix}")
                    arrays.append(sub["__weights__"][i])
            else:
                ws = e.get("__weights__", [])
                specs = var_specs(e)
                if len(ws) != len(specs):
                    raise ValueError(f"{entry_name(e)}: {len(ws)} arrays for {len(specs)} variables")
                order = [i for i, s in enumerate(specs) if s["trainable"]] + \
                        [i for i, s in enumerate(specs) if not s["trainable"]]
                for i in order:
                    names.append(f"{entry_name(e)}/{specs[i]['k2']}{suffix}")
                    arrays.append(ws[i])
            g.attrs["weight_names"] = _fixed_str_array(names)
            for n, a in zip(names, arrays):
                g.create_dataset(n, data=np.asarray(a))
        t = mw.create_group("top_level_model_weights")
        t.attrs["weight_names"] = _fixed_str_array([])


def _k3_legacy_config(cfg):
    """Keras 3 legacy .h5 model_config: layer entries without module/registered_name."""
    out = {"class_name": cfg["class_name"], "config": copy.deepcopy(cfg["config"])}

    def clean_layers(c):
        if isinstance(c, dict) and "layers" in c:
            new = []
            for e in c["layers"]:
                e = {k: v for k, v in e.items() if k not in ("module", "registered_name")}
                if is_model(e):
                    e["config"] = copy.deepcopy(e["config"])
                    clean_layers(e["config"])
                new.append(e)
            c["layers"] = new

    clean_layers(out["config"])
    return out


# ---------------------------------------------------------------------------
# Keras 3 .keras writer (§1)


def keras3_paths(model_entry, prefix=""):
    """Yields (entry, path) for every layer entry, path like 'layers/conv2d_1' (§1.8.2)."""
    counts = {}
    for e in weighted_sublayers(model_entry):
        base = snake_case(e["class_name"])
        k = counts.get(base, -1) + 1
        counts[base] = k
        p = prefix + "layers/" + (base if k == 0 else f"{base}_{k}")
        yield e, p
        if is_model(e):
            yield from keras3_paths(e, p + "/")


def write_weights_h5_keras3(fileobj, model_entry):
    with h5py.File(fileobj, "w") as f:
        g = f.create_group("vars")
        g.attrs["name"] = entry_name(model_entry) or model_entry["config"]["name"]
        for e, p in keras3_paths(model_entry):
            names = sub_object_names(e) if not is_model(e) else {"": entry_name(e)}
            for sub, nm in names.items():
                gg = f.require_group(f"{p}/{sub}/vars" if sub else f"{p}/vars")
                gg.attrs["name"] = nm
            if is_model(e):
                continue
            ws = e.get("__weights__", [])
            specs = var_specs(e)
            if len(ws) != len(specs):
                raise ValueError(f"{entry_name(e)}: {len(ws)} arrays for {len(specs)} variables")
            for a, s in zip(ws, specs):
                gp = f"{p}/{s['sub']}/vars" if s["sub"] else f"{p}/vars"
                f[gp].create_dataset(str(s["idx"]), data=np.asarray(a))


def _zip_member(z, name, data):
    zi = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
    zi.compress_type = zipfile.ZIP_STORED
    zi.external_attr = 0o644 << 16
    z.writestr(zi, data)


def write_keras_zip(path, model_entry, keras_version="3.6.0"):
    bio = io.BytesIO()
    write_weights_h5_keras3(bio, model_entry)
    meta = {"keras_version": keras_version, "date_saved": "2024-01-01@00:00:00"}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        _zip_member(z, "metadata.json", json.dumps(meta))
        _zip_member(z, "config.json", json.dumps(strip_private(model_entry)))
        _zip_member(z, "model.weights.h5", bio.getvalue())


# ---------------------------------------------------------------------------
# Readers (attach __weights__ to the config entries)


def _h5_str(v):
    if isinstance(v, bytes):
        return v.decode("utf8")
    if isinstance(v, np.ndarray) and v.shape == ():
        return _h5_str(v[()])
    return str(v)


def _h5_str_list(attrs, key):
    if key in attrs:
        vals = attrs[key]
    else:
        vals, i = [], 0
        while f"{key}{i}" in attrs:
            vals.extend(list(attrs[f"{key}{i}"]))
            i += 1
    return [_h5_str(v) for v in vals]


def sniff(path):
    with open(path, "rb") as fh:
        head = fh.read(8)
    if head[:4] == b"PK\x03\x04":
        return "keras"
    if head == b"\x89HDF\r\n\x1a\n":
        return "h5"
    return "json"


def read_keras_zip(path):
    """Returns (model_entry, keras_version) with __weights__ attached (§1.8)."""
    with zipfile.ZipFile(path) as z:
        cfg = json.loads(z.read("config.json"))
        meta = json.loads(z.read("metadata.json"))
        h5bytes = z.read("model.weights.h5")
    f = h5py.File(io.BytesIO(h5bytes), "r")
    root = "layers"
    if "layers" not in f and "_layer_checkpoint_dependencies" in f:
        root = "_layer_checkpoint_dependencies"
    for e, p in keras3_paths(cfg):
        if is_model(e):
            continue
        specs = var_specs(e)
        if not specs:
            continue
        p = root + p[len("layers"):] if p.startswith("layers") else p
        p = p.replace("/layers/", f"/{root}/")
        arrs = []
        for s in specs:
            gp = f"{p}/{s['sub']}/vars" if s["sub"] else f"{p}/vars"
            arrs.append(np.array(f[gp][str(s["idx"])]))
        e["__weights__"] = arrs
    f.close()
    return cfg, meta.get("keras_version", "3")


def read_legacy_h5(path):
    """Returns (model_entry, keras_version) from a full-model legacy .h5 (§2)."""
    with h5py.File(path, "r") as f:
        cfg = json.loads(_h5_str(f.attrs["model_config"]))
        kv = _h5_str(f.attrs.get("keras_version", "1"))
        mw = f["model_weights"] if "model_weights" in f else f
        for e in weighted_sublayers(cfg):
            name = entry_name(e)
            if name not in mw:
                continue
            g = mw[name]
            wnames = _h5_str_list(g.attrs, "weight_names")
            if not wnames:
                continue
            if is_model(e):
                _assign_nested(e, g, wnames)
            else:
                specs = var_specs(e)
                order = [i for i, s in enumerate(specs) if s["trainable"]] + \
                        [i for i, s in enumerate(specs) if not s["trainable"]]
                if len(order) != len(wnames):
                    raise ValueError(f"{name}: {len(wnames)} weights in file, {len(order)} expected")
                arrs = [None] * len(specs)
                for i, wn in zip(order, wnames):
                    arrs[i] = np.array(g[wn])
                e["__weights__"] = arrs
    return cfg, kv


def _assign_nested(model_e, g, wnames):
    """Split a nested model's flat weight list by sub-layer name (§2.3)."""
    leaves = []

    def rec(m):
        for e in weighted_sublayers(m):
            if is_model(e):
                rec(e)
            elif var_specs(e):
                leaves.append(e)

    rec(model_e)
    for e in leaves:
        specs = var_specs(e)
        nm = entry_name(e)
        arrs = []
        for s in specs:
            want = f"{nm}/{s['k2']}"
            hits = [w for w in wnames if w.split(":")[0] == want or w.split(":")[0].endswith("/" + want)]
            if len(hits) != 1:
                raise ValueError(f"nested weight {want}: {len(hits)} matches")
            arrs.append(np.array(g[hits[0]]))
        e["__weights__"] = arrs


TFJS_DTYPES = {"float32": (np.float32, 4), "int32": (np.int32, 4), "uint8": (np.uint8, 1),
               "uint16": (np.uint16, 2), "float16": (np.float16, 2), "bool": (np.uint8, 1)}


def read_tfjs_weights(model_json_path):
    import os
    with open(model_json_path) as fh:
        mj = json.load(fh)
    d = os.path.dirname(model_json_path)
    out = {}
    for group in mj["weightsManifest"]:
        data = b"".join(open(os.path.join(d, p), "rb").read() for p in group["paths"])
        off = 0
        for w in group["weights"]:
            q = w.get("quantization")
            dt = q["dtype"] if q else w["dtype"]
            npdt, size = TFJS_DTYPES[dt]
            n = int(np.prod(w["shape"])) if w["shape"] else 1
            a = np.frombuffer(data[off:off + n * size], dtype=np.dtype(npdt).newbyteorder("<")).reshape(w["shape"])
            off += n * size
            if q and dt in ("uint8", "uint16"):
                a = a.astype(np.float32) * np.float32(q["scale"]) + np.float32(q["min"])
                if w["dtype"] == "int32":
                    a = np.round(a).astype(np.int32)
            elif q and dt == "float16":
                a = a.astype(np.float32)
            out[w["name"]] = np.array(a)
    return mj, out


def attach_tfjs_weights(model_entry, weights_by_name, strict=True):
    used = set()

    def rec(m):
        for e in weighted_sublayers(m):
            if is_model(e):
                rec(e)
                continue
            specs = var_specs(e)
            if not specs:
                continue
            arrs = []
            for s in specs:
                n = f"{entry_name(e)}/{s['tfjs']}"
                if n not in weights_by_name:
                    raise KeyError(f"tfjs weight {n} missing")
                used.add(n)
                arrs.append(weights_by_name[n])
            e["__weights__"] = arrs

    rec(model_entry)
    if strict and set(weights_by_name) - used:
        raise ValueError(f"unused tfjs weights: {sorted(set(weights_by_name) - used)}")


def read_tfjs(model_json_path):
    mj, w = read_tfjs_weights(model_json_path)
    topo = mj["modelTopology"]
    cfg = topo.get("model_config", topo)
    cfg = {"class_name": cfg["class_name"], "config": copy.deepcopy(cfg["config"])}
    attach_tfjs_weights(cfg, w)
    return cfg, "2"


def load_any(path):
    """(model_entry, keras_major) for .keras / legacy .h5 / tfjs model.json."""
    kind = sniff(path)
    if kind == "keras":
        cfg, kv = read_keras_zip(path)
    elif kind == "h5":
        cfg, kv = read_legacy_h5(path)
    else:
        cfg, kv = read_tfjs(path)
    major = 3 if str(kv).startswith("3") else 2
    return cfg, major


# ---------------------------------------------------------------------------
# npy


def save_npy(path, arr):
    arr = np.asarray(arr)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    np.save(path, arr)


def close_enough(got, ref, rel=1e-4):
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return False, f"shape {got.shape} != {ref.shape}"
    if ref.size == 0:
        return True, 0.0
    err = float(np.max(np.abs(got - ref)))
    tol = rel * max(1.0, float(np.max(np.abs(ref))))
    return err <= tol, err
