"""The ONNX backend freezes a graph input the packager needs as a constant (a Reshape's
shape, a Range's bounds) to the value of the first run, and refuses another value."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from packager.backend import PackagerBackend
from packager.errors import PackagerError


def _model(nodes, inputs, outputs):
    graph = helper.make_graph(nodes, "m", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def reshape_by_input():
    return _model(
        [
            helper.make_node("Reshape", ["x", "shape"], ["r"]),
            helper.make_node("Relu", ["r"], ["y"]),
        ],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])],
    )


def test_a_needed_constant_is_frozen_at_the_first_run():
    rep = PackagerBackend.prepare(reshape_by_input())
    x = np.arange(-6, 6, dtype=np.float32).reshape(2, 6)
    (y,) = rep.run({"x": x, "shape": np.array([3, 4], np.int64)})
    np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(3, 4))
    (y,) = rep.run([x * 2, np.array([3, 4], np.int64)])  # same shape value: same package
    np.testing.assert_array_equal(y, np.maximum(x * 2, 0).reshape(3, 4))
    with pytest.raises(PackagerError, match="input 'shape' was frozen to the value of the first"):
        rep.run({"x": x, "shape": np.array([4, 3], np.int64)})


def test_value_shaped_ops_freeze_their_runtime_bounds():
    model = _model(
        [helper.make_node("Range", ["start", "limit", "delta"], ["y"])],
        [
            helper.make_tensor_value_info(n, TensorProto.INT32, [])
            for n in ("start", "limit", "delta")
        ],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [None])],
    )
    feeds = {n: np.array(v, np.int32) for n, v in (("start", 10), ("limit", 1), ("delta", -3))}
    (y,) = PackagerBackend.prepare(model).run(feeds)
    np.testing.assert_array_equal(y, [10, 7, 4])


def test_a_needed_value_computed_from_data_is_still_refused():
    # the shape comes from x's values, not from an input the runner could freeze alone
    model = _model(
        [
            helper.make_node("Cast", ["x"], ["s"], to=TensorProto.INT64),
            helper.make_node("Reshape", ["x", "s"], ["y"], name="rs"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])],
    )
    with pytest.raises(PackagerError, match=r"node 'rs' \(Reshape\): input 1 \(shape\) must be a"):
        PackagerBackend.prepare(model)
