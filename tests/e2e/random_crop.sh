#!/usr/bin/env bash
# RandomCrop at inference (Keras: "resized and cropped so as to return the
# largest possible window in the image that matches the target aspect
# ratio"), checked against that rule written here in NumPy: a centred
# aspect-ratio crop, then tf.image.resize bilinear (half-pixel centres).
source "$(dirname "$0")/lib.bash"
PY=/usr/bin/python3
T=${KC_TEST_TMP:-/tmp}/randcrop.$$
mkdir -p "$T"
trap 'rm -rf "$T"' EXIT
$PY - "$T" <<'PY'
import json, sys
import h5py, numpy as np
out = sys.argv[1]
cfg = {"class_name": "Sequential", "config": {"name": "s", "layers": [
    {"class_name": "InputLayer", "config": {"name": "img", "batch_input_shape": [None, 6, 9, 2]}},
    {"class_name": "RandomCrop", "config": {"name": "rc", "height": 4, "width": 4}}]}}
with h5py.File(f"{out}/m.h5", "w") as f:
    f.attrs["model_config"] = json.dumps(cfg).encode()
    f.attrs["keras_version"] = "2.15.0"
    mw = f.create_group("model_weights")
    mw.attrs["layer_names"] = np.array([b"rc"])
    mw.create_group("rc").attrs["weight_names"] = np.array([], dtype="S1")
x = np.random.default_rng(5).standard_normal((2, 6, 9, 2)).astype("f4")
np.save(f"{out}/x.npy", x)
def resize(img, oh, ow):  # tf.image.resize bilinear, half-pixel centres
    ih, iw = img.shape[:2]
    def axis(o, i):
        s = (np.arange(o) + 0.5) * i / o - 0.5
        s = np.clip(s, 0, None)
        lo = np.minimum(np.floor(s).astype(int), i - 1)
        hi = np.minimum(lo + 1, i - 1)
        return lo, hi, s - lo
    y0, y1, ty = axis(oh, ih)
    x0, x1, tx = axis(ow, iw)
    top = img[y0][:, x0] * (1 - tx)[None, :, None] + img[y0][:, x1] * tx[None, :, None]
    bot = img[y1][:, x0] * (1 - tx)[None, :, None] + img[y1][:, x1] * tx[None, :, None]
    return top * (1 - ty)[:, None, None] + bot * ty[:, None, None]
h, w = 6, 9
ch, cw = (h, int(h * 4 / 4)) if w / h > 1 else (int(w * 4 / 4), w)
y, xo = (h - ch) // 2, (w - cw) // 2
want = np.stack([resize(im[y:y + ch, xo:xo + cw].astype("f8"), 4, 4) for im in x])
np.save(f"{out}/want.npy", want.astype("f4"))
PY
if "$KERASC" run "$T/m.h5" --input "$T/x.npy" --output "$T/got.npy"; then
  if $PY -c "
import numpy as np, sys
a = np.load('$T/got.npy'); b = np.load('$T/want.npy'); d = np.abs(a - b).max()
print('max diff', d); sys.exit(0 if a.shape == b.shape and d <= 1e-5 else 1)"; then
    pass "RandomCrop at inference = centred aspect crop + bilinear resize"
  else
    fail "RandomCrop differs from Keras's inference rule"
  fi
else
  fail "kerasc run failed"
fi
finish
