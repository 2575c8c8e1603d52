"""The cpu schedule templates (matmul, pools, reductions) and the vectorizing,
threading default schedule give the same numbers as numpy, for knob variations too."""

from __future__ import annotations

import re

import numpy as np
import pytest

from packager import te
from packager.codegen import build_kernel
from packager.codegen.c import codegen_c
from packager.lowering import schedule_for
from packager.ops.registry import get_op
from packager.target import CpuTarget
from packager.te.schedule import default_schedule

TARGET = CpuTarget(vector_bits=256, cores=2)


def _run(op, attrs, inputs, post=None, knobs=None, target=TARGET, generic=False):
    """Lower ``op`` (plus an optional elementwise ``post`` fused after it) through its
    cpu template (``generic``: the generic schedule instead); returns the output and the
    C source."""
    phs = [te.placeholder(a.shape, str(a.dtype), f"in{i}") for i, a in enumerate(inputs)]
    outs = get_op(op).compute(phs, attrs)
    anchor = outs[0]
    if post is not None:
        y = outs[0]
        outs = [te.compute(y.shape, lambda *i: post(y[i]), name="post", tag="elemwise")]
    if generic:
        sch = default_schedule(outs, target)
    else:
        sch = schedule_for(outs, (op, attrs, anchor), target, knobs)
    func = te.lower(sch, phs + outs, f"k_{op}")
    res = [np.empty(t.shape, np.float32) for t in outs]
    build_kernel(func)(*inputs, *res)
    return res[0], codegen_c(func)


def _relu(v):
    return te.max_(v, te.const(0.0, "float32"))


@pytest.mark.parametrize(
    "m,n,k,tb", [(1, 1000, 512, 1), (16, 64, 33, 0), (5, 24, 7, 1), (3, 10, 4, 0)]
)
@pytest.mark.parametrize("knobs", [None, {"tile_m": 1}, {"tile_n_vectors": 1}])
def test_gemm_bias_relu(m, n, k, tb, knobs):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    c = rng.standard_normal((n,)).astype(np.float32)
    out, _ = _run("gemm", {"trans_b": tb}, [a, b, c], post=_relu, knobs=knobs)
    want = np.maximum(a @ (b.T if tb else b) + c, 0)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_matmul_template_blocks_and_vectorizes():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 64)).astype(np.float32)
    b = rng.standard_normal((64, 64)).astype(np.float32)
    out, src = _run("matmul", {}, [a, b])
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    assert "pk_f32x8" in src and "pk_parallel_for" in src


def test_global_pool_over_blocked_tensor_is_vectorized():
    x = np.random.default_rng(2).standard_normal((1, 4, 7, 7, 8)).astype(np.float32)
    out, src = _run("reduce_mean", {"axes": [2, 3], "keepdims": 1}, [x])
    np.testing.assert_allclose(out, x.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
    assert "8 lanes" in src


@pytest.mark.parametrize(
    "op,attrs,shape,chains",
    [
        ("reduce_mean", {"axes": [2, 3], "keepdims": 1}, (1, 24, 13, 13), 8),  # NCHW pool
        ("reduce_sum", {"axes": [2], "keepdims": 0}, (2, 12, 50), 6),  # rows
        ("reduce_max", {"axes": [1], "keepdims": 1}, (1, 20, 5, 24), 8),  # over channels
        ("reduce_sum_square", {"axes": [2, 3], "keepdims": 0}, (1, 7, 6, 6), 7),
    ],
)
def test_unblocked_reductions_interleave_their_sums(op, attrs, shape, chains):
    """Several outputs accumulate side by side (independent chains of adds), each still
    summed in its own order: the generic schedule's result, byte for byte."""
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    out, src = _run(op, attrs, [x])
    np.testing.assert_array_equal(out, _run(op, attrs, [x], generic=True)[0])
    ref = {"reduce_mean": np.mean, "reduce_sum": np.sum, "reduce_max": np.max}.get(op)
    want = (
        ref(x, axis=tuple(attrs["axes"]), keepdims=bool(attrs["keepdims"]))
        if ref
        else (np.sum(x * x, axis=tuple(attrs["axes"]), keepdims=bool(attrs["keepdims"])))
    )
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    # the reduce loops run just outside an unrolled loop over the chains
    loops = r"for \(int64_t r\w* = 0; r\w* < \d+; \+\+r\w*\) \{\s*"
    assert re.search(rf"({loops})+#pragma GCC unroll {chains}\s+for", src), src
    if op == "reduce_mean":  # a local buffer of sums, divided after
        assert f"float {op}[{chains}];" in src


def test_short_reductions_keep_one_chain():
    x = np.random.default_rng(6).standard_normal((1, 16, 3, 3)).astype(np.float32)
    out, src = _run("reduce_mean", {"axes": [2, 3], "keepdims": 1}, [x])
    generic, _ = _run("reduce_mean", {"axes": [2, 3], "keepdims": 1}, [x], generic=True)
    np.testing.assert_array_equal(out, generic)
    assert "float reduce_mean[1];" in src


@pytest.mark.parametrize(
    "shape,channels,form",
    [
        ((2, 3, 5, 16, 8), 24, "vector"),  # a block's channels x a vector of a row
        ((1, 2, 3, 2, 8, 8), 16, "vector"),  # two spatial dims before the columns
        ((1, 2, 4, 6, 8), 16, "vector"),  # rows of 6: vectors of the plane's pixels
        ((1, 2, 5, 11, 8), 16, "scalar"),  # 55 pixels: a pixel's channels side by side
        ((1, 3, 4, 8, 8), 20, "default"),  # 20 of 24 channels: the generic schedule
    ],
)
def test_out_of_blocks_reads_each_line_once(shape, channels, form):
    """Leaving a blocked layout: a block's channels unrolled inside the loop over its
    pixels (or the generic schedule where that does not fit), the same bytes either way."""
    from packager.graph.passes.layout_pack import from_blocked

    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    attrs = {"src": f"NCHW{shape[-1]}c", "dst": "NCHW", "channels": channels}
    out, src = _run("layout_transform", attrs, [x])
    np.testing.assert_array_equal(out, from_blocked(x)[:, :channels])
    np.testing.assert_array_equal(out, _run("layout_transform", attrs, [x], generic=True)[0])
    unrolled = r"#pragma GCC unroll 8\s+for \(int64_t \w+_i1_i = 0; \w+ < 8; \+\+\w+\) \{\s*"
    if form == "vector":
        assert re.search(unrolled + r"\{ /\* \w+: 8 lanes", src), src
    elif form == "scalar":
        store = r"(const [^;]*;\s*)?\w+\["
        assert re.search(unrolled + store, src) and "lanes" not in src, src
    else:
        assert "#pragma GCC unroll" not in src, src


@pytest.mark.parametrize("op", ["max_pool_nchwc", "avg_pool_nchwc"])
def test_blocked_pools(op):
    x = np.random.default_rng(3).standard_normal((1, 2, 9, 9, 8)).astype(np.float32)
    attrs = {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    out, _ = _run(op, attrs, [x])
    pad = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0)), constant_values=np.nan)
    wins = np.stack([pad[:, :, i : i + 9 : 2, j : j + 9 : 2] for i in range(3) for j in range(3)])
    want = np.nanmax(wins, 0) if op.startswith("max") else np.nanmean(wins, 0)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(3, 5), (2, 64, 32), (130, 130), (1, 8, 40, 40, 8)])
def test_default_schedule_elementwise(shape):
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    out, src = _run("relu", {}, [x])
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    if x.size >= 1 << 14:
        assert "pk_parallel_for" in src


def _pool_ref(x, op, kernel, strides, pads, ceil_mode=0, count_include_pad=0):
    """numpy max/avg pool over dims 2, 3 of a blocked (N, C/x, H, W, x) tensor."""
    (kh, kw), (sh, sw) = kernel, strides
    (pt, pl, pb, pr) = pads
    h, w = x.shape[2:4]
    rnd = np.ceil if ceil_mode else np.floor
    oh = int(rnd((h + pt + pb - kh) / sh)) + 1
    ow = int(rnd((w + pl + pr - kw) / sw)) + 1
    if ceil_mode and (oh - 1) * sh >= h + pt:
        oh -= 1
    if ceil_mode and (ow - 1) * sw >= w + pl:
        ow -= 1
    out = np.empty((*x.shape[:2], oh, ow, x.shape[4]), np.float32)
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * sh - pt, j * sw - pl
            win = x[:, :, max(h0, 0) : min(h0 + kh, h), max(w0, 0) : min(w0 + kw, w)]
            if op.startswith("max"):  # NaN is skipped (ONNX's reference; numpy's fmax)
                out[:, :, i, j] = np.nanmax(win, axis=(2, 3))
            elif count_include_pad:
                hi_h, hi_w = min(h0 + kh, h + pb), min(w0 + kw, w + pr)
                n = (hi_h - h0) * (hi_w - w0)
                out[:, :, i, j] = win.sum(axis=(2, 3)) / n
            else:
                out[:, :, i, j] = win.mean(axis=(2, 3))
    return out


@pytest.mark.parametrize("op", ["max_pool_nchwc", "avg_pool_nchwc"])
@pytest.mark.parametrize(
    "kernel,strides,pads,ceil,cip",
    [
        ([3, 3], [2, 2], [1, 1, 1, 1], 0, 0),
        ([3, 3], [2, 2], [1, 1, 1, 1], 0, 1),
        ([2, 2], [2, 2], [0, 0, 0, 0], 1, 0),
        ([3, 2], [2, 1], [1, 0, 2, 1], 1, 1),
        ([3, 3], [1, 1], [1, 1, 1, 1], 0, 0),
    ],
)
@pytest.mark.parametrize("knobs", [None, {"tile_ow": 1}, {"pad": "inline"}])
def test_blocked_pool_template(op, kernel, strides, pads, ceil, cip, knobs):
    x = np.random.default_rng(4).standard_normal((1, 2, 11, 13, 8)).astype(np.float32)
    x[0, 1, 4, 5, 3] = np.nan
    attrs = {"kernel": kernel, "strides": strides, "pads": pads, "ceil_mode": ceil}
    if op.startswith("avg"):
        attrs["count_include_pad"] = cip
    out, src = _run(op, attrs, [x], knobs=knobs)
    want = _pool_ref(x, op, kernel, strides, pads, ceil, cip)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    # the NaN reaches an average; a maximum skips it
    assert np.isnan(out).any() == op.startswith("avg")
    if knobs is None:
        assert "8 lanes" in src


def test_max_pool_template_vectorizes_the_window():
    x = np.random.default_rng(5).standard_normal((1, 2, 16, 16, 8)).astype(np.float32)
    attrs = {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    out, src = _run("max_pool_nchwc", attrs, [x])
    np.testing.assert_allclose(out, _pool_ref(x, "max", [3, 3], [2, 2], [1, 1, 1, 1]))
    # the taps update a tile of columns in vectors (a compare and a blend, no scalar
    # helper), reading the input itself: taps outside it are clamped onto its edge
    assert "#pragma GCC unroll 8" in src and "8 lanes" in src
    assert "pk_max_f32" not in src and "pool_pad" not in src
    assert re.search(r"const pk_i32x8 pk_t\d+ = \(pk_t\d+ > pk_t\d+\);", src)


@pytest.mark.parametrize("hw, cores, items", [(16, 2, 2 * 2), (14, 2, 2 * 7), (16, 1, None)])
def test_a_pool_gives_each_core_a_band_of_rows(hw, cores, items):
    """8 output rows on two cores: two bands of 4 rows, each over the 2 channel blocks;
    7 rows do not share out: each block's rows; one core: no parallel loop."""
    x = np.random.default_rng(6).standard_normal((1, 2, hw, hw, 8)).astype(np.float32)
    attrs = {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    target = CpuTarget(vector_bits=256, cores=cores)
    out, src = _run("max_pool_nchwc", attrs, [x], target=target)
    np.testing.assert_allclose(out, _pool_ref(x, "max", [3, 3], [2, 2], [1, 1, 1, 1]))
    got = [int(n) for n in re.findall(r"pk_parallel_for\([^;]*, (\d+)\);", src)]
    assert got == ([items] if items else [])
