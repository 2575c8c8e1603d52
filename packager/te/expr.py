"""Tensor expressions: the scalar expression tree, iteration variables and tensors.

A tensor is either a placeholder (an input of a kernel) or the result of a compute
operation, which says what each output element is as an expression of its index
variables. Shapes are static tuples of Python ints: every model is packaged with
fixed shapes. Expressions are immutable; nodes compare by identity, so they can be
dict keys, and structural equality is never implied by ``==`` (use ``eq``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

INDEX = "int64"
FLOAT_DTYPES = ("float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)

_names = itertools.count()


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def _fresh(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


@contextmanager
def fresh_names():
    """Number unnamed tensors and axes from 0 inside the block, so that building the
    same computation twice gives the same names (and the same generated source)."""
    global _names
    saved, _names = _names, itertools.count()
    try:
        yield
    finally:
        _names = saved


class Expr:
    """A scalar expression with a dtype. Arithmetic operators build new nodes."""

    dtype: str

    def __add__(self, o):
        return binary("+", self, o)

    def __radd__(self, o):
        return binary("+", o, self)

    def __sub__(self, o):
        return binary("-", self, o)

    def __rsub__(self, o):
        return binary("-", o, self)

    def __mul__(self, o):
        return binary("*", self, o)

    def __rmul__(self, o):
        return binary("*", o, self)

    def __truediv__(self, o):
        return binary("/", self, o)

    def __rtruediv__(self, o):
        return binary("/", o, self)

    def __floordiv__(self, o):
        return binary("floordiv", self, o)

    def __rfloordiv__(self, o):
        return binary("floordiv", o, self)

    def __mod__(self, o):
        return binary("floormod", self, o)

    def __rmod__(self, o):
        return binary("floormod", o, self)

    def __neg__(self):
        return Unary("neg", self, self.dtype)

    def __lt__(self, o):
        return binary("<", self, o)

    def __le__(self, o):
        return binary("<=", self, o)

    def __gt__(self, o):
        return binary(">", self, o)

    def __ge__(self, o):
        return binary(">=", self, o)

    __hash__ = object.__hash__


@dataclass(eq=False, frozen=True)
class Var(Expr):
    name: str
    dtype: str = INDEX


@dataclass(eq=False, frozen=True)
class Const(Expr):
    value: int | float | bool
    dtype: str


@dataclass(eq=False, frozen=True)
class Binary(Expr):
    """op: + - * / floordiv floormod truncdiv truncmod min max >> < <= > >= == != and or.

    ``>>`` is the arithmetic right shift of a signed integer (floor division by a power
    of two: the requantize step of integer kernels).

    ``/`` is true division for floats and truncating (C) division for integers;
    floordiv/floormod round towards minus infinity (index arithmetic uses these).
    Comparisons and and/or yield bool.
    """

    op: str
    a: Expr
    b: Expr
    dtype: str


@dataclass(eq=False, frozen=True)
class Unary(Expr):
    """op: neg, not."""

    op: str
    a: Expr
    dtype: str


@dataclass(eq=False, frozen=True)
class Call(Expr):
    """A pure math function of the C library: exp log sqrt tanh erf floor ceil fabs
    pow round (half to even: nearbyint) isnan isinf fmod sin cos ..."""

    func: str
    args: tuple[Expr, ...]
    dtype: str


@dataclass(eq=False, frozen=True)
class Cast(Expr):
    a: Expr
    dtype: str


@dataclass(eq=False, frozen=True)
class Select(Expr):
    """cond ? t : f. Only the chosen side is evaluated (a guarded load is safe)."""

    cond: Expr
    t: Expr
    f: Expr
    dtype: str


@dataclass(eq=False, frozen=True)
class Load(Expr):
    """Element ``tensor[indices]`` of a tensor (indices are INDEX expressions)."""

    tensor: Tensor
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.tensor.dtype


@dataclass(eq=False, frozen=True)
class IterVar:
    """A loop variable over [0, extent): a data-parallel axis or a reduction axis."""

    var: Var
    extent: int
    kind: str = "data"  # "data" | "reduce"

    @property
    def name(self) -> str:
        return self.var.name


# An IterVar stands for its variable in arithmetic and indexing: ``A[i, k + 1]``.
for _m in (
    "add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod neg lt le gt ge"
).split():
    setattr(
        IterVar, f"__{_m}__", (lambda m: lambda self, *o: getattr(self.var, f"__{m}__")(*o))(_m)
    )


@dataclass(eq=False, frozen=True)
class Reduce(Expr):
    """combiner over ``axes`` of ``body``; combiner: sum, prod, max, min, or nanmax (a
    maximum that skips NaN, as numpy's fmax: max pooling's semantics in ONNX).

    Appears only as the whole body of a compute. ``where`` (optional) masks
    elements out of the reduction; the empty reduction yields the identity.
    """

    combiner: str
    body: Expr
    axes: tuple[IterVar, ...]
    where: Expr | None = None

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.body.dtype


# --- operations and tensors -------------------------------------------------


@dataclass(eq=False)
class PlaceholderOp:
    name: str


@dataclass(eq=False)
class ComputeOp:
    """``out[axis...] = body``; ``tag`` names the op family (for schedules)."""

    name: str
    axis: tuple[IterVar, ...]
    body: Expr
    tag: str = ""
    attrs: dict = field(default_factory=dict)

    @property
    def reduce_axis(self) -> tuple[IterVar, ...]:
        return self.body.axes if isinstance(self.body, Reduce) else ()

    @property
    def input_tensors(self) -> list[Tensor]:
        return input_tensors(self.body)


@dataclass(eq=False)
class Tensor:
    shape: tuple[int, ...]
    dtype: str
    op: PlaceholderOp | ComputeOp

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __getitem__(self, idx) -> Load:
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != len(self.shape):
            raise IndexError(
                f"tensor {self.name} has {len(self.shape)} dims, indexed with {len(idx)}"
            )
        return Load(self, tuple(as_expr(i, INDEX) for i in idx))

    __hash__ = object.__hash__


def placeholder(shape: Sequence[int], dtype: str = "float32", name: str | None = None) -> Tensor:
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}")
    return Tensor(tuple(int(d) for d in shape), dtype, PlaceholderOp(name or _fresh("p")))


def compute(
    shape: Sequence[int],
    fcompute: Callable[..., Expr],
    name: str | None = None,
    tag: str = "",
    attrs: dict | None = None,
) -> Tensor:
    """A tensor of ``shape`` whose element at (i0, i1, ...) is ``fcompute(i0, i1, ...)``."""
    name = name or _fresh("c")
    axis = tuple(IterVar(Var(f"{name}_i{k}"), int(d)) for k, d in enumerate(shape))
    body = fcompute(*[iv.var for iv in axis])
    if not isinstance(body, Expr):
        raise TypeError(f"compute {name}: body must be an Expr, got {type(body).__name__}")
    op = ComputeOp(name, axis, body, tag, dict(attrs or {}))
    return Tensor(tuple(int(d) for d in shape), body.dtype, op)


def reduce_axis(extent: int, name: str | None = None) -> IterVar:
    return IterVar(Var(name or _fresh("r")), int(extent), "reduce")


def _reducer(combiner: str):
    def make(body: Expr, axis, where: Expr | None = None) -> Reduce:
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        return Reduce(combiner, as_expr(body), axes, where)

    make.__name__ = combiner
    return make


sum = _reducer("sum")  # noqa: A001 - mirrors the math it names
prod = _reducer("prod")
max_reduce = _reducer("max")
nanmax_reduce = _reducer("nanmax")
min_reduce = _reducer("min")


# --- builders ---------------------------------------------------------------


def const(value, dtype: str) -> Const:
    if dtype == "bool":
        value = bool(value)
    elif is_float(dtype):
        value = float(value)
    else:
        value = int(value)
    return Const(value, dtype)


def as_expr(x, like: str | None = None) -> Expr:
    """An Expr from an Expr or a Python number (typed like ``like`` if given)."""
    if isinstance(x, Expr):
        return x
    if isinstance(x, IterVar):
        return x.var
    if isinstance(x, bool):
        return const(x, like or "bool")
    if isinstance(x, int):
        return const(x, like or INDEX)
    if isinstance(x, float):
        return const(x, like if like and is_float(like) else "float32")
    raise TypeError(f"cannot make an expression from {type(x).__name__}")


_COMPARE = ("<", "<=", ">", ">=", "==", "!=")
_LOGIC = ("and", "or")


def binary(op: str, a, b) -> Binary:
    a = a.var if isinstance(a, IterVar) else a
    b = b.var if isinstance(b, IterVar) else b
    if not isinstance(a, Expr):
        a = as_expr(a, b.dtype)
    if not isinstance(b, Expr):
        b = as_expr(b, a.dtype)
    if a.dtype != b.dtype:
        raise TypeError(f"'{op}' between {a.dtype} and {b.dtype}: cast one side first")
    dtype = "bool" if op in _COMPARE or op in _LOGIC else a.dtype
    return Binary(op, a, b, dtype)


def min_(a, b) -> Binary:
    return binary("min", a, b)


def max_(a, b) -> Binary:
    return binary("max", a, b)


def eq(a, b) -> Binary:
    return binary("==", a, b)


def ne(a, b) -> Binary:
    return binary("!=", a, b)


def all_of(*conds) -> Expr:
    """Logical and of the conditions (True if none)."""
    out: Expr | None = None
    for c in conds:
        out = c if out is None else binary("and", out, c)
    return out if out is not None else const(True, "bool")


def any_of(*conds) -> Expr:
    out: Expr | None = None
    for c in conds:
        out = c if out is None else binary("or", out, c)
    return out if out is not None else const(False, "bool")


def logical_not(a: Expr) -> Unary:
    return Unary("not", a, "bool")


def select(cond, t, f) -> Select:
    if isinstance(t, Expr) and not isinstance(f, Expr):
        f = as_expr(f, t.dtype)
    elif isinstance(f, Expr) and not isinstance(t, Expr):
        t = as_expr(t, f.dtype)
    t, f = as_expr(t), as_expr(f)
    if t.dtype != f.dtype:
        raise TypeError(f"select between {t.dtype} and {f.dtype}")
    return Select(as_expr(cond), t, f, t.dtype)


def cast(dtype: str, a) -> Expr:
    a = as_expr(a, dtype)
    return a if a.dtype == dtype else Cast(a, dtype)


def call(func: str, *args, dtype: str | None = None) -> Call:
    args = tuple(as_expr(a) for a in args)
    return Call(func, args, dtype or args[0].dtype)


# --- traversal --------------------------------------------------------------
# Node types defined elsewhere (the loop IR's BufferLoad) take part by defining
# ``children()`` and ``with_children(new)`` methods.


def children(e: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of ``e``."""
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, (Unary, Cast)):
        return (e.a,)
    if isinstance(e, Call):
        return e.args
    if isinstance(e, Select):
        return (e.cond, e.t, e.f)
    if isinstance(e, Load):
        return e.indices
    if isinstance(e, Reduce):
        return (e.body,) if e.where is None else (e.body, e.where)
    own = getattr(e, "children", None)
    return own() if own else ()


def with_children(e: Expr, new: tuple[Expr, ...]) -> Expr:
    """``e`` with its children replaced (``e`` itself when nothing changed)."""
    if all(a is b for a, b in zip(new, children(e), strict=True)):
        return e
    if isinstance(e, Binary):
        return Binary(e.op, new[0], new[1], e.dtype)
    if isinstance(e, Unary):
        return Unary(e.op, new[0], e.dtype)
    if isinstance(e, Cast):
        return Cast(new[0], e.dtype)
    if isinstance(e, Call):
        return Call(e.func, tuple(new), e.dtype)
    if isinstance(e, Select):
        return Select(new[0], new[1], new[2], e.dtype)
    if isinstance(e, Load):
        return Load(e.tensor, tuple(new))
    if isinstance(e, Reduce):
        return Reduce(e.combiner, new[0], e.axes, new[1] if len(new) > 1 else None)
    own = getattr(e, "with_children", None)
    if own is None:
        raise TypeError(f"{type(e).__name__} has children but no with_children")
    return own(new)


def walk(e: Expr):
    """Every node of the tree under ``e``, parents before children."""
    stack = [e]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


def distinct(e: Expr | list[Expr], kind: type) -> list:
    """The distinct nodes of type ``kind`` under ``e`` or under a list of roots (shared
    subtrees visited once)."""
    out, seen, stack = [], set(), list(e) if isinstance(e, list) else [e]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, kind):
            out.append(n)
        stack.extend(children(n))
    return out


def input_tensors(e: Expr) -> list[Tensor]:
    """Tensors loaded by ``e``, in first-use order, without duplicates."""
    seen: dict[int, Tensor] = {}
    for n in walk(e):
        if isinstance(n, Load) and id(n.tensor) not in seen:
            seen[id(n.tensor)] = n.tensor
    return list(seen.values())


def rewrite(e: Expr, fn: Callable[[Expr], Expr], memo: dict | None = None) -> Expr:
    """Bottom-up rewrite: ``fn(node with its children rewritten)`` returns the node's
    replacement. Iterative and memoized by identity, so shared subtrees stay shared and
    deep trees do not hit the recursion limit."""
    memo = {} if memo is None else memo

    def done(n):
        got = memo.get(id(n))
        return got is not None and got[0] is n  # the entry keeps n alive: ids stay unique

    stack = [(e, False)]
    while stack:
        n, ready = stack.pop()
        if done(n):
            continue
        ks = children(n)
        if ready or not ks:
            memo[id(n)] = (n, fn(with_children(n, tuple(memo[id(k)][1] for k in ks))))
            continue
        stack.append((n, True))
        stack.extend((k, False) for k in ks if not done(k))
    return memo[id(e)][1]


def substitute(e: Expr, mapping: dict) -> Expr:
    """Replace Vars (keys: Var objects) by expressions."""
    if not mapping:
        return e
    return rewrite(e, lambda n: mapping.get(n, n) if isinstance(n, Var) else n)
