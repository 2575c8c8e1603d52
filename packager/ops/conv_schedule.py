"""CPU schedule template for ``conv2d_nchwc``: blocked direct convolution with a
register tile (a few output blocks x rows x columns, one vector per block).

Loop nest (TVM's x86 NCHWc schedule, in our primitives), the knobs in quotes, defaults
first:

    parallel (n, ob_outer, oh_outer)      -- "parallel"; "outer_order": oc_oh | oh_oc
      ow_outer
        conv tile (computed at ow_outer, a local buffer the codegen keeps in vector
        registers): for the reduction loops -- "reduce_order" (rcb kh kw rci, ...),
        "rcb_split" (input-channel blocking), "unroll_rci", "unroll_kw":
          for ob_inner, oh_inner, ow_inner (unrolled; "tile_oc", "tile_oh", "tile_ow"):
            acc[ob_inner][oh_inner][ow_inner][:] += x[..broadcast..] * w[..vector..]
        epilogue: for ob_inner, oh_inner, ow_inner (unrolled), oi (vectorized):
            out = relu(acc + bias) + residual ...   (the group's inlined stages)

The pad stage is computed at root into a temporary ("pad"), so the hot loop has no bounds
checks. Depthwise and 1x1 convs use the same nest (depthwise has no rcb/rci; 1x1 has no
kh/kw: a packed GEMM over the channel blocks). Every knob's default gives the nest this
template had before the knob existed (tests/ops/test_conv_schedule_knobs.py pins it).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import te
from ..te.schedule import Schedule, create_schedule, default_schedule
from . import conv_nchwc  # noqa: F401  (registers the op this module schedules)
from ._cpu import find_tagged, inline_around_pad, padded_copy_at_root
from .dwconv_schedule import is_depthwise, schedule_depthwise_cpu
from .registry import ScheduleContext, register_schedule

# Accumulators one register tile may use. Measured on AVX2/AVX-512 (EPYC, GCC -O2):
# 2 blocks x 7 columns (14 accumulators) runs at ~93% of the FMA peak, while 8
# accumulators stay near 50-70% (too few FMAs in flight to hide their latency). GCC
# feeds the FMAs from memory operands, so the weights and the broadcast need few
# registers; NEON has 32 vector registers.
ACC_REGS = 14
MAX_OC_TILE = 4


def _divisors(n: int, most: int) -> list[int]:
    # [1] for an empty (zero-sized) extent: it has no divisor, and any tile will do.
    return [d for d in range(1, min(n, most) + 1) if n % d == 0] or [1]


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
    conv = find_tagged(ctx.anchor, "conv")
    out = ctx.outs[0]
    if conv is None or len(ctx.outs) != 1 or tuple(out.shape) != tuple(conv.shape):
        return default_schedule(ctx.outs)  # an epilogue that changes shape: no tile to share
    if is_depthwise(conv):
        return schedule_depthwise_cpu(ctx, conv)
    sch = create_schedule(ctx.outs)
    pad = inline_around_pad(sch, conv)
    cfg = ctx.cfg
    _, out_blocks, out_h, out_w, block = conv.shape
    oc_def, ow_def = default_tile(out_blocks, out_w)
    oc_tile = cfg.define_split("tile_oc", out_blocks, oc_def, most=MAX_OC_TILE)
    ow_tile = cfg.define_split("tile_ow", out_w, ow_def, most=16)
    vec = cfg.define("vectorize_oc", (True, False), block in (2, 4, 8, 16))
    par = cfg.define("parallel", ("n_oc_oh", "n_oc", "none"), "n_oc_oh")
    pad_at = cfg.define("pad", ("root", "inline"), _default_pad(conv))
    tile = _Tile(
        oc_tile,
        ow_tile,
        vec,
        par,
        oh=cfg.define_split("tile_oh", out_h, 1, most=MAX_OH_TILE),
        outer=cfg.define("outer_order", ("oc_oh", "oh_oc"), "oc_oh"),
        red=_define_reduction(cfg, conv),
    )
    kw = {a.var.name: a.extent for a in conv.op.reduce_axis}.get("rk1", 1)
    body = tile.oc * tile.oh * tile.ow * tile.red.rci_unroll * (kw if tile.red.kw_unroll else 1)
    if body > MAX_UNROLLED:
        # a straight-line body this long misses the instruction cache and takes the
        # compiler seconds; every setting of the knobs before the unroll ones fits
        raise ValueError(f"conv tile: {body} unrolled multiply-adds (most {MAX_UNROLLED})")
    if pad is not None:
        _schedule_pad(sch, pad, pad_at)
    if conv is out:
        # no epilogue: the tile accumulates in registers and is copied out, as with one;
        # summed in the output, GCC loaded and stored it around every multiply-add
        # (a 96 -> 24 3x3 conv at 160x160: 48 GFLOP/s, 101 with a ReLU after it)
        conv = sch.cache_write(conv, "local")
    outer = _tile_output(sch[out], tile)
    sch[conv].compute_at(sch[out], outer)
    _order_reduction(sch[conv], tile)
    return sch


@dataclass(frozen=True)
class _Reduction:
    """How a tile walks its reduction: the order of the loops (kh/kw name the window's),
    the input-channel block loop split (see ``_reduction_loops``), the channel lanes
    unrolled by a factor, and the window's column loop unrolled."""

    order: tuple[str, ...]
    rcb_split: int = 1
    rci_unroll: int = 1
    kw_unroll: bool = False


@dataclass(frozen=True)
class _Tile:
    oc: int
    ow: int
    vec: bool
    par: str
    oh: int = 1  # output rows per register tile
    outer: str = "oc_oh"  # the output-block loop outside the row loop, or inside it
    red: _Reduction = _Reduction(("rcb", "kh", "kw", "rci"))


# Candidate orders of the reduction loops (the first is the default: the compute's own).
REDUCTION_ORDERS = (
    ("rcb", "kh", "kw", "rci"),
    ("kh", "kw", "rcb", "rci"),
    ("kh", "rcb", "kw", "rci"),
    ("rcb", "rci", "kh", "kw"),
)
_AXIS = {"kh": "rk0", "kw": "rk1"}
MAX_OH_TILE = 2
MAX_UNROLLED = 128  # register tile x unrolled reduction steps, multiply-adds in a row
MAX_RCB_SPLIT = 4


def _define_reduction(cfg, conv: te.Tensor) -> _Reduction:
    axes = {a.var.name: a for a in conv.op.reduce_axis}
    present = [name for name in REDUCTION_ORDERS[0] if _AXIS.get(name, name) in axes]
    orders = []
    for order in REDUCTION_ORDERS:
        kept = tuple(name for name in order if name in present)
        if kept not in orders:
            orders.append(kept)
    # A conv reading plain NCHW (a network's first: no channel lanes) walks its few input
    # channels innermost, after the window. Measured on the host (1 thread): ResNet-18's
    # 7x7 stem 2.69 -> 2.17 ms, MobileNetV2's 3x3 stem 0.341 -> 0.307 ms.
    plain = "rci" not in axes and ("kh", "kw", "rcb") in orders
    order = cfg.define("reduce_order", orders, ("kh", "kw", "rcb") if plain else orders[0])
    rcb = axes.get("rcb")
    rci = axes.get("rci")
    kw = axes.get("rk1")
    # a proper divisor only: splitting off all blocks would repeat another order
    most = min(MAX_RCB_SPLIT, rcb.extent // 2) if rcb else 1
    split = cfg.define_split("rcb_split", rcb.extent, 1, most=most) if rcb else 1
    unroll = (
        cfg.define_split("unroll_rci", rci.extent, _default_rci_unroll(rci.extent)) if rci else 1
    )
    kw_unroll = cfg.define("unroll_kw", (False, True), False) if kw and kw.extent > 1 else False
    return _Reduction(order, split, unroll, kw_unroll)


def _default_rci_unroll(lanes: int) -> int:
    """Two channel lanes per step of the hot loop. With one, GCC (12, -O2, AVX2 and
    AVX-512) often keeps each accumulator in two registers and copies it back every step
    (a 132-form FMA overwrites the weight vector): 14 extra moves per 14 FMAs, 2.10 ->
    2.40 ms on ResNet-18's 56x56 3x3 conv, depending on code far from the loop. Unrolled
    by two, every layer of ResNet-18 measured 2.07-2.18 ms in the same run."""
    return 2 if lanes % 2 == 0 else 1


def _reduction_loops(st, red: _Reduction) -> list:
    """The stage's reduction loops, split and ordered as ``red`` says (outermost first);
    unrolls the ones it says. With the defaults: the compute's own axes, untouched."""
    axes = {a.var.name: a for a in st.op.reduce_axis}
    loops = [axes[_AXIS.get(name, name)] for name in red.order]
    if red.rcb_split > 1:
        rcb = axes["rcb"]
        outer, inner = st.split(rcb, red.rcb_split)
        k = loops.index(rcb)
        loops[k] = outer
        # the blocks' inner part goes just outside the channel lanes when window loops
        # lie between them (a few blocks stay in L1 over the window), else innermost
        at = loops.index(axes["rci"]) if "rci" in axes else len(loops)
        loops.insert(at if at > k + 1 else len(loops), inner)
    if red.rci_unroll > 1:
        rci = axes["rci"]
        if red.rci_unroll == rci.extent:
            st.unroll(rci)
        else:
            outer, inner = st.split(rci, red.rci_unroll)
            loops[loops.index(rci)] = outer
            loops.append(inner)
            st.unroll(inner)
    if red.kw_unroll:
        st.unroll(axes["rk1"])
    return loops


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
    # in vectors when a block is one (ResNet-18 56x56x64: 0.035 -> 0.016 ms)
    padded_copy_at_root(st, True, st.op.axis[-1].extent in (2, 4, 8, 16))


def _tile_output(st, t: _Tile):
    """Split the output into register tiles; returns the loop the conv tile is computed
    at (ow_outer)."""
    n, ob, oh, ow, oi = st.op.axis
    obo, obi = st.split(ob, t.oc)
    oho, ohi = st.split(oh, t.oh) if t.oh > 1 else (oh, None)
    owo, owi = st.split(ow, t.ow)
    outer = (n, obo, oho) if t.outer == "oc_oh" else (n, oho, obo)
    inner = [x for x in (obi, ohi, owi) if x is not None]
    st.reorder(*outer, owo, *inner, oi)
    _annotate(st, outer, t.par)
    for x in inner:
        st.unroll(x)
    if t.vec:
        st.vectorize(oi)
    return owo


def _annotate(st, outer, par: str) -> None:
    """``n_oc_oh``: the three loops outside the tile in parallel; ``n_oc``: the outer two
    (with ``outer_order`` ``oh_oc`` those are n and the rows)."""
    if par == "n_oc_oh":
        st.parallel(st.fuse(*outer))
    elif par == "n_oc":
        st.parallel(st.fuse(*outer[:2]))


def _order_reduction(st, t: _Tile) -> None:
    """Inside one tile: the reduction outside, the tile's blocks, rows and columns inside
    (unrolled: each (block, row, column) is one accumulator register)."""
    n, ob, oh, ow, oi = st.op.axis
    red = _reduction_loops(st, t.red)
    if t.oh > 1:
        st.reorder(n, *red, ob, oh, ow, oi)
        st.unroll(oh)
    else:
        st.reorder(n, oh, *red, ob, ow, oi)
    st.unroll(ob)
    st.unroll(ow)
    if t.vec:
        st.vectorize(oi)
