"""Reduce* ops and ArgMax/ArgMin."""

from __future__ import annotations

from ._common import axis_in, check_attrs, ints
from .registry import converter

# ONNX op -> (library op, first opset where axes is an input rather than an attribute)
REDUCE_OPS = {
    "ReduceSum": ("reduce_sum", 13),
    "ReduceMean": ("reduce_mean", 18),
    "ReduceMax": ("reduce_max", 18),
    "ReduceMin": ("reduce_min", 18),
    "ReduceProd": ("reduce_prod", 18),
    "ReduceL1": ("reduce_l1", 18),
    "ReduceL2": ("reduce_l2", 18),
    "ReduceLogSum": ("reduce_log_sum", 18),
    "ReduceLogSumExp": ("reduce_log_sum_exp", 18),
    "ReduceSumSquare": ("reduce_sum_square", 18),
}


@converter(*REDUCE_OPS)
def reduce(ctx, node):
    op, axes_input_from = REDUCE_OPS[node.op_type]
    check_attrs(ctx, node, {"axes", "keepdims", "noop_with_empty_axes"})
    ndim = len(ctx.value(node.input[0]).shape)
    if ctx.opset >= axes_input_from:
        axes = ints(ctx, node, 1, "axes")
    else:
        axes = ctx.attr(node, "axes")
    if not axes:
        # No axes: all of them, unless noop_with_empty_axes asks for no reduction.
        axes = [] if ctx.attr(node, "noop_with_empty_axes", 0) else list(range(ndim))
    axes = sorted({axis_in(ctx, node, int(a), ndim) for a in axes})
    return [
        ctx.node(op, node, [node.input[0]], axes=axes, keepdims=int(ctx.attr(node, "keepdims", 1)))
    ]


@converter("ArgMax", "ArgMin")
def arg_extreme(ctx, node):
    check_attrs(ctx, node, {"axis", "keepdims", "select_last_index"})
    ndim = len(ctx.value(node.input[0]).shape)
    return [
        ctx.node(
            node.op_type.lower(),
            node,
            [node.input[0]],
            axis=axis_in(ctx, node, int(ctx.attr(node, "axis", 0)), ndim),
            keepdims=int(ctx.attr(node, "keepdims", 1)),
            select_last_index=int(ctx.attr(node, "select_last_index", 0)),
        )
    ]
