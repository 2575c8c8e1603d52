"""AffineGrid: the sampling grid (N, H, W, 2) or (N, D, H, W, 3) of a batch of affine
matrices theta, each output point theta applied to its base coordinates (x, y[, z], 1),
normalized to [-1, 1] (pixel corners with align_corners, pixel centres without)."""

from __future__ import annotations

from .. import te
from .registry import register_op

F64 = "float64"


def _base(i, n: int, align: bool) -> te.Expr:
    """The normalized coordinate of index i of a dim of n points (float64)."""
    i = te.cast(F64, i)
    if align:
        step = 2.0 / (n - 1) if n > 1 else 0.0
        return te.const(-1.0, F64) + i * te.const(step, F64)
    step = 2.0 / n
    return te.const(-1.0 + step / 2, F64) + i * te.const(step, F64)


@register_op("affine_grid", "injective")
def affine_grid(inputs, attrs):
    """attrs: size (N, C, spatial...), align_corners."""
    (theta,) = inputs
    spatial = list(attrs["size"][2:])
    r = len(spatial)
    align = bool(attrs.get("align_corners", 0))
    shape = (theta.shape[0], *spatial, r)

    def f(n, *i):
        pos, k = i[:r], i[r]
        # theta's columns take (x, y[, z]): the last spatial dim first
        coords = [_base(pos[r - 1 - c], spatial[r - 1 - c], align) for c in range(r)]
        total = te.cast(F64, theta[n, k, r])
        for c, v in enumerate(coords):
            total = total + te.cast(F64, theta[n, k, c]) * v
        return te.cast(theta.dtype, total)

    return [te.compute(shape, f, name="affine_grid", tag="injective")]
