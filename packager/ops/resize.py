"""Resize: nearest (all rounding modes), N-d linear and cubic interpolation, and the
antialias filter (widened to the scale) when linear or cubic downsampling.

attrs: sizes (output shape), scales (per dim, as used by the coordinate transform),
mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside,
roi and extrapolation_value (tf_crop_and_resize). Source coordinates are computed in
float64 in the same operation order as ONNX's reference so rounding decisions agree.
"""

from __future__ import annotations

import itertools
import math

from .. import te
from .registry import register_op

F64 = "float64"


def _c(v) -> te.Expr:
    return te.const(float(v), F64)


def _source_coord(i, d: int, n_in: int, attrs: dict):
    """Source coordinate (float64) of output index ``i`` along dim ``d``, and whether
    it must be range-checked (tf_crop_and_resize extrapolates outside the input)."""
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    scale = float(attrs["scales"][d])
    n_out = int(attrs["sizes"][d])
    width = scale * n_in  # ONNX uses the unrounded output length here
    y = te.cast(F64, i)
    if ctm == "half_pixel":
        return (y + _c(0.5)) / _c(scale) - _c(0.5)
    if ctm == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        return _c(offset) + (y + _c(0.5)) / _c(scale) - _c(0.5)
    if ctm == "pytorch_half_pixel":
        return _c(-0.5) if width == 1 else (y + _c(0.5)) / _c(scale) - _c(0.5)
    if ctm == "align_corners":
        return _c(0.0) if width == 1 else y * _c(n_in - 1) / _c(width - 1)
    if ctm == "asymmetric":
        return y / _c(scale)
    if ctm == "tf_half_pixel_for_nearest":
        return (y + _c(0.5)) / _c(scale)
    if ctm == "tf_crop_and_resize":
        roi = attrs["roi"]
        r0, r1 = float(roi[d]), float(roi[d + len(attrs["sizes"])])
        if width == 1:
            return _c((r1 - r0) * (n_in - 1) / 2) + _c(r0 * (n_in - 1))
        return y * _c(r1 - r0) * _c(n_in - 1) / _c(width - 1) + _c(r0 * (n_in - 1))
    raise ValueError(f"resize: unknown coordinate_transformation_mode {ctm!r}")


def _nearest_up(r, mode: str):
    """Whether the nearest pixel is x0 + 1 rather than x0 (r in (0, 1])."""
    table = {
        "round_prefer_floor": lambda: r > _c(0.5),
        "round_prefer_ceil": lambda: r >= _c(0.5),
        "floor": lambda: te.eq(r, _c(1.0)),
        "ceil": lambda: te.const(True, "bool"),
    }
    if mode not in table:
        raise ValueError(f"resize: unknown nearest_mode {mode!r}")
    return table[mode]()


def _cubic_weights(r, a: float) -> list[te.Expr]:
    """Keys cubic convolution weights of taps x0-1 .. x0+2 at fraction r."""
    A = _c(a)
    one = _c(1.0)

    def near(t):  # |t| <= 1
        return ((A + _c(2.0)) * t - (A + _c(3.0))) * t * t + one

    def far(t):  # 1 < |t| < 2
        return ((A * t - _c(5.0) * A) * t + _c(8.0) * A) * t - _c(4.0) * A

    return [far(r + one), near(r), near(one - r), far((one - r) + one)]


def _whole_upscale(d: int, n_in: int, attrs: dict) -> int:
    """The factor s when nearest resizing along ``d`` picks source pixel i // s for
    output i (0 otherwise): an integer upscale whose coordinate transform and rounding
    land every output of a group of s on the same pixel. Asymmetric puts output
    s*q + r at q + r/s (floor: q for every r; prefer-floor: q while r/s <= 1/2, so only
    s = 2); the half-pixel transforms at q + (r + 1/2)/s - 1/2, strictly within half a
    pixel of q (either round-to-nearest mode gives q)."""
    scale = float(attrs["scales"][d])
    s = int(round(scale))
    if attrs.get("mode", "nearest") != "nearest" or s < 2 or scale != s:
        return 0
    if int(attrs["sizes"][d]) != n_in * s:
        return 0
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    rounding = attrs.get("nearest_mode", "round_prefer_floor")
    halfway = ("round_prefer_floor", "round_prefer_ceil")
    fits = {
        "asymmetric": rounding == "floor" or (rounding == "round_prefer_floor" and s == 2),
        "half_pixel": rounding in halfway,
        "pytorch_half_pixel": rounding in halfway,
    }
    return s if fits.get(ctm, False) else 0


def _taps(i, d: int, n_in: int, attrs: dict):
    """(index, weight) pairs of dim ``d`` for output index ``i``; weight None means 1.
    Also the out-of-range condition for tf_crop_and_resize (or None)."""
    mode = attrs.get("mode", "nearest")
    if s := _whole_upscale(d, n_in, attrs):
        # integer indexing: the float64 coordinate, ceil and clamp per element kept the
        # FPN's x2 upsampling (and the concat reading it) out of vector code
        return [(i // s, None)], None
    x = _source_coord(i, d, n_in, attrs)
    outside = None
    if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        outside = te.any_of(x < _c(0.0), x > _c(n_in - 1))
    # x0 = ceil(x) - 1 and r = x - x0 in (0, 1]: ONNX prefers the left pixel at integers.
    x0f = te.call("ceil", x) - _c(1.0)
    r = x - x0f
    x0 = te.cast(te.INDEX, x0f)

    def clamp(j):
        return te.min_(te.max_(j, 0), n_in - 1)

    scale = float(attrs["scales"][d])
    if mode in ("linear", "cubic") and attrs.get("antialias") and scale < 1:
        offsets, ws = _antialias_taps(r, scale, mode, attrs.get("cubic_coeff_a", -0.75))
        return _weighted(x0, offsets, ws, n_in, attrs, clamp), outside
    if mode == "nearest":
        up = _nearest_up(r, attrs.get("nearest_mode", "round_prefer_floor"))
        return [(clamp(x0 + te.cast(te.INDEX, up)), None)], outside
    if mode == "linear":
        return [(clamp(x0), _c(1.0) - r), (clamp(x0 + 1), r)], outside
    if mode == "cubic":
        ws = _cubic_weights(r, attrs.get("cubic_coeff_a", -0.75))
        return _weighted(x0, (-1, 0, 1, 2), ws, n_in, attrs, clamp), outside
    raise ValueError(f"resize: unknown mode {mode!r}")


def _antialias_taps(r, scale: float, mode: str, a: float):
    """Offsets from x0 and normalized weights of the filter widened to 1/scale (the
    downsampling antialias filter): tap x0 + k sits at distance k - r from the source."""
    reach = 1 if mode == "linear" else 2
    start = math.floor(-reach / scale) + 1
    offsets = list(range(start, 2 - start))
    ws = [_kernel(_c(scale) * (_c(k) - r), mode, a) for k in offsets]
    total = ws[0]
    for w in ws[1:]:
        total = total + w
    return offsets, [w / total for w in ws]


def _kernel(t, mode: str, a: float) -> te.Expr:
    """The interpolation kernel's value at signed distance t (float64)."""
    t = te.select(t < _c(0.0), -t, t)
    if mode == "linear":
        return te.max_(_c(1.0) - t, _c(0.0))
    A = _c(a)
    near = ((A + _c(2.0)) * t - (A + _c(3.0))) * t * t + _c(1.0)
    far = ((A * t - _c(5.0) * A) * t + _c(8.0) * A) * t - _c(4.0) * A
    return te.select(t <= _c(1.0), near, te.select(t < _c(2.0), far, _c(0.0)))


def _weighted(x0, offsets, ws, n_in: int, attrs: dict, clamp):
    """(index, weight) taps at x0 + offsets; exclude_outside drops (and renormalizes
    away) the taps past the edges, else they read the edge pixel."""
    idx = [x0 + k for k in offsets]
    if attrs.get("exclude_outside", 0):
        ws = [
            te.select(te.all_of(j >= 0, j < n_in), w, _c(0.0)) for j, w in zip(idx, ws, strict=True)
        ]
        total = ws[0]
        for w in ws[1:]:
            total = total + w
        ws = [w / total for w in ws]
    return [(clamp(j), w) for j, w in zip(idx, ws, strict=True)]


def resized_dims(shape, attrs: dict) -> list[int]:
    """Dims that are actually resized (ONNX skips identity dims)."""
    roi = attrs.get("roi")
    nd = len(shape)

    def identity(d):
        same = math.isclose(float(attrs["scales"][d]), 1.0) and attrs["sizes"][d] == shape[d]
        full = roi is None or (math.isclose(roi[d], 0.0) and math.isclose(roi[d + nd], 1.0))
        return same and full

    return [d for d in range(nd) if not identity(d)]


@register_op("resize", "injective")
def resize(inputs, attrs):
    x = inputs[0]
    dims = resized_dims(x.shape, attrs)
    dt = x.dtype
    acc = dt if te.is_float(dt) else "float32"

    def f(*i):
        per_dim, outside = {}, []
        for d in dims:
            per_dim[d], out = _taps(i[d], d, x.shape[d], attrs)
            if out is not None:
                outside.append(out)
        total = None
        for combo in itertools.product(*(per_dim[d] for d in dims)):
            idx = list(i)
            w = None
            for d, (j, wd) in zip(dims, combo, strict=True):
                idx[d] = j
                if wd is not None:
                    w = wd if w is None else w * wd
            v = x[tuple(idx)]
            term = v if w is None else te.cast(acc, v) * te.cast(acc, w)
            total = term if total is None else total + term
        total = te.cast(dt, total)
        if outside:
            total = te.select(
                te.any_of(*outside), te.const(attrs.get("extrapolation_value", 0.0), dt), total
            )
        return total

    return [te.compute(attrs["sizes"], f, name="resize", tag="resize")]
