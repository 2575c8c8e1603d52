"""Bounded-error approximations of math functions as plain tensor-expression arithmetic.

A call of the C library (erff, expf) keeps a vectorized loop scalar: the C printer turns
only + - * / and compare-selects into vector code. These approximations are made of those
alone, so a Gelu or an Erf over a row runs in vectors of the board's width.

erf(x) for float32: x * P(x^2) / Q(x^2), P and Q of degree 5 in x^2, on x clamped to
[-ERF_CLAMP, ERF_CLAMP] (erf(3.92) = 1 - 2.7e-8: beyond it the float32 value is 1).
The coefficients were fitted for this module by iterated weighted least squares (Loeb's
method) of erf(x)/x on [0, 3.92]. Max error against float64 erf, evaluated in float32
over [-6, 6]: absolute 3.8e-7, relative 3.8e-7 (tests/ops/test_approx.py checks 1e-6 on
the compiled kernel). NaN stays NaN (the clamp is a compare-select, false for NaN).
"""

from __future__ import annotations

from .. import te
from .scalar import c

ERF_CLAMP = 3.92
ERF_P = (
    1.1283791065216064,
    0.18366537988185883,
    0.05197157338261604,
    0.0035086143761873245,
    0.0002847204159479588,
    2.175400368287228e-06,
)
ERF_Q = (
    1.0,
    0.49610239267349243,
    0.11142697930335999,
    0.014448944479227066,
    0.0011107436148449779,
    3.938157169613987e-05,
)


def _horner(t: te.Expr, coeffs) -> te.Expr:
    acc = c(t, coeffs[-1])
    for k in reversed(coeffs[:-1]):
        acc = acc * t + c(t, k)
    return acc


def erf(x: te.Expr) -> te.Expr:
    """erf(x): the rational approximation for float32, the C library's for float64."""
    if x.dtype != "float32":
        return te.call("erf", x)
    lo, hi = c(x, -ERF_CLAMP), c(x, ERF_CLAMP)
    xc = te.select(x > hi, hi, te.select(x < lo, lo, x))
    t = xc * xc
    return xc * _horner(t, ERF_P) / _horner(t, ERF_Q)
