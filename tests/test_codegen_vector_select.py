"""Vectorized loops whose select has the same condition for every lane (a padding guard)
become vector code: an if/else whose taken branch alone loads, compared with numpy. A
select deciding each lane by comparing data of its own type, and binary min/max, become
a compare mask and a bitwise blend, with the scalar helpers' NaN semantics on floats; a
select whose condition varies across the lanes otherwise (an index comparison) keeps the
scalar fallback."""

from __future__ import annotations

import operator
import re

import numpy as np
import pytest

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


# --- per-lane selects and min/max on float data: a compare mask and a blend -------------

_SPECIALS = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0, 2.5, -3.25, 1e-30]
_MASK = {"float32": "i32", "float64": "i64"}
_BITS = {"float32": np.uint32, "float64": np.uint64}


def _pairs(dtype, lanes):
    """(a, b) of shape (rows, lanes): every ordered pair of the special values (NaN of
    both signs, +-inf, +-0.0, ordinary numbers) side by side, then random values."""
    n = len(_SPECIALS)
    a = np.repeat(np.array(_SPECIALS, dtype), n)
    b = np.tile(np.array(_SPECIALS, dtype), n)
    extra = -(a.size) % lanes + 3 * lanes
    a = np.concatenate([a, rng.standard_normal(extra).astype(dtype)])
    b = np.concatenate([b, rng.standard_normal(extra).astype(dtype)])
    return a.reshape(-1, lanes), b.reshape(-1, lanes)


def _assert_same_bits(got, want):
    """Equal bit for bit: the sign of a zero and which NaN came through both count (a
    select, min or max only ever picks one of its operands)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    bits = _BITS[str(got.dtype)]
    bad = np.flatnonzero(got.view(bits) != want.view(bits))
    assert bad.size == 0, (
        f"{bad.size} lanes differ, first at {bad[0]}: {got.flat[bad[0]]} vs {want.flat[bad[0]]}"
    )


def _kernel(f, dtype, lanes, rows, n_in, name, vector=True):
    """``o[i, c] = f(loads..., i, c)`` over (rows, lanes) inputs; the lane loop vectorized
    unless ``vector`` is False (then the scalar helpers do the work)."""
    ins = [te.placeholder((rows, lanes), dtype, f"x{k}") for k in range(n_in)]
    o = te.compute((rows, lanes), lambda i, c: f(*[t[i, c] for t in ins], i, c), name="o")
    s = te.create_schedule(o)
    if vector:
        s[o].vectorize(s[o].op.axis[1])
    return s, [*ins, o], name


def _run_both(f, dtype, lanes, inputs, name):
    """Outputs of the vectorized and the scalar kernel, and the vectorized one's C."""
    rows = inputs[0].shape[0]
    s, args, _ = _kernel(f, dtype, lanes, rows, len(inputs), name)
    (got,), src = run(s, args, name, inputs)
    s, args, _ = _kernel(f, dtype, lanes, rows, len(inputs), name + "_s", vector=False)
    (scalar,), _ = run(s, args, name + "_s", inputs)
    return got, scalar, src


def _assert_blended(src, dtype, lanes, masks=1):
    """The lane loop is vector code: ``masks`` compare masks and bitwise blends, no scalar
    fallback loop and no scalar min/max helper call."""
    mask = f"pk_{_MASK[dtype]}x{lanes}"
    assert f"/* o_i1: {lanes} lanes */" in src
    assert "#pragma GCC ivdep" not in src
    assert len(re.findall(rf"const {mask} pk_t\d+ = \(", src)) == masks
    assert len(re.findall(rf"\) & pk_t\d+\) \| \(\(\({mask}\)", src)) == masks
    assert len(re.findall(r"\) & ~pk_t\d+\)", src)) == masks
    assert "pk_max_" not in src and "pk_min_" not in src


def _c(v, dtype):
    return te.const(v, dtype)


@pytest.mark.parametrize("dtype,lanes", [("float32", 8), ("float64", 4)])
def test_relu_select_is_a_blend(dtype, lanes):
    x, _ = _pairs(dtype, lanes)
    got, scalar, src = _run_both(
        lambda v, i, c: te.select(v < _c(0.0, dtype), _c(0.0, dtype), v),
        dtype,
        lanes,
        [x],
        "k_relu",
    )
    want = np.where(x < 0, np.zeros_like(x), x)  # NaN and -0.0 are not < 0: kept
    _assert_same_bits(got, want)
    _assert_same_bits(scalar, want)
    assert np.isnan(got).sum() == np.isnan(x).sum() > 0
    assert np.signbit(got[x == 0]).any()  # the -0.0 inputs stay -0.0
    _assert_blended(src, dtype, lanes)


@pytest.mark.parametrize("dtype,lanes", [("float32", 8), ("float64", 4)])
def test_clip_as_two_selects(dtype, lanes):
    lo, hi = -1.0, 2.0
    x, _ = _pairs(dtype, lanes)

    def clip(v, i, c):
        upper = te.select(v > _c(hi, dtype), _c(hi, dtype), v)
        return te.select(v < _c(lo, dtype), _c(lo, dtype), upper)

    got, scalar, src = _run_both(clip, dtype, lanes, [x], "k_clip")
    t = np.dtype(dtype).type
    want = np.where(x < lo, t(lo), np.where(x > hi, t(hi), x))
    _assert_same_bits(got, want)
    _assert_same_bits(scalar, want)
    assert got[x == np.inf].tolist() == [hi] * int((x == np.inf).sum())
    assert got[x == -np.inf].tolist() == [lo] * int((x == -np.inf).sum())
    assert np.isnan(got).sum() == np.isnan(x).sum() > 0
    _assert_blended(src, dtype, lanes, masks=2)


@pytest.mark.parametrize("op", ["<", "<=", ">", ">=", "==", "!="])
def test_where_between_two_loaded_tensors(op):
    """select(a OP b, a - b, b * 2): every comparison, NaN operands on both sides (a NaN
    compares unequal to everything), both sides computed and blended."""
    a, b = _pairs("float32", 8)
    cmp = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal}
    cmp.update({"==": np.equal, "!=": np.not_equal})
    te_cmp = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
    te_cmp.update({"==": te.eq, "!=": te.ne})

    def f(u, v, i, c):
        return te.select(te_cmp[op](u, v), u - v, v * _c(2.0, "float32"))

    with np.errstate(invalid="ignore"):
        got, scalar, src = _run_both(f, "float32", 8, [a, b], "k_where")
        want = np.where(cmp[op](a, b), a - b, b * np.float32(2))
    np.testing.assert_array_equal(got, want)  # NaN where numpy has NaN
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(scalar, want)
    _assert_blended(src, "float32", 8)


def test_where_on_a_third_tensor():
    """select(cond > 0, x, y) with three loaded tensors: the condition's data is neither
    side's."""
    cond, x = _pairs("float32", 8)
    y = rng.standard_normal(x.shape).astype(np.float32)
    got, scalar, src = _run_both(
        lambda k, u, v, i, c: te.select(k > _c(0.0, "float32"), u, v),
        "float32",
        8,
        [cond, x, y],
        "k_where3",
    )
    want = np.where(cond > 0, x, y)
    _assert_same_bits(got, want)
    _assert_same_bits(scalar, want)
    _assert_blended(src, "float32", 8)


def _minmax_ref(op, a, b):
    """pk_max(a, b) = (a > b || a != a) ? a : b; pk_min with <: NaN in either operand
    gives NaN (a NaN ``a`` itself, else ``b``); equal operands (+0.0 and -0.0) give b."""
    pick = (a > b) if op == "max" else (a < b)
    return np.where(pick | np.isnan(a), a, b)


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype,lanes", [("float32", 8), ("float32", 16), ("float64", 4)])
def test_min_max_of_two_tensors(op, dtype, lanes):
    a, b = _pairs(dtype, lanes)
    fn = te.max_ if op == "max" else te.min_
    got, scalar, src = _run_both(lambda u, v, i, c: fn(u, v), dtype, lanes, [a, b], f"k_{op}")
    want = _minmax_ref(op, a, b)
    _assert_same_bits(got, want)
    _assert_same_bits(scalar, want)  # the vector code keeps the scalar helper's answer
    np.testing.assert_array_equal(np.isnan(got), np.isnan(a) | np.isnan(b))
    ordinary = ~(np.isnan(a) | np.isnan(b))
    np.testing.assert_array_equal(got[ordinary], getattr(np, f"{op}imum")(a, b)[ordinary])
    _assert_blended(src, dtype, lanes)


@pytest.mark.parametrize("dtype,lanes", [("float32", 8), ("float64", 8)])
def test_min_max_with_a_constant(dtype, lanes):
    """min(max(x, -1), 2): the constants are broadcast; NaN comes through both."""
    x, _ = _pairs(dtype, lanes)
    got, scalar, src = _run_both(
        lambda v, i, c: te.min_(te.max_(v, _c(-1.0, dtype)), _c(2.0, dtype)),
        dtype,
        lanes,
        [x],
        "k_clamp",
    )
    t = np.dtype(dtype).type
    want = _minmax_ref("min", _minmax_ref("max", x, t(-1.0)), t(2.0))
    _assert_same_bits(got, want)
    _assert_same_bits(scalar, want)
    assert np.isnan(got).sum() == np.isnan(x).sum() > 0
    _assert_blended(src, dtype, lanes, masks=2)


INTS = [
    ("uint8", 8),
    ("int8", 4),
    ("uint16", 4),
    ("int32", 2),
    ("uint8", 16),
    ("int8", 16),
    ("uint16", 16),
    ("int32", 8),
]


@pytest.mark.parametrize("dtype,lanes", INTS)
def test_integer_max_min_and_select_are_blends(dtype, lanes):
    """Integer data (an int8 max pool's running max, a clamp): max, min and a per-lane
    select of byte or 16-bit lanes, or in a vector narrower than 16 bytes, become compare
    masks and blends, unsigned types compared as unsigned, the type's extremes included;
    wider 32-bit ones stay the scalar loop that GCC vectorizes with the ISA's own max and
    min."""
    info = np.iinfo(dtype)
    edge = [info.min, info.min + 1, -1 if info.min else 1, 0, 1, info.max - 1, info.max]
    a = np.repeat(np.array(edge, dtype), len(edge))
    b = np.tile(np.array(edge, dtype), len(edge))
    extra = -(a.size) % lanes + 3 * lanes
    a = np.concatenate([a, rng.integers(info.min, info.max, extra, dtype, True)])
    b = np.concatenate([b, rng.integers(info.min, info.max, extra, dtype, True)])
    a, b = a.reshape(-1, lanes), b.reshape(-1, lanes)
    cases = {
        "max": (lambda u, v, i, c: te.max_(u, v), np.maximum(a, b), 1),
        "min": (lambda u, v, i, c: te.min_(u, v), np.minimum(a, b), 1),
        "sel": (lambda u, v, i, c: te.select(u < v, v, u), np.where(a < b, b, a), 1),
    }
    for name, (f, want, masks) in cases.items():
        got, scalar, src = _run_both(f, dtype, lanes, [a, b], f"k_i{name}")
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(scalar, want)
        size = np.dtype(dtype).itemsize
        if size > 2 and lanes * size >= 16:
            assert "lanes */" not in src and "#pragma GCC ivdep" in src
            continue
        assert f"/* o_i1: {lanes} lanes */" in src and "#pragma GCC ivdep" not in src
        assert len(re.findall(r"\) & ~pk_t\d+\)", src)) == masks
        assert "pk_max_" not in src and "pk_min_" not in src
        assert "!=" not in src  # no NaN test on integers


def _index_select(u, v, i, c):
    return te.select(c < 4, u, v)


def _index_and_data_select(u, v, i, c):
    return te.select(te.all_of(c >= 2, u > v), u, v)


def _other_dtype_select(u, v, i, c):
    """A float32 select decided by comparing float64 data."""
    d = "float64"
    return te.select(te.cast(d, u) < te.cast(d, v), u, v)


@pytest.mark.parametrize(
    "f,ref",
    [
        (_index_select, lambda a, b: np.where(np.arange(8) < 4, a, b)),
        (_index_and_data_select, lambda a, b: np.where((np.arange(8) >= 2) & (a > b), a, b)),
        (_other_dtype_select, lambda a, b: np.where(a < b, a, b)),
    ],
    ids=["index", "index_and_data", "float64_data"],
)
def test_other_lane_varying_selects_keep_the_scalar_loop(f, ref):
    """Per-lane selects that are not a compare of the select's own float data (an INDEX
    comparison, a conjunction, data of another type) stay scalar, and stay correct."""
    a, b = _pairs("float32", 8)
    s, args, name = _kernel(f, "float32", 8, a.shape[0], 2, "k_scalar_sel")
    (got,), src = run(s, args, name, [a, b])
    _assert_same_bits(got, ref(a, b))
    assert "lanes */" not in src and "#pragma GCC ivdep" in src
    assert "pk_i32x8" not in src


def test_blend_inside_a_padding_guard():
    """A per-lane select (leaky relu of a shifted row) inside the taken branch of a
    lane-invariant guard, and a guarded value used by a blend and after it."""
    h, lanes = 6, 8
    x = te.placeholder((h, lanes), name="x")
    y = te.placeholder((h, lanes), name="y")
    zero, half = te.const(0.0, "float32"), te.const(0.5, "float32")

    def f(i, c):
        v = x[i - 1, c]
        leaky = te.select(v < zero, v * half, v)
        shifted = te.select(i >= 1, y[i - 1, c], zero)
        return te.select(i >= 1, leaky, y[i, c]) + te.select(y[i, c] > zero, shifted, zero)

    o = te.compute((h, lanes), f, name="o")
    s = te.create_schedule(o)
    s[o].vectorize(s[o].op.axis[1])
    a, b = _pairs("float32", lanes)
    a, b = a[:h], b[:h]
    (got,), src = run(s, [x, y, o], "k_guard_blend", [a, b])
    row = np.arange(h)[:, None] >= 1
    sa, sb = np.roll(a, 1, 0), np.roll(b, 1, 0)
    with np.errstate(invalid="ignore"):
        want = np.where(row, np.where(sa < 0, sa * np.float32(0.5), sa), b)
        want = want + np.where(b > 0, np.where(row, sb, np.float32(0)), np.float32(0))
    np.testing.assert_array_equal(got, want)
    assert np.isnan(want).any()
    assert "/* o_i1: 8 lanes */" in src and "#pragma GCC ivdep" not in src
    assert len(re.findall(r"const pk_i32x8 pk_t\d+ = \(", src)) == 2
    assert len(re.findall(r"^\s*if \(", src, re.M)) == 2  # both guards stay branches
