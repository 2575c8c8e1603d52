"""Softmax, LogSoftmax and Hardmax over a set of trailing-contiguous axes.

attrs: axes. ONNX opset >= 13 normalizes over one axis; older opsets over all
axes from ``axis`` on (the input flattened to 2-D); both are ``axes`` here.
"""

from __future__ import annotations

from .. import te
from .reduce import Axes, reduce_tensor
from .registry import register_op


class _Stats:
    """Row max and sum of exp(x - max), each broadcast back over the reduced axes."""

    def __init__(self, x: te.Tensor, axes, name: str):
        self.ax = Axes(x, axes, True, "s")
        self.m = reduce_tensor(x, "reduce_max", axes, True, name=f"{name}_max")
        self.shifted = te.compute(
            x.shape, lambda *i: x[i] - self.m[self.row(i)], name=f"{name}_shift", tag="elemwise"
        )
        rv = self.ax

        def total(*i):
            return te.sum(te.call("exp", self.shifted[rv.input_index(i)]), rv.ivs)

        self.sum = te.compute(rv.shape, total, name=f"{name}_sum", tag="reduce")

    def row(self, i) -> tuple:
        """Index of the (keepdims) statistics for input index ``i``."""
        return tuple(0 if a in self.ax.rv else v for a, v in enumerate(i))


@register_op("softmax", "opaque")
def softmax(inputs, attrs):
    (x,) = inputs
    st = _Stats(x, attrs["axes"], "softmax")
    return [
        te.compute(
            x.shape,
            lambda *i: te.call("exp", st.shifted[i]) / st.sum[st.row(i)],
            name="softmax",
            tag="elemwise",
        )
    ]


@register_op("log_softmax", "opaque")
def log_softmax(inputs, attrs):
    (x,) = inputs
    st = _Stats(x, attrs["axes"], "log_softmax")
    return [
        te.compute(
            x.shape,
            lambda *i: st.shifted[i] - te.call("log", st.sum[st.row(i)]),
            name="log_softmax",
            tag="elemwise",
        )
    ]


@register_op("hardmax", "opaque")
def hardmax(inputs, attrs):
    """1 at the first maximum (row-major over ``axes``), 0 elsewhere."""
    (x,) = inputs
    axes = sorted(attrs["axes"])
    ax = Axes(x, axes, True, "h")
    m = reduce_tensor(x, "reduce_max", axes, True, name="hardmax_max")

    def flat(idx) -> te.Expr:
        f = None
        for a in axes:
            f = idx[a] if f is None else f * x.shape[a] + idx[a]
        return te.as_expr(f)

    def first(*i):
        xi = ax.input_index(i)
        hit = te.eq(x[xi], m[ax.input_index(i, with_reduce=False)])
        return te.min_reduce(te.select(hit, flat(xi), te.const(ax.count, te.INDEX)), ax.ivs)

    pos = te.compute(ax.shape, first, name="hardmax_pos", tag="reduce")

    def f(*i):
        row = tuple(0 if a in ax.rv else v for a, v in enumerate(i))
        return te.select(te.eq(flat(i), pos[row]), te.const(1, x.dtype), te.const(0, x.dtype))

    return [te.compute(x.shape, f, name="hardmax", tag="elemwise")]
