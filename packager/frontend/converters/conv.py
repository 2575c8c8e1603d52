"""Conv and ConvTranspose: explicit pads, optional bias kept as a node input."""

from __future__ import annotations

from ._common import check_attrs
from ._window import kernel_shape, same_pads, window_attrs
from .registry import converter
from .spectral import conv_as_frames

_WINDOW = {"auto_pad", "dilations", "kernel_shape", "pads", "strides"}


def _inputs(node) -> list[str]:
    """data, weight and the bias if present."""
    return [n for n in node.input[:3] if n]


def _spatial(ctx, node):
    x = ctx.value(node.input[0])
    w = ctx.value(node.input[1])
    if len(x.shape) < 3:
        ctx.fail(node, f"input must have batch, channel and spatial dims, got {list(x.shape)}")
    if len(w.shape) != len(x.shape):
        ctx.fail(node, f"weight {list(w.shape)} and input {list(x.shape)} differ in rank")
    return x, w, kernel_shape(ctx, node, w.shape)


def _group(ctx, node) -> int:
    group = int(ctx.attr(node, "group", 1))
    if group < 1:
        ctx.fail(node, f"group={group} must be positive")
    return group


@converter("Conv")
def conv(ctx, node):
    check_attrs(ctx, node, _WINDOW | {"group"})
    x, w, kernel = _spatial(ctx, node)
    group = _group(ctx, node)
    if x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        ctx.fail(node, f"group={group} does not fit input {list(x.shape)}, weight {list(w.shape)}")
    attrs = window_attrs(ctx, node, x.shape[2:], kernel)
    if group == 1 and (framed := conv_as_frames(ctx, node, attrs)):
        return framed
    if len(x.shape) == 3 and w.is_const:
        return _conv1d_as_2d(ctx, node, x, w, group, attrs)
    return [ctx.node("conv", node, _inputs(node), groups=group, **attrs)]


def _conv1d_as_2d(ctx, node, x, w, group: int, attrs: dict) -> list:
    """A 1-D conv as a 2-D one of height 1 (the same sums in the same order), so that it
    takes the 2-D conv's blocked layout and vectorized schedules instead of the generic
    N-d loop: [N, C, L] -> [N, C, 1, L] -> conv [O, I, 1, K] -> [N, O, L']."""
    x2 = ctx.fresh(f"{node.input[0]}/2d")
    w2 = ctx.add_const(w.data.reshape(w.shape[0], w.shape[1], 1, w.shape[2]), f"{node.input[1]}/2d")
    y2 = ctx.fresh(f"{node.output[0]}/2d")
    (s,), (d,), (p0, p1) = attrs["strides"], attrs["dilations"], attrs["pads"]
    out_len = (x.shape[2] + p0 + p1 - (w.shape[2] - 1) * d - 1) // s + 1
    ins = [x2, w2, *_inputs(node)[2:]]
    return [
        ctx.node(
            "reshape", node, [node.input[0]], outputs=[x2], shape=[*x.shape[:2], 1, x.shape[2]]
        ),
        ctx.node(
            "conv",
            node,
            ins,
            outputs=[y2],
            groups=group,
            strides=[1, s],
            dilations=[1, d],
            pads=[0, p0, 0, p1],
        ),
        ctx.node("reshape", node, [y2], shape=[x.shape[0], w.shape[0], out_len]),
    ]


@converter("ConvTranspose")
def conv_transpose(ctx, node):
    check_attrs(ctx, node, _WINDOW | {"group", "output_padding", "output_shape"})
    x, w, kernel = _spatial(ctx, node)
    nd = len(kernel)
    group = _group(ctx, node)
    if x.shape[1] != w.shape[0] or w.shape[0] % group:
        ctx.fail(node, f"group={group} does not fit input {list(x.shape)}, weight {list(w.shape)}")
    auto_pad = ctx.attr(node, "auto_pad", "NOTSET")
    # window_attrs' SAME pads are for a forward conv; the transposed ones follow below.
    attrs = window_attrs(ctx, node, x.shape[2:], [1] * nd)
    opad = [int(v) for v in ctx.attr(node, "output_padding", None) or [0] * nd]
    out_shape = ctx.attr(node, "output_shape")
    if out_shape is not None and len(out_shape) == len(x.shape):
        out_shape = out_shape[2:]  # older models give the full shape
    if auto_pad.startswith("SAME"):
        target = out_shape or [x.shape[2 + i] * attrs["strides"][i] for i in range(nd)]
        for i in range(nd):
            full = (
                attrs["strides"][i] * (x.shape[2 + i] - 1)
                + opad[i]
                + (kernel[i] - 1) * attrs["dilations"][i]
                + 1
            )
            attrs["pads"][i], attrs["pads"][nd + i] = same_pads(full - target[i], auto_pad)
    if out_shape:
        # Without auto_pad the given pads stay; a longer output_shape extends the end.
        attrs["output_shape"] = [int(v) for v in out_shape]
    return [
        ctx.node("conv_transpose", node, _inputs(node), groups=group, output_padding=opad, **attrs)
    ]
