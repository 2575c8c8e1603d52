"""Letting a kernel write an output over one of its inputs (in place).

The memory plan decides from op patterns that a node may work in place; this module
proves it on the lowered kernel before the pair loses ``restrict``: an output ``out``
may share memory with an input ``inp`` when

* ``out`` is stored by exactly one Store and never loaded, and
* ``inp`` is loaded only inside that Store's value, at the Store's own index.

Then each element of ``inp`` is read just before the same element of ``out`` is
written, and never again, so sharing the memory changes no result.
"""

from __future__ import annotations

import dataclasses

from .expr import Expr, Var, children, walk
from .ir import Buffer, BufferLoad, PrimFunc, Store
from .visitor import expr_roots, stmts_of


def allow_alias(func: PrimFunc, pairs, num_inputs: int) -> PrimFunc:
    """``func`` with each (output position, input position) pair in ``may_alias``;
    ValueError when the kernel does not read and write the pair element by element."""
    idx = set(func.may_alias)
    for o, i in pairs:
        out, inp = func.params[num_inputs + o], func.params[i]
        problem = _why_not(func, out, inp)
        if problem:
            raise ValueError(f"output {o} cannot be written over input {i}: {problem}")
        idx |= {i, num_inputs + o}
    return dataclasses.replace(func, may_alias=frozenset(idx))


def _why_not(func: PrimFunc, out: Buffer, inp: Buffer) -> str:
    stores = [s for s in stmts_of(func.body, Store) if s.buffer is out]
    if len(stores) != 1:
        return f"the output is stored {len(stores)} times"
    store = stores[0]
    for root in expr_roots(func.body):
        for load in _loads(root):
            if load.buffer is out:
                return "the kernel reads its output"
            if load.buffer is inp and not (root is store.value and _same(load.index, store.index)):
                return "the input is read at another index or place"
    return ""


def _loads(e: Expr) -> list[BufferLoad]:
    return [n for n in walk(e) if isinstance(n, BufferLoad)]


def _same(a: Expr, b: Expr) -> bool:
    """Structural equality (expressions compare by identity otherwise)."""
    if a is b:
        return True
    if type(a) is not type(b) or isinstance(a, Var):
        return False
    ka, kb = children(a), children(b)
    if len(ka) != len(kb) or _attrs(a) != _attrs(b):
        return False
    return all(_same(x, y) for x, y in zip(ka, kb, strict=True))


def _attrs(e: Expr) -> tuple:
    """The non-expression fields of a node (op, value, dtype, buffer identity...)."""
    out = []
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if isinstance(v, Expr) or (isinstance(v, tuple) and all(isinstance(x, Expr) for x in v)):
            continue
        out.append(id(v) if isinstance(v, Buffer) else v)
    return tuple(out)
