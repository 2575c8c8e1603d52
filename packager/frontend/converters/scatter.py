"""ScatterElements (and its older name Scatter) and ScatterND."""

from __future__ import annotations

from ._common import axis_in, check_attrs
from .registry import converter

_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _reduction(ctx, node) -> str:
    reduction = ctx.attr(node, "reduction", "none")
    if reduction not in _REDUCTIONS:
        ctx.fail(node, f"attribute 'reduction' value {reduction!r} is not supported")
    return reduction


def _check_indices(ctx, node) -> None:
    dtype = ctx.value(node.input[1]).dtype
    if dtype not in ("int32", "int64"):
        ctx.fail(node, f"indices must be int32 or int64, not {dtype}")


@converter("ScatterElements", "Scatter")
def scatter_elements(ctx, node):
    check_attrs(ctx, node, {"axis", "reduction"})
    _check_indices(ctx, node)
    data, ind, upd = (ctx.value(n).shape for n in node.input[:3])
    axis = axis_in(ctx, node, int(ctx.attr(node, "axis", 0)), len(data))
    if (
        ind != upd
        or len(ind) != len(data)
        or any(a > b for d, (a, b) in enumerate(zip(ind, data, strict=True)) if d != axis)
    ):
        ctx.fail(
            node,
            f"indices {list(ind)} and updates {list(upd)} must have one shape, of data's "
            f"rank {len(data)} and no larger outside axis {axis}",
        )
    return [
        ctx.node(
            "scatter_elements",
            node,
            list(node.input[:3]),
            axis=axis,
            reduction=_reduction(ctx, node),
        )
    ]


@converter("ScatterND")
def scatter_nd(ctx, node):
    check_attrs(ctx, node, {"reduction"})
    _check_indices(ctx, node)
    data, ind, upd = (ctx.value(n).shape for n in node.input[:3])
    k = ind[-1] if ind else 0
    if not ind or not 1 <= k <= len(data) or tuple(upd) != (*ind[:-1], *data[k:]):
        ctx.fail(
            node,
            f"data {list(data)}, indices {list(ind)} and updates {list(upd)} do not fit "
            "(updates must be indices.shape[:-1] + data.shape[indices.shape[-1]:])",
        )
    return [ctx.node("scatter_nd", node, list(node.input[:3]), reduction=_reduction(ctx, node))]
