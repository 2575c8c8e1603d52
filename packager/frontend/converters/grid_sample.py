"""GridSample (opset 16: bilinear/bicubic over 4-D; 20+: linear/cubic over any rank)."""

from __future__ import annotations

from ._common import check_attrs
from .registry import converter

# opset 16's names, then 20's
_MODES = {
    "bilinear": "linear",
    "bicubic": "cubic",
    "nearest": "nearest",
    "linear": "linear",
    "cubic": "cubic",
}
_PADDING = ("zeros", "border", "reflection")


@converter("GridSample")
def grid_sample(ctx, node):
    check_attrs(ctx, node, {"mode", "padding_mode", "align_corners"})
    x, grid = (ctx.value(n).shape for n in node.input[:2])
    if len(x) < 3 or len(grid) != len(x) or grid[0] != x[0] or grid[-1] != len(x) - 2:
        ctx.fail(
            node,
            f"input {list(x)} and grid {list(grid)} must be (N, C, D1...Dr) and "
            "(N, D1_out...Dr_out, r)",
        )
    mode = ctx.attr(node, "mode", "bilinear" if ctx.opset < 20 else "linear")
    padding = ctx.attr(node, "padding_mode", "zeros")
    if mode not in _MODES:
        ctx.fail(node, f"attribute 'mode' value {mode!r} is not supported")
    if padding not in _PADDING:
        ctx.fail(node, f"attribute 'padding_mode' value {padding!r} is not supported")
    return [
        ctx.node(
            "grid_sample",
            node,
            list(node.input[:2]),
            mode=_MODES[mode],
            padding_mode=padding,
            align_corners=int(ctx.attr(node, "align_corners", 0)),
        )
    ]
