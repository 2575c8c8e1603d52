"""The cpu template of conv2d_nchwc: fused groups (bias, relu, residual add) on
representative shapes, with default and varied knobs, against the numpy interpretation
of the same computes."""

from __future__ import annotations

import re

import numpy as np
import pytest

from packager import te
from packager.codegen import build_kernel, codegen_c
from packager.lowering import schedule_for
from packager.ops.conv_schedule import default_tile, target_tile
from packager.ops.knobs import Config
from packager.ops.registry import get_op
from packager.target import CpuTarget
from packager.te.evaluator import evaluate

from .harness import haswell_asm, innermost_fma_loop


def conv_group(c, oc, hw, k, stride, pad, block=8, groups=1, residual=False):
    """Placeholders, the group's output and its anchor: conv + bias + relu (+ add)."""
    h, w = hw
    data = (
        te.placeholder((1, c // block, h, w, block), "float32", "in0")
        if c % block == 0
        else te.placeholder((1, c, h, w), "float32", "in0")  # first conv: plain NCHW
    )
    xw = 1 if groups > 1 else min(block, c) if c % block == 0 else 1
    weight = te.placeholder((oc // block, c // groups // xw, k, k, xw, block), "float32", "in1")
    bias = te.placeholder((oc // block, block), "float32", "in2")
    attrs = {"groups": groups, "strides": [stride, stride], "pads": [pad] * 4}
    conv = get_op("conv2d_nchwc").compute([data, weight, bias], attrs)[0]
    zero = te.const(0.0, "float32")
    out = te.compute(conv.shape, lambda *i: te.select(conv[i] < zero, zero, conv[i]), name="relu")
    args = [data, weight, bias]
    if residual:
        res = te.placeholder(out.shape, "float32", "in3")
        args.append(res)
        prev = out
        out = te.compute(out.shape, lambda *i: prev[i] + res[i], name="add")
    return args, out, ("conv2d_nchwc", attrs, conv)


def run_group(args, out, anchor, knobs):
    return run_schedule(schedule_for([out], anchor, knobs=knobs), args, out)


def run_schedule(sch, args, out):
    """(the built kernel's output, the evaluator's) on random inputs."""
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(a.shape).astype(np.float32) for a in args]
    got = np.empty(out.shape, np.float32)
    build_kernel(te.lower(sch, [*args, out], "k_conv"))(*ins, got)
    (want,) = evaluate([out], dict(zip(args, ins, strict=True)))
    return got, want


CASES = {
    "3x3_s1": dict(c=16, oc=16, hw=(9, 14), k=3, stride=1, pad=1),
    "3x3_s2": dict(c=16, oc=24, hw=(11, 13), k=3, stride=2, pad=1),
    "1x1": dict(c=32, oc=16, hw=(7, 10), k=1, stride=1, pad=0),
    "first_7x7_s2": dict(c=3, oc=16, hw=(15, 15), k=7, stride=2, pad=3),
    "depthwise_s1": dict(c=24, oc=24, hw=(9, 9), k=3, stride=1, pad=1, groups=24),
    "depthwise_s2": dict(c=24, oc=24, hw=(10, 13), k=3, stride=2, pad=1, groups=24),
    "residual": dict(c=16, oc=16, hw=(6, 7), k=3, stride=1, pad=1, residual=True),
    "odd_width": dict(c=8, oc=16, hw=(5, 13), k=3, stride=1, pad=1),
}

KNOBS = [
    {},
    {"tile_oc": 1, "tile_ow": 1},
    {"parallel": "none", "pad": "inline", "vectorize_oc": False},
    {"parallel": "n_oc", "pad": "root"},
]


@pytest.mark.parametrize("case", sorted(CASES))
def test_template_matches_numpy(case):
    args, out, anchor = conv_group(**CASES[case])
    results = [run_group(args, out, anchor, knobs) for knobs in KNOBS]
    for got, want in results:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # knobs change loop order and tiling, not the order of the sum: the same numbers
    for got, _ in results[1:]:
        np.testing.assert_allclose(got, results[0][0], rtol=1e-6, atol=1e-6)


def test_knobs_are_declared_with_defaults():
    args, out, anchor = conv_group(**CASES["3x3_s1"])
    cfg = Config()
    op, attrs, tensor = anchor
    from packager.ops.registry import ScheduleContext

    get_op(op).schedules["cpu"](
        ScheduleContext([out], tensor, attrs, cfg, CpuTarget(vector_bits=256, cores=2))
    )
    assert {"tile_oc", "tile_ow", "vectorize_oc", "parallel", "pad"} <= set(cfg.space)
    assert cfg.as_dict()["tile_ow"] == 7 and cfg.as_dict()["tile_oc"] == 2


def test_default_tile_fills_the_register_budget():
    assert default_tile(8, 56) == (2, 7)
    assert default_tile(8, 13) == (1, 13)
    assert default_tile(1, 7) == (1, 7)


AVX512 = CpuTarget(vector_bits=512, cores=2, l1d_bytes=32 << 10)


@pytest.mark.parametrize(
    "cin,out_blocks,width,want",
    [
        (256, 4, 56, (1, 8)),  # one block's weights (16 KiB) + 8 columns fit the L1
        (512, 8, 28, (1, 7)),  # one block's weights (32 KiB) do not: one block, 7 columns
        (2048, 32, 28, (1, 7)),
        (64, 16, 56, (4, 4)),  # small K: 4 blocks fit, the most accumulators
        (128, 32, 28, (2, 7)),
        (512, 8, 14, (2, 7)),  # two column tiles a row: the general rule
        (480, 12, 13, (1, 13)),  # 13 wide: no 7-8 column tile, the general rule
    ],
)
def test_pointwise_tile_keeps_the_weights_in_the_l1(cin, out_blocks, width, want):
    assert target_tile(AVX512, out_blocks, width, (cin * 4, 16)) == want


AVX2 = CpuTarget(vector_bits=256, cores=2, l1d_bytes=32 << 10)


@pytest.mark.parametrize(
    "out_blocks,width,want",
    [
        (8, 56, (1, 14)),  # the general rule's 2 x 7 spills: one block, 14 columns
        (72, 7, (1, 7)),
        (16, 13, (1, 13)),
        (6, 56, (3, 4)),  # a spill-free 3 x 4 tile exists: kept
        (8, 5, (2, 5)),  # no 7-14 column tile: the general rule
    ],
)
def test_pointwise_tile_at_16_registers(out_blocks, width, want):
    assert target_tile(AVX2, out_blocks, width, (256 * 4, 8)) == want
    if want[0] > 1:
        assert want == target_tile(AVX2, out_blocks, width)


def test_pointwise_rule_leaves_other_convs_and_128_bits():
    neon = CpuTarget(vector_bits=128, cores=4, arch="armv7", l1d_bytes=32 << 10)
    assert target_tile(neon, 8, 56, (256 * 4, 4)) == target_tile(neon, 8, 56)
    assert target_tile(AVX2, 8, 56) == (2, 7)  # a 3x3 conv passes no pointwise
    assert target_tile(AVX512, 4, 56) == default_tile(4, 56, 24)


@pytest.mark.parametrize(
    "c, k, stride, hw, bits, want",
    [
        (3, 7, 2, 224, 256, (1, 1, 14)),  # a stem reading plain NCHW: one block, 14 columns
        (3, 3, 2, 224, 256, (1, 1, 14)),
        (64, 3, 1, 56, 256, (2, 1, 7)),  # channel lanes: the general rule
        (3, 7, 2, 224, 512, (1, 2, 7)),  # 32 registers: one block, two rows of 7 columns
        (3, 3, 1, 224, 512, (1, 2, 7)),
        (3, 7, 2, 221, 512, (4, 1, 3)),  # 111 rows (odd): the general rule
        (3, 7, 2, 219, 512, (2, 1, 11)),  # 110 columns, none of 7 (5 the most below): ...
        (64, 3, 1, 56, 512, (4, 1, 4)),  # channel lanes: the general rule
    ],
)
def test_a_plain_input_conv_takes_one_block(c, k, stride, hw, bits, want):
    """A stem: one block and 14 columns at 16 registers, and two rows of 7 at 32
    (plain_stem_tile), where its output has them."""
    args, out, anchor = conv_group(c=c, oc=64, hw=(hw, hw), k=k, stride=stride, pad=k // 2)
    cfg = Config()
    _, attrs, tensor = anchor
    from packager.ops.registry import ScheduleContext

    target = CpuTarget(vector_bits=bits, cores=1)
    get_op("conv2d_nchwc").schedules["cpu"](ScheduleContext([out], tensor, attrs, cfg, target))
    knobs = cfg.as_dict()
    assert (knobs["tile_oc"], knobs["tile_oh"], knobs["tile_ow"]) == want


def test_a_stems_two_row_tile_computes_the_conv():
    """The 512-bit stem tile (one block, two rows of 7 columns) over a small 7x7
    stride-2 conv reading plain NCHW, against the evaluator."""
    from packager.ops.registry import ScheduleContext

    args, out, anchor = conv_group(c=3, oc=32, hw=(28, 28), k=7, stride=2, pad=3)
    cfg = Config()
    _, attrs, tensor = anchor
    sch = get_op("conv2d_nchwc").schedules["cpu"](
        ScheduleContext([out], tensor, attrs, cfg, AVX512)
    )
    knobs = cfg.as_dict()
    assert (knobs["tile_oc"], knobs["tile_oh"], knobs["tile_ow"]) == (1, 2, 7)
    got, want = run_schedule(sch, args, out)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "c, oc, k, stride, l2_kib, want",
    [
        (128, 128, 1, 1, 512, "oh_oc"),  # 1.6 MB input, twice a 512 KiB L2: rows outside
        (128, 128, 1, 1, 1024, "oc_oh"),  # ... not over twice a 1 MiB L2
        (64, 128, 1, 1, 512, "oc_oh"),  # 0.8 MB: the blocks' re-reads stay cheap enough
        (128, 16, 1, 1, 512, "oc_oh"),  # two blocks: the input is read twice only
        (128, 128, 3, 1, 512, "oc_oh"),  # a 3x3 conv keeps blocks outside
        (64, 128, 1, 2, 512, "oh_oc"),  # a strided 1x1 (a projection): rows outside
        (64, 128, 1, 2, 4096, "oh_oc"),  # ... whatever the L2
        (64, 16, 1, 2, 512, "oc_oh"),  # ... where it has 4 tiles of blocks or more
        (64, 128, 3, 2, 512, "oc_oh"),  # a strided 3x3 keeps blocks outside
    ],
)
def test_a_pointwise_conv_over_a_large_input_or_strided_walks_rows_outside(
    c, oc, k, stride, l2_kib, want
):
    args, out, anchor = conv_group(c=c, oc=oc, hw=(56, 56), k=k, stride=stride, pad=k // 2)
    cfg = Config()
    _, attrs, tensor = anchor
    from packager.ops.registry import ScheduleContext

    target = CpuTarget(vector_bits=256, cores=1, l2_bytes=l2_kib << 10)
    get_op("conv2d_nchwc").schedules["cpu"](ScheduleContext([out], tensor, attrs, cfg, target))
    assert cfg.as_dict()["outer_order"] == want


def test_pointwise_default_reaches_the_built_schedule():
    data = te.placeholder((1, 16, 56, 56, 16), "float32", "in0")
    weight = te.placeholder((4, 16, 1, 1, 16, 16), "float32", "in1")
    attrs = {"groups": 1, "strides": [1, 1], "pads": [0] * 4}
    conv = get_op("conv2d_nchwc").compute([data, weight], attrs)[0]
    cfg = Config()
    from packager.ops.registry import ScheduleContext

    get_op("conv2d_nchwc").schedules["cpu"](ScheduleContext([conv], conv, attrs, cfg, AVX512))
    assert (cfg.as_dict()["tile_oc"], cfg.as_dict()["tile_ow"]) == (1, 8)


def test_conv_without_epilogue_accumulates_in_its_output():
    data = te.placeholder((1, 2, 6, 9, 8), "float32", "in0")
    weight = te.placeholder((2, 2, 3, 3, 8, 8), "float32", "in1")
    attrs = {"groups": 1, "strides": [1, 1], "pads": [1] * 4}
    conv = get_op("conv2d_nchwc").compute([data, weight], attrs)[0]
    for knobs in ({}, {"tile_oc": 1, "tile_ow": 3, "parallel": "none"}):
        got, want = run_group([data, weight], conv, ("conv2d_nchwc", attrs, conv), knobs)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "c, oc, x_block, y_block, groups",
    [
        (24, 32, 8, 16, 1),  # a conv that changes the block: reads 8 lanes, writes 16
        (32, 24, 16, 8, 1),
        (24, 24, 8, 8, 24),  # depthwise in half vectors
        (12, 20, 4, 4, 1),
    ],
)
def test_blocks_below_the_vector_width(c, oc, x_block, y_block, groups):
    """At 16 lanes (AVX-512) a block of 8 or 4 runs in vectors of its own width."""
    data = te.placeholder((1, c // x_block, 7, 9, x_block), "float32", "in0")
    w_block = 1 if groups > 1 else x_block
    shape = (oc // y_block, c // groups // w_block, 3, 3, w_block, y_block)
    weight = te.placeholder(shape, "float32", "in1")
    attrs = {"groups": groups, "strides": [1, 1], "pads": [1] * 4}
    conv = get_op("conv2d_nchwc").compute([data, weight], attrs)[0]
    target = CpuTarget(vector_bits=512, cores=2)
    sch = schedule_for([conv], ("conv2d_nchwc", attrs, conv), target)
    func = te.lower(sch, [data, weight, conv], "k")
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(a.shape).astype(np.float32) for a in (data, weight)]
    got = np.empty(conv.shape, np.float32)
    build_kernel(func)(*ins, got)
    (want,) = evaluate([conv], dict(zip((data, weight), ins, strict=True)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    src = codegen_c(func)
    assert f"pk_f32x{y_block}" in src  # vectors of the block, not scalar code


@pytest.mark.parametrize("bits, tile", [(512, (3, 7)), (256, (2, 7)), (128, (2, 7))])
def test_default_tile_by_vector_registers(bits, tile):
    """AVX-512's 32 registers hold a tile of 21 accumulators (3 blocks x 7 columns) where
    AVX2's 16 hold 14; the tile computes the conv (a 3x3: 1x1 convs have pointwise_tile)."""
    args, out, anchor = conv_group(c=16, oc=96, hw=(7, 7), k=3, stride=1, pad=1, block=16)
    cfg = Config()
    _, attrs, tensor = anchor
    from packager.ops.registry import ScheduleContext

    target = CpuTarget(vector_bits=bits, cores=1)
    sch = get_op("conv2d_nchwc").schedules["cpu"](
        ScheduleContext([out], tensor, attrs, cfg, target)
    )
    assert (cfg.as_dict()["tile_oc"], cfg.as_dict()["tile_ow"]) == tile
    got, want = run_schedule(sch, args, out)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_winograd_tile_by_vector_registers():
    """The Winograd products' tile takes the same budget: 3 blocks x 8 tiles (24) where
    AVX-512's registers allow, 3 x 4 (12) in AVX2's; there, as 12 + 4 broadcasts + 1
    weight do not fit 16 registers, the tiles go outside the blocks."""
    from packager.ops import winograd_schedule  # noqa: F401  (registers the schedule)
    from packager.ops.registry import ScheduleContext

    data = te.placeholder((1, 3, 16, 16, 16), "float32", "in0")
    wt = te.placeholder((6, 6, 3, 48, 16), "float32", "in1")
    attrs = {"strides": [1, 1], "pads": [1] * 4, "tile": 4}
    conv = get_op("conv2d_winograd_nchwc").compute([data, wt], attrs)[0]
    picks = {}
    for bits in (512, 256):
        cfg = Config()
        target = CpuTarget(vector_bits=bits, cores=1)
        get_op("conv2d_winograd_nchwc").schedules["cpu"](
            ScheduleContext([conv], conv, attrs, cfg, target)
        )
        picks[bits] = tuple(cfg.as_dict()[k] for k in ("tile_oc", "tile_t", "tile_order"))
    assert picks == {512: (3, 8, "oc_t"), 256: (3, 4, "t_oc")}


def _defaults(case: dict, target) -> dict:
    args, out, anchor = conv_group(**case)
    cfg = Config()
    _, attrs, tensor = anchor
    from packager.ops.registry import ScheduleContext

    get_op("conv2d_nchwc").schedules["cpu"](ScheduleContext([out], tensor, attrs, cfg, target))
    return cfg.as_dict()


@pytest.mark.parametrize(
    "target, order",
    [
        (CpuTarget(vector_bits=256), "ow_oc"),  # AVX2: 16 registers
        (CpuTarget(vector_bits=512), "oc_ow"),  # AVX-512: 32
        (CpuTarget(vector_bits=128, arch="aarch64"), "oc_ow"),  # AArch64 NEON: 32
        (CpuTarget(vector_bits=128, arch="armv7"), "ow_oc"),  # ARMv7 NEON: 16
    ],
)
def test_tile_order_by_registers(target, order):
    """A 2 x 7 tile needs 14 accumulators + 7 broadcasts + 1 weight walked blocks first:
    too many for 16 registers, so there the blocks go inside the columns."""
    got = _defaults(CASES["3x3_s1"], target)
    assert (got["tile_oc"], got["tile_ow"], got["tile_order"]) == (2, 7, order)


def test_columns_outside_blocks_compute_the_conv():
    """tile_order ow_oc: the unrolled column loop encloses the block loop in the tile, and
    the conv (with its residual epilogue, and without an epilogue) gives the same sums."""
    for case in ("3x3_s1", "residual", "1x1"):
        args, out, anchor = conv_group(**CASES[case])
        knobs = {"tile_order": "ow_oc", "tile_oc": 2}  # 1x1 defaults to one block
        src = codegen_c(te.lower(schedule_for([out], anchor, knobs=knobs), [*args, out], "k"))
        body = src[src.index("for (int64_t rcb") :]
        assert body.index("for (int64_t conv_nchwc_i3") < body.index("for (int64_t conv_nchwc_i1")
        got, want = run_group(args, out, anchor, knobs)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "bits, hw, k, tile",
    [(256, 56, 1, (3, 4)), (256, 14, 3, (2, 7)), (256, 14, 1, (1, 14)), (512, 56, 1, (3, 8))],
)
def test_sixteen_registers_take_a_spill_free_tile_where_one_exists(bits, hw, k, tile):
    """At 256 bits a 3 x 4 tile (12 accumulators, 3 weights, 1 broadcast: 16 registers)
    where the shape allows one; where it does not (14 wide), 2 x 7 for a 3x3 conv and
    1 x 14 for a 1x1 (pointwise_tile); AVX-512 fills 24."""
    case = dict(c=16, oc=48, hw=(hw, hw), k=k, stride=1, pad=k // 2)
    got = _defaults(case, CpuTarget(vector_bits=bits))
    assert (got["tile_oc"], got["tile_ow"]) == tile


@pytest.mark.parametrize(
    "c, groups, block, k, knobs",
    [
        (48, 4, 8, 1, {}),  # groups of 12 in blocks of 8: output blocks read 2 or 3
        (48, 4, 8, 1, {"tile_oc": 2}),  # a tile of blocks with different spans
        # every tile of 3 holds a block straddling two groups: all run the whole span
        (48, 4, 8, 1, {"tile_oc": 3, "parallel": "none"}),
        (48, 4, 8, 3, {"tile_oc": 2, "reduce_order": ("kh", "kw", "rcb", "rci")}),
        (272, 4, 16, 1, {}),  # ShuffleNet's 68-channel groups in blocks of 16
    ],
)
def test_spanned_groups_read_only_their_blocks(c, groups, block, k, knobs):
    """A grouped conv whose groups split blocks (spanned): each output block's loop over
    input blocks stops at its own groups' blocks, and the sum is the grouped conv's."""
    from packager.graph.passes.layout_pack import (
        from_blocked,
        pack_spanned_conv_weight,
        span_end,
        span_start,
        to_blocked,
    )

    from .test_layout_ops import conv_ref

    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, c, 5, 7)).astype(np.float32)
    w = rng.standard_normal((c, c // groups, k, k)).astype(np.float32)
    packed = pack_spanned_conv_weight(w, groups, block, block)
    data = te.placeholder((1, c // block, 5, 7, block), "float32", "in0")
    weight = te.placeholder(packed.shape, "float32", "in1")
    pad = k // 2
    attrs = {"groups": groups, "strides": [1, 1], "pads": [pad] * 4, "spanned": 1}
    conv = get_op("conv2d_nchwc").compute([data, weight], attrs)[0]
    target = CpuTarget(vector_bits=block * 32, cores=2)
    sch = schedule_for([conv], ("conv2d_nchwc", attrs, conv), target, knobs)
    func = te.lower(sch, [data, weight, conv], "k")
    got = np.empty(conv.shape, np.float32)
    build_kernel(func)(to_blocked(x, block), packed, got)
    want = conv_ref(x, w, None, [1, 1], [pad] * 4, [1, 1], groups)
    np.testing.assert_allclose(from_blocked(got), want, rtol=1e-4, atol=1e-4)
    # the block loop is bounded by the output blocks' spans, not the packed weight's
    og, cg = c // groups, c // groups
    spans = [
        span_end(ob, block, og, cg, block) - span_start(ob, block, og, cg, block)
        for ob in range(c // block)
    ]
    assert min(spans) < packed.shape[1] == max(spans)
    tile = knobs.get("tile_oc", 1)
    whole = all(max(spans[i : i + tile]) == max(spans) for i in range(0, len(spans), tile))
    bound = f"rcb < {max(spans)};" if whole else f"rcb < pk_min_i64({max(spans)}, "
    assert bound in codegen_c(func)


@pytest.mark.parametrize(
    "case, hinted",
    [
        (dict(c=16, oc=16, hw=(13, 13), k=5, stride=1, pad=2), True),  # 1 x 13, 5 taps
        (dict(c=16, oc=16, hw=(13, 13), k=5, stride=2, pad=2), False),
        (dict(c=16, oc=16, hw=(13, 13), k=3, stride=1, pad=1), False),
        (dict(c=3, oc=32, hw=(23, 23), k=3, stride=2, pad=1), True),  # a stem's 4 x 3
        (dict(c=3, oc=32, hw=(15, 15), k=3, stride=2, pad=1), False),  # a stem's 1 x 8
    ],
)
def test_a_tile_whose_taps_gcc_would_carry_turns_predictive_commoning_off(case, hinted):
    """A 5x5 stride-1 conv over a 13-wide row (a 1 x 13 tile) and a stem reading plain
    NCHW into a tile of several blocks ask for predictive commoning off in their C,
    and still compute the conv; other convs keep the compiler's default."""
    args, out, anchor = conv_group(**case)
    sch = schedule_for([out], anchor, AVX2)
    src = codegen_c(te.lower(sch, [*args, out], "k_conv"))
    assert ('#pragma GCC optimize("no-predictive-commoning")' in src) is hinted
    got, want = run_schedule(sch, args, out)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_five_tap_row_tile_keeps_its_accumulators_in_registers(tmp_path):
    """AlexNet's second conv in small (5x5, stride 1, 13-wide rows: a 1 x 13 tile),
    compiled as the host profile compiles kernels for 16 vector registers: its FMA loop
    keeps the tile in registers (GCC 12 leaves 2 values on the stack: 4 accesses a step
    of 104 FMAs). With GCC's predictive commoning on, the broadcasts carried from tap to
    tap spilled the tile: 396 stack accesses in that loop (AlexNet's conv: 3.9x its
    time)."""
    args, out, anchor = conv_group(c=16, oc=16, hw=(13, 13), k=5, stride=1, pad=2)
    src = codegen_c(te.lower(schedule_for([out], anchor, AVX2), [*args, out], "k_conv"))
    assert "float conv_nchwc[104];" in src  # 1 x 13
    loop = innermost_fma_loop(haswell_asm(src, tmp_path), "k_conv_par1")
    assert sum(t.startswith("vfmadd") for t in loop) == 104, loop
    assert len([t for t in loop if "rsp" in t]) <= 4, loop


def test_a_grouped_convs_tile_inside_one_group_shares_its_broadcasts():
    """2 groups of 6 output blocks, tiles of 3 blocks: every block of a tile reads the
    same group's input, so the activation's index does not depend on the tile's block
    (the simplifier takes (3t + i) // 6 to t // 2) and one broadcast serves the tile's
    blocks; the kernel still computes the grouped conv."""
    data = te.placeholder((1, 6, 6, 8, 8), "float32", "in0")
    weight = te.placeholder((12, 3, 3, 3, 8, 8), "float32", "in1")  # 24 channels a group
    bias = te.placeholder((12, 8), "float32", "in2")
    attrs = {"groups": 2, "strides": [1, 1], "pads": [1] * 4}
    out = get_op("conv2d_nchwc").compute([data, weight, bias], attrs)[0]
    args, anchor = [data, weight, bias], ("conv2d_nchwc", attrs, out)
    sch = schedule_for([out], anchor, AVX2, knobs={"tile_oc": 3, "tile_ow": 4})
    src = codegen_c(te.lower(sch, [*args, out], "k_conv"))
    reads = re.findall(r"= conv_pad\[([^\]]+)\];", src)
    assert reads and not [r for r in reads if "conv_nchwc_i1" in r], reads
    got, want = run_schedule(sch, args, out)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "c, oc, hw, k, want",
    [
        (160, 960, 7, 1, True),  # MobileNetV2's expansion: 3 blocks x 160 channels, 30 KB
        (320, 1280, 7, 1, True),  # 2 blocks x 320: 40 KB, within 1.5x the 32 KiB L1
        (960, 320, 7, 1, False),  # the projection's 2 x 960: 120 KB, read from L2 anyway
        (160, 32, 7, 1, False),  # one tile of blocks: nothing follows it
        (64, 64, 14, 3, False),  # a 3x3 conv's tile: 2 blocks x 64 x 9 taps
        (64, 256, 28, 1, False),  # 28x28 outputs: each weight serves 784 pixels
    ],
)
def test_which_tiles_prefetch_the_next_weights(c, oc, hw, k, want):
    """prefetches_next_weights at 512 bits: the tile's weights within 1.5x the L1 and
    another tile after it."""
    from packager.ops.registry import ScheduleContext
    from packager.ops.weight_prefetch import prefetches_next_weights

    args, out, anchor = conv_group(c=c, oc=oc, hw=(hw, hw), k=k, stride=1, pad=k // 2, block=16)
    cfg = Config()
    _, attrs, tensor = anchor
    target = CpuTarget(vector_bits=512, cores=1, l1d_bytes=32 << 10)
    sch = get_op("conv2d_nchwc").schedules["cpu"](
        ScheduleContext([out], tensor, attrs, cfg, target)
    )
    oc_tile = cfg.as_dict()["tile_oc"]
    weight = args[1]
    assert prefetches_next_weights(weight, hw * hw, target, oc_tile) is want
    src = codegen_c(te.lower(sch, [*args, out], "k_conv"))
    assert ("__builtin_prefetch(" in src) is want


def test_a_tile_that_prefetches_computes_the_conv():
    """160 -> 320 channels over 7x7 (MobileNetV2's expansion, fewer blocks) with the
    next tile's weights prefetched, against the evaluator; the prefetch reads the
    weights 3 blocks (the tile) further on, once per input channel and block."""
    from packager.ops.registry import ScheduleContext

    args, out, anchor = conv_group(c=160, oc=320, hw=(7, 7), k=1, stride=1, pad=0, block=16)
    cfg = Config()
    _, attrs, tensor = anchor
    target = CpuTarget(vector_bits=512, cores=1, l1d_bytes=32 << 10)
    sch = get_op("conv2d_nchwc").schedules["cpu"](
        ScheduleContext([out], tensor, attrs, cfg, target)
    )
    src = codegen_c(te.lower(sch, [*args, out], "k_conv"))
    oc_tile = cfg.as_dict()["tile_oc"]
    (line,) = [x for x in src.splitlines() if "__builtin_prefetch(" in x]
    assert f"+ {oc_tile * 160 * 16})) * 4u), 0, 2);" in line, line
    got, want = run_schedule(sch, args, out)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "c, oc, hw, k, stride, cores, want",
    [
        (384, 64, (14, 14), 1, 1, 2, "oh_oc"),  # weights 98 KB, input and output 351 KB
        (384, 64, (14, 14), 1, 1, 1, "oc_oh"),  # one core: no share to keep
        (960, 320, (7, 7), 1, 1, 2, "oc_oh"),  # weights 1.2 MB against 251 KB
        (64, 128, (56, 56), 3, 2, 2, "oh_oc"),  # a 3x3 s2: 295 KB against 1.2 MB
        (256, 512, (14, 14), 3, 2, 2, "oc_oh"),  # 4.7 MB of weights: each core its blocks'
    ],
)
def test_a_multi_core_board_gives_each_core_rows_where_the_weights_are_smaller(
    c, oc, hw, k, stride, cores, want
):
    args, out, anchor = conv_group(c=c, oc=oc, hw=hw, k=k, stride=stride, pad=k // 2, block=16)
    cfg = Config()
    _, attrs, tensor = anchor
    from packager.ops.registry import ScheduleContext

    target = CpuTarget(vector_bits=512, cores=cores, l2_bytes=2 << 20)
    get_op("conv2d_nchwc").schedules["cpu"](ScheduleContext([out], tensor, attrs, cfg, target))
    assert cfg.as_dict()["outer_order"] == want


def _parallel_items(src: str) -> list[int]:
    return [int(n) for n in re.findall(r"pk_parallel_for\([^;]*, (\d+)\);", src)]


def test_rows_outside_on_two_cores_keep_the_answer():
    for cores, fused in (
        (2, "relu_i0_relu_i2_f_relu_i1_o_f"),
        (1, "relu_i0_relu_i1_o_f_relu_i2_f"),
    ):
        with te.fresh_names():
            args, out, anchor = conv_group(c=64, oc=32, hw=(8, 8), k=1, stride=1, pad=0)
        sch = schedule_for([out], anchor, CpuTarget(vector_bits=256, cores=cores))
        src = codegen_c(te.lower(sch, [*args, out], "k"))
        # the parallel loop: 8 rows x 4 blocks, rows outside (n, rows, blocks fused) on two
        assert _parallel_items(src) == [32] and f"const int64_t {fused} = pk_i;" in src
        got, want = run_schedule(sch, args, out)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "hw, cores, items", [((14, 14), 2, 2 * 2), ((7, 7), 2, 2 * 7), ((14, 14), 1, 2 * 14)]
)
def test_a_depthwise_conv_gives_each_core_a_band_of_rows(hw, cores, items):
    """Two cores and 14 rows: two bands of 7 rows, each over the 2 tiles of channel
    blocks (items = bands x tiles); 7 rows do not share out, nor is there a core to
    share with: each tile's rows (tiles x rows)."""
    args, out, anchor = conv_group(c=64, oc=64, hw=hw, k=3, stride=1, pad=1, block=16, groups=64)
    sch = schedule_for([out], anchor, CpuTarget(vector_bits=512, cores=cores))
    src = codegen_c(te.lower(sch, [*args, out], "k"))
    assert _parallel_items(src) == [items]
    got, want = run_schedule(sch, args, out)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
