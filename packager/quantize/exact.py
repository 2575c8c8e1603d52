"""A QDQ model's arithmetic carried out in float64: the reference its integer kernels are
exact against.

A QDQ graph says: dequantize, compute in float, quantize (round half to even). Run in
float32 (ONNX Runtime with graph optimizations off, onnx's reference evaluator), each
conv's float32 sums carry an error of about 2^-24 of their magnitude, which decides the
rounding of every output that lies that close to a half step; a deep network (MobileNetV2:
66 quantized tensors) spreads each such one-step flip into the layers after it, so two
float32 implementations of one QDQ model disagree by more than a step on a large share of
its logits. In float64 those errors are 2^-53: the values the QDQ graph means, to which an
integer kernel (exact int32 sums, a 31-bit multiplier) is all but equal.

The model's inputs stay float32 and are quantized in float32 (their scale kept float32),
as the model says and as every float32 implementation does; everything after that is
float64: the dequantized weights, biases and activations, the float ops between, the
division by each QuantizeLinear's scale.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

_REFERENCE_OPSET = 21  # QuantizeLinear / DequantizeLinear with per-axis and int types


def float64_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every float32 initializer, constant and value in float64, except the
    graph inputs and the scales of the QuantizeLinear nodes that read one (those nodes get
    float32 copies of their own: the DequantizeLinear nodes sharing the scale widen)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for op in m.opset_import:
        if op.domain in ("", "ai.onnx") and op.version < _REFERENCE_OPSET:
            op.version = _REFERENCE_OPSET
    inputs = {i.name for i in m.graph.input}
    inits = {t.name: t for t in m.graph.initializer}
    for n in m.graph.node:  # such a scale gets a float32 copy of its own (DQs share it)
        if n.op_type == "QuantizeLinear" and n.input[0] in inputs and n.input[1] in inits:
            own = numpy_helper.to_array(inits[n.input[1]])
            n.input[1] = f"{n.input[1]}__float32_{len(m.graph.initializer)}"
            m.graph.initializer.append(numpy_helper.from_array(own, n.input[1]))
    for k, t in enumerate(m.graph.initializer):
        if t.data_type == TensorProto.FLOAT and t.name in inits and t.name not in inputs:
            wide = numpy_helper.to_array(t).astype(np.float64)
            m.graph.initializer[k].CopyFrom(numpy_helper.from_array(wide, t.name))
    for n in m.graph.node:  # Constant nodes hold values too
        for a in n.attribute:
            if a.name == "value" and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float64)))
    for v in list(m.graph.output) + list(m.graph.value_info):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.DOUBLE
    return m


def float64_runner(model: onnx.ModelProto) -> Callable[[dict], list[np.ndarray]]:
    """feeds (name -> array) -> the model's outputs, computed as ``float64_copy`` says
    with onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(float64_copy(model))
    return lambda feeds: evaluator.run(None, feeds)


def step_agreement(got: np.ndarray, want: np.ndarray, step: float) -> tuple[float, float]:
    """(share of elements within one step of ``want``, share equal to it to a hundredth of
    a step): outputs on a grid of ``step`` (a dequantized tensor)."""
    diff = np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))
    return float(np.mean(diff <= step * 1.001)), float(np.mean(diff <= step * 0.01))
