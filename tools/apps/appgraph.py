"""Graph builder for the keras.applications test models (tests/apps/).

An architecture function (tools/apps/archs.py) calls the builder the way the
Keras source calls keras.layers: ``b.layer("Conv2D", x, filters=..., name=...)``.
Every call is executed eagerly with the NumPy reference (tools/zoo/numpy_ref.py,
float64) so that shapes are known (ZeroPadding2D(correct_pad(x)), build_config,
``__keras_tensor__`` shapes) and so that weights can be calibrated on the
activations they will see (see ``Weights``).

One builder instance produces ONE flavour of the model config:

* flavour 3: Keras 3 (``.keras``): module / class_name / config /
  registered_name, DTypePolicy objects, dict ``inbound_nodes`` with
  ``__keras_tensor__`` args, raw ops (``x + 3.0``) as ``keras.src.ops.numpy``
  entries, nested Sequential with an InputLayer.
* flavour 2: tf.keras 2.15 (legacy ``.h5``): class_name / config, dtype
  strings, list ``inbound_nodes``, axis lists (``"axis": [3]`` as tf.keras
  writes after build), raw ops as ``TFOpLambda`` layers
  (``tf.__operators__.add``, ``tf.math.multiply``), nested Sequential
  referenced with node index 1.

Layer entries carry the private key ``"__weights__"`` (list of arrays in the
canonical order of tools/zoo/kzoo.var_specs), which the kzoo writers use.
Written from /work/shared/docs/keras-formats.md §1-2 and the Keras sources;
nothing here is imported from Keras.
"""

import copy
import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "zoo"))
import kzoo  # noqa: E402
import numpy_ref  # noqa: E402

# ---------------------------------------------------------------------------
# kzoo / numpy_ref extensions (in this process only; tools/zoo is not edited)

_orig_own_specs = kzoo._own_specs


def _own_specs(cls, c):
    if cls == "LayerScale":
        return [("gamma", True)]
    return _orig_own_specs(cls, c)


kzoo._own_specs = _own_specs


class Executor(numpy_ref.Executor):
    """numpy_ref.Executor plus keras.applications' LayerScale / StochasticDepth
    and tf.keras 2 TFOpLambda nodes (the two functions MobileNetV3 and
    ConvNeXt produce: tf.__operators__.add, tf.math.multiply)."""

    def call_layer(self, e, args, kwargs, arg_masks):
        cls = e["class_name"]
        c = e.get("config", {})
        if cls == "LayerScale":
            g = np.asarray(e["__weights__"][0], dtype=np.float64)
            return [np.asarray(args[0], dtype=np.float64) * g], [None]
        if cls == "StochasticDepth":
            return [args[0]], [None]
        if cls == "TFOpLambda":
            fn = c["function"]
            a = np.asarray(args[0], dtype=np.float64)
            y = kwargs.get("y")
            y = np.asarray(y, dtype=np.float64)
            if fn in ("__operators__.add", "math.add"):
                return [a + y], [None]
            if fn == "math.multiply":
                return [a * y], [None]
            raise NotImplementedError(f"TFOpLambda {fn}")
        return super().call_layer(e, args, kwargs, arg_masks)


def run_file(path, inputs):
    """Runs a model file (.keras / .h5 / model.json) with the extended executor."""
    cfg, major = kzoo.load_any(path)
    ex = Executor(major)
    outs, _ = ex.run_model(cfg, [np.asarray(a) for a in inputs])
    return outs


# ---------------------------------------------------------------------------
# Layer configs


def _init3(cls, **cfg):
    return {"module": "keras.initializers", "class_name": cls, "config": cfg, "registered_name": None}


def _init2(cls, **cfg):
    return {"class_name": cls, "config": cfg}


POLICY3 = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None}
INIT = "__init__"  # marker: value is (class_name, config) of an initializer

GLOROT = (INIT, "GlorotUniform", {"seed": None})
ZEROS = (INIT, "Zeros", {})
ONES = (INIT, "Ones", {})
HE_NORMAL = (INIT, "HeNormal", {"seed": None})
EFF_CONV_INIT = (INIT, "VarianceScaling", {"scale": 2.0, "mode": "fan_out", "distribution": "truncated_normal", "seed": None})
EFF_DENSE_INIT = (INIT, "VarianceScaling", {"scale": 1.0 / 3.0, "mode": "fan_out", "distribution": "uniform", "seed": None})

CL = "channels_last"
_CONV_TAIL = [("kernel_regularizer", None), ("bias_regularizer", None), ("activity_regularizer", None),
              ("kernel_constraint", None), ("bias_constraint", None)]
_BN_INITS = [("beta_initializer", ZEROS), ("gamma_initializer", ONES), ("moving_mean_initializer", ZEROS),
             ("moving_variance_initializer", ONES), ("beta_regularizer", None), ("gamma_regularizer", None),
             ("beta_constraint", None), ("gamma_constraint", None)]
_LN_INITS = [("beta_initializer", ZEROS), ("gamma_initializer", ONES), ("beta_regularizer", None),
             ("gamma_regularizer", None), ("beta_constraint", None), ("gamma_constraint", None)]

# (class) -> ordered (key, default) lists, Keras 3 and tf.keras 2.15 get_config order.
KEYS3 = {
    "Conv2D": [("filters", None), ("kernel_size", None), ("strides", [1, 1]), ("padding", "valid"),
               ("data_format", CL), ("dilation_rate", [1, 1]), ("groups", 1), ("activation", "linear"),
               ("use_bias", True), ("kernel_initializer", GLOROT), ("bias_initializer", ZEROS)] + _CONV_TAIL,
    "DepthwiseConv2D": [("kernel_size", None), ("strides", [1, 1]), ("padding", "valid"), ("data_format", CL),
                        ("dilation_rate", [1, 1]), ("activation", "linear"), ("use_bias", True),
                        ("depth_multiplier", 1), ("depthwise_initializer", GLOROT), ("bias_initializer", ZEROS),
                        ("depthwise_regularizer", None), ("bias_regularizer", None),
                        ("activity_regularizer", None), ("depthwise_constraint", None), ("bias_constraint", None)],
    "SeparableConv2D": [("kernel_size", None), ("strides", [1, 1]), ("padding", "valid"), ("data_format", CL),
                        ("dilation_rate", [1, 1]), ("depth_multiplier", 1), ("activation", "linear"),
                        ("use_bias", True), ("depthwise_initializer", GLOROT), ("pointwise_initializer", GLOROT),
                        ("bias_initializer", ZEROS), ("depthwise_regularizer", None),
                        ("pointwise_regularizer", None), ("bias_regularizer", None), ("activity_regularizer", None),
                        ("depthwise_constraint", None), ("pointwise_constraint", None), ("bias_constraint", None),
                        ("filters", None)],
    "BatchNormalization": [("axis", -1), ("momentum", 0.99), ("epsilon", 0.001), ("center", True), ("scale", True)]
    + _BN_INITS + [("synchronized", False)],
    "LayerNormalization": [("axis", -1), ("epsilon", 0.001), ("center", True), ("scale", True),
                           ("rms_scaling", False)] + _LN_INITS,
    "Activation": [("activation", None)],
    "ReLU": [("max_value", None), ("negative_slope", 0.0), ("threshold", 0.0)],
    "ZeroPadding2D": [("padding", [[1, 1], [1, 1]]), ("data_format", CL)],
    "Cropping2D": [("cropping", [[0, 0], [0, 0]]), ("data_format", CL)],
    "MaxPooling2D": [("pool_size", [2, 2]), ("padding", "valid"), ("strides", None), ("data_format", CL)],
    "AveragePooling2D": [("pool_size", [2, 2]), ("padding", "valid"), ("strides", None), ("data_format", CL)],
    "GlobalAveragePooling2D": [("data_format", CL), ("keepdims", False)],
    "UpSampling2D": [("size", [2, 2]), ("data_format", CL), ("interpolation", "nearest")],
    **{c: [("filters", None), ("kernel_size", None), ("strides", [1] * n), ("padding", "valid"),
           ("output_padding", None), ("data_format", CL), ("dilation_rate", [1] * n),
           ("activation", "linear"), ("use_bias", True), ("kernel_initializer", GLOROT),
           ("bias_initializer", ZEROS)] + _CONV_TAIL
       for c, n in (("Conv1DTranspose", 1), ("Conv2DTranspose", 2), ("Conv3DTranspose", 3))},
    "Dense": [("units", None), ("activation", "linear"), ("use_bias", True), ("kernel_initializer", GLOROT),
              ("bias_initializer", ZEROS), ("kernel_regularizer", None), ("bias_regularizer", None),
              ("kernel_constraint", None), ("bias_constraint", None)],
    "Add": [],
    "Multiply": [],
    "Concatenate": [("axis", -1)],
    "Reshape": [("target_shape", None)],
    "Dropout": [("rate", None), ("seed", None), ("noise_shape", None)],
    "Flatten": [("data_format", CL)],
    "Rescaling": [("scale", 1.0), ("offset", 0.0)],
    "Normalization": [("axis", [-1]), ("invert", False), ("mean", None), ("variance", None)],
    "LayerScale": [("init_values", None), ("projection_dim", None)],
}

KEYS2 = dict(KEYS3)
KEYS2.update({
    "DepthwiseConv2D": [("kernel_size", None), ("strides", [1, 1]), ("padding", "valid"), ("data_format", CL),
                        ("dilation_rate", [1, 1]), ("groups", 1), ("activation", "linear"), ("use_bias", True),
                        ("bias_initializer", ZEROS), ("bias_regularizer", None), ("activity_regularizer", None),
                        ("bias_constraint", None), ("depth_multiplier", 1), ("depthwise_initializer", GLOROT),
                        ("depthwise_regularizer", None), ("depthwise_constraint", None)],
    "SeparableConv2D": [("filters", None), ("kernel_size", None), ("strides", [1, 1]), ("padding", "valid"),
                        ("data_format", CL), ("dilation_rate", [1, 1]), ("groups", 1), ("activation", "linear"),
                        ("use_bias", True), ("bias_initializer", ZEROS), ("bias_regularizer", None),
                        ("activity_regularizer", None), ("bias_constraint", None), ("depth_multiplier", 1),
                        ("depthwise_initializer", GLOROT), ("pointwise_initializer", GLOROT),
                        ("depthwise_regularizer", None), ("pointwise_regularizer", None),
                        ("depthwise_constraint", None), ("pointwise_constraint", None)],
    "BatchNormalization": [("axis", -1), ("momentum", 0.99), ("epsilon", 0.001), ("center", True),
                           ("scale", True)] + _BN_INITS,
    "LayerNormalization": [("axis", -1), ("epsilon", 0.001), ("center", True), ("scale", True)] + _LN_INITS,
    "Dense": [("units", None), ("activation", "linear"), ("use_bias", True), ("kernel_initializer", GLOROT),
              ("bias_initializer", ZEROS), ("kernel_regularizer", None), ("bias_regularizer", None),
              ("activity_regularizer", None), ("kernel_constraint", None), ("bias_constraint", None)],
    "Dropout": [("rate", None), ("noise_shape", None), ("seed", None)],
    "Normalization": [("axis", [-1]), ("mean", None), ("variance", None), ("invert", False)],
})

# Keras 3 serializes activations by function name (activations/__init__.py:
# "swish" -> silu, "hard_swish" -> hard_silu); tf.keras 2 keeps the given name.
ACT3 = {"swish": "silu", "hard_swish": "hard_silu", None: "linear"}

MODULE3 = {"LayerScale": "keras.src.applications.convnext", "StochasticDepth": "keras.src.applications.convnext"}

_PAIR_KEYS = ("kernel_size", "strides", "dilation_rate", "pool_size", "size")


def _pair(v):
    return [int(v), int(v)] if isinstance(v, int) else [int(a) for a in v]


def normalize_params(cls, p):
    """Keras constructor arguments -> the values get_config reports."""
    p = dict(p)
    for k in _PAIR_KEYS:
        if k in p and p[k] is not None:
            p[k] = _pair(p[k])
    if cls in ("MaxPooling2D", "AveragePooling2D") and p.get("strides") is None and "pool_size" in p:
        p["strides"] = list(p["pool_size"])
    if "padding" in p and isinstance(p["padding"], str):
        p["padding"] = p["padding"].lower()
    if cls == "ZeroPadding2D":
        pad = p.get("padding", 1)
        if isinstance(pad, int):
            pad = [[pad, pad], [pad, pad]]
        p["padding"] = [[int(a) for a in (q if isinstance(q, (list, tuple)) else (q, q))] for q in pad]
    if cls == "Cropping2D":
        p["cropping"] = [[int(a) for a in q] for q in p["cropping"]]
    if cls == "ReLU" and p.get("max_value") is not None:
        p["max_value"] = float(p["max_value"])
    if cls == "Normalization":
        ax = p.get("axis", -1)
        p["axis"] = [ax] if isinstance(ax, int) else list(ax)
    if cls == "Dropout" and p.get("noise_shape") is not None:
        p["noise_shape"] = list(p["noise_shape"])
    if cls == "Rescaling":
        for k in ("scale", "offset"):
            if isinstance(p.get(k), (list, tuple)):
                p[k] = [float(a) for a in p[k]]
            elif k in p:
                p[k] = float(p[k])
    if "activation" in p and p["activation"] is None:
        p["activation"] = "linear"
    return p


def layer_config(cls, name, p, flavour, ndim=4):
    keys = (KEYS3 if flavour == 3 else KEYS2)[cls]
    known = {k for k, _ in keys}
    extra = set(p) - known
    if extra:
        raise ValueError(f"{cls} {name}: unknown config keys {sorted(extra)}")
    c = {"name": name, "trainable": True, "dtype": copy.deepcopy(POLICY3) if flavour == 3 else "float32"}
    for k, d in keys:
        v = p.get(k, d)
        if isinstance(v, tuple) and len(v) == 3 and v[0] == INIT:
            v = _init3(v[1], **v[2]) if flavour == 3 else _init2(v[1], **v[2])
        elif k == "activation":
            v = ACT3.get(v, v) if flavour == 3 else ("linear" if v is None else v)
        c[k] = copy.deepcopy(v)
    if flavour == 2 and cls in ("BatchNormalization", "LayerNormalization"):
        ax = c["axis"]
        ax = ax if isinstance(ax, list) else [ax]
        c["axis"] = [a % ndim for a in ax]  # tf.keras stores the built, positive axis list
    return c


# ---------------------------------------------------------------------------
# Deterministic weights


class Weights:
    """Seeded weight values (tools/zoo/kzoo.Lcg, one stream per variable).

    * Conv / Dense kernels: He-uniform, U(-a, a) with a = sqrt(6 / fan_in).
    * Biases: U(-0.1, 0.1). LayerNormalization gamma U(0.8, 1.2), beta U(-0.1, 0.1).
    * BatchNormalization: gamma U(0.8, 1.2), beta U(-0.2, 0.2); the moving
      statistics are calibrated on the layer's actual input (the test batch,
      computed eagerly): moving_variance = per-channel second moment E[x^2],
      averaged half and half with the layer-wide value, times U(0.8, 1.25);
      moving_mean = 0.1 * rms * U(-1, 1). Random statistics that ignore the
      data blow up or kill activations after 50+ layers. Subtracting the true
      per-channel means would cancel the large mean component of post-ReLU
      inputs and amplify relative rounding errors ~1.2x per layer (float32
      and float64 results would differ by > 1e-4 at the output); with these
      statistics every BN output is O(1) and float32 runs (tfjs, kerasc) stay
      within ~1e-5 of the float64 reference.
    * LayerScale gamma U(0.3, 0.7) (the Keras init value 1e-6 would make every
      ConvNeXt block a no-op).
    * Classifier layers (``calibrate_std``): kernel rescaled so the logits have
      the given standard deviation on the test batch (softmax not one-hot).
    """

    def __init__(self, model_name):
        self.model = model_name

    def rng(self, key, var):
        return kzoo.Lcg(kzoo.fnv1a(f"{self.model}/{key}/{var}"))

    def uniform(self, key, var, shape, lo, hi):
        n = int(np.prod(shape)) if len(shape) else 1
        return (lo + (hi - lo) * self.rng(key, var).u01(n)).reshape(shape)

    def sym(self, key, var, shape, a):
        return self.uniform(key, var, shape, -a, a)


# ---------------------------------------------------------------------------
# Symbolic tensors / graph


class T:
    """A symbolic tensor of the graph being built, with its eager value."""

    __slots__ = ("node", "index", "value")

    def __init__(self, node, index, value):
        self.node, self.index, self.value = node, index, value

    @property
    def shape(self):
        return [None] + list(np.shape(self.value)[1:])


class Node:
    def __init__(self, entry, k2_node_offset=0):
        self.entry = entry
        self.name = kzoo.entry_name(entry)
        self.k2_offset = k2_node_offset  # 1 for nested Sequential in Keras 2 configs


def kt(t):
    return {"class_name": "__keras_tensor__",
            "config": {"shape": t.shape, "dtype": "float32", "keras_history": [t.node.name, 0, t.index]}}


def k2ref(t):
    return [t.node.name, t.node.k2_offset, t.index]


def weight_shapes(cls, p, in_shape):
    """[(var name, shape)] in canonical order (kzoo.var_specs)."""
    c_in = in_shape[-1]
    if cls == "Conv2D":
        k = p["kernel_size"]
        out = [("kernel", (k[0], k[1], c_in // p.get("groups", 1), p["filters"]))]
        return out + ([("bias", (p["filters"],))] if p.get("use_bias", True) else [])
    if cls in ("Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose"):
        k = p["kernel_size"]
        k = [k] * int(cls[4]) if isinstance(k, int) else list(k)
        out = [("kernel", tuple(k) + (p["filters"], c_in))]
        return out + ([("bias", (p["filters"],))] if p.get("use_bias", True) else [])
    if cls == "DepthwiseConv2D":
        k = p["kernel_size"]
        dm = p.get("depth_multiplier", 1)
        out = [("depthwise_kernel", (k[0], k[1], c_in, dm))]
        return out + ([("bias", (c_in * dm,))] if p.get("use_bias", True) else [])
    if cls == "SeparableConv2D":
        k = p["kernel_size"]
        dm = p.get("depth_multiplier", 1)
        out = [("depthwise_kernel", (k[0], k[1], c_in, dm)), ("pointwise_kernel", (1, 1, c_in * dm, p["filters"]))]
        return out + ([("bias", (p["filters"],))] if p.get("use_bias", True) else [])
    if cls == "Dense":
        out = [("kernel", (c_in, p["units"]))]
        return out + ([("bias", (p["units"],))] if p.get("use_bias", True) else [])
    if cls == "BatchNormalization":
        out = []
        if p.get("scale", True):
            out.append(("gamma", (c_in,)))
        if p.get("center", True):
            out.append(("beta", (c_in,)))
        return out + [("moving_mean", (c_in,)), ("moving_variance", (c_in,))]
    if cls == "LayerNormalization":
        out = []
        if p.get("scale", True):
            out.append(("gamma", (c_in,)))
        if p.get("center", True):
            out.append(("beta", (c_in,)))
        return out
    if cls == "Normalization":
        if p.get("mean") is not None:
            return []
        return [("mean", (c_in,)), ("variance", (c_in,)), ("count", ())]
    if cls == "LayerScale":
        return [("gamma", (p["projection_dim"],))]
    return []


class Graph:
    """Builds one flavour (3 or 2) of a Functional model, executing eagerly.

    ``weight_source``: dict wkey -> list of arrays (from a previous build of
    the other flavour); when given, no weights are generated. ``weights_out``
    collects wkey -> arrays of this build.
    """

    def __init__(self, name, flavour, gen, weight_source=None, normalization_init=None):
        self.name = name
        self.flavour = flavour
        self.gen = gen
        self.src = weight_source
        self.weights_out = {}
        self.entries = []
        self.counts = {}
        self.names = set()
        self.ex = Executor(flavour)
        self.inputs = []
        self.normalization_init = normalization_init or {}

    # -- names --
    def uniq(self, base):
        while True:
            k = self.counts.get(base, -1) + 1
            self.counts[base] = k
            n = base if k == 0 else f"{base}_{k}"
            if n not in self.names:
                return n

    def _claim(self, name):
        if name in self.names:
            raise ValueError(f"duplicate layer name {name}")
        self.names.add(name)

    # -- inputs --
    def input(self, shape, data):
        # Keras 3 auto-names an Input "input_layer"; tf.keras 2 "input_1".
        n = self.uniq("input_layer") if self.flavour == 3 else f"input_{len(self.inputs) + 1}"
        self._claim(n)
        if self.flavour == 3:
            e = {"module": "keras.layers", "class_name": "InputLayer",
                 "config": {"batch_shape": [None] + list(shape), "dtype": "float32", "sparse": False, "name": n},
                 "registered_name": None, "name": n, "inbound_nodes": []}
        else:
            e = {"class_name": "InputLayer",
                 "config": {"batch_input_shape": [None] + list(shape), "dtype": "float32", "sparse": False,
                            "ragged": False, "name": n},
                 "name": n, "inbound_nodes": []}
        self.entries.append(e)
        t = T(Node(e), 0, np.asarray(data, dtype=np.float64))
        self.inputs.append(t)
        return t

    # -- weights --
    def _weights(self, cls, p, in_value, wkey, calibrate_std=None, entry=None):
        shapes = weight_shapes(cls, p, list(np.shape(in_value)))
        if not shapes:
            return None
        if self.src is not None:
            ws = self.src[wkey]
            if [tuple(np.shape(a)) for a in ws] != [tuple(s) for _, s in shapes]:
                raise ValueError(f"{wkey}: weight shapes differ between flavours")
            return ws
        g = self.gen
        out = []
        x = np.asarray(in_value, dtype=np.float64)
        for var, shp in shapes:
            if var in ("kernel", "depthwise_kernel", "pointwise_kernel"):
                if var == "depthwise_kernel":
                    fan_in = shp[0] * shp[1]
                else:
                    fan_in = int(np.prod(shp[:-1]))
                a = g.sym(wkey, var, shp, math.sqrt(6.0 / fan_in))
            elif var == "bias":
                a = g.sym(wkey, var, shp, 0.1)
            elif var == "gamma" and cls == "LayerScale":
                a = g.uniform(wkey, var, shp, 0.3, 0.7)
            elif var == "gamma":
                a = g.uniform(wkey, var, shp, 0.8, 1.2)
            elif var == "beta":
                a = g.sym(wkey, var, shp, 0.2 if cls == "BatchNormalization" else 0.1)
            elif var == "moving_mean":
                # NOT the actual mean: subtracting each channel's mean cancels
                # the (large) mean component of post-ReLU inputs and amplifies
                # relative rounding errors ~1.2x per layer (float32 vs float64
                # outputs would then differ by >1e-4 after 50 layers).
                rms = np.sqrt(np.mean(x * x, axis=tuple(range(x.ndim - 1))))
                a = 0.1 * rms * g.sym(wkey, var, shp, 1.0)
            elif var == "moving_variance":
                # second moment (mean included): BN output RMS ~ gamma
                # mixed half and half with the layer-wide mean: at 1x1 / 2x2
                # spatial size a channel's statistics come from 2-8 numbers, and
                # a near-zero channel must not be blown up by a tiny variance.
                ms = np.mean(x * x, axis=tuple(range(x.ndim - 1)))
                ms = 0.5 * ms + 0.5 * max(float(np.mean(ms)), 1e-6)
                a = ms * g.uniform(wkey, var, shp, 0.8, 1.25)
            elif var in ("mean", "variance"):
                a = np.asarray(self.normalization_init[var], dtype=np.float64).reshape(shp)
            elif var == "count":
                out.append(np.array(self.normalization_init.get("count", 1000), dtype=np.int64))
                continue
            else:
                raise ValueError(var)
            out.append(a.astype(np.float32))
        if calibrate_std is not None:
            # Rescale the kernel so the layer output has the wanted spread.
            e = copy.deepcopy(entry)
            e["config"]["activation"] = "linear"  # calibrate the logits, not the softmax
            e["__weights__"] = out
            y = self.ex.call_layer(e, [x], {}, [None])[0][0]
            if p.get("use_bias", True):
                y = y - np.asarray(out[-1], dtype=np.float64)
            s = float(np.std(y))
            out[0] = (out[0].astype(np.float64) * (calibrate_std / max(s, 1e-12))).astype(np.float32)
        return out

    # -- layers --
    def layer(self, cls, x, name=None, wkey=None, calibrate_std=None, **params):
        """A Keras layer call. x: T or list of T. Returns T."""
        p = normalize_params(cls, params)
        n = name or self.uniq(kzoo.snake_case(cls))
        self._claim(n)
        wkey = wkey or n
        xs = x if isinstance(x, list) else [x]
        ndim = len(xs[0].shape)
        cfg = layer_config(cls, n, p, self.flavour, ndim)
        # NumPy reference entry (Keras 3 semantics for activations)
        ref = {"module": MODULE3.get(cls, "keras.layers"), "class_name": cls,
               "config": layer_config(cls, n, p, 3, ndim)}
        first_val = xs[0].value
        ws = self._weights(cls, p, first_val, wkey, calibrate_std, ref)
        if ws is not None:
            ref["__weights__"] = ws
            self.weights_out[wkey] = ws
        vals = [t.value for t in xs]
        outs, _ = self.ex.call_layer(ref, [vals] if isinstance(x, list) else [vals[0]], {}, [None])
        y = outs[0]
        if self.flavour == 3:
            e = {"module": MODULE3.get(cls, "keras.layers"), "class_name": cls, "config": cfg,
                 "registered_name": cls if cls in MODULE3 else None}
            shp = [t.shape for t in xs]
            e["build_config"] = {"input_shape": shp if isinstance(x, list) else shp[0]}
            e["name"] = n
            args = [[kt(t) for t in xs]] if isinstance(x, list) else [kt(xs[0])]
            e["inbound_nodes"] = [{"args": args, "kwargs": {}}]
        else:
            e = {"class_name": cls, "config": cfg, "name": n,
                 "inbound_nodes": [[k2ref(t) + [{}] for t in xs]]}
        if ws is not None:
            e["__weights__"] = ws
        self.entries.append(e)
        return T(Node(e), 0, y)

    def op(self, cls, a, b):
        """A raw tensor op (a + b, a * b) on a KerasTensor: Keras 3 ops node or
        tf.keras 2 TFOpLambda. b: T or a Python float."""
        fn = {"Add": np.add, "Multiply": np.multiply}[cls]
        bv = b.value if isinstance(b, T) else float(b)
        y = fn(a.value, bv)
        if self.flavour == 3:
            n = self.uniq(kzoo.snake_case(cls))
            self._claim(n)
            e = {"module": "keras.src.ops.numpy", "class_name": cls, "config": {"name": n},
                 "registered_name": cls, "name": n,
                 "inbound_nodes": [{"args": [kt(a), kt(b) if isinstance(b, T) else float(b)], "kwargs": {}}]}
        else:
            base, fname = {"Add": ("tf.__operators__.add", "__operators__.add"),
                           "Multiply": ("tf.math.multiply", "math.multiply")}[cls]
            n = self.uniq(base)
            self._claim(n)
            y_arg = k2ref(b) if isinstance(b, T) else float(b)
            e = {"class_name": "TFOpLambda",
                 "config": {"name": n, "trainable": True, "dtype": "float32", "function": fname},
                 "name": n, "inbound_nodes": [[k2ref(a) + [{"y": y_arg, "name": None}]]]}
        self.entries.append(e)
        return T(Node(e), 0, y)

    def sequential(self, name, specs, x):
        """A nested Sequential model (ConvNeXt stem / downsampling blocks).
        specs: list of (cls, params dict with "name")."""
        self._claim(name)
        in_shape = x.shape
        v = x.value
        sub_entries = []
        for cls, params in specs:
            params = dict(params)
            ln = params.pop("name")
            self._claim(ln)
            p = normalize_params(cls, params)
            ndim = v.ndim
            ref = {"module": "keras.layers", "class_name": cls, "config": layer_config(cls, ln, p, 3, ndim)}
            ws = self._weights(cls, p, v, ln, None, ref)
            if ws is not None:
                ref["__weights__"] = ws
                self.weights_out[ln] = ws
            cfg = layer_config(cls, ln, p, self.flavour, ndim)
            if self.flavour == 3:
                e = {"module": "keras.layers", "class_name": cls, "config": cfg, "registered_name": None,
                     "build_config": {"input_shape": [None] + list(v.shape[1:])}}
            else:
                e = {"class_name": cls, "config": cfg}
            if ws is not None:
                e["__weights__"] = ws
            sub_entries.append(e)
            v = self.ex.call_layer(ref, [v], {}, [None])[0][0]
        if self.flavour == 3:
            iname = self.uniq("input_layer")
            self._claim(iname)
            inp = {"module": "keras.layers", "class_name": "InputLayer",
                   "config": {"batch_shape": in_shape, "dtype": "float32", "sparse": False, "name": iname},
                   "registered_name": None}
            e = {"module": "keras", "class_name": "Sequential",
                 "config": {"name": name, "trainable": True, "dtype": copy.deepcopy(POLICY3),
                            "layers": [inp] + sub_entries, "build_input_shape": in_shape},
                 "registered_name": None, "build_config": {"input_shape": in_shape},
                 "name": name, "inbound_nodes": [{"args": [kt(x)], "kwargs": {}}]}
            node = Node(e, 0)
        else:
            iname = sub_entries[0]["config"]["name"] + "_input"
            inp = {"class_name": "InputLayer",
                   "config": {"batch_input_shape": in_shape, "dtype": "float32", "sparse": False,
                              "ragged": False, "name": iname}}
            e = {"class_name": "Sequential", "config": {"name": name, "layers": [inp] + sub_entries},
                 "name": name, "inbound_nodes": [[k2ref(x) + [{}]]]}
            node = Node(e, 1)
        self.entries.append(e)
        return T(node, 0, v)

    # -- model --
    def model(self, outputs):
        outs = outputs if isinstance(outputs, list) else [outputs]
        if self.flavour == 3:
            ins = [[t.node.name, 0, 0] for t in self.inputs]
            os_ = [[t.node.name, 0, t.index] for t in outs]
            cfg = {"name": self.name, "trainable": True, "layers": self.entries,
                   "input_layers": ins[0] if len(ins) == 1 else ins,
                   "output_layers": os_[0] if len(os_) == 1 else os_}
            return {"module": "keras.src.models.functional", "class_name": "Functional", "config": cfg,
                    "registered_name": "Functional", "build_config": {"input_shape": None}}
        cfg = {"name": self.name, "layers": self.entries,
               "input_layers": [[t.node.name, 0, 0] for t in self.inputs],
               "output_layers": [k2ref(t) for t in outs]}
        return {"class_name": "Functional", "config": cfg}


# ---------------------------------------------------------------------------
# Reproducible HDF5 files


def _h5_open(path, libver):
    """h5py.File for writing. With a libver other than h5py's default the
    object headers are version 2, which record timestamps unless told not to:
    turn them off (root group via the file creation list, other groups in
    _group) so the output is byte-for-byte reproducible."""
    import h5py
    if not libver:
        return h5py.File(path, "w")
    names = {"v108": h5py.h5f.LIBVER_V18, "v110": h5py.h5f.LIBVER_V110, "latest": h5py.h5f.LIBVER_LATEST,
             "earliest": h5py.h5f.LIBVER_EARLIEST}
    lo, hi = (libver, libver) if isinstance(libver, str) else libver
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(names[lo], names[hi])
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_obj_track_times(False)
    fid = h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)
    return h5py.File(fid)


def _group(parent, path):
    """require_group(path), creating each missing level without timestamps."""
    import h5py
    g = parent
    for part in [p for p in path.split("/") if p]:
        if part in g:
            g = g[part]
            continue
        gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
        gcpl.set_obj_track_times(False)
        gid = h5py.h5g.create(g.id, part.encode(), gcpl=gcpl)
        g = h5py.Group(gid)
    return g


# ---------------------------------------------------------------------------
# Writers


def _fixed_str_array(strings):
    if not strings:
        return np.array([], dtype=np.float64)
    return np.array([s.encode("utf8") for s in strings])


HDF5_OBJECT_HEADER_LIMIT = 64512


def _save_attr_chunked(group, name, strings):
    """save_attributes_to_hdf5_group (§2.2): split into name0, name1, ... when
    the fixed-length string array exceeds the object header limit."""
    data = _fixed_str_array(strings)
    if data.nbytes <= HDF5_OBJECT_HEADER_LIMIT:
        group.attrs[name] = data
        return
    n = 1
    chunks = [data]
    while any(c.nbytes > HDF5_OBJECT_HEADER_LIMIT for c in chunks):
        n += 1
        chunks = np.array_split(data, n)
    for i, c in enumerate(chunks):
        group.attrs[f"{name}{i}"] = c


def write_legacy_h5(path, model_entry, keras_version="2.15.0", libver=None):
    """Legacy full-model .h5 as tf.keras 2.15 writes it (§2), like
    kzoo.write_legacy_h5 but creating the layer groups in sorted name order as
    Keras does (hdf5_format.save_weights_to_hdf5_group): with names containing
    '/' (tf.keras MobileNetV3: 'Conv', 'Conv/BatchNorm', 'expanded_conv/depthwise/pad')
    a parent must exist before its children."""
    cfg = kzoo.strip_private(model_entry)
    layers = kzoo.weighted_sublayers(model_entry)
    with _h5_open(path, libver) as f:
        f.attrs["backend"] = "tensorflow"
        f.attrs["keras_version"] = keras_version
        # Python bytes: h5py 3 (what tf.keras 2.x saves with) stores them as a
        # variable-length string; a fixed-length one cannot exceed the 64 KiB
        # object-header limit, and these configs are 100-700 KB.
        f.attrs["model_config"] = json.dumps(cfg).encode("utf8")
        mw = _group(f, "model_weights")
        _save_attr_chunked(mw, "layer_names", [kzoo.entry_name(e) for e in layers])
        mw.attrs["backend"] = np.bytes_(b"tensorflow")
        mw.attrs["keras_version"] = np.bytes_(keras_version.encode("utf8"))
        for e in sorted(layers, key=kzoo.entry_name):
            name = kzoo.entry_name(e)
            g = _group(mw, name)
            names, arrays = [], []
            if kzoo.is_model(e):
                for sub, spec, i in kzoo.all_weight_entries(e):
                    names.append(f"{kzoo.entry_name(sub)}/{spec['k2']}:0")
                    arrays.append(sub["__weights__"][i])
            else:
                ws = e.get("__weights__", [])
                specs = kzoo.var_specs(e)
                if len(ws) != len(specs):
                    raise ValueError(f"{name}: {len(ws)} arrays for {len(specs)} variables")
                order = [i for i, s in enumerate(specs) if s["trainable"]] + \
                        [i for i, s in enumerate(specs) if not s["trainable"]]
                for i in order:
                    names.append(f"{name}/{specs[i]['k2']}:0")
                    arrays.append(ws[i])
            _save_attr_chunked(g, "weight_names", names)
            for wn, a in zip(names, arrays):
                parent, _, leaf = wn.rpartition("/")
                _group(g, parent).create_dataset(leaf, data=np.asarray(a))
        t = _group(mw, "top_level_model_weights")
        t.attrs["weight_names"] = _fixed_str_array([])


def count_params(model_entry):
    total = 0

    def rec(m):
        nonlocal total
        for e in kzoo.weighted_sublayers(m):
            if kzoo.is_model(e):
                rec(e)
            for a in e.get("__weights__", []):
                total += int(np.prod(np.shape(a))) if np.ndim(a) else 1

    rec(model_entry)
    return total


def write_keras_zip(path, model_entry, keras_version="3.6.0", libver=None):
    """kzoo.write_keras_zip with a choice of HDF5 file-format bounds for the
    model.weights.h5 member (same groups, datasets and attributes)."""
    import zipfile as _zipfile
    import tempfile as _tempfile
    with _tempfile.TemporaryDirectory(prefix="apps_w_") as tmp:
        wpath = os.path.join(tmp, "model.weights.h5")
        with _h5_open(wpath, libver) as f:
            g = _group(f, "vars")
            g.attrs["name"] = kzoo.entry_name(model_entry) or model_entry["config"]["name"]
            for e, p in kzoo.keras3_paths(model_entry):
                names = kzoo.sub_object_names(e) if not kzoo.is_model(e) else {"": kzoo.entry_name(e)}
                for sub, nm in names.items():
                    gg = _group(f, f"{p}/{sub}/vars" if sub else f"{p}/vars")
                    gg.attrs["name"] = nm
                if kzoo.is_model(e):
                    continue
                ws = e.get("__weights__", [])
                specs = kzoo.var_specs(e)
                if len(ws) != len(specs):
                    raise ValueError(f"{kzoo.entry_name(e)}: {len(ws)} arrays for {len(specs)} variables")
                for a, sp in zip(ws, specs):
                    gp = f"{p}/{sp['sub']}/vars" if sp["sub"] else f"{p}/vars"
                    f[gp].create_dataset(str(sp["idx"]), data=np.asarray(a))
        with open(wpath, "rb") as fh:
            wbytes = fh.read()
    meta = {"keras_version": keras_version, "date_saved": "2024-01-01@00:00:00"}
    with _zipfile.ZipFile(path, "w", compression=_zipfile.ZIP_STORED) as z:
        kzoo._zip_member(z, "metadata.json", json.dumps(meta))
        kzoo._zip_member(z, "config.json", json.dumps(kzoo.strip_private(model_entry)))
        kzoo._zip_member(z, "model.weights.h5", wbytes)
