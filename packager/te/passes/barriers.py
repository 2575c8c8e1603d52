"""Work-group barriers around shared memory.

A ``shared`` buffer is written by some work-items of a group (a cooperative fetch: its
copy loop bound to threadIdx) and read by others, so every write must be finished before
any read, and every read before the next write. After lowering, in each statement list:

* a ``Barrier`` goes before the first statement that reads a shared buffer an earlier
  statement of the list wrote (the fetch is done before anyone reads it);
* a serial loop whose body writes a shared buffer and then reads it ends its body with a
  ``Barrier`` (the next iteration's fetch must not overwrite what others still read).

Every work-item of a group must reach the same barriers: one under a condition that can
differ between work-items of a group (on a threadIdx variable, a threadIdx loop shorter
than the launch's, a loop whose bounds depend on threadIdx) is refused, naming the kernel.
"""

from __future__ import annotations

import dataclasses

from ...errors import PackagerError
from ..expr import Var, distinct
from ..ir import Allocate, Barrier, BufferLoad, For, IfThenElse, PrimFunc, Seq, Stmt, Store
from ..visitor import walk_exprs, walk_stmts


def insert_barriers(func: PrimFunc) -> PrimFunc:
    """``func`` with the barriers its shared buffers need (itself when it has none)."""
    if not any(_shared_stores(func.body)):
        return func
    extents: dict[str, int] = {}
    for s in walk_stmts(func.body):
        if isinstance(s, For) and s.kind == "thread_binding":
            extents[s.thread_tag] = max(extents.get(s.thread_tag, 1), _const(s.extent) or 1)
    body = _Inserter(func.name, extents).visit(func.body, frozenset(), None)
    return dataclasses.replace(func, body=body)


def _const(e) -> int | None:
    v = getattr(e, "value", None)
    return v if isinstance(v, int) else None


def _shared_stores(s: Stmt) -> set:
    return {x.buffer for x in walk_stmts(s) if isinstance(x, Store) and x.buffer.scope == "shared"}


def _shared_loads(s: Stmt) -> set:
    return {
        e.buffer for e in walk_exprs(s) if isinstance(e, BufferLoad) and e.buffer.scope == "shared"
    }


class _Inserter:
    """Rebuilds the body; ``tvars``: variables of the enclosing threadIdx loops;
    ``why``: the first enclosing condition that differs between work-items, or None."""

    def __init__(self, kernel: str, extents: dict[str, int]):
        self.kernel = kernel
        self.extents = extents

    def visit(self, s: Stmt, tvars: frozenset, why: str | None) -> Stmt:
        if isinstance(s, Seq):
            return self.seq(s, tvars, why)
        if isinstance(s, For):
            return self.loop(s, tvars, why)
        if isinstance(s, IfThenElse):
            if why is None and self._depends(s.cond, tvars):
                why = "an if on the work-item's index"
            then = self.visit(s.then, tvars, why)
            els = self.visit(s.else_, tvars, why) if s.else_ is not None else None
            return IfThenElse(s.cond, then, els)
        if isinstance(s, Allocate):
            return Allocate(s.buffer, self.visit(s.body, tvars, why))
        return s

    def loop(self, s: For, tvars: frozenset, why: str | None) -> For:
        if s.kind == "thread_binding" and s.thread_tag.startswith("threadIdx"):
            tvars = tvars | {s.var}
            if why is None and (_const(s.extent) or 0) < self.extents[s.thread_tag]:
                why = f"the guard of loop {s.var.name} ({s.thread_tag}, shorter than the launch)"
        elif why is None and (self._depends(s.min, tvars) or self._depends(s.extent, tvars)):
            why = f"loop {s.var.name}, whose bounds depend on the work-item's index"
        body = self.visit(s.body, tvars, why)
        if s.kind != "thread_binding" and (_const(s.extent) or 2) > 1 and _fetch_then_read(body):
            body = Seq([*_stmts(body), self.barrier(why, f"the end of loop {s.var.name}")])
        return dataclasses.replace(s, body=body)

    def seq(self, s: Seq, tvars: frozenset, why: str | None) -> Stmt:
        out: list[Stmt] = []
        pending: set = set()  # shared buffers written since the last barrier
        for part in s.stmts:
            part = self.visit(part, tvars, why)
            read = _shared_loads(part) & pending
            if read:
                names = ", ".join(sorted(b.name for b in read))
                out.append(self.barrier(why, f"the read of shared {names}"))
                pending = set()
            pending |= _shared_stores(part)
            out.append(part)
        return Seq(out)

    def barrier(self, why: str | None, where: str) -> Barrier:
        if why is not None:
            raise PackagerError(
                f"kernel {self.kernel}: a barrier before {where} would sit under {why}; "
                "work-items of one group would not all reach it"
            )
        return Barrier("shared")

    @staticmethod
    def _depends(e, tvars: frozenset) -> bool:
        return any(v in tvars for v in distinct(e, Var))


def _stmts(s: Stmt) -> list[Stmt]:
    return list(s.stmts) if isinstance(s, Seq) else [s]


def _fetch_then_read(body: Stmt) -> bool:
    """Whether a loop body writes a shared buffer and reads one it wrote."""
    return bool(_shared_stores(body) & _shared_loads(body))
