"""MaxPool, AveragePool, LpPool and their global forms."""

from __future__ import annotations

from ._common import check_attrs
from ._window import kernel_shape, window_attrs
from .registry import converter

_WINDOW = {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides"}


def _pool_attrs(ctx, node) -> dict:
    x = ctx.value(node.input[0])
    if len(x.shape) < 3:
        ctx.fail(node, f"input must have batch, channel and spatial dims, got {list(x.shape)}")
    kernel = kernel_shape(ctx, node)
    if len(kernel) != len(x.shape) - 2:
        ctx.fail(node, f"kernel_shape {kernel} does not fit input {list(x.shape)}")
    ceil = int(ctx.attr(node, "ceil_mode", 0))
    if ceil and ctx.attr(node, "auto_pad", "NOTSET") != "NOTSET":
        ctx.fail(node, "attribute 'ceil_mode'=1 together with auto_pad is not supported")
    return {"kernel": kernel, "ceil_mode": ceil, **window_attrs(ctx, node, x.shape[2:], kernel)}


@converter("MaxPool")
def max_pool(ctx, node):
    check_attrs(ctx, node, _WINDOW | {"storage_order"})
    attrs = _pool_attrs(ctx, node)
    nodes = [ctx.node("max_pool", node, [node.input[0]], outputs=node.output[:1], **attrs)]
    if len(node.output) > 1 and node.output[1]:
        if len(ctx.value(node.input[0]).shape) != 2 + len(attrs["kernel"]):
            ctx.fail(node, "the Indices output needs a plain (N, C, spatial...) input")
        order = int(ctx.attr(node, "storage_order", 0))
        outs = [node.output[1]]
        indices = ctx.node(
            "max_pool_indices", node, [node.input[0]], outputs=outs, storage_order=order, **attrs
        )
        nodes.append(indices)
    return nodes


@converter("AveragePool")
def avg_pool(ctx, node):
    check_attrs(ctx, node, _WINDOW | {"count_include_pad"})
    return [
        ctx.node(
            "avg_pool",
            node,
            [node.input[0]],
            **_pool_attrs(ctx, node),
            count_include_pad=int(ctx.attr(node, "count_include_pad", 0)),
        )
    ]


@converter("LpPool")
def lp_pool(ctx, node):
    check_attrs(ctx, node, _WINDOW | {"p"})
    return [
        ctx.node(
            "lp_pool",
            node,
            [node.input[0]],
            **_pool_attrs(ctx, node),
            p=float(ctx.attr(node, "p", 2)),
        )
    ]


def _spatial_axes(ctx, node) -> list[int]:
    x = ctx.value(node.input[0])
    if len(x.shape) < 3:
        ctx.fail(node, f"input must have batch, channel and spatial dims, got {list(x.shape)}")
    return list(range(2, len(x.shape)))


@converter("GlobalAveragePool", "GlobalMaxPool")
def global_pool(ctx, node):
    check_attrs(ctx, node, set())
    op = "reduce_mean" if node.op_type == "GlobalAveragePool" else "reduce_max"
    return [ctx.node(op, node, [node.input[0]], axes=_spatial_axes(ctx, node), keepdims=1)]


@converter("GlobalLpPool")
def global_lp_pool(ctx, node):
    check_attrs(ctx, node, {"p"})
    x = ctx.value(node.input[0])
    kernel = [x.shape[a] for a in _spatial_axes(ctx, node)]
    return [
        ctx.node("lp_pool", node, [node.input[0]], kernel=kernel, p=float(ctx.attr(node, "p", 2)))
    ]
