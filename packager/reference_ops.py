"""Op implementations that replace onnx's reference evaluator's where it is wrong.

The evaluator (``onnx.reference.ReferenceEvaluator``) computes self-test outputs when
ONNX Runtime is missing or fails. Some of its ops ignore the semantics of older opsets
(Softmax before 13 flattens the input at ``axis``; BatchNormalization 7 and 9 run in
inference mode), miss attribute values (MaxPool's SAME_LOWER, LpPool's ceil_mode with
dilations, Pad's negative pads) or are absent (GlobalLpPool, Reshape-1, Upsample with
an attribute or fractional scales, Resize-10). Each class here follows the ONNX spec of
every opset version of one op, for inference, and is handed to the evaluator with
``new_ops`` (it replaces the evaluator's op of the same name at every opset).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx.reference.op_run import OpRun


class SpecOp(OpRun):
    """An op whose attribute defaults come from the schema of the model's opset (the
    evaluator would take the newest schema's for a replaced op)."""

    op_domain = ""

    def __init__(self, onnx_node, run_params):
        self.opset = run_params["opsets"].get("", onnx.defs.onnx_opset_version())
        try:
            schema = onnx.defs.get_schema(onnx_node.op_type, self.opset)
        except onnx.defs.SchemaError:
            schema = None
        super().__init__(onnx_node, run_params, schema=schema)

    def stock(self, opset: int | None = None) -> OpRun:
        """The evaluator's own implementation of this node, for the cases it gets right."""
        from onnx.reference.ops import load_op

        cls = load_op("", self.onnx_node.op_type, opset or self.opset)
        return cls(self.onnx_node, self.run_params)


def _flat_or_axis(x: np.ndarray, axis: int, opset: int, fn) -> np.ndarray:
    """``fn(x2d, axis=1)`` on x coerced to 2-D at ``axis`` (opset < 13) or
    ``fn(x, axis=axis)`` (13+): before opset 13 the op normalizes over all dims from
    ``axis`` on, not over ``axis`` alone."""
    if opset >= 13:
        return fn(x, axis=axis % x.ndim)
    a = axis % max(x.ndim, 1)
    lead = math.prod(x.shape[:a])
    return fn(x.reshape(lead, -1), axis=1).reshape(x.shape)


def _log_softmax(x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _hardmax(x, axis):
    y = np.zeros_like(x)
    np.put_along_axis(y, np.expand_dims(x.argmax(axis=axis), axis), 1, axis=axis)
    return y


class Softmax(SpecOp):
    def _run(self, x, axis=None, **_):
        if x.size == 0:
            return (x,)
        y = _flat_or_axis(x, axis, self.opset, lambda t, axis: np.exp(_log_softmax(t, axis)))
        return (y.astype(x.dtype),)


class LogSoftmax(SpecOp):
    def _run(self, x, axis=None, **_):
        if x.size == 0:
            return (x,)
        return (_flat_or_axis(x, axis, self.opset, _log_softmax).astype(x.dtype),)


class Hardmax(SpecOp):
    def _run(self, x, axis=None, **_):
        if x.size == 0:
            return (x,)
        return (_flat_or_axis(x, axis, self.opset, _hardmax),)


class BatchNormalization(SpecOp):
    """Inference: normalize with the given statistics, whatever is_test (opset < 7),
    momentum or training_mode's default say. spatial=0 (opset < 9) has statistics per
    activation, shaped like x without its batch dim."""

    def _run(self, x, scale, bias, mean, var, epsilon=1e-5, spatial=1, **a):
        if a.get("training_mode"):
            return self.stock().run(x, scale, bias, mean, var)
        shape = x.shape[1:] if spatial == 0 else (-1,) + (1,) * (x.ndim - 2)
        s, b, m, v = (t.reshape(shape) for t in (scale, bias, mean, var))
        y = ((x - m) / np.sqrt(v + epsilon) * s + b).astype(x.dtype)
        outs = (y, mean, var, mean, var)  # statistics pass through in inference
        return outs[: max(1, len(self.onnx_node.output))]


class Dropout(SpecOp):
    """Inference: the identity; the mask is all ones, bool from opset 10, else x's type."""

    def _run(self, x, *inputs, **_):
        if len(inputs) > 1 and inputs[1] is not None and bool(inputs[1]):  # training_mode
            return self.stock().run(x, *inputs)
        mask = np.ones(x.shape, dtype=np.bool_ if self.opset >= 10 else x.dtype)
        return (x, mask)[: max(1, len(self.onnx_node.output))]


class LpNormalization(SpecOp):
    def _run(self, x, axis=-1, p=2, **_):
        norm = np.sum(np.abs(x) ** p, axis=axis, keepdims=True) ** (1.0 / p)
        safe = np.where(norm == 0, 1, norm)  # an all-zero slice stays zero
        return ((x / safe).astype(x.dtype),)


class GlobalLpPool(SpecOp):
    def _run(self, x, p=2, **_):
        axes = tuple(range(2, x.ndim))
        y = np.sum(np.abs(x.astype(np.float64)) ** p, axis=axes, keepdims=True) ** (1.0 / p)
        return (y.astype(x.dtype),)


class LRN(SpecOp):
    """Sum of squares over channels [c - floor((size-1)/2), c + ceil((size-1)/2)]."""

    def _run(self, x, size=None, alpha=1e-4, beta=0.75, bias=1.0, **_):
        sq = np.square(x.astype(np.float64))
        before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
        padded = np.pad(sq, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
        total = sum(padded[:, i : i + x.shape[1]] for i in range(size))
        return ((x / (bias + alpha / size * total) ** beta).astype(x.dtype),)


def _window_pads(n, kernel, strides, dilations, pads, auto_pad, ceil_mode):
    """Per spatial dim (pad_begin, pad_end, out_size) of a pooling window."""
    out = []
    for i, size in enumerate(n):
        k = (kernel[i] - 1) * dilations[i] + 1
        s = strides[i]
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-size // s)
            total = max(0, (o - 1) * s + k - size)
            small, big = total // 2, total - total // 2
            out.append((big, small, o) if auto_pad == "SAME_LOWER" else (small, big, o))
            continue
        b, e = (0, 0) if auto_pad == "VALID" else (pads[i], pads[i + len(n)])
        span = size + b + e - k
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= size + b:
            o -= 1  # the last window must start inside the input or its begin padding
        out.append((b, e, o))
    return out


def _pool(x, reduce, fill, kernel_shape, strides=None, dilations=None, pads=None, **a):
    """Pooled x: ``reduce(windows, axis=-1)``; window elements outside the input hold
    ``fill``, or ``a["pad_fill"]`` in the explicit (or SAME) padding."""
    nd = x.ndim - 2
    strides = strides or [1] * nd
    dilations = dilations or [1] * nd
    pads = pads or [0] * (2 * nd)
    dims = _window_pads(
        x.shape[2:],
        kernel_shape,
        strides,
        dilations,
        pads,
        a.get("auto_pad", "NOTSET") or "NOTSET",
        a.get("ceil_mode", 0),
    )
    # Pad far enough that every (ceil-mode) window lies inside the padded array.
    widths = [
        (b, max(e, (o - 1) * s + (k - 1) * d + 1 - n - b))
        for (b, e, o), s, k, d, n in zip(
            dims, strides, kernel_shape, dilations, x.shape[2:], strict=True
        )
    ]
    pad_fill = a.get("pad_fill", fill)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(b, e) for b, e, _ in dims], constant_values=pad_fill)
    extra = [(0, w[1] - d[1]) for w, d in zip(widths, dims, strict=True)]
    xp = np.pad(xp, [(0, 0), (0, 0)] + extra, constant_values=fill)
    windows = []
    for offs in np.ndindex(*kernel_shape):
        idx = tuple(
            slice(o * d, o * d + (out - 1) * s + 1, s)
            for o, d, s, (_, _, out) in zip(offs, dilations, strides, dims, strict=True)
        )
        windows.append(xp[(slice(None), slice(None), *idx)])
    return reduce(np.stack(windows, axis=-1), axis=-1).astype(x.dtype)


class MaxPool(SpecOp):
    def _run(self, x, **a):
        if len(self.onnx_node.output) > 1:  # Indices: the evaluator's own
            return self.stock().run(x)
        a.pop("storage_order", None)
        fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        return (_pool(x, np.max, fill, **a),)


class AveragePool(SpecOp):
    """The mean of each window's input elements, and of its padding too with
    count_include_pad (never of ceil_mode's overflow past the padding). Vectorized: the
    evaluator's loops over output pixels take most of a big model's reference time."""

    def _run(self, x, count_include_pad=0, **a):
        total = _pool(x.astype(np.float64), np.sum, 0.0, **a)
        ones = np.ones((1, 1, *x.shape[2:]))
        count = _pool(ones, np.sum, 0.0, pad_fill=float(count_include_pad), **a)
        return ((total / count).astype(x.dtype),)


class LpPool(SpecOp):
    def _run(self, x, p=2, **a):
        ap = np.abs(x.astype(np.float64)) ** p
        return (((_pool(ap, np.sum, 0.0, **a)) ** (1.0 / p)).astype(x.dtype),)


def _crop_and_pad(x, begins, ends, mode, value):
    """Pad with possibly negative amounts: negative ones crop."""
    crop = tuple(
        slice(max(0, -b), x.shape[i] - max(0, -e))
        for i, (b, e) in enumerate(zip(begins, ends, strict=True))
    )
    x = x[crop]
    widths = [(max(0, b), max(0, e)) for b, e in zip(begins, ends, strict=True)]
    if mode == "constant":
        return np.pad(x, widths, constant_values=value)
    return np.pad(x, widths, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])


class Pad(SpecOp):
    def _run(self, x, pads=None, value=None, axes=None, mode="constant", paddings=None, **a):
        if self.opset < 11 and pads is None:  # 'paddings' is opset 1's attribute name
            pads = paddings
        pads = [int(p) for p in np.asarray(pads).reshape(-1)]
        axes = list(range(x.ndim)) if axes is None else [int(v) % x.ndim for v in axes]
        begins, ends = [0] * x.ndim, [0] * x.ndim
        for i, ax in enumerate(axes):
            begins[ax], ends[ax] = pads[i], pads[i + len(axes)]
        fill = 0 if value is None else np.asarray(value).reshape(-1)[0]
        mode = mode.decode() if isinstance(mode, bytes) else mode
        return (_crop_and_pad(x, begins, ends, mode, fill).astype(x.dtype),)


class Reshape(SpecOp):
    """Opset < 5 takes the shape from an attribute; 0 copies the input dim unless
    allowzero (14+); -1 takes what is left."""

    def _run(self, x, shape=None, allowzero=0, **_):
        target = [int(d) for d in np.asarray(shape).reshape(-1)]
        if not allowzero:
            target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
        return (x.reshape(target),)


def _legacy_resize(x: np.ndarray, scales, mode: str) -> np.ndarray:
    """Upsample and Resize-10: output dim floor(n * scale), asymmetric coordinates
    (out / scale); nearest rounds down when enlarging and up when shrinking a dim (as
    ONNX Runtime does); linear interpolates between neighbours, clamped at the edge."""
    y = x
    for axis, s in enumerate(float(v) for v in scales):
        n = y.shape[axis]
        coords = np.arange(int(n * s)) / s
        if mode == "nearest":
            idx = np.ceil(coords) if s < 1 else np.floor(coords)
            y = np.take(y, np.clip(idx, 0, n - 1).astype(np.int64), axis=axis)
            continue
        coords = np.clip(coords, 0, n - 1)
        lo = np.floor(coords).astype(np.int64)
        hi = np.minimum(lo + 1, n - 1)
        w = (coords - lo).reshape([-1 if i == axis else 1 for i in range(y.ndim)])
        y = np.take(y, lo, axis=axis) * (1 - w) + np.take(y, hi, axis=axis) * w
    return y.astype(x.dtype)


def _legacy_mode(mode) -> str:
    mode = mode.decode() if isinstance(mode, bytes) else mode
    return "linear" if mode in ("linear", "bilinear") else "nearest"


class Upsample(SpecOp):
    def _run(self, x, scales=None, mode="nearest", height_scale=None, width_scale=None, **_):
        if scales is None and height_scale is not None:  # opset 1: NCHW only
            scales = [1.0, 1.0, height_scale, width_scale]
        return (_legacy_resize(x, np.asarray(scales).reshape(-1), _legacy_mode(mode)),)


class Resize(SpecOp):
    """Resize-10 as Upsample; later opsets are the evaluator's own Resize, which is right."""

    def _run(self, x, *inputs, **a):
        if self.opset >= 11:
            return self.stock().run(x, *inputs)
        return (_legacy_resize(x, np.asarray(inputs[0]).reshape(-1), _legacy_mode(a["mode"])),)


def _legacy_broadcast(b: np.ndarray, ndim: int, axis) -> np.ndarray:
    """Opset < 7 broadcast=1: b's dims line up with a's from ``axis`` (default: the
    trailing dims), where numpy would line them up from the end."""
    if axis is None:
        return b
    start = axis % ndim
    return b.reshape(b.shape + (1,) * (ndim - start - b.ndim))


def _binary(op_type: str):
    """An elementwise binary op that also honours opset < 7's broadcast/axis attributes,
    then computes with the evaluator's own op."""

    def _run(self, a, b, broadcast=0, axis=None, **_):
        if broadcast:
            b = _legacy_broadcast(b, a.ndim, axis)
        return self.stock(max(self.opset, 7))._run(a, b)

    return type(op_type, (SpecOp,), {"_run": _run, "__doc__": _binary.__doc__})


LEGACY_BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less")


class Split(SpecOp):
    """Split-1 (sizes from the attribute) as Split-2; later opsets are the evaluator's."""

    def _run(self, x, *inputs, **_):
        return self.stock(max(self.opset, 2)).run(x, *inputs[: 1 if self.opset >= 13 else 0])


def _transpose_pads(n, k, s, d, out_pad, out_shape, pads, auto_pad):
    """(pad_begin, pad_end) of one spatial dim of a ConvTranspose; with output_shape or
    SAME_* the total padding follows from the output size."""
    full = s * (n - 1) + out_pad + (k - 1) * d + 1
    if out_shape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = n * s
    if out_shape is None:
        return pads
    total = full - out_shape
    small, big = total // 2, total - total // 2
    return (small, big) if auto_pad == "SAME_UPPER" else (big, small)


class ConvTranspose(SpecOp):
    """Each input pixel scatters its kernel-weighted values into the output, per group
    (the evaluator fails on groups of more than one input channel)."""

    def _run(self, x, w, b=None, group=1, **a):
        nd = x.ndim - 2
        kernel = w.shape[2:]
        strides = a.get("strides") or [1] * nd
        dil = a.get("dilations") or [1] * nd
        out_pad = a.get("output_padding") or [0] * nd
        pads = a.get("pads") or [0] * (2 * nd)
        out_shape = a.get("output_shape")
        out_shape = list(out_shape)[-nd:] if out_shape else [None] * nd
        auto_pad = a.get("auto_pad") or "NOTSET"
        dims = [
            _transpose_pads(
                x.shape[2 + i],
                kernel[i],
                strides[i],
                dil[i],
                out_pad[i],
                out_shape[i],
                (pads[i], pads[i + nd]),
                auto_pad,
            )
            for i in range(nd)
        ]
        full = [
            s * (n - 1) + op + (k - 1) * d + 1
            for n, s, op, k, d in zip(x.shape[2:], strides, out_pad, kernel, dil, strict=True)
        ]
        cg, mg = x.shape[1] // group, w.shape[1]
        buf = np.zeros((x.shape[0], mg * group, *full), dtype=np.float64)
        for g in range(group):
            xg = x[:, g * cg : (g + 1) * cg].astype(np.float64)
            for offs in np.ndindex(*kernel):
                contrib = np.einsum(
                    "nc...,cm->nm...", xg, w[(slice(g * cg, (g + 1) * cg), slice(None), *offs)]
                )
                idx = tuple(
                    slice(o * d, o * d + (n - 1) * s + 1, s)
                    for o, d, s, n in zip(offs, dil, strides, x.shape[2:], strict=True)
                )
                buf[(slice(None), slice(g * mg, (g + 1) * mg), *idx)] += contrib
        # Negative padding (an output larger than the scatter) adds zeros at that side.
        buf = np.pad(buf, [(0, 0), (0, 0)] + [(max(0, -pb), max(0, -pe)) for pb, pe in dims])
        crop = tuple(
            slice(max(0, pb), buf.shape[2 + i] - max(0, pe)) for i, (pb, pe) in enumerate(dims)
        )
        y = buf[(slice(None), slice(None), *crop)]
        if b is not None:
            y = y + b.reshape((-1,) + (1,) * nd)
        return (y.astype(x.dtype),)


class OneHot(SpecOp):
    """Indices of any numeric type, truncated to integers; negative ones count from
    the end; those out of [-depth, depth) give a row of off values."""

    def _run(self, indices, depth, values, axis=-1, **_):
        d = int(np.asarray(depth).reshape(-1)[0])
        idx = np.trunc(indices).astype(np.int64)
        idx = np.where(idx < 0, idx + d, idx)
        hot = np.arange(d).reshape((1,) * idx.ndim + (d,)) == idx[..., None]
        hot &= ((idx >= 0) & (idx < d))[..., None]
        y = np.where(hot, values[1], values[0]).astype(values.dtype)
        return (np.moveaxis(y, -1, axis % (indices.ndim + 1)),)


NEW_OPS = [
    Softmax,
    LogSoftmax,
    Hardmax,
    BatchNormalization,
    Dropout,
    LpNormalization,
    GlobalLpPool,
    LRN,
    MaxPool,
    AveragePool,
    LpPool,
    Pad,
    Reshape,
    Upsample,
    Resize,
    OneHot,
    Split,
    ConvTranspose,
    *(_binary(t) for t in LEGACY_BINARY),
]
