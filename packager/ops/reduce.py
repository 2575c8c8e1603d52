"""Reductions (reduce_sum, reduce_mean, ... as one table) and argmax/argmin.

attrs: axes (sorted, non-negative; empty: no reduction, the elementwise parts
still apply as ONNX's noop_with_empty_axes does), keepdims.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .. import te
from ._cpu import blocked_reduce_schedule
from .registry import register_op, register_schedule


def _ident(v, n):
    return v


def _square(v, n):
    return v * v


def _abs(v, n):
    return te.call("fabs", v) if te.is_float(v.dtype) else te.select(v < 0, -v, v)


def _mean(v, n):
    return v / te.const(n, v.dtype)


def _fn(name):
    return lambda v, n: te.call(name, v)


@dataclass(frozen=True)
class Reducer:
    combiner: str  # sum prod max min
    pre: Callable = _ident  # applied to each element (value, count)
    post: Callable = _ident  # applied to the combined value (value, count)


REDUCERS = {
    "reduce_sum": Reducer("sum"),
    "reduce_mean": Reducer("sum", post=_mean),
    "reduce_max": Reducer("max"),
    "reduce_min": Reducer("min"),
    "reduce_prod": Reducer("prod"),
    "reduce_l1": Reducer("sum", pre=_abs),
    "reduce_l2": Reducer("sum", pre=_square, post=_fn("sqrt")),
    "reduce_sum_square": Reducer("sum", pre=_square),
    "reduce_log_sum": Reducer("sum", post=_fn("log")),
}

_COMBINE = {"sum": te.sum, "prod": te.prod, "max": te.max_reduce, "min": te.min_reduce}


class Axes:
    """Maps output indices to input indices for a reduction over ``axes``."""

    def __init__(self, x: te.Tensor, axes, keepdims: bool, prefix: str = "r"):
        self.x = x
        self.axes = sorted(int(a) for a in axes)
        self.keepdims = keepdims
        self.rv = {a: te.reduce_axis(x.shape[a], f"{prefix}{a}") for a in self.axes}
        self.count = 1
        for a in self.axes:
            self.count *= x.shape[a]
        self.shape = [
            1 if a in self.rv else d for a, d in enumerate(x.shape) if keepdims or a not in self.rv
        ]

    def input_index(self, idx, with_reduce: bool = True) -> tuple:
        """Input index for output index ``idx``; reduced dims read the reduce vars
        (or 0 when ``with_reduce`` is false, for a keepdims-shaped broadcast)."""
        it = iter(idx)
        out = []
        for a in range(self.x.ndim):
            if a in self.rv:
                if self.keepdims:
                    next(it)
                out.append(self.rv[a] if with_reduce else 0)
            else:
                out.append(next(it))
        return tuple(out)

    @property
    def ivs(self) -> list[te.IterVar]:
        return list(self.rv.values())


def reduce_tensor(x: te.Tensor, op: str, axes, keepdims: bool = True, name=None) -> te.Tensor:
    r = REDUCERS[op]
    ax = Axes(x, axes, keepdims)
    name = name or op
    if not ax.axes:
        # noop_with_empty_axes: only the elementwise parts apply.
        return te.compute(x.shape, lambda *i: r.post(r.pre(x[i], 1), 1), name=name, tag="elemwise")
    combine = _COMBINE[r.combiner]
    red = te.compute(
        ax.shape,
        lambda *i: combine(r.pre(x[ax.input_index(i)], ax.count), ax.ivs),
        name=name,
        tag="reduce",
    )
    if r.post is _ident:
        return red
    return te.compute(
        ax.shape, lambda *i: r.post(red[i], ax.count), name=f"{name}_post", tag="elemwise"
    )


def _log_sum_exp(x: te.Tensor, axes, keepdims: bool) -> te.Tensor:
    """log(sum(exp(x))) computed as m + log(sum(exp(x - m))) so it does not overflow."""
    ax = Axes(x, axes, keepdims, "s")
    if not ax.axes:
        return te.compute(x.shape, lambda *i: x[i], name="reduce_log_sum_exp", tag="elemwise")
    m = reduce_tensor(x, "reduce_max", axes, True, name="lse_max")

    def shifted(i):
        xi = ax.input_index(i)
        return te.call("exp", x[xi] - m[ax.input_index(i, with_reduce=False)])

    s = te.compute(ax.shape, lambda *i: te.sum(shifted(i), ax.ivs), name="lse_sum", tag="reduce")

    def f(*i):
        return m[ax.input_index(i, with_reduce=False)] + te.call("log", s[i])

    return te.compute(ax.shape, f, name="reduce_log_sum_exp", tag="elemwise")


def _register(op: str):
    @register_op(op, "reduction")
    def compute(inputs, attrs):
        (x,) = inputs
        return [reduce_tensor(x, op, attrs["axes"], bool(attrs.get("keepdims", 1)))]

    return compute


for _op in REDUCERS:
    _register(_op)


@register_op("reduce_log_sum_exp", "reduction")
def reduce_log_sum_exp(inputs, attrs):
    (x,) = inputs
    return [_log_sum_exp(x, attrs["axes"], bool(attrs.get("keepdims", 1)))]


def arg_extreme(
    x: te.Tensor, axis: int, keepdims: bool, largest: bool, last: bool, name: str
) -> te.Tensor:
    """Index (int64) of the first (or last) max/min along ``axis``: the extreme value
    first, then the smallest (largest) index holding it."""
    kind = "reduce_max" if largest else "reduce_min"
    best = reduce_tensor(x, kind, [axis], True, name=f"{name}_value")
    ax = Axes(x, [axis], keepdims, "a")
    k = ax.rv[axis]
    none = -1 if last else x.shape[axis]
    pick = te.max_reduce if last else te.min_reduce

    def f(*i):
        hit = te.eq(x[ax.input_index(i)], best[ax.input_index(i, with_reduce=False)])
        return pick(te.select(hit, k.var, te.const(none, te.INDEX)), k)

    return te.compute(ax.shape, f, name=name, tag="reduce")


@register_op("argmax", "reduction")
def argmax(inputs, attrs):
    """attrs: axis, keepdims, select_last_index."""
    return [
        arg_extreme(
            inputs[0],
            attrs["axis"],
            bool(attrs.get("keepdims", 1)),
            True,
            bool(attrs.get("select_last_index", 0)),
            "argmax",
        )
    ]


@register_op("argmin", "reduction")
def argmin(inputs, attrs):
    return [
        arg_extreme(
            inputs[0],
            attrs["axis"],
            bool(attrs.get("keepdims", 1)),
            False,
            bool(attrs.get("select_last_index", 0)),
            "argmin",
        )
    ]


# cpu: reductions that keep the innermost axis (global pools over a blocked tensor)
# update whole vectors of it per step; others take the generic schedule.
for _op in REDUCERS:
    register_schedule(_op, "cpu")(blocked_reduce_schedule)
