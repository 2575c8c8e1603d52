"""One visitor and one mutator for the loop IR.

Every statement class declares, in ``FIELDS``, which of its fields hold expressions and
which hold statements (a field may hold one node, ``None`` or a list of nodes). From
that one table come the generic walk and rebuild, so a pass names only the node kinds it
cares about: a ``StmtVisitor`` subclass defines ``visit_For`` (say) and inherits the
traversal of everything else; a ``StmtMutator`` subclass returns a replacement from
``visit_Store`` and gets a rebuilt tree with unchanged subtrees shared.

Expressions already have their generic traversal in te/expr.py (``children``,
``with_children``, ``rewrite``); the visitor hands each expression of a statement to
``visit_expr`` and the mutator to ``mutate_expr``, which default to doing nothing.
A new statement kind (a DMA copy, a dependency token) joins by ``register``.

``LoopVisitor`` keeps the loops around the statement being visited (what cost features
and bound checks ask); ``stmts_of``, ``expr_roots`` and ``walk_exprs`` answer the
common queries without a class; ``dispatch`` is the by-name per-class call that the
visitors use, open to passes over expressions too (the numpy evaluator).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator

from .expr import Expr, children
from .ir import Allocate, Barrier, For, IfThenElse, Prefetch, Seq, Stmt, Store

# class -> (expression fields, statement fields), in evaluation order.
FIELDS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {
    Store: (("index", "value"), ()),
    For: (("min", "extent"), ("body",)),
    Seq: ((), ("stmts",)),
    IfThenElse: (("cond",), ("then", "else_")),
    Allocate: ((), ("body",)),
    Barrier: ((), ()),
    Prefetch: (("target",), ()),
}


def register(cls: type, exprs: tuple[str, ...] = (), stmts: tuple[str, ...] = ()) -> type:
    """Make a new statement class known to every visitor and mutator."""
    FIELDS[cls] = (tuple(exprs), tuple(stmts))
    return cls


def _fields(s: Stmt) -> tuple[tuple[str, ...], tuple[str, ...]]:
    try:
        return FIELDS[type(s)]
    except KeyError:
        name = type(s).__name__
        raise TypeError(f"loop IR: unknown statement {name} (te/visitor.register)") from None


def _optional(s: Stmt, name: str) -> bool:
    """True for a statement field that may be None (its default is None: ``else_``)."""
    return any(f.name == name and f.default is None for f in dataclasses.fields(s))


def _nodes(value) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def stmt_exprs(s: Stmt) -> list[Expr]:
    """The expressions held directly by ``s`` (not by its sub-statements)."""
    return [e for f in _fields(s)[0] for e in _nodes(getattr(s, f))]


def stmt_children(s: Stmt) -> list[Stmt]:
    """The statements held directly by ``s``, in order."""
    out: list[Stmt] = []
    for f in _fields(s)[1]:  # written out: every walk calls this once per statement
        v = getattr(s, f)
        if isinstance(v, list):
            out += v
        elif v is not None:
            out.append(v)
    return out


def walk_stmts(s: Stmt) -> Iterator[Stmt]:
    """Every statement of the tree, pre-order (iterative: deep nests are fine)."""
    stack = [s]
    while stack:
        n = stack.pop()
        yield n
        kids = stmt_children(n)
        if kids:
            stack += reversed(kids)


def stmts_of(s: Stmt, kind: type | tuple[type, ...]) -> list:
    """The statements of class ``kind`` in the tree, pre-order."""
    return [n for n in walk_stmts(s) if isinstance(n, kind)]


def expr_roots(s: Stmt) -> Iterator[Expr]:
    """Each statement's own expressions, in statement pre-order: the root of every
    expression tree in the statement tree."""
    for n in walk_stmts(s):
        yield from stmt_exprs(n)


def walk_exprs(s: Stmt) -> Iterator[Expr]:
    """Every expression node of the tree once (by identity), parents before children, in
    statement pre-order: the shared subtrees of an inlined expression DAG are walked once,
    not once per path (which grows exponentially with the depth of the sharing)."""
    seen: set[int] = set()
    for root in expr_roots(s):
        stack = [root]
        while stack:
            e = stack.pop()
            if id(e) in seen:
                continue
            seen.add(id(e))
            yield e
            stack.extend(reversed(children(e)))


def dispatch(handler, node, fallback: Callable):
    """``handler.visit_<class of node>(node)``, else ``fallback(node)``: how a pass names
    the node kinds it handles, statements and expressions alike (methods of the
    handler's class)."""
    method = _method(type(handler), type(node))
    return method(handler, node) if method is not None else fallback(node)


@functools.lru_cache(maxsize=4096)
def _method(handler_cls: type, node_cls: type) -> Callable | None:
    # looked up once per pair: passes visit thousands of nodes per kernel
    return getattr(handler_cls, "visit_" + node_cls.__name__, None)


class StmtVisitor:
    """Calls ``visit_<Class>`` for each statement, else ``generic_visit``, which visits
    the statement's expressions with ``visit_expr`` and then its sub-statements."""

    def visit(self, s: Stmt):
        method = _method(type(self), type(s))  # dispatch(), inlined: it runs per node
        return method(self, s) if method is not None else self.generic_visit(s)

    def generic_visit(self, s: Stmt) -> None:
        for e in stmt_exprs(s):
            self.visit_expr(e)
        for c in stmt_children(s):
            self.visit(c)

    def visit_expr(self, e: Expr) -> None:
        pass


class LoopVisitor(StmtVisitor):
    """A StmtVisitor that knows where it is: ``self.loops`` holds the For statements
    around the statement being visited, outermost first (a loop's own bounds are
    visited outside it). A subclass's own ``visit_For`` ends in ``super().visit_For(s)``."""

    def __init__(self) -> None:
        self.loops: list[For] = []

    def visit_For(self, s: For) -> None:
        for e in stmt_exprs(s):
            self.visit_expr(e)
        self.loops.append(s)
        try:
            for c in stmt_children(s):
                self.visit(c)
        finally:
            self.loops.pop()


class StmtMutator:
    """Calls ``visit_<Class>`` for each statement, else ``generic_visit``, which rebuilds
    the statement from its mutated expressions (``mutate_expr``) and sub-statements. A
    node whose parts are all unchanged is returned as it is, so untouched subtrees stay
    shared. A ``visit_`` method may return ``None`` to drop a statement from its parent."""

    def visit(self, s: Stmt) -> Stmt | None:
        method = _method(type(self), type(s))  # dispatch(), inlined: it runs per node
        return method(self, s) if method is not None else self.generic_visit(s)

    def generic_visit(self, s: Stmt) -> Stmt | None:
        expr_fields, stmt_fields = _fields(s)
        if type(self).mutate_expr is StmtMutator.mutate_expr:
            expr_fields = ()  # expressions stay as they are: no need to look
        changes = {}
        for f in expr_fields:
            old = getattr(s, f)
            if isinstance(old, list):  # a list of expressions (an intrinsic's operands)
                new = [self.mutate_expr(x) for x in old]
                new = old if all(a is b for a, b in zip(new, old, strict=True)) else new
            else:
                new = None if old is None else self.mutate_expr(old)
            if new is not old:
                changes[f] = new
        for f in stmt_fields:
            old = getattr(s, f)
            new = self._mutate_field(old)
            if new is None and old is not None and not _optional(s, f):
                new = Seq([])  # a dropped body leaves an empty one
            if new is not old:
                changes[f] = new
        return dataclasses.replace(s, **changes) if changes else s

    def _mutate_field(self, old):
        if old is None:
            return None
        if not isinstance(old, list):
            return self.visit(old)
        new, same = [], True
        for c in old:
            m = self.visit(c)
            same = same and m is c
            if m is not None:
                new.append(m)
        return old if same else new

    def mutate_expr(self, e: Expr) -> Expr:
        return e


def map_stmts(s: Stmt, fn: Callable[[Stmt], Stmt | None]) -> Stmt | None:
    """Bottom-up rewrite: ``fn`` gets each statement with its sub-statements already
    rewritten and returns its replacement (or ``None`` to drop it)."""

    class _Map(StmtMutator):
        def visit(self, n: Stmt) -> Stmt | None:
            rebuilt = self.generic_visit(n)
            return None if rebuilt is None else fn(rebuilt)

    return _Map().visit(s)
