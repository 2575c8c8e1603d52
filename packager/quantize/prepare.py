"""The float model made ready to quantize: opset 13 at least (per-axis DequantizeLinear needs
it) and each batch normalization after a Conv folded into the Conv's weights and bias, so the
per-channel weight scales take in the normalization's scale as well."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper, version_converter

from ..errors import PackagerError

MIN_OPSET = 13


def opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def at_least_opset_13(model: onnx.ModelProto, path: str) -> onnx.ModelProto:
    if opset(model) >= MIN_OPSET:
        return model
    try:
        model = version_converter.convert_version(model, MIN_OPSET)
    except Exception as e:  # the converter raises bare RuntimeErrors
        raise PackagerError(
            f"{path}: opset {opset(model)} could not be converted to opset {MIN_OPSET}, which "
            f"quantization needs (per-axis DequantizeLinear): {e}"
        ) from None
    return _initializers_not_inputs(model)


def _initializers_not_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """An IR version 3 model (the onnx package's light zoo among them) lists every
    initializer as a graph input too, and may add none that is not one; the converter
    keeps its IR version. The quantized model adds scales and zero points: it takes the
    IR version opset 13 needs, and its weights stop being inputs (in IR 3 they could not
    be fed, so nothing changes for a caller)."""
    need = onnx.helper.find_min_ir_version_for(list(model.opset_import))
    if model.ir_version >= max(need, 4):
        return model
    model.ir_version = max(need, 4)
    inits = {t.name for t in model.graph.initializer}
    keep = [i for i in model.graph.input if i.name not in inits]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    return model


def _consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    uses: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for i in n.input:
            uses.setdefault(i, []).append(n)
    return uses


def _foldable(conv, bn, inits, uses, outputs) -> bool:
    return (
        bn.op_type == "BatchNormalization"
        and len(bn.output) == 1
        and conv.output[0] not in outputs
        and len(uses.get(conv.output[0], [])) == 1
        and all(name in inits for name in list(conv.input[1:]) + list(bn.input[1:]))
    )


def _fold(conv, bn, inits) -> None:
    """Conv's weight and bias absorb bn; conv writes bn's output."""
    w = numpy_helper.to_array(inits[conv.input[1]]).astype(np.float64)
    gamma, beta, mean, var = (
        numpy_helper.to_array(inits[n]).astype(np.float64) for n in bn.input[1:]
    )
    eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
    scale = gamma / np.sqrt(var + eps)
    b = numpy_helper.to_array(inits[conv.input[2]]) if len(conv.input) > 2 else 0.0
    w_name = f"{conv.input[1]}_bnfold"
    b_name = f"{conv.output[0]}_bias_bnfold"
    shape = (-1,) + (1,) * (w.ndim - 1)
    inits[w_name] = numpy_helper.from_array((w * scale.reshape(shape)).astype(np.float32), w_name)
    inits[b_name] = numpy_helper.from_array(((b - mean) * scale + beta).astype(np.float32), b_name)
    del conv.input[1:]
    conv.input.extend([w_name, b_name])
    conv.output[0] = bn.output[0]


def fold_batch_norms(model: onnx.ModelProto) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())  # the caller's stays as is
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    outputs = {o.name for o in g.output}
    uses = _consumers(g)
    dropped = set()
    for conv in g.node:
        if conv.op_type != "Conv" or len(conv.input) < 2:
            continue
        users = uses.get(conv.output[0], [])
        if users and _foldable(conv, users[0], inits, uses, outputs):
            dropped.add(id(users[0]))
            _fold(conv, users[0], inits)
    kept = [n for n in g.node if id(n) not in dropped]
    used = {i for n in kept for i in n.input} | {i.name for i in g.input}
    del g.node[:]
    g.node.extend(kept)
    del g.initializer[:]
    g.initializer.extend(t for name, t in inits.items() if name in used)
    return model


def constant_of_shape_folded(model: onnx.ModelProto) -> onnx.ModelProto:
    """Each ConstantOfShape of a constant shape replaced by the initializer it makes, so
    weights a model builds that way (the onnx light zoo's) are quantized as weights."""
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    made = []
    for n in g.node:
        if n.op_type != "ConstantOfShape" or not n.input or n.input[0] not in inits:
            continue
        shape = numpy_helper.to_array(inits[n.input[0]]).astype(np.int64)
        value = next((a.t for a in n.attribute if a.name == "value"), None)
        fill = numpy_helper.to_array(value) if value is not None else np.zeros(1, np.float32)
        made.append(n)
        g.initializer.append(
            numpy_helper.from_array(np.full(shape, fill.reshape(-1)[0]), n.output[0])
        )
    if made:
        kept = [n for n in g.node if all(n is not m for m in made)]
        del g.node[:]
        g.node.extend(kept)
    return model


def prepare(model: onnx.ModelProto, path: str) -> onnx.ModelProto:
    model = at_least_opset_13(model, path)
    if any(n.op_type == "ConstantOfShape" for n in model.graph.node):
        model = constant_of_shape_folded(onnx.ModelProto.FromString(model.SerializeToString()))
    return fold_batch_norms(model)
