"""A 1-D Conv with constant weights is packaged as a 2-D conv of height 1, so it takes the
blocked, vectorized conv path (the generic N-d loop ran a VAD's encoder 10x slower)."""

import numpy as np
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from packager.package import compile_model

from .helpers import ort_outputs, run_model

RNG = np.random.default_rng(5)


def conv1d_model():
    w = RNG.standard_normal((32, 20, 3)).astype(np.float32)
    b = RNG.standard_normal(32).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[2, 1], strides=[2], dilations=[2])
    graph = helper.make_graph(
        [node, helper.make_node("Relu", ["y"], ["r"])],
        "m",
        [helper.make_tensor_value_info("x", T.FLOAT, [1, 20, 17])],
        [helper.make_tensor_value_info("r", T.FLOAT, [1, 32, 8])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_conv1d_runs_as_a_blocked_2d_conv_and_matches_ort():
    model = conv1d_model()
    nodes = compile_model(model).graph.nodes
    ops = [i["op"] for n in nodes for i in n.attrs.get("nodes", [{"op": n.op}])]
    assert "conv2d_nchwc" in ops and "conv" not in ops  # no generic N-d conv kernel left
    feeds = {"x": RNG.standard_normal((1, 20, 17)).astype(np.float32)}
    (got,) = run_model(model, feeds)
    (want,) = ort_outputs(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
