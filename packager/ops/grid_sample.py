"""GridSample: each output point reads the input at the coordinates its grid entry gives
(normalized to [-1, 1], the last spatial dim first), by nearest, linear or cubic
interpolation, out-of-range coordinates handled by zeros, border or reflection padding.

attrs: mode (nearest, linear, cubic), padding_mode (zeros, border, reflection),
align_corners. Coordinates are computed in float64 and rounded to float32, as ONNX's
reference does, so nearest-pixel choices agree; the taps are weighted in the data type.
"""

from __future__ import annotations

import itertools

from .. import te
from .registry import register_op

F64 = "float64"
CUBIC_A = -0.75


def _c(v) -> te.Expr:
    return te.const(float(v), F64)


class _Dim:
    """One spatial dim: its size, its borders and how a coordinate maps into it."""

    def __init__(self, size: int, attrs: dict):
        self.size = size
        self.align = bool(attrs.get("align_corners", 0))
        self.padding = attrs.get("padding_mode", "zeros")
        self.lo, self.hi = (0.0, size - 1.0) if self.align else (-0.5, size - 0.5)

    def coord(self, g: te.Expr) -> te.Expr:
        """The unnormalized coordinate of normalized ``g``, as the padding mode leaves it."""
        g = te.cast(F64, g)
        if self.align:
            x = (g + _c(1)) / _c(2) * _c(self.size - 1)
        else:
            x = ((g + _c(1)) * _c(self.size) - _c(1)) / _c(2)
        return te.cast(F64, te.cast("float32", x))

    def fix(self, x: te.Expr) -> te.Expr:
        """Border and reflection modes move a coordinate outside the borders inside."""
        if self.padding == "zeros":
            return x
        outside = te.any_of(x < _c(self.lo), x > _c(self.hi))
        if self.padding == "border":
            inside = te.min_(te.max_(x, _c(0)), _c(self.size - 1))
        else:
            inside = self.reflect(x)
        return te.select(outside, inside, x)

    def reflect(self, x: te.Expr) -> te.Expr:
        """Mirror ``x`` at the borders until it lies between them."""
        lo, hi = _c(self.lo), _c(self.hi)
        span = self.hi - self.lo
        if span <= 0:
            return lo
        below = x < lo
        dist = te.select(below, lo - x, x - hi)
        turns = te.call("floor", dist / _c(span))
        rest = dist - turns * _c(span)
        even = te.eq(turns - _c(2) * te.call("floor", turns / _c(2)), _c(0))
        near, far = te.select(below, lo + rest, hi - rest), te.select(below, hi - rest, lo + rest)
        inside = te.all_of(x >= lo, x <= hi)
        return te.select(inside, x, te.select(even, near, far))

    def tap(self, j: te.Expr):
        """(index in bounds, validity or None) of integer pixel ``j`` (INDEX)."""
        last = self.size - 1
        if self.padding == "zeros":
            valid = te.all_of(j >= 0, j < self.size)
        elif self.padding == "border":
            valid = None
        else:
            j = te.cast(te.INDEX, self.reflect(te.cast(F64, j)))
            valid = None
        return te.min_(te.max_(j, 0), last), valid


def _cubic(t: te.Expr, dtype: str) -> list[te.Expr]:
    """Keys' cubic weights of the four taps around fraction ``t`` in [0, 1)."""
    a = CUBIC_A

    def near(s):
        return ((a + 2) * s - (a + 3)) * s * s + 1

    def far(s):
        return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a

    one = _c(1)
    ws = [far(t + one), near(t), near(one - t), far(_c(2) - t)]
    return [te.cast(dtype, w) for w in ws]


def _taps(dim: _Dim, x: te.Expr, mode: str, dtype: str):
    """(index, validity, weight) of each tap of one dim; weight None means 1."""
    if mode == "nearest":
        return [(*dim.tap(te.cast(te.INDEX, x)), None)]
    x0f = te.call("floor", x)
    t = x - x0f
    x0 = te.cast(te.INDEX, x0f)
    if mode == "linear":
        ws = [te.cast(dtype, _c(1) - t), te.cast(dtype, t)]
        return [(*dim.tap(x0 + k), w) for k, w in zip((0, 1), ws, strict=True)]
    ws = _cubic(t, dtype)
    return [(*dim.tap(x0 + k), w) for k, w in zip((-1, 0, 1, 2), ws, strict=True)]


@register_op("grid_sample", "opaque")
def grid_sample(inputs, attrs):
    x, grid = inputs
    r = x.ndim - 2
    dims = [_Dim(n, attrs) for n in x.shape[2:]]
    mode = attrs.get("mode", "linear")
    dt = x.dtype
    zero = te.const(0, dt)
    out_shape = (x.shape[0], x.shape[1], *grid.shape[1:-1])

    def f(n, c, *o):
        per_dim = []
        for s, dim in enumerate(dims):
            xs = dim.coord(grid[(n, *o, r - 1 - s)])
            if mode == "nearest":
                xs = te.call("round", xs)  # half to even, as ONNX's reference
            per_dim.append(_taps(dim, dim.fix(xs), mode, dt))
        total = None
        for combo in itertools.product(*per_dim):
            v = x[(n, c, *(j for j, _, _ in combo))]
            valid = [ok for _, ok, _ in combo if ok is not None]
            if valid:
                v = te.select(te.all_of(*valid), v, zero)
            for _, _, w in combo:
                v = v if w is None else v * w
            total = v if total is None else total + v
        return total

    return [te.compute(out_shape, f, name="grid_sample", tag="injective")]
