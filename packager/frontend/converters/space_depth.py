"""DepthToSpace and SpaceToDepth."""

from __future__ import annotations

from ._common import check_attrs
from .registry import converter


def _blocksize(ctx, node) -> int:
    x = ctx.value(node.input[0])
    if len(x.shape) != 4:
        ctx.fail(node, f"input must be 4-D (NCHW), got {list(x.shape)}")
    b = ctx.attr(node, "blocksize")
    if b is None or b < 1:
        ctx.fail(node, "attribute 'blocksize' must be a positive int")
    return int(b)


def _mode(ctx, node) -> str:
    mode = ctx.attr(node, "mode", "DCR")
    if mode not in ("DCR", "CRD"):
        ctx.fail(node, f"attribute 'mode' value {mode!r} is not supported")
    return mode


@converter("DepthToSpace")
def depth_to_space(ctx, node):
    check_attrs(ctx, node, {"blocksize", "mode"})
    b = _blocksize(ctx, node)
    if ctx.value(node.input[0]).shape[1] % (b * b):
        ctx.fail(node, f"channels are not a multiple of blocksize^2 = {b * b}")
    return [ctx.node("depth_to_space", node, [node.input[0]], blocksize=b, mode=_mode(ctx, node))]


@converter("SpaceToDepth")
def space_to_depth(ctx, node):
    check_attrs(ctx, node, {"blocksize", "mode"})
    b = _blocksize(ctx, node)
    h, w = ctx.value(node.input[0]).shape[2:]
    if h % b or w % b:
        ctx.fail(node, f"spatial dims {[h, w]} are not multiples of blocksize {b}")
    return [ctx.node("space_to_depth", node, [node.input[0]], blocksize=b, mode=_mode(ctx, node))]
