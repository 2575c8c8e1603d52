"""Resize (opset 10 and 11+) and Upsample: constant scales/sizes become output sizes
and per-dim scales, the only form the library's resize takes."""

from __future__ import annotations

import math

import numpy as np

from ._common import axis_in, check_attrs
from .registry import converter

_MODES = ("nearest", "linear", "cubic")
_CTMS = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nearest",
    "tf_crop_and_resize",
)
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_ATTRS = {
    "antialias",
    "axes",
    "coordinate_transformation_mode",
    "cubic_coeff_a",
    "exclude_outside",
    "extrapolation_value",
    "keep_aspect_ratio_policy",
    "mode",
    "nearest_mode",
}


def _floats(ctx, node, i: int, what: str):
    """Constant input ``i`` as floats; None if absent or empty (ONNX's "not given")."""
    if not ctx.has_input(node, i):
        return None
    data = np.asarray(ctx.const(node, i, what)).reshape(-1)
    return None if data.size == 0 else data


def _spread(values, axes, ndim: int, fill):
    """Per-axis values as a full-rank list (dims outside ``axes`` get fill[d])."""
    out = list(fill)
    for v, a in zip(values, axes, strict=True):
        out[a] = v
    return out


def _check_mode(ctx, node, name: str, value, allowed):
    if value not in allowed:
        ctx.fail(node, f"attribute '{name}' value {value!r} is not supported")


def _output_geometry(ctx, node, shape, axes):
    """(sizes, scales) over all dims from the scales or sizes input (opset 11+)."""
    ndim = len(shape)
    scales, sizes = _floats(ctx, node, 2, "scales"), _floats(ctx, node, 3, "sizes")
    if (scales is None) == (sizes is None):
        ctx.fail(node, "exactly one of the scales and sizes inputs must be given")
    if scales is not None:
        if len(scales) != len(axes):
            ctx.fail(node, f"scales has {len(scales)} values, expected {len(axes)}")
        full = _spread([float(s) for s in scales], axes, ndim, [1.0] * ndim)
        if any(s <= 0 for s in full):
            ctx.fail(node, f"scales must be positive, got {list(scales)}")
        return [int(full[d] * shape[d]) for d in range(ndim)], full
    if len(sizes) != len(axes):
        ctx.fail(node, f"sizes has {len(sizes)} values, expected {len(axes)}")
    out = _spread([int(s) for s in sizes], axes, ndim, shape)
    full = [out[d] / shape[d] for d in range(ndim)]
    policy = ctx.attr(node, "keep_aspect_ratio_policy", "stretch")
    _check_mode(
        ctx, node, "keep_aspect_ratio_policy", policy, ("stretch", "not_larger", "not_smaller")
    )
    if policy != "stretch":
        pick = min if policy == "not_larger" else max
        s = pick(full[a] for a in axes)
        full = [s if d in axes else 1.0 for d in range(ndim)]
        out = [int(s * shape[d] + 0.5) if d in axes else shape[d] for d in range(ndim)]
    return out, full


def _roi(ctx, node, axes, ndim: int):
    roi = _floats(ctx, node, 1, "roi")
    if roi is None:
        ctx.fail(node, "tf_crop_and_resize needs the roi input")
    n = len(axes)
    if len(roi) != 2 * n:
        ctx.fail(node, f"roi has {len(roi)} values, expected {2 * n}")
    starts = _spread([float(v) for v in roi[:n]], axes, ndim, [0.0] * ndim)
    ends = _spread([float(v) for v in roi[n:]], axes, ndim, [1.0] * ndim)
    return starts + ends


@converter("Resize")
def resize(ctx, node):
    check_attrs(ctx, node, _ATTRS)
    shape = list(ctx.value(node.input[0]).shape)
    if ctx.opset < 11:
        return [_legacy(ctx, node, shape, ctx.const(node, 1, "scales"))]
    ndim = len(shape)
    axes = ctx.attr(node, "axes")
    axes = list(range(ndim)) if axes is None else [axis_in(ctx, node, a, ndim) for a in axes]
    sizes, scales = _output_geometry(ctx, node, shape, axes)
    attrs = {
        "sizes": sizes,
        "scales": scales,
        "mode": ctx.attr(node, "mode", "nearest"),
        "coordinate_transformation_mode": ctx.attr(
            node, "coordinate_transformation_mode", "half_pixel"
        ),
        "nearest_mode": ctx.attr(node, "nearest_mode", "round_prefer_floor"),
        "cubic_coeff_a": float(ctx.attr(node, "cubic_coeff_a", -0.75)),
        "exclude_outside": int(ctx.attr(node, "exclude_outside", 0)),
    }
    _check_mode(ctx, node, "mode", attrs["mode"], _MODES)
    _check_mode(
        ctx, node, "coordinate_transformation_mode", attrs["coordinate_transformation_mode"], _CTMS
    )
    _check_mode(ctx, node, "nearest_mode", attrs["nearest_mode"], _NEAREST)
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize":
        attrs["roi"] = _roi(ctx, node, axes, ndim)
        attrs["extrapolation_value"] = float(ctx.attr(node, "extrapolation_value", 0.0))
    # Antialiasing only changes downsampling (it widens the filter to the scale).
    attrs["antialias"] = int(ctx.attr(node, "antialias", 0))
    _check_dtype(ctx, node, attrs["mode"])
    return [ctx.node("resize", node, [node.input[0]], **attrs)]


def _check_dtype(ctx, node, mode: str):
    dtype = ctx.value(node.input[0]).dtype
    if mode != "nearest" and dtype not in ("float32", "float64"):
        ctx.fail(node, f"mode {mode!r} on {dtype} data is not supported (float only)")


def _legacy(ctx, node, shape, scales):
    """Upsample and opset-10 Resize: asymmetric coordinates; nearest truncates when
    upsampling and rounds up when downsampling (as ONNX Runtime does)."""
    mode = ctx.attr(node, "mode", "nearest")
    if mode == "bilinear":  # Upsample-7's name for it
        mode = "linear"
    _check_mode(ctx, node, "mode", mode, ("nearest", "linear"))
    _check_dtype(ctx, node, mode)
    scales = [float(s) for s in np.asarray(scales).reshape(-1)]
    if len(scales) != len(shape) or min(scales) <= 0:
        ctx.fail(node, f"scales {scales} do not fit input shape {shape}")
    resized = [s for s in scales if not math.isclose(s, 1.0)]
    if mode == "nearest" and resized and min(resized) < 1 < max(resized):
        ctx.fail(node, "nearest mode mixing upsampled and downsampled dims is not supported")
    down = bool(resized) and max(resized) < 1
    return ctx.node(
        "resize",
        node,
        [node.input[0]],
        sizes=[int(s * n) for s, n in zip(scales, shape, strict=True)],
        scales=scales,
        mode=mode,
        coordinate_transformation_mode="asymmetric",
        nearest_mode="ceil" if down else "floor",
    )


@converter("Upsample")
def upsample(ctx, node):
    check_attrs(ctx, node, {"mode", "scales", "height_scale", "width_scale"})
    shape = list(ctx.value(node.input[0]).shape)
    if ctx.opset >= 9:
        scales = ctx.const(node, 1, "scales")
    elif ctx.attr(node, "scales") is not None:
        scales = ctx.attr(node, "scales")
    else:  # Upsample-1: NCHW with height/width scales
        scales = [1.0, 1.0, ctx.attr(node, "height_scale", 1.0), ctx.attr(node, "width_scale", 1.0)]
    return [_legacy(ctx, node, shape, scales)]
