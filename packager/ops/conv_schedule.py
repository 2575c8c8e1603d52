"""CPU schedule template for ``conv2d_nchwc``: blocked direct convolution with a
register tile (a few output blocks x a few output columns, one vector per block).

Loop nest (TVM's x86 NCHWc schedule, in our primitives):

    parallel (n, ob_outer, oh)            -- knob "parallel"
      ow_outer
        conv tile (computed at ow_outer, a local buffer the codegen keeps in vector
        registers): for rcb, kh, kw, rci: for ob_inner, ow_inner (unrolled):
            acc[ob_inner][ow_inner][:] += x[..broadcast..] * w[..vector..]
        epilogue: for ob_inner, ow_inner (unrolled), oi (vectorized):
            out = relu(acc + bias) + residual ...   (the group's inlined stages)

The pad stage is computed at root into a temporary, so the hot loop has no bounds
checks. Depthwise and 1x1 convs use the same nest (depthwise has no rcb/rci; 1x1 has no
kh/kw: a packed GEMM over the channel blocks).
"""

from __future__ import annotations

from .. import te
from ..te.schedule import Schedule, create_schedule, default_schedule
from . import conv_nchwc  # noqa: F401  (registers the op this module schedules)
from .dwconv_schedule import is_depthwise, schedule_depthwise_cpu
from .registry import ScheduleContext, register_schedule

# Accumulators one register tile may use. Measured on AVX2/AVX-512 (EPYC, GCC -O2):
# 2 blocks x 7 columns (14 accumulators) runs at ~93% of the FMA peak, while 8
# accumulators stay near 50-70% (too few FMAs in flight to hide their latency). GCC
# feeds the FMAs from memory operands, so the weights and the broadcast need few
# registers; NEON has 32 vector registers.
ACC_REGS = 14
MAX_OC_TILE = 4


def _find(t: te.Tensor, tag: str) -> te.Tensor | None:
    """The nearest compute tensor tagged ``tag`` at or above ``t``."""
    stack, seen = [t], set()
    while stack:
        x = stack.pop()
        if id(x) in seen or not isinstance(x.op, te.ComputeOp):
            continue
        seen.add(id(x))
        if x.op.tag == tag:
            return x
        stack.extend(x.op.input_tensors)
    return None


def _divisors(n: int, most: int) -> list[int]:
    return [d for d in range(1, min(n, most) + 1) if n % d == 0]


def default_tile(out_blocks: int, out_width: int, budget: int = ACC_REGS) -> tuple[int, int]:
    """(oc tile, ow tile) with the most accumulators within ``budget``; among equals the
    one loading least per FMA step (oc weight vectors + ow broadcasts)."""
    tiles = [
        (oc, ow)
        for oc in _divisors(out_blocks, MAX_OC_TILE)
        for ow in _divisors(out_width, budget)
        if oc * ow <= budget
    ]
    return max(tiles, key=lambda t: (t[0] * t[1], -(t[0] + t[1]), t[1]))


@register_schedule("conv2d_nchwc", "cpu")
def schedule_conv2d_nchwc_cpu(ctx: ScheduleContext) -> Schedule:
    conv = _find(ctx.anchor, "conv")
    out = ctx.outs[0]
    if conv is not None and len(ctx.outs) == 1 and tuple(out.shape) == tuple(conv.shape):
        if is_depthwise(conv):
            return schedule_depthwise_cpu(ctx, conv)
    if conv is None or len(ctx.outs) != 1 or tuple(out.shape) != tuple(conv.shape):
        return default_schedule(ctx.outs)  # an epilogue that changes shape: no tile to share
    sch = create_schedule(ctx.outs)
    pad = _find(conv, "pad") if conv.op.input_tensors else None
    for st in sch.stages:
        if st.is_output or st.op.reduce_axis or (pad is not None and st.tensor is pad):
            continue
        st.compute_inline()
    cfg = ctx.cfg
    _, out_blocks, _, out_w, block = conv.shape
    oc_def, ow_def = default_tile(out_blocks, out_w)
    oc_tile = cfg.define_split("tile_oc", out_blocks, oc_def, most=MAX_OC_TILE)
    ow_tile = cfg.define_split("tile_ow", out_w, ow_def, most=16)
    vec = cfg.define("vectorize_oc", (True, False), block in (2, 4, 8, 16))
    par = cfg.define("parallel", ("n_oc_oh", "n_oc", "none"), "n_oc_oh")
    pad_at = cfg.define("pad", ("root", "inline"), _default_pad(conv))
    if pad is not None:
        _schedule_pad(sch, pad, pad_at)
    if conv is out:
        _tile_reduction(sch[conv], oc_tile, ow_tile, vec, par)  # accumulates in the output
        return sch
    outer = _tile_output(sch[out], oc_tile, ow_tile, vec, par)
    sch[conv].compute_at(sch[out], outer)
    _order_reduction(sch[conv], vec)
    return sch


def _default_pad(conv: te.Tensor) -> str:
    """Where the padded input is made. A dense conv does ~9*C multiply-adds per input
    element, so one padded copy at root is cheap. A depthwise conv does 9, and with
    stride 2 reads a quarter of a large input: there the copy costs more than the
    bounds checks in the hot loop (measured: 0.88 vs 0.34 ms for 96 channels at
    112x112); at stride 1 the copy wins (0.36 vs 0.94 ms, 144 channels at 56x56)."""
    depthwise = not any(a.name.startswith("rcb") for a in conv.op.reduce_axis)
    strided = max(conv.op.attrs.get("strides", [1])) > 1
    return "inline" if depthwise and strided else "root"


def _schedule_pad(sch: Schedule, pad: te.Tensor, where: str) -> None:
    st = sch[pad]
    if where == "inline":
        st.compute_inline()  # guarded loads in the hot loop
        return
    n, cb, h = st.op.axis[:3]
    st.parallel(st.fuse(n, cb, h))


def _tile_output(st, oc_tile: int, ow_tile: int, vec: bool, par: str):
    """Split the output into register tiles; returns the loop the conv tile is computed
    at (ow_outer)."""
    n, ob, oh, ow, oi = st.op.axis
    obo, obi = st.split(ob, oc_tile)
    owo, owi = st.split(ow, ow_tile)
    st.reorder(n, obo, oh, owo, obi, owi, oi)
    _annotate(st, n, obo, oh, par)
    st.unroll(obi)
    st.unroll(owi)
    if vec:
        st.vectorize(oi)
    return owo


def _annotate(st, n, obo, oh, par: str) -> None:
    if par == "n_oc_oh":
        st.parallel(st.fuse(n, obo, oh))
    elif par == "n_oc":
        st.parallel(st.fuse(n, obo))


def _order_reduction(st, vec: bool) -> None:
    """Inside one tile: the reduction outside, the tile's blocks and columns inside
    (unrolled: each (block, column) is one accumulator register)."""
    n, ob, oh, ow, oi = st.op.axis
    red = list(st.op.reduce_axis)
    st.reorder(n, oh, *red, ob, ow, oi)
    st.unroll(ob)
    st.unroll(ow)
    if vec:
        st.vectorize(oi)


def _tile_reduction(st, oc_tile: int, ow_tile: int, vec: bool, par: str) -> None:
    """A conv with no epilogue is its own output: same tiling, accumulating in place."""
    n, ob, oh, ow, oi = st.op.axis
    obo, obi = st.split(ob, oc_tile)
    owo, owi = st.split(ow, ow_tile)
    red = list(st.op.reduce_axis)
    st.reorder(n, obo, oh, owo, *red, obi, owi, oi)
    _annotate(st, n, obo, oh, par)
    st.unroll(obi)
    st.unroll(owi)
    if vec:
        st.vectorize(oi)
