"""CPU schedule template for depthwise ``conv2d_nchwc`` (one input channel per output
channel; the channel block is both the input's and the output's innermost axis).

A depthwise conv does 9 multiply-adds per output element (3x3) and reads each input
element ~9/stride^2 times, so it is bound by memory and by how the padded input is
made, not by the FMA units. Loop nest:

    pad (knob "pad"):
      inline: guarded loads in the hot loop (one branch per tap for all lanes; default)
      root:   parallel (n, cb, h): for w: for ci (vectorized): the padded copy
    parallel (n, ob_outer, oh)            -- knob "parallel"; on a board whose cores
                                             divide the rows, (n, band, ob_outer) with
                                             ohi inside: a band of rows per core
                                             (_cpu.row_bands)
      ow_outer
        conv tile (computed at ow_outer):
          for kh, kw: for ob_inner, ow_inner (unrolled): for oi (vectorized):
            acc[ob_inner][ow_inner][:] += x[ob, ih, iw, :] * w[ob, kh, kw, :]
        epilogue: for ob_inner, ow_inner (unrolled), oi (vectorized):
            out = clip(acc + bias) ...

Knobs: ``tile_oc`` (channel blocks per tile), ``tile_ow`` (output columns per tile),
``vectorize_oc``, ``parallel``, ``pad``.
"""

from __future__ import annotations

from .. import te
from ..te.schedule import Schedule, create_schedule
from ._cpu import inline_around_pad, padded_copy_at_root, row_bands, vector_registers
from .registry import ScheduleContext

# Accumulators in one tile (2 blocks x 7 columns by default with 32 vector registers).
# Each tap is one load and one FMA per accumulator, so the tile only has to keep enough
# FMAs in flight: measured on the MobileNetV2-style network (EPYC, AVX-512, one
# thread), 2x7 and 1x8 run the large memory-bound layers alike (~0.14 ms for 32
# channels at 112x112), while the cache-resident 28x28 layers want ~14 (0.10 ms
# against 0.13 with 7) and 4 columns are twice as slow as 8.
DW_ACC = 14
MAX_OC_TILE = 2
# With 16 vector registers a tile of 14 accumulators leaves too few for the tap's weight
# and input vectors and GCC spills. Measured on a Zen 3 (AVX2, 1 thread,
# bench/ab_bundles.py, 5 rounds, the changed kernels' time against the unchanged ones'):
# tv_mobilenet_v2's depthwise convs 0.53x the 2 x 7 tile's time with 1 x 7; 1 x 14 ran
# 1.9x and 1 x 4 1.22x the 1 x 7 one, 1 x 8 alike within the noise (the 56-wide layer
# 1.1-1.4x slower). Tuning runs on that machine had ranked one block first for every
# depthwise conv of the network, mostly with 7 columns. ARMv7 NEON (16 registers) takes
# the same rule, unmeasured.
DW_ACC_FEW_REGS = 7


def is_depthwise(conv: te.Tensor) -> bool:
    """A conv whose reduction is the window only (no input-block axis)."""
    return conv.op.attrs.get("groups", 1) > 1 and not any(
        a.name.startswith(("rcb", "rci")) for a in conv.op.reduce_axis
    )


def _largest_divisor(n: int, most: int) -> int:
    # default=1: an empty (zero-sized) extent has no divisor, and any tile will do.
    return max((d for d in range(1, min(n, most) + 1) if n % d == 0), default=1)


def default_tile_oc(target) -> int:
    """Blocks a tile takes by default: MAX_OC_TILE with 32 vector registers, one with 16
    (AVX2, ARMv7 NEON)."""
    return 1 if vector_registers(target) <= 16 else MAX_OC_TILE


def default_tile_ow(target, out_w: int, oc_tile: int) -> int:
    """Columns a tile of ``oc_tile`` blocks takes by default: DW_ACC accumulators in
    all, and at most DW_ACC_FEW_REGS columns with 16 vector registers."""
    most = DW_ACC // oc_tile
    if vector_registers(target) <= 16:
        most = min(most, DW_ACC_FEW_REGS)
    return _largest_divisor(out_w, most)


def default_pad(vectorized: bool) -> str:
    """Guarded loads in the hot loop when the block is vectorized: the guard is one
    branch per tap for all lanes (codegen/c.py renders such a select as an if/else) and
    the input is read once, where a padded copy at root writes and reads it again
    (measured, one thread: 32 channels at 112x112, stride 1: 0.14 ms inline against
    0.19 ms root; 96 channels at 112x112, stride 2: 0.14 against 0.42)."""
    return "inline" if vectorized else "root"


def schedule_depthwise_cpu(ctx: ScheduleContext, conv: te.Tensor) -> Schedule:
    out = ctx.outs[0]
    sch = create_schedule(ctx.outs)
    pad = inline_around_pad(sch, conv)
    cfg = ctx.cfg
    _, out_blocks, _, out_w, block = conv.shape
    oc_tile = cfg.define_split("tile_oc", out_blocks, default_tile_oc(ctx.target), most=MAX_OC_TILE)
    ow_tile = cfg.define_split(
        "tile_ow", out_w, default_tile_ow(ctx.target, out_w, oc_tile), most=16
    )
    vec = cfg.define("vectorize_oc", (True, False), block in (2, 4, 8, 16))
    par = cfg.define("parallel", ("n_oc_oh", "n_oc", "none"), "n_oc_oh")
    pad_at = cfg.define("pad", ("root", "inline"), default_pad(vec))
    if pad is None:
        pad_at = "none"
    n, ob, oh, ow, oi = sch[out].op.axis
    st = sch[out]
    obo, obi = st.split(ob, oc_tile)
    owo, owi = st.split(ow, ow_tile)
    red = list(st.op.reduce_axis) if conv is out else []  # accumulates in the output
    bands = row_bands(ctx.target, conv.shape[2]) if par == "n_oc_oh" else 1
    if bands > 1:  # each core a band of rows of every channel block
        ohb, ohi = st.split(oh, conv.shape[2] // bands)
        st.reorder(n, ohb, obo, ohi, owo, *red, obi, owi, oi)
        st.parallel(st.fuse(n, ohb, obo))
    else:
        st.reorder(n, obo, oh, owo, *red, obi, owi, oi)
        if par == "n_oc_oh":
            st.parallel(st.fuse(n, obo, oh))
        elif par == "n_oc":
            st.parallel(st.fuse(n, obo))
    st.unroll(obi)
    st.unroll(owi)
    if vec:
        st.vectorize(oi)
    if conv is not out:
        sch[conv].compute_at(st, owo)
        c = sch[conv]
        cn, cob, coh, cow, coi = c.op.axis
        c.reorder(cn, coh, *c.op.reduce_axis, cob, cow, coi)
        c.unroll(cob)
        c.unroll(cow)
        if vec:
            c.vectorize(coi)
    _schedule_pad(sch, pad, pad_at, vec)
    return sch


def _schedule_pad(sch: Schedule, pad, where: str, vec: bool) -> None:
    if where == "none":
        return
    p = sch[pad]
    if where == "inline":
        p.compute_inline()
        return
    padded_copy_at_root(p, True, vec)
