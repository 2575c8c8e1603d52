"""packager/quantize/exact.py: a QDQ model's arithmetic in float64."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from packager.quantize.exact import float64_copy, float64_runner, step_agreement

# scales under which (q * SA) / SY, each step rounded to float32, lands on the other side
# of a half than the real quotient for q = 17 and 221
SA, SY = np.float32(0.09922462), np.float32(0.0025694112)


def _requantize_model(quantize_input: bool = False) -> onnx.ModelProto:
    """q (uint8) -> DequantizeLinear(SA) -> QuantizeLinear(SY) -> uint16; with
    ``quantize_input`` a float input quantized by SA first (its scale shared, as onnxruntime
    writes it)."""
    nodes = [
        helper.make_node("DequantizeLinear", ["q", "sa", "zp8"], ["x"]),
        helper.make_node("QuantizeLinear", ["x", "sy", "zp16"], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info("q", TensorProto.UINT8, [256])]
    if quantize_input:
        nodes.insert(0, helper.make_node("QuantizeLinear", ["f", "sa", "zp8"], ["q"]))
        inputs = [helper.make_tensor_value_info("f", TensorProto.FLOAT, [256])]
    inits = [
        numpy_helper.from_array(np.array(SA), "sa"),
        numpy_helper.from_array(np.array(SY), "sy"),
        numpy_helper.from_array(np.array(0, np.uint8), "zp8"),
        numpy_helper.from_array(np.array(0, np.uint16), "zp16"),
    ]
    graph = helper.make_graph(
        nodes,
        "requantize",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.UINT16, [256])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_requantization_rounds_the_real_quotient_where_float32_rounds_the_other_way():
    q = np.arange(256, dtype=np.uint8)
    real = np.rint(q.astype(np.float64) * float(SA) / float(SY))  # half to even
    f32 = ReferenceEvaluator(_requantize_model()).run(None, {"q": q})[0]
    (wrong,) = np.nonzero(f32 != real)
    assert wrong.tolist() == [17, 221]  # float32 is one step off there
    got = float64_runner(_requantize_model())({"q": q})[0]
    assert got.dtype == np.uint16 and np.array_equal(got, real)


def test_the_inputs_are_quantized_in_float32_and_everything_after_in_float64():
    model = _requantize_model(quantize_input=True)
    wide = float64_copy(model)
    inits = {t.name: t for t in wide.graph.initializer}
    q_in = wide.graph.node[0]
    assert q_in.input[0] == "f" and q_in.input[1] != "sa"  # a float32 copy of its own
    assert inits[q_in.input[1]].data_type == TensorProto.FLOAT
    assert inits["sa"].data_type == inits["sy"].data_type == TensorProto.DOUBLE
    assert wide.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert model.graph.initializer[0].data_type == TensorProto.FLOAT  # the model unchanged
    f = (np.arange(256, dtype=np.float32) * SA).astype(np.float32)
    q = np.clip(np.rint(f / SA), 0, 255)  # in float32, as the model says
    real = np.rint(q.astype(np.float64) * float(SA) / float(SY))
    assert np.array_equal(float64_runner(model)({"f": f})[0], real)


def test_step_agreement_counts_within_one_step_and_equal():
    want = np.array([0.0, 0.5, 1.0, 1.5])
    got = np.array([0.0, 1.0, 2.0, 1.5])  # equal, one step off, two steps off, equal
    assert step_agreement(got, want, 0.5) == (0.75, 0.5)
