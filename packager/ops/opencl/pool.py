"""OpenCL templates for pools and other window/axis reductions: several outputs per
work-item, vectorized over the innermost (channel block) axis.

    for blockIdx.x, threadIdx.x (fused outer axes, output column tiles, vector groups):
      acc[tile][vec] = init                   -- private: registers
      for each reduce tap: for t in tile (unrolled): acc[t][:] op= x[...] (floatN)
      out[...][tile][vec] = epilogue(acc)     -- vstoreN

Knobs: ``vector`` (lanes of the innermost axis per work-item; 4 by default, float4 as
Mali wants, on blocked layouts), ``tile`` (outputs of the next axis per work-item) and
``group`` (work-items per work-group). An output the template cannot tile (several
outputs, a scalar) takes the generic GPU schedule.
"""

from __future__ import annotations

from ...te.schedule import Schedule, create_schedule
from .. import pool as _pool_ops  # noqa: F401  (registers the ops scheduled here)
from ..registry import ScheduleContext, register_schedule
from .generic import GROUP, gpu_default_schedule, group_size

VECTORS = (1, 2, 4, 8, 16)
GROUPS = (16, 32, 64, 128, 256)


def tiled_reduce_schedule(
    ctx: ScheduleContext, vector: int = 4, tile: int = 1, vector_ok: bool = True
) -> Schedule:
    """``vector``/``tile``: the knobs' defaults; ``vector_ok``: whether the innermost axis
    is contiguous in the input (a channel block) so that vectors over it load as floatN."""
    out_t = ctx.outs[0]
    if len(ctx.outs) != 1 or out_t.ndim == 0:
        return gpu_default_schedule(ctx.outs, ctx.target)
    sch = create_schedule(ctx.outs)
    if sch[out_t].op.reduce_axis:  # accumulate in registers, store once
        sch.cache_write(out_t, "local")
    for st in sch.stages:
        if not st.is_output and not st.op.reduce_axis:
            st.compute_inline()
    reds = [st for st in sch.stages if st.op.reduce_axis]
    cfg, out = ctx.cfg, sch[out_t]
    axes = list(out.op.axis)
    last = out_t.shape[-1]
    lanes = [v for v in VECTORS if last % v == 0] if vector_ok else [1]
    vec = cfg.define("vector", lanes, max(v for v in lanes if v <= vector))
    inner = []
    if vec > 1:
        c_o, c_i = out.split(axes[-1], vec)
        axes[-1:] = [c_o]
        inner.append(c_i)
    t_pos = len(axes) - 2 if vec > 1 else len(axes) - 1
    if t_pos >= 0 and out_t.shape[t_pos] > 1:
        t = cfg.define_split("tile", out_t.shape[t_pos], tile, most=16)
        t_o, t_i = out.split(axes[t_pos], t)
        axes[t_pos] = t_o
        inner.insert(0, t_i)
        out.reorder(*axes, *inner)
        out.unroll(t_i)
    if vec > 1:
        out.vectorize(inner[-1])
    fused = out.fuse(*axes) if len(axes) > 1 else axes[0]
    want = cfg.define("group", GROUPS, GROUP)
    blk, item = out.split(fused, group_size(fused.extent, ctx.target, want))
    out.bind(blk, "blockIdx.x")
    out.bind(item, "threadIdx.x")
    for red in reds:
        red.compute_at(out, item)
        if len(red.op.axis) == out_t.ndim:
            _vector_last(red, vec, len(inner) == 2)
    return sch


def _vector_last(red, vec: int, tiled: bool) -> None:
    """Reduce taps outside the per-item tile: each tap updates every accumulator."""
    data = list(red.op.axis)
    red.reorder(*data[: len(data) - 2], *red.op.reduce_axis, *data[len(data) - 2 :])
    if tiled:
        red.unroll(data[-2])
    if vec > 1:
        red.vectorize(data[-1])


def _pool(ctx: ScheduleContext) -> Schedule:
    """Plain NCHW pools: windows stride along the innermost axis, so no vectors."""
    return tiled_reduce_schedule(ctx, vector=1, tile=1, vector_ok=False)


def _pool_nchwc(ctx: ScheduleContext) -> Schedule:
    return tiled_reduce_schedule(ctx, vector=4, tile=2)


for _op in ("max_pool", "avg_pool", "lp_pool"):
    register_schedule(_op, "opencl")(_pool)
    register_schedule(f"{_op}_nchwc", "opencl")(_pool_nchwc)
