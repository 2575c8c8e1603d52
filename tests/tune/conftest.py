"""A small conv model (conv + bias + relu, blocked layout on the host) for the tuner tests."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def conv_model(c: int = 16, oc: int = 16, hw: int = 14, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((oc, c, 3, 3)).astype(np.float32) * 0.1
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.ones(oc, np.float32), "b")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, oc, hw, hw])
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "conv", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture
def conv_onnx(tmp_path):
    path = tmp_path / "conv.onnx"
    onnx.save(conv_model(), path)
    return path
