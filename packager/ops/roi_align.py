"""RoiAlign: each region of interest is cut into output_height x output_width bins, each
bin sampled on a fixed sampling_ratio x sampling_ratio grid by bilinear interpolation,
the samples averaged (mode avg) or maxed (mode max: the largest weighted corner, as
ONNX's reference defines it). A sample more than one pixel outside the input counts 0.

attrs: output_height, output_width, sampling_ratio (> 0), spatial_scale, mode,
half_pixel (coordinate_transformation_mode half_pixel rather than output_half_pixel).
"""

from __future__ import annotations

from .. import te
from .indexing import safe_index
from .registry import register_op

F64 = "float64"


def _c(v) -> te.Expr:
    return te.const(float(v), F64)


class _Axis:
    """Sample coordinates along one spatial axis of one roi."""

    def __init__(self, start, end, bins: int, samples: int, size: int, half_pixel: bool):
        extent = end - start
        if not half_pixel:
            extent = te.max_(extent, _c(1))
        self.start, self.bin = start, extent / _c(bins)
        self.samples, self.size = samples, size

    def coord(self, out_i, sample_i) -> te.Expr:
        i, s = te.cast(F64, out_i), te.cast(F64, sample_i)
        return self.start + i * self.bin + (s + _c(0.5)) * self.bin / _c(self.samples)

    def corners(self, v: te.Expr):
        """(low index, high index, weight of low, weight of high) around coordinate v."""
        last = self.size - 1
        v = te.max_(v, _c(0))
        low = te.min_(te.cast(te.INDEX, te.min_(v, _c(last))), te.const(last, te.INDEX))
        edge = low >= last
        high = te.select(edge, low, low + 1)
        frac = te.select(edge, _c(0), v - te.cast(F64, low))
        return low, high, _c(1) - frac, frac

    def outside(self, v: te.Expr) -> te.Expr:
        return te.any_of(v < _c(-1), v > _c(self.size))


@register_op("roi_align", "opaque")
def roi_align(inputs, attrs):
    x, rois, batch = inputs
    n, channels, height, width = x.shape
    out_h, out_w = int(attrs["output_height"]), int(attrs["output_width"])
    samples = int(attrs["sampling_ratio"])
    scale = float(attrs.get("spatial_scale", 1.0))
    half = bool(attrs.get("half_pixel", 1))
    offset = 0.5 if half else 0.0
    dt = x.dtype
    sy, sx = te.reduce_axis(samples, "sy"), te.reduce_axis(samples, "sx")
    use_max = attrs.get("mode", "avg") == "max"

    def corner(r, k):
        return te.cast(F64, rois[r, k]) * _c(scale) - _c(offset)

    def f(r, c, ph, pw):
        ya = _Axis(corner(r, 1), corner(r, 3), out_h, samples, height, half)
        xa = _Axis(corner(r, 0), corner(r, 2), out_w, samples, width, half)
        yy, xx = ya.coord(ph, sy.var), xa.coord(pw, sx.var)
        b = safe_index(batch[(r,)], n)
        y0, y1, wy0, wy1 = ya.corners(yy)
        x0, x1, wx0, wx1 = xa.corners(xx)
        terms = [
            te.cast(dt, wy * wx) * x[b, c, yi, xi]
            for yi, wy in ((y0, wy0), (y1, wy1))
            for xi, wx in ((x0, wx0), (x1, wx1))
        ]
        zero = te.const(0, dt)
        if use_max:
            best = te.max_(te.max_(terms[0], terms[1]), te.max_(terms[2], terms[3]))
            v = te.select(te.any_of(ya.outside(yy), xa.outside(xx)), zero, best)
            return te.max_reduce(v, [sy, sx])
        v = te.select(te.any_of(ya.outside(yy), xa.outside(xx)), zero, sum_of(terms))
        return te.sum(v, [sy, sx])

    pooled = te.compute(
        (rois.shape[0], channels, out_h, out_w), f, name="roi_align_pool", tag="reduce"
    )
    if use_max:
        return [pooled]
    count = te.const(samples * samples, dt)
    return [
        te.compute(pooled.shape, lambda *i: pooled[i] / count, name="roi_align", tag="elemwise")
    ]


def sum_of(terms):
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total
