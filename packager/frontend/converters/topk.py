"""TopK: k must be a constant; both outputs are always computed."""

from __future__ import annotations

from ._common import axis_in, check_attrs, ints
from .registry import converter


@converter("TopK")
def topk(ctx, node):
    check_attrs(ctx, node, {"axis", "largest", "sorted", "k"})
    shape = ctx.value(node.input[0]).shape
    axis = axis_in(ctx, node, int(ctx.attr(node, "axis", -1)), len(shape))
    if ctx.opset < 10:
        k = int(ctx.attr(node, "k"))
    else:
        (k,) = ints(ctx, node, 1, "K")
    if not 0 <= k <= shape[axis]:
        ctx.fail(node, f"k={k} is out of range for axis {axis} of size {shape[axis]}")
    outs = list(node.output) + [""] * (2 - len(node.output))
    outs = [o or ctx.fresh(f"{node.output[0]}_unused") for o in outs]
    largest = int(ctx.attr(node, "largest", 1))
    return [ctx.node("topk", node, [node.input[0]], outputs=outs, k=k, axis=axis, largest=largest)]
