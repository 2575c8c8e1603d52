"""Sliding-window arithmetic shared by conv, conv_transpose and the pools."""

from __future__ import annotations

import math

from .. import te


def span(kernel: int, dilation: int) -> int:
    """Extent of the input a dilated kernel covers."""
    return (kernel - 1) * dilation + 1


def out_len(
    n: int,
    kernel: int,
    stride: int,
    dilation: int,
    before: int,
    after: int,
    ceil_mode: bool = False,
) -> int:
    """Number of window positions along a dim of length ``n`` padded by before/after."""
    room = n + before + after - span(kernel, dilation)
    if not ceil_mode:
        return room // stride + 1
    out = math.ceil(room / stride) + 1
    # A last window starting inside the end padding is dropped (ONNX, PyTorch).
    if (out - 1) * stride >= n + before:
        out -= 1
    return out


def scaled(i, factor: int):
    """``i * factor``, without the multiply when factor is 1 (keeps index math simple)."""
    return i if factor == 1 else i * factor


def window_index(o, k, stride: int, dilation: int):
    """Input index of kernel tap ``k`` of the window at output position ``o``."""
    return scaled(o, stride) + scaled(k, dilation)


def split_pads(pads, nd: int) -> tuple[list[int], list[int]]:
    """ONNX pads (all begins, then all ends) as two lists; missing pads are 0."""
    pads = list(pads) if pads else [0] * (2 * nd)
    return [int(p) for p in pads[:nd]], [int(p) for p in pads[nd:]]


def reduce_axes(extents, prefix: str) -> list[te.IterVar]:
    return [te.reduce_axis(e, f"{prefix}{i}") for i, e in enumerate(extents)]
