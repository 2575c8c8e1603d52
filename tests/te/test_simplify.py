from packager.te import Var, simplify
from packager.te.expr import Binary, Const


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
