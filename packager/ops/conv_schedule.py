"""CPU schedule template for ``conv2d_nchwc``: blocked direct convolution with a
register tile (a few output blocks x rows x columns, one vector per block).

Loop nest (TVM's x86 NCHWc schedule, in our primitives), the knobs in quotes, defaults
first:

    parallel (n, ob_outer, oh_outer)      -- "parallel"; "outer_order": oc_oh | oh_oc
                                             (oh_oc on a multi-core board where the
                                             weights are no larger than the input and
                                             output, _cpu.rows_first; for a 1x1 conv
                                             over a large input or a strided one)
      ow_outer
        conv tile (computed at ow_outer, a local buffer the codegen keeps in vector
        registers): for the reduction loops -- "reduce_order" (rcb kh kw rci, ...),
        "rcb_split" (input-channel blocking), "unroll_rci", "unroll_kw":
          for ob_inner, oh_inner, ow_inner (unrolled; "tile_oc", "tile_oh", "tile_ow";
          "tile_order": oc_ow | ow_oc, the blocks inside the columns where registers
          are few):
            acc[ob_inner][oh_inner][ow_inner][:] += x[..broadcast..] * w[..vector..]
          ("prefetch_weights": with each weight vector, the next tile's into the L2)
        epilogue: for ob_inner, oh_inner, ow_inner (unrolled), oi (vectorized):
            out = relu(acc + bias) + residual ...   (the group's inlined stages)

The pad stage is computed at root into a temporary ("pad"), so the hot loop has no bounds
checks. Depthwise and 1x1 convs use the same nest (depthwise has no rcb/rci; 1x1 has no
kh/kw: a packed GEMM over the channel blocks). Every knob's default gives the nest this
template had before the knob existed (tests/ops/test_conv_schedule_knobs.py pins it). A
1x1 conv computed over its pixels as one axis (the op's ``pixel_multiple``, which
graph/passes/pixel_tiles.py gives 16-register targets) takes the nest of
conv_pixels_schedule.py instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import te
from ..te.schedule import Schedule, create_schedule, default_schedule
from . import conv_nchwc  # noqa: F401  (registers the op this module schedules)
from ._cpu import (
    DEFAULT_L1_BYTES,
    MAX_UNROLLED,
    OUTER_MIN_PASSES,
    find_tagged,
    inline_around_pad,
    input_outgrows_l2,
    padded_copy_at_root,
    rows_first,
    tensor_bytes,
    vector_registers,
)
from .conv_pixels_schedule import schedule_pixels_cpu
from .dwconv_schedule import is_depthwise, schedule_depthwise_cpu
from .registry import ScheduleContext, register_schedule
from .weight_prefetch import conv_weight, prefetch_next_weights

# Accumulators one register tile may use. Measured on AVX2/AVX-512 (EPYC, GCC -O2):
# 2 blocks x 7 columns (14 accumulators) runs at ~93% of the FMA peak, while 8
# accumulators stay near 50-70% (too few FMAs in flight to hide their latency). GCC
# feeds the FMAs from memory operands, so the weights and the broadcast need few
# registers (with -O3 and 16 registers it did not always: see default_tile_order);
# NEON has 32 vector registers.
ACC_REGS = 14
# By the board's vector width where it has more registers: AVX-512 has 32, so a tile
# of up to 24 accumulators (3 blocks x 7 columns at 7 and 14 wide, 3 x 8 at 56) still
# leaves the weight vectors and a broadcast in registers, and loads fewer weights per
# multiply-add. Measured on the host (Xeon, 1 thread, per-kernel minimum of 5 runs):
# torchvision MobileNetV2 4.35 -> 4.05 ms, its 1x1 convs 3-20% faster; ResNet-18
# 19.2 -> 19.0 ms; 28 accumulators lost (MobileNetV2 5.2 ms: spills).
ACC_BUDGET = {512: 24}


# With 16 registers (AVX2), a tile of exactly 12 accumulators where the shape has one
# (3 blocks x 4 columns): walked columns outside blocks it holds 12 + 3 weights + 1
# broadcast, no spill. Measured on the host at 256 bits (per-kernel minimum of 5 runs):
# MobileNetV2's 56- and 112-wide 1x1 convs 6-13% faster than 2 x 7. Where no 12 tile
# exists the 14 one stays (4 x 2 or 1 x 7 instead lost up to 14% on 7- and 14-wide
# expansions).
SPILL_FREE = 12


def acc_budget(target) -> int:
    """Accumulators one register tile of ``target``'s vectors may use."""
    return ACC_BUDGET.get(target.vector_bits, ACC_REGS)


# A 1x1 conv's tile reads its oc blocks' weights (oc x K x block floats) once per column
# tile: where they and the tile's input columns (ow x K floats) outgrow the L1, every
# column tile streams the weights from the L2 again. At 512 bits the default keeps the
# two within this share of the L1 and, where even one block's weights do not fit, takes
# one block and at most POINTWISE_COLUMNS columns. Measured on the host (Zen 4, 32 KiB
# L1, 1 thread, per-kernel medians, `packager tune` of single convs): 256 -> 64 at 56x56
# ran 1.14 ms with the old 4 x 4 tile and 0.90 ms with 1 x 8 (111 GFLOP/s, 96% of the FMA
# peak); 512 -> 128 at 28x28 0.99 against 0.89 with 1 x 7; a 4-block tile of either was
# slower than every 1-block one the tuner tried. Small reductions (K <= 160) ran alike
# with 1 to 4 blocks, and keep the most accumulators.
L1_SHARE = 0.75
POINTWISE_COLUMNS = 8
# Only where a row has this many column tiles: MobileNetV2's 14- and 7-wide 1x1 convs
# (1 or 2 tiles a row) ran 0.95-1.06x with the rule, so they keep the general one.
MIN_COLUMN_TILES = 4


def pointwise_tile(
    target, out_blocks: int, out_width: int, reduce_bytes: int, block: int
) -> tuple[int, int] | None:
    """The default (oc tile, ow tile) of a 1x1 conv at 512 bits whose reduction has
    ``reduce_bytes`` per output pixel (K x element size) and whose output blocks hold
    ``block`` channels, or None where the general rule stands."""
    if target.vector_bits < 512:
        return None
    budget = acc_budget(target)
    room = L1_SHARE * (target.l1d_bytes or DEFAULT_L1_BYTES)
    fitting = [
        (oc, ow)
        for oc, ow in _tiles(out_blocks, out_width, budget)
        if (oc * block + ow) * reduce_bytes <= room
    ]
    best = max(fitting, key=_tile_rank, default=None)
    if best is None or best[0] * best[1] < POINTWISE_COLUMNS - 1:
        best = 1, max(_divisors(out_width, POINTWISE_COLUMNS))
    # too few accumulators (a 13-wide row has no divisor from 2 to 8: one accumulator ran
    # Inception's 1x1 convs 3.5x slower), or rows of a few column tiles, which read the
    # weights a few times a row whatever the tile, and where the general rule's wider
    # tiles load fewer broadcasts: the general rule
    if best[0] * best[1] < POINTWISE_COLUMNS - 1 or out_width < MIN_COLUMN_TILES * best[1]:
        return None
    return best


def target_tile(
    target,
    out_blocks: int,
    out_width: int,
    pointwise: tuple[int, int] | None = None,
    plain: bool = False,
) -> tuple[int, int]:
    """The default (oc tile, ow tile) of a direct conv on ``target``; a 1x1 conv passes
    ``pointwise``: its reduction's bytes per output pixel and its block (pointwise_tile);
    ``plain``: the conv reads a plain NCHW input (a network's first, no channel lanes)."""
    if vector_registers(target) <= 16:
        oc, ow = default_tile(out_blocks, out_width, SPILL_FREE)
        if oc * ow == SPILL_FREE:
            return oc, ow
        # A 1x1 conv or one reading plain NCHW: one block and up to 14 columns (14
        # accumulators, the weight vector and the broadcast fill the 16 registers).
        # Measured on a Zen 3 (AVX2, 1 thread, bench/ab_bundles.py): the 7x7 stems of
        # tv_resnet18 and light ResNet-50 0.90x and 0.73x the 2 x 7 tile's time (a
        # tuning run of the stem alone ranked 1 x 14 first). Convs with channel lanes
        # walked one lane a step (_default_rci_unroll) keep 2 x 7: there 1 x 14 and 1 x
        # 7 ran ResNet-18's 3x3 convs 1.2-1.5x slower.
        ow = max(_divisors(out_width, ACC_REGS))
        if (pointwise or plain) and target.vector_bits == 256 and ow >= POINTWISE_COLUMNS - 1:
            return 1, ow
    if pointwise:
        tile = pointwise_tile(target, out_blocks, out_width, *pointwise)
        if tile is not None:
            return tile
    return default_tile(out_blocks, out_width, acc_budget(target))


# A conv reading plain NCHW (a network's first) at 512 bits: one block, STEM_ROWS rows
# and up to 7 columns (14 accumulators). Its reduction is the window and a few input
# channels, so each step's weight vector serves every accumulator of the tile, and two
# rows of one block load one weight vector and 14 broadcasts a step where the general
# rule's 4 blocks x 4 columns load 4 weight vectors and 4 broadcasts for 16. Tuning
# runs of tv_resnet18's and tv_mobilenet_v2's stems ranked such tiles first. Measured on
# a Zen 4 (AVX-512, 1 thread, bench/ab_bundles.py, 4 rounds, the stem against the
# kernels left alike): the 7x7 stride-2 stems of tv_resnet18, ResNet-50, Inception v1
# and v2 and DenseNet-121 2.6 -> 2.1 ms (0.81-0.82x), VGG-19's 3x3 0.85x, MobileNetV2's
# 3x3 stride-2 0.94x (alike 0.97x); ShuffleNet's (24 channels) 1.01x (alike 1.00x).
STEM_ROWS = 2


def plain_stem_tile(target, out_h: int, out_w: int) -> tuple[int, int, int] | None:
    """The default (oc tile, oh tile, ow tile) of a conv reading plain NCHW on
    ``target``, or None where target_tile's rule stands (below 512 bits, odd rows)."""
    if target.vector_bits < 512 or out_h % STEM_ROWS:
        return None
    ow = max(_divisors(out_w, ACC_REGS // STEM_ROWS))
    return (1, STEM_ROWS, ow) if ow >= POINTWISE_COLUMNS - 1 else None


def default_tile_order(target, oc: int, ow: int) -> str:
    """``oc_ow`` (the tile's blocks outside its columns) where its live values fit the
    registers, else ``ow_oc``. Blocks outside, GCC loads the row's ow broadcasts once and
    keeps them all live across the blocks (acc + ow + 1 registers); columns outside, it
    keeps the oc weight vectors instead (acc + oc + 1). At 256 bits a 2 x 7 tile needs 22
    of 16 registers the first way and spilled accumulators to the stack every step;
    the second way MobileNetV2's 1x1 convs ran 5-25% faster (its kernels 9.4 -> 8.2 ms,
    1 thread). With 32 registers blocks stay outside: AVX-512's FMAs take the broadcast
    as a memory operand, and a 3 x 8 tile walked the other way measured 1-2% slower."""
    regs = vector_registers(target)
    return "oc_ow" if regs > 16 or oc * ow + ow + 1 <= regs else "ow_oc"


MAX_OC_TILE = 4


def _divisors(n: int, most: int) -> list[int]:
    # [1] for an empty (zero-sized) extent: it has no divisor, and any tile will do.
    return [d for d in range(1, min(n, most) + 1) if n % d == 0] or [1]


def _tiles(out_blocks: int, out_width: int, budget: int) -> list[tuple[int, int]]:
    """Every (oc tile, ow tile) dividing the output with at most ``budget`` accumulators."""
    return [
        (oc, ow)
        for oc in _divisors(out_blocks, MAX_OC_TILE)
        for ow in _divisors(out_width, budget)
        if oc * ow <= budget
    ]


def _tile_rank(tile: tuple[int, int]) -> tuple[int, int, int]:
    """The most accumulators; among equals the one loading least per FMA step (oc weight
    vectors + ow broadcasts)."""
    oc, ow = tile
    return oc * ow, -(oc + ow), ow


def default_tile(out_blocks: int, out_width: int, budget: int = ACC_REGS) -> tuple[int, int]:
    """(oc tile, ow tile) with the most accumulators within ``budget`` (_tile_rank)."""
    return max(_tiles(out_blocks, out_width, budget), key=_tile_rank)


@register_schedule("conv2d_nchwc", "cpu")
def schedule_conv2d_nchwc_cpu(ctx: ScheduleContext) -> Schedule:
    conv = find_tagged(ctx.anchor, "conv")
    out = ctx.outs[0]
    if conv is not None and "pixel_multiple" in conv.op.attrs and len(ctx.outs) == 1:
        return schedule_pixels_cpu(ctx, conv)
    if conv is None or len(ctx.outs) != 1 or tuple(out.shape) != tuple(conv.shape):
        return default_schedule(ctx.outs)  # an epilogue that changes shape: no tile to share
    if is_depthwise(conv):
        return schedule_depthwise_cpu(ctx, conv)
    sch = create_schedule(ctx.outs)
    pad = inline_around_pad(sch, conv)
    cfg = ctx.cfg
    _, out_blocks, out_h, out_w, block = conv.shape
    plain = _reads_plain(conv)
    oc_def, ow_def = target_tile(ctx.target, out_blocks, out_w, _pointwise(conv), plain)
    stem = plain_stem_tile(ctx.target, out_h, out_w) if plain else None
    oh_def = 1
    if stem is not None:
        oc_def, oh_def, ow_def = stem
    oc_tile = cfg.define_split("tile_oc", out_blocks, oc_def, most=MAX_OC_TILE)
    ow_tile = cfg.define_split("tile_ow", out_w, ow_def, most=16)
    order = default_tile_order(ctx.target, oc_tile, ow_tile)
    vec = cfg.define("vectorize_oc", (True, False), block in (2, 4, 8, 16))
    par = cfg.define("parallel", ("n_oc_oh", "n_oc", "none"), "n_oc_oh")
    pad_at = cfg.define("pad", ("root", "inline"), _default_pad(conv))
    oh_tile = cfg.define_split("tile_oh", out_h, oh_def, most=MAX_OH_TILE)
    tile = _Tile(
        oc_tile,
        ow_tile,
        vec,
        par,
        oh=oh_tile,
        outer=cfg.define(
            "outer_order",
            ("oc_oh", "oh_oc"),
            default_outer_order(conv, ctx.target, out_blocks // oc_tile),
        ),
        inner=cfg.define("tile_order", ("oc_ow", "ow_oc"), order),
        red=_define_reduction(cfg, conv, ctx.target, (oc_tile, oh_tile, ow_tile)),
    )
    kw = {a.var.name: a.extent for a in conv.op.reduce_axis}.get("rk1", 1)
    body = tile.oc * tile.oh * tile.ow * tile.red.rci_unroll * (kw if tile.red.kw_unroll else 1)
    if body > MAX_UNROLLED:
        # a straight-line body this long misses the instruction cache and takes the
        # compiler seconds; every setting of the knobs before the unroll ones fits
        raise ValueError(f"conv tile: {body} unrolled multiply-adds (most {MAX_UNROLLED})")
    if carried_taps_spill(conv, tile.oc, kw):
        sch.hint("no_predictive_commoning")
    if pad is not None:
        _schedule_pad(sch, pad, pad_at)
    weight = conv_weight(conv)  # before cache_write turns the stage into its copy
    if conv is out:
        # no epilogue: the tile accumulates in registers and is copied out, as with one;
        # summed in the output, GCC loaded and stored it around every multiply-add
        # (a 96 -> 24 3x3 conv at 160x160: 48 GFLOP/s, 101 with a ReLU after it)
        conv = sch.cache_write(conv, "local")
    outer = _tile_output(sch[out], tile)
    sch[conv].compute_at(sch[out], outer)
    _order_reduction(sch[conv], tile)
    prefetch_next_weights(cfg, sch[conv], weight, out_h * out_w, ctx.target, tile.oc)
    return sch


def default_outer_order(conv: te.Tensor, target, passes: int) -> str:
    """``oh_oc`` (each row of tiles over all output blocks) for a 1x1 conv whose tiles
    of output blocks would read its input ``passes`` >= OUTER_MIN_PASSES times and
    which is strided or whose input is more than OUTER_INPUT_L2 times the board's L2,
    else ``oc_oh`` (each tile of output blocks over all rows). Blocks outside, every
    tile of blocks re-reads the whole input, from L3 where it does not fit the L2; rows
    outside, a row's input stays in cache across the blocks and the weights are re-read
    instead. Measured on a Zen 3 (AVX2, L2 512 KiB, 1 thread, bench/ab_bundles.py, 5
    rounds): light ResNet-50's 1x1 convs over 1.6 and 3.2 MB inputs 0.69-0.93x the time
    (those kernels 0.83x, the others 1.00x), DenseNet-121's 0.89-0.98x (0.94x, the
    others 1.00x); those over 0.8 MB or less, the ones with a residual add and 7x7
    outputs among them, ran 1.0-1.2x the other way, and MobileNetV2's few-block convs
    (2-3 passes) 0.99-1.04x. A 3x3 conv re-reads each input row for its taps from L1
    either way.

    A strided 1x1 conv (a residual block's downsampling projection) takes rows outside
    whatever its input's size: it reads every other row and column, so blocks outside,
    every tile of blocks fetched the same cache lines again, half of each holding
    columns it skips; rows outside, a row's lines are fetched once for all the blocks.
    Measured on the same Zen 3 (bench/ab_bundles.py, 5 rounds, in both orders):
    tv_resnet18's three projections took 0.87x and 0.79x their time (56 -> 28: 0.78x
    and 0.78x; 28 -> 14: 0.83x and 0.73x; 14 -> 7: 1.03x and 0.90x) while its other
    kernels read 1.035x and 0.99x; light ResNet-50's 1024 -> 2048 projection, the one
    the size rule left, 0.93x against 0.975x."""
    if passes > 1 and rows_first(target, conv, conv_weight(conv)):
        return "oh_oc"
    if _pointwise(conv) is None or passes < OUTER_MIN_PASSES:
        return "oc_oh"
    if _strided(conv):
        return "oh_oc"
    x = conv.op.input_tensors[0]
    return "oh_oc" if input_outgrows_l2(tensor_bytes(x), target, passes) else "oc_oh"


def carried_taps_spill(conv: te.Tensor, oc_tile: int, kw: int) -> bool:
    """Whether GCC's predictive commoning (-O2 and up) would spill the tile of
    ``oc_tile`` blocks of a conv ``kw`` taps wide: a tap's
    broadcast activations are the next column's of the tap before, and GCC carries them
    from one tap to the next in registers, beside the accumulators. Where they outnumber
    the registers it spilled both to the stack every step (objdump, GCC 12 -O3):
    a 5x5 conv at stride 1 (AlexNet's second conv and Inception v1's four, 1 x 13 tiles:
    ~490 stack accesses in the kernel, 6 without) and a stem reading plain NCHW into
    a tile of several blocks (SqueezeNet's, ShuffleNet's). The kernel then asks for
    predictive commoning off (Schedule.hint). Measured on a Zen 3 (AVX2, 1 thread, per-
    kernel lowest medians of 4 rounds): AlexNet's 5x5 conv 28 -> 7.3 ms (the model 66 ->
    47 ms), Inception v1's 5x5 convs 0.21-0.28x their time (the model 0.86x), the
    SqueezeNet and ShuffleNet stems 0.82x and 0.97x. Elsewhere it is left on: with it off
    for every kernel, tv_resnet18's 3x3 convs ran 1.00-1.04x, its Winograd ones 1.01-1.04x."""
    strides = conv.op.attrs.get("strides", [1, 1])
    if kw >= 5 and strides[-1] == 1:
        return True
    return _reads_plain(conv) and kw > 1 and oc_tile > 1


def _strided(conv: te.Tensor) -> bool:
    return max(conv.op.attrs.get("strides", [1])) > 1


def _reads_plain(conv: te.Tensor) -> bool:
    """Whether the conv reads plain NCHW (a network's first): its reduction has no
    channel lanes."""
    return all(a.var.name != "rci" for a in conv.op.reduce_axis)


def _pointwise(conv: te.Tensor) -> tuple[int, int] | None:
    """(K x element size, output block) of a 1x1 conv, else None."""
    axes = {a.var.name: a.extent for a in conv.op.reduce_axis}
    if axes.get("rk0", 1) != 1 or axes.get("rk1", 1) != 1 or "rcb" not in axes:
        return None
    return axes["rcb"] * axes.get("rci", 1) * 4, conv.shape[-1]


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
    inner: str = "oc_ow"  # in the register tile: its blocks outside its columns, or inside
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
MAX_RCB_SPLIT = 4


def _define_reduction(cfg, conv: te.Tensor, target, tile: tuple[int, int, int]) -> _Reduction:
    """The reduction's knobs; ``tile``: the register tile's (blocks, rows, columns)."""
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
    plain = _reads_plain(conv) and ("kh", "kw", "rcb") in orders
    order = cfg.define("reduce_order", orders, ("kh", "kw", "rcb") if plain else orders[0])
    rcb = axes.get("rcb")
    rci = axes.get("rci")
    kw = axes.get("rk1")
    # a proper divisor only: splitting off all blocks would repeat another order
    most = min(MAX_RCB_SPLIT, rcb.extent // 2) if rcb else 1
    split = cfg.define_split("rcb_split", rcb.extent, 1, most=most) if rcb else 1
    unroll = (
        cfg.define_split("unroll_rci", rci.extent, _default_rci_unroll(rci.extent, target, tile))
        if rci
        else 1
    )
    kw_unroll = cfg.define("unroll_kw", (False, True), False) if kw and kw.extent > 1 else False
    return _Reduction(order, split, unroll, kw_unroll)


def _default_rci_unroll(lanes: int, target, tile: tuple[int, int, int]) -> int:
    """Two channel lanes per step of the hot loop where the ISA has 32 vector registers.
    With one, GCC (12, -O2, AVX2 and AVX-512) often kept each accumulator in two registers
    and copied it back every step (a 132-form FMA overwrites the weight vector): 14 extra
    moves per 14 FMAs, 2.10 -> 2.40 ms on ResNet-18's 56x56 3x3 conv; unrolled by two,
    every layer of ResNet-18 measured 2.07-2.18 ms in the same run (Zen 4, AVX-512).

    With 16 registers one lane per step: the two steps' weights and broadcasts do not fit
    beside a 14-accumulator tile, and GCC (12, -O3) spilled an accumulator to the stack
    and shuffled registers on every loop edge. Measured on a Zen 3 (AVX2, 1 thread,
    bench/ab_bundles.py, sum of kernel minimums): tv_resnet18 56.1 -> 48.1 ms (its direct
    3x3 convs 0.65-0.70x), tv_mobilenet_v2 12.2 -> 10.5 ms, light ResNet-50 144.0 ->
    128.9 ms.

    A ``tile`` of one block (a 1x1 conv's at 256 bits: target_tile) needs no register
    more for more lanes: there all of a block's lanes are unrolled, where the body stays
    within MAX_UNROLLED multiply-adds. Tuning runs of MobileNetV2's 576 -> 96 (14x14) and
    320 -> 1280 (7x7) 1x1 convs alone found all their best configs so, 1.6x the default;
    in whole models (bench/ab_bundles.py, 4 rounds, the changed kernels' B/A over the
    alike ones') tv_mobilenet_v2's ran 0.96x and ResNet-50's 0.92x. (ARMv7 NEON has 16
    registers too and takes the same rules, unmeasured.)"""
    if vector_registers(target) <= 16:
        return lanes if tile[0] == 1 and math.prod(tile) * lanes <= MAX_UNROLLED else 1
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
    return "inline" if depthwise and _strided(conv) else "root"


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
    inner = _inner_order(t, obi, ohi, owi)
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
        st.reorder(n, *red, *_inner_order(t, ob, oh, ow), oi)
        st.unroll(oh)
    else:
        st.reorder(n, oh, *red, *_inner_order(t, ob, None, ow), oi)
    st.unroll(ob)
    st.unroll(ow)
    if t.vec:
        st.vectorize(oi)


def _inner_order(t: _Tile, ob, oh, ow) -> list:
    """The register tile's unrolled loops, outermost first (``oh`` None: no row tile)."""
    loops = (ob, oh, ow) if t.inner == "oc_ow" else (oh, ow, ob)
    return [x for x in loops if x is not None]
