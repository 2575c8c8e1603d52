"""Whole models through the real path, against the expected outputs shipped with onnx's
light model zoo and against ONNX Runtime for the test networks."""

from pathlib import Path

import networks
import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from .helpers import ort_outputs, run_model

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
ZOO = [
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
]
SLOW = {"vgg19", "densenet121", "inception_v2", "resnet50", "zfnet512", "bvlc_alexnet"}


def dummy_input(vi: onnx.ValueInfoProto) -> np.ndarray:
    """The input onnx's backend runner feeds light models: arange scaled to [0, 1)."""
    shape = tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


@pytest.mark.parametrize(
    "name", [pytest.param(z, marks=pytest.mark.slow) if z in SLOW else z for z in ZOO]
)
def test_light_zoo(name):
    model = onnx.load(LIGHT / f"light_{name}.onnx")
    inits = {t.name for t in model.graph.initializer}
    feeds = {vi.name: dummy_input(vi) for vi in model.graph.input if vi.name not in inits}
    expected = numpy_helper.to_array(onnx.load_tensor(str(LIGHT / f"light_{name}_output_0.pb")))
    (got,) = run_model(model, feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: networks.mobilenet_v2(seed=1), id="mobilenet_v2"),
        pytest.param(
            lambda: networks.resnet(seed=2, blocks=(1, 1, 1, 1), width=16, size=64, groups=4),
            id="resnet",
        ),
        pytest.param(lambda: networks.tiny_cnn(seed=3), id="tiny_cnn"),
    ],
)
def test_networks_match_onnxruntime(build):
    model = build()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    (want,) = ort_outputs(model, {"input": x})
    (got,) = run_model(model, {"input": x})
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)


def shuffle_unit(channels: int, size: int, groups: int = 4, seed: int = 0) -> onnx.ModelProto:
    """ShuffleNet's unit without the shuffle: grouped 1x1 conv, ReLU, depthwise 3x3, grouped
    1x1 conv, residual add, ReLU; channels / groups need not fill the channel blocks."""
    from onnx import helper

    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def conv(x, name, group, k):
        w = rng.standard_normal((channels, channels // group, k, k)).astype(np.float32)
        b = rng.standard_normal(channels).astype(np.float32) * 0.1
        w *= np.float32(1 / np.sqrt(w[0].size))
        inits.extend(
            [numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")]
        )
        nodes.append(
            helper.make_node(
                "Conv", [x, f"{name}_w", f"{name}_b"], [name], group=group, pads=[k // 2] * 4
            )
        )
        return name

    y = conv("input", "g1", groups, 1)
    nodes.append(helper.make_node("Relu", [y], ["r1"]))
    y = conv(conv("r1", "dw", channels, 3), "g2", groups, 1)
    nodes.append(helper.make_node("Add", [y, "input"], ["sum"]))
    nodes.append(helper.make_node("Relu", ["sum"], ["output"]))
    shape = [1, channels, size, size]
    graph = helper.make_graph(
        nodes,
        "shuffle_unit",
        [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("channels, size", [(272, 14), (544, 7), (136, 10), (48, 9)])
def test_groups_splitting_blocks_match_onnxruntime(channels, size):
    """Grouped 1x1 convs whose groups start inside a channel block (ShuffleNet's 68 and
    136 channels a group in blocks of 16, 34 in blocks of 8): each output block reads only
    the blocks of its own groups."""
    model = shuffle_unit(channels, size)
    x = np.random.default_rng(1).uniform(-1, 1, (1, channels, size, size)).astype(np.float32)
    (want,) = ort_outputs(model, {"input": x})
    (got,) = run_model(model, {"input": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
