"""OpenCL schedule templates for dense products: ``gemm`` and ``matmul``.

Each work-item computes "tile_m" rows x "tile_n" columns of the output (common.py), the
columns in vectors of "vector" lanes (float4 on Mali) when B is read along its rows
(gemm without trans_b, packed B, matmul); the k loop runs outside the tile, unrolled by
"unroll_k". Batched matmuls take their batch axes into the work-item grid.
"""

from __future__ import annotations

from ... import te
from .. import matmul as _matmul  # noqa: F401  (registers the ops scheduled here)
from ..matmul import _product
from ..registry import ScheduleContext, register_schedule
from .common import (
    MAX_UNROLLED,
    accumulate_privately,
    bind_groups,
    divisor_default,
    fallback,
    fits,
    unroll_split,
    vector_knob,
    vector_tail,
)

TILE_M, TILE_N, MOST_M, MOST_N = 2, 8, 8, 16
UNROLL_K = 4


def schedule_dense_opencl(ctx: ScheduleContext) -> te.Schedule:
    acc_t = _product(ctx.anchor)
    ins = acc_t.op.input_tensors
    if (
        len(acc_t.op.reduce_axis) != 1
        or acc_t.ndim < 2
        or any(t.ndim < 2 for t in ins)
        or not fits(ctx, acc_t)
    ):
        return fallback(ctx)  # 1-D operands and odd epilogues: one output per item
    made = accumulate_privately(ctx, acc_t)
    if made is None:
        return fallback(ctx)
    sch, acc = made
    cfg = ctx.cfg
    rows, cols = acc_t.shape[-2:]
    t_m = cfg.define_split("tile_m", rows, TILE_M, most=MOST_M)
    t_n = cfg.define_split("tile_n", cols, TILE_N, most=MOST_N)
    contiguous = not acc_t.op.attrs.get("trans_b", 0)
    vec = vector_knob(cfg, t_n, ctx.target) if contiguous else cfg.define("vector", (1,), 1)
    (k,) = sch[acc].op.reduce_axis
    unroll_k = cfg.define_split("unroll_k", k.extent, divisor_default(k.extent, UNROLL_K))
    if t_m * t_n * unroll_k > MAX_UNROLLED:
        raise ValueError(f"dense tile: {t_m * t_n * unroll_k} unrolled multiply-adds")
    out = sch[ctx.outs[0]]
    *batch, i, j = out.op.axis
    io, ii = out.split(i, t_m)
    jo, ji = out.split(j, t_n)
    out.reorder(*batch, io, jo, ii, ji)
    item = bind_groups(out, cfg, ctx.target, [*batch, io, jo], xy=(io, jo))
    out.unroll(ii)
    vector_tail(out, ji, vec)
    st = sch[acc]
    st.compute_at(out, item)
    *cb, ci, cj = st.op.axis
    ks = unroll_split(st, k, unroll_k)
    st.reorder(*cb, *ks, ci, cj)
    st.unroll(ci)
    vector_tail(st, cj, vec)
    return sch


register_schedule("gemm", "opencl")(schedule_dense_opencl)
register_schedule("matmul", "opencl")(schedule_dense_opencl)
