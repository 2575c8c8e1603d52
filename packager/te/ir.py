"""The loop IR that lowering produces and code generators consume.

Statements work on flat buffers: a Buffer is a named, typed, contiguous array with
a logical shape; Store/BufferLoad use one flat INDEX expression. The IR is
target-neutral: loop kinds and buffer scopes name what a target must provide, so
GPU thread binding ("thread_binding" with a thread_tag such as "blockIdx.x"),
shared/local memory scopes and barriers fit in without changing the node set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .expr import INDEX, Expr, Var

# serial | parallel (CPU threads) | vectorized | unrolled | rolled (kept a loop: the
# compiler is told not to unroll it) | thread_binding (GPU axes) | virtual_thread
# (interleaved copies of the body with their own buffers: accelerators)
FOR_KINDS = (
    "serial", "parallel", "vectorized", "unrolled", "rolled", "thread_binding", "virtual_thread"
)  # fmt: skip
# global: kernel arguments / heap; local: private to a thread; shared: GPU workgroup;
# accel.*: the accelerator's on-chip buffers (docs/accel.md)
SCOPES = ("global", "local", "shared", "accel.inp", "accel.wgt", "accel.acc")


@dataclass(eq=False)
class Buffer:
    name: str
    dtype: str
    shape: tuple[int, ...]
    scope: str = "global"

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    __hash__ = object.__hash__


@dataclass(eq=False, frozen=True)
class BufferLoad(Expr):
    """Element ``buffer[index]`` (flat index)."""

    buffer: Buffer
    index: Expr

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.buffer.dtype

    def children(self) -> tuple[Expr, ...]:
        return (self.index,)

    def with_children(self, new: tuple[Expr, ...]) -> BufferLoad:
        return BufferLoad(self.buffer, new[0])


class Stmt:
    __hash__ = object.__hash__


@dataclass(eq=False)
class Store(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass(eq=False)
class For(Stmt):
    var: Var
    min: Expr
    extent: Expr
    kind: str
    body: Stmt
    thread_tag: str = ""  # for kind == "thread_binding"


@dataclass(eq=False)
class Seq(Stmt):
    stmts: list[Stmt] = field(default_factory=list)


@dataclass(eq=False)
class IfThenElse(Stmt):
    cond: Expr
    then: Stmt
    else_: Stmt | None = None


@dataclass(eq=False)
class Allocate(Stmt):
    """``buffer`` lives for the duration of ``body`` (scope from the buffer)."""

    buffer: Buffer
    body: Stmt


@dataclass(eq=False)
class Prefetch(Stmt):
    """A hint that ``target``'s element will be read soon: its cache line is fetched
    ahead. It changes no result; a language without prefetches prints nothing
    (Schedule.prefetch places them, lowering moves them out of the loops they do not
    depend on)."""

    target: BufferLoad


@dataclass(eq=False)
class Barrier(Stmt):
    """A workgroup barrier (GPU targets); CPU code generators reject it."""

    scope: str = "shared"


@dataclass(eq=False)
class PrimFunc:
    """A kernel: ``params`` are the argument buffers in kernel-ABI order.

    ``may_alias``: indices of params that may share memory with one another (an output
    written over a dying input, in place); code generators must not declare them
    ``restrict``. Every other param is distinct from all others.

    ``hints``: the schedule's compiler hints (Schedule.hint), which a language renders
    as it can (C: a GCC optimize pragma) and others ignore."""

    name: str
    params: list[Buffer]
    body: Stmt
    may_alias: frozenset[int] = frozenset()
    hints: frozenset[str] = frozenset()


def seq(*stmts: Stmt | None) -> Stmt:
    """A Seq of the non-empty statements, flattening nested Seqs."""
    out: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        out.extend(s.stmts if isinstance(s, Seq) else [s])
    return out[0] if len(out) == 1 else Seq(out)


def index_var(name: str) -> Var:
    return Var(name, INDEX)
