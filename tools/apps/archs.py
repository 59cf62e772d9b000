"""keras.applications architectures, transcribed from the Keras sources.

Each function mirrors the Keras 3 definition (keras/src/applications/<file>.py
at keras-team/keras) call by call: same layer classes, arguments, names and
order; for flavour 2 (tf.keras, the legacy .h5) the tf-keras definition
(tf_keras/applications/<file>.py) where it differs: MobileNetV3's layer names
('Conv/BatchNorm', 'expanded_conv/squeeze_excite/Conv', ...) and its
hard_swish (Multiply()([x, hard_sigmoid(x)]) instead of
Activation('hard_swish')); raw tensor ops become TFOpLambda layers there.

Width knobs (to keep tests/apps small, see tools/apps/README.md): MobileNets
take their ``alpha``; EfficientNet its ``width_coefficient``; NASNet its
``penultimate_filters`` / ``stem_block_filters`` (NASNet() arguments);
ResNet50, InceptionV3, Xception, DenseNet121 and ConvNeXtTiny have fixed
widths in Keras, so every channel count is multiplied by ``width`` (a
documented deviation; topology, depth, kernel sizes, strides, names unchanged).

``b`` is an appgraph.Graph; ``data`` the input batch (N, H, W, 3).
"""

import math

from appgraph import EFF_CONV_INIT, EFF_DENSE_INIT, HE_NORMAL

HEAD_STD = 2.0  # std of the classifier logits on the test batch


def _scale(width):
    return lambda n: max(1, int(round(n * width)))


def correct_pad(t, kernel_size):
    """imagenet_utils.correct_pad (channels_last)."""
    h, w = t.shape[1], t.shape[2]
    k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    adjust = (1 - h % 2, 1 - w % 2)
    correct = (k[0] // 2, k[1] // 2)
    return ((correct[0] - adjust[0], correct[0]), (correct[1] - adjust[1], correct[1]))


def _make_divisible(v, divisor=8, min_value=None):
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


# ---------------------------------------------------------------------------
# ResNet50 (resnet.py: ResNet, residual_block_v1, stack_residual_blocks_v1)


def resnet50(b, data, width=1.0, classes=1000):
    f = _scale(width)
    img = b.input(data.shape[1:], data)
    x = b.layer("ZeroPadding2D", img, padding=((3, 3), (3, 3)), name="conv1_pad")
    x = b.layer("Conv2D", x, filters=f(64), kernel_size=7, strides=2, use_bias=True, name="conv1_conv")
    x = b.layer("BatchNormalization", x, axis=3, epsilon=1.001e-5, name="conv1_bn")
    x = b.layer("Activation", x, activation="relu", name="conv1_relu")
    x = b.layer("ZeroPadding2D", x, padding=((1, 1), (1, 1)), name="pool1_pad")
    x = b.layer("MaxPooling2D", x, pool_size=3, strides=2, name="pool1_pool")

    def block(x, filters, stride=1, conv_shortcut=True, name=None):
        if conv_shortcut:
            s = b.layer("Conv2D", x, filters=4 * filters, kernel_size=1, strides=stride, name=name + "_0_conv")
            s = b.layer("BatchNormalization", s, axis=3, epsilon=1.001e-5, name=name + "_0_bn")
        else:
            s = x
        x = b.layer("Conv2D", x, filters=filters, kernel_size=1, strides=stride, name=name + "_1_conv")
        x = b.layer("BatchNormalization", x, axis=3, epsilon=1.001e-5, name=name + "_1_bn")
        x = b.layer("Activation", x, activation="relu", name=name + "_1_relu")
        x = b.layer("Conv2D", x, filters=filters, kernel_size=3, padding="SAME", name=name + "_2_conv")
        x = b.layer("BatchNormalization", x, axis=3, epsilon=1.001e-5, name=name + "_2_bn")
        x = b.layer("Activation", x, activation="relu", name=name + "_2_relu")
        x = b.layer("Conv2D", x, filters=4 * filters, kernel_size=1, name=name + "_3_conv")
        x = b.layer("BatchNormalization", x, axis=3, epsilon=1.001e-5, name=name + "_3_bn")
        x = b.layer("Add", [s, x], name=name + "_add")
        return b.layer("Activation", x, activation="relu", name=name + "_out")

    def stack(x, filters, blocks, stride1=2, name=None):
        x = block(x, filters, stride=stride1, name=name + "_block1")
        for i in range(2, blocks + 1):
            x = block(x, filters, conv_shortcut=False, name=name + "_block" + str(i))
        return x

    x = stack(x, f(64), 3, stride1=1, name="conv2")
    x = stack(x, f(128), 4, name="conv3")
    x = stack(x, f(256), 6, name="conv4")
    x = stack(x, f(512), 3, name="conv5")
    x = b.layer("GlobalAveragePooling2D", x, name="avg_pool")
    return b.layer("Dense", x, units=classes, activation="softmax", name="predictions", calibrate_std=HEAD_STD)


# ---------------------------------------------------------------------------
# MobileNetV2 (mobilenet_v2.py)


def mobilenet_v2(b, data, alpha=1.0, classes=1000):
    img = b.input(data.shape[1:], data)
    first = _make_divisible(32 * alpha, 8)
    x = b.layer("Conv2D", img, filters=first, kernel_size=3, strides=(2, 2), padding="same", use_bias=False,
                name="Conv1")
    x = b.layer("BatchNormalization", x, axis=-1, epsilon=1e-3, momentum=0.999, name="bn_Conv1")
    x = b.layer("ReLU", x, max_value=6.0, name="Conv1_relu")

    def block(inputs, expansion, stride, filters, block_id):
        in_channels = inputs.shape[-1]
        pointwise_filters = _make_divisible(int(filters * alpha), 8)
        x = inputs
        prefix = f"block_{block_id}_"
        if block_id:
            x = b.layer("Conv2D", x, filters=expansion * in_channels, kernel_size=1, padding="same",
                        use_bias=False, activation=None, name=f"{prefix}expand")
            x = b.layer("BatchNormalization", x, axis=-1, epsilon=1e-3, momentum=0.999, name=f"{prefix}expand_BN")
            x = b.layer("ReLU", x, max_value=6.0, name=f"{prefix}expand_relu")
        else:
            prefix = "expanded_conv_"
        if stride == 2:
            x = b.layer("ZeroPadding2D", x, padding=correct_pad(x, 3), name=f"{prefix}pad")
        x = b.layer("DepthwiseConv2D", x, kernel_size=3, strides=stride, activation=None, use_bias=False,
                    padding="same" if stride == 1 else "valid", name=f"{prefix}depthwise")
        x = b.layer("BatchNormalization", x, axis=-1, epsilon=1e-3, momentum=0.999, name=f"{prefix}depthwise_BN")
        x = b.layer("ReLU", x, max_value=6.0, name=f"{prefix}depthwise_relu")
        x = b.layer("Conv2D", x, filters=pointwise_filters, kernel_size=1, padding="same", use_bias=False,
                    activation=None, name=f"{prefix}project")
        x = b.layer("BatchNormalization", x, axis=-1, epsilon=1e-3, momentum=0.999, name=f"{prefix}project_BN")
        if in_channels == pointwise_filters and stride == 1:
            return b.layer("Add", [inputs, x], name=f"{prefix}add")
        return x

    for filters, stride, expansion, bid in (
            (16, 1, 1, 0), (24, 2, 6, 1), (24, 1, 6, 2), (32, 2, 6, 3), (32, 1, 6, 4), (32, 1, 6, 5),
            (64, 2, 6, 6), (64, 1, 6, 7), (64, 1, 6, 8), (64, 1, 6, 9), (96, 1, 6, 10), (96, 1, 6, 11),
            (96, 1, 6, 12), (160, 2, 6, 13), (160, 1, 6, 14), (160, 1, 6, 15), (320, 1, 6, 16)):
        x = block(x, expansion, stride, filters, bid)
    last = _make_divisible(1280 * alpha, 8) if alpha > 1.0 else 1280
    x = b.layer("Conv2D", x, filters=last, kernel_size=1, use_bias=False, name="Conv_1")
    x = b.layer("BatchNormalization", x, axis=-1, epsilon=1e-3, momentum=0.999, name="Conv_1_bn")
    x = b.layer("ReLU", x, max_value=6.0, name="out_relu")
    x = b.layer("GlobalAveragePooling2D", x)
    return b.layer("Dense", x, units=classes, activation="softmax", name="predictions", calibrate_std=HEAD_STD)


def mobilenet_v2_name(alpha, rows):
    return f"mobilenetv2_{alpha:0.2f}_{rows}"


# ---------------------------------------------------------------------------
# MobileNetV3Small (mobilenet_v3.py; tf-keras names for flavour 2)


def mobilenet_v3_small(b, data, alpha=1.0, classes=1000, dropout_rate=0.2):
    k2 = b.flavour == 2

    def nm(k3name, k2name):
        return k2name if k2 else k3name

    def depth(v, divisor=8, min_value=None):
        return _make_divisible(v, divisor, min_value)

    def relu(x):
        return b.layer("ReLU", x)

    def hard_sigmoid(x):
        return b.op("Multiply", b.layer("ReLU", b.op("Add", x, 3.0), max_value=6.0), 1.0 / 6.0)

    def hard_swish(x):
        if k2:
            return b.layer("Multiply", [x, hard_sigmoid(x)])
        return b.layer("Activation", x, activation="hard_swish")

    def se_block(inputs, filters, se_ratio, p3, p2):
        x = b.layer("GlobalAveragePooling2D", inputs, keepdims=True,
                    name=nm(p3 + "squeeze_excite_avg_pool", p2 + "squeeze_excite/AvgPool"))
        x = b.layer("Conv2D", x, filters=depth(filters * se_ratio), kernel_size=1, padding="same",
                    name=nm(p3 + "squeeze_excite_conv", p2 + "squeeze_excite/Conv"),
                    wkey=p3 + "squeeze_excite_conv")
        x = b.layer("ReLU", x, name=nm(p3 + "squeeze_excite_relu", p2 + "squeeze_excite/Relu"))
        x = b.layer("Conv2D", x, filters=filters, kernel_size=1, padding="same",
                    name=nm(p3 + "squeeze_excite_conv_1", p2 + "squeeze_excite/Conv_1"),
                    wkey=p3 + "squeeze_excite_conv_1")
        x = hard_sigmoid(x)
        return b.layer("Multiply", [inputs, x], name=nm(p3 + "squeeze_excite_mul", p2 + "squeeze_excite/Mul"))

    def block(x, expansion, filters, kernel_size, stride, se_ratio, activation, block_id):
        shortcut = x
        p3, p2 = "expanded_conv_", "expanded_conv/"
        infilters = x.shape[-1]
        if block_id:
            p3, p2 = f"expanded_conv_{block_id}_", f"expanded_conv_{block_id}/"
            x = b.layer("Conv2D", x, filters=depth(infilters * expansion), kernel_size=1, padding="same",
                        use_bias=False, name=nm(p3 + "expand", p2 + "expand"), wkey=p3 + "expand")
            x = b.layer("BatchNormalization", x, axis=-1, epsilon=1e-3, momentum=0.999,
                        name=nm(p3 + "expand_bn", p2 + "expand/BatchNorm"), wkey=p3 + "expand_bn")
            x = activation(x)
        if stride == 2:
            x = b.layer("ZeroPadding2D", x, padding=correct_pad(x, kernel_size),
                        name=nm(p3 + "depthwise_pad", p2 + "depthwise/pad"))
        x = b.layer("DepthwiseConv2D", x, kernel_size=kernel_size, strides=stride,
                    padding="same" if stride == 1 else "valid", use_bias=False,
                    name=nm(p3 + "depthwise", p2 + "depthwise"), wkey=p3 + "depthwise")
        x = b.layer("BatchNormalization", x, axis=-1, epsilon=1e-3, momentum=0.999,
                    name=nm(p3 + "depthwise_bn", p2 + "depthwise/BatchNorm"), wkey=p3 + "depthwise_bn")
        x = activation(x)
        if se_ratio:
            x = se_block(x, depth(infilters * expansion), se_ratio, p3, p2)
        x = b.layer("Conv2D", x, filters=filters, kernel_size=1, padding="same", use_bias=False,
                    name=nm(p3 + "project", p2 + "project"), wkey=p3 + "project")
        x = b.layer("BatchNormalization", x, axis=-1, epsilon=1e-3, momentum=0.999,
                    name=nm(p3 + "project_bn", p2 + "project/BatchNorm"), wkey=p3 + "project_bn")
        if stride == 1 and infilters == filters:
            x = b.layer("Add", [shortcut, x], name=nm(p3 + "add", p2 + "Add"))
        return x

    img = b.input(data.shape[1:], data)
    kernel, activation, se_ratio = 5, hard_swish, 0.25
    x = b.layer("Rescaling", img, scale=1.0 / 127.5, offset=-1.0)
    x = b.layer("Conv2D", x, filters=16, kernel_size=3, strides=(2, 2), padding="same", use_bias=False,
                name=nm("conv", "Conv"), wkey="conv")
    x = b.layer("BatchNormalization", x, axis=-1, epsilon=1e-3, momentum=0.999,
                name=nm("conv_bn", "Conv/BatchNorm"), wkey="conv_bn")
    x = activation(x)

    def d(v):
        return depth(v * alpha)

    x = block(x, 1, d(16), 3, 2, se_ratio, relu, 0)
    x = block(x, 72.0 / 16, d(24), 3, 2, None, relu, 1)
    x = block(x, 88.0 / 24, d(24), 3, 1, None, relu, 2)
    x = block(x, 4, d(40), kernel, 2, se_ratio, activation, 3)
    x = block(x, 6, d(40), kernel, 1, se_ratio, activation, 4)
    x = block(x, 6, d(40), kernel, 1, se_ratio, activation, 5)
    x = block(x, 3, d(48), kernel, 1, se_ratio, activation, 6)
    x = block(x, 3, d(48), kernel, 1, se_ratio, activation, 7)
    x = block(x, 6, d(96), kernel, 2, se_ratio, activation, 8)
    x = block(x, 6, d(96), kernel, 1, se_ratio, activation, 9)
    x = block(x, 6, d(96), kernel, 1, se_ratio, activation, 10)

    last_point_ch = 1024
    last_conv_ch = depth(x.shape[-1] * 6)
    if alpha > 1.0:
        last_point_ch = depth(last_point_ch * alpha)
    x = b.layer("Conv2D", x, filters=last_conv_ch, kernel_size=1, padding="same", use_bias=False,
                name=nm("conv_1", "Conv_1"), wkey="conv_1")
    x = b.layer("BatchNormalization", x, axis=-1, epsilon=1e-3, momentum=0.999,
                name=nm("conv_1_bn", "Conv_1/BatchNorm"), wkey="conv_1_bn")
    x = activation(x)
    x = b.layer("GlobalAveragePooling2D", x, keepdims=True)
    x = b.layer("Conv2D", x, filters=last_point_ch, kernel_size=1, padding="same", use_bias=True,
                name=nm("conv_2", "Conv_2"), wkey="conv_2")
    x = activation(x)
    if dropout_rate > 0:
        x = b.layer("Dropout", x, rate=dropout_rate)
    x = b.layer("Conv2D", x, filters=classes, kernel_size=1, padding="same", name=nm("logits", "Logits"),
                wkey="logits", calibrate_std=HEAD_STD)
    x = b.layer("Flatten", x)
    return b.layer("Activation", x, activation="softmax", name=nm("predictions", "Predictions"))


# ---------------------------------------------------------------------------
# InceptionV3 (inception_v3.py)


def inception_v3(b, data, width=1.0, classes=1000):
    f = _scale(width)

    def conv2d_bn(x, filters, num_row, num_col, padding="same", strides=(1, 1), name=None):
        bn_name = name + "_bn" if name is not None else None
        conv_name = name + "_conv" if name is not None else None
        x = b.layer("Conv2D", x, filters=f(filters), kernel_size=(num_row, num_col), strides=strides,
                    padding=padding, use_bias=False, name=conv_name)
        x = b.layer("BatchNormalization", x, axis=3, scale=False, name=bn_name)
        return b.layer("Activation", x, activation="relu", name=name)

    def avgpool(x):
        return b.layer("AveragePooling2D", x, pool_size=(3, 3), strides=(1, 1), padding="same")

    def concat(xs, name=None):
        return b.layer("Concatenate", xs, axis=3, name=name)

    img = b.input(data.shape[1:], data)
    x = conv2d_bn(img, 32, 3, 3, strides=(2, 2), padding="valid")
    x = conv2d_bn(x, 32, 3, 3, padding="valid")
    x = conv2d_bn(x, 64, 3, 3)
    x = b.layer("MaxPooling2D", x, pool_size=(3, 3), strides=(2, 2))
    x = conv2d_bn(x, 80, 1, 1, padding="valid")
    x = conv2d_bn(x, 192, 3, 3, padding="valid")
    x = b.layer("MaxPooling2D", x, pool_size=(3, 3), strides=(2, 2))

    for i, pool_filters in enumerate((32, 64, 64)):  # mixed 0, 1, 2
        branch1x1 = conv2d_bn(x, 64, 1, 1)
        branch5x5 = conv2d_bn(x, 48, 1, 1)
        branch5x5 = conv2d_bn(branch5x5, 64, 5, 5)
        branch3x3dbl = conv2d_bn(x, 64, 1, 1)
        branch3x3dbl = conv2d_bn(branch3x3dbl, 96, 3, 3)
        branch3x3dbl = conv2d_bn(branch3x3dbl, 96, 3, 3)
        branch_pool = conv2d_bn(avgpool(x), pool_filters, 1, 1)
        x = concat([branch1x1, branch5x5, branch3x3dbl, branch_pool], name=f"mixed{i}")

    # mixed 3
    branch3x3 = conv2d_bn(x, 384, 3, 3, strides=(2, 2), padding="valid")
    branch3x3dbl = conv2d_bn(x, 64, 1, 1)
    branch3x3dbl = conv2d_bn(branch3x3dbl, 96, 3, 3)
    branch3x3dbl = conv2d_bn(branch3x3dbl, 96, 3, 3, strides=(2, 2), padding="valid")
    branch_pool = b.layer("MaxPooling2D", x, pool_size=(3, 3), strides=(2, 2))
    x = concat([branch3x3, branch3x3dbl, branch_pool], name="mixed3")

    def mixed_7x7(x, c, name):
        branch1x1 = conv2d_bn(x, 192, 1, 1)
        branch7x7 = conv2d_bn(x, c, 1, 1)
        branch7x7 = conv2d_bn(branch7x7, c, 1, 7)
        branch7x7 = conv2d_bn(branch7x7, 192, 7, 1)
        branch7x7dbl = conv2d_bn(x, c, 1, 1)
        branch7x7dbl = conv2d_bn(branch7x7dbl, c, 7, 1)
        branch7x7dbl = conv2d_bn(branch7x7dbl, c, 1, 7)
        branch7x7dbl = conv2d_bn(branch7x7dbl, c, 7, 1)
        branch7x7dbl = conv2d_bn(branch7x7dbl, 192, 1, 7)
        branch_pool = conv2d_bn(avgpool(x), 192, 1, 1)
        return concat([branch1x1, branch7x7, branch7x7dbl, branch_pool], name=name)

    x = mixed_7x7(x, 128, "mixed4")
    for i in range(2):
        x = mixed_7x7(x, 160, "mixed" + str(5 + i))
    x = mixed_7x7(x, 192, "mixed7")

    # mixed 8
    branch3x3 = conv2d_bn(x, 192, 1, 1)
    branch3x3 = conv2d_bn(branch3x3, 320, 3, 3, strides=(2, 2), padding="valid")
    branch7x7x3 = conv2d_bn(x, 192, 1, 1)
    branch7x7x3 = conv2d_bn(branch7x7x3, 192, 1, 7)
    branch7x7x3 = conv2d_bn(branch7x7x3, 192, 7, 1)
    branch7x7x3 = conv2d_bn(branch7x7x3, 192, 3, 3, strides=(2, 2), padding="valid")
    branch_pool = b.layer("MaxPooling2D", x, pool_size=(3, 3), strides=(2, 2))
    x = concat([branch3x3, branch7x7x3, branch_pool], name="mixed8")

    for i in range(2):  # mixed 9, 10
        branch1x1 = conv2d_bn(x, 320, 1, 1)
        branch3x3 = conv2d_bn(x, 384, 1, 1)
        branch3x3_1 = conv2d_bn(branch3x3, 384, 1, 3)
        branch3x3_2 = conv2d_bn(branch3x3, 384, 3, 1)
        branch3x3 = concat([branch3x3_1, branch3x3_2], name="mixed9_" + str(i))
        branch3x3dbl = conv2d_bn(x, 448, 1, 1)
        branch3x3dbl = conv2d_bn(branch3x3dbl, 384, 3, 3)
        branch3x3dbl_1 = conv2d_bn(branch3x3dbl, 384, 1, 3)
        branch3x3dbl_2 = conv2d_bn(branch3x3dbl, 384, 3, 1)
        branch3x3dbl = concat([branch3x3dbl_1, branch3x3dbl_2])
        branch_pool = conv2d_bn(avgpool(x), 192, 1, 1)
        x = concat([branch1x1, branch3x3, branch3x3dbl, branch_pool], name="mixed" + str(9 + i))

    x = b.layer("GlobalAveragePooling2D", x, name="avg_pool")
    return b.layer("Dense", x, units=classes, activation="softmax", name="predictions", calibrate_std=HEAD_STD)


# ---------------------------------------------------------------------------
# Xception (xception.py)


def xception(b, data, width=1.0, classes=1000):
    f = _scale(width)

    def bn(x, name=None):
        return b.layer("BatchNormalization", x, axis=-1, name=name)

    def sep(x, filters, name):
        return b.layer("SeparableConv2D", x, filters=f(filters), kernel_size=(3, 3), padding="same",
                       use_bias=False, name=name)

    def relu(x, name):
        return b.layer("Activation", x, activation="relu", name=name)

    def residual(x, filters):
        r = b.layer("Conv2D", x, filters=f(filters), kernel_size=(1, 1), strides=(2, 2), padding="same",
                    use_bias=False)
        return bn(r)

    def pool(x, name):
        return b.layer("MaxPooling2D", x, pool_size=(3, 3), strides=(2, 2), padding="same", name=name)

    img = b.input(data.shape[1:], data)
    x = b.layer("Conv2D", img, filters=f(32), kernel_size=(3, 3), strides=(2, 2), use_bias=False,
                name="block1_conv1")
    x = bn(x, "block1_conv1_bn")
    x = relu(x, "block1_conv1_act")
    x = b.layer("Conv2D", x, filters=f(64), kernel_size=(3, 3), use_bias=False, name="block1_conv2")
    x = bn(x, "block1_conv2_bn")
    x = relu(x, "block1_conv2_act")

    r = residual(x, 128)
    x = sep(x, 128, "block2_sepconv1")
    x = bn(x, "block2_sepconv1_bn")
    x = relu(x, "block2_sepconv2_act")
    x = sep(x, 128, "block2_sepconv2")
    x = bn(x, "block2_sepconv2_bn")
    x = pool(x, "block2_pool")
    x = b.layer("Add", [x, r])

    for blk, filters in ((3, 256), (4, 728)):
        r = residual(x, filters)
        x = relu(x, f"block{blk}_sepconv1_act")
        x = sep(x, filters, f"block{blk}_sepconv1")
        x = bn(x, f"block{blk}_sepconv1_bn")
        x = relu(x, f"block{blk}_sepconv2_act")
        x = sep(x, filters, f"block{blk}_sepconv2")
        x = bn(x, f"block{blk}_sepconv2_bn")
        x = pool(x, f"block{blk}_pool")
        x = b.layer("Add", [x, r])

    for i in range(8):
        r = x
        prefix = "block" + str(i + 5)
        for k in (1, 2, 3):
            x = relu(x, f"{prefix}_sepconv{k}_act")
            x = sep(x, 728, f"{prefix}_sepconv{k}")
            x = bn(x, f"{prefix}_sepconv{k}_bn")
        x = b.layer("Add", [x, r])

    r = residual(x, 1024)
    x = relu(x, "block13_sepconv1_act")
    x = sep(x, 728, "block13_sepconv1")
    x = bn(x, "block13_sepconv1_bn")
    x = relu(x, "block13_sepconv2_act")
    x = sep(x, 1024, "block13_sepconv2")
    x = bn(x, "block13_sepconv2_bn")
    x = pool(x, "block13_pool")
    x = b.layer("Add", [x, r])

    x = sep(x, 1536, "block14_sepconv1")
    x = bn(x, "block14_sepconv1_bn")
    x = relu(x, "block14_sepconv1_act")
    x = sep(x, 2048, "block14_sepconv2")
    x = bn(x, "block14_sepconv2_bn")
    x = relu(x, "block14_sepconv2_act")
    x = b.layer("GlobalAveragePooling2D", x, name="avg_pool")
    return b.layer("Dense", x, units=classes, activation="softmax", name="predictions", calibrate_std=HEAD_STD)


# ---------------------------------------------------------------------------
# DenseNet121 (densenet.py)


def densenet121(b, data, width=1.0, classes=1000, blocks=(6, 12, 24, 16)):
    f = _scale(width)

    def conv_block(x, growth_rate, name):
        x1 = b.layer("BatchNormalization", x, axis=3, epsilon=1.001e-5, name=name + "_0_bn")
        x1 = b.layer("Activation", x1, activation="relu", name=name + "_0_relu")
        x1 = b.layer("Conv2D", x1, filters=4 * growth_rate, kernel_size=1, use_bias=False, name=name + "_1_conv")
        x1 = b.layer("BatchNormalization", x1, axis=3, epsilon=1.001e-5, name=name + "_1_bn")
        x1 = b.layer("Activation", x1, activation="relu", name=name + "_1_relu")
        x1 = b.layer("Conv2D", x1, filters=growth_rate, kernel_size=3, padding="same", use_bias=False,
                     name=name + "_2_conv")
        return b.layer("Concatenate", [x, x1], axis=3, name=name + "_concat")

    def dense_block(x, n, name):
        for i in range(n):
            x = conv_block(x, f(32), name=name + "_block" + str(i + 1))
        return x

    def transition_block(x, reduction, name):
        x = b.layer("BatchNormalization", x, axis=3, epsilon=1.001e-5, name=name + "_bn")
        x = b.layer("Activation", x, activation="relu", name=name + "_relu")
        x = b.layer("Conv2D", x, filters=int(x.shape[3] * reduction), kernel_size=1, use_bias=False,
                    name=name + "_conv")
        return b.layer("AveragePooling2D", x, pool_size=2, strides=2, name=name + "_pool")

    img = b.input(data.shape[1:], data)
    x = b.layer("ZeroPadding2D", img, padding=((3, 3), (3, 3)))
    x = b.layer("Conv2D", x, filters=f(64), kernel_size=7, strides=2, use_bias=False, name="conv1_conv")
    x = b.layer("BatchNormalization", x, axis=3, epsilon=1.001e-5, name="conv1_bn")
    x = b.layer("Activation", x, activation="relu", name="conv1_relu")
    x = b.layer("ZeroPadding2D", x, padding=((1, 1), (1, 1)))
    x = b.layer("MaxPooling2D", x, pool_size=3, strides=2, name="pool1")
    x = dense_block(x, blocks[0], name="conv2")
    x = transition_block(x, 0.5, name="pool2")
    x = dense_block(x, blocks[1], name="conv3")
    x = transition_block(x, 0.5, name="pool3")
    x = dense_block(x, blocks[2], name="conv4")
    x = transition_block(x, 0.5, name="pool4")
    x = dense_block(x, blocks[3], name="conv5")
    x = b.layer("BatchNormalization", x, axis=3, epsilon=1.001e-5, name="bn")
    x = b.layer("Activation", x, activation="relu", name="relu")
    x = b.layer("GlobalAveragePooling2D", x, name="avg_pool")
    return b.layer("Dense", x, units=classes, activation="softmax", name="predictions", calibrate_std=HEAD_STD)


# ---------------------------------------------------------------------------
# EfficientNetB0 (efficientnet.py)

EFF_BLOCKS = [
    dict(kernel_size=3, repeats=1, filters_in=32, filters_out=16, expand_ratio=1, id_skip=True, strides=1, se_ratio=0.25),
    dict(kernel_size=3, repeats=2, filters_in=16, filters_out=24, expand_ratio=6, id_skip=True, strides=2, se_ratio=0.25),
    dict(kernel_size=5, repeats=2, filters_in=24, filters_out=40, expand_ratio=6, id_skip=True, strides=2, se_ratio=0.25),
    dict(kernel_size=3, repeats=3, filters_in=40, filters_out=80, expand_ratio=6, id_skip=True, strides=2, se_ratio=0.25),
    dict(kernel_size=5, repeats=3, filters_in=80, filters_out=112, expand_ratio=6, id_skip=True, strides=1, se_ratio=0.25),
    dict(kernel_size=5, repeats=4, filters_in=112, filters_out=192, expand_ratio=6, id_skip=True, strides=2, se_ratio=0.25),
    dict(kernel_size=3, repeats=1, filters_in=192, filters_out=320, expand_ratio=6, id_skip=True, strides=1, se_ratio=0.25),
]
IMAGENET_STDDEV_RGB = [0.229, 0.224, 0.225]


def efficientnet(b, data, width_coefficient=1.0, depth_coefficient=1.0, dropout_rate=0.2, drop_connect_rate=0.2,
                 depth_divisor=8, activation="swish", classes=1000, imagenet_rescaling=True):
    def round_filters(filters, divisor=depth_divisor):
        filters *= width_coefficient
        new_filters = max(divisor, int(filters + divisor / 2) // divisor * divisor)
        if new_filters < 0.9 * filters:
            new_filters += divisor
        return int(new_filters)

    def round_repeats(repeats):
        return int(math.ceil(depth_coefficient * repeats))

    def block(inputs, activation, drop_rate, name, filters_in, filters_out, kernel_size, strides, expand_ratio,
              se_ratio, id_skip):
        filters = filters_in * expand_ratio
        if expand_ratio != 1:
            x = b.layer("Conv2D", inputs, filters=filters, kernel_size=1, padding="same", use_bias=False,
                        kernel_initializer=EFF_CONV_INIT, name=name + "expand_conv")
            x = b.layer("BatchNormalization", x, axis=3, name=name + "expand_bn")
            x = b.layer("Activation", x, activation=activation, name=name + "expand_activation")
        else:
            x = inputs
        if strides == 2:
            x = b.layer("ZeroPadding2D", x, padding=correct_pad(x, kernel_size), name=name + "dwconv_pad")
            conv_pad = "valid"
        else:
            conv_pad = "same"
        x = b.layer("DepthwiseConv2D", x, kernel_size=kernel_size, strides=strides, padding=conv_pad,
                    use_bias=False, depthwise_initializer=EFF_CONV_INIT, name=name + "dwconv")
        x = b.layer("BatchNormalization", x, axis=3, name=name + "bn")
        x = b.layer("Activation", x, activation=activation, name=name + "activation")
        if 0 < se_ratio <= 1:
            filters_se = max(1, int(filters_in * se_ratio))
            se = b.layer("GlobalAveragePooling2D", x, name=name + "se_squeeze")
            se = b.layer("Reshape", se, target_shape=[1, 1, filters], name=name + "se_reshape")
            se = b.layer("Conv2D", se, filters=filters_se, kernel_size=1, padding="same", activation=activation,
                         kernel_initializer=EFF_CONV_INIT, name=name + "se_reduce")
            se = b.layer("Conv2D", se, filters=filters, kernel_size=1, padding="same", activation="sigmoid",
                         kernel_initializer=EFF_CONV_INIT, name=name + "se_expand")
            x = b.layer("Multiply", [x, se], name=name + "se_excite")
        x = b.layer("Conv2D", x, filters=filters_out, kernel_size=1, padding="same", use_bias=False,
                    kernel_initializer=EFF_CONV_INIT, name=name + "project_conv")
        x = b.layer("BatchNormalization", x, axis=3, name=name + "project_bn")
        if id_skip and strides == 1 and filters_in == filters_out:
            if drop_rate > 0:
                x = b.layer("Dropout", x, rate=drop_rate, noise_shape=(None, 1, 1, 1), name=name + "drop")
            x = b.layer("Add", [x, inputs], name=name + "add")
        return x

    img = b.input(data.shape[1:], data)
    x = b.layer("Rescaling", img, scale=1.0 / 255.0)
    x = b.layer("Normalization", x, axis=3)
    if imagenet_rescaling:
        # the weights="imagenet" branch of the definition (what saved
        # pretrained EfficientNets contain): per-channel Rescaling list
        x = b.layer("Rescaling", x, scale=[1.0 / math.sqrt(s) for s in IMAGENET_STDDEV_RGB])
    x = b.layer("ZeroPadding2D", x, padding=correct_pad(x, 3), name="stem_conv_pad")
    x = b.layer("Conv2D", x, filters=round_filters(32), kernel_size=3, strides=2, padding="valid", use_bias=False,
                kernel_initializer=EFF_CONV_INIT, name="stem_conv")
    x = b.layer("BatchNormalization", x, axis=3, name="stem_bn")
    x = b.layer("Activation", x, activation=activation, name="stem_activation")

    blocks_args = [dict(a) for a in EFF_BLOCKS]
    bi = 0
    total = float(sum(round_repeats(a["repeats"]) for a in blocks_args))
    for i, args in enumerate(blocks_args):
        args["filters_in"] = round_filters(args["filters_in"])
        args["filters_out"] = round_filters(args["filters_out"])
        for j in range(round_repeats(args.pop("repeats"))):
            if j > 0:
                args["strides"] = 1
                args["filters_in"] = args["filters_out"]
            x = block(x, activation, drop_connect_rate * bi / total, name=f"block{i + 1}{chr(j + 97)}_", **args)
            bi += 1

    x = b.layer("Conv2D", x, filters=round_filters(1280), kernel_size=1, padding="same", use_bias=False,
                kernel_initializer=EFF_CONV_INIT, name="top_conv")
    x = b.layer("BatchNormalization", x, axis=3, name="top_bn")
    x = b.layer("Activation", x, activation=activation, name="top_activation")
    x = b.layer("GlobalAveragePooling2D", x, name="avg_pool")
    if dropout_rate > 0:
        x = b.layer("Dropout", x, rate=dropout_rate, name="top_dropout")
    return b.layer("Dense", x, units=classes, activation="softmax", kernel_initializer=EFF_DENSE_INIT,
                   name="predictions", calibrate_std=HEAD_STD)


EFF_NORMALIZATION = {"mean": [0.485, 0.456, 0.406], "variance": [0.229 ** 2, 0.224 ** 2, 0.225 ** 2],
                     "count": 1281167}


# ---------------------------------------------------------------------------
# ConvNeXtTiny (convnext.py)


def convnext(b, data, depths=(3, 3, 9, 3), projection_dims=(96, 192, 384, 768), name="convnext_tiny",
             layer_scale_init_value=1e-6, classes=1000):
    img = b.input(data.shape[1:], data)
    x = b.layer("Normalization", img, mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                variance=[(0.229 * 255) ** 2, (0.224 * 255) ** 2, (0.225 * 255) ** 2],
                name=name + "_prestem_normalization")
    stem = [("Conv2D", dict(filters=projection_dims[0], kernel_size=4, strides=4, name=name + "_stem_conv")),
            ("LayerNormalization", dict(epsilon=1e-6, name=name + "_stem_layernorm"))]
    downsample = [("", stem, name + "_stem")]
    for i in range(3):
        downsample.append(("", [
            ("LayerNormalization", dict(epsilon=1e-6, name=name + "_downsampling_layernorm_" + str(i))),
            ("Conv2D", dict(filters=projection_dims[i + 1], kernel_size=2, strides=2,
                            name=name + "_downsampling_conv_" + str(i)))],
            name + "_downsampling_block_" + str(i)))

    def block(inputs, dim, bname):
        x = b.layer("Conv2D", inputs, filters=dim, kernel_size=7, padding="same", groups=dim,
                    name=bname + "_depthwise_conv")
        x = b.layer("LayerNormalization", x, epsilon=1e-6, name=bname + "_layernorm")
        x = b.layer("Dense", x, units=4 * dim, name=bname + "_pointwise_conv_1")
        x = b.layer("Activation", x, activation="gelu", name=bname + "_gelu")
        x = b.layer("Dense", x, units=dim, name=bname + "_pointwise_conv_2")
        if layer_scale_init_value is not None:
            x = b.layer("LayerScale", x, init_values=layer_scale_init_value, projection_dim=dim,
                        name=bname + "_layer_scale")
        x = b.layer("Activation", x, activation="linear", name=bname + "_identity")
        return b.op("Add", inputs, x)

    x0 = x
    for i in range(4):
        _, specs, sname = downsample[i]
        x0 = b.sequential(sname, specs, x0)
        for j in range(depths[i]):
            x0 = block(x0, projection_dims[i], name + f"_stage_{i}_block_{j}")
    x = b.layer("GlobalAveragePooling2D", x0, name=name + "_head_gap")
    x = b.layer("LayerNormalization", x, epsilon=1e-6, name=name + "_head_layernorm")
    return b.layer("Dense", x, units=classes, activation="softmax", name=name + "_head_dense",
                   calibrate_std=HEAD_STD)


# ---------------------------------------------------------------------------
# NASNetMobile (nasnet.py)


def nasnet(b, data, penultimate_filters=1056, num_blocks=4, stem_block_filters=32, skip_reduction=False,
           filter_multiplier=2, classes=1000):
    if penultimate_filters % (24 * (filter_multiplier ** 2)) != 0:
        raise ValueError("penultimate_filters must be a multiple of 24 * filter_multiplier**2")
    filters = penultimate_filters // 24

    def bn(x, name):
        return b.layer("BatchNormalization", x, axis=-1, momentum=0.9997, epsilon=1e-3, name=name)

    def relu(x, name=None):
        return b.layer("Activation", x, activation="relu", name=name)

    def conv1x1(x, filters, name, strides=(1, 1)):
        return b.layer("Conv2D", x, filters=filters, kernel_size=(1, 1), strides=strides, padding="same",
                       use_bias=False, kernel_initializer=HE_NORMAL, name=name)

    def sep_block(ip, filters, kernel_size=(3, 3), strides=(1, 1), block_id=None):
        x = relu(ip)
        if strides == (2, 2):
            x = b.layer("ZeroPadding2D", x, padding=correct_pad(x, kernel_size),
                        name=f"separable_conv_1_pad_{block_id}")
            conv_pad = "valid"
        else:
            conv_pad = "same"
        x = b.layer("SeparableConv2D", x, filters=filters, kernel_size=kernel_size, strides=strides,
                    name=f"separable_conv_1_{block_id}", padding=conv_pad, use_bias=False)
        x = bn(x, f"separable_conv_1_bn_{block_id}")
        x = relu(x)
        x = b.layer("SeparableConv2D", x, filters=filters, kernel_size=kernel_size,
                    name=f"separable_conv_2_{block_id}", padding="same", use_bias=False)
        return bn(x, f"separable_conv_2_bn_{block_id}")

    def adjust(p, ip, filters, block_id=None):
        if p is None:
            return ip
        if p.shape[-2] != ip.shape[-2]:
            p = relu(p, f"adjust_relu_1_{block_id}")
            p1 = b.layer("AveragePooling2D", p, pool_size=(1, 1), strides=(2, 2), padding="valid",
                         name=f"adjust_avg_pool_1_{block_id}")
            p1 = conv1x1(p1, filters // 2, f"adjust_conv_1_{block_id}")
            p2 = b.layer("ZeroPadding2D", p, padding=((0, 1), (0, 1)))
            p2 = b.layer("Cropping2D", p2, cropping=((1, 0), (1, 0)))
            p2 = b.layer("AveragePooling2D", p2, pool_size=(1, 1), strides=(2, 2), padding="valid",
                         name=f"adjust_avg_pool_2_{block_id}")
            p2 = conv1x1(p2, filters // 2, f"adjust_conv_2_{block_id}")
            p = b.layer("Concatenate", [p1, p2], axis=-1)
            p = bn(p, f"adjust_bn_{block_id}")
        elif p.shape[-1] != filters:
            p = relu(p)
            p = conv1x1(p, filters, f"adjust_conv_projection_{block_id}")
            p = bn(p, f"adjust_bn_{block_id}")
        return p

    def avg3(x, strides, padding, name):
        return b.layer("AveragePooling2D", x, pool_size=(3, 3), strides=strides, padding=padding, name=name)

    def add(xs, name=None):
        return b.layer("Add", xs, name=name)

    def normal_cell(ip, p, filters, block_id):
        p = adjust(p, ip, filters, block_id)
        h = relu(ip)
        h = conv1x1(h, filters, f"normal_conv_1_{block_id}")
        h = bn(h, f"normal_bn_1_{block_id}")
        x1 = add([sep_block(h, filters, (5, 5), block_id=f"normal_left1_{block_id}"),
                  sep_block(p, filters, block_id=f"normal_right1_{block_id}")], f"normal_add_1_{block_id}")
        x2 = add([sep_block(p, filters, (5, 5), block_id=f"normal_left2_{block_id}"),
                  sep_block(p, filters, (3, 3), block_id=f"normal_right2_{block_id}")], f"normal_add_2_{block_id}")
        x3 = avg3(h, (1, 1), "same", f"normal_left3_{block_id}")
        x3 = add([x3, p], f"normal_add_3_{block_id}")
        x4 = add([avg3(p, (1, 1), "same", f"normal_left4_{block_id}"),
                  avg3(p, (1, 1), "same", f"normal_right4_{block_id}")], f"normal_add_4_{block_id}")
        x5 = sep_block(h, filters, block_id=f"normal_left5_{block_id}")
        x5 = add([x5, h], f"normal_add_5_{block_id}")
        x = b.layer("Concatenate", [p, x1, x2, x3, x4, x5], axis=-1, name=f"normal_concat_{block_id}")
        return x, ip

    def reduction_cell(ip, p, filters, block_id):
        p = adjust(p, ip, filters, block_id)
        h = relu(ip)
        h = conv1x1(h, filters, f"reduction_conv_1_{block_id}")
        h = bn(h, f"reduction_bn_1_{block_id}")
        h3 = b.layer("ZeroPadding2D", h, padding=correct_pad(h, 3), name=f"reduction_pad_1_{block_id}")
        x1 = add([sep_block(h, filters, (5, 5), strides=(2, 2), block_id=f"reduction_left1_{block_id}"),
                  sep_block(p, filters, (7, 7), strides=(2, 2), block_id=f"reduction_right1_{block_id}")],
                 f"reduction_add_1_{block_id}")
        x2_1 = b.layer("MaxPooling2D", h3, pool_size=(3, 3), strides=(2, 2), padding="valid",
                       name=f"reduction_left2_{block_id}")
        x2_2 = sep_block(p, filters, (7, 7), strides=(2, 2), block_id=f"reduction_right2_{block_id}")
        x2 = add([x2_1, x2_2], f"reduction_add_2_{block_id}")
        x3_1 = avg3(h3, (2, 2), "valid", f"reduction_left3_{block_id}")
        x3_2 = sep_block(p, filters, (5, 5), strides=(2, 2), block_id=f"reduction_right3_{block_id}")
        x3 = add([x3_1, x3_2], f"reduction_add3_{block_id}")
        x4 = avg3(x1, (1, 1), "same", f"reduction_left4_{block_id}")
        x4 = add([x2, x4])
        x5_1 = sep_block(x1, filters, (3, 3), block_id=f"reduction_left4_{block_id}")
        x5_2 = b.layer("MaxPooling2D", h3, pool_size=(3, 3), strides=(2, 2), padding="valid",
                       name=f"reduction_right5_{block_id}")
        x5 = add([x5_1, x5_2], f"reduction_add4_{block_id}")
        x = b.layer("Concatenate", [x2, x3, x4, x5], axis=-1, name=f"reduction_concat_{block_id}")
        return x, ip

    img = b.input(data.shape[1:], data)
    x = b.layer("Conv2D", img, filters=stem_block_filters, kernel_size=(3, 3), strides=(2, 2), padding="valid",
                use_bias=False, name="stem_conv1", kernel_initializer=HE_NORMAL)
    x = bn(x, "stem_bn1")
    p = None
    x, p = reduction_cell(x, p, filters // (filter_multiplier ** 2), "stem_1")
    x, p = reduction_cell(x, p, filters // filter_multiplier, "stem_2")
    for i in range(num_blocks):
        x, p = normal_cell(x, p, filters, "%d" % i)
    x, p0 = reduction_cell(x, p, filters * filter_multiplier, "reduce_%d" % num_blocks)
    p = p0 if not skip_reduction else p
    for i in range(num_blocks):
        x, p = normal_cell(x, p, filters * filter_multiplier, "%d" % (num_blocks + i + 1))
    x, p0 = reduction_cell(x, p, filters * filter_multiplier ** 2, "reduce_%d" % (2 * num_blocks))
    p = p0 if not skip_reduction else p
    for i in range(num_blocks):
        x, p = normal_cell(x, p, filters * filter_multiplier ** 2, "%d" % (2 * num_blocks + i + 1))
    x = relu(x)
    x = b.layer("GlobalAveragePooling2D", x)
    return b.layer("Dense", x, units=classes, activation="softmax", name="predictions", calibrate_std=HEAD_STD)
