"""Scalar building blocks shared by the elementwise and broadcast ops."""

from __future__ import annotations

from .. import te


def c(like: te.Expr, value) -> te.Const:
    """A constant of ``like``'s dtype."""
    return te.const(value, like.dtype)


def isnan(x: te.Expr) -> te.Expr:
    return te.call("isnan", x, dtype="bool") if te.is_float(x.dtype) else te.const(False, "bool")


def absolute(x: te.Expr) -> te.Expr:
    if te.is_float(x.dtype):
        return te.call("fabs", x)
    if x.dtype.startswith("uint") or x.dtype == "bool":
        return x
    return te.select(x < c(x, 0), -x, x)


def is_unsigned(dtype: str) -> bool:
    return dtype.startswith("uint") or dtype == "bool"


def bits(dtype: str) -> int:
    return 8 if dtype == "bool" else int("".join(ch for ch in dtype if ch.isdigit()))


def require(kind: str, dtype: str, op: str) -> None:
    """ValueError unless ``dtype`` is of ``kind``: float, int, bool, numeric or any."""
    ok = {
        "float": te.is_float(dtype),
        "int": dtype in te.INT_DTYPES,
        "signed": te.is_float(dtype) or dtype.startswith("int"),
        "bool": dtype == "bool",
        "numeric": dtype != "bool",
        "any": True,
    }[kind]
    if not ok:
        raise ValueError(f"{op} does not take {dtype} inputs ({kind} only)")
