"""Pad: pads from the attribute (opset < 11) or a constant input, optional axes (18+);
CenterCropPad as a pad whose negative pads crop."""

from __future__ import annotations

from ._common import axis_in, check_attrs, ints, scalar
from .registry import converter

_MODES = ("constant", "reflect", "edge", "wrap")


def _pads_and_value(ctx, node):
    if ctx.opset < 11:
        pads = ctx.attr(node, "pads" if ctx.opset >= 2 else "paddings")
        return [int(p) for p in pads or []], ctx.attr(node, "value", 0.0), None
    pads = ints(ctx, node, 1, "pads")
    value = scalar(ctx, node, 2, "constant_value") if ctx.has_input(node, 2) else 0
    axes = ints(ctx, node, 3, "axes") if ctx.has_input(node, 3) else None
    return pads, value, axes


@converter("Pad")
def pad(ctx, node):
    check_attrs(ctx, node, {"mode", "pads", "paddings", "value"})
    ndim = len(ctx.value(node.input[0]).shape)
    mode = ctx.attr(node, "mode", "constant")
    if mode not in _MODES:
        ctx.fail(node, f"attribute 'mode' value {mode!r} is not supported")
    pads, value, axes = _pads_and_value(ctx, node)
    axes = list(range(ndim)) if axes is None else [axis_in(ctx, node, a, ndim) for a in axes]
    if len(pads) != 2 * len(axes):
        ctx.fail(node, f"pads has {len(pads)} values, expected {2 * len(axes)}")
    full = [0] * (2 * ndim)
    for i, a in enumerate(axes):
        full[a], full[ndim + a] = pads[i], pads[len(axes) + i]
    if mode != "constant" and min(full, default=0) < 0:
        ctx.fail(node, f"negative pads are only supported in constant mode, not {mode!r}")
    if mode in ("reflect", "wrap"):
        shape = ctx.value(node.input[0]).shape
        if any(shape[d] == 0 and (full[d] or full[ndim + d]) for d in range(ndim)):
            ctx.fail(node, f"cannot {mode}-pad an empty dim")
    return [ctx.node("pad", node, [node.input[0]], pads=full, mode=mode, value=value)]


def _centered(dim: int, size: int) -> tuple[int, int]:
    """(before, after) pads taking ``dim`` to ``size`` about the centre: negative ones crop;
    the odd element goes after, cropped or padded alike."""
    d = abs(size - dim)
    sign = 1 if size >= dim else -1
    return sign * (d // 2), sign * (d - d // 2)


@converter("CenterCropPad")
def center_crop_pad(ctx, node):
    """A constant-mode pad whose negative pads crop: one pass over the input."""
    check_attrs(ctx, node, {"axes"})
    shape = ctx.value(node.input[0]).shape
    ndim = len(shape)
    sizes = ints(ctx, node, 1, "shape")
    axes = ctx.attr(node, "axes", None)
    axes = list(range(ndim)) if axes is None else [axis_in(ctx, node, int(a), ndim) for a in axes]
    if len(sizes) != len(axes):
        ctx.fail(node, f"shape has {len(sizes)} values, expected one per axis ({len(axes)})")
    if len(set(axes)) != len(axes):
        ctx.fail(node, f"attribute 'axes' {axes} repeats an axis")
    full = [0] * (2 * ndim)
    for a, size in zip(axes, sizes, strict=True):
        if size < 0:
            ctx.fail(node, f"shape value {size} for axis {a} is negative")
        full[a], full[ndim + a] = _centered(shape[a], size)
    return [ctx.node("pad", node, [node.input[0]], pads=full, mode="constant", value=0)]
