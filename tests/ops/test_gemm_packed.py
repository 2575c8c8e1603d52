"""The gemm template on a packed B (``b_block``: B as (N / nb, K, nb), as the
pack_gemm_weights pass stores constant weights): same numbers as numpy, for knob
variations too, with the weights read as whole vectors (no per-element index division)."""

from __future__ import annotations

import numpy as np
import pytest

from packager import te
from packager.codegen import build_kernel
from packager.codegen.c import codegen_c
from packager.graph.passes.pack_gemm_weights import pack_b
from packager.lowering import schedule_for
from packager.ops.registry import get_op
from packager.target import CpuTarget

TARGET = CpuTarget(vector_bits=256, cores=2)


def _run(attrs, inputs, knobs=None, target=TARGET):
    phs = [te.placeholder(a.shape, str(a.dtype), f"in{i}") for i, a in enumerate(inputs)]
    outs = get_op("gemm").compute(phs, attrs)
    sch = schedule_for(outs, ("gemm", attrs, outs[0]), target, knobs)
    func = te.lower(sch, phs + outs, "k_gemm")
    res = [np.empty(t.shape, np.float32) for t in outs]
    build_kernel(func)(*inputs, *res)
    return res[0], codegen_c(func)


def test_pack_b_layout():
    b = np.arange(6 * 16, dtype=np.float32).reshape(6, 16)  # (K, N)
    p = pack_b(b, False, 8)
    assert p.shape == (2, 6, 8) and p.flags.c_contiguous
    for j in range(16):
        np.testing.assert_array_equal(p[j // 8, :, j % 8], b[:, j])
    np.testing.assert_array_equal(pack_b(np.ascontiguousarray(b.T), True, 8), p)


SHAPES = [(1, 1000, 256), (1, 40, 7), (4, 64, 33), (3, 24, 5)]
KNOBS = [None, {"tile_m": 1}, {"tile_n_vectors": 1}, {"tile_n_vectors": 2, "tile_m": 1}]
# Knob settings are only valid when the column tile divides the columns.
CASES = [
    (*shape, knobs)
    for shape in SHAPES
    for knobs in KNOBS
    if not knobs or shape[1] // 8 % knobs.get("tile_n_vectors", 1) == 0
]


@pytest.mark.parametrize("m,n,k,knobs", CASES)
def test_packed_gemm_matches_numpy(m, n, k, knobs):
    rng = np.random.default_rng(m * 1000 + n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((n,)).astype(np.float32)
    attrs = {"b_block": 8, "alpha": 0.5, "beta": 2.0}
    out, src = _run(attrs, [a, pack_b(b, False, 8), c], knobs)
    np.testing.assert_allclose(out, 0.5 * (a @ b) + 2.0 * c, rtol=1e-4, atol=1e-4)
    assert "pk_f32x8" in src
    assert "/ 8" not in src and "% 8" not in src  # j // nb, j % nb simplified away


def test_gemv_default_tile_has_several_accumulators():
    """A one-row product (a classifier) keeps ~8 vector accumulators, not one: 1000
    columns = 125 vectors, so 5 per tile and 25 parallel tiles."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((1, 128)).astype(np.float32)
    b = rng.standard_normal((128, 1000)).astype(np.float32)
    c = rng.standard_normal((1000,)).astype(np.float32)
    out, src = _run({"b_block": 8}, [a, pack_b(b, False, 8), c])
    np.testing.assert_allclose(out, a @ b + c, rtol=1e-4, atol=1e-4)
    assert "float gemm[40];" in src
    assert "pk_parallel_for(k_gemm_par0, &pk_c0, 25)" in src


def test_packed_b_must_match_block():
    a = te.placeholder((2, 8), "float32", "a")
    b = te.placeholder((2, 8, 4), "float32", "b")
    with pytest.raises(ValueError, match="b_block"):
        get_op("gemm").compute([a, b], {"b_block": 8})


@pytest.mark.parametrize("packed", [True, False])
def test_columns_of_half_vectors_run_in_half_vectors(packed):
    """1000 columns at 16 lanes (AVX-512) are not whole vectors of 16: vectors of 8,
    not scalar code, packed or not."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((1, 64)).astype(np.float32)
    b = rng.standard_normal((64, 1000)).astype(np.float32)
    attrs, bb = ({"b_block": 8}, pack_b(b, False, 8)) if packed else ({}, b)
    out, src = _run(attrs, [a, bb], target=CpuTarget(vector_bits=512, cores=1))
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    assert "pk_f32x8" in src and "pk_f32x16" not in src
