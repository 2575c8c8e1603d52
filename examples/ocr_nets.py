"""OCR networks built with onnx.helper and seeded He-init weights: a DBNet-style text
detector and an SVTR-style text recognizer, in the shapes PaddleOCR and MMOCR export.

``dbnet``: a MobileNetV3-small-style or ResNet-18 backbone, an FPN neck (1x1 lateral
convs, nearest Resize x2 + Add top-down, 3x3 convs, the four levels upsampled to 1/4 and
concatenated), the DB probability head (3x3 conv + BN + ReLU, two 2x2 stride-2
ConvTransposes, Sigmoid). ``svtr``: a conv stem, stages of transformer mixing blocks
(LayerNorm, multi-head attention over the H*W tokens, MLP with an Erf Gelu) joined by
3x3 stride-(2, 1) merging convs, a mean over height, a Linear to the character classes
and Softmax.
"""

from __future__ import annotations

import onnx
from networks import NetBuilder


def _finish(b: NetBuilder, x: str, shape, y: str, out_shape, name: str) -> onnx.ModelProto:
    return b.finish(name, {x: shape}, {y: out_shape})


def _hswish(b: NetBuilder, x: str) -> str:
    return b.op("HardSwish", [x])


def _se(b: NetBuilder, x: str, c: int) -> str:
    """Squeeze-excite as MobileNetV3 has it: pool, 1x1 reduce + ReLU, 1x1 + HardSigmoid."""
    s = b.op("GlobalAveragePool", [x])
    s = b.op("Relu", [b.conv(s, c, max(8, c // 4), 1)])
    s = b.op("HardSigmoid", [b.conv(s, max(8, c // 4), c, 1)], alpha=1.0 / 6, beta=0.5)
    return b.op("Mul", [x, s])


def _bneck(b: NetBuilder, x, cin, hidden, cout, k, stride, se, act) -> str:
    def act_of(y):
        return _hswish(b, y) if act == "hs" else b.op("Relu", [y])

    y = act_of(b.conv_bn(x, cin, hidden, 1, act=None)) if hidden != cin else x
    y = act_of(b.conv_bn(y, hidden, hidden, k, stride=stride, group=hidden, act=None))
    if se:
        y = _se(b, y, hidden)
    y = b.conv_bn(y, hidden, cout, 1, act=None)
    return b.op("Add", [x, y]) if stride == 1 and cin == cout else y


def _mobilenet_v3_small(b: NetBuilder, x: str) -> tuple[list[str], list[int]]:
    """MobileNetV3-small's blocks; the features at strides 4, 8, 16 and 32."""
    blocks = [  # k, hidden, out, se, act, stride; a feature is taken after the marked one
        (3, 16, 16, True, "re", 2, True),
        (3, 72, 24, False, "re", 2, False),
        (3, 88, 24, False, "re", 1, True),
        (5, 96, 40, True, "hs", 2, False),
        (5, 240, 40, True, "hs", 1, False),
        (5, 240, 40, True, "hs", 1, False),
        (5, 120, 48, True, "hs", 1, False),
        (5, 144, 48, True, "hs", 1, True),
        (5, 288, 96, True, "hs", 2, False),
        (5, 576, 96, True, "hs", 1, False),
        (5, 576, 96, True, "hs", 1, True),
    ]
    x = _hswish(b, b.conv_bn(x, 3, 16, 3, stride=2, act=None))
    cin, feats, chans = 16, [], []
    for k, hidden, cout, se, act, stride, take in blocks:
        x = _bneck(b, x, cin, hidden, cout, k, stride, se, act)
        cin = cout
        if take:
            feats.append(x)
            chans.append(cout)
    return feats, chans


def _resnet18(b: NetBuilder, x: str) -> tuple[list[str], list[int]]:
    x = b.conv_bn(x, 3, 64, 7, stride=2)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin, feats, chans = 64, [], []
    for stage in range(4):
        cout = 64 * 2**stage
        for i in range(2):
            stride = 2 if (i == 0 and stage > 0) else 1
            y = b.conv_bn(x, cin, cout, 3, stride=stride)
            y = b.conv_bn(y, cout, cout, 3, act=None)
            short = (
                x if stride == 1 and cin == cout else b.conv_bn(x, cin, cout, 1, stride, act=None)
            )
            x = b.op("Relu", [b.op("Add", [y, short])])
            cin = cout
        feats.append(x)
        chans.append(cout)
    return feats, chans


def _upsample(b: NetBuilder, x: str, factor: int) -> str:
    """Nearest Resize by ``factor`` as paddle2onnx and torch export it (scales input)."""
    scales = b.param([1.0, 1.0, float(factor), float(factor)], "scales")
    return b.op(
        "Resize",
        [x, "", scales],
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )


def _conv_transpose(b: NetBuilder, x: str, cin: int, cout: int, bias: bool) -> str:
    w = b.weight((cin, cout, 2, 2), "wt", (2.0 / (cin * 4)) ** 0.5)
    ins = [x, w] + ([b.weight((cout,), "bt", 0.1)] if bias else [])
    return b.op("ConvTranspose", ins, kernel_shape=[2, 2], strides=[2, 2])


def dbnet(
    seed: int = 0, size: int = 640, backbone: str = "mobilenet_v3", inner: int | None = None
) -> onnx.ModelProto:
    """DBNet-style detector: input (1, 3, size, size), output the probability map
    (1, 1, size, size). ``backbone``: "mobilenet_v3" (small) or "resnet18"; ``inner``:
    the FPN's channels (96 for the mobile backbone, 256 for ResNet-18 by default)."""
    b = NetBuilder(seed, opset=14)  # HardSwish
    feats, chans = (_resnet18 if backbone == "resnet18" else _mobilenet_v3_small)(b, "input")
    inner = inner or (256 if backbone == "resnet18" else 96)
    lat = [b.conv(f, c, inner, 1, bias=False) for f, c in zip(feats, chans, strict=True)]
    for i in range(3, 0, -1):  # top-down: each level plus the one above it, upsampled
        lat[i - 1] = b.op("Add", [lat[i - 1], _upsample(b, lat[i], 2)])
    outs = [b.conv(t, inner, inner // 4, 3, bias=False) for t in lat]
    outs = [o if i == 0 else _upsample(b, o, 2**i) for i, o in enumerate(outs)]
    fuse = b.op("Concat", outs[::-1], axis=1)
    q = inner // 4
    h = b.conv_bn(fuse, inner, q, 3)
    h = b.op("Relu", [b.bn(_conv_transpose(b, h, q, q, bias=True), q)])
    h = _conv_transpose(b, h, q, 1, bias=True)
    y = b.op("Sigmoid", [h])
    return _finish(b, "input", (1, 3, size, size), y, (1, 1, size, size), "dbnet")


def _gelu_erf(b: NetBuilder, x: str) -> str:
    """Gelu as exporters without the op write it: x * 0.5 * (1 + erf(x / sqrt 2))."""
    e = b.op("Erf", [b.op("Div", [x, b.param(2.0**0.5, "sqrt2")])])
    return b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, b.param(1.0, "one")])]), b.param(0.5, "h")])


def _linear(b: NetBuilder, x: str, cin: int, cout: int) -> str:
    y = b.op("MatMul", [x, b.weight((cin, cout), "w", (1.0 / cin) ** 0.5)])
    return b.op("Add", [y, b.weight((cout,), "b", 0.02)])


def _layer_norm(b: NetBuilder, x: str, d: int) -> str:
    gamma = b.param(1.0 + 0.1 * b.rng.standard_normal(d), "gamma")
    beta = b.param(0.1 * b.rng.standard_normal(d), "beta")
    return b.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-6)


def _mixing_block(b: NetBuilder, x: str, tokens: int, d: int, heads: int, mlp: int) -> str:
    """x + Attention(LN(x)), then x + MLP(LN(x)); one qkv Linear split three ways."""
    dh = d // heads
    h = _layer_norm(b, x, d)
    qkv = _linear(b, h, d, 3 * d)
    qkv = b.op("Reshape", [qkv, b.param_int([1, tokens, 3, heads, dh], "qkv_shape")])
    qkv = b.op("Transpose", [qkv], perm=[2, 0, 3, 1, 4])  # (3, 1, heads, tokens, dh)
    q, k, v = (b.op("Gather", [qkv, b.param_int(i, "which")], axis=0) for i in range(3))
    q = b.op("Mul", [q, b.param(dh**-0.5, "scale")])  # SVTR scales q before the product
    s = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])])
    p = b.op("Softmax", [s], axis=-1)
    o = b.op("Transpose", [b.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
    o = _linear(b, b.op("Reshape", [o, b.param_int([1, tokens, d], "merge")]), d, d)
    x = b.op("Add", [x, o])
    h = _linear(b, _gelu_erf(b, _linear(b, _layer_norm(b, x, d), d, mlp * d)), mlp * d, d)
    return b.op("Add", [x, h])


def svtr(
    seed: int = 0,
    height: int = 48,
    width: int = 320,
    dims=(64, 128, 192),
    depths=(2, 2, 2),
    heads=(2, 4, 6),
    mlp: int = 4,
    classes: int = 6625,
) -> onnx.ModelProto:
    """SVTR-style recognizer (opset 17): input (1, 3, height, width), output per-column
    class probabilities (1, width / 4, classes)."""
    b = NetBuilder(seed, opset=17)
    x = b.conv_bn("input", 3, dims[0] // 2, 3, stride=2, act=None)
    x = _gelu_erf(b, x)
    x = _gelu_erf(b, b.conv_bn(x, dims[0] // 2, dims[0], 3, stride=2, act=None))
    h, w = height // 4, width // 4
    for stage, (d, depth, nh) in enumerate(zip(dims, depths, heads, strict=True)):
        t = b.op("Transpose", [x], perm=[0, 2, 3, 1])
        t = b.op("Reshape", [t, b.param_int([1, h * w, d], "tokens")])
        for _ in range(depth):
            t = _mixing_block(b, t, h * w, d, nh, mlp)
        t = b.op("Reshape", [t, b.param_int([1, h, w, d], "grid")])
        x = b.op("Transpose", [t], perm=[0, 3, 1, 2])
        if stage + 1 < len(dims):  # merging: 3x3 conv, stride (2, 1)
            nd = dims[stage + 1]
            wgt = b.weight((nd, d, 3, 3), "merge_w")
            x = b.op(
                "Conv",
                [x, wgt, b.weight((nd,), "merge_b", 0.1)],
                kernel_shape=[3, 3],
                strides=[2, 1],
                pads=[1, 1, 1, 1],
            )
            h = (h + 1) // 2
    d = dims[-1]
    x = b.op("ReduceMean", [x], axes=[2], keepdims=0)  # (1, d, w)
    x = _layer_norm(b, b.op("Transpose", [x], perm=[0, 2, 1]), d)
    y = b.op("Softmax", [_linear(b, x, d, classes)], axis=-1)
    return _finish(b, "input", (1, 3, height, width), y, (1, w, classes), "svtr")
