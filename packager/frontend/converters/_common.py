"""Helpers shared by the converters of the elementwise, shape and indexing ops."""

from __future__ import annotations

import numpy as np
import onnx

from ...graph.ir import Node
from ..context import ConvertContext

# Attributes of old opsets that carry no meaning for inference.
IGNORED_ATTRS = {"consumed_inputs"}


def check_attrs(ctx: ConvertContext, node: onnx.NodeProto, known) -> None:
    """Fail on an attribute the converter does not read (it would be silently dropped)."""
    for a in node.attribute:
        if a.name not in known and a.name not in IGNORED_ATTRS:
            ctx.fail(node, f"attribute '{a.name}' is not supported")


def ints(ctx: ConvertContext, node: onnx.NodeProto, i: int, what: str) -> list[int] | None:
    """Constant input ``i`` as a list of ints (None if absent)."""
    data = ctx.const(node, i, what)
    return None if data is None else [int(v) for v in np.asarray(data).reshape(-1)]


def scalar(ctx: ConvertContext, node: onnx.NodeProto, i: int, what: str):
    """Constant input ``i`` as one Python number (None if absent)."""
    data = ctx.const(node, i, what)
    if data is None:
        return None
    data = np.asarray(data)
    if data.size != 1:
        ctx.fail(node, f"input {i} ({what}) must have one element, not shape {list(data.shape)}")
    return data.reshape(-1)[0].item()


def reshaped(ctx: ConvertContext, node: onnx.NodeProto, name: str, shape, nodes: list[Node]) -> str:
    """A value holding ``name`` reshaped to ``shape``: a new constant, or a reshape node
    appended to ``nodes``."""
    v = ctx.value(name)
    shape = [int(d) for d in shape]
    if v.is_const:
        return ctx.add_const(np.asarray(v.data).reshape(shape), name)
    out = ctx.fresh(name)
    nodes.append(ctx.node("reshape", node, [name], outputs=[out], shape=shape))
    return out


def const_output(ctx: ConvertContext, node: onnx.NodeProto, array: np.ndarray, output: str) -> Node:
    """A node giving ONNX output ``output`` the constant ``array``."""
    return ctx.node("identity", node, [ctx.add_const(array, output)], outputs=[output])


def axis_in(ctx: ConvertContext, node: onnx.NodeProto, axis: int, ndim: int) -> int:
    """``axis`` made non-negative; fails the node if it is out of [-ndim, ndim)."""
    if not -ndim <= axis < ndim:
        ctx.fail(node, f"axis {axis} is out of range for {ndim} dims")
    return axis % ndim
