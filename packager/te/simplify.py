"""Expression simplification: constant folding, canonical linear index forms and
bound-driven rewrites of floordiv/floormod/min/max/comparisons.

Index expressions (dtype INDEX) are put in a canonical linear form
``c1*t1 + c2*t2 + ... + c0`` whose atoms t are variables or non-linear
subterms, so that e.g. a split-then-flattened index ``(io*4 + ii)*W + j`` becomes
``io*(4W) + ii*W + j``. Variable ranges (inclusive int bounds, typically loop
ranges) let floordiv/floormod by a constant drop the parts that cannot change the
result: ``(a*c + b) // c -> a + b // c``, ``b // c -> 0`` when ``0 <= b < c``.
Structurally equal results are hash-consed into one object, so repeated subtrees
(after inlining) are shared and code generators can CSE them by identity.
"""

from __future__ import annotations

import numpy as np

from .expr import (
    INDEX,
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    Reduce,
    Select,
    Unary,
    Var,
    children,
    const,
    is_float,
    rewrite,
)

Bound = tuple  # (lo | None, hi | None), inclusive

INT_RANGE = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
    "bool": (0, 1),
}


# --- bounds -----------------------------------------------------------------


def _add(a, b):
    return None if a is None or b is None else a + b


def _mul_bound(x: Bound, y: Bound) -> Bound:
    if None in x or None in y:
        return (None, None)
    corners = [p * q for p in x for q in y]
    return (min(corners), max(corners))


class Bounds:
    """Inclusive integer bounds of expressions given bounds of variables."""

    def __init__(self, ranges: dict | None = None):
        self.ranges = ranges if ranges is not None else {}
        self.memo: dict[int, Bound] = {}

    def __call__(self, e: Expr) -> Bound:
        # entries hold the node itself: an id is only unique while its object lives
        got = self.memo.get(id(e))
        if got is None or got[0] is not e:
            got = self.memo[id(e)] = (e, self._bound(e))
        return got[1]

    def _bound(self, e: Expr) -> Bound:
        if is_float(e.dtype):
            return (None, None)
        if isinstance(e, Const):
            return (int(e.value), int(e.value))
        if isinstance(e, Var):
            return self.ranges.get(e, (None, None))
        if isinstance(e, Binary) and e.dtype != "bool":
            return self._binary(e)
        if isinstance(e, Select):
            t, f = self(e.t), self(e.f)
            lo = None if t[0] is None or f[0] is None else min(t[0], f[0])
            hi = None if t[1] is None or f[1] is None else max(t[1], f[1])
            return (lo, hi)
        if isinstance(e, Unary) and e.op == "neg":
            lo, hi = self(e.a)
            return (None if hi is None else -hi, None if lo is None else -lo)
        return INT_RANGE.get(e.dtype, (None, None))

    def _binary(self, e: Binary) -> Bound:
        a, b = self(e.a), self(e.b)
        op = e.op
        if op == "+":
            return (_add(a[0], b[0]), _add(a[1], b[1]))
        if op == "-":
            return (
                _add(a[0], None if b[1] is None else -b[1]),
                _add(a[1], None if b[0] is None else -b[0]),
            )
        if op == "*":
            return _mul_bound(a, b)
        if op in ("min", "max"):
            f = min if op == "min" else max
            lo = f(a[0], b[0]) if None not in (a[0], b[0]) else (a[0] if op == "max" else None)
            hi = f(a[1], b[1]) if None not in (a[1], b[1]) else (b[1] if op == "min" else None)
            return (lo, hi)
        c = b[0] if b[0] is not None and b[0] == b[1] else None
        if c is None or c <= 0:
            return (None, None)
        if op == "floordiv" or (op == "truncdiv" and a[0] is not None and a[0] >= 0):
            return (None if a[0] is None else a[0] // c, None if a[1] is None else a[1] // c)
        if op == "floormod" or (op == "truncmod" and a[0] is not None and a[0] >= 0):
            if None not in a and a[0] // c == a[1] // c:
                return (a[0] % c, a[1] % c)
            return (0, c - 1)
        return (None, None)


# --- linear forms -----------------------------------------------------------


class Linear:
    """sum(coeff * atom) + const over INDEX atoms; terms keyed by atom identity
    (atoms are hash-consed, so identity is structural equality)."""

    __slots__ = ("terms", "const")

    def __init__(self, terms=None, c=0):
        self.terms: dict[int, list] = terms or {}
        self.const = c

    def scaled(self, k: int) -> Linear:
        return Linear({key: [a, c * k] for key, (a, c) in self.terms.items()}, self.const * k)

    def plus(self, o: Linear, sign: int = 1) -> Linear:
        terms = {key: [a, c] for key, (a, c) in self.terms.items()}
        for key, (a, c) in o.terms.items():
            if key in terms:
                terms[key][1] += sign * c
            else:
                terms[key] = [a, sign * c]
        return Linear({k: v for k, v in terms.items() if v[1] != 0}, self.const + sign * o.const)


def _atom_order(atom: Expr):
    return (0, atom.name) if isinstance(atom, Var) else (1, "")


class Simplifier:
    def __init__(self, ranges: dict | None = None):
        self.bounds = Bounds(ranges)
        self.memo: dict[int, Expr] = {}
        self.interned: dict[tuple, Expr] = {}
        self.lin: dict[int, Linear] = {}

    def __call__(self, e: Expr) -> Expr:
        return rewrite(e, self._node, self.memo)

    # hash-consing: one object per structure
    def intern(self, e: Expr) -> Expr:
        if isinstance(e, Var):
            return e
        if isinstance(e, Const):
            key = ("c", repr(e.value), e.dtype)
        else:
            tag = getattr(e, "op", None) or getattr(e, "func", None) or ""
            ref = getattr(e, "tensor", None) or getattr(e, "buffer", None)
            key = (type(e).__name__, tag, e.dtype, id(ref), tuple(id(k) for k in children(e)))
            if isinstance(e, Reduce):
                key += (e.combiner, tuple(id(a) for a in e.axes))
        got = self.interned.get(key)
        if got is None:
            got = self.interned[key] = e  # e keeps its children (the ids in key) alive
        return got

    def _node(self, e: Expr) -> Expr:
        out = self._fold(e)
        return self.intern(out)

    def _fold(self, e: Expr) -> Expr:
        if isinstance(e, Var):
            lo, hi = self.bounds.ranges.get(e, (None, None))
            return Const(lo, e.dtype) if lo is not None and lo == hi else e
        if isinstance(e, Binary):
            return self._binary(e)
        if isinstance(e, Unary):
            return _fold_unary(e)
        if isinstance(e, Cast):
            return _fold_cast(e)
        if isinstance(e, Select):
            if isinstance(e.cond, Const):
                return e.t if e.cond.value else e.f
            return e.t if e.t is e.f else e
        return e

    # --- binary ---

    def _binary(self, e: Binary) -> Expr:
        a, b, op = e.a, e.b, e.op
        if isinstance(a, Const) and isinstance(b, Const):
            folded = _fold_consts(op, a, b, e.dtype)
            if folded is not None:
                return folded
        if op in ("and", "or"):
            return _fold_logic(e)
        if e.dtype == INDEX and op in ("+", "-", "*"):
            return self.build(self.linear(e))
        if e.dtype == INDEX and op in ("floordiv", "floormod", "truncdiv", "truncmod"):
            return self._div(e)
        if op in ("min", "max") and not is_float(e.dtype):
            return self._minmax(e)
        if op in ("<", "<=", ">", ">=", "==", "!=") and a.dtype == INDEX:
            return self._compare(e)
        return _fold_identity(e)

    def linear(self, e: Expr) -> Linear:
        got = self.lin.get(id(e))
        if got is not None and got[0] is e:
            return got[1]
        if isinstance(e, Const):
            lin = Linear(c=int(e.value))
        elif isinstance(e, Binary) and e.op in ("+", "-"):
            lin = self.linear(e.a).plus(self.linear(e.b), 1 if e.op == "+" else -1)
            lin = self._rejoin_divmod(lin)
        elif isinstance(e, Binary) and e.op == "*" and isinstance(e.b, Const):
            lin = self.linear(e.a).scaled(int(e.b.value))
        elif isinstance(e, Binary) and e.op == "*" and isinstance(e.a, Const):
            lin = self.linear(e.b).scaled(int(e.a.value))
        elif isinstance(e, Unary) and e.op == "neg":
            lin = self.linear(e.a).scaled(-1)
        else:
            lin = Linear({id(e): [e, 1]})
        self.lin[id(e)] = (e, lin)
        return lin

    def build(self, lin: Linear) -> Expr:
        """The canonical expression of a linear form: big strides first."""
        terms = sorted(lin.terms.values(), key=lambda t: (-abs(t[1]), _atom_order(t[0])))
        out: Expr | None = None
        for atom, c in terms:
            mag = abs(c)
            t = atom if mag == 1 else self.intern(Binary("*", atom, self.intern(_ic(mag)), INDEX))
            if out is None:
                out = t if c > 0 else self.intern(Unary("neg", t, INDEX))
            else:
                out = self.intern(Binary("+" if c > 0 else "-", out, t, INDEX))
        if out is None:
            return self.intern(_ic(lin.const))
        if lin.const:
            op = "+" if lin.const > 0 else "-"
            out = self.intern(Binary(op, out, self.intern(_ic(abs(lin.const))), INDEX))
        self.lin[id(out)] = (out, lin)
        return out

    def _rejoin_divmod(self, lin: Linear) -> Linear:
        """``k*c*(x / c) + k*(x % c)`` -> ``k*x`` (floor or trunc pairs alike): a fused
        axis split again indexes its parts so (the quads of a byte row, schedule.py)."""
        pairs = {"floordiv": "floormod", "truncdiv": "truncmod"}
        for key, (atom, k) in list(lin.terms.items()):
            if not (isinstance(atom, Binary) and atom.op in pairs and isinstance(atom.b, Const)):
                continue
            c = int(atom.b.value)
            if c <= 0 or k % c or key not in lin.terms:
                continue
            mod = next(
                (
                    mk
                    for mk, (m, mc) in lin.terms.items()
                    if isinstance(m, Binary)
                    and m.op == pairs[atom.op]
                    and m.a is atom.a
                    and isinstance(m.b, Const)
                    and int(m.b.value) == c
                    and mc == k // c
                ),
                None,
            )
            if mod is None:
                continue
            rest = {t: v for t, v in lin.terms.items() if t not in (key, mod)}
            lin = Linear(rest, lin.const).plus(self.linear(atom.a).scaled(k // c))
        return lin

    def _div(self, e: Binary) -> Expr:
        a, b = e.a, e.b
        c = int(b.value) if isinstance(b, Const) else 0
        lo_a = self.bounds(a)[0]
        nonneg = lo_a is not None and lo_a >= 0
        if c <= 0 or (e.op.startswith("trunc") and not nonneg):
            return _fold_identity(e)
        is_div = e.op in ("floordiv", "truncdiv")
        if is_div and isinstance(a, Binary) and a.op in ("floordiv", "truncdiv"):
            inner = a.b.value if isinstance(a.b, Const) else 0
            if inner > 0 and (a.op == "floordiv" or nonneg):
                return self._div(Binary("floordiv", a.a, _ic(inner * c), INDEX))
        lin = self.linear(a)
        q_terms, r_terms = {}, {}
        for key, (atom, k) in lin.terms.items():
            (q_terms if k % c == 0 else r_terms)[key] = [atom, k // c if k % c == 0 else k]
        q0, r0 = divmod(lin.const, c)
        rest = self.build(Linear(r_terms, r0))
        lo, hi = self.bounds(rest)
        same = lo is not None and hi is not None and lo // c == hi // c
        if is_div:
            quot = Linear(q_terms, q0)
            if same:
                return self.build(quot.plus(Linear(c=lo // c)))
            if not r_terms:
                return self.build(quot)
            factored = self._factor_out(self.linear(rest), c)
            if factored is not None:
                g, big, _ = factored
                inner = self._div(Binary("floordiv", self.build(big), _ic(c // g), INDEX))
                return self.build(quot.plus(self.linear(inner)))
            return self.build(quot.plus(self.linear(self._divmod_node("floordiv", rest, c))))
        if same:
            return self.build(self.linear(rest).plus(Linear(c=-(lo // c) * c)))
        factored = self._factor_out(self.linear(rest), c)
        if factored is not None:
            g, big, small = factored
            inner = self._div(Binary("floormod", self.build(big), _ic(c // g), INDEX))
            return self.build(self.linear(inner).scaled(g).plus(small))
        return self._divmod_node("floormod", rest, c)

    def _factor_out(self, lin: Linear, c: int):
        """(g, X, R) with ``lin`` = g*X + R, g a divisor of ``c`` (1 < g < c) and
        0 <= R < g by the bounds, the largest such g; None where there is none. Then
        (g*X + R) // c = X // (c/g) and (g*X + R) % c = g*(X % (c/g)) + R: a tile of 3
        output blocks of a grouped conv with 24 blocks a group reads group
        (3*t + i) // 24 = t // 8 for every block i < 3 of the tile."""
        factors = {np.gcd(abs(k), c) for _, k in lin.terms.values()}
        for g in sorted((int(f) for f in factors if 1 < f < c), reverse=True):
            big = {key: [a, k // g] for key, (a, k) in lin.terms.items() if k % g == 0}
            small = {key: [a, k] for key, (a, k) in lin.terms.items() if k % g}
            q, r = divmod(lin.const, g)
            lo, hi = self.bounds(self.build(Linear(small, r)))
            if big and lo is not None and hi is not None and lo >= 0 and hi < g:
                return g, Linear(big, q), Linear(small, r)
        return None

    def _divmod_node(self, op: str, a: Expr, c: int) -> Expr:
        # floor and trunc agree on non-negative numerators; C's / and % are cheaper
        if (self.bounds(a)[0] is not None) and self.bounds(a)[0] >= 0:
            op = "truncdiv" if op == "floordiv" else "truncmod"
        return self.intern(Binary(op, a, self.intern(_ic(c)), INDEX))

    def _minmax(self, e: Binary) -> Expr:
        (alo, ahi), (blo, bhi) = self.bounds(e.a), self.bounds(e.b)
        a_le_b = ahi is not None and blo is not None and ahi <= blo
        b_le_a = bhi is not None and alo is not None and bhi <= alo
        if e.op == "min":
            return e.a if a_le_b else e.b if b_le_a else _fold_identity(e)
        return e.b if a_le_b else e.a if b_le_a else _fold_identity(e)

    def _compare(self, e: Binary) -> Expr:
        diff = self.build(self.linear(e.a).plus(self.linear(e.b), -1))
        lo, hi = self.bounds(diff)
        truth = _decide(e.op, lo, hi)
        if truth is not None:
            return Const(truth, "bool")
        return e


def _decide(op: str, lo, hi):
    """Truth of ``d op 0`` for d in [lo, hi], or None if undecided."""
    if op == "<":
        return True if hi is not None and hi < 0 else False if lo is not None and lo >= 0 else None
    if op == "<=":
        return True if hi is not None and hi <= 0 else False if lo is not None and lo > 0 else None
    if op == ">":
        return _negate(_decide("<=", lo, hi))
    if op == ">=":
        return _negate(_decide("<", lo, hi))
    if op == "==":
        if lo is not None and lo == hi:
            return lo == 0
        return False if (lo is not None and lo > 0) or (hi is not None and hi < 0) else None
    if op == "!=":
        return _negate(_decide("==", lo, hi))
    return None


def _negate(t):
    return None if t is None else not t


def _ic(v: int) -> Const:
    return Const(int(v), INDEX)


_NP = {
    "float32": np.float32,
    "float64": np.float64,
}


def _fold_consts(op: str, a: Const, b: Const, dtype: str) -> Expr | None:
    x, y = a.value, b.value
    if is_float(a.dtype):
        if op not in ("+", "-", "*", "/") or (op == "/" and y == 0):
            return None
        t = _NP[a.dtype]
        with np.errstate(all="ignore"):
            r = {"+": t(x) + t(y), "-": t(x) - t(y), "*": t(x) * t(y), "/": t(x) / t(y)}[op]
        return Const(float(r), dtype)
    if op in ("floordiv", "floormod", "truncdiv", "truncmod", "/") and y == 0:
        return None
    if dtype not in ("bool", INDEX) and op in ("+", "-", "*", "/"):
        return None  # narrow ints wrap: leave it to the C compiler
    r = _int_op(op, int(x), int(y))
    if r is None:
        return None
    return const(r, dtype)


def _int_op(op: str, x: int, y: int):
    if op in ("/", "truncdiv", "truncmod"):
        q = abs(x) // abs(y) * (1 if (x >= 0) == (y >= 0) else -1)
        return q if op != "truncmod" else x - q * y
    table = {
        "+": lambda: x + y,
        "-": lambda: x - y,
        "*": lambda: x * y,
        "floordiv": lambda: x // y,
        "floormod": lambda: x % y,
        "min": lambda: min(x, y),
        "max": lambda: max(x, y),
        "<": lambda: x < y,
        "<=": lambda: x <= y,
        ">": lambda: x > y,
        ">=": lambda: x >= y,
        "==": lambda: x == y,
        "!=": lambda: x != y,
        "and": lambda: bool(x) and bool(y),
        "or": lambda: bool(x) or bool(y),
    }
    f = table.get(op)
    return None if f is None else f()


def _is_const(e: Expr, v) -> bool:
    return isinstance(e, Const) and e.value == v and not isinstance(e.value, bool)


def _fold_identity(e: Binary) -> Expr:
    a, b, op = e.a, e.b, e.op
    if op == "*" and _is_const(b, 1):
        return a
    if op == "*" and _is_const(a, 1):
        return b
    if op in ("-",) and _is_const(b, 0):
        return a
    if not is_float(e.dtype):
        if op == "+" and _is_const(b, 0):
            return a
        if op == "+" and _is_const(a, 0):
            return b
        if op == "*" and (_is_const(a, 0) or _is_const(b, 0)):
            return const(0, e.dtype)
        if op in ("floordiv", "truncdiv", "/") and _is_const(b, 1):
            return a
    return e


def _fold_logic(e: Binary) -> Expr:
    a, b = e.a, e.b
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Const):
            if e.op == "and":
                return y if x.value else Const(False, "bool")
            return Const(True, "bool") if x.value else y
    return a if a is b else e


def _fold_unary(e: Unary) -> Expr:
    if isinstance(e.a, Const):
        if e.op == "not":
            return Const(not e.a.value, "bool")
        if e.op == "neg" and (is_float(e.dtype) or e.dtype == INDEX):
            return Const(-e.a.value, e.dtype)
    if isinstance(e.a, Unary) and e.a.op == e.op:
        return e.a.a
    return e


def _fold_cast(e: Cast) -> Expr:
    a = e.a
    if a.dtype == e.dtype:
        return a
    if isinstance(a, Const) and not is_float(a.dtype) and not is_float(e.dtype):
        lo, hi = INT_RANGE[e.dtype]
        if e.dtype != "bool" and lo <= int(a.value) <= hi:
            return const(int(a.value), e.dtype)
    if isinstance(a, Cast) and a.a.dtype == e.dtype and is_float(e.dtype):
        if a.dtype in INT_RANGE and a.dtype != "bool" and _clamped_whole(a.a, a.dtype):
            return a.a  # a quantize read back as float (Q -> DQ): the value it held
    return e


# Float functions whose result is a whole number (or not finite).
_WHOLE_CALLS = ("round", "nearbyint", "rint", "floor", "ceil", "trunc")


def _clamped_whole(m: Expr, dtype: str) -> bool:
    """Whether float ``m`` is a whole number clamped by constants into ``dtype``'s range,
    min(max(r, a), b) or max(min(r, b), a): a float -> ``dtype`` -> float round trip
    then returns it unchanged (a NaN, undefined through the integer, stays NaN)."""
    lo, hi = INT_RANGE[dtype]
    inner = m.a if isinstance(m, Binary) else None
    if not (isinstance(inner, Binary) and {inner.op, m.op} == {"min", "max"}):
        return False
    if not (isinstance(m.b, Const) and isinstance(inner.b, Const)):
        return False
    bounds = [np.asarray(c.value, c.dtype).item() for c in (m.b, inner.b)]  # as computed
    return all(lo <= v <= hi and float(v).is_integer() for v in bounds) and _whole(inner.a)


def _whole(e: Expr) -> bool:
    """Whether float ``e`` is a whole number whatever its inputs (or not finite): sums,
    differences, products, minima and maxima of whole floats are whole, a float of
    an integer is, and so are rounded values."""
    if isinstance(e, Const):
        return float(e.value).is_integer()
    if isinstance(e, Cast):
        return not is_float(e.a.dtype) and e.a.dtype != "bool"
    if isinstance(e, Call):
        return e.func in _WHOLE_CALLS
    if isinstance(e, Binary) and e.op in ("+", "-", "*", "min", "max"):
        return _whole(e.a) and _whole(e.b)
    if isinstance(e, Select):
        return _whole(e.t) and _whole(e.f)
    return False


def simplify(e: Expr, ranges: dict | None = None) -> Expr:
    """Simplify one expression; ``ranges`` maps Vars to inclusive (lo, hi) ints."""
    return Simplifier(ranges)(e)
