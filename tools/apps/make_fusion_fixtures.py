#!/usr/bin/env python3
"""Writes tests/data/fusion/: models for the session's rewrites (runtime/fuse.c)
with their NumPy references (tools/apps/appgraph.py's executor).

    /usr/bin/python3 tools/apps/make_fusion_fixtures.py

identity_branch: conv -> Dropout -> {BatchNormalization -> ReLU, 1x1 conv}
-> Concatenate. The Dropout is absorbed into its input's slot; the
BatchNormalization must then not fold into the first convolution, whose
output the second one reads too (test_runtime's
test_identity_layers_absorbed). Deterministic: seeded input and weights.
"""
import os, sys
import numpy as np
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "tools", "apps"))
import appgraph, make_apps
rng = np.random.default_rng(5)
data = rng.uniform(-1, 1, size=(2, 6, 6, 3)).astype(np.float32)
g = appgraph.Graph("identity_branch", 3, appgraph.Weights("tests/identity_branch"))
x = g.input((6, 6, 3), data)
c = g.layer("Conv2D", x, name="conv", filters=8, kernel_size=3, padding="same")
d = g.layer("Dropout", c, name="drop", rate=0.5)
b = g.layer("BatchNormalization", d, name="bn")
a = g.layer("Activation", b, name="act", activation="relu")
s = g.layer("Conv2D", d, name="side", filters=4, kernel_size=1)
y = g.layer("Concatenate", [a, s], name="cat", axis=-1)
k3 = g.model(y)
out = os.path.join(ROOT, "tests/data/fusion")
appgraph.write_keras_zip(os.path.join(out, "identity_branch.keras"), k3, "3.6.0", libver=make_apps.LIBVER)
np.save(os.path.join(out, "identity_branch_input.npy"), data)
np.save(os.path.join(out, "identity_branch_expected.npy"), np.asarray(y.value, dtype=np.float32))
print(y.value.shape)
