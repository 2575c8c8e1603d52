"""Scaled dot-product attention as one op: softmax(Q K^T * scale + bias) V.

Made by the fuse_attention graph pass from the MatMul, scale, mask Add, Softmax, MatMul
chain exporters write. inputs: q (..., M, D), kt (..., D, N) (K already transposed, so
that a vector of scores reads a contiguous row of it), v (..., N, E), then bias
(broadcast to (..., M, N)) when ``has_bias``; q, kt and v may carry the Transposes
folded into the first matmul (attrs perm_q, perm_kt, perm_v; see matmul._Operand).
attrs: scale. The output is normalized after the product (O / sum, not P = e / sum then
P V): M x E divisions instead of M x N.
"""

from __future__ import annotations

from .. import te
from ..te.schedule import fitting_lanes
from ._cpu import fallback, lanes_of
from .matmul import ACCUMULATORS, _batch_index, _batch_shape, _Operand
from .normalization import bcast, row_parts_at, row_reduce
from .registry import ScheduleContext, register_op, register_schedule


@register_op("attention", "opaque")
def attention(inputs, attrs):
    q = _Operand(inputs[0], attrs.get("perm_q"))
    kt = _Operand(inputs[1], attrs.get("perm_kt"))
    v = _Operand(inputs[2], attrs.get("perm_v"))
    bias = inputs[3] if attrs.get("has_bias") else None
    (m, d), (d2, n), (n2, e) = q.shape[-2:], kt.shape[-2:], v.shape[-2:]
    if d != d2 or n != n2:
        raise ValueError(f"attention: Q {q.shape}, K^T {kt.shape} and V {v.shape} do not chain")
    batch = _batch_shape(tuple(_batch_shape(q.shape[:-2], kt.shape[:-2])), v.shape[:-2])
    nb = len(batch)
    at = lambda o, b, i, j: o[(*_batch_index(b, o.shape, nb), i, j)]  # noqa: E731
    dt = inputs[0].dtype
    kd = te.reduce_axis(d, "kd")

    def scores(*idx):
        b, i, j = idx[:nb], idx[nb], idx[nb + 1]
        return te.sum(at(q, b, i, kd) * at(kt, b, kd, j), kd)

    s = te.compute([*batch, m, n], scores, name="attention_scores", tag="attention")

    def logit(idx):
        y = s[idx] * te.const(float(attrs.get("scale", 1.0)), dt)
        return y if bias is None else y + bcast(bias, idx)

    top = row_reduce(te.max_reduce, logit, [*batch, m], n, "attention_max")
    p = te.compute(
        [*batch, m, n],
        lambda *idx: te.call("exp", logit(idx) - top[idx[:-1]]),
        name="attention_exp",
        tag="elemwise",
    )
    total = row_reduce(te.sum, lambda idx: p[idx], [*batch, m], n, "attention_sum")
    kn = te.reduce_axis(n, "kn")

    def mix(*idx):
        b, i, j = idx[:nb], idx[nb], idx[nb + 1]
        return te.sum(p[(*b, i, kn)] * at(v, b, kn, j), kn)

    o = te.compute([*batch, m, e], mix, name="attention_mix", tag="attention")
    out = te.compute(
        [*batch, m, e], lambda *idx: o[idx] / total[idx[:-1]], name="attention", tag="elemwise"
    )
    return [out]


def _stage(sch: te.Schedule, name: str):
    return next(st for st in sch.stages if st.op.name == name)


def _register_tile(st, lanes: int) -> None:
    """A product attached to a block of rows: k outside, rows x vectors of lanes inside."""
    *_, i, j = st.op.axis
    (k,) = st.op.reduce_axis
    jc, jl = st.split(j, lanes)
    st.reorder(k, i, jc, jl)
    st.unroll(i)
    st.unroll(jc)
    st.vectorize(jl)


def _scores_in_tiles(ctx, scores, tile, n: int, rows: int, lanes: int) -> None:
    """The block's score rows a column tile at a time: rows x ``cols`` vectors summed
    over D in registers (``tile``), then stored into the block's scratch. As one
    rows x N tile (N 960: 240 vectors) the sums lived in memory, loaded and stored
    around every multiply-add."""
    cols = ctx.cfg.define_split("attention_cols", n // lanes, max(2, ACCUMULATORS // rows), 8)
    *_, i, j = scores.op.axis
    jo, ji = scores.split(j, cols * lanes)
    scores.reorder(jo, i, ji)
    scores.vectorize(scores.split(ji, lanes)[1])
    tile.compute_at(scores, jo)
    _register_tile(tile, lanes)


@register_schedule("attention", "cpu")
def attention_cpu(ctx: ScheduleContext) -> te.Schedule:
    """One block of query rows of one head at a time (batch and heads outermost, in
    parallel): its scores in registers over D, the row max, exp in vectors into scratch,
    the row sums, the product with V in registers over N, then the division; everything
    between Q and the output stays in the block's scratch."""
    out = ctx.outs[0]
    lanes = lanes_of(ctx, out)
    sch = te.create_schedule(ctx.outs)
    n, e = _stage(sch, "attention_mix").op.reduce_axis[0].extent, out.shape[-1]
    # half vectors where full ones do not divide the keys or the head size (40 tokens,
    # heads of 8 at 16 lanes: PaddleOCR's SVTR neck)
    ln, le = fitting_lanes(n, lanes), fitting_lanes(e, lanes)
    if len(ctx.outs) != 1 or ln < 2 or le < 2:
        return fallback(ctx)
    st = sch[out]
    *batch, i, j = st.op.axis
    rows = ctx.cfg.define_split("tile_m", out.shape[-2], 4, most=8)
    io, ii = st.split(i, rows)
    jo, jl = st.split(j, le)
    st.reorder(*batch, io, ii, jo, jl)
    st.vectorize(jl)
    at = st.fuse(*batch, io) if batch else io
    if ctx.target.cores > 1:
        st.parallel(at)
    scores = _stage(sch, "attention_scores")
    tile = sch.cache_write(scores.tensor, "local")
    for name in ("attention_scores", "attention_max", "attention_exp", "attention_sum"):
        sch[_stage(sch, name).tensor].compute_at(st, at)
    row_parts_at(sch, st, at, ln)
    mix_st = _stage(sch, "attention_mix")
    mix_st.compute_at(st, at)
    _scores_in_tiles(ctx, scores, sch[tile], n, rows, ln)
    _register_tile(mix_st, le)
    p = _stage(sch, "attention_exp")
    p.vectorize(p.split(p.op.axis[-1], ln)[1])
    return sch
