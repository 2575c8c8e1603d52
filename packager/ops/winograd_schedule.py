"""CPU schedule template for ``conv2d_winograd_nchwc`` (see conv_winograd.py).

pad (root, parallel rows)
input transform, parallel over (input block, tile):
    row pass d B computed per tile into a small local buffer, then B^T (d B),
    vectors over the input block's lanes
products, parallel over transformed points (x output blocks):
    per (point, oc tile, tile-of-tiles): a register tile of tile_oc blocks x
    tile_t tiles accumulates over the input channels, then is stored (with 16 vector
    registers: 2 blocks x FEW_REGS_TILES tiles, which divides the count of tiles where
    the op's tile_multiple attribute rounded it up: see ``tile_multiple``)
output transform + epilogue, parallel over (n, output block, tile row):
    per tile: (M A) into a local buffer, then A^T (M A) in registers, then the
    group's inlined epilogue (bias, activation, residual) as the tile is stored
"""

from __future__ import annotations

from .. import te
from ..te.schedule import Schedule, create_schedule, default_schedule
from . import conv_winograd  # noqa: F401  (registers the op this module schedules)
from ._cpu import find_tagged, padded_copy_at_root, vector_registers
from .conv_schedule import MAX_OC_TILE, acc_budget, default_tile, default_tile_order
from .registry import ScheduleContext, register_schedule

# With 16 vector registers (AVX2) the products take 2 output blocks x 6 tiles: 12
# accumulators, the 2 weight vectors and a broadcast fit in registers, and a step loads 8
# vectors for 12 multiply-adds. The 2 x 7 and 1 x 14 tiles that divide counts of tiles
# such as 49 and 196 do not fit: GCC reloads a weight vector for every multiply-add
# (15 loads for 14) and keeps an accumulator on the stack. So a build for such a target
# gives the op a tile_multiple of 6: it rounds its count of tiles up (49 -> 54, 196 ->
# 198; the extra tiles repeat the last one and are dropped). Measured on a Zen 3 (AVX2,
# 1 thread): the products alone, in a C loop of the same layout, ResNet-18's 56x56 F(4x4)
# 1.24 -> 0.64 ms, 28x28 F(4x4) 1.13 -> 0.87, 14x14 F(2x2) 2.19 -> 1.70; in whole models
# (bench/ab_bundles.py, the Winograd kernels' sums) tv_resnet18 0.75x (the others 1.01x),
# ResNet-50 0.73x, VGG-19 0.73x, DenseNet-121 0.80x, Inception v1 0.82x (README).
FEW_REGS_TILES = 6


def tile_multiple(target) -> int:
    """The ``tile_multiple`` attribute of a Winograd conv built for ``target`` (1: the
    count of tiles as it is)."""
    return FEW_REGS_TILES if vector_registers(target) <= 16 else 1


def _by_name(sch: Schedule) -> dict[str, te.Tensor]:
    return {st.op.name: st.tensor for st in sch.stages}


def _tile(st, order, unrolled, lanes) -> None:
    """Loops of ``st`` in ``order`` (its leaves from the first named on), ``unrolled``
    unrolled, ``lanes`` vectorized: a tile of accumulators held in registers."""
    st.reorder(*order)
    for iv in unrolled:
        st.unroll(iv)
    st.vectorize(lanes)


def _tiles_of(out: te.Tensor, conv: te.Tensor) -> bool:
    """Whether ``out`` is an elementwise epilogue of the conv (cropped to the output size
    when the conv computes whole tiles past it)."""
    if out.ndim != 5:
        return False
    same = [out.shape[d] == conv.shape[d] for d in (0, 1, 4)]
    return all(same) and all(out.shape[d] <= conv.shape[d] for d in (2, 3))


@register_schedule("conv2d_winograd_nchwc", "cpu")
def schedule_winograd_cpu(ctx: ScheduleContext) -> Schedule:
    conv = find_tagged(ctx.anchor, "conv_winograd")
    out = ctx.outs[0]
    if conv is None or len(ctx.outs) != 1 or not _tiles_of(out, conv):
        return default_schedule(ctx.outs, ctx.target)
    sch = create_schedule(ctx.outs)
    stages = _by_name(sch)
    kept = {"winograd_pad", "winograd_b", "winograd_a", "winograd_m_store"}
    for st in sch.stages:
        if not (st.is_output or st.op.reduce_axis or st.op.name in kept):
            st.compute_inline()
    cfg = ctx.cfg
    m = conv.op.attrs["tile"]
    par = ctx.target.cores > 1
    if "winograd_pad" in stages:
        padded_copy_at_root(sch[stages["winograd_pad"]], par, True)
    _input_transform(sch, stages, par)
    _products(sch, stages, cfg, par, ctx.target)
    _output_transform(sch, stages, conv, out, m, par)
    return sch


# Tiles one parallel task of the input transform covers: the transform of one tile writes
# one vector per transformed point, so tasks of single tiles would share cache lines
# between threads (and be too small to pay for handing them out).
TILES_PER_TASK = 16


def _input_transform(sch: Schedule, stages, par: bool) -> None:
    v = sch[stages["winograd_v"]]
    e1, e2, icb, t, ci = v.op.axis
    (ra,) = v.op.reduce_axis
    chunk = max(d for d in range(1, TILES_PER_TASK + 1) if t.extent % d == 0)
    to, ti = v.split(t, chunk)
    _tile(v, (icb, to, ti, e1, e2, ra, ci), [ra], ci)
    if par:
        v.parallel(v.fuse(icb, to))
    dt = sch[stages["winograd_dt"]]
    dt.compute_at(v, ti)
    _, _, a, e2d, ci = dt.op.axis
    (rb,) = dt.op.reduce_axis
    _tile(dt, (a, e2d, rb, ci), [rb], ci)


def _products(sch: Schedule, stages, cfg, par: bool, target) -> None:
    store = sch[stages["winograd_m_store"]]
    prod = sch[stages["winograd_m"]]
    e1, e2, o, t, oi = store.op.axis
    out_blocks, ntiles = o.extent, t.extent
    few = tile_multiple(target)
    if few > 1 and ntiles % few == 0 and out_blocks % 2 == 0:
        oc_def, t_def = 2, few
    else:
        oc_def, t_def = default_tile(out_blocks, ntiles, acc_budget(target))
    oc_tile = cfg.define_split("tile_oc", out_blocks, oc_def, most=MAX_OC_TILE)
    t_tile = cfg.define_split("tile_t", ntiles, t_def, most=16)
    # tiles outside blocks where the broadcasts would not fit (as the direct conv's)
    spills = default_tile_order(target, oc_tile, t_tile) == "ow_oc"
    order = cfg.define("tile_order", ("oc_t", "t_oc"), "t_oc" if spills else "oc_t")
    oo, oin = store.split(o, oc_tile)
    to, tin = store.split(t, t_tile)
    _tile(store, (e1, e2, oo, to, oin, tin, oi), [oin, tin], oi)
    if par:
        store.parallel(store.fuse(e1, e2, oo))
    prod.compute_at(store, to)
    _, _, po, pt, poi = prod.op.axis
    rcb, rci = prod.op.reduce_axis
    inner = (po, pt) if order == "oc_t" else (pt, po)
    _tile(prod, (rcb, rci, *inner, poi), [po, pt], poi)


def _output_transform(sch: Schedule, stages, conv, out, m: int, par: bool) -> None:
    st = sch[out]
    n, ob, h, w, oi = st.op.axis
    ho, hi = st.split(h, m)
    wo, wi = st.split(w, m)
    if out is conv:
        st.reorder(n, ob, ho, wo, conv.op.reduce_axis[0], hi, wi, oi)
    else:
        st.reorder(n, ob, ho, wo, hi, wi, oi)
    st.unroll(hi)
    st.unroll(wi)
    st.vectorize(oi)
    if par:
        st.parallel(st.fuse(n, ob, ho))
    z = sch[stages["winograd_z"]]
    if out is conv:
        z.compute_at(st, wo)
    else:  # z is read by the conv stage only: computed at it (one tile)
        y = sch[conv]
        y.compute_at(st, wo)
        _, yob, yh, yw, yoi = y.op.axis
        (ya,) = y.op.reduce_axis
        _tile(y, (ya, yh, yw, yoi), [yh, yw], yoi)
        z.compute_at(y, yob)
    _, _, a, zwi, zoi = z.op.axis
    (rb2,) = z.op.reduce_axis
    _tile(z, (a, rb2, zwi, zoi), [rb2, zwi], zoi)
