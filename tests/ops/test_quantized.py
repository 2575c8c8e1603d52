"""Quantization converters against onnx's reference, on the packager's real bundles."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from packager.backend import PackagerBackend
from packager.graph.passes.quantize import fixed_point

_T = {np.float32: TensorProto.FLOAT, np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}


def _model(op, inputs: dict, consts: dict, out_type, out_shape, **attrs):
    """One-node model: ``inputs`` are graph inputs, ``consts`` initializers."""
    names = [*inputs, *consts]
    node = helper.make_node(op, names, ["y"], **attrs)
    g = helper.make_graph(
        [node],
        op,
        [helper.make_tensor_value_info(k, _T[v.dtype.type], v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", out_type, out_shape)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def _check(model, inputs: dict):
    want = ReferenceEvaluator(model).run(None, inputs)[0]
    got = PackagerBackend.prepare(model).run(list(inputs.values()))[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_quantize_per_axis_saturates_with_negative_zero_points():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 3, 4, 5)) * 60).astype(np.float32)
    x[0, 0, 0, :3] = [0.5, 1.5, -2.5]  # ties round half to even
    scale = np.array([0.5, 1.0, 0.25], np.float32)
    zp = np.array([-3, 0, 7], np.int8)
    m = _model("QuantizeLinear", {"x": x}, {"s": scale, "z": zp}, TensorProto.INT8, x.shape, axis=1)
    _check(m, {"x": x})


def test_dequantize_per_axis_uint8():
    x = np.random.default_rng(1).integers(0, 256, (4, 6), dtype=np.uint8)
    scale = np.linspace(0.01, 0.2, 4).astype(np.float32)
    zp = np.array([0, 128, 255, 3], np.uint8)
    m = _model(
        "DequantizeLinear", {"x": x}, {"s": scale, "z": zp}, TensorProto.FLOAT, x.shape, axis=0
    )
    _check(m, {"x": x})


@pytest.mark.parametrize("x_type", [np.uint8, np.int8])
def test_qlinear_conv_per_channel_padded_strided(x_type):
    """Constant weights, per-channel scales, a padded, strided conv, both saturations."""
    rng = np.random.default_rng(2)
    lo, hi = (0, 256) if x_type is np.uint8 else (-128, 128)
    x = rng.integers(lo, hi, (1, 6, 9, 9)).astype(x_type)
    w = rng.integers(-127, 128, (10, 6, 3, 3)).astype(np.int8)
    consts = {
        "xs": np.float32(0.02),
        "xz": np.array(7 if x_type is np.uint8 else -5, x_type),
        "w": w,
        "ws": rng.uniform(0.001, 0.01, 10).astype(np.float32),
        "wz": np.zeros(10, np.int8),
        "ys": np.float32(0.05),
        "yz": np.array(100 if x_type is np.uint8 else -20, x_type),
        "b": rng.integers(-5000, 5000, 10).astype(np.int32),
    }
    m = _model(
        "QLinearConv",
        {"x": x},
        consts,
        _T[x_type],
        (1, 10, 5, 5),
        pads=[1, 1, 1, 1],
        strides=[2, 2],
    )
    m.graph.node[0].input[:] = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"]
    want = ReferenceEvaluator(m).run(None, {"x": x})[0].astype(np.int32)
    got = PackagerBackend.prepare(m).run([x])[0].astype(np.int32)
    assert np.abs(got - want).max() <= 1
    assert (got == want).mean() >= 0.99
    lo, hi = (0, 255) if x_type is np.uint8 else (-128, 127)
    assert got.min() == lo and got.max() == hi  # saturation reached both ways


def test_fixed_point_multiplier_has_31_bits():
    for real in (0.3, 1e-5, 0.999999, 2.0**-40):
        mult, shift = fixed_point(real)
        assert 2**30 <= mult < 2**31 or shift == 62
        assert abs(mult * 2.0**-shift - real) <= real * 2**-30
    assert fixed_point(2.0**31) is None
    assert fixed_point(0.0) is None


def test_blocked_quantization_is_refused_by_name():
    x = np.zeros((2, 4), np.float32)
    m = _model(
        "QuantizeLinear", {"x": x}, {"s": np.ones((2, 2), np.float32)}, TensorProto.UINT8, x.shape
    )
    m.graph.node[0].attribute.append(helper.make_attribute("block_size", 2))
    m.opset_import[0].version = 21
    with pytest.raises(Exception, match="block_size"):
        PackagerBackend.prepare(m)
    onnx.checker.check_model(m)
