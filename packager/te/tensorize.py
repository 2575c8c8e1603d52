"""Tensorize: a stage's innermost loop nest replaced by one call of a hardware intrinsic.

A ``TensorIntrin`` declares what its instruction sequence computes as a small compute of
its own (``decl``: a reduction over placeholders, e.g. ``out[l] += sum_k a[k] * w[l][k]``)
and carries the C that does it (``c_def``: a ``static inline`` function named ``name``,
taking a pointer to the output's first element, then one per input, in the order the
declaration reads them). ``Stage.tensorize(iv, intrin)`` asks lowering to replace the
loops from leaf ``iv`` inward with that call; lowering checks that those loops compute
exactly the declaration (same combiner, operations, dtypes, extents, and each operand
addressed with the declaration's strides along the replaced loops) and raises
``TensorizeError`` naming the stage and the difference otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .expr import INDEX, Binary, Cast, Const, Expr, Load, Reduce, Tensor, Var, children, substitute
from .ir import BufferLoad, Stmt
from .visitor import register


class TensorizeError(ValueError):
    """The loops under a tensorized axis do not compute the intrinsic's declaration."""


@dataclass(frozen=True, eq=False)
class TensorIntrin:
    """``decl``: the compute the intrinsic performs (its body a Reduce of loads of
    placeholders); ``name``: the C function; ``c_def``: its definition; ``isa``: the
    instructions it uses, for people (``avx512_vnni vpdpbusd``); ``hints``: compiler
    hints (te.schedule.HINTS) the kernel that calls it needs, which lowering adds to
    the schedule's own."""

    name: str
    decl: Tensor
    c_def: str
    isa: str = ""
    hints: frozenset[str] = frozenset()

    @property
    def inputs(self) -> list[Tensor]:
        """The declaration's operands in the order its body reads them (the C
        function's arguments after the output)."""
        out: list[Tensor] = []
        for ld in _loads(self.decl.op.body):
            if all(ld.tensor is not t for t in out):
                out.append(ld.tensor)
        return out


@dataclass(eq=False)
class Intrinsic(Stmt):
    """``intrin.name(&out.buffer[out.index], &ins[0].buffer[...], ...)``: updates the
    output in place."""

    intrin: TensorIntrin
    out: BufferLoad
    ins: list[BufferLoad] = field(default_factory=list)


register(Intrinsic, exprs=("out", "ins"))


def _loads(e: Expr) -> list:
    found: list = []

    def walk(n: Expr) -> None:
        if isinstance(n, (Load, BufferLoad)):
            found.append(n)
            return
        for c in children(n):
            walk(c)

    walk(e)
    return found


def _index_of(ld) -> Expr:
    """A Load's flat index in its tensor (row-major), or a BufferLoad's."""
    if isinstance(ld, BufferLoad):
        return ld.index
    out: Expr = Const(0, INDEX)
    for i, d in zip(ld.indices, ld.tensor.shape, strict=True):
        out = out * d + i
    return out


def _strides(index: Expr, loop_vars: list[Var], simp) -> list[int | None]:
    """The index's step along each loop var (None: not a constant step)."""
    zero = {v: Const(0, v.dtype) for v in loop_vars}
    base = simp(substitute(index, zero))
    out: list[int | None] = []
    for v in loop_vars:
        steps = []
        for k in (1, 2):
            moved = simp(substitute(index, {**zero, v: Const(k, v.dtype)}) - base)
            steps.append(moved.value if isinstance(moved, Const) else None)
        ok = steps[0] is not None and steps[1] == 2 * steps[0]
        out.append(steps[0] if ok else None)
    return out


def match(
    stage_name: str,
    intrin: TensorIntrin,
    reduce: Reduce | None,
    value: Expr,
    store_index: Expr,
    data_vars: list[tuple[Var, int]],
    reduce_vars: list[tuple[Var, int]],
    simp,
) -> tuple[list[BufferLoad], Expr]:
    """Check the loops over ``data_vars``/``reduce_vars`` (var, extent; outermost first)
    whose update is ``acc (combiner) value`` stored at ``store_index`` compute ``intrin``.
    Returns the operand loads at the nest's first iteration, in the intrinsic's
    argument order, and the output's base index."""

    def fail(why: str):
        raise TensorizeError(f"tensorize {stage_name} with {intrin.name}: {why}")

    decl = intrin.decl.op
    body = decl.body
    if not isinstance(body, Reduce):  # an elementwise intrinsic (an epilogue)
        if reduce is not None:
            fail("the stage is a reduction, the intrinsic is elementwise")
        want_red, want_value = [], body
    else:
        if reduce is None or reduce.combiner != body.combiner:
            fail(f"the stage is not a {body.combiner} reduction")
        if reduce.where is not None:
            fail("the reduction has a condition")
        want_red, want_value = [(iv.var, iv.extent) for iv in body.axes], body.body
    want_data = [(iv.var, iv.extent) for iv in decl.axis]
    for kind, got, want in (("data", data_vars, want_data), ("reduce", reduce_vars, want_red)):
        if [e for _, e in got] != [e for _, e in want]:
            fail(
                f"{kind} loops under the axis have extents {[e for _, e in got]}, "
                f"the intrinsic {[e for _, e in want]}"
            )
    ours = [v for v, _ in data_vars + reduce_vars]
    theirs = [v for v, _ in want_data + want_red]
    pairs: list[tuple] = []

    def same(a: Expr, b: Expr, path: str) -> None:
        if isinstance(b, Load):
            if not isinstance(a, BufferLoad):
                fail(f"{path}: a {type(a).__name__} where the intrinsic loads {b.tensor.name}")
            if a.dtype != b.dtype:
                fail(
                    f"{path}: operand {a.buffer.name} is {a.dtype}, the intrinsic's "
                    f"{b.tensor.name} is {b.dtype}"
                )
            pairs.append((a, b))
            return
        if type(a) is not type(b) or a.dtype != b.dtype:
            fail(f"{path}: {_describe(a)} where the intrinsic has {_describe(b)}")
        if isinstance(b, Const):
            if a.value != b.value:
                fail(f"{path}: the constant {a.value} where the intrinsic has {b.value}")
            return
        if isinstance(b, Binary) and a.op != b.op:
            fail(f"{path}: '{a.op}' where the intrinsic has '{b.op}'")
        if not isinstance(b, (Binary, Cast)):
            fail(f"{path}: the intrinsic's {_describe(b)} cannot be matched")
        for k, (x, y) in enumerate(zip(children(a), children(b), strict=True)):
            same(x, y, f"{path}.{k}")

    same(value, want_value, "body")
    out_want = _strides(_index_of(Load(intrin.decl, tuple(v for v, _ in want_data))), theirs, simp)
    if _strides(store_index, ours, simp) != out_want:
        fail(f"the output is not stored with strides {out_want} along the replaced loops")
    args: dict[int, BufferLoad] = {}
    for a, b in pairs:
        want = _strides(_index_of(b), theirs, simp)
        got = _strides(a.index, ours, simp)
        if got != want:
            fail(
                f"{a.buffer.name} is read with strides {got} along the replaced loops, "
                f"the intrinsic's {b.tensor.name} with {want}"
            )
        zero = {v: Const(0, v.dtype) for v in ours}
        args.setdefault(id(b.tensor), BufferLoad(a.buffer, simp(substitute(a.index, zero))))
    ins = [args[id(t)] for t in intrin.inputs]
    base = simp(substitute(store_index, {v: Const(0, v.dtype) for v in ours}))
    return ins, base


def _describe(e: Expr) -> str:
    if isinstance(e, Binary):
        return f"'{e.op}' ({e.dtype})"
    if isinstance(e, Cast):
        return f"a cast to {e.dtype}"
    if isinstance(e, (Load, BufferLoad)):
        return "a load"
    if isinstance(e, Const):
        return f"the constant {e.value}"
    return f"a {type(e).__name__} ({e.dtype})"
