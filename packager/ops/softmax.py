"""Softmax, LogSoftmax and Hardmax over a set of trailing-contiguous axes.

attrs: axes. ONNX opset >= 13 normalizes over one axis; older opsets over all
axes from ``axis`` on (the input flattened to 2-D); both are ``axes`` here.
"""

from __future__ import annotations

import math

from .. import te
from ..te.schedule import PARALLEL_MIN_ELEMS
from ._cpu import fallback, lanes_of
from .normalization import ROW_PARTS, row_parts_at, row_reduce
from .reduce import Axes, reduce_tensor
from .registry import ScheduleContext, register_op, register_schedule


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
    """exp(x - max) is its own stage (``softmax_exp``), so that a schedule can compute it
    once per row into scratch and read it for the sum and the output."""
    (x,) = inputs
    if [a % x.ndim for a in attrs["axes"]] == [x.ndim - 1] and _parts(x.shape[-1]):
        return [_softmax_rows(x)]
    ax = Axes(x, attrs["axes"], True, "s")
    m = reduce_tensor(x, "reduce_max", attrs["axes"], True, name="softmax_max")

    def row(i) -> tuple:
        return tuple(0 if a in ax.rv else v for a, v in enumerate(i))

    e = te.compute(
        x.shape, lambda *i: te.call("exp", x[i] - m[row(i)]), name="softmax_exp", tag="elemwise"
    )
    total = te.compute(
        ax.shape, lambda *i: te.sum(e[ax.input_index(i)], ax.ivs), name="softmax_sum", tag="reduce"
    )
    return [te.compute(x.shape, lambda *i: e[i] / total[row(i)], name="softmax", tag="elemwise")]


# Rows from which the max and sum are taken in two steps: below, the scalar chain is short.
LONG_ROW = 256


def _parts(n: int) -> int:
    return next((p for p in ROW_PARTS if n % p == 0 and n >= LONG_ROW), 0)


def _softmax_rows(x: te.Tensor) -> te.Tensor:
    """Softmax over a long last axis with the row max and sum in two steps (row_reduce):
    lane-wise partial results a schedule runs in vectors, then their total; in one
    step each was a scalar chain as long as the row (6656 classes: 0.36 ms of a
    0.8 ms recognizer)."""
    rows, n = list(x.shape[:-1]), x.shape[-1]
    top = row_reduce(te.max_reduce, lambda i: x[i], rows, n, "softmax_max")
    e = te.compute(
        x.shape, lambda *i: te.call("exp", x[i] - top[i[:-1]]), name="softmax_exp", tag="elemwise"
    )
    total = row_reduce(te.sum, lambda i: e[i], rows, n, "softmax_sum")
    return te.compute(x.shape, lambda *i: e[i] / total[i[:-1]], name="softmax", tag="elemwise")


def _stage(sch: te.Schedule, name: str):
    return next((st for st in sch.stages if st.op.name == name), None)


@register_schedule("softmax", "cpu")
def softmax_cpu(ctx: ScheduleContext) -> te.Schedule:
    """Softmax over the innermost axis, row by row: the row's max, then exp(x - max) in
    vectors into a row of scratch (once, not again for the output), its sum, then the
    quotient in vectors; rows in parallel. Other axes take the generic schedule."""
    out = ctx.outs[0]
    lanes = lanes_of(ctx, out)
    axes = [a % out.ndim for a in ctx.attrs["axes"]]
    if len(ctx.outs) != 1 or axes != [out.ndim - 1] or out.ndim < 2 or lanes < 2:
        return fallback(ctx)
    if out.shape[-1] % lanes:
        return fallback(ctx)
    sch = te.create_schedule(ctx.outs)
    st = sch[out]
    *outer, inner = st.op.axis
    row = st.fuse(*outer) if len(outer) > 1 else outer[0]
    _, lane = st.split(inner, lanes)
    st.vectorize(lane)
    for name in ("softmax_max", "softmax_exp", "softmax_sum"):
        stage = _stage(sch, name)
        if stage is None:
            return fallback(ctx)
        stage.compute_at(st, row)
    exp = _stage(sch, "softmax_exp")
    exp.vectorize(exp.split(exp.op.axis[-1], lanes)[1])
    row_parts_at(sch, st, row, lanes)
    if ctx.target.cores > 1 and math.prod(out.shape) >= PARALLEL_MIN_ELEMS:
        st.parallel(row)  # each row's scratch lives in the loop body: one per thread
    return sch


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
