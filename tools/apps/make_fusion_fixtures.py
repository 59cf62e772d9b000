#!/usr/bin/env python3
"""Writes tests/data/fusion/: models for the session's rewrites (runtime/fuse.c)
with their NumPy references (tools/apps/appgraph.py's executor).

    /usr/bin/python3 tools/apps/make_fusion_fixtures.py

identity_branch: conv -> Dropout -> {BatchNormalization -> ReLU, 1x1 conv}
-> Concatenate. The Dropout is absorbed into its input's slot; the
BatchNormalization must then not fold into the first convolution, whose
output the second one reads too (test_runtime's
test_identity_layers_absorbed). Deterministic: seeded input and weights.

conv_maxpool: three stem-sized convolutions (3 input channels) each read by
a max pooling alone: 3x3 relu then MaxPooling2D(2) on 37x41 (the pooling's
"valid" drops the last row and column: fused), 3x3 swish then
MaxPooling2D(2) (swish does not commute with max: not fused), 1x1 then
MaxPooling2D(3, strides=2) (overlapping windows: not fused); the first
pair's output goes on through a 16 -> 8 convolution and a max pooling
that oneDNN runs (test_runtime's test_maxpool_fused_in_stem).

rescale_conv: Rescaling(1/255) -> "same" 3x3 convolution (folded into its
kernel: the zeros it pads with stay zeros), then Rescaling(2, offset 1)
-> 1x1 convolution (an offset: not folded), and Rescaling(0.5) read by a
Dense and by the output (two readers: not folded)
(test_runtime's test_rescaling_folded).

dense_residual: 600 tokens of 32, layer-normalised, normalised again
through a Dense and Keras 3's ops add of the first normalisation (oneDNN's matmul in row parts, the
residual its sum post-op) and a Dense,
then flattened, two Dense layers on kerasc's own loop (one row an image)
and an Add layer and a ReLU (the loop adding the residual); both Adds
fused into their Dense
(test_runtime's test_dense_residual_fused).

upsample_conv: nearest UpSampling2D(2) -> 3x3 convolution pairs run as a
2x2 convolution on the upsampling's input (kernels/upconv.c): on a 6x5
image of 8 channels, "same" with a relu (6 filters: oneDNN), then over
its output upsampled again "valid" with one filter (kerasc's narrow
loop); not fused: a bilinear upsampling, one by 3, and one read by two
convolutions (test_runtime's test_upsample_conv_fused).

transpose_1d, transpose_2d, transpose_3d: transposed convolutions
(kernels/transpose.c: the taps' product as a 1x1 convolution, then the
gather by output rows; kernels/subpixel.c where the kernel is a multiple
of the stride): 1-D "same" stride 2 with a relu; 2-D 3x3 stride 2 "valid"
(overlapping taps), 2x2 stride 2 "same" with a relu (no overlap), 3x3
dilated by 2 "same", 4x4 stride 2 "same" relu (DCGAN's), (3, 2) strides
(1, 2) "valid" (the last two and the 2x2 on subpixel.c: 72 input
pixels); 3-D (2, 3, 2) strides (2, 1, 2) "same" (test_runtime's
test_conv_transpose).

transpose_bn: a DCGAN generator's block, Conv2DTranspose without bias ->
BatchNormalization -> ReLU: both folded into the transposed convolution
(its kernel's output channels are its second to last axis)
(test_runtime's test_conv_transpose_folds).

bn_forward: BatchNormalization after a convolution's relu (which cannot
take it) folded into the layer after it: through a max pooling and a
Dropout into a "valid" 3x3 convolution; through a global average pooling
into a Dense; through a Flatten into a Dense; with negative scales
through a global average pooling into a Dense. Not folded: negative
scales before a max pooling, a "same" convolution after (its padding
reads zeros), a max pooling also read as an output
(test_runtime's test_bn_folded_forward).

conv_gap_dense: one 7x7 image of 96 channels through three 1x1
convolutions, each read by a GlobalAveragePooling2D alone: 72 filters
with a relu, then a Dense of 37 with softmax (fused into the convolution:
kernels/pw_head.c; 72 channels end in half a vector); 80 filters without
bias, BatchNormalization and ReLU(6) (folded), then a Dropout and a
Dense of 19 without bias (fused, through the Dropout); 64 filters, its
pooling also an output of the model (not fused) (test_runtime's
test_head_fused).

transpose_alloc (the model alone): a Conv2DTranspose 64 -> 32 3x3 stride
2 on 32x32 images, whose product (1.2 MB) the old path allocated on
every run (tests/alloc/steady_state.sh).

mixed6a_alloc (the model alone): InceptionV3's Mixed_6a 3x3 stride-2
convolution over 288 channels onto 17x17, with 16 filters; kernels/pw.c
runs it in the runs of channels oneDNN sums it in (kernels/dnnl_order.c),
where on oneDNN it allocated on every run (tests/alloc/steady_state.sh).

resnet_stem: ResNet50's stem on two 45x39 images: ZeroPadding2D(3), a
7x7 stride-2 convolution of 64 filters, BatchNormalization and ReLU,
ZeroPadding2D(1), MaxPooling2D(3, strides=2) (the paddings folded, the
normalisation too; the convolution on kernels/stem.c's wide loop); and a
"same" 7x7 convolution of 24 filters with a relu then MaxPooling2D(2),
run inside it (test_runtime's test_resnet_stem).

transpose_dyn: a Conv2DTranspose 3x3 stride 2 "same" relu on images of
any size (test_runtime's test_conv_transpose_shapes: other sizes, an
empty one, then the first again).
"""
import os, sys
import numpy as np
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "tools", "apps"))
import appgraph, make_apps
out = os.path.join(ROOT, "tests/data/fusion")


def save_model(name, model):
    """name.keras alone (the fixtures "the model alone" above)."""
    appgraph.write_keras_zip(os.path.join(out, name + ".keras"), model, "3.6.0", libver=make_apps.LIBVER)


def save_fixture(name, model, data, outputs):
    """name.keras, name_input.npy and the expected outputs (name_expected.npy
    for one, name_expected_<i>.npy for several)."""
    save_model(name, model)
    np.save(os.path.join(out, name + "_input.npy"), data)
    for i, v in enumerate(outputs):
        suffix = "" if len(outputs) == 1 else "_%d" % i
        np.save(os.path.join(out, "%s_expected%s.npy" % (name, suffix)), np.asarray(v.value, dtype=np.float32))
        print(name, v.value.shape)


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
save_fixture("identity_branch", g.model(y), data, [y])

rng = np.random.default_rng(7)
data = rng.uniform(-1, 1, size=(2, 37, 41, 3)).astype(np.float32)
g = appgraph.Graph("conv_maxpool", 3, appgraph.Weights("tests/conv_maxpool"))
x = g.input((37, 41, 3), data)
c1 = g.layer("Conv2D", x, name="c1", filters=16, kernel_size=3, padding="same", activation="relu")
p1 = g.layer("MaxPooling2D", c1, name="p1", pool_size=2)
c4 = g.layer("Conv2D", p1, name="c4", filters=8, kernel_size=3, padding="same", activation="relu")
p4 = g.layer("MaxPooling2D", c4, name="p4", pool_size=2)
c2 = g.layer("Conv2D", x, name="c2", filters=16, kernel_size=3, activation="swish")
p2 = g.layer("MaxPooling2D", c2, name="p2", pool_size=2)
c3 = g.layer("Conv2D", x, name="c3", filters=16, kernel_size=1)
p3 = g.layer("MaxPooling2D", c3, name="p3", pool_size=3, strides=2)
save_fixture("conv_maxpool", g.model([p4, p2, p3]), data, [p4, p2, p3])

rng = np.random.default_rng(9)
data = rng.uniform(0, 255, size=(2, 9, 11, 3)).astype(np.float32)
g = appgraph.Graph("rescale_conv", 3, appgraph.Weights("tests/rescale_conv"))
x = g.input((9, 11, 3), data)
r1 = g.layer("Rescaling", x, name="r1", scale=1.0 / 255)
c1 = g.layer("Conv2D", r1, name="c1", filters=8, kernel_size=3, padding="same")
r2 = g.layer("Rescaling", c1, name="r2", scale=2.0, offset=1.0)
c2 = g.layer("Conv2D", r2, name="c2", filters=4, kernel_size=1)
r3 = g.layer("Rescaling", c2, name="r3", scale=0.5)
d = g.layer("Dense", r3, name="d", units=5)
save_fixture("rescale_conv", g.model([d, r3]), data, [d, r3])

rng = np.random.default_rng(11)
data = rng.uniform(-1, 1, size=(2, 600, 32)).astype(np.float32)
g = appgraph.Graph("dense_residual", 3, appgraph.Weights("tests/dense_residual"))
x = g.input((600, 32), data)
ln = g.layer("LayerNormalization", x, name="ln")
ln2 = g.layer("LayerNormalization", ln, name="ln2")
dt = g.layer("Dense", ln2, name="dt", units=32)
at = g.op("Add", ln, dt)
o1 = g.layer("Dense", at, name="o1", units=8)
flat = g.layer("Reshape", at, name="flat", target_shape=(600 * 32,))
d0 = g.layer("Dense", flat, name="d0", units=16)
half = g.op("Multiply", d0, 0.5)
dv = g.layer("Dense", half, name="dv", units=16)
av = g.layer("Add", [d0, dv], name="av")
rv = g.layer("Activation", av, name="rv", activation="relu")
save_fixture("dense_residual", g.model([o1, rv]), data, [o1, rv])

rng = np.random.default_rng(13)
data = rng.uniform(-1, 1, size=(2, 6, 5, 8)).astype(np.float32)
g = appgraph.Graph("upsample_conv", 3, appgraph.Weights("tests/upsample_conv"))
x = g.input((6, 5, 8), data)
u1 = g.layer("UpSampling2D", x, name="u1", size=2)
c1 = g.layer("Conv2D", u1, name="c1", filters=6, kernel_size=3, padding="same", activation="relu")
u2 = g.layer("UpSampling2D", c1, name="u2", size=(2, 2))
c2 = g.layer("Conv2D", u2, name="c2", filters=1, kernel_size=3)
u3 = g.layer("UpSampling2D", x, name="u3", size=2, interpolation="bilinear")
c3 = g.layer("Conv2D", u3, name="c3", filters=4, kernel_size=3, padding="same")
u4 = g.layer("UpSampling2D", x, name="u4", size=2)
c4 = g.layer("Conv2D", u4, name="c4", filters=4, kernel_size=3, padding="same")
c5 = g.layer("Conv2D", u4, name="c5", filters=4, kernel_size=1)
u5 = g.layer("UpSampling2D", x, name="u5", size=3)
c6 = g.layer("Conv2D", u5, name="c6", filters=4, kernel_size=3, padding="same")
save_fixture("upsample_conv", g.model([c2, c3, c4, c5, c6]), data, [c2, c3, c4, c5, c6])

rng = np.random.default_rng(17)
data = rng.uniform(-1, 1, size=(2, 7, 5)).astype(np.float32)
g = appgraph.Graph("transpose_1d", 3, appgraph.Weights("tests/transpose_1d"))
x = g.input((7, 5), data)
t = g.layer("Conv1DTranspose", x, name="t", filters=6, kernel_size=(3,), strides=(2,),
            dilation_rate=(1,), padding="same", activation="relu")
save_fixture("transpose_1d", g.model(t), data, [t])

data = rng.uniform(-1, 1, size=(2, 9, 8, 4)).astype(np.float32)
g = appgraph.Graph("transpose_2d", 3, appgraph.Weights("tests/transpose_2d"))
x = g.input((9, 8, 4), data)
t1 = g.layer("Conv2DTranspose", x, name="t1", filters=5, kernel_size=3, strides=2)
t2 = g.layer("Conv2DTranspose", x, name="t2", filters=3, kernel_size=2, strides=2, padding="same",
             activation="relu")
t3 = g.layer("Conv2DTranspose", x, name="t3", filters=4, kernel_size=3, dilation_rate=2,
             padding="same")
t4 = g.layer("Conv2DTranspose", x, name="t4", filters=6, kernel_size=4, strides=2, padding="same",
             activation="relu")
t5 = g.layer("Conv2DTranspose", x, name="t5", filters=3, kernel_size=(3, 2), strides=(1, 2))
save_fixture("transpose_2d", g.model([t1, t2, t3, t4, t5]), data, [t1, t2, t3, t4, t5])

data = rng.uniform(-1, 1, size=(1, 3, 4, 3, 2)).astype(np.float32)
g = appgraph.Graph("transpose_3d", 3, appgraph.Weights("tests/transpose_3d"))
x = g.input((3, 4, 3, 2), data)
t = g.layer("Conv3DTranspose", x, name="t", filters=3, kernel_size=(2, 3, 2), strides=(2, 1, 2),
            dilation_rate=(1, 1, 1), padding="same")
save_fixture("transpose_3d", g.model(t), data, [t])

data = rng.uniform(-1, 1, size=(2, 5, 6, 4)).astype(np.float32)
g = appgraph.Graph("transpose_bn", 3, appgraph.Weights("tests/transpose_bn"))
x = g.input((5, 6, 4), data)
t = g.layer("Conv2DTranspose", x, name="t", filters=6, kernel_size=3, strides=2, padding="same",
            use_bias=False)
b = g.layer("BatchNormalization", t, name="bn")
r = g.layer("Activation", b, name="act", activation="relu")
save_fixture("transpose_bn", g.model(r), data, [r])

data = rng.uniform(-1, 1, size=(2, 5, 3, 4)).astype(np.float32)
g = appgraph.Graph("transpose_dyn", 3, appgraph.Weights("tests/transpose_dyn"))
x = g.input((None, None, 4), data)
t = g.layer("Conv2DTranspose", x, name="t", filters=3, kernel_size=3, strides=2, padding="same",
            activation="relu")
save_fixture("transpose_dyn", g.model(t), data, [t])

data = rng.uniform(-1, 1, size=(1, 32, 32, 64)).astype(np.float32)
g = appgraph.Graph("transpose_alloc", 3, appgraph.Weights("tests/transpose_alloc"))
x = g.input((32, 32, 64), data)
t = g.layer("Conv2DTranspose", x, name="t", filters=32, kernel_size=3, strides=2, padding="same")
save_model("transpose_alloc", g.model(t))
print("transpose_alloc", t.value.shape)

rng = np.random.default_rng(23)
data = rng.uniform(-1, 1, size=(1, 35, 35, 288)).astype(np.float32)
g = appgraph.Graph("mixed6a_alloc", 3, appgraph.Weights("tests/mixed6a_alloc"))
x = g.input((35, 35, 288), data)
c = g.layer("Conv2D", x, name="c", filters=16, kernel_size=3, strides=2, activation="relu")
save_model("mixed6a_alloc", g.model(c))
print("mixed6a_alloc", c.value.shape)


class NegGamma(appgraph.Weights):
    """Some negative BatchNormalization scales for layers whose key starts
    with "neg" (the usual generator's are all in (0.8, 1.2))."""

    def uniform(self, key, var, shape, lo, hi):
        v = super().uniform(key, var, shape, lo, hi)
        if key.startswith("neg") and var == "gamma":
            v = v * np.where(np.arange(v.size).reshape(v.shape) % 3 == 1, -1.0, 1.0)
        return v


rng = np.random.default_rng(19)
data = rng.uniform(-1, 1, size=(2, 14, 13, 3)).astype(np.float32)
g = appgraph.Graph("bn_forward", 3, NegGamma("tests/bn_forward"))
x = g.input((14, 13, 3), data)
c1 = g.layer("Conv2D", x, name="c1", filters=8, kernel_size=3, padding="same", activation="relu")
b1 = g.layer("BatchNormalization", c1, name="b1")
p1 = g.layer("MaxPooling2D", b1, name="p1", pool_size=2)
dr = g.layer("Dropout", p1, name="dr", rate=0.3)
c2 = g.layer("Conv2D", dr, name="c2", filters=6, kernel_size=3, activation="relu")
b2 = g.layer("BatchNormalization", c2, name="b2")
g2 = g.layer("GlobalAveragePooling2D", b2, name="g2")
d2 = g.layer("Dense", g2, name="d2", units=5)
c3 = g.layer("Conv2D", x, name="c3", filters=6, kernel_size=3, padding="same", activation="relu")
b3 = g.layer("BatchNormalization", c3, name="neg3")
p3 = g.layer("MaxPooling2D", b3, name="p3", pool_size=2)
c4 = g.layer("Conv2D", p3, name="c4", filters=3, kernel_size=1)
b4 = g.layer("BatchNormalization", c3, name="neg4")
g4 = g.layer("GlobalAveragePooling2D", b4, name="g4")
d4 = g.layer("Dense", g4, name="d4", units=2)
c5 = g.layer("Conv2D", x, name="c5", filters=4, kernel_size=3, activation="relu")
b5 = g.layer("BatchNormalization", c5, name="b5")
c6 = g.layer("Conv2D", b5, name="c6", filters=3, kernel_size=3, padding="same")
c7 = g.layer("Conv2D", x, name="c7", filters=4, kernel_size=3, strides=2, activation="relu")
b7 = g.layer("BatchNormalization", c7, name="b7")
f7 = g.layer("Flatten", b7, name="f7")
d7 = g.layer("Dense", f7, name="d7", units=3, use_bias=False)
c9 = g.layer("Conv2D", x, name="c9", filters=4, kernel_size=1, activation="relu")
b9 = g.layer("BatchNormalization", c9, name="b9")
p9 = g.layer("MaxPooling2D", b9, name="p9", pool_size=2)
c10 = g.layer("Conv2D", p9, name="c10", filters=2, kernel_size=1)
outs = [c2, d2, c4, d4, c6, d7, c10, p9]
save_fixture("bn_forward", g.model(outs), data, outs)

rng = np.random.default_rng(17)
data = rng.uniform(-1, 1, size=(1, 7, 7, 96)).astype(np.float32)
g = appgraph.Graph("conv_gap_dense", 3, appgraph.Weights("tests/conv_gap_dense"))
x = g.input((7, 7, 96), data)
c1 = g.layer("Conv2D", x, name="c1", filters=72, kernel_size=1, activation="relu")
g1 = g.layer("GlobalAveragePooling2D", c1, name="g1")
d1 = g.layer("Dense", g1, name="d1", units=37, activation="softmax")
c2 = g.layer("Conv2D", x, name="c2", filters=80, kernel_size=1, use_bias=False)
b2 = g.layer("BatchNormalization", c2, name="b2")
r2 = g.layer("ReLU", b2, name="r2", max_value=6.0)
g2 = g.layer("GlobalAveragePooling2D", r2, name="g2")
o2 = g.layer("Dropout", g2, name="o2", rate=0.2)
d2 = g.layer("Dense", o2, name="d2", units=19, use_bias=False)
c3 = g.layer("Conv2D", x, name="c3", filters=64, kernel_size=1)
g3 = g.layer("GlobalAveragePooling2D", c3, name="g3")
d3 = g.layer("Dense", g3, name="d3", units=5)
outs = [d1, d2, d3, g3]
save_fixture("conv_gap_dense", g.model(outs), data, outs)

rng = np.random.default_rng(19)
data = rng.uniform(-1, 1, size=(2, 45, 39, 3)).astype(np.float32)
g = appgraph.Graph("resnet_stem", 3, appgraph.Weights("tests/resnet_stem"))
x = g.input((45, 39, 3), data)
z1 = g.layer("ZeroPadding2D", x, name="conv1_pad", padding=[[3, 3], [3, 3]])
c1 = g.layer("Conv2D", z1, name="conv1_conv", filters=64, kernel_size=7, strides=2)
b1 = g.layer("BatchNormalization", c1, name="conv1_bn", epsilon=1.001e-5)
r1 = g.layer("Activation", b1, name="conv1_relu", activation="relu")
z2 = g.layer("ZeroPadding2D", r1, name="pool1_pad", padding=[[1, 1], [1, 1]])
p1 = g.layer("MaxPooling2D", z2, name="pool1_pool", pool_size=3, strides=2)
c2 = g.layer("Conv2D", x, name="c2", filters=24, kernel_size=7, padding="same", activation="relu")
p2 = g.layer("MaxPooling2D", c2, name="p2", pool_size=2)
save_fixture("resnet_stem", g.model([p1, p2]), data, [p1, p2])
