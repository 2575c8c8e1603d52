"""CPU schedule template for the blocked pools ``max_pool_nchwc`` / ``avg_pool_nchwc``
(2-d windows over N, C/x, H, W, x): a register tile of outputs, as in the conv template.

    parallel (n, cb, oh)                      -- when the board has several cores
                                                 ((n, band, cb) with the band's rows
                                                 inside where they divide the rows:
                                                 _cpu.row_bands)
      ow_outer
        window tile (computed at ow_outer; avg: a local buffer; max: the output tile):
          acc[ow_inner][:] = init
          for rk0, rk1: for ow_inner (unrolled): for oi (vectorized):
            acc[ow_inner][oi] = max(acc, x[...]) / += x[...]
        avg: for ow_inner (unrolled), oi (vectorized): out = acc / count

The channel block is the innermost loop (contiguous, one vector), the window loops
outside the tile, so each tap loads one vector per output column and updates an
accumulator instead of re-walking the whole block per tap. Knobs: ``tile_ow`` (output
columns per tile) and ``pad`` (the padded input as a parallel copy at root, or inlined
as guarded loads).
"""

from __future__ import annotations

from ..te.schedule import Schedule, create_schedule
from . import pool  # noqa: F401  (registers the ops; this module overrides their cpu schedule)
from ._cpu import blocked_reduce_schedule, lanes_of, padded_copy_at_root, row_bands
from .registry import ScheduleContext, register_schedule

# Output columns per tile: 8 accumulators (one vector each) leave registers for the loads.
DEFAULT_OW_TILE = 8


def _stage_tagged(sch: Schedule, tag: str):
    for st in sch.stages:
        if st.op.tag == tag:
            return st
    return None


def _pool_stage(sch: Schedule, shape: tuple):
    for st in sch.stages:
        if st.op.reduce_axis and tuple(st.tensor.shape) == shape:
            return st
    return None


def pool_nchwc_schedule(ctx: ScheduleContext) -> Schedule:
    out_t = ctx.outs[0]
    if len(ctx.outs) != 1 or out_t.ndim != 5 or tuple(out_t.shape) != tuple(ctx.anchor.shape):
        return blocked_reduce_schedule(ctx)
    block = out_t.shape[-1]
    if lanes_of(ctx, out_t) < block or block not in (2, 4, 8, 16):
        return blocked_reduce_schedule(ctx)
    sch = create_schedule(ctx.outs)
    red = _pool_stage(sch, tuple(out_t.shape))
    if red is None or len(red.op.reduce_axis) != 2:
        return blocked_reduce_schedule(ctx)
    pad = _stage_tagged(sch, "pad")
    for st in sch.stages:
        if st.is_output or st.op.reduce_axis or st is pad:
            continue
        st.compute_inline()
    cfg = ctx.cfg
    out_w = out_t.shape[3]
    ow_tile = cfg.define_split("tile_ow", out_w, DEFAULT_OW_TILE, most=16)
    if pad is not None:  # avg pools (max pools clamp their taps into the input instead)
        # root: one parallel copy of the padded input (measured 0.75 ms for 64x112x112
        # with its copy, 0.30 without); inline: a guarded load per tap.
        pad_at = cfg.define("pad", ("root", "inline"), "root")
        if pad_at == "inline":
            pad.compute_inline()
        else:
            padded_copy_at_root(pad, ctx.target.cores > 1, True)
    out = sch[out_t]
    n, cb, oh, ow, oi = out.op.axis
    owo, owi = out.split(ow, ow_tile)
    rk = list(red.op.reduce_axis)
    out_rk = rk if red is out else []
    bands = row_bands(ctx.target, out_t.shape[2])
    if bands > 1:  # each core a band of rows of every channel block, as the convs
        ohb, ohi = out.split(oh, out_t.shape[2] // bands)
        out.reorder(n, ohb, cb, ohi, owo, *out_rk, owi, oi)
        out.parallel(out.fuse(n, ohb, cb))
    else:
        out.reorder(n, cb, oh, owo, *out_rk, owi, oi)
        if ctx.target.cores > 1:
            out.parallel(out.fuse(n, cb, oh))
    out.unroll(owi)
    out.vectorize(oi)
    if red is not out:
        red.compute_at(out, owo)
        rn, rcb, roh, row, roi = red.op.axis
        red.reorder(rn, rcb, roh, *rk, row, roi)
        red.unroll(row)
        red.vectorize(roi)
    return sch


for _op in ("max_pool_nchwc", "avg_pool_nchwc"):
    register_schedule(_op, "cpu")(pool_nchwc_schedule)
