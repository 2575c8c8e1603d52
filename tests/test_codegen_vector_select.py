"""Vectorized loops whose select has the same condition for every lane (a padding guard)
become vector code: an if/else whose taken branch alone loads, compared with numpy; a
select whose condition varies across the lanes keeps the scalar fallback."""

from __future__ import annotations

import re

import numpy as np

from packager import te

from .te.helpers import run

rng = np.random.default_rng(0)


def _pad_block(h, w, lanes, fill):
    """A (h+2, w+2, lanes) copy of a (h, w, lanes) input with a ``fill`` border."""
    x = te.placeholder((h, w, lanes), name="x")

    def f(i, j, c):
        inside = te.all_of(i >= 1, i < h + 1, j >= 1, j < w + 1)
        return te.select(inside, x[i - 1, j - 1, c], te.const(fill, "float32"))

    p = te.compute((h + 2, w + 2, lanes), f, name="p")
    s = te.create_schedule(p)
    s[p].vectorize(s[p].op.axis[2])
    return s, x, p


def _branch_lines(src: str) -> list[str]:
    """The lines of the first ``if (...) { ... } else {`` block."""
    lines = src.splitlines()
    start = next(k for k, line in enumerate(lines) if line.strip().startswith("if ("))
    end = next(k for k in range(start, len(lines)) if lines[k].strip() == "} else {")
    return lines[start : end + 1]


def test_lane_invariant_select_is_a_vector_branch():
    s, x, p = _pad_block(5, 6, 8, -3.0)
    a = rng.standard_normal((5, 6, 8), "float32")
    (got,), src = run(s, [x, p], "k_pad", [a])
    want = np.pad(a, ((1, 1), (1, 1), (0, 0)), constant_values=-3.0)
    np.testing.assert_array_equal(got, want)
    assert "/* p_i2: 8 lanes */" in src
    assert "ivdep" not in src  # no scalar fallback loop
    # the input's vector load is made inside the taken branch only
    branch = _branch_lines(src)
    assert any(re.search(r"__builtin_memcpy\(&pk_t\d+, &x\[", line) for line in branch)
    assert sum("&x[" in line for line in src.splitlines()) == 1


def test_select_inside_arithmetic_with_shared_loads():
    """A value loaded in both branches and used outside the select: temps made in one
    branch are not used in the other or after it."""
    h, w, lanes = 4, 5, 4
    x = te.placeholder((h, w, lanes), name="x")
    y = te.placeholder((h, w, lanes), name="y")

    def f(i, j, c):
        inside = te.all_of(i >= 1, j >= 1)
        tap = te.select(inside, x[i - 1, j - 1, c] * y[i, j, c], y[i, j, c])
        return tap + y[i, j, c] * te.const(2.0, "float32")

    o = te.compute((h, w, lanes), f, name="o")
    s = te.create_schedule(o)
    s[o].vectorize(s[o].op.axis[2])
    a = rng.standard_normal((h, w, lanes), "float32")
    b = rng.standard_normal((h, w, lanes), "float32")
    (got,), src = run(s, [x, y, o], "k_sel", [a, b])
    shifted = np.zeros_like(a)
    shifted[1:, 1:] = a[:-1, :-1]
    inside = np.zeros((h, w, 1), bool)
    inside[1:, 1:] = True
    want = np.where(inside, shifted * b, b) + b * 2
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert "/* o_i2: 4 lanes */" in src and "ivdep" not in src


def test_lane_varying_select_keeps_the_scalar_loop():
    x = te.placeholder((3, 8), name="x")
    o = te.compute(
        (3, 8),
        lambda i, c: te.select(c < 4, x[i, c], te.const(0.0, "float32")),
        name="o",
    )
    s = te.create_schedule(o)
    s[o].vectorize(s[o].op.axis[1])
    a = rng.standard_normal((3, 8), "float32")
    (got,), src = run(s, [x, o], "k_lv", [a])
    np.testing.assert_array_equal(got, np.where(np.arange(8) < 4, a, 0))
    assert "lanes */" not in src and "#pragma GCC ivdep" in src
