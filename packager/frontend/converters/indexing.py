"""Converters of ONNX ops that index: Gather, GatherElements, OneHot, Trilu, EyeLike."""

from __future__ import annotations

import numpy as np

from ._common import axis_in, check_attrs, const_output, scalar
from .elementwise import dtype_from_onnx
from .registry import converter


def _ndim(ctx, name: str) -> int:
    return len(ctx.value(name).shape)


@converter("Gather", "GatherElements")
def gather(ctx, node):
    check_attrs(ctx, node, {"axis"})
    op = "gather" if node.op_type == "Gather" else "gather_elements"
    axis = axis_in(ctx, node, ctx.attr(node, "axis", 0), _ndim(ctx, node.input[0]))
    return [ctx.node(op, node, [node.input[0], node.input[1]], axis=axis)]


@converter("OneHot")
def one_hot(ctx, node):
    check_attrs(ctx, node, {"axis"})
    depth = scalar(ctx, node, 1, "depth")
    if depth is None or int(depth) < 1:
        ctx.fail(node, f"depth {depth} must be a positive constant")
    ndim = _ndim(ctx, node.input[0]) + 1
    axis = axis_in(ctx, node, ctx.attr(node, "axis", -1), ndim)
    return [ctx.node("one_hot", node, [node.input[0], node.input[2]], depth=int(depth), axis=axis)]


@converter("Trilu")
def trilu(ctx, node):
    """A constant k becomes an attr; a runtime k (it does not change the shape) an input."""
    check_attrs(ctx, node, {"upper"})
    upper = int(ctx.attr(node, "upper", 1))
    k = ctx.input_value(node, 1)
    if k is not None and not k.is_const:
        return [ctx.node("trilu", node, [node.input[0], node.input[1]], upper=upper)]
    k = scalar(ctx, node, 1, "k")
    return [ctx.node("trilu", node, [node.input[0]], upper=upper, k=int(k or 0))]


@converter("EyeLike")
def eye_like(ctx, node):
    """The output depends only on the (static) input shape: a constant."""
    check_attrs(ctx, node, {"dtype", "k"})
    x = ctx.value(node.input[0])
    if len(x.shape) != 2:
        ctx.fail(node, f"input must be 2-D, not {list(x.shape)}")
    to = ctx.attr(node, "dtype")
    dtype = x.dtype if to is None else dtype_from_onnx(ctx, node, to)
    eye = np.eye(*x.shape, k=ctx.attr(node, "k", 0), dtype=np.bool_ if dtype == "bool" else dtype)
    return [const_output(ctx, node, eye, node.output[0])]
