"""ScatterElements and ScatterND: each output element gathers the updates aimed at it.

Instead of writing updates into a copy of the data (an order-dependent loop), output
element p reduces over the updates whose index equals p's: a sum, product, max or min
combined with the data, or, without a reduction, the last such update (the one a
sequential scatter would leave). The ops are reductions, so every output element is
computed independently and the loops vectorize and thread like any other.
"""

from __future__ import annotations

import math

from .. import te
from .registry import register_op

# reduction -> (combiner over the hits, how the data element joins the result)
_COMBINE = {
    "add": (te.sum, lambda d, r: d + r),
    "mul": (te.prod, lambda d, r: d * r),
    "max": (te.max_reduce, te.max_),
    "min": (te.min_reduce, te.min_),
}


def _wrapped(i: te.Expr, n: int) -> te.Expr:
    """Index ``i`` with a negative value counted from the end (as INDEX, not clamped)."""
    i = te.cast(te.INDEX, i)
    return te.select(i < 0, i + n, i)


def _scatter(data, hits, update_at, reduce_axes, reduction, name):
    """Output = data combined with the updates where ``hits(p)`` holds.

    ``hits(p)``: the condition over ``reduce_axes`` that an update lands on p;
    ``update_at(p)``: that update's value; both in terms of the reduce axes' vars."""
    if reduction == "none":
        # the last hit, by its linear position over the reduce axes; -1 when none
        sizes = [a.extent for a in reduce_axes]

        def last_of(*p):
            lin = te.const(0, te.INDEX)
            for a, n in zip(reduce_axes, sizes, strict=True):
                lin = lin * n + a.var
            return te.max_reduce(te.select(hits(p), lin, te.const(-1, te.INDEX)), reduce_axes)

        last = te.compute(data.shape, last_of, name=f"{name}_last", tag="reduce")

        def pick(*p):
            k = last[p]
            pos, rest = [], te.max_(k, te.const(0, te.INDEX))
            for n in reversed(sizes):
                pos.append(rest % n)
                rest = rest // n
            return te.select(k < 0, data[p], update_at(p, tuple(reversed(pos))))

        return te.compute(data.shape, pick, name=name, tag="injective")
    combine, join = _COMBINE[reduction]

    def f(*p):
        upd = update_at(p, tuple(a.var for a in reduce_axes))
        return combine(upd, reduce_axes, where=hits(p))

    # no hit leaves the reduction's identity, which the data element absorbs
    gathered = te.compute(data.shape, f, name=f"{name}_{reduction}", tag="reduce")
    return te.compute(data.shape, lambda *p: join(data[p], gathered[p]), name=name, tag="elemwise")


@register_op("scatter_elements", "opaque")
def scatter_elements(inputs, attrs):
    """attrs: axis (>= 0), reduction (none, add, mul, max, min)."""
    data, ind, upd = inputs
    axis = attrs["axis"]
    q = te.reduce_axis(ind.shape[axis], "q")

    def at(p, qv):
        return tuple(
            qv[0] if d == axis else te.min_(p[d], ind.shape[d] - 1) for d in range(data.ndim)
        )

    def hits(p):
        inside = [p[d] < ind.shape[d] for d in range(data.ndim) if d != axis]
        hit = te.eq(_wrapped(ind[at(p, (q.var,))], data.shape[axis]), p[axis])
        return te.all_of(*inside, hit) if inside else hit

    return [
        _scatter(
            data,
            hits,
            lambda p, qv: upd[at(p, qv)],
            [q],
            attrs.get("reduction", "none"),
            "scatter_elements",
        )
    ]


@register_op("scatter_nd", "opaque")
def scatter_nd(inputs, attrs):
    """attrs: reduction (none, add, mul, max, min). indices (..., k) address the first k
    dims of data; updates (..., data.shape[k:])."""
    data, ind, upd = inputs
    k = ind.shape[-1]
    lead = ind.shape[:-1]
    us = [te.reduce_axis(n, f"u{j}") for j, n in enumerate(lead)] or [te.reduce_axis(1, "u0")]
    flat = not lead  # a single index tuple: indices is (k,)

    def ind_at(uv, j):
        return ind[(j,)] if flat else ind[(*uv, j)]

    def hits(p):
        uv = tuple(a.var for a in us)
        conds = [te.eq(_wrapped(ind_at(uv, j), data.shape[j]), p[j]) for j in range(k)]
        return te.all_of(*conds)

    def update_at(p, uv):
        return upd[tuple(p[k:])] if flat else upd[(*uv, *p[k:])]

    if math.prod(lead) == 0:
        return [te.compute(data.shape, lambda *p: data[p], name="scatter_nd", tag="injective")]
    return [_scatter(data, hits, update_at, us, attrs.get("reduction", "none"), "scatter_nd")]
