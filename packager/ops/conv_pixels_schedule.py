"""CPU schedule of a 1x1 conv computed over its pixels as one axis (``conv2d_nchwc`` with
``pixel_multiple``, see conv_nchwc.py): a register tile of output blocks x pixels that
need not divide a row.

Loop nest, the knobs in quotes, defaults first:

    parallel (n, block tiles, pixel tiles)  -- "outer_order": oc_p | p_oc (p_oc on a
                                               multi-core board where the weights fit
                                               the L1 and are no larger than the input
                                               and output, _cpu.rows_first)
      conv tile (a local buffer in registers): for rcb, rci ("unroll_rci": all lanes):
        for pixel, block (unrolled; "tile_p" pixels, "tile_oc" blocks):
          acc[block][pixel][:] += x[pixel broadcast] * w[block vector]
        ("prefetch_weights": with each weight vector, the next tile's into the L2)
      epilogue: for pixel (guarded past the last), block, lanes (vectorized):
        out = relu(acc + bias) + residual ...

Why: a 1x1 conv's row-wise tile (target_tile in conv_schedule.py) takes one block x up
to 14 columns where vector registers are 16, since rows of 56, 28, 14 and 7 have no
divisor that makes a 2 x 6 tile: 14 accumulators, the weight vector and a broadcast fill
the 16 registers, 15 loads per 14 FMAs. Over pixels as one axis, rounded up to
``PIXEL_MULTIPLE``, 2 blocks x 6 pixels hold 12 accumulators, 2 weight vectors and a
broadcast: 8 loads per 12 FMAs; the extra pixels cost at most 5 of a conv's (a 7x7
output: 54 for 49), and the pixels past the last are computed, never stored.

Blocks outside the pixel tiles (``oc_p``): a pair's weights stay in cache over its pixel
tiles while the input streams past; ``pixel_multiple`` leaves the convs where the row
tile would take its rows outside to the row tile. Measured on a
Zen 3 (AVX2, 1 thread, untuned, ``python bench/ab_bundles.py`` in both orders, the
changed kernels' time over the others', new / old): ResNet-50 0.74 and 0.79,
torchvision MobileNetV2 0.83 and 0.85, DenseNet-121 0.72 and 0.86, Inception v1 0.67
and 0.68 (one lane a step instead of all 8: 0.87-0.95).
"""

from __future__ import annotations

from .. import te
from ..te.schedule import Schedule, create_schedule
from ._cpu import (
    DEFAULT_L1_BYTES,
    MAX_UNROLLED,
    inline_around_pad,
    input_outgrows_l2,
    rows_first,
    tensor_bytes,
    vector_registers,
)
from .registry import ScheduleContext
from .weight_prefetch import conv_weight, prefetch_next_weights

PIXEL_MULTIPLE = 6
PIXEL_BLOCKS = 2  # the default tile's output blocks


def pixel_multiple(target, out_blocks: int, input_bytes: int) -> int:
    """The ``pixel_multiple`` of a 1x1 conv built for ``target`` (1: none, the row-wise
    tile), given its ``out_blocks`` output blocks and the bytes of its input it reads
    (a strided conv's rows it reads).
    Pixel tiles where vector registers are 16 (AVX2, ARMv7 NEON), the blocks pair up,
    and the row-wise tile would not walk its rows outside its blocks (an input over twice
    the L2 read 4 or more times: _cpu.input_outgrows_l2, the rule of
    conv_schedule.default_outer_order). There the row tile keeps a row's input in cache
    over all its blocks; pixel tiles in that order read a pair's weights for 6 pixels
    where a row tile reads a block's for 14, and ResNet-50's 256 -> 64 conv at 56x56 ran
    1.47x the row tile's time.

    A pair's filters need not fit the L1: they stream from L2 past each pixel tile, 2
    weight vectors per 12 FMAs. Convs reducing 576 to 2048 channels, first left to the
    row tile, ran in pixel tiles 0.66-0.84x its time (Zen 3, 32 KiB L1, 1 thread,
    bench/ab_bundles.py in both orders, the changed kernels over the others: tv_mobilenet_v2
    0.83 and 0.83, ResNet-50 0.73 and 0.77, DenseNet-121 0.66 and 0.82, Inception v1 0.71
    and 0.84).

    Strided 1x1 convs (residual projections) take them too, each pixel reading its own
    input address: in the row tile at 7x7 or 14x14 outputs, rows outside their blocks,
    every row streamed all the filters (8 MB for ResNet-50's 1024 -> 2048). On the same
    Zen 3 (bench/ab_bundles.py, 4 rounds): ResNet-50's 1024 -> 2048 and 512 -> 1024
    projections 0.59x and 0.58x their time (the others 1.08x), tv_resnet18's three
    0.72-0.91x (all three 0.85x, the others 1.00x)."""
    if vector_registers(target) > 16 or out_blocks % PIXEL_BLOCKS:
        return 1
    if input_outgrows_l2(input_bytes, target, out_blocks // PIXEL_BLOCKS):
        return 1
    return PIXEL_MULTIPLE


def _default_outer(conv: te.Tensor, target, oc_tile: int) -> str:
    """``p_oc`` (each core a share of the pixel tiles, all blocks) where the thread pool
    has cores to share, the weights are no larger than the input (_cpu.rows_first) and
    they fit the L1, else ``oc_p``.

    Pixels outside, every 6-pixel tile reads all the weights, where a row tile reads
    them once a row: weights beyond the L1 stream from the L2 for each tile. Measured on
    a Zen 3 (32 KiB L1, 512 KiB L2, bench/ab_bundles.py, 6 rounds, the changed kernels
    against the others): ResNet-50's 64 -> 256 convs at 56x56 (64 KiB of weights) and
    three more took 0.77x their time at 1 thread (the others 0.98x) and 0.94x at 2
    (the others 1.00x); tv_mobilenet_v2's 6 such convs 0.99x and 1.00x."""
    if conv.shape[1] // oc_tile < 2:
        return "oc_p"
    weight = conv_weight(conv)
    if weight is None or tensor_bytes(weight) > (target.l1d_bytes or DEFAULT_L1_BYTES):
        return "oc_p"
    return "p_oc" if rows_first(target, conv, weight) else "oc_p"


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def schedule_pixels_cpu(ctx: ScheduleContext, conv: te.Tensor) -> Schedule:
    cfg = ctx.cfg
    out = ctx.outs[0]
    _, out_blocks, _, block = conv.shape
    multiple = conv.op.attrs["pixel_multiple"]
    pair = PIXEL_BLOCKS if out_blocks % PIXEL_BLOCKS == 0 else 1
    oc = cfg.define("tile_oc", [d for d in _divisors(out_blocks) if d <= 4], pair)
    px = cfg.define("tile_p", _divisors(multiple)[::-1], multiple)
    outer = cfg.define("outer_order", ("oc_p", "p_oc"), _default_outer(conv, ctx.target, oc))
    lanes = conv.op.reduce_axis[1].extent
    # every lane of a block unrolled: tuning tv_mobilenet_v2 on a Zen 3 (2 threads), the
    # best config of each of its 13 pixel-tiled convs unrolled 8 lanes or 4; as the
    # default, the kernels ran 0.95x (those 13) and 0.96x (ResNet-50's 6) the time of
    # one lane a step (1 thread, single kernels, both alternated)
    unroll = cfg.define("unroll_rci", _divisors(lanes), lanes)
    vec = cfg.define("vectorize_oc", (True, False), block in (2, 4, 8, 16))
    if oc * px * unroll > MAX_UNROLLED:  # as conv_schedule's tile: the body must stay short
        raise ValueError(
            f"conv tile: {oc * px * unroll} unrolled multiply-adds (most {MAX_UNROLLED})"
        )
    sch = create_schedule(ctx.outs)
    inline_around_pad(sch, conv)  # the rows view, bias, activation, residual add
    st = sch[out]
    n, ob, oh, ow, oi = st.op.axis
    po, pi = st.split(st.fuse(oh, ow), px)
    obo, obi = st.split(ob, oc)
    loops = (n, po, obo) if outer == "p_oc" else (n, obo, po)
    st.reorder(*loops, pi, obi, oi)
    at = st.fuse(*loops)
    st.parallel(at)
    st.unroll(pi)
    st.unroll(obi)
    if vec:
        st.vectorize(oi)

    cs = sch[conv]
    cs.compute_at(st, at)
    n2, ob2, p2, oi2 = cs.op.axis
    rcb, rci = cs.op.reduce_axis
    red = [rcb, rci]
    if unroll > 1:
        rci_o, rci_i = cs.split(rci, unroll)
        red = [rcb, rci_o, rci_i]
        cs.unroll(rci_i)
    cs.reorder(n2, *red, p2, ob2, oi2)
    cs.unroll(p2)
    cs.unroll(ob2)
    if vec:
        cs.vectorize(oi2)
    pixels = out.shape[2] * out.shape[3]
    prefetch_next_weights(cfg, cs, conv_weight(conv), pixels, ctx.target, oc)
    return sch
