"""Winograd conv: the transform matrices, the op's compute, its cpu template (fused
epilogues, shapes whose output is not a multiple of the tile), against a direct conv."""

from __future__ import annotations

import re

import numpy as np
import pytest

from packager import te
from packager.codegen import build_kernel, codegen_c
from packager.graph.passes.layout_pack import from_blocked, to_blocked
from packager.lowering import schedule_for
from packager.ops.conv_winograd import TILES, matrices, transform_weight
from packager.ops.registry import get_op
from packager.target import CpuTarget
from packager.te.evaluator import evaluate

from .harness import conv_group, haswell_asm, innermost_fma_loop, run_op_numpy

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
@pytest.mark.parametrize("multiple", [1, 6])
def test_compute_matches_direct_conv(m, hw, multiple):
    """Also with the count of tiles rounded up (tile_multiple): 4, 6, 9 or 12 tiles held
    as 6 or 12, the extra ones computed from the last tile and dropped."""
    x, wt, b, ins = _inputs(16, 8, *hw, m)
    pads = [1, 1, 1, 1]
    attrs = {"pads": pads, "tile": m, "tile_multiple": multiple}
    (got,) = run_op_numpy("conv2d_winograd_nchwc", ins, attrs)
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
    x = te.placeholder((1, 1, 8, 8, 8), "float32", "x")
    with pytest.raises(ValueError, match="tile_multiple 0 is not positive"):
        attrs = {"pads": [1] * 4, "tile": 4, "tile_multiple": 0}
        get_op("conv2d_winograd_nchwc").compute([x, u], attrs)


def _group(c, oc, hw, m, epilogue, multiple=1):
    """conv (+ bias + relu, + residual add) on placeholders, like a fused group."""
    data = te.placeholder((1, c // BLOCK, *hw, BLOCK), "float32", "in0")
    weight = te.placeholder((m + 2, m + 2, oc // BLOCK, c, BLOCK), "float32", "in1")
    attrs = {"pads": [1] * 4, "tile": m, "tile_multiple": multiple}
    return conv_group("conv2d_winograd_nchwc", [data, weight], attrs, oc // BLOCK, epilogue)


@pytest.mark.parametrize(
    "m,hw,epilogue,knobs,multiple",
    [
        (4, (8, 12), "relu", {}, 1),
        (2, (6, 6), "residual", {}, 1),
        (4, (7, 9), "none", {}, 1),
        (2, (5, 7), "relu", {"tile_oc": 1, "tile_t": 1}, 1),
        (4, (8, 12), "relu", {"tile_order": "t_oc"}, 1),
        (2, (6, 6), "residual", {"tile_order": "oc_t"}, 1),
        (2, (14, 14), "residual", {}, 6),  # 49 tiles held as 54: the 2 x 6 tile
        (4, (7, 9), "relu", {}, 6),  # 6 tiles, none extra
        (4, (9, 9), "none", {"tile_oc": 1, "tile_t": 3}, 6),  # 9 tiles held as 12
    ],
)
def test_template_matches_the_compute(m, hw, epilogue, knobs, multiple):
    """The scheduled kernel (real C, cores=2 so the parallel loops are generated) gives
    what the numpy interpretation of the same computes gives."""
    args, out, anchor = _group(16, 16, hw, m, epilogue, multiple)
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


@pytest.mark.parametrize(
    "bits,arch,multiple,hw,want",
    [
        # 16 registers: 49 tiles held as 54, 2 blocks x 6 tiles, tiles outside blocks
        (256, "x86_64", 6, (14, 14), (54, 2, 6, "t_oc")),
        (256, "x86_64", 6, (12, 12), (36, 2, 6, "t_oc")),  # 36 tiles: a multiple already
        (256, "x86_64", 1, (14, 14), (49, 2, 7, "t_oc")),  # without the attribute: as before
        (512, "x86_64", 1, (14, 14), (49, 2, 7, "oc_t")),  # 32 registers: as before
        (128, "aarch64", 1, (14, 14), (49, 2, 7, "oc_t")),
    ],
)
def test_tiles_held_and_the_products_tile(bits, arch, multiple, hw, want):
    """With the count of tiles a multiple of 6 (the op's tile_multiple, which
    test_tile_multiple_by_target gives) and 16 vector registers, the products' default
    register tile is 2 output blocks x 6 tiles: 12 accumulators, 2 weight vectors, 1
    broadcast."""
    from packager.ops._cpu import find_tagged
    from packager.ops.knobs import Config
    from packager.ops.registry import ScheduleContext

    target = CpuTarget(arch=arch, vector_bits=bits, cores=2)
    args, out, (op, attrs, conv) = _group(16, 64, hw, 2, "relu", multiple)
    cfg = Config()
    get_op(op).schedules["cpu"](ScheduleContext([out], conv, attrs, cfg, target))
    prod = find_tagged(out, "winograd_product")
    knobs = cfg.as_dict()
    assert (prod.shape[3], knobs["tile_oc"], knobs["tile_t"], knobs["tile_order"]) == want


def test_tile_multiple_by_target():
    from packager.ops.winograd_schedule import tile_multiple

    assert tile_multiple(CpuTarget(vector_bits=256)) == 6  # AVX2
    assert tile_multiple(CpuTarget(arch="armv7", vector_bits=128)) == 6  # NEON, 16 registers
    assert tile_multiple(CpuTarget(vector_bits=512)) == 1
    assert tile_multiple(CpuTarget(arch="aarch64", vector_bits=128)) == 1


def test_products_hot_loop_keeps_its_tile_in_registers(tmp_path):
    """At 256 bits (AVX2's 16 registers) the products' hot loop is the 2 x 6 tile: 12
    FMAs a step, the 2 weight vectors loaded once and 6 broadcasts, no accumulator on the
    stack (the 2 x 7 tile of 49 tiles reloaded a weight vector for every FMA and kept an
    accumulator on the stack)."""
    args, out, anchor = _group(128, 128, (14, 14), 2, "relu", 6)
    sch = schedule_for([out], anchor, CpuTarget(vector_bits=256, cores=2))
    source = codegen_c(te.lower(sch, [*args, out], "k_wino"))
    asm = haswell_asm(source, tmp_path)
    (products,) = [  # the parallel loop that reads V and stores M
        name
        for name in re.findall(r"<(k_wino_par\d+)>:", asm)
        if {"winograd_v", "winograd_m_store"} <= set(_function_source(source, name))
    ]
    loop = innermost_fma_loop(asm, products)
    assert sum(t.startswith("vfmadd") for t in loop) == 12, loop
    assert not [t for t in loop if "rsp" in t], loop
    assert sum(bool(re.match(r"vmov\w+\s+\S*\(", t)) for t in loop) == 2, loop  # weights
    assert sum(t.startswith("vbroadcastss") for t in loop) == 6, loop
    assert not [t for t in loop if re.match(r"vfmadd\w+\s+\S*\(", t)], loop  # no reloads


def _function_source(c: str, name: str) -> list[str]:
    """The identifiers of C function ``name`` in source ``c``."""
    start = c.index(f"static void {name}(")
    return re.findall(r"\w+", c[start : c.index("\n}\n", start)])
