"""DQ -> MaxPool -> Q with the DQ's scale and zero point pools the integers (the quantize
pass), blocked between integer convs (int8_layout); another scale keeps the float pool.
Both give ONNX Runtime's bytes for the QDQ graph."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.backend import PackagerBackend
from packager.package import prepare_graph
from tests.helpers import unoptimized_ort_session


def _pool_model(act: str, same: bool) -> onnx.ModelProto:
    """x -> Q -> DQ -> MaxPool 3x3 stride 2 pad 1 -> Q (same or other params) -> DQ."""
    zp, ozp = (np.uint8(128), np.uint8(100)) if act == "uint8" else (np.int8(3), np.int8(-7))
    inits = [
        numpy_helper.from_array(np.float32(0.05), "s"),
        numpy_helper.from_array(zp, "z"),
        numpy_helper.from_array(np.float32(0.05 if same else 0.07), "s2"),
        numpy_helper.from_array(zp if same else ozp, "z2"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node(
            "MaxPool", ["xd"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]
        ),
        helper.make_node("QuantizeLinear", ["p", "s2", "z2"], ["pq"]),
        helper.make_node("DequantizeLinear", ["pq", "s2", "z2"], ["out"]),
    ]
    g = helper.make_graph(
        nodes,
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 20, 9, 9])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 20, 5, 5])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("act", ["uint8", "int8"])
@pytest.mark.parametrize("same", [True, False])
def test_max_pool_between_dq_and_q_pools_the_integers_only_with_the_same_params(act, same):
    model = _pool_model(act, same)
    graph, _ = prepare_graph(model)
    (pool,) = [n for n in graph.nodes if "max_pool" in n.op]
    assert graph.values[pool.inputs[0]].dtype == (act if same else "float32")
    # all negative at the borders: the padding must not win a window
    x = np.random.default_rng(0).uniform(-6, 2, (1, 20, 9, 9)).astype(np.float32)
    sess = unoptimized_ort_session(model)
    want = sess.run(None, {"x": x})[0]
    got = PackagerBackend.prepare(model).run([x])[0]
    np.testing.assert_array_equal(got, want)
