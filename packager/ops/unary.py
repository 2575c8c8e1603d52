"""Elementwise ops of one input: a table of op name -> (accepted dtypes, scalar function).

Each scalar function gets the input element and the node's attrs and returns the output
element; attrs the converter left out take the ONNX defaults. Constants take the input's
dtype, so float64 models compute in double throughout.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .. import te
from . import approx
from .broadcast import elementwise_compute
from .registry import register_op
from .scalar import absolute, c, isnan, require


def _call(func: str):
    return lambda x, a: te.call(func, x)


def _relu(x, a):
    return te.select(x < c(x, 0), c(x, 0), x)


def _leaky_relu(x, a):
    return te.select(x < c(x, 0), x * c(x, a.get("alpha", 0.01)), x)


def _sigmoid(x, a):
    return c(x, 1) / (c(x, 1) + te.call("exp", -x))


def _hard_sigmoid(x, a):
    y = x * c(x, a.get("alpha", 0.2)) + c(x, a.get("beta", 0.5))
    return te.min_(te.max_(y, c(x, 0)), c(x, 1))


def _hard_swish(x, a):
    return x * _hard_sigmoid(x, {"alpha": 1 / 6, "beta": 0.5})


def _swish(x, a):
    return x * _sigmoid(x * c(x, a.get("alpha", 1.0)), a)


def _sign(x, a):
    # 0 and NaN map to themselves.
    if te.is_float(x.dtype) or x.dtype.startswith("int"):
        return te.select(x > c(x, 0), c(x, 1), te.select(x < c(x, 0), c(x, -1), x))
    return te.select(x > c(x, 0), c(x, 1), c(x, 0))


def _softplus(x, a):
    # max(x, 0) + log(1 + exp(-|x|)): no overflow for large |x|.
    pos = te.select(x > c(x, 0), x, c(x, 0))
    return pos + te.call("log", c(x, 1) + te.call("exp", -absolute(x)))


def _softsign(x, a):
    return x / (c(x, 1) + absolute(x))


def _elu(x, a):
    alpha = c(x, a.get("alpha", 1.0))
    return te.select(x < c(x, 0), alpha * (te.call("exp", x) - c(x, 1)), x)


def _selu(x, a):
    alpha = c(x, a.get("alpha", 1.67326319217681884765625))
    gamma = c(x, a.get("gamma", 1.05070102214813232421875))
    return te.select(x > c(x, 0), gamma * x, gamma * (alpha * te.call("exp", x) - alpha))


def _celu(x, a):
    alpha = c(x, a.get("alpha", 1.0))
    neg = alpha * (te.call("exp", x / alpha) - c(x, 1))
    return te.select(x > c(x, 0), x, te.select(x < c(x, 0), neg, x))


def _thresholded_relu(x, a):
    return te.select(x > c(x, a.get("alpha", 1.0)), x, c(x, 0))


def _shrink(x, a):
    bias, lambd = a.get("bias", 0.0), a.get("lambd", 0.5)
    if not te.is_float(x.dtype):  # integer inputs: the attrs act as integers of x's type
        bias, lambd = int(bias), int(lambd)
    lo = te.select(x < c(x, -lambd), x + c(x, bias), c(x, 0))
    return te.select(x > c(x, lambd), x - c(x, bias), lo)


def _mish(x, a):
    return x * te.call("tanh", _softplus(x, a))


def _gelu(x, a):
    half, one = c(x, 0.5), c(x, 1)
    if a.get("approximate", "none") == "tanh":
        inner = c(x, math.sqrt(2 / math.pi)) * (x + c(x, 0.044715) * x * x * x)
        return half * x * (one + te.call("tanh", inner))
    return half * x * (one + approx.erf(x * c(x, 1 / math.sqrt(2))))


def _isinf(x, a):
    pos, neg = a.get("detect_positive", 1), a.get("detect_negative", 1)
    inf = te.call("isinf", x, dtype="bool")
    if pos and neg:
        return inf
    if not pos and not neg:
        return te.const(False, "bool")
    return te.all_of(inf, x > c(x, 0) if pos else x < c(x, 0))


def _bitwise_not(x, a):
    if x.dtype.startswith("uint"):
        return c(x, 2 ** int(x.dtype[4:]) - 1) - x
    return -x - c(x, 1)


def _cast(x, dtype):
    if dtype not in te.DTYPES:
        raise ValueError(f"cannot cast to {dtype}")
    if dtype == "bool" and x.dtype != "bool":
        return te.ne(x, c(x, 0))  # NaN is true, as in numpy
    return te.cast(dtype, x)


def _clip(x, a):
    # Lower bound first, then the upper one: with min > max every value becomes max.
    # Comparisons are false for NaN, which therefore passes through like numpy.clip.
    lo, hi = a.get("min"), a.get("max")
    y = x
    if lo is not None:
        y = te.select(y < c(x, lo), c(x, lo), y)
    if hi is not None:
        y = te.select(y > c(x, hi), c(x, hi), y)
    return y


UNARY: dict[str, tuple[str, Callable[[te.Expr, dict], te.Expr]]] = {
    "relu": ("numeric", _relu),
    "leaky_relu": ("float", _leaky_relu),
    "sigmoid": ("float", _sigmoid),
    "hard_sigmoid": ("float", _hard_sigmoid),
    "hard_swish": ("float", _hard_swish),
    "swish": ("float", _swish),
    "clip": ("numeric", _clip),
    "neg": ("signed", lambda x, a: -x),
    "abs": ("numeric", lambda x, a: absolute(x)),
    "reciprocal": ("float", lambda x, a: c(x, 1) / x),
    "sign": ("numeric", _sign),
    "softplus": ("float", _softplus),
    "softsign": ("float", _softsign),
    "elu": ("float", _elu),
    "selu": ("float", _selu),
    "celu": ("float", _celu),
    "thresholded_relu": ("float", _thresholded_relu),
    "shrink": ("numeric", _shrink),
    "mish": ("float", _mish),
    "gelu": ("float", _gelu),
    "erf": ("float", lambda x, a: approx.erf(x)),
    "isnan": ("float", lambda x, a: isnan(x)),
    "isinf": ("float", _isinf),
    "logical_not": ("bool", lambda x, a: te.logical_not(x)),
    "bitwise_not": ("int", _bitwise_not),
    "identity": ("any", lambda x, a: x),
    "cast": ("any", lambda x, a: _cast(x, a["dtype"])),
}
# Functions of the C math library, named alike (round is half to even).
for _f in (
    "sqrt exp log tanh floor ceil round sin cos tan asin acos atan sinh cosh asinh acosh atanh"
).split():
    UNARY[_f] = ("float", _call(_f))


def _make(name: str, kind: str, fn):
    def compute(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
        (x,) = inputs
        require(kind, x.dtype, name)
        return [elementwise_compute(x, lambda e: fn(e, attrs))]

    compute.__name__ = name
    return compute


for _name, (_kind, _fn) in UNARY.items():
    register_op(_name, "elementwise")(_make(_name, _kind, _fn))
