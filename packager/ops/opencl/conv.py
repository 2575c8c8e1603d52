"""OpenCL schedule templates for convolutions: ``conv2d_nchwc`` (dense, 1x1, grouped;
depthwise has its own) and plain NCHW ``conv``.

Each work-item computes a register tile (see common.py): in NCHW[x]c, "tile_oc" output
channel blocks x "tile_ow" output columns of one row, each a vector along the block
(``vector`` lanes: float4 on Mali); in plain NCHW, "tile_oc" channels x "tile_ow"
columns, the columns in vectors when the conv's horizontal stride is 1 (contiguous
input). The padded input is read through guarded loads (a padded copy would need a
kernel of its own). The reduction walks the compute's own order (input blocks, window
rows, window columns, channel lanes) with the lanes ("unroll_rci") and window columns
("unroll_kw") unrolled.
"""

from __future__ import annotations

from ... import te
from .. import conv as _conv  # noqa: F401  (registers the ops scheduled here)
from .. import conv_nchwc  # noqa: F401
from .._cpu import find_tagged
from ..dwconv_schedule import is_depthwise
from ..registry import ScheduleContext, register_schedule
from .common import (
    MAX_UNROLLED,
    accumulate_privately,
    bind_groups,
    fallback,
    fits,
    unroll_split,
    vector_knob,
    vector_tail,
)

# Register tile defaults, in accumulator vectors per work-item (tile_budget). Mali-T860:
# 2 blocks x 4 columns = 8 float4s, well inside its per-thread registers at full
# occupancy; a depthwise conv, one block per input, 1 x 4. A device preferring 8-lane
# vectors (PoCL on AVX CPUs: a vector is one of 16-32 registers, work-items run one
# after another) measured fastest with about 4x as many for dense convs (4 blocks x 8
# columns: each padded input element loaded feeds 4 blocks' multiply-adds, each weight
# vector 8 columns') and 2x for depthwise ones. Rows of a width with no divisor near the
# budget (7, 13) are one tile of up to MOST_OW columns (register_tile).
TILE_OC, TILE_OW, MOST_OC, MOST_OW = 2, 4, 4, 16
DW_TILE_OC, DW_TILE_OW = 1, 4
MOST_PLAIN_OC = 8  # channels per tile of a plain NCHW conv


@register_schedule("conv2d_nchwc", "opencl")
def schedule_conv2d_nchwc_opencl(ctx: ScheduleContext) -> te.Schedule:
    conv = find_tagged(ctx.anchor, "conv")
    if conv is None or conv.ndim != 5 or not fits(ctx, conv):
        return fallback(ctx)
    if is_depthwise(conv):
        return schedule_depthwise_opencl(ctx, conv)
    made = _blocked_tiles(ctx, conv, tile_budget(ctx.target, TILE_OC * TILE_OW, 2))
    if made is None:
        return fallback(ctx)
    sch, acc, t_oc, t_ow, vec, axes = made
    cfg, block = ctx.cfg, conv.shape[-1]
    rci = axes.get("rci")
    # by default the whole block of input channels unrolled, or as much of it as the
    # unroll budget leaves (a 16-channel block read as float4s on a wide tile)
    per_rci = t_oc * t_ow * (block // vec)
    fit = max(1, MAX_UNROLLED // per_rci)
    unroll_rci = (
        cfg.define_split("unroll_rci", rci.extent, min(rci.extent, fit), most=16) if rci else 1
    )
    kw = axes.get("rk1")
    unroll_kw = cfg.define("unroll_kw", (False, True), False) if kw and kw.extent > 1 else False
    steps = per_rci * unroll_rci * (kw.extent if unroll_kw else 1)
    if steps > MAX_UNROLLED:
        raise ValueError(f"conv tile: {steps} unrolled multiply-adds (most {MAX_UNROLLED})")
    item = _tile_blocked_output(sch[ctx.outs[0]], ctx, t_oc, t_ow, vec)
    st = sch[acc]
    st.compute_at(sch[ctx.outs[0]], item)
    red = []
    for name in ("rcb", "rk0", "rk1"):
        if name in axes:
            red.append(axes[name])
    if rci is not None:
        red += unroll_split(st, rci, unroll_rci)
    if unroll_kw:
        st.unroll(kw)
    _tile_blocked_acc(st, red, vec)
    return sch


def schedule_depthwise_opencl(ctx: ScheduleContext, conv: te.Tensor) -> te.Schedule:
    """Depthwise NCHW[x]c: one input block per output block, so the tile's vectors load
    input vectors directly (guarded at the border); the window is unrolled ("unroll_kw",
    on by default: 9 taps x the tile's columns)."""
    budget = tile_budget(ctx.target, DW_TILE_OC * DW_TILE_OW, 1)
    made = _blocked_tiles(ctx, conv, budget, square=False)
    if made is None:
        return fallback(ctx)
    sch, acc, t_oc, t_ow, vec, axes = made
    cfg, block = ctx.cfg, conv.shape[-1]
    kw = axes.get("rk1")
    unroll_kw = cfg.define("unroll_kw", (False, True), True) if kw and kw.extent > 1 else False
    steps = t_oc * t_ow * (block // vec) * (kw.extent if unroll_kw else 1)
    if steps > MAX_UNROLLED:
        raise ValueError(f"depthwise tile: {steps} unrolled multiply-adds (most {MAX_UNROLLED})")
    item = _tile_blocked_output(sch[ctx.outs[0]], ctx, t_oc, t_ow, vec)
    st = sch[acc]
    st.compute_at(sch[ctx.outs[0]], item)
    if unroll_kw:
        st.unroll(kw)
    _tile_blocked_acc(st, [axes[a] for a in ("rk0", "rk1") if a in axes], vec)
    return sch


def _blocked_tiles(ctx, conv: te.Tensor, budget: int, square: bool = True):
    """A blocked conv's private accumulator and its tile knobs (defaults: tiles of blocks
    x columns holding ``budget`` accumulators at most, see register_tile; the vector
    width): (schedule, accumulator,
    t_oc, t_ow, vec, reduce axes by name), or None when it cannot accumulate privately."""
    made = accumulate_privately(ctx, conv)
    if made is None:
        return None
    sch, acc = made
    cfg = ctx.cfg
    _, out_blocks, _, out_w, block = conv.shape
    axes = {a.var.name: a for a in sch[acc].op.reduce_axis}
    oc_def, ow_def = register_tile(out_blocks, out_w, budget, square)
    t_oc = cfg.define_split("tile_oc", out_blocks, oc_def, most=MOST_OC)
    t_ow = cfg.define_split("tile_ow", out_w, ow_def, most=MOST_OW)
    vec = vector_knob(cfg, block, ctx.target)
    return sch, acc, t_oc, t_ow, vec, axes


def tile_budget(target, mali: int, power: int) -> int:
    """Accumulator vectors of a default tile: ``mali`` (Mali's, for float4) times the
    device's preferred width over 4 to the ``power``."""
    return mali * max(1, target.preferred_vector_width // 4) ** power


def register_tile(rows: int, cols: int, budget: int, square: bool = True) -> tuple[int, int]:
    """(row tile, column tile) dividing ``rows`` (up to MOST_OC) and ``cols`` (up to
    MOST_OW) with the most accumulators within ``budget``; among those the squarest (the
    fewest loads per multiply-add; ``square`` False: the widest, for depthwise convs
    whose blocks share no loads), then the wider. When that fills half the budget at
    most (a prime width), whole rows: as many blocks of a row as the budget holds (at
    least one row, of up to twice the budget)."""
    best = (0, 0, 0)
    for r in (d for d in range(1, min(rows, MOST_OC) + 1) if rows % d == 0):
        for c in (d for d in range(1, min(cols, MOST_OW) + 1) if cols % d == 0):
            if r * c <= budget:
                best = max(best, (r * c, -(r + c) if square else c, c))
    size, _, c = best
    if 2 * size <= budget and cols <= min(2 * budget, MOST_OW):
        fit = max(1, budget // cols)
        return max(d for d in range(1, min(rows, MOST_OC, fit) + 1) if rows % d == 0), cols
    return size // c, c


def _tile_blocked_output(st, ctx, t_oc: int, t_ow: int, vec: int):
    """(n, ob, oh, ow, oi): tiles of t_oc blocks x t_ow columns per work-item, the block
    in vectors; returns the work-item leaf."""
    n, ob, oh, ow, oi = st.op.axis
    obo, obi = st.split(ob, t_oc)
    owo, owi = st.split(ow, t_ow)
    st.reorder(n, obo, oh, owo, obi, owi, oi)
    item = bind_groups(st, ctx.cfg, ctx.target, [n, obo, oh, owo], xy=(oh, owo))
    st.unroll(obi)
    st.unroll(owi)
    vector_tail(st, oi, vec)
    return item


def _tile_blocked_acc(st, red: list, vec: int) -> None:
    """The accumulating stage: the reduction outside the tile's blocks and columns
    (unrolled, one accumulator vector each), the block innermost in vectors."""
    n, ob, oh, ow, oi = st.op.axis
    st.reorder(n, oh, *red, ob, ow, oi)
    st.unroll(ob)
    st.unroll(ow)
    vector_tail(st, oi, vec)


@register_schedule("conv", "opencl")
def schedule_conv_opencl(ctx: ScheduleContext) -> te.Schedule:
    """Plain NCHW 2-D convs: tiles of channels x columns, the columns in vectors when
    the stride along W is 1 (neighbouring outputs read neighbouring inputs)."""
    conv = find_tagged(ctx.anchor, "conv")
    if conv is None or conv.ndim != 4 or not fits(ctx, conv):
        return fallback(ctx)
    made = accumulate_privately(ctx, conv)
    if made is None:
        return fallback(ctx)
    sch, acc = made
    cfg = ctx.cfg
    _, channels, _, out_w = conv.shape
    t_oc = cfg.define_split("tile_oc", channels, TILE_OC * 2, most=MOST_PLAIN_OC)
    t_ow = cfg.define_split("tile_ow", out_w, TILE_OW, most=MOST_OW)
    unit_stride = list(conv.op.attrs.get("strides", [1, 1]))[-1] == 1
    vec = vector_knob(cfg, t_ow, ctx.target) if unit_stride else cfg.define("vector", (1,), 1)
    axes = {a.var.name: a for a in sch[acc].op.reduce_axis}
    kw = axes.get("rk1")
    unroll_kw = cfg.define("unroll_kw", (False, True), True) if kw and kw.extent > 1 else False
    steps = t_oc * t_ow * (kw.extent if unroll_kw else 1)
    if steps > MAX_UNROLLED:
        raise ValueError(f"conv tile: {steps} unrolled multiply-adds (most {MAX_UNROLLED})")
    out = sch[ctx.outs[0]]
    n, m, oh, ow = out.op.axis
    mo, mi = out.split(m, t_oc)
    owo, owi = out.split(ow, t_ow)
    out.reorder(n, mo, oh, owo, mi, owi)
    item = bind_groups(out, cfg, ctx.target, [n, mo, oh, owo], xy=(oh, owo))
    out.unroll(mi)
    vector_tail(out, owi, vec)
    st = sch[acc]
    st.compute_at(out, item)
    cn, cm, coh, cow = st.op.axis
    red = [axes[a] for a in ("rc", "rk0", "rk1") if a in axes]
    if unroll_kw:
        st.unroll(kw)
    st.reorder(cn, coh, *red, cm, cow)
    st.unroll(cm)
    vector_tail(st, cow, vec)
    return sch
