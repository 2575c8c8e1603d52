"""CumSum and CumProd: the axis input must be a constant."""

from __future__ import annotations

from ._common import axis_in, check_attrs, scalar
from .registry import converter


@converter("CumSum", "CumProd")
def cumulative(ctx, node):
    check_attrs(ctx, node, {"exclusive", "reverse"})
    ndim = len(ctx.value(node.input[0]).shape)
    axis = axis_in(ctx, node, int(scalar(ctx, node, 1, "axis")), ndim)
    op = "cumsum" if node.op_type == "CumSum" else "cumprod"
    return [
        ctx.node(
            op,
            node,
            [node.input[0]],
            axis=axis,
            exclusive=int(ctx.attr(node, "exclusive", 0)),
            reverse=int(ctx.attr(node, "reverse", 0)),
        )
    ]
