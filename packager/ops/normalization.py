"""Normalizations: batch (inference), instance, group, layer, RMS, mean-variance, Lp, and
LRN.

Statistics are their own reduction stages (mean, then the centered variance) so
that schedules see plain reductions; the normalizing expression is elementwise.
"""

from __future__ import annotations

import math

from .. import te
from ..te.schedule import PARALLEL_MIN_ELEMS
from ._cpu import fallback, lanes_of
from .pad import pad_tensor
from .reduce import Axes, reduce_tensor
from .registry import ScheduleContext, register_op, register_schedule


def bcast(t: te.Tensor, idx) -> te.Expr:
    """Element of ``t`` broadcast (numpy rules, right-aligned) to index ``idx``."""
    own = list(idx)[len(idx) - t.ndim :] if t.ndim else []
    return t[tuple(0 if d == 1 else i for d, i in zip(t.shape, own, strict=True))]


def channel(t: te.Tensor, idx) -> te.Expr:
    """Per-channel (axis 1) element of the 1-D tensor ``t`` for index ``idx``. A 2-D
    ``t`` is (C/x, x): the parameters of a blocked NCHW{x}c input, read at its
    channel block (axis 1) and lane (the last axis)."""
    return t[idx[1], idx[-1]] if t.ndim == 2 else t[idx[1]]


class Moments:
    """Mean and (biased) variance of ``x`` over ``axes``, keepdims-shaped."""

    def __init__(self, x: te.Tensor, axes, name: str):
        self.ax = Axes(x, axes, True, "m")
        self.mean = reduce_tensor(x, "reduce_mean", axes, True, name=f"{name}_mean")
        ax = self.ax

        def sq_dev(*i):
            d = x[ax.input_index(i)] - self.mean[i]
            return te.sum(d * d, ax.ivs)

        total = te.compute(ax.shape, sq_dev, name=f"{name}_sqdev", tag="reduce")
        n = te.const(ax.count, x.dtype)
        self.var = te.compute(ax.shape, lambda *i: total[i] / n, name=f"{name}_var", tag="elemwise")

    def row(self, idx) -> tuple:
        """Index of the statistics for input index ``idx``."""
        return tuple(0 if a in self.ax.rv else v for a, v in enumerate(idx))


def _rsqrt(v, eps: float):
    return te.const(1.0, v.dtype) / te.call("sqrt", v + te.const(eps, v.dtype))


@register_op("batch_norm", "broadcast")
def batch_norm(inputs, attrs):
    """Inference: (x - mean) / sqrt(var + epsilon) * scale + bias over channel axis 1."""
    x, scale, bias, mean, var = inputs
    eps = te.const(attrs.get("epsilon", 1e-5), x.dtype)

    def f(*i):
        norm = (x[i] - channel(mean, i)) / te.call("sqrt", channel(var, i) + eps)
        return norm * channel(scale, i) + channel(bias, i)

    return [te.compute(x.shape, f, name="batch_norm", tag="elemwise")]


@register_op("scale_shift", "broadcast")
def scale_shift(inputs, attrs):
    """x * scale[c] + shift[c] over channel axis 1 (batch_norm with folded statistics)."""
    x, scale, shift = inputs
    return [
        te.compute(
            x.shape,
            lambda *i: x[i] * channel(scale, i) + channel(shift, i),
            name="scale_shift",
            tag="elemwise",
        )
    ]


@register_op("instance_norm", "opaque")
def instance_norm(inputs, attrs):
    x, scale, bias = inputs
    st = Moments(x, range(2, x.ndim), "instance_norm")
    eps = attrs.get("epsilon", 1e-5)

    def f(*i):
        r = st.row(i)
        norm = (x[i] - st.mean[r]) * _rsqrt(st.var[r], eps)
        return norm * channel(scale, i) + channel(bias, i)

    return [te.compute(x.shape, f, name="instance_norm", tag="elemwise")]


# Lanes of the partial sums of a row (see _row_stats): 16 independent sums where one
# would be a chain of dependent adds (256 of them for d_model 256, latency-bound).
ROW_PARTS = (16, 8, 4)


def _row_stats(x: te.Tensor, name: str):
    """(mean, inverse stddev w/o eps) inputs of a normalization over the last axis only,
    each reduced in two steps: ``parts`` lane-wise partial sums over chunks of the row
    (a schedule runs them in vectors), then the parts added up. None when no width of
    ROW_PARTS divides the row."""
    d = x.shape[-1]
    w = next((p for p in ROW_PARTS if d % p == 0 and d > p), 0)
    if not w:
        return None
    rows = list(x.shape[:-1])
    n = te.const(d, x.dtype)

    def two_step(term, stage):
        c = te.reduce_axis(d // w, f"{stage}_c")
        part = te.compute(
            [*rows, w],
            lambda *i: te.sum(term((*i[:-1], c * w + i[-1])), c),
            name=f"{name}_{stage}_part",
            tag="row_part",
        )
        lane = te.reduce_axis(w, f"{stage}_l")
        total = te.compute(
            rows, lambda *r: te.sum(part[(*r, lane)], lane), name=f"{name}_{stage}", tag="reduce"
        )
        return te.compute(rows, lambda *r: total[r] / n, name=f"{name}_{stage}_avg")

    mean = two_step(lambda i: x[i], "mean")

    def sq(i):
        dv = x[i] - mean[i[:-1]]
        return dv * dv

    return mean, two_step(sq, "var")


def row_reduce(combine, term, rows: list, n: int, name: str) -> te.Tensor:
    """``combine`` (sum, max) of ``term`` over each row of n, in two steps where a width
    of ROW_PARTS divides n: lane-wise partial results over chunks of the row (``name``
    _part, which the schedule runs in vectors), then over the lanes. In one step it was
    a scalar chain of n dependent adds or compares per row."""
    w = next((p for p in ROW_PARTS if n % p == 0 and n > p), 0)
    if not w:
        r = te.reduce_axis(n, f"{name}_r")
        return te.compute(rows, lambda *i: combine(term((*i, r)), r), name=name)
    c = te.reduce_axis(n // w, f"{name}_c")
    part = te.compute(
        [*rows, w],
        lambda *i: combine(term((*i[:-1], c * w + i[-1])), c),
        name=f"{name}_part",
        tag="row_part",
    )
    lane = te.reduce_axis(w, f"{name}_l")
    return te.compute(rows, lambda *i: combine(part[(*i, lane)], lane), name=name)


def row_parts_at(sch: te.Schedule, st, at, lanes: int) -> None:
    """Each ``row_reduce`` part of the schedule computed at ``st``'s loop ``at``, its
    chunk loop outside the lanes, which run in vectors."""
    for part in [x for x in sch.stages if x.op.tag == "row_part"]:
        part.compute_at(st, at)
        (c,) = part.op.reduce_axis
        lane = part.op.axis[-1]
        if lane.extent > lanes:
            lane = part.split(lane, lanes)[1]
        part.reorder(c, *[iv for iv in part.leaf_iter_vars if iv.kind == "data"][-3:])
        part.vectorize(lane)


@register_op("layer_norm", "opaque")
def layer_norm(inputs, attrs):
    """attrs: axis (>= 0), epsilon, with_stats (also return mean and 1/stddev)."""
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    eps = attrs.get("epsilon", 1e-5)
    rows = None
    if attrs["axis"] == x.ndim - 1 and not attrs.get("with_stats"):
        rows = _row_stats(x, "layer_norm")
    if rows is not None:
        mean, var = rows

        def f(*i):
            r = i[:-1]
            y = (x[i] - mean[r]) * _rsqrt(var[r], eps) * bcast(scale, i)
            return y if bias is None else y + bcast(bias, i)

        return [te.compute(x.shape, f, name="layer_norm", tag="elemwise")]
    st = Moments(x, range(attrs["axis"], x.ndim), "layer_norm")
    inv = te.compute(
        st.ax.shape, lambda *i: _rsqrt(st.var[i], eps), name="layer_norm_inv", tag="elemwise"
    )

    def g(*i):
        y = (x[i] - st.mean[st.row(i)]) * inv[st.row(i)] * bcast(scale, i)
        return y if bias is None else y + bcast(bias, i)

    y = te.compute(x.shape, g, name="layer_norm", tag="elemwise")
    return [y, st.mean, inv] if attrs.get("with_stats") else [y]


@register_schedule("layer_norm", "cpu")
def layer_norm_cpu(ctx: ScheduleContext) -> te.Schedule:
    """Row by row: the partial sums of the row in vectors (the chunk loop outside the
    lanes), their total, the same for the squared deviations, then the normalized row in
    vectors; rows in parallel. Other forms take the generic schedule."""
    out = ctx.outs[0]
    lanes = lanes_of(ctx, out)
    sch = te.create_schedule(ctx.outs)
    parts = [st for st in sch.stages if st.op.tag == "row_part"]
    if len(ctx.outs) != 1 or not parts or lanes < 2 or out.ndim < 2 or out.shape[-1] % lanes:
        return fallback(ctx)
    st = sch[out]
    *outer, inner = st.op.axis
    row = st.fuse(*outer) if len(outer) > 1 else outer[0]
    st.vectorize(st.split(inner, lanes)[1])
    for s in sch.stages:
        if s is st:
            continue
        if s.op.reduce_axis:
            s.compute_at(st, row)
        else:
            s.compute_inline()
    for part in parts:
        (c,) = part.op.reduce_axis
        lane = part.op.axis[-1]
        if lane.extent > lanes:
            lane = part.split(lane, lanes)[1]
        part.reorder(c, *[iv for iv in part.leaf_iter_vars if iv.kind == "data"][-2:])
        part.vectorize(lane)
    if ctx.target.cores > 1 and math.prod(out.shape) >= PARALLEL_MIN_ELEMS:
        st.parallel(row)
    return sch


@register_op("rms_norm", "opaque")
def rms_norm(inputs, attrs):
    """x / sqrt(mean(x^2) + epsilon) * scale, the mean over the dims from attrs axis on."""
    x, scale = inputs
    axes = list(range(attrs["axis"], x.ndim))
    sum_sq = reduce_tensor(x, "reduce_sum_square", axes, True, name="rms_norm_sumsq")
    count = te.const(Axes(x, axes, True).count, x.dtype)
    eps = attrs.get("epsilon", 1e-5)
    inv = te.compute(
        sum_sq.shape, lambda *i: _rsqrt(sum_sq[i] / count, eps), name="rms_norm_inv", tag="elemwise"
    )

    def f(*i):
        row = tuple(0 if a in axes else v for a, v in enumerate(i))
        return x[i] * inv[row] * bcast(scale, i)

    return [te.compute(x.shape, f, name="rms_norm", tag="elemwise")]


@register_op("mean_variance_norm", "opaque")
def mean_variance_norm(inputs, attrs):
    """(x - mean) / (sqrt(var) + 1e-9) over attrs axes (ONNX's function body)."""
    (x,) = inputs
    st = Moments(x, attrs["axes"], "mvn")
    eps = te.const(1e-9, x.dtype)

    def f(*i):
        r = st.row(i)
        return (x[i] - st.mean[r]) / (te.call("sqrt", st.var[r]) + eps)

    return [te.compute(x.shape, f, name="mean_variance_norm", tag="elemwise")]


@register_op("lp_norm", "opaque")
def lp_norm(inputs, attrs):
    """x / ||x||_p along attrs axis (p 1 or 2); 0 where the norm is 0."""
    (x,) = inputs
    axis, p = attrs["axis"], attrs.get("p", 2)
    norm = reduce_tensor(
        x, "reduce_l1" if p == 1 else "reduce_l2", [axis], True, name="lp_norm_norm"
    )
    zero = te.const(0, x.dtype)

    def f(*i):
        n = norm[tuple(0 if a == axis else v for a, v in enumerate(i))]
        return te.select(te.eq(n, zero), zero, x[i] / n)

    return [te.compute(x.shape, f, name="lp_norm", tag="elemwise")]


@register_op("lrn", "opaque")
def lrn(inputs, attrs):
    """x / (bias + alpha / size * sum of x^2 over a channel window) ** beta."""
    (x,) = inputs
    size = int(attrs["size"])
    alpha, beta, k = attrs.get("alpha", 1e-4), attrs.get("beta", 0.75), attrs.get("bias", 1.0)
    lo = (size - 1) // 2  # the window is [c - lo, c + size - 1 - lo]
    zeros = [0] * (x.ndim - 2)
    xp = pad_tensor(x, [0, lo, *zeros], [0, size - 1 - lo, *zeros], name="lrn_pad")
    rc = te.reduce_axis(size, "rc")

    def window(n, c, *rest):
        v = xp[(n, c + rc, *rest)]
        return te.sum(v * v, rc)

    sq = te.compute(x.shape, window, name="lrn_sqsum", tag="reduce")
    dt = x.dtype

    def f(*i):
        base = te.const(k, dt) + te.const(alpha / size, dt) * sq[i]
        return x[i] / _power(base, float(beta), dt)

    return [te.compute(x.shape, f, name="lrn", tag="elemwise")]


def _power(base: te.Expr, beta: float, dt: str) -> te.Expr:
    """base ** beta: the common exponents in square roots (a vector instruction, where
    pow is a libm call per element: AlexNet's LRN, beta 0.75, took 3.4 ms at 55x55x96),
    within an ulp or two of pow; any other through pow."""
    if beta == 1.0:
        return base
    if beta == 0.5:
        return te.call("sqrt", base)
    if beta == 0.75:  # b^(1/2) * b^(1/4)
        root = te.call("sqrt", base)
        return root * te.call("sqrt", root)
    return te.call("pow", base, te.const(beta, dt))


@register_op("group_norm", "opaque")
def group_norm(inputs, attrs):
    """Each group of channels (with its spatial dims) normalized on its own statistics, then
    a per-channel (or, for attrs per_group, per-group) scale and bias. attrs: groups,
    epsilon, per_group."""
    x, scale, bias = inputs
    groups = int(attrs["groups"])
    per = x.shape[1] // groups
    count = te.const(per * math.prod(x.shape[2:]), x.dtype)
    rc = te.reduce_axis(per, "rc")
    rs = [te.reduce_axis(n, f"rs{k}") for k, n in enumerate(x.shape[2:])]

    def member(n, g):
        return x[(n, g * per + rc.var, *(a.var for a in rs))]

    total = te.compute(
        (x.shape[0], groups),
        lambda n, g: te.sum(member(n, g), [rc, *rs]),
        name="group_norm_sum",
        tag="reduce",
    )
    mean = te.compute(
        total.shape, lambda n, g: total[n, g] / count, name="group_norm_mean", tag="elemwise"
    )

    def sq_dev(n, g):
        d = member(n, g) - mean[n, g]
        return te.sum(d * d, [rc, *rs])

    dev = te.compute(total.shape, sq_dev, name="group_norm_sqdev", tag="reduce")
    eps = attrs.get("epsilon", 1e-5)
    inv = te.compute(
        total.shape,
        lambda n, g: _rsqrt(dev[n, g] / count, eps),
        name="group_norm_inv",
        tag="elemwise",
    )

    def f(n, c, *i):
        g = c // per
        k = g if attrs.get("per_group") else c
        return (x[(n, c, *i)] - mean[n, g]) * inv[n, g] * scale[k] + bias[k]

    return [te.compute(x.shape, f, name="group_norm", tag="elemwise")]
