"""DFT and STFT: each a dense product against a constant basis.

Both ops are linear maps of their (real or interleaved complex) input, so the package
computes the map's matrix once (numpy's FFT of the unit vectors, with the window and
the op's length, direction and one-sided choices folded in) and the kernel is a gemm:
frames x (n * components) by (n * components) x (bins * 2). For the window lengths of
audio front ends (400-512) this dense product beats an FFT's scattered butterflies on a
CPU: it runs at the gemm kernel's rate. The basis gets zero columns up to a multiple of
BASIS_ALIGN so that every board's vector width divides it (the gemm schedule's register
tiles need that); a slice drops them. HannWindow, HammingWindow, BlackmanWindow and
MelWeightMatrix need no converter: with constant inputs the frontend folds them.
"""

from __future__ import annotations

import numpy as np

from ._common import axis_in, check_attrs, scalar
from .registry import converter

# Basis columns are padded to a multiple of this (two of the widest float32 vectors,
# AVX-512's), and the rows of frames to a multiple of ROW_ALIGN, so that the gemm's
# register tiles (rows x vectors) divide the product: 97 frames (prime) gave one-row
# tiles at 30 GFLOP/s.
BASIS_ALIGN = 32
ROW_ALIGN = 4


def dft_basis(n: int, comps: int, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """The DFT as a matrix (n * comps, bins * out_comps): row k * comps + c is the output
    of the unit input at sample k, component c (ONNX DFT's semantics: the input cut or
    zero-padded to ``length``; inverse with onesided is the inverse real FFT)."""
    unit = np.eye(n * comps).reshape(n * comps, n, comps)
    z = unit[..., 0] + (1j * unit[..., 1] if comps == 2 else 0)
    if inverse and onesided:
        return np.fft.irfft(z, n=length, axis=1).reshape(n * comps, -1)
    y = (np.fft.ifft if inverse else np.fft.fft)(z, n=length, axis=1)
    if onesided:
        y = y[:, : length // 2 + 1]
    return np.stack([y.real, y.imag], axis=-1).reshape(n * comps, -1)


def _product(ctx, node, rows: str, count: int, basis: np.ndarray, out_shape, out=None, bias=None):
    """Nodes computing reshape(rows @ basis (+ bias), out_shape) into ``out`` (default a
    fresh value); ``rows`` has ``count`` rows, those past the output's ignored; returns
    (nodes, out)."""
    width, m = basis.shape[1], int(np.prod(out_shape)) // basis.shape[1]
    pad = -width % BASIS_ALIGN
    nodes = []
    if count % ROW_ALIGN:
        padded = ctx.fresh(rows)
        extra = -count % ROW_ALIGN
        nodes.append(ctx.node("pad", node, [rows], outputs=[padded], pads=[0, 0, extra, 0]))
        rows, count = padded, count + extra
    b = np.pad(basis, ((0, 0), (0, pad))).astype(np.float32)
    inputs = [rows, ctx.add_const(b, "dft_basis")]
    if bias is not None:
        inputs.append(ctx.add_const(np.pad(bias, (0, pad)).astype(np.float32), "bias"))
    prod = ctx.fresh("dft")
    nodes.append(ctx.node("gemm", node, inputs, outputs=[prod]))
    if pad or count != m:
        cut = ctx.fresh("dft")
        nodes.append(ctx.node("slice", node, [prod], outputs=[cut], starts=[0, 0], ends=[m, width]))
        prod = cut
    out = out or ctx.fresh("dft")
    nodes.append(ctx.node("reshape", node, [prod], outputs=[out], shape=list(out_shape)))
    return nodes, out


def _reshape(ctx, node, x: str, shape, nodes: list) -> str:
    out = ctx.fresh(x)
    nodes.append(ctx.node("reshape", node, [x], outputs=[out], shape=[int(d) for d in shape]))
    return out


def _transpose(ctx, node, x: str, perm, nodes: list, output=None) -> str:
    out = output or ctx.fresh(x)
    nodes.append(ctx.node("transpose", node, [x], outputs=[out], perm=list(perm)))
    return out


def _dft_axis(ctx, node, rank: int) -> int:
    if ctx.opset >= 20:
        axis = scalar(ctx, node, 2, "axis") if ctx.has_input(node, 2) else -2
    else:
        axis = ctx.attr(node, "axis", 1)
    axis = axis_in(ctx, node, int(axis), rank)
    if axis == rank - 1:
        ctx.fail(
            node, f"axis {axis} is the complex-components dim; the signal axis must precede it"
        )
    return axis


@converter("DFT")
def dft(ctx, node):
    check_attrs(ctx, node, {"axis", "inverse", "onesided"})
    shape = list(ctx.value(node.input[0]).shape)
    rank, comps = len(shape), shape[-1]
    if comps not in (1, 2):
        ctx.fail(node, f"the last dim must be 1 (real) or 2 (complex), got {comps}")
    axis = _dft_axis(ctx, node, rank)
    inverse, onesided = bool(ctx.attr(node, "inverse", 0)), bool(ctx.attr(node, "onesided", 0))
    n = shape[axis]
    length = scalar(ctx, node, 1, "dft_length") if ctx.has_input(node, 1) else None
    if length is None:
        length = 2 * (n - 1) if inverse and onesided else n
    if int(length) < 1:
        ctx.fail(node, f"dft_length must be positive, got {length}")
    basis = dft_basis(n, comps, int(length), inverse, onesided)
    out_comps = 1 if inverse and onesided else 2
    bins = basis.shape[1] // out_comps
    nodes = []
    # The signal axis goes next to the components so that each row holds one signal.
    perm = [d for d in range(rank - 1) if d != axis] + [axis, rank - 1]
    x = (
        node.input[0]
        if perm == list(range(rank))
        else _transpose(ctx, node, node.input[0], perm, nodes)
    )
    outer = [shape[d] for d in perm[:-2]]
    m = int(np.prod(outer))
    rows = _reshape(ctx, node, x, [m, n * comps], nodes)
    out_shape = outer + [bins, out_comps]
    if perm == list(range(rank)):
        return nodes + _product(ctx, node, rows, m, basis, out_shape, node.output[0])[0]
    more, y = _product(ctx, node, rows, m, basis, out_shape)
    _transpose(ctx, node, y, [perm.index(d) for d in range(rank)], more, output=node.output[0])
    return nodes + more


@converter("STFT")
def stft(ctx, node):
    """Frames of the signal (batch, length, 1 | 2) times the windowed DFT basis."""
    check_attrs(ctx, node, {"onesided"})
    batch, length, comps = ctx.value(node.input[0]).shape
    step = scalar(ctx, node, 1, "frame_step")
    window = ctx.const(node, 2, "window") if ctx.has_input(node, 2) else None
    size = scalar(ctx, node, 3, "frame_length") if ctx.has_input(node, 3) else None
    if window is None and size is None:
        ctx.fail(node, "needs a window or a frame_length")
    size = int(size if size is not None else len(window))
    if window is not None and np.asarray(window).shape != (size,):
        ctx.fail(node, f"window of shape {list(np.shape(window))} does not fit frame_length {size}")
    if step < 1 or size > length:
        ctx.fail(node, f"cannot cut frames of {size} (step {step}) from {length} samples")
    onesided = bool(ctx.attr(node, "onesided", 1))
    if onesided and comps == 2:
        ctx.fail(node, "onesided=1 needs a real signal (last dim 1), got a complex one")
    basis = dft_basis(size, comps, size, False, onesided)
    if window is not None:
        basis = basis * np.repeat(np.asarray(window, np.float64), comps)[:, None]
    frames = (length - size) // step + 1
    nodes = []
    flat = _reshape(ctx, node, node.input[0], [batch, length * comps], nodes)
    rows, count = ctx.fresh("frames"), batch * frames + -(batch * frames) % ROW_ALIGN
    cut = {"size": size * comps, "hop": step * comps, "rows": count}
    nodes.append(ctx.node("frame", node, [flat], outputs=[rows], **cut))
    shape = [batch, frames, basis.shape[1] // 2, 2]
    return nodes + _product(ctx, node, rows, count, basis, shape, node.output[0])[0]


# A one-channel 1-D Conv with a kernel at least this long is a framing (a DFT basis or a
# learned filterbank over audio): as frames times the filters it runs at gemm speed,
# where the conv schedules, built for many channels and short kernels, ran at 1 GFLOP/s.
FRAMING_MIN_KERNEL = 64


def conv_as_frames(ctx, node, attrs: dict):
    """The nodes of a Conv (N, 1, T) * (C, 1, K) as frames x filters, or None when the
    Conv is not such a framing (more channels, groups, dilation, padding, runtime
    weights or a short kernel)."""
    x, w = ctx.value(node.input[0]), ctx.value(node.input[1])
    bias = ctx.input_value(node, 2)
    plain = attrs["dilations"] == [1] and not any(attrs["pads"])
    if len(x.shape) != 3 or x.shape[1] != 1 or w.shape[2] < FRAMING_MIN_KERNEL or not plain:
        return None
    if not w.is_const or (bias is not None and not bias.is_const):
        return None
    (batch, _, length), (chans, _, size), hop = x.shape, w.shape, attrs["strides"][0]
    frames = (length - size) // hop + 1
    nodes = []
    flat = _reshape(ctx, node, node.input[0], [batch, length], nodes)
    rows, count = ctx.fresh("frames"), batch * frames + -(batch * frames) % ROW_ALIGN
    nodes.append(ctx.node("frame", node, [flat], outputs=[rows], size=size, hop=hop, rows=count))
    basis = np.asarray(w.data, np.float64).reshape(chans, size).T
    b = None if bias is None else np.asarray(bias.data)
    more, y = _product(ctx, node, rows, count, basis, [batch, frames, chans], bias=b)
    _transpose(ctx, node, y, [0, 2, 1], more, output=node.output[0])
    return nodes + more
