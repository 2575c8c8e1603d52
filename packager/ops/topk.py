"""TopK along one axis: each element's rank (how many elements come before it: greater,
or smaller for the smallest k, ties broken by the lower index) is a counting reduction,
and output k gathers the element of rank k, so the op is reductions only, with no sort.
"""

from __future__ import annotations

from .. import te
from .registry import register_op


def _rank(x: te.Tensor, axis: int, largest: bool) -> te.Tensor:
    j = te.reduce_axis(x.shape[axis], "j")

    def f(*i):
        other = list(i)
        other[axis] = j.var
        a, b = x[tuple(other)], x[i]
        beats = b < a if largest else a < b
        first = te.all_of(te.eq(a, b), j.var < i[axis])
        one = te.const(1, "int64")
        return te.sum(one, j, where=te.any_of(beats, first))

    return te.compute(x.shape, f, name="topk_rank", tag="reduce")


@register_op("topk", "opaque")
def topk(inputs, attrs):
    """attrs: k, axis (>= 0), largest. Outputs: values, int64 indices, in rank order."""
    (x,) = inputs
    axis, k = attrs["axis"], int(attrs["k"])
    rank = _rank(x, axis, bool(attrs.get("largest", 1)))
    shape = list(x.shape)
    shape[axis] = k

    def pick(value_of, name):
        def f(*i):
            j = te.reduce_axis(x.shape[axis], "j")
            src = list(i)
            src[axis] = j.var
            hit = te.eq(rank[tuple(src)], te.cast("int64", i[axis]))
            return te.sum(value_of(tuple(src), j), j, where=hit)

        return te.compute(tuple(shape), f, name=name, tag="reduce")

    values = pick(lambda src, j: x[src], "topk_values")
    indices = pick(lambda src, j: te.cast("int64", j.var), "topk_indices")
    return [values, indices]
