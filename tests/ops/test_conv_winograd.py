"""Winograd conv: the transform matrices, the op's compute, its cpu template (fused
epilogues, shapes whose output is not a multiple of the tile), against a direct conv."""

from __future__ import annotations

import numpy as np
import pytest

from packager import te
from packager.codegen import build_kernel
from packager.graph.passes.layout_pack import from_blocked, to_blocked
from packager.lowering import schedule_for
from packager.ops.conv_winograd import TILES, matrices, transform_weight
from packager.ops.registry import get_op
from packager.target import CpuTarget
from packager.te.evaluator import evaluate

from .harness import run_op_numpy

BLOCK = 8


def direct_conv(x, w, pads):
    """Reference 3x3 stride-1 correlation, float64, NCHW."""
    t, left, b, r = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, b), (left, r)))
    oh, ow = xp.shape[2] - 2, xp.shape[3] - 2
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i : i + oh, j : j + ow], w[:, :, i, j])
    return out


@pytest.mark.parametrize("m", TILES)
def test_transforms_compute_a_correlation(m):
    """1-D F(m, 3): A^T [(G g) * (B^T d)] is the correlation of d with g."""
    bt, g, at = matrices(m)
    rng = np.random.default_rng(m)
    d, k = rng.standard_normal(m + 2), rng.standard_normal(3)
    want = np.array([d[i : i + 3] @ k for i in range(m)])
    np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), want, rtol=1e-12, atol=1e-12)


def _inputs(c, oc, h, w, m, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((oc, c, 3, 3)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    return x, wt, b, [to_blocked(x, BLOCK), transform_weight(wt, m, BLOCK), b.reshape(-1, BLOCK)]


@pytest.mark.parametrize("m", TILES)
@pytest.mark.parametrize("hw", [(8, 8), (7, 9)])
def test_compute_matches_direct_conv(m, hw):
    x, wt, b, ins = _inputs(16, 8, *hw, m)
    pads = [1, 1, 1, 1]
    (got,) = run_op_numpy("conv2d_winograd_nchwc", ins, {"pads": pads, "tile": m})
    want = direct_conv(x, wt, pads) + b[None, :, None, None]
    np.testing.assert_allclose(from_blocked(got), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_unpadded_conv_shrinks_the_output():
    x, wt, _, ins = _inputs(8, 8, 10, 6, 2)
    (got,) = run_op_numpy("conv2d_winograd_nchwc", ins[:2], {"pads": [0, 0, 0, 0], "tile": 2})
    assert got.shape == (1, 1, 8, 4, 8)
    np.testing.assert_allclose(from_blocked(got), direct_conv(x, wt, [0] * 4), atol=1e-4)


def test_bad_shapes_are_refused():
    x = te.placeholder((1, 2, 8, 8, 8), "float32", "x")
    u = te.placeholder((6, 6, 1, 8, 8), "float32", "u")  # 8 input channels, data has 16
    with pytest.raises(ValueError, match="input channels"):
        get_op("conv2d_winograd_nchwc").compute([x, u], {"pads": [1] * 4, "tile": 4})
    with pytest.raises(ValueError, match="tile 3"):
        get_op("conv2d_winograd_nchwc").compute([x, u], {"pads": [1] * 4, "tile": 3})


def _group(c, oc, hw, m, epilogue):
    """conv (+ bias + relu, + residual add) on placeholders, like a fused group."""
    data = te.placeholder((1, c // BLOCK, *hw, BLOCK), "float32", "in0")
    weight = te.placeholder((m + 2, m + 2, oc // BLOCK, c, BLOCK), "float32", "in1")
    args = [data, weight]
    attrs = {"pads": [1] * 4, "tile": m}
    if epilogue == "none":
        out = get_op("conv2d_winograd_nchwc").compute(args, attrs)[0]
        return args, out, ("conv2d_winograd_nchwc", attrs, out)
    bias = te.placeholder((oc // BLOCK, BLOCK), "float32", "in2")
    args.append(bias)
    conv = get_op("conv2d_winograd_nchwc").compute(args, attrs)[0]
    zero = te.const(0.0, "float32")
    out = te.compute(conv.shape, lambda *i: te.max_(conv[i], zero), name="relu")
    if epilogue == "residual":
        res = te.placeholder(out.shape, "float32", "in3")
        args.append(res)
        prev = out
        out = te.compute(out.shape, lambda *i: prev[i] + res[i], name="add")
    return args, out, ("conv2d_winograd_nchwc", attrs, conv)


@pytest.mark.parametrize(
    "m,hw,epilogue,knobs",
    [
        (4, (8, 12), "relu", {}),
        (2, (6, 6), "residual", {}),
        (4, (7, 9), "none", {}),
        (2, (5, 7), "relu", {"tile_oc": 1, "tile_t": 1}),
        (4, (8, 12), "relu", {"tile_order": "t_oc"}),
        (2, (6, 6), "residual", {"tile_order": "oc_t"}),
    ],
)
def test_template_matches_the_compute(m, hw, epilogue, knobs):
    """The scheduled kernel (real C, cores=2 so the parallel loops are generated) gives
    what the numpy interpretation of the same computes gives."""
    args, out, anchor = _group(16, 16, hw, m, epilogue)
    sch = schedule_for([out], anchor, CpuTarget(vector_bits=256, cores=2), knobs)
    rng = np.random.default_rng(1)
    ins = [rng.standard_normal(a.shape).astype(np.float32) for a in args]
    got = np.empty(out.shape, np.float32)
    build_kernel(te.lower(sch, [*args, out], "k_wino"))(*ins, got)
    (want,) = evaluate([out], dict(zip(args, ins, strict=True)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_template_knobs():
    from packager.ops.knobs import Config

    args, out, (op, attrs, conv) = _group(16, 32, (8, 8), 4, "relu")
    cfg = Config()
    from packager.ops.registry import ScheduleContext

    get_op(op).schedules["cpu"](
        ScheduleContext([out], conv, attrs, cfg, CpuTarget(vector_bits=256, cores=2))
    )
    assert set(cfg.space) == {"tile_oc", "tile_t", "tile_order"}
    assert cfg.space["tile_t"].candidates == (1, 2, 4)  # divisors of the 4 tiles


@pytest.mark.parametrize("m,hw", [(4, (14, 14)), (2, (7, 7)), (4, (8, 8))])
def test_output_transform_works_one_tile_at_a_time(m, hw):
    """Output sizes that are not whole tiles still give per-tile local buffers (the
    region of one tile, not the whole plane recomputed for every tile)."""
    from packager.te.ir import Allocate
    from packager.te.visitor import stmts_of

    args, out, anchor = _group(16, 16, hw, m, "relu")
    sch = schedule_for([out], anchor, None, {})
    prim = te.lower(sch, [*args, out], "k_wino")
    sizes = {
        s.buffer.name: s.buffer.size
        for s in stmts_of(prim.body, Allocate)
        if s.buffer.scope == "local"
    }
    assert sizes["conv_winograd"] == m * m * BLOCK
    assert sizes["winograd_z"] == (m + 2) * m * BLOCK
