"""OpenCL schedule templates for convolutions (conv2d_nchwc dense/1x1/grouped/depthwise,
plain conv) and dense products (gemm, matmul), run on this machine's OpenCL device
(PoCL) against the TE evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from packager import te
from packager.boards import load_board
from packager.ops.knobs import Config
from packager.ops.opencl.conv import schedule_conv2d_nchwc_opencl, schedule_depthwise_opencl
from packager.ops.registry import ScheduleContext, get_op
from packager.target import Target

from .opencl_harness import MALI, assert_close, epilogue, run_opencl

RNG = np.random.default_rng(7)


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _nchwc(n, c, h, w, x, oc, kh, kw, y, groups=1, bias=True):
    """Input, packed weight and bias arrays of an NCHW[x]c conv."""
    cg = c // groups
    arrays = [_rand(n, c // x, h, w, x), _rand(oc // y, cg // x, kh, kw, x, y)]
    return arrays + ([_rand(oc // y, y)] if bias else [])


def _dw(n, c, h, w, x, k=3):
    return [_rand(n, c // x, h, w, x), _rand(c // x, 1, k, k, 1, x), _rand(c // x, x)]


def test_opencl_templates_are_registered_for_the_conv_and_dense_families():
    for op in ("conv2d_nchwc", "conv", "gemm", "matmul"):
        assert "opencl" in get_op(op).schedules, op


CONV_CASES = {
    # name: (inputs, attrs, epilogue steps)
    "3x3 pad1 bias relu": (_nchwc(1, 8, 9, 10, 4, 12, 3, 3, 4), {"pads": [1, 1, 1, 1]}, ["relu"]),
    "3x3 stride2 non-dividing": (
        _nchwc(2, 8, 11, 13, 4, 8, 3, 3, 4),
        {"pads": [1, 1, 1, 1], "strides": [2, 2]},
        [],
    ),
    "1x1 block 8 residual": (
        _nchwc(1, 16, 7, 7, 8, 24, 1, 1, 8),
        {},
        ["relu", ("add", _rand(1, 3, 7, 7, 8))],
    ),
    "grouped 2": (_nchwc(1, 16, 6, 6, 4, 8, 3, 3, 4, groups=2), {"groups": 2}, [("clip", 0, 6)]),
    # groups of 12 channels in blocks of 8: output blocks read 2 or 3 of the 3 packed
    "spanned groups": (
        [_rand(1, 6, 5, 7, 8), _rand(6, 3, 1, 1, 8, 8), _rand(6, 8)],
        {"groups": 4, "spanned": 1},
        ["relu"],
    ),
    "no bias, pads asym": (
        _nchwc(1, 4, 5, 9, 4, 4, 3, 2, 4, bias=False),
        {"pads": [0, 1, 2, 0]},
        [],
    ),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv2d_nchwc_template_matches_the_evaluator(case):
    inputs, attrs, steps = CONV_CASES[case]
    res = run_opencl("conv2d_nchwc", attrs, inputs, post=epilogue(*steps) if steps else None)
    assert_close(res)
    assert "conv_nchwc_local[" in res.source  # accumulates in private memory
    assert "vload4" in res.source or "vload8" in res.source
    assert "vstore4(" in res.source.split("conv_nchwc_local[")[-1] or "vstore8(" in res.source


@pytest.mark.parametrize(
    "knobs",
    [
        {"tile_oc": 1, "tile_ow": 1, "vector": 1},
        {"tile_oc": 3, "tile_ow": 5, "vector": 2, "unroll_rci": 2, "unroll_kw": True},
        {"group_shape": "xy", "group_size": 32},
        {"group_size": 256, "tile_ow": 2},
    ],
)
def test_conv2d_nchwc_template_knobs(knobs):
    inputs = _nchwc(1, 8, 10, 10, 4, 12, 3, 3, 4)
    res = run_opencl(
        "conv2d_nchwc", {"pads": [1, 1, 1, 1]}, inputs, post=epilogue("relu"), knobs=knobs
    )
    assert_close(res)
    assert "conv_nchwc_local[" in res.source
    if knobs.get("vector") == 1:
        assert "vload" not in res.source
    if knobs.get("vector") == 2:
        assert "vstore2(" in res.source
    if knobs.get("group_shape") == "xy":
        assert res.launch.local_size[1] > 1 and "get_group_id(2)" in res.source


def test_conv2d_nchwc_template_tiles_work_items():
    """2 blocks x 4 columns per work-item by default: 1/8 of the generic's work-items."""
    inputs = _nchwc(1, 8, 8, 8, 4, 16, 3, 3, 4)
    res = run_opencl("conv2d_nchwc", {"pads": [1, 1, 1, 1]}, inputs)
    generic = run_opencl("conv2d_nchwc", {"pads": [1, 1, 1, 1]}, inputs, generic=True)
    assert_close(res)
    # 4 blocks / 2 x 8 rows x 8 columns / 4: 32 items, one group
    assert res.launch.global_size == (32, 1, 1) and res.launch.local_size == (32, 1, 1)
    assert generic.launch.global_size[0] == 1 * 4 * 8 * 8 * 4


def test_conv2d_nchwc_template_rejects_an_unrolled_body_too_long():
    inputs = _nchwc(1, 16, 8, 8, 16, 64, 3, 3, 16)
    with pytest.raises(ValueError, match="unrolled multiply-adds"):
        run_opencl(
            "conv2d_nchwc",
            {"pads": [1, 1, 1, 1]},
            inputs,
            knobs={"tile_oc": 4, "tile_ow": 8, "unroll_kw": True},
        )


@pytest.mark.parametrize(
    ("shape", "attrs", "knobs"),
    [
        ((1, 16, 12, 12, 4), {"pads": [1, 1, 1, 1], "groups": 16}, None),
        ((2, 16, 9, 11, 8), {"pads": [1, 1, 1, 1], "strides": [2, 2], "groups": 16}, None),
        ((1, 8, 7, 7, 4), {"pads": [1, 1, 1, 1], "groups": 8}, {"tile_oc": 2, "tile_ow": 7}),
        ((1, 8, 6, 6, 4), {"groups": 8}, {"unroll_kw": False, "group_shape": "xy"}),
    ],
)
def test_depthwise_template_matches_the_evaluator(shape, attrs, knobs):
    n, c, h, w, x = shape
    res = run_opencl(
        "conv2d_nchwc", attrs, _dw(n, c, h, w, x), post=epilogue(("clip", 0, 6)), knobs=knobs
    )
    assert_close(res)
    lanes = min(x, MALI.preferred_vector_width)  # a block of 8 in two float4
    assert f"vload{lanes}(" in res.source and f"vstore{lanes}(" in res.source
    assert "rcb" not in res.source  # the depthwise nest: window only


def test_depthwise_convs_take_their_own_schedule():
    """Its defaults differ from the dense conv's: one block and 4 columns per item."""
    x = _dw(1, 16, 8, 8, 4)
    res = run_opencl("conv2d_nchwc", {"pads": [1, 1, 1, 1], "groups": 16}, x)
    assert res.launch.global_size[0] == 64  # 4 blocks x 8 rows x 2 column tiles, 1 group
    assert callable(schedule_depthwise_opencl) and callable(schedule_conv2d_nchwc_opencl)
    assert_close(res)


PLAIN_CASES = {
    "3x3 pad stride1 relu": ((1, 3, 9, 12), (8, 3, 3, 3), {"pads": [1, 1, 1, 1]}, ["relu"]),
    "stride2 non-dividing": ((2, 3, 11, 13), (6, 3, 3, 3), {"strides": [2, 2]}, []),
    "grouped 1x1 residual": (
        (1, 8, 5, 8),
        (4, 4, 1, 1),
        {"groups": 2},
        [("add", _rand(1, 4, 5, 8))],
    ),
}


@pytest.mark.parametrize("case", sorted(PLAIN_CASES))
def test_plain_conv_template_matches_the_evaluator(case):
    xs, ws, attrs, steps = PLAIN_CASES[case]
    inputs = [_rand(*xs), _rand(*ws), _rand(ws[0])]
    res = run_opencl("conv", attrs, inputs, post=epilogue(*steps) if steps else None)
    assert_close(res)
    assert "conv_local[" in res.source
    if attrs.get("strides", [1, 1])[1] == 1:
        assert "vstore4(" in res.source


DENSE_CASES = {
    "gemm trans_b bias": ("gemm", [_rand(3, 20), _rand(10, 20), _rand(10)], {"trans_b": 1}),
    "gemm alpha beta": (
        "gemm",
        [_rand(5, 12), _rand(12, 16), _rand(5, 16)],
        {"alpha": 0.5, "beta": 2.0},
    ),
    "gemm packed": ("gemm", [_rand(2, 8), _rand(2, 8, 8)], {"b_block": 8}),
    "matmul batched": ("matmul", [_rand(2, 3, 6, 10), _rand(3, 10, 12)], {}),
    "matmul odd": ("matmul", [_rand(7, 5), _rand(5, 9)], {}),
}


@pytest.mark.parametrize("case", sorted(DENSE_CASES))
def test_dense_templates_match_the_evaluator(case):
    op, inputs, attrs = DENSE_CASES[case]
    res = run_opencl(op, attrs, inputs, post=epilogue("relu"))
    assert_close(res)
    assert "_local[" in res.source
    if not attrs.get("trans_b") and inputs[1].shape[-1] % 8 == 0:
        assert "vstore4(" in res.source


@pytest.mark.parametrize("knobs", [{"tile_m": 1, "tile_n": 2, "unroll_k": 1}, {"vector": 8}])
def test_dense_template_knobs(knobs):
    res = run_opencl("matmul", {}, [_rand(4, 24), _rand(24, 16)], knobs=knobs)
    assert_close(res)
    assert f"vstore{knobs.get('vector', 2)}(" in res.source


def test_templates_fall_back_to_the_generic_schedule():
    """A 1-D operand (a vector times a matrix) and a 1-D conv: the generic schedule."""
    res = run_opencl("matmul", {}, [_rand(6), _rand(6, 5)])
    assert_close(res)
    assert "_local[" not in res.source
    res = run_opencl("conv", {"pads": [1, 1]}, [_rand(1, 4, 9), _rand(2, 4, 3)])
    assert_close(res)
    assert "_local[" not in res.source


def test_knob_space_declares_the_mali_defaults():
    x = te.placeholder((1, 16, 56, 56, 4), "float32", "x")
    w = te.placeholder((16, 16, 3, 3, 4, 4), "float32", "w")
    out = get_op("conv2d_nchwc").compute([x, w], {"pads": [1, 1, 1, 1]})[0]
    cfg = Config()
    schedule_conv2d_nchwc_opencl(ScheduleContext([out], out, {}, cfg, MALI))
    assert cfg.as_dict() == {
        "tile_oc": 2,
        "tile_ow": 4,
        "vector": 4,
        "unroll_rci": 4,
        "unroll_kw": False,
        "group_size": 64,
        "group_shape": "flat",
    }


# This machine's PoCL device as the host-opencl profile describes it (8 preferred lanes).
POCL = Target.opencl(load_board("host-opencl"))


def _conv_defaults(x_shape, w_shape, attrs, target) -> dict:
    x = te.placeholder(x_shape, "float32", "x")
    w = te.placeholder(w_shape, "float32", "w")
    out = get_op("conv2d_nchwc").compute([x, w], attrs)[0]
    cfg = Config()
    schedule_conv2d_nchwc_opencl(ScheduleContext([out], out, {}, cfg, target))
    return cfg.as_dict()


@pytest.mark.parametrize(
    "blocks, width, mali, pocl",
    [
        # a 7-wide row is one tile (Mali had 2 blocks x 1 column: two accumulators)
        (64, 7, (1, 7), (4, 7)),
        # a prime width: whole rows, as many blocks as the budget holds
        (125, 13, (1, 13), (1, 13)),
        (32, 13, (1, 13), (2, 13)),
        (32, 14, (4, 2), (4, 7)),
        (16, 56, (2, 4), (4, 8)),
    ],
)
def test_default_tiles_fill_the_accumulator_budget(blocks, width, mali, pocl):
    """Mali: 8 float4 accumulators; PoCL's 8-lane vectors: 32 float8 (4x)."""
    attrs = {"pads": [1, 1, 1, 1]}
    for target, lanes, tile in ((MALI, 4, mali), (POCL, 8, pocl)):
        shape = (1, 8, width, width, lanes)
        got = _conv_defaults(shape, (blocks, 8, 3, 3, lanes, lanes), attrs, target)
        assert (got["tile_oc"], got["tile_ow"]) == tile, target.device


def test_depthwise_default_tiles_double_where_vectors_are_wide():
    x = te.placeholder((1, 16, 56, 56, 8), "float32", "x")
    w = te.placeholder((16, 1, 3, 3, 1, 8), "float32", "w")
    out = get_op("conv2d_nchwc").compute([x, w], {"pads": [1, 1, 1, 1], "groups": 128})[0]
    cfg = Config()
    schedule_conv2d_nchwc_opencl(ScheduleContext([out], out, {}, cfg, POCL))
    assert (cfg.as_dict()["tile_oc"], cfg.as_dict()["tile_ow"]) == (1, 8)


def test_wide_default_tiles_compute_the_conv():
    """The defaults a 13-wide row and a 7-wide row get on PoCL, run there."""
    for width in (7, 13):
        res = run_opencl(
            "conv2d_nchwc",
            {"pads": [1, 1, 1, 1]},
            _nchwc(1, 16, width, width, 8, 24, 3, 3, 8),
            target=POCL,
        )
        assert_close(res)
        assert "float conv_nchwc_local[" in res.source
