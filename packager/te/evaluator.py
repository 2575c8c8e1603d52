"""A numpy interpreter of tensor expressions: checks computes without the C path, and
evaluates library nodes whose inputs are all constants at package time.

Each compute is evaluated at once over a grid of its data axes followed by its
reduce axes (broadcast numpy arrays); loads clip their indices because both sides
of a select are evaluated here.
"""

from __future__ import annotations

import numpy as np

from ..graph.ir import np_dtype
from . import expr as te
from .visitor import dispatch

_BIN = {
    "+": np.add,
    "-": np.subtract,
    "*": np.multiply,
    "min": np.minimum,
    "max": np.maximum,
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
    "==": np.equal,
    "!=": np.not_equal,
    "and": np.logical_and,
    "or": np.logical_or,
    "floordiv": np.floor_divide,
    "floormod": np.mod,
    ">>": np.right_shift,
}
_CALL = {"fabs": np.abs, "round": np.rint, "isnan": np.isnan, "isinf": np.isinf}
_RED = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "nanmax": np.fmax.reduce}


def _div(a, b, dtype):
    if te.is_float(dtype):
        return np.true_divide(a, b)
    q = np.trunc(np.true_divide(a, np.where(b == 0, 1, b)))
    return q.astype(np_dtype(dtype))


class _Eval:
    def __init__(self, env: dict, values: dict):
        self.env, self.values = env, values
        self.memo: dict[int, np.ndarray] = {}

    def __call__(self, e: te.Expr):
        k = id(e)
        if k not in self.memo:
            self.memo[k] = self._eval(e)
        return self.memo[k]

    def _eval(self, e):
        return dispatch(self, e, self._unknown)

    def _unknown(self, e):
        raise TypeError(f"cannot evaluate {type(e).__name__}")

    def visit_Var(self, e: te.Var):
        return self.env[e]

    def visit_Const(self, e: te.Const):
        return np.array(e.value, dtype=np_dtype(e.dtype))

    def visit_Binary(self, e: te.Binary):
        a, b = self(e.a), self(e.b)
        if e.op in ("/", "truncdiv"):
            return _div(a, b, e.a.dtype)
        if e.op == "truncmod":
            return np.fmod(a, b)
        with np.errstate(all="ignore"):
            out = _BIN[e.op](a, b)
        return out.astype(np_dtype(e.dtype))

    def visit_Unary(self, e: te.Unary):
        a = self(e.a)
        return np.logical_not(a) if e.op == "not" else np.negative(a)

    def visit_Cast(self, e: te.Cast):
        a = self(e.a)
        if te.is_float(e.a.dtype) and not te.is_float(e.dtype) and e.dtype != "bool":
            a = np.trunc(a)
        return a.astype(np_dtype(e.dtype))

    def visit_Call(self, e: te.Call):
        args = [self(a) for a in e.args]
        fn = _CALL.get(e.func) or getattr(np, {"pow": "power"}.get(e.func, e.func), None)
        if fn is None:
            import scipy.special as sp  # erf

            fn = getattr(sp, e.func)
        with np.errstate(all="ignore"):
            return np.asarray(fn(*args)).astype(np_dtype(e.dtype))

    def visit_Select(self, e: te.Select):
        return np.where(self(e.cond), self(e.t), self(e.f)).astype(np_dtype(e.dtype))

    def visit_Load(self, e: te.Load):
        data = self.values[id(e.tensor)]
        if data.ndim == 0:
            return data
        idx = [np.clip(self(i), 0, n - 1) for i, n in zip(e.indices, data.shape, strict=True)]
        return data[tuple(idx)]


def _run_compute(op: te.ComputeOp, values: dict) -> np.ndarray:
    body = op.body
    red = body.axes if isinstance(body, te.Reduce) else ()
    ivs = list(op.axis) + list(red)
    extents = [iv.extent for iv in ivs]
    env = {}
    for k, iv in enumerate(ivs):
        shape = [1] * len(ivs)
        shape[k] = iv.extent
        env[iv.var] = np.arange(iv.extent, dtype=np.int64).reshape(shape)
    ev = _Eval(env, values)
    dt = np_dtype(body.dtype)
    if not red:
        return np.broadcast_to(ev(body), extents).astype(dt)
    v = np.broadcast_to(ev(body.body), extents).astype(dt)
    axes = tuple(range(len(op.axis), len(ivs)))
    ident = _identity(body.combiner, body.dtype)
    if body.where is not None:
        mask = np.broadcast_to(ev(body.where), extents)
        v = np.where(mask, v, ident)
    return _RED[body.combiner](v, axis=axes, initial=ident).astype(dt)


def _identity(combiner: str, dtype: str):
    """The value of an empty reduction."""
    dt = np_dtype(dtype)
    if combiner in ("sum", "prod"):
        return np.array(0 if combiner == "sum" else 1, dtype=dt)
    up = combiner in ("max", "nanmax")
    if dtype == "bool":
        return np.array(not up)
    if te.is_float(dtype):
        return np.array(-np.inf if up else np.inf, dtype=dt)
    info = np.iinfo(dt)
    return np.array(info.min if up else info.max, dtype=dt)


def evaluate(outputs: list[te.Tensor], feeds: dict) -> list[np.ndarray]:
    """Values of ``outputs``; ``feeds`` maps each placeholder Tensor to an array."""
    values = {id(t): np.asarray(a) for t, a in feeds.items()}

    def go(t: te.Tensor):
        if id(t) in values:
            return
        if isinstance(t.op, te.PlaceholderOp):
            raise KeyError(f"no value fed for placeholder {t.name}")
        for dep in t.op.input_tensors:
            go(dep)
        values[id(t)] = _run_compute(t.op, values)

    for t in outputs:
        go(t)
    return [values[id(t)] for t in outputs]


def grid_elements(outputs: list[te.Tensor]) -> int:
    """The largest grid (data axes times reduce axes) ``evaluate`` builds for ``outputs``:
    its memory is this many elements per array, so callers can refuse huge ones."""
    most, seen, stack = 0, set(), list(outputs)
    while stack:
        t = stack.pop()
        if id(t) in seen or not isinstance(t.op, te.ComputeOp):
            continue
        seen.add(id(t))
        n = 1
        for iv in list(t.op.axis) + list(t.op.reduce_axis):
            n *= iv.extent
        most = max(most, n)
        stack.extend(t.op.input_tensors)
    return most
