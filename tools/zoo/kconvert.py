"""Config conversions between the Keras 2 (list-node) and Keras 3 (dict-node)
model encodings (keras-formats.md §1.3-1.6, §2.4-2.5, §4.3).

Entries keep their private "__weights__" key through every conversion.
"""

import copy

import kzoo

POLICY = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None}
RNN = ("LSTM", "GRU", "SimpleRNN")
WRAPPERS = ("Bidirectional", "TimeDistributed")


def _policy(dtype):
    if isinstance(dtype, dict):
        if dtype.get("class_name") == "DTypePolicy" and "module" in dtype:
            return dtype
        name = dtype.get("config", {}).get("name", "float32")
    else:
        name = dtype or "float32"
    p = copy.deepcopy(POLICY)
    p["config"]["name"] = name
    return p


def _policy_name(dtype):
    if isinstance(dtype, dict):
        return dtype.get("config", {}).get("name", "float32")
    return dtype or "float32"


def _init_k3(obj):
    if isinstance(obj, dict) and "class_name" in obj and "module" not in obj:
        cls = obj["class_name"]
        return {"module": "keras.initializers", "class_name": cls,
                "config": copy.deepcopy(obj.get("config", {})), "registered_name": None}
    return obj


def _init_k2(obj):
    if isinstance(obj, dict) and "class_name" in obj:
        cls = obj["class_name"]
        cls = {"OrthogonalInitializer": "Orthogonal"}.get(cls, cls)
        return {"class_name": cls, "config": copy.deepcopy(obj.get("config", {}))}
    return obj


# ---------------------------------------------------------------------------
# tfjs-layers topology -> Keras 2.15 config


def clean_tfjs_layer(e):
    """Fills the keys tf.keras 2.15 writes that tfjs-layers leaves out or nulls."""
    cls = e["class_name"]
    c = e["config"]
    c.setdefault("dtype", "float32")
    c.setdefault("trainable", True)
    if cls == "InputLayer":
        c.pop("trainable", None)
        c.setdefault("sparse", False)
        c.setdefault("ragged", False)
    if cls == "Reshape":
        c["target_shape"] = [-1 if d is None else d for d in c["target_shape"]]
    if cls in RNN:
        if cls == "LSTM" and c.get("unit_forget_bias") is None:
            c["unit_forget_bias"] = True
        if cls in ("LSTM", "GRU") and c.get("implementation") is None:
            c["implementation"] = 2
        c.setdefault("time_major", False)
    if cls == "Embedding" and c.get("mask_zero") is None:
        c["mask_zero"] = False
    if cls in ("Conv1D", "Conv2D", "Conv3D"):
        c.setdefault("groups", 1)
    if cls == "ReLU":
        c.setdefault("negative_slope", 0.0)
        c.setdefault("threshold", 0.0)
    if cls == "Flatten":
        c.setdefault("data_format", "channels_last")
    if cls in WRAPPERS:
        clean_tfjs_layer(c["layer"])
        c["layer"]["config"].pop("batch_input_shape", None)
    if kzoo.is_model(e):
        clean_tfjs_model(e)


def clean_tfjs_model(entry):
    if entry["class_name"] == "Model":
        entry["class_name"] = "Functional"
    cfg = entry["config"]
    if entry["class_name"] == "Sequential":
        layers = cfg["layers"]
        if layers and layers[0]["class_name"] != "InputLayer":
            first = layers[0]["config"]
            if "batch_input_shape" in first:
                layers.insert(0, {"class_name": "InputLayer", "config": {
                    "batch_input_shape": first["batch_input_shape"], "dtype": first.get("dtype", "float32"),
                    "sparse": False, "ragged": False, "name": first["name"] + "_input"}})
    for e in cfg["layers"]:
        clean_tfjs_layer(e)
    return entry


# ---------------------------------------------------------------------------
# Keras 2 -> Keras 3


def _kt(shape, dtype, history):
    return {"class_name": "__keras_tensor__",
            "config": {"shape": shape, "dtype": dtype, "keras_history": history}}


def k3_layer(e2, shapes, call_shapes=None):
    """Serialized Keras 3 layer dict (no name/inbound_nodes) from a Keras 2 entry."""
    cls = e2["class_name"]
    if kzoo.is_model(e2):
        return k2_to_k3(e2, shapes)
    c2 = e2["config"]
    c = {}
    for k, v in c2.items():
        if k in ("batch_input_shape", "input_dtype", "input_length", "time_major", "implementation"):
            continue
        if k.endswith("_initializer"):
            v = _init_k3(v)
        c[k] = copy.deepcopy(v)
    if cls == "InputLayer":
        c = {"batch_shape": c2["batch_input_shape"], "dtype": _policy_name(c2.get("dtype")),
             "sparse": c2.get("sparse", False), "name": c2["name"]}
    else:
        c["dtype"] = _policy(c2.get("dtype"))
        c.setdefault("trainable", True)
    if cls == "LeakyReLU":
        c["negative_slope"] = c.pop("alpha", 0.3)
    if cls in RNN:
        c.setdefault("seed", None)
        c.setdefault("zero_output_for_mask", False)
        if cls == "GRU":
            c.setdefault("reset_after", False)
    if cls in ("Dropout", "SpatialDropout1D", "SpatialDropout2D", "GaussianNoise", "GaussianDropout", "AlphaDropout"):
        c.setdefault("seed", None)
    if cls == "BatchNormalization":
        if isinstance(c.get("axis"), list) and len(c["axis"]) == 1:
            c["axis"] = c["axis"][0]
        c.setdefault("synchronized", False)
    if cls == "LayerNormalization":
        c.setdefault("rms_scaling", False)
    if cls == "Conv2DTranspose":
        c.setdefault("output_padding", None)
        c.setdefault("dilation_rate", [1, 1])
    if cls == "Bidirectional":
        inner = c2["layer"]
        base = inner["config"]["name"]
        fwd = copy.deepcopy(inner)
        fwd["config"]["name"] = "forward_" + base
        bwd = copy.deepcopy(inner)
        bwd["config"]["name"] = "backward_" + base
        bwd["config"]["go_backwards"] = not inner["config"].get("go_backwards", False)
        c["layer"] = k3_layer(fwd, shapes)
        c["backward_layer"] = k3_layer(bwd, shapes)
        c["merge_mode"] = c2.get("merge_mode", "concat")
    if cls == "TimeDistributed":
        c["layer"] = k3_layer(c2["layer"], shapes)
    out = {"module": "keras.layers", "class_name": cls, "config": c, "registered_name": None}
    rec = shapes.get(id(e2), {}).get(0)
    if rec is not None and cls != "InputLayer":
        ins = rec["in"]
        out["build_config"] = {"input_shape": ins[0] if len(ins) == 1 else ins}
    if "__weights__" in e2:
        out["__weights__"] = e2["__weights__"]
    return out


def _io_k3(refs, by_name, dialect2):
    out = []
    for name, node, t in refs:
        prod = by_name[name]
        if kzoo.is_model(prod) and prod["class_name"] == "Sequential":
            node = node - 1  # Keras 2 +1 offset; Keras 3 stores Sequential without offset
        out.append([name, node, t])
    return out[0] if len(out) == 1 else out


def k2_to_k3(entry, shapes):
    """Keras 2 model config (with __weights__) -> Keras 3 serialized model."""
    cfg = entry["config"]
    name = cfg["name"] if isinstance(cfg, dict) else "sequential"
    if entry["class_name"] == "Sequential":
        layers2 = kzoo.model_layers(entry)
        layers3 = [k3_layer(e, shapes) for e in layers2]
        in_shape = layers2[0]["config"].get("batch_input_shape")
        c = {"name": name, "trainable": True, "dtype": _policy("float32"), "layers": layers3}
        if in_shape is not None:
            c["build_input_shape"] = in_shape
        out = {"module": "keras", "class_name": "Sequential", "config": c, "registered_name": None,
               "build_config": {"input_shape": in_shape}}
        return out
    by_name = {kzoo.entry_name(e): e for e in cfg["layers"]}
    layers3 = []
    for e in cfg["layers"]:
        l3 = k3_layer(e, shapes)
        l3["name"] = kzoo.entry_name(e)
        nodes = []
        for ci, node in enumerate(e.get("inbound_nodes", [])):
            kts = []
            for item in node:
                pname, pnode, pt = item[0], item[1], item[2]
                prod = by_name[pname]
                if kzoo.is_model(prod):
                    pnode = pnode - 1
                call = 0 if len(prod.get("inbound_nodes", [])) <= 1 else pnode
                dtype = "float32"
                if prod["class_name"] == "InputLayer":
                    shp = prod["config"]["batch_input_shape"]
                    dtype = _policy_name(prod["config"].get("dtype"))
                else:
                    shp = shapes[id(prod)][call]["out"][pt]
                kts.append(_kt(shp, dtype, [pname, pnode, pt]))
            args = [kts[0]] if len(kts) == 1 else [kts]
            kwargs = {}
            if len(node[0]) > 3 and node[0][3]:
                for k, v in node[0][3].items():
                    kwargs[k] = v
            nodes.append({"args": args, "kwargs": kwargs})
        l3["inbound_nodes"] = nodes
        layers3.append(l3)
    c = {"name": name, "trainable": True, "layers": layers3,
         "input_layers": _io_k3(cfg["input_layers"], by_name, True),
         "output_layers": _io_k3(cfg["output_layers"], by_name, True)}
    return {"module": "keras.src.models.functional", "class_name": "Functional", "config": c,
            "registered_name": "Functional", "build_config": {"input_shape": None}}


# ---------------------------------------------------------------------------
# Keras 3 (or tf.keras .keras) -> Keras 2 config that tfjs-layers 4.22 loads


def _k2_value(v):
    if isinstance(v, dict) and v.get("class_name") == "DTypePolicy":
        return v["config"]["name"]
    return v


def k3_layer_to_k2(e3):
    cls = e3["class_name"]
    if kzoo.is_model(e3):
        return k3_to_k2(e3)
    c3 = e3["config"]
    c = {}
    for k, v in c3.items():
        if k.endswith("_initializer"):
            v = _init_k2(v)
        c[k] = copy.deepcopy(_k2_value(v))
    if cls == "InputLayer":
        c = {"batch_input_shape": c3.get("batch_shape", c3.get("batch_input_shape")),
             "dtype": _policy_name(c3.get("dtype")), "sparse": c3.get("sparse", False),
             "ragged": c3.get("ragged", False), "name": c3["name"]}
    if cls == "LeakyReLU" and "negative_slope" in c:
        c["alpha"] = c.pop("negative_slope")
    if cls == "BatchNormalization" and isinstance(c.get("axis"), list) and len(c["axis"]) == 1:
        c["axis"] = c["axis"][0]
    if cls in ("Bidirectional", "TimeDistributed"):
        inner = k3_layer_to_k2(c3["layer"])
        if cls == "Bidirectional":
            n = inner["config"]["name"]
            if n.startswith("forward_"):
                inner["config"]["name"] = n[len("forward_"):]
            c.pop("backward_layer", None)
        c["layer"] = inner
    out = {"class_name": cls, "config": c}
    if "__weights__" in e3:
        out["__weights__"] = e3["__weights__"]
    return out


def _refs_from_k3(obj, out):
    if isinstance(obj, dict):
        if obj.get("class_name") == "__keras_tensor__":
            out.append(list(obj["config"]["keras_history"]))
        else:
            for v in obj.values():
                _refs_from_k3(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _refs_from_k3(v, out)
    return out


def k3_to_k2(entry):
    """Keras 3 (or tf.keras 2.13+ .keras) model config -> Keras 2 list-node config."""
    cfg = entry["config"]
    if entry["class_name"] == "Sequential":
        layers = [k3_layer_to_k2(e) for e in kzoo.model_layers(entry)]
        name = cfg.get("name", "sequential") if isinstance(cfg, dict) else "sequential"
        return {"class_name": "Sequential", "config": {"name": name, "layers": layers}}
    by_name = {kzoo.entry_name(e): e for e in cfg["layers"]}
    layers2 = []
    for e in cfg["layers"]:
        l2 = k3_layer_to_k2(e)
        l2["name"] = kzoo.entry_name(e)
        nodes = []
        for node in e.get("inbound_nodes", []):
            if isinstance(node, list):  # already Keras 2 form (tf.keras .keras files)
                nodes.append(node)
                continue
            refs = _refs_from_k3(node.get("args", []), [])
            kw_refs = {k: _refs_from_k3(v, []) for k, v in node.get("kwargs", {}).items()}
            kwargs = {k: v[0] for k, v in kw_refs.items() if v}
            conv = []
            for r in refs:
                prod = by_name[r[0]]
                nidx = r[1] + 1 if kzoo.is_model(prod) else r[1]
                conv.append([r[0], nidx, r[2], kwargs])
            nodes.append(conv)
        l2["inbound_nodes"] = nodes
        layers2.append(l2)

    def io(v, nested_seq_fix):
        if isinstance(v, list) and len(v) == 3 and isinstance(v[0], str) and isinstance(v[1], int):
            v = [v]
        if isinstance(v, dict):
            v = list(v.values())
        res = []
        for name, node, t in v:
            prod = by_name[name]
            if nested_seq_fix and kzoo.is_model(prod) and prod["class_name"] == "Sequential":
                node = node + 1
            res.append([name, node, t])
        return res

    keras3_nodes = any(isinstance(n, dict) for e in cfg["layers"] for n in e.get("inbound_nodes", []))
    return {"class_name": "Functional", "config": {
        "name": cfg["name"], "layers": layers2,
        "input_layers": io(cfg["input_layers"], False),
        "output_layers": io(cfg["output_layers"], keras3_nodes)}}
