"""Cumulative sum and product along one axis (ONNX CumSum, CumProd).

Each output element is a reduction over the axis with a bound on the reduction index
(``k <= i``, ``k < i`` when exclusive, mirrored when reversed), so the op is a plain
reduction to schedules and to the fuser.
"""

from __future__ import annotations

from .. import te
from .registry import register_op

# (exclusive, reverse) -> whether reduction index k joins output index i's element.
_BOUNDS = {
    (False, False): lambda k, i: k <= i,
    (True, False): lambda k, i: k < i,
    (False, True): lambda k, i: k >= i,
    (True, True): lambda k, i: k > i,
}


def _cumulative(x: te.Tensor, attrs: dict, combine, name: str) -> te.Tensor:
    axis = attrs["axis"]
    k = te.reduce_axis(x.shape[axis], "k")
    inside = _BOUNDS[(bool(attrs.get("exclusive")), bool(attrs.get("reverse")))]

    def f(*i):
        idx = list(i)
        idx[axis] = k.var
        return combine(x[tuple(idx)], k, where=inside(k.var, i[axis]))

    return te.compute(x.shape, f, name=name, tag="reduce")


@register_op("cumsum", "opaque")
def cumsum(inputs, attrs):
    """attrs: axis (>= 0), exclusive, reverse."""
    return [_cumulative(inputs[0], attrs, te.sum, "cumsum")]


@register_op("cumprod", "opaque")
def cumprod(inputs, attrs):
    """attrs: axis (>= 0), exclusive, reverse."""
    return [_cumulative(inputs[0], attrs, te.prod, "cumprod")]
