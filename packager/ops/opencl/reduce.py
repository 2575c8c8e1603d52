"""OpenCL templates for reductions (``reduce_*``, global pools) and softmax.

Reductions: the tiled schedule of opencl/pool.py (each work-item accumulates a few
outputs in registers; vectors along the innermost axis when it is kept, as in a
blocked layout's channel block).

Softmax / LogSoftmax: one nest, a row at a time. The row's max and sum of exp are read
by the outputs (and the max by the sum), so both are computed where the row's outputs
are, and the row is never written out between them. Knob ``mode``:

* ``item`` (default; Mali: no shared memory tiling): a work-item per row computes max,
  sum and the row's outputs (``vector`` lanes at a time).
* ``group``: a work-group per row. Its work-items fetch the row into shared memory
  together (a barrier follows), each then reduces it from there (fast local reads) and
  writes every ``threads``-th output.
"""

from __future__ import annotations

from ...te.schedule import Schedule, create_schedule
from .. import softmax as _softmax_ops  # noqa: F401  (registers the ops scheduled here)
from ..reduce import REDUCERS
from ..registry import ScheduleContext, register_schedule
from .generic import GROUP, gpu_default_schedule, group_size
from .pool import GROUPS, tiled_reduce_schedule


def _reduce(ctx: ScheduleContext) -> Schedule:
    return tiled_reduce_schedule(ctx, vector=4, tile=1)


for _op in (*REDUCERS, "reduce_log_sum_exp"):
    register_schedule(_op, "opencl")(_reduce)


def softmax_schedule(ctx: ScheduleContext) -> Schedule:
    out_t = ctx.outs[0]
    axes = sorted(ctx.attrs["axes"])
    rows = [a for a in range(out_t.ndim) if a not in axes]
    if len(ctx.outs) != 1 or not axes or not rows:
        return gpu_default_schedule(ctx.outs, ctx.target)
    sch = create_schedule(ctx.outs)
    reds = [st for st in sch.stages if st.op.reduce_axis]
    for st in sch.stages:
        if not st.is_output and not st.op.reduce_axis:
            st.compute_inline()
    out = sch[out_t]
    iv = list(out.op.axis)
    out.reorder(*[iv[a] for a in rows], *[iv[a] for a in axes])
    row = out.fuse(*[iv[a] for a in rows]) if len(rows) > 1 else iv[rows[0]]
    col = out.fuse(*[iv[a] for a in axes]) if len(axes) > 1 else iv[axes[0]]
    mode = ctx.cfg.define("mode", ("item", "group"), "item")
    if mode == "item":
        return _row_per_item(ctx, sch, out, row, col, reds)
    return _row_per_group(ctx, sch, out, row, col, reds)


def _row_per_item(ctx, sch, out, row, col, reds) -> Schedule:
    count = col.extent
    lanes = [v for v in (1, 2, 4, 8) if count % v == 0]
    vec = ctx.cfg.define("vector", lanes, max(v for v in lanes if v <= 4))
    if vec > 1:
        _, c_i = out.split(col, vec)
        out.vectorize(c_i)
    want = ctx.cfg.define("group", GROUPS, GROUP)
    blk, item = out.split(row, group_size(row.extent, ctx.target, want))
    out.bind(blk, "blockIdx.x")
    out.bind(item, "threadIdx.x")
    for red in reds:  # max, then sum: both per row, in the row's work-item
        red.compute_at(out, item)
    return sch


def _row_per_group(ctx, sch, out, row, col, reds) -> Schedule:
    x = sch.stages[0].op.input_tensors[0]
    readers = [st.tensor for st in sch.stages if any(t is x for t in st.op.input_tensors)]
    threads = ctx.cfg.define("threads", (32, 64, 128, 256), 64)
    threads = group_size(col.extent, ctx.target, threads)
    c_o, c_i = out.split(col, threads)
    out.reorder(c_i, c_o)
    out.bind(row, "blockIdx.x")
    out.bind(c_i, "threadIdx.x")
    cache = sch[sch.cache_read(x, "shared", readers)]
    cache.compute_at(out, row)
    flat = cache.fuse(*cache.op.axis) if len(cache.op.axis) > 1 else cache.op.axis[0]
    _, f_i = cache.split(flat, threads)
    cache.bind(f_i, "threadIdx.x")
    for red in reds:  # each work-item reduces the shared row itself: no tree, one barrier
        red.compute_at(out, row)
    return sch


for _op in ("softmax", "log_softmax"):
    register_schedule(_op, "opencl")(softmax_schedule)
