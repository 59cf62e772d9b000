#!/usr/bin/env python3
"""Reference outputs for the real models in /work/shared/models/real and nsfwjs.

    /usr/bin/python3 tools/zoo/make_real_refs.py [NAME ...]

For each code-free real model (the two Lambda models are skipped: they hold
Python bytecode): deterministic inputs, then
  1. tools/zoo/keras_to_tfjs.py converts the file to a tfjs layers model in a
     temporary directory and tools/oracle/run_tfjs.js computes the outputs
     (oracle "tfjs"), and
  2. tools/zoo/numpy_ref.py computes them from the original file.
Where tfjs can run the model its outputs are the reference and NumPy must
agree within 1e-4*max(1,max|ref|); where tfjs cannot (unknown layer class or
an option tfjs lacks) the NumPy result is the reference (oracle "numpy").
Writes tests/real_refs/<file>/{input_*.npy, expected_*.npy, meta.json}.

nsfwjs: tests/real_refs/nsfwjs_{mobilenet_v2,inception_v3}/ from the
JS-wrapped models in tools/node_modules/nsfwjs (tfjs only).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import keras_to_tfjs  # noqa: E402
import kzoo  # noqa: E402
import numpy_ref  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
REAL = os.environ.get("KERASC_REAL_MODELS", "/work/shared/models/real")
OUT = os.path.join(ROOT, "tests", "real_refs")
RUN_TFJS = os.path.join(ROOT, "tools", "oracle", "run_tfjs.js")
NSFW = os.path.join(ROOT, "tools", "node_modules", "nsfwjs", "dist", "models")

SKIPPED = {
    "bc_nvidia_lambda_k111.h5": "Lambda layer with Keras 1 marshalled Python bytecode (refusal test)",
    "siamese_embed_lambda_k3100.keras": "Lambda layer with Keras 3 __lambda__ bytecode (refusal test)",
}


def f32(name, i, shape, lo, hi):
    u = kzoo.Lcg(kzoo.fnv1a(f"{name}/input_{i}")).u01(int(np.prod(shape)))
    return (lo + (hi - lo) * u).reshape(shape).astype(np.float32)


def tokens(name, i, shape, lo, hi, pad_tail=None):
    u = kzoo.Lcg(kzoo.fnv1a(f"{name}/input_{i}")).u01(int(np.prod(shape)))
    t = (lo + np.floor(u * (hi - lo))).astype(np.int32).reshape(shape)
    if pad_tail:
        for row, n in pad_tail.items():
            t[row, t.shape[1] - n:] = 0
    return t


def onehot(name, i, shape):
    b, t, v = shape
    idx = tokens(name, i, (b, t), 0, v)
    out = np.zeros(shape, np.float32)
    for bi in range(b):
        for ti in range(t):
            out[bi, ti, idx[bi, ti]] = 1.0
    return out


def vocab(path, layer_class="Embedding"):
    cfg, _ = kzoo.load_any(path)
    found = []

    def rec(m):
        for e in kzoo.model_layers(m):
            if kzoo.is_model(e):
                rec(e)
            elif e["class_name"] == layer_class:
                found.append(e["config"]["input_dim"])
    rec(cfg)
    return found[0]


# file -> (input builder(name, path) -> list of arrays, note)
def _inputs(name, path):
    v = None
    if name.startswith(("intent", "ner")):
        v = vocab(path)
    table = {
        "age_gender_multiout_k341.keras": lambda: [f32(name, 0, (2, 128, 128, 3), 0, 1)],
        "arabic_lstm_k222.h5": lambda: [f32(name, 0, (2, 1, 200), 0, 1)],
        "btc_gru_k3122.keras": lambda: [f32(name, 0, (2, 60, 9), 0, 1)],
        "charlm_two_input_tf2100.h5": lambda: [onehot(name, 0, (2, 15, 80)), onehot(name, 1, (2, 15, 80))],
        "cnn1d_lstm_tf2131.h5": lambda: [f32(name, 0, (2, 10, 1), 0, 1)],
        "cnn_bn_gap_k360.keras": lambda: [f32(name, 0, (2, 128, 128, 3), 0, 1)],
        "denoise_ae_upsample_k380.keras": lambda: [f32(name, 0, (1, 540, 540, 1), 0, 1)],
        "gan_generator_convT_tf2131.keras": lambda: [f32(name, 0, (2, 50), -1, 1)],
        "hitsong_mlp_tf2140.keras": lambda: [f32(name, 0, (2, 15), -1, 1)],
        "intent_lstm_embed_k3131.keras": lambda: [tokens(name, 0, (2, 25), 0, v)],
        "intent_lstm_embed_k321.h5": lambda: [tokens(name, 0, (2, 18), 0, v, pad_tail={1: 5})],
        "mnist_cnn_bn_dropout_k3132.keras": lambda: [f32(name, 0, (2, 28, 28, 1), 0, 1)],
        "mnist_cnn_k231.h5": lambda: [f32(name, 0, (2, 28, 28, 1), 0, 1)],
        "ner_bilstm_embed_tf2150.keras": lambda: [tokens(name, 0, (2, 34), 1, v)],
        "potato_preproc_aug_k333.keras": lambda: [f32(name, 0, (1, 256, 256, 3), 0, 255)],
        "quora_bilstm_tf2110.h5": lambda: [f32(name, 0, (2, 222, 1), 0, 1)],
        "seizure_conv1d_k392.keras": lambda: [f32(name, 0, (2, 178, 1), -1.2, 1.2)],
        "tm_mobilenetv2_hdf5_as_keras_k240.keras": lambda: [f32(name, 0, (1, 224, 224, 3), -1, 1)],
    }
    return table[name]()


NOTES = {
    "intent_lstm_embed_k3131.keras": "token ids in [0, vocab) (Embedding mask_zero=False); model InputLayer dtype is float32, ids are exact in either dtype",
    "intent_lstm_embed_k321.h5": "token ids in [0, vocab) with Embedding mask_zero=True: zeros inside sample 0 and a 5-step zero tail on sample 1 are masked steps (LSTM keeps its state)",
    "ner_bilstm_embed_tf2150.keras": "token ids in [1, vocab): no padding zeros, because with mask_zero=True a Bidirectional(return_sequences) outputs zeros at masked steps in Keras (zero_output_for_mask) but not in tfjs",
    "potato_preproc_aug_k333.keras": "batch 1 although the InputLayer says batch 32 (a 32x256x256x3 input would be 25 MB); Keras' Functional input spec ignores the batch size. Resizing(256,256) on a 256x256 input is the identity; RandomFlip/RandomRotation are the identity at inference",
    "denoise_ae_upsample_k380.keras": "batch 1 (540x540 input)",
    "tm_mobilenetv2_hdf5_as_keras_k240.keras": "batch 1; HDF5 file with a .keras name; input in [-1, 1]",
    "charlm_two_input_tf2100.h5": "two one-hot (15, 80) inputs",
    "btc_gru_k3122.keras": "GRU reset_after=True: tfjs-layers cannot build it, NumPy is the reference",
    "seizure_conv1d_k392.keras": "input in [-1.2, 1.2]: the sigmoid output is very steep in the input scale; this range gives 0.10 and 0.57 (not saturated)",
}


def run_tfjs(model, inputs, n_out, tmp):
    ins = []
    for i, a in enumerate(inputs):
        p = os.path.join(tmp, f"in{i}.npy")
        np.save(p, a)
        ins += ["--input", p]
    outs = []
    for i in range(n_out):
        outs += ["--output", os.path.join(tmp, f"out{i}.npy")]
    r = subprocess.run(["node", RUN_TFJS, model] + ins + outs, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "run_tfjs failed")
    return [np.load(os.path.join(tmp, f"out{i}.npy")) for i in range(n_out)]


def write_ref(name, inputs, outs, meta):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for i, a in enumerate(inputs):
        np.save(os.path.join(d, f"input_{i}.npy"), a)
    for i, o in enumerate(outs):
        kzoo.save_npy(os.path.join(d, f"expected_{i}.npy"), o)
    meta["inputs"] = [{"file": f"input_{i}.npy", "dtype": str(a.dtype), "shape": list(a.shape)} for i, a in enumerate(inputs)]
    meta["outputs"] = [{"file": f"expected_{i}.npy", "dtype": "float32", "shape": list(np.shape(o))} for i, o in enumerate(outs)]
    meta["tolerance"] = "max|kerasc - expected| <= 1e-4 * max(1, max|expected|)"
    with open(os.path.join(d, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.write("\n")


def real_model(name):
    path = os.path.join(REAL, name)
    inputs = _inputs(name, path)
    meta = {"model": f"/work/shared/models/real/{name}", "note": NOTES.get(name, "")}
    np_outs, np_err = None, None
    try:
        np_outs = [np.asarray(o, dtype=np.float32) for o in numpy_ref.run_file(path, inputs)]
    except Exception as e:  # noqa: BLE001
        np_err = f"{type(e).__name__}: {e}"
    tf_outs, tf_err = None, None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            mj = keras_to_tfjs.convert(path, os.path.join(tmp, "tfjs"), example_inputs=inputs)
            n_out = len(np_outs) if np_outs is not None else 1
            tf_outs = run_tfjs(mj, inputs, n_out, tmp)
        except Exception as e:  # noqa: BLE001
            tf_err = f"{type(e).__name__}: {e}"
    if tf_outs is not None:
        meta["oracle"] = "tfjs"
        if keras_to_tfjs.REWRITES:
            meta["tfjs_conversion_rewrites"] = list(keras_to_tfjs.REWRITES)
        outs = tf_outs
        if np_outs is None:
            meta["numpy_crosscheck"] = f"failed: {np_err}"
        else:
            errs = []
            for o, r in zip(np_outs, tf_outs):
                ok, err = kzoo.close_enough(o, r)
                if not ok:
                    raise ValueError(f"{name}: NumPy and tfjs disagree ({err})")
                errs.append(err)
            scale = max(1.0, max(float(np.max(np.abs(r))) for r in tf_outs))
            meta["numpy_crosscheck"] = f"agrees: max abs diff {max(errs):.2e} (tolerance {1e-4 * scale:.2e})"
    elif np_outs is not None:
        meta["oracle"] = "numpy"
        meta["tfjs_failure"] = tf_err
        outs = np_outs
    else:
        raise RuntimeError(f"{name}: no oracle can run it (tfjs: {tf_err}; numpy: {np_err})")
    write_ref(name, inputs, outs, meta)
    return meta


def nsfwjs(which, size):
    name = f"nsfwjs_{which}"
    x = f32(name, 0, (1, size, size, 3), -1, 1)
    with tempfile.TemporaryDirectory() as tmp:
        outs = run_tfjs(os.path.join(NSFW, which, "model.min.js"), [x], 1, tmp)
    meta = {"model": f"tools/node_modules/nsfwjs/dist/models/{which}/model.min.js", "oracle": "tfjs",
            "note": "JS-wrapped tfjs model with uint8-quantized weights (npm nsfwjs 4.4.0); input in [-1, 1]"}
    write_ref(name, [x], outs, meta)
    return meta


def main(argv):
    names = set(argv)
    os.makedirs(OUT, exist_ok=True)
    models = sorted(n for n in os.listdir(REAL) if n.endswith((".keras", ".h5")))
    for n in models:
        if (names and n not in names) or n in SKIPPED:
            continue
        m = real_model(n)
        print(f"{n}: oracle {m['oracle']} {m.get('numpy_crosscheck', '')}{m.get('tfjs_failure', '')} "
              f"outputs {[o['shape'] for o in m['outputs']]}")
    for which, size in (("mobilenet_v2", 224), ("inception_v3", 299)):
        if names and f"nsfwjs_{which}" not in names:
            continue
        m = nsfwjs(which, size)
        print(f"nsfwjs_{which}: oracle tfjs outputs {[o['shape'] for o in m['outputs']]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
