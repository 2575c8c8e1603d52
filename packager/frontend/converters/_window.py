"""Strides, dilations and explicit pads of conv, conv_transpose and pooling nodes.

auto_pad is resolved here so library ops only ever see explicit pads.
"""

from __future__ import annotations

import onnx

from ..context import ConvertContext

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _list(ctx, node, name: str, nd: int, default: int) -> list[int]:
    v = ctx.attr(node, name)
    if v is None or len(v) == 0:
        return [default] * nd
    if len(v) != nd:
        ctx.fail(node, f"attribute '{name}' has {len(v)} values, expected {nd}")
    return [int(x) for x in v]


def same_pads(total: int, mode: str) -> tuple[int, int]:
    """Split ``total`` padding: SAME_UPPER puts the odd element at the end."""
    small = total // 2
    return (small, total - small) if mode == "SAME_UPPER" else (total - small, small)


def window_attrs(ctx: ConvertContext, node: onnx.NodeProto, sizes, kernel) -> dict:
    """strides, dilations and explicit pads (all begins, then all ends) for a window
    of ``kernel`` sliding over spatial ``sizes``; auto_pad SAME_* keeps ceil(n/s)."""
    nd = len(kernel)
    strides = _list(ctx, node, "strides", nd, 1)
    dilations = _list(ctx, node, "dilations", nd, 1)
    auto_pad = ctx.attr(node, "auto_pad", "NOTSET")
    if auto_pad not in AUTO_PADS:
        ctx.fail(node, f"attribute 'auto_pad' value {auto_pad!r} is not supported")
    pads = [0] * (2 * nd) if auto_pad == "VALID" else _list(ctx, node, "pads", 2 * nd, 0)
    if auto_pad.startswith("SAME"):
        for i in range(nd):
            out = -(-sizes[i] // strides[i])
            span = (kernel[i] - 1) * dilations[i] + 1
            total = max(0, (out - 1) * strides[i] + span - sizes[i])
            pads[i], pads[nd + i] = same_pads(total, auto_pad)
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations):
        ctx.fail(node, f"strides {strides} and dilations {dilations} must be positive")
    return {"strides": strides, "dilations": dilations, "pads": pads}


def kernel_shape(ctx: ConvertContext, node: onnx.NodeProto, weight_shape=None) -> list[int]:
    """kernel_shape attribute, checked against the weight's spatial dims if given."""
    k = ctx.attr(node, "kernel_shape")
    if weight_shape is not None:
        w = [int(d) for d in weight_shape[2:]]
        if k and list(k) != w:
            ctx.fail(node, f"kernel_shape {list(k)} does not match the weight's {w}")
        return w
    if not k:
        ctx.fail(node, "attribute 'kernel_shape' is required")
    return [int(d) for d in k]
