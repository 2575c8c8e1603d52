"""A 1x1 conv computed over its pixels as one axis (conv2d_nchwc's ``pixel_multiple``) and
its CPU schedule (ops/conv_pixels_schedule.py): the pixels rounded up, the 2 x 6 tile."""

from __future__ import annotations

import re

import numpy as np
import pytest

from packager import te
from packager.codegen import build_kernel, codegen_c
from packager.graph.passes.layout_pack import from_blocked, to_blocked
from packager.lowering import schedule_for
from packager.ops.conv_pixels_schedule import pixel_multiple
from packager.ops.knobs import Config
from packager.ops.registry import ScheduleContext, get_op
from packager.target import CpuTarget
from packager.te.evaluator import evaluate

from .harness import conv_group, haswell_asm, innermost_fma_loop, run_op_numpy

BLOCK = 8
AVX2 = CpuTarget(vector_bits=256, cores=2)


def _packed(wt: np.ndarray) -> np.ndarray:
    """(OC, C) -> (OC/8, C/8, 1, 1, 8, 8), as layout_pack packs a conv's filters."""
    oc, c = wt.shape
    return np.ascontiguousarray(
        wt.reshape(oc // BLOCK, BLOCK, c // BLOCK, BLOCK).transpose(0, 2, 3, 1)[:, :, None, None]
    )


@pytest.mark.parametrize("hw,strides", [((7, 7), 1), ((5, 4), 1), ((2, 3), 1), ((14, 13), 2)])
@pytest.mark.parametrize("multiple", [1, 6, 4])
def test_compute_matches_a_1x1_conv(hw, strides, multiple):
    """49, 20 and 6 pixels held as 54, 24 and 6 (or 52, 20, 8): the extra ones repeat the
    last pixel and are dropped; at stride 2 the 7 x 7 output pixels read every other
    input row and column."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 16, *hw)).astype(np.float32)
    wt = rng.standard_normal((24, 16)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    attrs = {"strides": [strides] * 2, "pads": [0] * 4, "groups": 1, "pixel_multiple": multiple}
    ins = [to_blocked(x, BLOCK), _packed(wt), b.reshape(-1, BLOCK)]
    (got,) = run_op_numpy("conv2d_nchwc", ins, attrs)
    xs = x[0, :, ::strides, ::strides].astype(np.float64)
    want = np.einsum("chw,oc->ohw", xs, wt)[None] + b[None, :, None, None]
    np.testing.assert_allclose(from_blocked(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kernel,attrs,match",
    [
        ((3, 3), {"pads": [1] * 4}, r"kernel \[3, 3\]"),
        ((1, 1), {"pads": [1, 0, 0, 0]}, r"pads \[1, 0, 0, 0\]"),
    ],
)
def test_pixel_multiple_is_refused_where_pixels_do_not_line_up(kernel, attrs, match):
    x = te.placeholder((1, 2, 6, 6, BLOCK), "float32", "x")
    w = te.placeholder((2, 2, *kernel, BLOCK, BLOCK), "float32", "w")
    with pytest.raises(ValueError, match=match):
        get_op("conv2d_nchwc").compute([x, w], {**attrs, "pixel_multiple": 6})


def _group(c, oc, hw, epilogue, strides=1):
    """conv (+ bias + relu, + residual add) on placeholders, like a fused group."""
    data = te.placeholder((1, c // BLOCK, *hw, BLOCK), "float32", "in0")
    weight = te.placeholder((oc // BLOCK, c // BLOCK, 1, 1, BLOCK, BLOCK), "float32", "in1")
    attrs = {"strides": [strides] * 2, "pads": [0] * 4, "groups": 1, "pixel_multiple": 6}
    return conv_group("conv2d_nchwc", [data, weight], attrs, oc // BLOCK, epilogue)


@pytest.mark.parametrize(
    "hw,epilogue,knobs",
    [
        ((7, 7), "relu", {}),
        ((14, 14), "residual", {}),
        ((5, 4), "none", {}),
        ((7, 7), "residual", {"outer_order": "p_oc", "unroll_rci": 8}),
        ((3, 5), "relu", {"tile_oc": 1, "tile_p": 3, "vectorize_oc": False}),
        ((6, 6), "none", {"tile_oc": 4, "tile_p": 2, "unroll_rci": 2}),
        ((14, 13), "none", {"strides": 2}),  # 7 x 7 out, a residual projection
        ((14, 14), "relu", {"strides": 2, "outer_order": "p_oc"}),
    ],
)
def test_template_matches_the_compute(hw, epilogue, knobs):
    """The scheduled kernel (real C, cores=2 so the parallel loop is generated) gives what
    the numpy interpretation of the same computes gives, the last tile's extra pixels
    computed and never stored."""
    knobs = dict(knobs)
    args, out, anchor = _group(16, 32, hw, epilogue, knobs.pop("strides", 1))
    sch = schedule_for([out], anchor, AVX2, knobs)
    rng = np.random.default_rng(1)
    ins = [rng.standard_normal(a.shape).astype(np.float32) for a in args]
    got = np.full(out.shape, np.nan, np.float32)
    build_kernel(te.lower(sch, [*args, out], "k_px"))(*ins, got)
    (want,) = evaluate([out], dict(zip(args, ins, strict=True)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_an_odd_count_of_blocks_takes_one_block_a_tile():
    """The pass gives pixel_multiple to convs whose blocks pair up only; set by hand on 3
    blocks, the default tile is 1 block x 6 pixels and the kernel is still right."""
    args, out, anchor = _group(16, 24, (5, 5), "relu")
    c = codegen_c(te.lower(schedule_for([out], anchor, AVX2), [*args, out], "k_px"))
    assert re.findall(r"float conv_nchwc\[(\d+)\];", c) == ["48"]
    rng = np.random.default_rng(2)
    ins = [rng.standard_normal(a.shape).astype(np.float32) for a in args]
    got = np.full(out.shape, np.nan, np.float32)
    build_kernel(te.lower(schedule_for([out], anchor, AVX2), [*args, out], "k_px"))(*ins, got)
    (want,) = evaluate([out], dict(zip(args, ins, strict=True)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_the_tile_is_a_register_buffer_of_one_tile():
    """Bound inference sees through the fused and split pixel loop ((p / W) * W + p % W is
    p): the conv stage's buffer holds one tile, 2 blocks x 6 pixels x 8 lanes, not every
    pixel of the output."""
    args, out, anchor = _group(16, 32, (14, 14), "relu")
    c = codegen_c(te.lower(schedule_for([out], anchor, AVX2), [*args, out], "k_px"))
    assert re.findall(r"float conv_nchwc\[(\d+)\];", c) == ["96"]


def test_pixel_multiple_by_target():
    assert pixel_multiple(AVX2, 8, 1 << 20) == 6
    assert pixel_multiple(CpuTarget(arch="armv7", vector_bits=128), 8, 1 << 20) == 6
    assert pixel_multiple(CpuTarget(vector_bits=512), 8, 1 << 20) == 1  # 32 registers
    assert pixel_multiple(CpuTarget(arch="aarch64", vector_bits=128), 8, 1 << 20) == 1
    assert pixel_multiple(AVX2, 3, 1 << 20) == 1  # blocks that do not pair up
    # an input over twice the L2 read by 4 pairs: the row tile walks rows outside
    assert pixel_multiple(AVX2, 8, 3 << 20) == 1
    assert pixel_multiple(AVX2, 6, 3 << 20) == 6  # 3 pairs
    assert pixel_multiple(CpuTarget(vector_bits=256, l2_bytes=2 << 20), 8, 3 << 20) == 6


@pytest.mark.parametrize("lanes", [1, 8])
def test_hot_loop_keeps_its_tile_in_registers(tmp_path, lanes):
    """At 256 bits (AVX2's 16 registers), per input channel lane: 12 FMAs, the 2 weight
    vectors loaded once and 6 broadcasts (the row tile of a 14-wide row is 1 x 14: 1
    weight load and 14 broadcasts for 14 FMAs). One lane a step, no accumulator leaves
    the registers; with the default's 8 lanes a step GCC (12, -O3) keeps 2 values on the
    stack (4 accesses a step of 96 FMAs), and that ran faster all the same
    (conv_pixels_schedule.py)."""
    args, out, anchor = _group(64, 128, (14, 14), "residual")
    knobs = {"unroll_rci": lanes} if lanes == 1 else {}
    lowered = te.lower(schedule_for([out], anchor, AVX2, knobs), [*args, out], "k_px")
    loop = innermost_fma_loop(haswell_asm(codegen_c(lowered), tmp_path), "k_px_par0")
    stack = [t for t in loop if "rsp" in t]
    assert sum(t.startswith("vfmadd") for t in loop) == lanes * 12, loop
    assert sum(t.startswith("vbroadcastss") for t in loop) == lanes * 6, loop
    weights = [t for t in loop if re.match(r"vmov\w+\s+[^%]*\((?!%rsp)", t)]
    assert len(weights) == lanes * 2, loop
    assert len(stack) <= (0 if lanes == 1 else 4), stack


@pytest.mark.parametrize(
    "hw,knobs,want",
    [((7, 7), {}, True), ((28, 28), {}, False), ((7, 7), {"prefetch_weights": False}, False)],
)
def test_a_pixel_tile_prefetches_the_next_pairs_weights(hw, knobs, want):
    """Over at most 14x14 pixels (weight_prefetch.prefetches_next_weights) the tile of 2
    blocks fetches the next pair's weights, 2 blocks x 2 input blocks x 8 x 8 floats on,
    into the L2 (locality 2); the knob turns it off."""
    args, out, anchor = _group(16, 32, hw, "relu")
    c = codegen_c(te.lower(schedule_for([out], anchor, AVX2, knobs), [*args, out], "k_px"))
    lines = [x for x in c.splitlines() if "__builtin_prefetch(" in x]
    assert bool(lines) is want
    if want:
        assert all(x.endswith(f"+ {2 * 2 * 8 * 8})) * 4u), 0, 2);") for x in lines), lines


@pytest.mark.parametrize(
    "c, oc, hw, l1, want",
    [
        (24, 144, (56, 56), 32 << 10, "p_oc"),  # 14 KB of weights in the L1
        (64, 256, (56, 56), 32 << 10, "oc_p"),  # 64 KB: each pixel tile would stream them
        (64, 256, (56, 56), 80 << 10, "p_oc"),  # ... unless the L1 holds them
    ],
)
def test_pixels_go_outside_on_two_cores_only_where_the_weights_fit_the_l1(c, oc, hw, l1, want):
    args, out, anchor = _group(c, oc, hw, "relu")
    cfg = Config()
    _, attrs, tensor = anchor
    target = CpuTarget(vector_bits=256, cores=2, l1d_bytes=l1)
    get_op("conv2d_nchwc").schedules["cpu"](ScheduleContext([out], tensor, attrs, cfg, target))
    assert cfg.as_dict()["outer_order"] == want
