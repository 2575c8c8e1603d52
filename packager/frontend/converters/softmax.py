"""Softmax, LogSoftmax and Hardmax: opset < 13 flattens at ``axis``, later opsets
normalize along the one axis."""

from __future__ import annotations

from ._common import axis_in, check_attrs
from .registry import converter

_OPS = {"Softmax": "softmax", "LogSoftmax": "log_softmax", "Hardmax": "hardmax"}


@converter(*_OPS)
def softmax(ctx, node):
    check_attrs(ctx, node, {"axis"})
    ndim = len(ctx.value(node.input[0]).shape)
    new = ctx.opset >= 13
    axis = axis_in(ctx, node, int(ctx.attr(node, "axis", -1 if new else 1)), max(ndim, 1))
    axes = [axis] if new else list(range(axis, ndim))
    return [ctx.node(_OPS[node.op_type], node, [node.input[0]], axes=axes)]
