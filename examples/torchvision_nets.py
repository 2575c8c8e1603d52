"""torchvision's ResNet-18, MobileNetV2 and ResNeXt-50 (32x4d) as ``torch.onnx.export``
writes them (eval mode, opset 17, constant folding on), built with onnx.helper so torch
is not needed.

What the exporter emits, and so what these graphs hold:
- each Conv + BatchNorm pair folded into one Conv with a bias (w * g / sqrt(v + eps),
  b = beta - mean * g / sqrt(v + eps)); no BatchNormalization nodes are left;
- ReLU as Relu; ReLU6 as Clip with its min 0 and max 6 as two scalar initializers that
  every Clip shares;
- ResNet's stem: a 7x7 stride-2 Conv (pads 3) and a 3x3 stride-2 MaxPool (pads 1);
- ``adaptive_avg_pool2d((1, 1))`` as GlobalAveragePool, ``flatten(1)`` as Flatten
  (axis 1), the Linear classifier as Gemm (transB 1); MobileNetV2's Dropout is gone.

Weights are seeded random at the scales torchvision initialises (Kaiming normal,
fan_out, for convs; N(0, 0.01) for MobileNetV2's classifier, U(+-1/sqrt(fan_in)) for
ResNet's) with BatchNorm statistics near their trained ranges folded in.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _Export:
    """Nodes and initializers named in the exporter's style (``/layer1/layer1.0/...``)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._clip: tuple[str, str] | None = None

    def init(self, name: str, data) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(data, np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], scope: str, **attrs) -> str:
        out = f"{scope}/{op}_output_0"
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{scope}/{op}", **attrs))
        return out

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int, scope: str, group=1):
        """Conv(bias=False) then BatchNorm2d, folded as the exporter folds them."""
        fan_out = cout * k * k // group
        w = self.rng.standard_normal((cout, cin // group, k, k)) * (2.0 / fan_out) ** 0.5
        gamma = 1.0 + 0.1 * self.rng.standard_normal(cout)
        beta = 0.1 * self.rng.standard_normal(cout)
        mean = 0.1 * self.rng.standard_normal(cout)
        var = 0.5 + self.rng.random(cout)
        s = gamma / np.sqrt(var + 1e-5)
        wn = self.init(f"onnx::Conv_{len(self.inits)}", w * s[:, None, None, None])
        bn = self.init(f"onnx::Conv_{len(self.inits)}", beta - mean * s)
        p = k // 2
        return self.node(
            "Conv",
            [x, wn, bn],
            scope,
            dilations=[1, 1],
            group=group,
            kernel_shape=[k, k],
            pads=[p, p, p, p],
            strides=[stride, stride],
        )

    def resnet_stem(self) -> str:
        """torchvision's ResNet stem: a 7x7 stride-2 Conv to 64 channels, ReLU, a 3x3
        stride-2 MaxPool (pads 1)."""
        x = self.node("Relu", [self.conv_bn("input", 3, 64, 7, 2, "/conv1/Conv")], "/relu/Relu")
        return self.node(
            "MaxPool",
            [x],
            "/maxpool/MaxPool",
            ceil_mode=0,
            dilations=[1, 1],
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
            strides=[2, 2],
        )

    def relu6(self, x: str, scope: str) -> str:
        if self._clip is None:  # one pair of constants for every Clip
            self._clip = (self.init("onnx::Clip_min", 0.0), self.init("onnx::Clip_max", 6.0))
        return self.node("Clip", [x, *self._clip], scope)

    def head(self, x: str, c: int, classes: int, w_scale: float, b_scale: float) -> str:
        y = self.node("GlobalAveragePool", [x], "/avgpool")
        y = self.node("Flatten", [y], "/Flatten", axis=1)
        w = self.init("fc.weight", self.rng.standard_normal((classes, c)) * w_scale)
        b = self.init("fc.bias", self.rng.uniform(-b_scale, b_scale, classes))
        return self.node("Gemm", [y, w, b], "/fc/Gemm", alpha=1.0, beta=1.0, transB=1)

    def model(self, size: int, y: str, classes: int, name: str) -> onnx.ModelProto:
        self.nodes[-1].output[0] = "output"
        graph = helper.make_graph(
            self.nodes,
            name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, classes])],
            self.inits,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="pytorch"
        )
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def tv_resnet18(seed: int = 0, size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """torchvision.models.resnet18(): BasicBlocks (2, 2, 2, 2) at 64-128-256-512, a 1x1
    stride-2 Conv shortcut where a stage starts."""
    e = _Export(seed)
    x = e.resnet_stem()
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512), start=1):
        for i in range(2):
            s = f"/layer{stage}/layer{stage}.{i}"
            stride = 2 if i == 0 and stage > 1 else 1
            y = e.node("Relu", [e.conv_bn(x, cin, cout, 3, stride, f"{s}/conv1/Conv")], f"{s}/relu")
            y = e.conv_bn(y, cout, cout, 3, 1, f"{s}/conv2/Conv")
            if stride != 1 or cin != cout:
                x = e.conv_bn(x, cin, cout, 1, stride, f"{s}/downsample/downsample.0/Conv")
            x = e.node("Relu", [e.node("Add", [y, x], f"{s}/add")], f"{s}/relu_1")
            cin = cout
    bound = 1.0 / 512**0.5  # nn.Linear's default init
    return e.model(size, e.head(x, 512, classes, bound / 3**0.5, bound), classes, "resnet18")


# (expansion t, channels c, repeats n, first stride s), torchvision's inverted_residual_setting
MOBILENET_V2_SETTING = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]


def tv_mobilenet_v2(seed: int = 0, size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """torchvision.models.mobilenet_v2() (width 1.0): a 3x3 stride-2 stem to 32 channels,
    17 inverted residuals, a 1x1 Conv to 1280 channels, the classifier."""
    e = _Export(seed)
    x = e.relu6(e.conv_bn("input", 3, 32, 3, 2, "/features/features.0/features.0.0/Conv"), "/f0")
    cin, block = 32, 1
    for t, c, n, s in MOBILENET_V2_SETTING:
        for i in range(n):
            f = f"/features/features.{block}/conv"
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = e.relu6(e.conv_bn(y, cin, hidden, 1, 1, f"{f}/conv.0/conv.0.0/Conv"), f"{f}/0")
            d = "conv.1" if t != 1 else "conv.0"
            y = e.conv_bn(y, hidden, hidden, 3, stride, f"{f}/{d}/{d}.0/Conv", group=hidden)
            y = e.relu6(y, f"{f}/{d}")
            p = "conv.2" if t != 1 else "conv.1"
            y = e.conv_bn(y, hidden, c, 1, 1, f"{f}/{p}/Conv")
            x = (
                e.node("Add", [x, y], f"/features/features.{block}")
                if stride == 1 and cin == c
                else y
            )
            cin, block = c, block + 1
    x = e.relu6(e.conv_bn(x, cin, 1280, 1, 1, "/features/features.18/features.18.0/Conv"), "/f18")
    return e.model(size, e.head(x, 1280, classes, 0.01, 0.0), classes, "mobilenet_v2")


def tv_resnext50_32x4d(
    seed: int = 0,
    size: int = 224,
    classes: int = 1000,
    layers: tuple[int, ...] = (3, 4, 6, 3),
    groups: int = 32,
    width_per_group: int = 4,
) -> onnx.ModelProto:
    """torchvision.models.resnext50_32x4d(): Bottleneck blocks (3, 4, 6, 3), each a 1x1
    Conv to ``planes * width_per_group / 64 * groups`` channels (128-256-512-1024), a 3x3
    Conv in ``groups`` groups (the stride, as torchvision puts it), a 1x1 Conv to
    ``planes * 4``, a 1x1 Conv shortcut where the shape changes. ``layers``, ``groups``
    and ``width_per_group`` as torchvision's ResNet takes them (smaller nets for tests)."""
    e = _Export(seed)
    x = e.resnet_stem()
    cin = 64
    for stage, (planes, n) in enumerate(zip((64, 128, 256, 512), layers, strict=True), start=1):
        width, cout = planes * width_per_group // 64 * groups, planes * 4
        for i in range(n):
            s = f"/layer{stage}/layer{stage}.{i}"
            stride = 2 if i == 0 and stage > 1 else 1
            y = e.node("Relu", [e.conv_bn(x, cin, width, 1, 1, f"{s}/conv1/Conv")], f"{s}/relu")
            y = e.conv_bn(y, width, width, 3, stride, f"{s}/conv2/Conv", group=groups)
            y = e.node("Relu", [y], f"{s}/relu_1")
            y = e.conv_bn(y, width, cout, 1, 1, f"{s}/conv3/Conv")
            if stride != 1 or cin != cout:
                x = e.conv_bn(x, cin, cout, 1, stride, f"{s}/downsample/downsample.0/Conv")
            x = e.node("Relu", [e.node("Add", [y, x], f"{s}/add")], f"{s}/relu_2")
            cin = cout
    bound = 1.0 / cin**0.5  # nn.Linear's default init
    return e.model(size, e.head(x, cin, classes, bound / 3**0.5, bound), classes, "resnext50")
