from packager.te import Var, simplify
from packager.te.expr import Binary, Cast, Const


def _ranges(**kw):
    vs = {k: Var(k) for k in kw}
    return vs, {vs[k]: v for k, v in kw.items()}


def text(e):
    if isinstance(e, Const):
        return str(e.value)
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Binary):
        return f"({text(e.a)} {e.op} {text(e.b)})"
    return repr(e)


def test_flat_index_of_split_is_linear():
    v, r = _ranges(io=(0, 3), ii=(0, 3), j=(0, 15))
    e = simplify((v["io"] * 4 + v["ii"]) * 16 + v["j"] + 0, r)
    assert text(e) == "(((io * 64) + (ii * 16)) + j)"


def test_identities_and_constants():
    x = Var("x")
    assert simplify(x * 1 + 0) is x
    assert simplify(Const(3, "int64") * 4 + 2).value == 14
    assert simplify(x - x).value == 0
    assert simplify(x * 2 + x * 3 - x * 5).value == 0


def test_floordiv_floormod_by_bounds():
    v, r = _ranges(a=(0, 9), b=(0, 15))
    a, b = v["a"], v["b"]
    assert simplify((a * 16 + b) // 16, r) is a
    assert simplify((a * 16 + b) % 16, r) is b
    assert text(simplify((a * 16 + b) // 4, r)) == "((a * 4) + (b truncdiv 4))"
    assert simplify(b // 16, r).value == 0
    assert text(simplify((a * 8 + 9) // 8, r)) == "(a + 1)"


def test_floordiv_unknown_sign_stays_floor():
    x = Var("x")
    e = simplify((x * 4 + 1) // 4)
    assert text(e) == "x"  # (4x + 1) // 4 == x for every integer x
    e = simplify(x // 4)
    assert e.op == "floordiv"


def test_compare_and_minmax_by_bounds():
    v, r = _ranges(i=(0, 3), k=(0, 5))
    i, k = v["i"], v["k"]
    assert simplify(i * 4 + 3 < 16, r).value is True
    assert not isinstance(simplify(i * 4 + 3 < 12, r), Const)
    assert simplify(Binary("min", i, k + 3, "int64"), r) is i
    assert simplify(Binary("max", i, Const(0, "int64"), "int64"), r) is i


def test_hash_consing_shares_equal_subtrees():
    x = Var("x")
    e = simplify((x * 3 + 1) * (x * 3 + 1))
    assert e.a is e.b


def test_single_value_range_folds():
    v, r = _ranges(n=(0, 0), i=(0, 7))
    assert text(simplify(v["n"] * 100 + v["i"], r)) == "i"


def test_quotient_and_remainder_rejoin():
    """k*c*(x / c) + k*(x % c) is k*x: a fused axis split again (a byte row's quads)
    indexes its parts so; floor and trunc pairs alike, whatever x's sign."""
    v, r = _ranges(f=(0, 15), o=(0, 55))
    x = v["o"] * 16 + v["f"]
    e = simplify(x // 4 * 4 + x % 4, r)
    assert text(e) == "((o * 16) + f)"
    e = simplify((x // 4 * 4 + x % 4) * 3 + 7, r)
    assert text(e) == "(((o * 48) + (f * 3)) + 7)"
    y = Var("y")  # unbounded: floor division stays floor, and still rejoins
    assert simplify(y // 8 * 8 + y % 8) is y
    # a remainder of another divisor or coefficient is left alone
    assert text(simplify(y // 8 * 8 + y % 4)) != "y"
    assert text(simplify(y // 8 * 16 + y % 8)) != "y"


def test_a_common_factor_of_the_divisor_leaves_the_small_part_behind():
    """(g*X + R) // c is X // (c/g) and (g*X + R) % c is g*(X % (c/g)) + R where g
    divides c and 0 <= R < g: the 3 blocks i of a tile t read group (3t + i) // 24, the
    same t // 8 for all three (a grouped conv's broadcasts then shared by its blocks)."""
    v, r = _ranges(t=(0, 15), i=(0, 2), j=(0, 3))
    t, i = v["t"], v["i"]
    assert text(simplify((t * 3 + i) // 24, r)) == "(t truncdiv 8)"
    assert text(simplify((t * 3 + i) % 24, r)) == "(((t truncmod 8) * 3) + i)"
    assert text(simplify((t * 6 + i + 1) // 12, r)) == "(t truncdiv 2)"  # R = i + 1 < 6
    # R can reach g: no factor to take
    assert text(simplify((t * 3 + v["j"]) // 24, r)) == "(((t * 3) + j) truncdiv 24)"
    y = Var("y")  # unbounded X: floor division stays floor
    assert text(simplify((y * 4 + i) // 8, r)) == "(y floordiv 2)"


def _round_trip(inner, lo=0.0, hi=255.0, dtype="uint8"):
    """float(dtype(min(max(inner, lo), hi))): a quantize read back by a dequantize."""
    from packager import te

    clamped = te.min_(te.max_(inner, te.const(lo, "float32")), te.const(hi, "float32"))
    return clamped, te.cast("float32", te.cast(dtype, clamped))


def test_a_clamped_whole_float_through_an_integer_is_itself():
    from packager import te

    x = Var("x", "float32")
    zp = te.cast("float32", Var("z", "uint8"))
    whole = te.call("round", x / te.const(0.25, "float32")) + zp
    clamped, trip = _round_trip(whole)
    assert simplify(trip) is simplify(clamped)
    clamped, trip = _round_trip(te.call("floor", x) * te.const(2.0, "float32"), -128, 127, "int8")
    assert simplify(trip) is simplify(clamped)


def test_round_trips_that_can_change_the_value_stay():
    from packager import te

    x = Var("x", "float32")
    whole = te.call("round", x)
    cases = [
        _round_trip(x),  # not a whole number: the cast truncates it
        _round_trip(whole + te.const(0.5, "float32")),
        _round_trip(whole, -1.0, 255.0),  # -1 wraps in uint8
        _round_trip(whole, 0.0, 256.0),
        _round_trip(whole, 0.0, 254.5),
        _round_trip(whole, 0.0, 255.0, "int8"),
        _round_trip(whole, 0.0, 2147483647.0, "int32"),  # 2^31 as a float32: overflows
    ]
    for _, trip in cases:
        got = simplify(trip)
        assert isinstance(got, Cast) and got.dtype == "float32", text(got)


def test_quantize_then_dequantize_computes_the_same_bytes():
    """QuantizeLinear -> DequantizeLinear inlined into one kernel (the cast pair gone)
    against numpy, ties and saturation included."""
    import numpy as np

    from packager import te
    from packager.ops.quantized import dequantize_linear, quantize_linear

    from .helpers import run

    x = np.concatenate([np.linspace(-40, 80, 61), [0.125, 0.375, -0.125, 1e30, -1e30]])
    x = x.astype(np.float32).reshape(1, -1)
    scale, zp = np.array(0.25, np.float32), np.array(10, np.uint8)
    ins = [te.placeholder(a.shape, str(a.dtype), f"x{k}") for k, a in enumerate([x, scale, zp])]
    (q,) = quantize_linear(ins, {})
    (dq,) = dequantize_linear([q, ins[1], ins[2]], {})
    s = te.create_schedule(dq)
    s[q].compute_inline()
    (got,), src = run(s, [*ins, dq], "k_qdq", [x, scale, zp])
    want = (np.clip(np.rint(x / 0.25) + 10, 0, 255) - 10) * np.float32(0.25)
    np.testing.assert_array_equal(got, want.astype(np.float32))
    assert "uint8_t)" not in src.split("k_qdq(")[-1], src
