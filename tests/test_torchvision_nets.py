"""torchvision's ResNet-18 and MobileNetV2 as torch.onnx.export writes them (folded
BatchNorm, Clip with shared min/max inputs, GlobalAveragePool + Flatten + Gemm head),
at a small input size, against ONNX Runtime."""

from dataclasses import replace

import numpy as np
import pytest
import torchvision_nets

from packager.boards import load_board

from .helpers import ort_outputs, run_model


def test_exported_form():
    """The graphs hold what the exporter emits: no BatchNormalization, ReLU6 as Clip."""
    ops = {n.op_type for n in torchvision_nets.tv_mobilenet_v2(size=32).graph.node}
    assert ops == {"Conv", "Clip", "Add", "GlobalAveragePool", "Flatten", "Gemm"}
    convs = [n for n in torchvision_nets.tv_mobilenet_v2(size=32).graph.node if n.op_type == "Conv"]
    assert len(convs) == 52 and all(len(n.input) == 3 for n in convs)
    ops = [n.op_type for n in torchvision_nets.tv_resnet18(size=32).graph.node]
    assert ops.count("Conv") == 20 and ops.count("MaxPool") == 1 and "Softmax" not in ops


@pytest.mark.parametrize("bits", [None, 256], ids=["host", "256bit"])
@pytest.mark.parametrize(
    "build",
    [torchvision_nets.tv_resnet18, torchvision_nets.tv_mobilenet_v2],
    ids=["tv_resnet18", "tv_mobilenet_v2"],
)
def test_torchvision_nets_match_onnxruntime(build, bits):
    """On the host's own vectors and on 256-bit ones (AVX2's tiles: 16 registers), which
    this machine runs whatever its width."""
    model = build(seed=4, size=64, classes=100)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 64, 64)).astype(np.float32)
    (want,) = ort_outputs(model, {"input": x})
    board = load_board("host")
    board = replace(board, vector_bits=bits) if bits else board
    (got,) = run_model(model, {"input": x}, board=board)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4 * np.abs(want).max())
