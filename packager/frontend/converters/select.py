"""Compress (a constant condition: a gather of the kept positions) and ReverseSequence."""

from __future__ import annotations

import math

import numpy as np

from ._common import axis_in, check_attrs, reshaped
from .registry import converter


@converter("Compress")
def compress(ctx, node):
    """The kept positions are known once the condition is: the output is their gather."""
    check_attrs(ctx, node, {"axis"})
    shape = ctx.value(node.input[0]).shape
    cond = np.asarray(ctx.const(node, 1, "condition")).reshape(-1).astype(bool)
    nodes = []
    axis = ctx.attr(node, "axis", None)
    if axis is None:
        src = reshaped(ctx, node, node.input[0], [math.prod(shape)], nodes)
        axis, length = 0, math.prod(shape)
    else:
        axis = axis_in(ctx, node, int(axis), len(shape))
        src, length = node.input[0], shape[axis]
    if cond.size > length:
        ctx.fail(node, f"condition has {cond.size} values, more than the {length} it selects from")
    kept = ctx.add_const(np.flatnonzero(cond).astype(np.int64), f"{node.output[0]}_kept")
    nodes.append(ctx.node("gather", node, [src, kept], axis=axis))
    return nodes


@converter("ReverseSequence")
def reverse_sequence(ctx, node):
    check_attrs(ctx, node, {"batch_axis", "time_axis"})
    shape = ctx.value(node.input[0]).shape
    if len(shape) < 2:
        ctx.fail(node, f"input must have at least 2 dims, not {list(shape)}")
    batch = axis_in(ctx, node, int(ctx.attr(node, "batch_axis", 1)), 2)
    time = axis_in(ctx, node, int(ctx.attr(node, "time_axis", 0)), 2)
    if batch == time:
        ctx.fail(node, "batch_axis and time_axis must differ")
    lens = ctx.value(node.input[1])
    if tuple(lens.shape) != (shape[batch],) or lens.dtype not in ("int32", "int64"):
        ctx.fail(
            node,
            f"sequence_lens must be int32/int64 of shape [{shape[batch]}], not "
            f"{lens.dtype}{list(lens.shape)}",
        )
    return [
        ctx.node("reverse_sequence", node, list(node.input[:2]), batch_axis=batch, time_axis=time)
    ]
