"""CPU schedule for a plain (NCHW) 1x1 conv: the layout pass leaves convs with fewer
output channels than a vector unblocked (a detector's or segmenter's last conv to 1-4
maps at a quarter or half of the input's resolution). The generic schedule ran them as
scalar dot products over the input channels with a libm call per element for a fused
Sigmoid (3 GFLOP/s). Here a tile of output channels x vectors of output columns sums
over the input channels in registers (the column vector is a contiguous load of each
input channel's row), then the fused epilogue (bias, activation) runs on the tile in
vectors; rows in parallel.
"""

from __future__ import annotations

from .. import te
from ..te.schedule import fitting_lanes
from . import conv as _conv  # noqa: F401  (registers the op this module schedules)
from ._cpu import fallback, find_tagged, lanes_of
from .conv_schedule import ACC_REGS
from .registry import ScheduleContext, register_schedule


def _pointwise(conv: te.Tensor, attrs: dict) -> bool:
    window = [a.extent for a in conv.op.reduce_axis[1:]]  # rc, then the kernel's axes
    return (
        conv.ndim == 4
        and window == [1, 1]
        and int(attrs.get("groups", 1)) == 1
        and all(int(s) == 1 for s in attrs.get("strides") or [1, 1])
        and not any(attrs.get("pads") or [])
    )


@register_schedule("conv", "cpu")
def schedule_conv_cpu(ctx: ScheduleContext) -> te.Schedule:
    conv = find_tagged(ctx.anchor, "conv")
    out = ctx.outs[0]
    if (
        conv is None
        or len(ctx.outs) != 1
        or tuple(out.shape) != tuple(conv.shape)
        or not _pointwise(conv, ctx.attrs)
    ):
        return fallback(ctx)
    # the widest vectors that fill a row: 40 columns at 16 lanes in vectors of 8 (a
    # 192 -> 42 conv at 40x40 in PP-OCRv4's detector ran the scalar generic schedule)
    lanes = fitting_lanes(conv.shape[-1], lanes_of(ctx, out))
    if lanes < 2:
        return fallback(ctx)
    sch = te.create_schedule(ctx.outs)
    for st in sch.stages:
        if not st.is_output and not st.op.reduce_axis:
            st.compute_inline()
    if conv is out:
        conv = sch.cache_write(conv, "local")
    m, width = conv.shape[1], conv.shape[-1]
    tm = ctx.cfg.define_split("tile_oc", m, 4, most=8)
    cols = ctx.cfg.define_split("tile_ow_vectors", width // lanes, max(1, ACC_REGS // tm), 8)
    st = sch[out]
    n, oc, h, w = st.op.axis
    mo, mi = st.split(oc, tm)
    wo, wi = st.split(w, cols * lanes)
    wc, wl = st.split(wi, lanes)
    st.reorder(n, mo, h, wo, mi, wc, wl)
    st.unroll(mi)
    st.unroll(wc)
    st.vectorize(wl)
    if ctx.target.cores > 1:
        st.parallel(st.fuse(n, mo, h))
    acc = sch[conv]
    acc.compute_at(st, wo)
    _, a_oc, _, a_w = acc.op.axis
    a_wc, a_wl = acc.split(a_w, lanes)
    acc.reorder(*acc.op.reduce_axis, a_oc, a_wc, a_wl)
    acc.unroll(a_oc)
    acc.unroll(a_wc)
    acc.vectorize(a_wl)
    return sch
