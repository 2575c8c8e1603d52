"""End to end: schedule -> lower -> C -> compile -> run, compared with numpy."""

import re
import shutil
import subprocess

import numpy as np
import pytest

from packager import te
from packager.codegen import codegen_c
from packager.codegen.build import INCLUDE, SERIAL_PARALLEL_FOR

from .helpers import run

rng = np.random.default_rng(0)


def _matmul(M, N, K):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], k), name="C")
    return A, B, C


def test_matmul_split_reorder_vectorize_parallel():
    M, N, K = 37, 48, 19
    A, B, C = _matmul(M, N, K)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, ii = s[C].split(i, 8)
    jo, ji = s[C].split(j, 8)
    s[C].reorder(io, jo, ii, k, ji)
    s[C].vectorize(ji)
    s[C].parallel(io)
    a, b = rng.standard_normal((M, K), "float32"), rng.standard_normal((K, N), "float32")
    (c,), src = run(s, [A, B, C], "k_mm", [a, b])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert "vector_size(32)" in src and "pk_f32x8" in src
    assert "pk_parallel_for(k_mm_par0" in src


def test_padded_conv_compute_at():
    N, C, H, W, F, K, P = 1, 3, 11, 9, 4, 3, 1
    X = te.placeholder((N, C, H, W), name="X")
    Wt = te.placeholder((F, C, K, K), name="Wt")

    def pad_body(n, c, y, x):
        inside = te.all_of(y >= P, y < H + P, x >= P, x < W + P)
        return te.select(inside, X[n, c, y - P, x - P], 0.0)

    pad = te.compute((N, C, H + 2 * P, W + 2 * P), pad_body, name="pad")
    rc, ry, rx = te.reduce_axis(C, "rc"), te.reduce_axis(K, "ry"), te.reduce_axis(K, "rx")
    out = te.compute(
        (N, F, H, W),
        lambda n, f, y, x: te.sum(pad[n, rc, y + ry, x + rx] * Wt[f, rc, ry, rx], (rc, ry, rx)),
        name="conv",
    )
    s = te.create_schedule(out)
    n, f, y, x = s[out].op.axis
    s[pad].compute_at(s[out], y)
    xa = rng.standard_normal((N, C, H, W), "float32")
    wa = rng.standard_normal((F, C, K, K), "float32")
    (o,), src = run(s, [X, Wt, out], "k_conv", [xa, wa])
    xp = np.pad(xa, ((0, 0), (0, 0), (P, P), (P, P)))
    ref = sum(
        np.einsum("nchw,fc->nfhw", xp[:, :, i : i + H, j : j + W], wa[:, :, i, j])
        for i in range(K)
        for j in range(K)
    )
    np.testing.assert_allclose(o, ref, rtol=1e-4, atol=1e-4)
    # only the rows one output row needs: C x K x (W + 2P)
    assert f"float pad[{C * K * (W + 2 * P)}];" in src


def test_a_stage_computed_at_an_outer_leaf_feeds_one_computed_deeper():
    """The padded plane of one channel at the output's channel loop, read by the
    accumulator tile computed at the column loop inside it: the plane covers the tile's
    reads over every row and column tile, and the tile reads it in place."""
    C, H, W, K, T = 3, 9, 10, 3, 5
    X = te.placeholder((C, H, W), name="X")
    Wt = te.placeholder((C, K, K), name="Wt")
    inside = lambda y, x: te.all_of(y >= 1, y < H + 1, x >= 1, x < W + 1)  # noqa: E731
    pad = te.compute(
        (C, H + 2, W + 2),
        lambda c, y, x: te.select(inside(y, x), X[c, y - 1, x - 1], 0.0),
        name="pad",
    )
    ry, rx = te.reduce_axis(K, "ry"), te.reduce_axis(K, "rx")
    acc = te.compute(
        (C, H, W),
        lambda c, y, x: te.sum(pad[c, y + ry, x + rx] * Wt[c, ry, rx], (ry, rx)),
        name="acc",
    )
    out = te.compute((C, H, W), lambda c, y, x: te.max_(acc[c, y, x], 0.0), name="out")
    s = te.create_schedule(out)
    c, y, x = s[out].op.axis
    xo, _ = s[out].split(x, T)
    s[pad].compute_at(s[out], c)
    s[acc].compute_at(s[out], xo)
    xa = rng.standard_normal((C, H, W), "float32")
    wa = rng.standard_normal((C, K, K), "float32")
    (o,), src = run(s, [X, Wt, out], "k_dw", [xa, wa])
    xp = np.pad(xa, ((0, 0), (1, 1), (1, 1)))
    ref = sum(
        xp[:, i : i + H, j : j + W] * wa[:, i : i + 1, j : j + 1]
        for i in range(K)
        for j in range(K)
    )
    np.testing.assert_allclose(o, np.maximum(ref, 0), rtol=1e-5, atol=1e-5)
    assert f"float pad[{(H + 2) * (W + 2)}];" in src and f"float acc[{T}];" in src
    # the plane is made once per channel, before the channel's rows
    assert src.index("float pad[") < src.index("float acc[")


def test_inlined_elementwise_chain():
    A = te.placeholder((6, 7), name="A")
    B = te.compute(A.shape, lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute(A.shape, lambda i, j: te.call("tanh", B[i, j]) + B[i, j], name="Cc")
    D = te.compute(A.shape, lambda i, j: te.max_(C[i, j], 0.5), name="D")
    s = te.create_schedule(D)
    s[B].compute_inline()
    s[C].compute_inline()
    a = rng.standard_normal((6, 7), "float32")
    (d,), src = run(s, [A, D], "k_chain", [a])
    np.testing.assert_allclose(d, np.maximum(np.tanh(a * 2) + a * 2, 0.5), rtol=1e-6)
    assert src.count("for (") == 2 and "B[" not in src and "Cc[" not in src


def test_non_dividing_split_fuse_unroll():
    A = te.placeholder((7, 10), name="A")
    B = te.compute(A.shape, lambda i, j: A[i, j] + 3.0, name="B")
    s = te.create_schedule(B)
    i, j = s[B].op.axis
    f = s[B].fuse(i, j)
    fo, fi = s[B].split(f, 8)
    s[B].unroll(fi)
    a = rng.standard_normal((7, 10), "float32")
    (b,), src = run(s, [A, B], "k_fuse", [a])
    np.testing.assert_array_equal(b, a + 3)
    assert "#pragma GCC unroll 8" in src


def test_keep_rolled_reduction_loop():
    """A reduction loop kept rolled carries ``#pragma GCC unroll 1``; a rolled loop of
    extent 1 disappears like a serial one; the sums are unchanged."""
    A = te.placeholder((6, 9), name="A")
    k = te.reduce_axis(9, "k")
    one = te.reduce_axis(1, "one")
    B = te.compute((6,), lambda i: te.sum(A[i, k + one], [k, one]), name="B")
    s = te.create_schedule(B)
    s[B].keep_rolled(k)
    s[B].keep_rolled(one)
    a = rng.standard_normal((6, 9), "float32")
    (b,), src = run(s, [A, B], "k_rolled", [a])
    np.testing.assert_allclose(b, a.sum(1), rtol=1e-5)
    assert src.count("#pragma GCC unroll 1\n") == 1
    assert re.search(r"#pragma GCC unroll 1\n\s*for \(int64_t k = 0; k < 9;", src)


def test_tile_and_nparts():
    A = te.placeholder((13, 11), name="A")
    B = te.compute(A.shape, lambda i, j: A[i, j] * A[i, 10 - j], name="B")
    s = te.create_schedule(B)
    i, j = s[B].op.axis
    xo, yo, xi, yi = s[B].tile(i, j, 4, 3)
    s[B].split(xo, nparts=2)
    a = rng.standard_normal((13, 11), "float32")
    (b,), _ = run(s, [A, B], "k_tile", [a])
    np.testing.assert_array_equal(b, a * a[:, ::-1])


def test_multi_output_split_like():
    A = te.placeholder((4, 10), name="A")
    O1 = te.compute((4, 3), lambda i, j: A[i, j], name="O1")
    O2 = te.compute((4, 7), lambda i, j: A[i, j + 3], name="O2")
    a = rng.standard_normal((4, 10), "float32")
    (o1, o2), _ = run(te.default_schedule([O1, O2]), [A, O1, O2], "k_split", [a])
    np.testing.assert_array_equal(o1, a[:, :3])
    np.testing.assert_array_equal(o2, a[:, 3:])


@pytest.mark.parametrize("comb,ref", [("max", np.max), ("min", np.min), ("prod", np.prod)])
def test_reductions_with_identity(comb, ref):
    A = te.placeholder((5, 6), name="A")
    k = te.reduce_axis(6, "k")
    red = {"max": te.max_reduce, "min": te.min_reduce, "prod": te.prod}[comb]
    R = te.compute((5,), lambda i: red(A[i, k], k), name="R")
    E = te.compute((5,), lambda i: red(A[i, k], k, where=k < 0), name="E")  # empty
    a = rng.standard_normal((5, 6), "float32")
    (r, e), _ = run(te.default_schedule([R, E]), [A, R, E], f"k_{comb}", [a])
    np.testing.assert_allclose(r, ref(a, axis=1), rtol=1e-6)
    ident = {"max": -np.inf, "min": np.inf, "prod": 1.0}[comb]
    np.testing.assert_array_equal(e, np.full(5, ident, "float32"))


def test_max_propagates_nan():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: te.max_(A[i], 0.0), name="B")
    a = np.array([np.nan, -1, 2, np.nan], "float32")
    (b,), _ = run(te.default_schedule(B), [A, B], "k_nan", [a])
    assert np.isnan(b[0]) and np.isnan(b[3]) and b[1] == 0 and b[2] == 2


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8"])
def test_int_dtypes_sum_and_wrap(dtype):
    A = te.placeholder((3, 4), dtype, name="A")
    k = te.reduce_axis(4, "k")
    S = te.compute((3,), lambda i: te.sum(A[i, k], k), name="S")
    M = te.compute((3, 4), lambda i, j: A[i, j] * A[i, j] + A[i, 0], name="M")
    a = rng.integers(0, 100, (3, 4)).astype(dtype)
    (s_, m), _ = run(te.default_schedule([S, M]), [A, S, M], f"k_{dtype}", [a])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(s_, a.sum(axis=1, dtype=dtype))
        np.testing.assert_array_equal(m, a * a + a[:, :1])


def test_floordiv_floormod_negative():
    A = te.placeholder((8,), "int32", name="A")
    B = te.placeholder((8,), "int32", name="B")
    Q = te.compute((8,), lambda i: A[i] // B[i], name="Q")
    R = te.compute((8,), lambda i: A[i] % B[i], name="R")
    T = te.compute((8,), lambda i: A[i] / B[i], name="T")  # C truncation
    a = np.array([7, -7, 7, -7, 0, -1, 6, -6], "int32")
    b = np.array([2, 2, -2, -2, 3, 4, -4, 4], "int32")
    (q, r, t), _ = run(te.default_schedule([Q, R, T]), [A, B, Q, R, T], "k_div", [a, b])
    np.testing.assert_array_equal(q, a // b)
    np.testing.assert_array_equal(r, a % b)
    np.testing.assert_array_equal(t, np.trunc(a / b).astype("int32"))


def test_index_floordiv_negative_and_casts():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: te.cast("float32", (i - 5) // 3 * 10 + (i - 5) % 3), name="B")
    Cb = te.compute((10,), lambda i: te.cast("bool", A[i]), name="Cb")
    Ci = te.compute((10,), lambda i: te.cast("int32", A[i]), name="Ci")
    a = np.array([0.5, -0.5, 0, 1.7, -1.7, 2, 0, 3.2, -9.9, 1], "float32")
    (b, cb, ci), _ = run(te.default_schedule([B, Cb, Ci]), [A, B, Cb, Ci], "k_idx", [a])
    i = np.arange(10)
    np.testing.assert_array_equal(b, ((i - 5) // 3 * 10 + (i - 5) % 3).astype("float32"))
    np.testing.assert_array_equal(cb, a != 0)
    np.testing.assert_array_equal(ci, a.astype("int32"))


def test_math_functions_float64_and_round():
    A = te.placeholder((6,), "float64", name="A")
    B = te.compute((6,), lambda i: te.call("round", A[i]) + te.call("exp", A[i] * 0.0), name="B")
    a = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4])
    (b,), src = run(te.default_schedule(B), [A, B], "k_f64", [a])
    np.testing.assert_array_equal(b, np.round(a) + 1)
    assert "nearbyint(" in src and "exp(" in src


def _guarded_gather():
    """out[i] = in[i - 2] where valid else -1: the select must guard the load."""
    A = te.placeholder((16,), name="A")
    B = te.compute((20,), lambda i: te.select(te.all_of(i >= 2, i < 18), A[i - 2], -1.0), name="B")
    return A, B


def test_select_guarded_load():
    A, B = _guarded_gather()
    a = rng.standard_normal(16, "float32")
    (b,), _ = run(te.default_schedule(B), [A, B], "k_guard", [a])
    np.testing.assert_array_equal(b, np.concatenate([[-1, -1], a, [-1, -1]]).astype("float32"))


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_select_guarded_load_under_asan(tmp_path):
    A, B = _guarded_gather()
    src = codegen_c(te.lower(te.default_schedule(B), [A, B], "k_guard"))
    main = r"""
#include "pk_kernel.h"
#include <stdio.h>
int32_t k_guard(void* const* args);
int main(void) {
    float* a = malloc(16 * sizeof(float));
    float* b = malloc(20 * sizeof(float));
    for (int i = 0; i < 16; ++i) a[i] = (float)i;
    void* args[2] = {a, b};
    int32_t rc = k_guard(args);
    int ok = rc == 0 && b[0] == -1.0f && b[2] == 0.0f && b[17] == 15.0f && b[19] == -1.0f;
    free(a); free(b);
    return ok ? 0 : 3;
}
"""
    (tmp_path / "k.c").write_text(src)
    (tmp_path / "main.c").write_text(main)
    exe = tmp_path / "t"
    cmd = [
        "cc",
        "-O1",
        "-g",
        "-std=c99",
        "-fsanitize=address",
        "-fno-omit-frame-pointer",
        "-I",
        str(INCLUDE),
        str(tmp_path / "k.c"),
        str(tmp_path / "main.c"),
        str(SERIAL_PARALLEL_FOR),
        "-o",
        str(exe),
        "-lm",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0 and "asan" in res.stderr.lower():
        pytest.skip("AddressSanitizer not available")
    assert res.returncode == 0, res.stderr
    res = subprocess.run([str(exe)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_heap_temporary_and_parallel_with_local_buffer():
    # a big root intermediate (heap) and a compute_at buffer inside a parallel loop
    A = te.placeholder((64, 64), name="A")
    k = te.reduce_axis(64, "k")
    S = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * A[k, j], k), name="S")
    T = te.compute((64, 64), lambda i, j: S[i, j] + S[j, i], name="T")
    E = te.compute((64, 64), lambda i, j: T[i, j] * 2.0, name="E")
    s = te.create_schedule(E)
    i, j = s[E].op.axis
    s[E].parallel(i)
    s[T].compute_at(s[E], i)
    a = rng.standard_normal((64, 64), "float32")
    (e,), src = run(s, [A, E], "k_heap", [a])
    sq = a @ a
    np.testing.assert_allclose(e, (sq + sq.T) * 2, rtol=1e-4, atol=1e-4)
    assert "pk_scratch_alloc(" in src and "float T[64];" in src


def test_vectorize_fallback_is_correct():
    A = te.placeholder((4, 8), name="A")
    B = te.compute((4, 8), lambda i, j: te.call("tanh", A[i, 7 - j]), name="B")
    s = te.create_schedule(B)
    s[B].vectorize(s[B].op.axis[1])
    a = rng.standard_normal((4, 8), "float32")
    (b,), src = run(s, [A, B], "k_vfb", [a])
    np.testing.assert_allclose(b, np.tanh(a[:, ::-1]), rtol=1e-6)
    assert "#pragma GCC ivdep" in src


def test_vectorized_reduction_axis_is_not_ivdep():
    A = te.placeholder((4, 8), name="A")
    k = te.reduce_axis(8, "k")
    R = te.compute((4,), lambda i: te.sum(A[i, k], k), name="R")
    s = te.create_schedule(R)
    s[R].vectorize(k)
    # Own seed: the module's shared generator gives order-dependent data under xdist, and
    # a float32 sum near zero then misses a relative tolerance.
    a = np.random.default_rng(7).standard_normal((4, 8), "float32")
    (r,), src = run(s, [A, R], "k_vr", [a])
    np.testing.assert_allclose(r, a.sum(1, dtype=np.float64), rtol=1e-5, atol=1e-6)
    assert "ivdep" not in src


def test_a_producer_also_read_by_a_later_stage_computed_at_the_same_leaf():
    """A row's max is read by the row's sum of exp and by its outputs: both statistics
    are computed inside the row's loop, the max first."""
    X = te.placeholder((4, 16), name="X")
    k1, k2 = te.reduce_axis(16, "k1"), te.reduce_axis(16, "k2")
    m = te.compute((4,), lambda i: te.max_reduce(X[i, k1], k1), name="m")
    s = te.compute((4,), lambda i: te.sum(te.call("exp", X[i, k2] - m[i]), k2), name="s")
    out = te.compute((4, 16), lambda i, j: te.call("exp", X[i, j] - m[i]) / s[i], name="out")
    sch = te.create_schedule([out])
    row = sch[out].op.axis[0]
    sch[m].compute_at(sch[out], row)
    sch[s].compute_at(sch[out], row)
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    (got,), src = run(sch, [X, out], "k_rows", [x])
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    assert "float m[1];" in src and "float s[1];" in src  # one row's statistics at a time
