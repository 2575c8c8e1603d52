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
