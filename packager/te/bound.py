"""Bound inference for compute_at: which region of a producer one iteration of a
consumer's loop needs.

The consumer's index expressions of the producer are evaluated with interval
arithmetic: loop variables inside the attach point range over constant
intervals, everything outside it is a fixed symbol. Affine forms, floordiv/
floormod by constants, min/max and selects are understood; anything else (or a
region whose extent is not a constant, or which may leave the tensor) falls back
to the whole dimension, which is always correct.
"""

from __future__ import annotations

from .expr import INDEX, Binary, Const, Expr, Load, Select, Tensor, Var, distinct, walk
from .simplify import Simplifier

Interval = tuple  # (lo Expr, hi Expr), inclusive


def _ic(v: int) -> Const:
    return Const(int(v), INDEX)


class _Eval:
    def __init__(self, ranging: dict, simp: Simplifier):
        self.ranging = ranging
        self.simp = simp
        self.memo: dict[int, tuple] = {}

    def free_of_ranging(self, e: Expr) -> bool:
        return self.ranging.keys().isdisjoint(walk(e))  # its keys are the loop Vars

    def __call__(self, e: Expr) -> Interval | None:
        got = self.memo.get(id(e))
        if got is None or got[0] is not e:
            got = self.memo[id(e)] = (e, self._eval(e))
        return got[1]

    def _eval(self, e: Expr) -> Interval | None:
        if isinstance(e, Var) and e in self.ranging:
            lo, hi = self.ranging[e]
            return (_ic(lo), _ic(hi))
        if self.free_of_ranging(e):
            return (e, e)
        if isinstance(e, Binary):
            return self._binary(e)
        if isinstance(e, Select):
            t, f = self(e.t), self(e.f)
            if t is None or f is None:
                return None
            return (Binary("min", t[0], f[0], INDEX), Binary("max", t[1], f[1], INDEX))
        return None

    def _binary(self, e: Binary) -> Interval | None:
        a, b = self(e.a), self(e.b)
        if a is None or b is None:
            return None
        op = e.op
        if op == "+":
            return (a[0] + b[0], a[1] + b[1])
        if op == "-":
            return (a[0] - b[1], a[1] - b[0])
        if op in ("min", "max"):
            return (Binary(op, a[0], b[0], INDEX), Binary(op, a[1], b[1], INDEX))
        k = e.b.value if isinstance(e.b, Const) else None
        if op == "*" and k is not None:
            return (a[0] * k, a[1] * k) if k >= 0 else (a[1] * k, a[0] * k)
        if k is not None and k > 0 and op in ("floordiv", "truncdiv"):
            # truncdiv only appears where the simplifier proved a >= 0
            return (Binary(op, a[0], e.b, INDEX), Binary(op, a[1], e.b, INDEX))
        if k is not None and k > 0 and op in ("floormod", "truncmod"):
            return (_ic(0), _ic(k - 1))
        return None


def index_intervals(exprs, tensor: Tensor, ranging: dict, simp: Simplifier) -> list | None:
    """Per dimension, the union (lo, hi) of the indices of ``tensor`` loaded in
    ``exprs``; None where unknown."""
    ev = _Eval(ranging, simp)
    dims: list = [None] * tensor.ndim
    found = [False] * tensor.ndim
    for load in distinct(list(exprs), Load):
        if load.tensor is not tensor:
            continue
        for d, idx in enumerate(load.indices):
            iv = ev(simp(idx))
            iv = None if iv is None else (simp(iv[0]), simp(iv[1]))
            dims[d] = iv if not found[d] else _union(dims[d], iv, simp)
            found[d] = True
    return dims


def _union(x, y, simp: Simplifier):
    if x is None or y is None:
        return None
    d_lo = simp(x[0] - y[0])
    d_hi = simp(x[1] - y[1])
    if not (isinstance(d_lo, Const) and isinstance(d_hi, Const)):
        return None
    return (x[0] if d_lo.value <= 0 else y[0], x[1] if d_hi.value >= 0 else y[1])


def infer_region(exprs, tensor: Tensor, ranging: dict, simp: Simplifier) -> list:
    """[(base Expr, extent int)] per dimension of ``tensor``: the region the
    expressions read, given ``ranging`` loop variables; ``simp`` knows the ranges
    of every loop variable (to check the region stays inside the tensor)."""
    region = []
    for d, iv in enumerate(index_intervals(exprs, tensor, ranging, simp)):
        full = (_ic(0), tensor.shape[d])
        if iv is None:
            region.append(full)
            continue
        ext = simp(iv[1] - iv[0] + 1)
        if not isinstance(ext, Const) or ext.value >= tensor.shape[d]:
            region.append(full)
            continue
        lo, _ = simp.bounds(iv[0])
        _, hi = simp.bounds(iv[1])
        inside = lo is not None and hi is not None and lo >= 0 and hi < tensor.shape[d]
        region.append((iv[0], max(int(ext.value), 1)) if inside else full)
    return region
