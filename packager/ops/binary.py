"""Broadcasting ops of two or more inputs: a table of op name -> scalar function.

Variadic ops (add, mul, mean: ONNX Sum, Max, Min, Mean) fold their
inputs left to right in one kernel. Integer division and modulo by zero give 0 instead
of trapping, as numpy does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from .. import te
from .broadcast import broadcast_compute
from .registry import register_op
from .scalar import bits, c, is_unsigned, require


def _div(a, b, attrs):
    if te.is_float(a.dtype):
        return a / b
    return te.select(te.eq(b, c(b, 0)), c(a, 0), a / b)


def _pow(a, b, attrs):
    # The result has the base's type; mixed or integer operands compute in double,
    # then convert (truncating for integers), as numpy's power(...).astype(base) does.
    if te.is_float(a.dtype) and a.dtype == b.dtype:
        return te.call("pow", a, b)
    wide = te.call("pow", te.cast("float64", a), te.cast("float64", b))
    return te.cast(a.dtype, wide)


def _mod(a, b, attrs):
    zero = c(a, 0)
    if te.is_float(a.dtype):
        r = te.call("fmod", a, b)
        if attrs.get("fmod", 0):
            return r
        # numpy.mod: the remainder takes the divisor's sign.
        wrong_sign = te.all_of(te.ne(r, zero), te.ne(r < zero, b < zero))
        return te.select(wrong_sign, r + b, r)
    op = "truncmod" if attrs.get("fmod", 0) else "floormod"
    return te.select(te.eq(b, zero), zero, te.binary(op, a, b))


def _bit_shift(a, b, attrs):
    direction = attrs.get("direction", "LEFT")
    if direction not in ("LEFT", "RIGHT"):
        raise ValueError(f"bit_shift direction must be LEFT or RIGHT, not {direction!r}")
    n, signed = bits(a.dtype), not is_unsigned(a.dtype)
    unsigned = "u" + a.dtype if signed else a.dtype
    # Shifting by b is multiplying or dividing by 2**b (exact in double for b < 64);
    # left shifts multiply in the unsigned type, so that they wrap like two's complement.
    power = te.call("pow", te.const(2.0, "float64"), te.cast("float64", b))
    if direction == "LEFT":
        shifted = te.cast(a.dtype, te.cast(unsigned, a) * te.cast(unsigned, power))
        return te.select(te.all_of(b >= c(b, 0), b < c(b, n)), shifted, c(a, 0))
    if not signed:
        return te.select(b < c(b, n), a / te.cast(a.dtype, power), c(a, 0))
    # Arithmetic right shift is floor division; by n - 1 bits or more (or a negative
    # count) only the sign is left, and 2**(n-1) would not fit the type anyway.
    sign = te.select(a < c(a, 0), c(a, -1), c(a, 0))
    in_range = te.all_of(b >= c(b, 0), b < c(b, n - 1))
    return te.select(in_range, te.binary("floordiv", a, te.cast(a.dtype, power)), sign)


def _bitwise(combine):
    """A bitwise op from a logical one, bit by bit: te has no bit operators, so bit k is
    floormod(floordiv(a, 2**k), 2) (floor division shifts negatives arithmetically) and
    the sign bit of a signed type is ``a < 0``, worth -2**(n-1). The C compiler turns
    the divisions by powers of two back into shifts."""

    def fn(a, b, attrs):
        n, signed = bits(a.dtype), not is_unsigned(a.dtype)
        out = c(a, 0)
        for k in range(n - 1 if signed else n):
            p = c(a, 2**k)
            bit_a, bit_b = (te.ne((v // p) % c(a, 2), c(a, 0)) for v in (a, b))
            out = out + te.select(combine(bit_a, bit_b), p, c(a, 0))
        if signed:
            top = combine(a < c(a, 0), b < c(b, 0))
            out = out + te.select(top, c(a, -(2 ** (n - 1))), c(a, 0))
        return out

    return fn


def _prelu(x, slope, attrs):
    return te.select(x < c(x, 0), x * slope, x)


def _mean(*args):
    return functools.reduce(lambda a, b: a + b, args) / c(args[0], len(args))


def _pairwise(fn):
    return lambda a, b, attrs: fn(a, b)


# name -> (accepted dtypes of the first input, fn(a, b, attrs)); both sides share a dtype
# unless listed in MIXED_DTYPES.
BINARY: dict[str, tuple[str, Callable]] = {
    "sub": ("numeric", lambda a, b, attrs: a - b),
    "div": ("numeric", _div),
    "pow": ("numeric", _pow),
    "mod": ("numeric", _mod),
    "bit_shift": ("int", _bit_shift),
    "prelu": ("signed", _prelu),
    "equal": ("any", _pairwise(te.eq)),
    "less": ("numeric", _pairwise(lambda a, b: a < b)),
    "greater": ("numeric", _pairwise(lambda a, b: a > b)),
    "less_equal": ("numeric", _pairwise(lambda a, b: a <= b)),
    "greater_equal": ("numeric", _pairwise(lambda a, b: a >= b)),
    "logical_and": ("bool", _pairwise(lambda a, b: te.binary("and", a, b))),
    "logical_or": ("bool", _pairwise(lambda a, b: te.binary("or", a, b))),
    "logical_xor": ("bool", _pairwise(te.ne)),
    "bitwise_and": ("int", _bitwise(lambda a, b: te.binary("and", a, b))),
    "bitwise_or": ("int", _bitwise(lambda a, b: te.binary("or", a, b))),
    "bitwise_xor": ("int", _bitwise(te.ne)),
}
MIXED_DTYPES = {"pow"}

# name -> (accepted dtypes, fn(*elements)) for ops of one or more inputs.
VARIADIC: dict[str, tuple[str, Callable]] = {
    "add": ("numeric", lambda *xs: functools.reduce(lambda a, b: a + b, xs)),
    "mul": ("numeric", lambda *xs: functools.reduce(lambda a, b: a * b, xs)),
    "maximum": ("numeric", lambda *xs: functools.reduce(te.max_, xs)),
    "minimum": ("numeric", lambda *xs: functools.reduce(te.min_, xs)),
    "mean": ("float", _mean),
}


def _check(name: str, kind: str, inputs: list[te.Tensor], same_dtype: bool = True) -> None:
    require(kind, inputs[0].dtype, name)
    if same_dtype and len({t.dtype for t in inputs}) > 1:
        raise ValueError(f"{name}: inputs differ in dtype ({', '.join(t.dtype for t in inputs)})")


def _make_binary(name: str, kind: str, fn):
    def compute(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
        if len(inputs) != 2:
            raise ValueError(f"{name} takes 2 inputs, got {len(inputs)}")
        _check(name, kind, inputs, name not in MIXED_DTYPES)
        return [broadcast_compute(inputs, lambda a, b: fn(a, b, attrs))]

    return compute


def _make_variadic(name: str, kind: str, fn):
    def compute(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
        if not inputs:
            raise ValueError(f"{name} takes at least one input")
        _check(name, kind, inputs)
        return [broadcast_compute(inputs, fn)]

    return compute


for _name, (_kind, _fn) in BINARY.items():
    register_op(_name, "broadcast")(_make_binary(_name, _kind, _fn))
for _name, (_kind, _fn) in VARIADIC.items():
    register_op(_name, "broadcast")(_make_variadic(_name, _kind, _fn))


@register_op("where", "broadcast")
def where(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
    cond, x, y = inputs
    if cond.dtype != "bool":
        raise ValueError(f"where: the condition must be bool, not {cond.dtype}")
    _check("where", "any", [x, y])
    return [broadcast_compute(inputs, te.select)]
