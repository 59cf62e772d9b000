#!/usr/bin/env python3
"""Second, independent numerical reference: Keras inference in NumPy (float64).

    /usr/bin/python3 tools/zoo/numpy_ref.py MODEL --input a.npy [--input b.npy] \
        --output out0.npy [--output ...] [--compare exp0.npy ...]

MODEL is a Keras 3 .keras zip (also tf.keras 2.13+ ones), a legacy .h5 full
model (Keras 2 or Keras 3 writer) or a tfjs layers model.json. The layer
formulas are written from the Keras documentation and the format notes in
/work/shared/docs/keras-formats.md §5 (TF "same" padding with the extra pixel
bottom/right, exclusive average pooling, half-pixel bilinear resize, Keras 2
vs Keras 3 hard_sigmoid, exact-erf gelu, ...), not from any runtime's code.

Everything is computed in float64 and written as float32.
"""

import argparse
import math
import os
import sys

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kzoo  # noqa: E402

# ---------------------------------------------------------------------------
# Activations


def _sigmoid(x):
    return np.where(x >= 0, 1.0 / (1.0 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1.0 + np.exp(-np.abs(x))))


def _softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


def _softmax(x, axis=-1):
    axis = tuple(axis) if isinstance(axis, (list, tuple)) else axis
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


_erf = np.vectorize(math.erf, otypes=[np.float64])
SELU_A = 1.6732632423543772
SELU_S = 1.0507009873554805


def _elu(x, a=1.0):
    return np.where(x > 0, x, a * np.expm1(np.minimum(x, 0)))


def activation(name, x, keras_major):
    if isinstance(name, dict):  # {"class_name": ..., "config": ...} or function dict
        name = name.get("config", name.get("class_name"))
        if isinstance(name, dict):
            name = name.get("name")
    name = {"hardSigmoid": "hard_sigmoid", "swish": "silu", "hard_swish": "hard_silu",
            "logSoftmax": "log_softmax", None: "linear"}.get(name, name)
    if name == "linear":
        return x
    if name == "relu":
        return np.maximum(x, 0)
    if name == "relu6":
        return np.clip(x, 0, 6)
    if name == "sigmoid":
        return _sigmoid(x)
    if name == "tanh":
        return np.tanh(x)
    if name == "softmax":
        return _softmax(x, -1)
    if name == "log_softmax":
        return x - np.log(np.sum(np.exp(x - np.max(x, -1, keepdims=True)), -1, keepdims=True)) - np.max(x, -1, keepdims=True)
    if name == "elu":
        return _elu(x)
    if name == "selu":
        return SELU_S * _elu(x, SELU_A)
    if name == "softplus":
        return _softplus(x)
    if name == "softsign":
        return x / (1 + np.abs(x))
    if name == "silu":
        return x * _sigmoid(x)
    if name == "gelu":  # Keras string 'gelu': exact erf form
        return 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    if name == "mish":
        return x * np.tanh(_softplus(x))
    if name == "exponential":
        return np.exp(x)
    if name == "leaky_relu":
        return np.where(x >= 0, x, 0.2 * x)
    if name == "hard_sigmoid":
        if keras_major >= 3:
            return np.clip(x / 6.0 + 0.5, 0, 1)
        return np.clip(0.2 * x + 0.5, 0, 1)
    if name == "hard_silu":
        return x * np.clip(x / 6.0 + 0.5, 0, 1)
    raise NotImplementedError(f"activation {name}")


# ---------------------------------------------------------------------------
# Convolution / pooling helpers (channels_last, N spatial dims)


def _tup(v, n):
    if isinstance(v, (list, tuple)):
        return tuple(int(a) for a in v) if len(v) == n else tuple(int(v[0]) for _ in range(n))
    return tuple(int(v) for _ in range(n))


def _same_pads(size, k, s, d):
    eff = (k - 1) * d + 1
    out = -(-size // s)
    total = max((out - 1) * s + eff - size, 0)
    return total // 2, total - total // 2


def _pad_spatial(x, pads, value=0.0):
    return np.pad(x, [(0, 0)] + list(pads) + [(0, 0)], mode="constant", constant_values=value)


def _conv_pads(x, kernel, strides, dil, padding):
    n = len(kernel)
    if padding == "valid":
        return [(0, 0)] * n
    if padding == "same":
        return [_same_pads(x.shape[1 + i], kernel[i], strides[i], dil[i]) for i in range(n)]
    if padding == "causal":
        return [((kernel[0] - 1) * dil[0], 0)]
    raise NotImplementedError(padding)


def _windows(xp, kernel, strides, dil):
    """Yields (offset, slice) for every kernel offset: slice (B, *out, C)."""
    n = len(kernel)
    out = [(xp.shape[1 + i] - ((kernel[i] - 1) * dil[i] + 1)) // strides[i] + 1 for i in range(n)]
    for off in np.ndindex(*kernel):
        sl = [slice(None)]
        for i in range(n):
            st = off[i] * dil[i]
            sl.append(slice(st, st + strides[i] * (out[i] - 1) + 1, strides[i]))
        sl.append(slice(None))
        yield off, xp[tuple(sl)], out


def conv(x, w, strides, padding, dil, groups=1):
    n = x.ndim - 2
    kernel = w.shape[:n]
    xp = _pad_spatial(x, _conv_pads(x, kernel, strides, dil, padding))
    cin, cout = x.shape[-1], w.shape[-1]
    cig, cog = cin // groups, cout // groups
    res = None
    for off, sl, out in _windows(xp, kernel, strides, dil):
        if res is None:
            res = np.zeros((x.shape[0],) + tuple(out) + (cout,))
        wk = w[off]
        for g in range(groups):
            res[..., g * cog:(g + 1) * cog] += sl[..., g * cig:(g + 1) * cig] @ wk[:, g * cog:(g + 1) * cog]
    return res


def depthwise(x, w, strides, padding, dil):
    n = x.ndim - 2
    kernel = w.shape[:n]
    xp = _pad_spatial(x, _conv_pads(x, kernel, strides, dil, padding))
    cin, dm = w.shape[-2], w.shape[-1]
    res = None
    for off, sl, out in _windows(xp, kernel, strides, dil):
        if res is None:
            res = np.zeros((x.shape[0],) + tuple(out) + (cin, dm))
        res += sl[..., :, None] * w[off]
    return res.reshape(res.shape[:-2] + (cin * dm,))


def conv_transpose(x, w, strides, padding, dil):
    n = x.ndim - 2
    kernel = w.shape[:n]
    ins = x.shape[1:1 + n]
    eff = [(kernel[i] - 1) * dil[i] + 1 for i in range(n)]
    full = [(ins[i] - 1) * strides[i] + eff[i] for i in range(n)]
    cout = w.shape[-2]
    res = np.zeros((x.shape[0],) + tuple(full) + (cout,))
    for off in np.ndindex(*kernel):
        contrib = x @ w[off].T  # (B, *ins, cout)
        sl = [slice(None)]
        for i in range(n):
            st = off[i] * dil[i]
            sl.append(slice(st, st + strides[i] * (ins[i] - 1) + 1, strides[i]))
        sl.append(slice(None))
        res[tuple(sl)] += contrib
    # Keras deconv_output_length + TF padding of the equivalent forward conv.
    sl = [slice(None)]
    pads = []
    for i in range(n):
        if padding == "valid":
            length = ins[i] * strides[i] + max(eff[i] - strides[i], 0)
            before = 0
        elif padding == "same":
            length = ins[i] * strides[i]
            before = max(eff[i] - strides[i], 0) // 2
        else:
            raise NotImplementedError(padding)
        extra = max(before + length - full[i], 0)
        pads.append((0, extra))
        sl.append(slice(before, before + length))
    if any(p[1] for p in pads):
        res = _pad_spatial(res, pads)
    sl.append(slice(None))
    return res[tuple(sl)]


def pool(x, kind, pool_size, strides, padding):
    n = x.ndim - 2
    dil = (1,) * n
    if padding == "same":
        pads = [_same_pads(x.shape[1 + i], pool_size[i], strides[i], 1) for i in range(n)]
    else:
        pads = [(0, 0)] * n
    if kind == "max":
        xp = _pad_spatial(x, pads, -np.inf)
        res = None
        for _, sl, _ in _windows(xp, pool_size, strides, dil):
            res = sl.copy() if res is None else np.maximum(res, sl)
        return res
    xp = _pad_spatial(x, pads, 0.0)
    ones = _pad_spatial(np.ones((1,) + x.shape[1:-1] + (1,)), pads, 0.0)
    tot, cnt = None, None
    for (_, sl, _), (_, sc, _) in zip(_windows(xp, pool_size, strides, dil), _windows(ones, pool_size, strides, dil)):
        tot = sl.copy() if tot is None else tot + sl
        cnt = sc.copy() if cnt is None else cnt + sc
    return tot / cnt  # exclusive: only real elements are counted


def resize_bilinear(x, oh, ow):
    """Half-pixel-centre bilinear (tf.image.resize / keras.ops.image.resize, antialias off)."""
    def coords(out, inp):
        src = (np.arange(out) + 0.5) * (inp / out) - 0.5
        lo = np.floor(src)
        frac = src - lo
        lo = lo.astype(int)
        return np.clip(lo, 0, inp - 1), np.clip(lo + 1, 0, inp - 1), frac
    h0, h1, fh = coords(oh, x.shape[1])
    w0, w1, fw = coords(ow, x.shape[2])
    top = x[:, h0] * (1 - fh)[None, :, None, None] + x[:, h1] * fh[None, :, None, None]
    return top[:, :, w0] * (1 - fw)[None, None, :, None] + top[:, :, w1] * fw[None, None, :, None]


def resize_nearest(x, oh, ow):
    """Half-pixel nearest (TF2 resize): src = floor((i + 0.5) * in / out)."""
    hi = np.minimum(np.floor((np.arange(oh) + 0.5) * x.shape[1] / oh).astype(int), x.shape[1] - 1)
    wi = np.minimum(np.floor((np.arange(ow) + 0.5) * x.shape[2] / ow).astype(int), x.shape[2] - 1)
    return x[:, hi][:, :, wi]


# ---------------------------------------------------------------------------
# Recurrent layers


def rnn_run(cls, c, ws, x, mask, keras_major, zero_output_for_mask=False):
    """Runs one RNN layer. Returns (output, output_mask)."""
    units = c["units"]
    act = c.get("activation", "tanh")
    ract = c.get("recurrent_activation", "sigmoid")
    use_bias = c.get("use_bias", True)
    W, U = ws[0].astype(np.float64), ws[1].astype(np.float64)
    b = ws[2].astype(np.float64) if use_bias else None
    B, T = x.shape[0], x.shape[1]
    h = np.zeros((B, units))
    cst = np.zeros((B, units))
    steps = list(range(T))
    if c.get("go_backwards", False):
        steps = steps[::-1]
    outs = []
    prev_out = np.zeros((B, units))
    for t in steps:
        xt = x[:, t]
        if cls == "LSTM":
            z = xt @ W + h @ U + (b if b is not None else 0)
            i, f, g, o = np.split(z, 4, axis=-1)
            i = activation(ract, i, keras_major)
            f = activation(ract, f, keras_major)
            o = activation(ract, o, keras_major)
            c_new = f * cst + i * activation(act, g, keras_major)
            h_new = o * activation(act, c_new, keras_major)
        elif cls == "GRU":
            reset_after = c.get("reset_after", False)
            if b is not None and reset_after:
                bi, br = (b[0], b[1]) if b.ndim == 2 else (b, np.zeros_like(b))
            else:
                bi, br = (b if b is not None else np.zeros(3 * units)), np.zeros(3 * units)
            xm = xt @ W + bi
            xz, xr, xh = np.split(xm, 3, axis=-1)
            if reset_after:
                inner = h @ U + br
                rz, rr, rh = np.split(inner, 3, axis=-1)
                zg = activation(ract, xz + rz, keras_major)
                rg = activation(ract, xr + rr, keras_major)
                hh = activation(act, xh + rg * rh, keras_major)
            else:
                Uz, Ur, Uh = np.split(U, 3, axis=-1)
                zg = activation(ract, xz + h @ Uz, keras_major)
                rg = activation(ract, xr + h @ Ur, keras_major)
                hh = activation(act, xh + (rg * h) @ Uh, keras_major)
            h_new = zg * h + (1 - zg) * hh
            c_new = cst
        elif cls == "SimpleRNN":
            h_new = activation(act, xt @ W + (b if b is not None else 0) + h @ U, keras_major)
            c_new = cst
        else:
            raise NotImplementedError(cls)
        if mask is not None:
            m = mask[:, t][:, None].astype(bool)
            h = np.where(m, h_new, h)
            cst = np.where(m, c_new, cst)
            out_t = np.where(m, h_new, 0.0 if zero_output_for_mask else prev_out)
        else:
            h, cst, out_t = h_new, c_new, h_new
        prev_out = out_t
        outs.append(out_t)
    if c.get("return_sequences", False):
        seq = np.stack(outs, axis=1)
        om = mask[:, ::-1] if (mask is not None and c.get("go_backwards", False)) else mask
        return seq, om
    return outs[-1], None


# ---------------------------------------------------------------------------
# Graph execution


class Ref:
    __slots__ = ("name", "node", "tensor")

    def __init__(self, name, node, tensor):
        self.name, self.node, self.tensor = name, int(node), int(tensor)


def _parse_k3(obj):
    if isinstance(obj, dict):
        if obj.get("class_name") == "__keras_tensor__":
            kh = obj["config"]["keras_history"]
            return Ref(kh[0], kh[1], kh[2])
        if obj.get("class_name") in ("__numpy__", "__tensor__"):
            return np.array(obj["config"]["value"], dtype=obj["config"].get("dtype", "float32"))
        return {k: _parse_k3(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_parse_k3(v) for v in obj]
    return obj


def parse_calls(entry):
    """[(args, kwargs)] with tensors as Ref objects, for both node encodings."""
    calls = []
    for node in entry.get("inbound_nodes", []):
        if isinstance(node, dict):
            calls.append((_parse_k3(node.get("args", [])), _parse_k3(node.get("kwargs", {}))))
            continue
        refs, kwargs = [], {}
        for item in node:
            if item[0] == "_CONSTANT_VALUE":
                refs.append(item[2])
                continue
            refs.append(Ref(item[0], item[1], item[2]))
            if len(item) > 3 and item[3]:
                for k, v in item[3].items():
                    if isinstance(v, list) and len(v) == 3 and isinstance(v[0], str):
                        kwargs[k] = Ref(*v)
                    else:
                        kwargs[k] = v
        calls.append(([refs[0]] if len(refs) == 1 else [refs], kwargs))
    return calls


def _dialect(model_entry):
    for e in kzoo.model_layers(model_entry):
        for n in e.get("inbound_nodes", []):
            return 3 if isinstance(n, dict) else 2
    return 3 if "module" in model_entry else 2


class Executor:
    def __init__(self, keras_major):
        self.k = keras_major
        self.shapes = {}  # id(entry) -> {call: {"in": [...], "out": [...]}}

    # -- helpers --
    def _record(self, entry, call, ins, outs):
        rec = self.shapes.setdefault(id(entry), {})
        if call not in rec:
            def shp(t):
                if isinstance(t, list):
                    return [shp(a) for a in t]
                return [None] + list(np.shape(t)[1:])
            rec[call] = {"in": [shp(a) for a in ins], "out": [shp(o) for o in outs]}

    def run_model(self, entry, inputs, masks=None):
        """inputs: list of arrays (model input order). Returns (outputs, masks)."""
        if masks is None:
            masks = [None] * len(inputs)
        if entry["class_name"] == "Sequential":
            return self._run_sequential(entry, inputs, masks)
        return self._run_functional(entry, inputs, masks)

    def _run_sequential(self, entry, inputs, masks):
        x, m = inputs[0], masks[0]
        layers = kzoo.model_layers(entry)
        first = True
        for e in layers:
            if e["class_name"] == "InputLayer":
                if first:
                    dt = e["config"].get("dtype", "float32")
                    x = x.astype(np.int64) if str(dt).startswith("int") else x.astype(np.float64)
                continue
            if first and "int" in str(e["config"].get("dtype", "")):
                x = x.astype(np.int64)
            first = False
            outs, oms = self.call_layer(e, [x], {}, [m])
            self._record(e, 0, [x], outs)
            x, m = outs[0], oms[0]
        return [x], [m]

    def _run_functional(self, entry, inputs, masks):
        cfg = entry["config"]
        dialect = _dialect(entry)
        layers = cfg["layers"]
        by_name = {kzoo.entry_name(e): e for e in layers}
        values = {}  # (name, call) -> (list of outputs, list of masks)

        def leaf(x):
            return isinstance(x, list) and len(x) == 3 and isinstance(x[0], str) and not isinstance(x[1], (list, dict))

        def flatten_io(io):
            if isinstance(io, dict):
                return [flatten_io(v)[0] if leaf(v) else v for v in io.values()]
            if leaf(io):
                return [io]
            return list(io)

        in_refs = flatten_io(cfg["input_layers"])
        for (name, _, _), x, m in zip(in_refs, inputs, masks):
            dt = by_name[name]["config"].get("dtype", "float32")
            x = x.astype(np.int64) if str(dt).startswith("int") else x.astype(np.float64)
            values[(name, 0)] = ([x], [m])

        def call_index(ref):
            prod = by_name[ref.name]
            if prod["class_name"] == "InputLayer":
                return 0
            if len(prod.get("inbound_nodes", [])) == 1:
                return 0  # a single call: node_index carries no information
            if dialect == 2 and kzoo.is_model(prod):
                return ref.node - 1  # Keras 2 nested models: internal node 0 is not serialized
            return ref.node

        def resolve(obj):
            if isinstance(obj, Ref):
                key = (obj.name, call_index(obj))
                if key not in values:
                    raise KeyError
                v, mk = values[key]
                return v[obj.tensor], mk[obj.tensor]
            if isinstance(obj, list):
                r = [resolve(a) for a in obj]
                return [a[0] for a in r], [a[1] for a in r]
            if isinstance(obj, dict):
                r = {k: resolve(v) for k, v in obj.items()}
                return {k: v[0] for k, v in r.items()}, {k: v[1] for k, v in r.items()}
            return obj, None

        pending = []
        for e in layers:
            if e["class_name"] == "InputLayer":
                continue
            for ci, (args, kwargs) in enumerate(parse_calls(e)):
                pending.append((e, ci, args, kwargs))
        while pending:
            progress = False
            rest = []
            for e, ci, args, kwargs in pending:
                try:
                    a, am = resolve(args)
                    kw, _ = resolve(kwargs)
                except KeyError:
                    rest.append((e, ci, args, kwargs))
                    continue
                outs, oms = self.call_layer(e, a, kw, am)
                self._record(e, ci, a, outs)
                values[(kzoo.entry_name(e), ci)] = (outs, oms)
                progress = True
            if not progress:
                raise RuntimeError(f"graph stuck at {[kzoo.entry_name(p[0]) for p in rest]}")
            pending = rest

        outs, oms = [], []
        for ref in flatten_io(cfg["output_layers"]):
            name, node, t = ref
            prod = by_name[name]
            if prod["class_name"] == "InputLayer":
                ci = 0
            elif kzoo.is_model(prod) and (dialect == 2 or prod["class_name"] != "Sequential"):
                ci = node - 1  # nested Functional (and Keras 2 nested models) are stored +1
            else:
                ci = node
            v, mk = values[(name, ci)]
            outs.append(v[t])
            oms.append(mk[t])
        return outs, oms

    # -- layers --
    def call_layer(self, e, args, kwargs, arg_masks):
        """Returns (list of outputs, list of masks)."""
        cls = e["class_name"]
        c = e.get("config", {})
        ws = [np.asarray(w, dtype=np.float64) if np.asarray(w).dtype.kind == "f" else np.asarray(w)
              for w in e.get("__weights__", [])]
        k = self.k
        x = args[0] if args else None
        m = arg_masks[0] if arg_masks else None

        if kzoo.is_model(e):
            xs = x if isinstance(x, list) else [x]
            ms = m if isinstance(m, list) else [m]
            return self.run_model(e, xs, ms)

        if kzoo.is_op(e):
            vals = list(args) + [kwargs[k_] for k_ in ("x2", "y") if k_ in kwargs]
            a, b = (vals + [None])[:2]
            a = np.asarray(a, dtype=np.float64)
            b = np.asarray(b, dtype=np.float64) if b is not None else None
            op = {"Add": np.add, "Subtract": np.subtract, "Multiply": np.multiply,
                  "Divide": np.divide, "TrueDivide": np.divide, "Maximum": np.maximum,
                  "Minimum": np.minimum, "Power": np.power}.get(cls)
            if op is not None:
                return [op(a, b)], [None]
            raise NotImplementedError(f"op {e.get('module')}.{cls}")

        def one(y, mask=None):
            return [y], [mask]

        if cls == "Dense":
            y = x @ ws[0]
            if c.get("use_bias", True):
                y = y + ws[1]
            return one(activation(c.get("activation"), y, k), m)
        if cls in ("Conv1D", "Conv2D", "Conv3D"):
            n = x.ndim - 2
            y = conv(x, ws[0], _tup(c.get("strides", 1), n), c.get("padding", "valid"),
                     _tup(c.get("dilation_rate", 1), n), c.get("groups", 1) or 1)
            if c.get("use_bias", True):
                y = y + ws[1]
            return one(activation(c.get("activation"), y, k))
        if cls in ("DepthwiseConv1D", "DepthwiseConv2D"):
            n = x.ndim - 2
            y = depthwise(x, ws[0], _tup(c.get("strides", 1), n), c.get("padding", "valid"),
                          _tup(c.get("dilation_rate", 1), n))
            if c.get("use_bias", True):
                y = y + ws[1]
            return one(activation(c.get("activation"), y, k))
        if cls in ("SeparableConv1D", "SeparableConv2D"):
            n = x.ndim - 2
            y = depthwise(x, ws[0], _tup(c.get("strides", 1), n), c.get("padding", "valid"),
                          _tup(c.get("dilation_rate", 1), n))
            y = y @ ws[1].reshape(ws[1].shape[-2:])
            if c.get("use_bias", True):
                y = y + ws[2]
            return one(activation(c.get("activation"), y, k))
        if cls in ("Conv1DTranspose", "Conv2DTranspose", "Conv3DTranspose"):
            n = x.ndim - 2
            y = conv_transpose(x, ws[0], _tup(c.get("strides", 1), n), c.get("padding", "valid"),
                               _tup(c.get("dilation_rate", 1), n))
            if c.get("use_bias", True):
                y = y + ws[1]
            return one(activation(c.get("activation"), y, k))
        if cls in ("MaxPooling1D", "MaxPooling2D", "MaxPooling3D", "AveragePooling1D", "AveragePooling2D",
                   "AveragePooling3D", "MaxPool1D", "MaxPool2D", "AvgPool2D", "AvgPool1D"):
            n = x.ndim - 2
            ps = _tup(c.get("pool_size", 2), n)
            st = c.get("strides")
            st = ps if st is None else _tup(st, n)
            kind = "max" if cls.startswith("Max") else "avg"
            return one(pool(x, kind, ps, st, c.get("padding", "valid")))
        if cls.startswith("GlobalAverage") or cls.startswith("GlobalMax") or cls.startswith("GlobalAvg"):
            axes = tuple(range(1, x.ndim - 1))
            y = np.mean(x, axis=axes, keepdims=c.get("keepdims", False)) if "Av" in cls else \
                np.max(x, axis=axes, keepdims=c.get("keepdims", False))
            return one(y)
        if cls == "BatchNormalization":
            axis = c.get("axis", -1)
            axis = axis[0] if isinstance(axis, list) else axis
            i = 0
            gamma = beta = None
            if c.get("scale", True):
                gamma = ws[i]
                i += 1
            if c.get("center", True):
                beta = ws[i]
                i += 1
            mean, var = ws[i], ws[i + 1]
            shp = [1] * x.ndim
            shp[axis] = -1
            y = (x - mean.reshape(shp)) / np.sqrt(var.reshape(shp) + c.get("epsilon", 1e-3))
            if gamma is not None:
                y = y * gamma.reshape(shp)
            if beta is not None:
                y = y + beta.reshape(shp)
            return one(y, m)
        if cls == "LayerNormalization":
            axis = c.get("axis", -1)
            axes = tuple(a % x.ndim for a in (axis if isinstance(axis, list) else [axis]))
            mean = np.mean(x, axis=axes, keepdims=True)
            var = np.var(x, axis=axes, keepdims=True)
            eps = c.get("epsilon", 1e-3)
            shp = [x.shape[i] if i in axes else 1 for i in range(x.ndim)]
            if c.get("rms_scaling", False):
                y = x / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + eps) * ws[0].reshape(shp)
                return one(y, m)
            y = (x - mean) / np.sqrt(var + eps)
            i = 0
            if c.get("scale", True):
                y = y * ws[i].reshape(shp)
                i += 1
            if c.get("center", True):
                y = y + ws[i].reshape(shp)
            return one(y, m)
        if cls == "GroupNormalization":
            groups = c.get("groups", 32)
            axis = c.get("axis", -1) % x.ndim
            C = x.shape[axis]
            xs = np.moveaxis(x, axis, -1)
            g = xs.reshape(xs.shape[:-1] + (groups, C // groups))
            red = tuple(range(1, g.ndim - 2)) + (g.ndim - 1,)
            mean = g.mean(axis=red, keepdims=True)
            var = g.var(axis=red, keepdims=True)
            y = ((g - mean) / np.sqrt(var + c.get("epsilon", 1e-3))).reshape(xs.shape)
            i = 0
            if c.get("scale", True):
                y = y * ws[i]
                i += 1
            if c.get("center", True):
                y = y + ws[i]
            return one(np.moveaxis(y, -1, axis))
        if cls == "UnitNormalization":
            axis = c.get("axis", -1)
            axes = tuple(axis) if isinstance(axis, list) else axis
            return one(x / np.sqrt(np.maximum(np.sum(x * x, axis=axes, keepdims=True), 1e-12)))
        if cls == "ZeroPadding1D":
            p = c.get("padding", 1)
            p = (p, p) if isinstance(p, int) else tuple(p)
            return one(_pad_spatial(x, [p]))
        if cls == "ZeroPadding2D":
            p = c.get("padding", 1)
            if isinstance(p, int):
                p = [[p, p], [p, p]]
            p = [(a, a) if isinstance(a, int) else tuple(a) for a in p]
            return one(_pad_spatial(x, p))
        if cls in ("Cropping1D", "Cropping2D"):
            cr = c.get("cropping")
            n = x.ndim - 2
            if isinstance(cr, int):
                cr = [[cr, cr]] * n
            if n == 1 and isinstance(cr[0], int):
                cr = [cr]
            cr = [(a, a) if isinstance(a, int) else tuple(a) for a in cr]
            sl = [slice(None)] + [slice(a, x.shape[1 + i] - b) for i, (a, b) in enumerate(cr)] + [slice(None)]
            return one(x[tuple(sl)])
        if cls == "UpSampling1D":
            return one(np.repeat(x, c.get("size", 2), axis=1))
        if cls == "UpSampling2D":
            s = _tup(c.get("size", 2), 2)
            if c.get("interpolation", "nearest") == "bilinear":
                return one(resize_bilinear(x, x.shape[1] * s[0], x.shape[2] * s[1]))
            return one(np.repeat(np.repeat(x, s[0], axis=1), s[1], axis=2))
        if cls == "Flatten":
            return one(x.reshape(x.shape[0], -1))
        if cls == "Reshape":
            # tfjs writes a -1 entry of target_shape as null
            return one(x.reshape((x.shape[0],) + tuple(-1 if d is None else d for d in c["target_shape"])))
        if cls == "Permute":
            return one(np.transpose(x, [0] + list(c["dims"])))
        if cls == "RepeatVector":
            return one(np.repeat(x[:, None, :], c["n"], axis=1))
        if cls in ("Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum", "Concatenate", "Dot"):
            xs = x
            mask_out = None
            if cls == "Add":
                return one(sum(xs[1:], xs[0]))
            if cls == "Subtract":
                return one(xs[0] - xs[1])
            if cls == "Multiply":
                y = xs[0]
                for a in xs[1:]:
                    y = y * a
                return one(y)
            if cls == "Average":
                return one(sum(xs[1:], xs[0]) / len(xs))
            if cls == "Maximum":
                return one(np.maximum.reduce(xs))
            if cls == "Minimum":
                return one(np.minimum.reduce(xs))
            if cls == "Concatenate":
                return one(np.concatenate(xs, axis=c.get("axis", -1)), mask_out)
            a, b = xs
            axes = c["axes"]
            axes = [axes, axes] if isinstance(axes, int) else list(axes)
            axes = [ax % t.ndim for ax, t in zip(axes, (a, b))]
            if c.get("normalize", False):
                a = a / np.sqrt(np.maximum(np.sum(a * a, axis=axes[0], keepdims=True), 1e-12))
                b = b / np.sqrt(np.maximum(np.sum(b * b, axis=axes[1], keepdims=True), 1e-12))
            y = np.stack([np.tensordot(a[i], b[i], axes=(axes[0] - 1, axes[1] - 1)) for i in range(a.shape[0])])
            if y.ndim == 1:
                y = y[:, None]
            return one(y)
        if cls == "Activation":
            return one(activation(c["activation"], x, k), m)
        if cls == "ReLU":
            mv = c.get("max_value")
            ns = c.get("negative_slope", 0.0) or 0.0
            th = c.get("threshold", 0.0) or 0.0
            y = np.where(x >= th, x, ns * (x - th))
            if mv is not None:
                y = np.minimum(y, mv)
            return one(y, m)
        if cls == "LeakyReLU":
            a = c.get("negative_slope", c.get("alpha", 0.3))
            return one(np.where(x >= 0, x, a * x), m)
        if cls == "PReLU":
            return one(np.maximum(x, 0) + ws[0] * np.minimum(x, 0), m)
        if cls == "ELU":
            return one(_elu(x, c.get("alpha", 1.0)), m)
        if cls == "ThresholdedReLU":
            return one(np.where(x > c.get("theta", 1.0), x, 0.0), m)
        if cls == "Softmax":
            axis = c.get("axis", -1)
            mask = kwargs.get("mask")
            if mask is not None:
                x = x + (1.0 - np.asarray(mask, dtype=np.float64)) * -1e9
            return one(_softmax(x, axis), m)
        if cls == "Embedding":
            ids = np.asarray(x).astype(np.int64)
            y = ws[0][ids]
            return one(y, (ids != 0) if c.get("mask_zero") else None)
        if cls == "Masking":
            mv = c.get("mask_value", 0.0)
            keep = np.any(x != mv, axis=-1)
            return one(x * keep[..., None], keep)
        if cls in ("LSTM", "GRU", "SimpleRNN"):
            y, om = rnn_run(cls, c, ws, x, m, k, zero_output_for_mask=c.get("zero_output_for_mask", False))
            return one(y, om)
        if cls == "Bidirectional":
            fwd = c["layer"]
            bwd = c.get("backward_layer")
            if bwd is None:
                bwd = {"class_name": fwd["class_name"], "config": dict(fwd["config"], go_backwards=not fwd["config"].get("go_backwards", False))}
            nf = len(kzoo.var_specs(fwd))
            rs = fwd["config"].get("return_sequences", False)
            yf, _ = rnn_run(fwd["class_name"], fwd["config"], ws[:nf], x, m, k, zero_output_for_mask=rs)
            yb, _ = rnn_run(bwd["class_name"], bwd["config"], ws[nf:], x, m, k, zero_output_for_mask=rs)
            if rs:
                yb = yb[:, ::-1]
            mode = c.get("merge_mode", "concat")
            y = {"concat": lambda: np.concatenate([yf, yb], -1), "sum": lambda: yf + yb,
                 "ave": lambda: (yf + yb) / 2, "mul": lambda: yf * yb}[mode]()
            return one(y, m if rs else None)
        if cls == "TimeDistributed":
            inner = dict(c["layer"])
            inner["__weights__"] = e.get("__weights__", [])
            B, T = x.shape[:2]
            outs, _ = self.call_layer(inner, [x.reshape((B * T,) + x.shape[2:])], {}, [None])
            y = outs[0]
            return one(y.reshape((B, T) + y.shape[1:]), m)
        if cls in ("Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "GaussianNoise",
                   "GaussianDropout", "AlphaDropout", "ActivityRegularization", "RandomFlip", "RandomRotation",
                   "RandomZoom", "RandomContrast", "RandomTranslation", "RandomBrightness", "RandomCrop"):
            if cls == "RandomCrop":
                raise NotImplementedError("RandomCrop")
            return one(x, m)
        if cls == "Rescaling":
            scale = np.asarray(c.get("scale", 1.0), dtype=np.float64)
            offset = np.asarray(c.get("offset", 0.0), dtype=np.float64)
            return one(x * scale + offset)
        if cls == "Normalization":
            if c.get("mean") is not None:
                mean = np.asarray(c["mean"], dtype=np.float64)
                var = np.asarray(c["variance"], dtype=np.float64)
            else:
                mean, var = ws[0], ws[1]
            axis = c.get("axis", -1)
            axes = [axis] if isinstance(axis, int) else list(axis or [])
            shp = [1] * x.ndim
            for a in axes:
                shp[a % x.ndim] = x.shape[a % x.ndim]
            mean = np.broadcast_to(mean.reshape(-1), int(np.prod([shp[i] for i in range(x.ndim) if shp[i] != 1] or [1]))).reshape(shp) if mean.size > 1 else mean
            var = np.broadcast_to(var.reshape(-1), int(np.prod([shp[i] for i in range(x.ndim) if shp[i] != 1] or [1]))).reshape(shp) if var.size > 1 else var
            den = np.maximum(np.sqrt(var), 1e-7)
            if c.get("invert", False):
                return one(mean + x * den)
            return one((x - mean) / den)
        if cls == "Resizing":
            h, w = c["height"], c["width"]
            if c.get("crop_to_aspect_ratio") or c.get("pad_to_aspect_ratio"):
                raise NotImplementedError("Resizing crop/pad to aspect ratio")
            if x.shape[1] == h and x.shape[2] == w:
                return one(x)
            interp = c.get("interpolation", "bilinear")
            if interp == "bilinear":
                return one(resize_bilinear(x, h, w))
            if interp == "nearest":
                return one(resize_nearest(x, h, w))
            raise NotImplementedError(f"Resizing {interp}")
        if cls == "CenterCrop":
            h, w = c["height"], c["width"]
            H, W = x.shape[1], x.shape[2]
            if H < h or W < w:
                raise NotImplementedError("CenterCrop smaller than target")
            hs, wsd = (H - h) // 2, (W - w) // 2
            return one(x[:, hs:hs + h, wsd:wsd + w])
        if cls == "MultiHeadAttention":
            return one(self._mha(c, ws, args, kwargs))
        raise NotImplementedError(f"layer class {cls}")

    def _mha(self, c, ws, args, kwargs):
        names = ["query", "value", "key"]
        bound = dict(zip(names, args))
        bound.update({kk: v for kk, v in kwargs.items() if kk in ("query", "value", "key", "attention_mask")})
        q, v = bound["query"], bound["value"]
        kk = bound.get("key")
        kk = v if kk is None else kk
        mask = bound.get("attention_mask")
        if kwargs.get("use_causal_mask"):
            T, S = q.shape[1], v.shape[1]
            causal = np.tril(np.ones((T, S), dtype=bool))[None]
            mask = causal if mask is None else (np.asarray(mask) != 0) & causal
        ub = c.get("use_bias", True)
        i = 0

        def proj(x, eq):
            nonlocal i
            w = ws[i]
            i += 1
            y = np.einsum(eq, x, w)
            if ub:
                y = y + ws[i]
                i += 1
            return y
        qp = proj(q, "btd,dnh->btnh")
        kp = proj(kk, "bsd,dnh->bsnh")
        vp = proj(v, "bsd,dnh->bsnh")
        qp = qp * (1.0 / math.sqrt(float(c["key_dim"])))
        scores = np.einsum("bsnh,btnh->bnts", kp, qp)
        if mask is not None:
            mk = (np.asarray(mask) != 0).astype(np.float64)
            while mk.ndim < scores.ndim:
                mk = mk[:, None] if mk.ndim == 3 else mk[None]
            scores = scores + (1.0 - mk) * -1e9
        probs = _softmax(scores, -1)
        ctx = np.einsum("bnts,bsnh->btnh", probs, vp)
        w = ws[i]
        y = np.einsum("btnh,nhd->btd", ctx, w)
        if ub:
            y = y + ws[i + 1]
        return y


def run_file(path, inputs):
    cfg, major = kzoo.load_any(path)
    ex = Executor(major)
    outs, _ = ex.run_model(cfg, [np.asarray(a) for a in inputs])
    return outs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--input", action="append", default=[])
    ap.add_argument("--output", action="append", default=[])
    ap.add_argument("--compare", action="append", default=[],
                    help="reference .npy per output: exit 1 unless max|out-ref| <= 1e-4*max(1,max|ref|)")
    a = ap.parse_args(argv)
    outs = run_file(a.model, [np.load(p) for p in a.input])
    for p, o in zip(a.output, outs):
        kzoo.save_npy(p, o)
    bad = 0
    for i, (p, o) in enumerate(zip(a.compare, outs)):
        ok, err = kzoo.close_enough(o, np.load(p))
        print(f"output {i}: max abs err {err} {'ok' if ok else 'MISMATCH'}")
        bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
