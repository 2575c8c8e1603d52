"""DeformConv (2-D): a convolution whose every kernel tap reads the input at its regular
position moved by a learned offset, bilinearly (zero outside the input, the sampling
GridSample does with align_corners), each tap scaled by an optional mask.

One reduction over (input channels of the group, kernel rows, kernel columns) per output
element; the samples are computed inside it, so no sampled-column buffer is built.
attrs: strides, pads (begins then ends), dilations, group, offset_group, kernel_shape.
"""

from __future__ import annotations

import itertools

from .. import te
from .grid_sample import _Dim, _taps
from .registry import register_op

F64 = "float64"


def _c(v) -> te.Expr:
    return te.const(float(v), F64)


@register_op("deform_conv", "opaque")
def deform_conv(inputs, attrs):
    x, w, offset = inputs[:3]
    bias = inputs[3] if len(inputs) > 3 else None
    mask = inputs[4] if len(inputs) > 4 else None
    n, ic, ih, iw = x.shape
    oc, icg, kh, kw = w.shape
    oh, ow = offset.shape[2:]
    group, ogroups = int(attrs.get("group", 1)), int(attrs.get("offset_group", 1))
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilations"]
    ph, pw = attrs["pads"][:2]
    ocg, ics_per_og = oc // group, ic // ogroups
    dims = [_Dim(ih, {"align_corners": 1}), _Dim(iw, {"align_corners": 1})]
    dt = x.dtype
    zero = te.const(0, dt)
    rc, ry, rx = te.reduce_axis(icg, "rc"), te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")

    def sample(b, c, pos):
        """Bilinear read of channel c at (row, column) ``pos`` (float64 pixels)."""
        taps = []
        for d, p in zip(dims, pos, strict=True):
            norm = p / _c(d.size - 1) * _c(2) - _c(1)  # as GridSample's normalized grid
            taps.append(_taps(d, d.coord(norm), "linear", dt))
        total = None
        for (yi, yok, wy), (xi, xok, wx) in itertools.product(*taps):
            v = te.select(te.all_of(yok, xok), x[b, c, yi, xi], zero) * wy * wx
            total = v if total is None else total + v
        return total

    def f(b, o, i, j):
        c = (o // ocg) * icg + rc.var
        og = c // ics_per_og
        tap = (og * kh + ry.var) * kw + rx.var
        row = _c(-ph) + te.cast(F64, i * sh + ry.var * dh) + te.cast(F64, offset[b, tap * 2, i, j])
        col = (
            _c(-pw)
            + te.cast(F64, j * sw + rx.var * dw)
            + te.cast(F64, offset[b, tap * 2 + 1, i, j])
        )
        v = sample(b, c, (row, col)) * w[o, rc.var, ry.var, rx.var]
        if mask is not None:
            v = v * mask[b, tap, i, j]
        return te.sum(v, [rc, ry, rx])

    conv = te.compute((n, oc, oh, ow), f, name="deform_conv_sum", tag="reduce")
    if bias is None:
        return [conv]
    return [
        te.compute(
            conv.shape,
            lambda b, o, i, j: conv[b, o, i, j] + bias[o],
            name="deform_conv",
            tag="elemwise",
        )
    ]
