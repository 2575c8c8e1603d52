"""AffineGrid: the size input must be a constant."""

from __future__ import annotations

from ._common import check_attrs, ints
from .registry import converter


@converter("AffineGrid")
def affine_grid(ctx, node):
    check_attrs(ctx, node, {"align_corners"})
    size = ints(ctx, node, 1, "size")
    theta = ctx.value(node.input[0]).shape
    r = len(size) - 2
    if r not in (2, 3) or tuple(theta) != (size[0], r, r + 1) or min(size) < 1:
        ctx.fail(
            node,
            f"theta {list(theta)} and size {size} must be (N, 2, 3) with (N, C, H, W) or "
            "(N, 3, 4) with (N, C, D, H, W)",
        )
    align = int(ctx.attr(node, "align_corners", 0))
    return [ctx.node("affine_grid", node, [node.input[0]], size=size, align_corners=align)]
