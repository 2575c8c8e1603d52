"""The QDQ rewrite: QuantizeLinear/DequantizeLinear pairs in the float graph, the layout
ONNX Runtime (and `packager build`) recognise as quantized ops.

- Activations: every float input of Conv, MatMul, Gemm and Add, and their outputs, each
  quantized once (all consumers read the one DequantizeLinear). An output whose only user
  is a Relu or Clip is quantized after it instead: Conv->Relu shares one Q, the fusion point.
- Weights: int8, symmetric, one scale per output channel (axis 0 for Conv, the output axis
  for MatMul and Gemm), behind a per-axis DequantizeLinear.
- Bias: int32 with scale x_scale * w_scale per channel, zero point 0.
- A channel Concat whose parts and output are all quantized puts them on one range (the
  union), so the integers concatenate as they are (concat_shared_ranges).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

WEIGHTED = ("Conv", "MatMul", "Gemm")
ELEMENTWISE = ("Add",)
FUSED = ("Relu", "Clip")
ACT_DTYPES = {"uint8": np.uint8, "int8": np.int8}


@dataclass
class Summary:
    nodes: int = 0  # Conv/MatMul/Gemm with quantized weights
    activations: int = 0
    biases: int = 0
    ops: dict[str, int] = field(default_factory=dict)


def _attr(node: onnx.NodeProto, name: str, default):
    a = next((a for a in node.attribute if a.name == name), None)
    return default if a is None else helper.get_attribute_value(a)


def weight_axis(node: onnx.NodeProto, ndim: int) -> int:
    """The output-channel axis of the node's weight (input 1)."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm":
        return 0 if _attr(node, "transB", 0) else 1
    return ndim - 1  # MatMul: [..., K, N]


def _float_types(model: onnx.ModelProto) -> dict[str, int]:
    g = shape_inference.infer_shapes(model).graph
    vis = list(g.input) + list(g.value_info) + list(g.output)
    return {v.name: v.type.tensor_type.elem_type for v in vis}


def _fused_output(t: str, uses: dict, graph_outputs: set[str]) -> str:
    while t not in graph_outputs and len(uses.get(t, [])) == 1 and uses[t][0].op_type in FUSED:
        t = uses[t][0].output[0]
    return t


def activation_tensors(model: onnx.ModelProto) -> list[str]:
    """The float activations to quantize, in graph order."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    types = _float_types(model)
    outputs = {o.name for o in g.output}
    uses: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for i in n.input:
            uses.setdefault(i, []).append(n)
    picked: dict[str, None] = {}
    for n in g.node:
        if n.op_type not in WEIGHTED + ELEMENTWISE:
            continue
        ins = n.input[:2]
        for t in [*ins, _fused_output(n.output[0], uses, outputs)]:
            if t and t not in inits and types.get(t, TensorProto.FLOAT) == TensorProto.FLOAT:
                picked[t] = None
    return list(picked)


def concat_shared_ranges(model: onnx.ModelProto, ranges: dict) -> dict:
    """The ranges with each channel Concat's parts and output on one range (the union of
    theirs), where all of them are quantized: the concat of their integers is then the
    quantized concat (graph/passes/int_moves.py), no requantize between. Parts shared by
    several concats (a dense block's) share one range with all of them."""
    parent = {t: t for t in ranges}

    def root(t: str) -> str:
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    for n in model.graph.node:
        tensors = [*n.input, *n.output]
        if n.op_type != "Concat" or _attr(n, "axis", 0) not in (1, -3):
            continue
        if all(t in ranges for t in tensors):
            for t in tensors[1:]:
                parent[root(t)] = root(tensors[0])
    union: dict[str, tuple[float, float]] = {}
    for t, (lo, hi) in ranges.items():
        r = root(t)
        u = union.get(r, (lo, hi))
        union[r] = (min(u[0], lo), max(u[1], hi))
    return {t: union[root(t)] for t in ranges}


def activation_qparams(lo: float, hi: float, dtype: str) -> tuple[float, np.ndarray]:
    """Scale and zero point: asymmetric over [min(lo, 0), max(hi, 0)] for uint8, symmetric
    over [-max|x|, max|x|] for int8."""
    if dtype == "int8":
        scale = max(abs(lo), abs(hi)) / 127.0
        return (scale or 1.0), np.array(0, np.int8)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255.0 or 1.0
    return scale, np.array(np.clip(round(-lo / scale), 0, 255), np.uint8)


WEIGHT_BITS = (8, 7)


def quantize_weight(w: np.ndarray, axis: int, bits: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """int8 values and per-channel scales along ``axis``, symmetric (zero point 0), in
    [-127, 127], or [-63, 63] with ``bits`` 7 (stored as int8 all the same)."""
    qmax = (1 << (bits - 1)) - 1
    other = tuple(i for i in range(w.ndim) if i != axis)
    absmax = np.abs(w).max(axis=other) if other else np.abs(w)
    scale = np.where(absmax > 0, absmax / qmax, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)), -qmax, qmax).astype(np.int8)
    return q, scale


def quantize_bias(b: np.ndarray, scale: np.ndarray) -> np.ndarray:
    lim = np.iinfo(np.int32)
    return np.clip(np.round(b.astype(np.float64) / scale), lim.min, lim.max).astype(np.int32)


class _Rewriter:
    def __init__(self, model: onnx.ModelProto, ranges: dict, activations: str, weight_bits: int):
        self.weight_bits = weight_bits
        self.g = model.graph
        self.inits = {t.name: t for t in self.g.initializer}
        self.taken = set(self.inits) | {i for n in self.g.node for i in [*n.input, *n.output]}
        self.taken |= {v.name for v in self.g.input}
        self.qparams = {
            t: activation_qparams(lo, hi, activations) for t, (lo, hi) in ranges.items()
        }
        self.dequantized: dict[str, str] = {}
        self.nodes: list[onnx.NodeProto] = []
        self.new_inits: list[onnx.TensorProto] = []
        self.summary = Summary(activations=len(ranges))

    def fresh(self, hint: str) -> str:
        name, k = hint, 1
        while name in self.taken:
            k += 1
            name = f"{hint}_{k}"
        self.taken.add(name)
        return name

    def const(self, hint: str, value: np.ndarray) -> str:
        name = self.fresh(hint)
        self.new_inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def dq(self, src: str, scale: str, zp: str, hint: str, axis: int | None = None) -> str:
        out = self.fresh(hint)
        attrs = {} if axis is None else {"axis": axis}
        self.nodes.append(
            helper.make_node("DequantizeLinear", [src, scale, zp], [out], out, **attrs)
        )
        return out

    def quantize_activation(self, t: str) -> None:
        scale, zp = self.qparams[t]
        s = self.const(f"{t}_scale", np.array(scale, np.float32))
        z = self.const(f"{t}_zero_point", zp)
        q = self.fresh(f"{t}_quantized")
        self.nodes.append(helper.make_node("QuantizeLinear", [t, s, z], [q], q))
        self.dequantized[t] = self.dq(q, s, z, f"{t}_dequantized")

    def weight(self, node: onnx.NodeProto) -> np.ndarray | None:
        """Quantize input 1 per channel; returns its scales, or None if it is no constant."""
        if len(node.input) < 2 or node.input[1] not in self.inits:
            return None
        w = numpy_helper.to_array(self.inits[node.input[1]])
        if w.dtype != np.float32 or w.ndim < 2:
            return None
        axis = weight_axis(node, w.ndim)
        q, scale = quantize_weight(w, axis, self.weight_bits)
        name = node.input[1]
        qn = self.const(f"{name}_quantized", q)
        s = self.const(f"{name}_scale", scale)
        z = self.const(f"{name}_zero_point", np.zeros(scale.shape, np.int8))
        node.input[1] = self.dq(qn, s, z, f"{name}_dequantized", axis)
        return scale

    def bias(self, node: onnx.NodeProto, w_scale: np.ndarray) -> None:
        x = node.input[0]
        if len(node.input) < 3 or node.input[2] not in self.inits or x not in self.qparams:
            return
        if node.op_type == "Gemm" and (_attr(node, "alpha", 1.0), _attr(node, "beta", 1.0)) != (
            1.0,
            1.0,
        ):
            return  # alpha scales the product but not the bias: no common scale
        b = numpy_helper.to_array(self.inits[node.input[2]])
        if b.dtype != np.float32 or b.shape != w_scale.shape:
            return
        scale = (self.qparams[x][0] * w_scale.astype(np.float64)).astype(np.float32)
        name = node.input[2]
        qn = self.const(f"{name}_quantized", quantize_bias(b, scale))
        s = self.const(f"{name}_scale", scale)
        z = self.const(f"{name}_zero_point", np.zeros(scale.shape, np.int32))
        node.input[2] = self.dq(qn, s, z, f"{name}_dequantized", 0)
        self.summary.biases += 1

    def visit(self, node: onnx.NodeProto) -> None:
        if node.op_type in WEIGHTED:
            w_scale = self.weight(node)
            if w_scale is not None:
                self.summary.nodes += 1
                self.summary.ops[node.op_type] = self.summary.ops.get(node.op_type, 0) + 1
                self.bias(node, w_scale)
        for i, t in enumerate(node.input):
            node.input[i] = self.dequantized.get(t, t)
        self.nodes.append(node)
        for t in node.output:
            if t in self.qparams:
                self.quantize_activation(t)

    def run(self) -> Summary:
        for v in self.g.input:
            if v.name in self.qparams:
                self.quantize_activation(v.name)
        for node in list(self.g.node):
            self.visit(node)
        used = {i for n in self.nodes for i in n.input} | {v.name for v in self.g.input}
        inits = [t for t in [*self.g.initializer, *self.new_inits] if t.name in used]
        del self.g.node[:]
        self.g.node.extend(self.nodes)
        del self.g.initializer[:]
        self.g.initializer.extend(inits)
        return self.summary


def rewrite(
    model: onnx.ModelProto,
    ranges: dict[str, tuple[float, float]],
    activations: str,
    weight_bits: int = 8,
):
    """A QDQ copy of ``model``; ``ranges``: (lo, hi) per activation to quantize."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    summary = _Rewriter(model, ranges, activations, weight_bits).run()
    return model, summary
