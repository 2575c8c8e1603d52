"""Package-time (numpy) re-layout of constants for the blocked layout NCHW{x}c.

The layout pass turns weights and per-channel operands into the forms the blocked
computes read (see packager/ops/layout.py and conv_nchwc.py), so the board never
transforms a constant.
"""

from __future__ import annotations

import numpy as np


def blocked_shape(shape, block: int) -> tuple[int, ...]:
    """(N, C, *spatial) -> (N, C/block, *spatial, block)."""
    n, c, *spatial = shape
    return (n, c // block, *spatial, block)


def to_blocked(a: np.ndarray, block: int) -> np.ndarray:
    """(N, C, *spatial) -> (N, C/block, *spatial, block); C % block == 0."""
    n, c, *spatial = a.shape
    split = a.reshape(n, c // block, block, *spatial)
    return np.ascontiguousarray(np.moveaxis(split, 2, -1))


def from_blocked(a: np.ndarray) -> np.ndarray:
    """(N, C/x, *spatial, x) -> (N, C, *spatial)."""
    n, cb, *spatial, block = a.shape
    return np.ascontiguousarray(np.moveaxis(a, -1, 2)).reshape(n, cb * block, *spatial)


def pack_conv_weight(w: np.ndarray, in_block: int, out_block: int) -> np.ndarray:
    """(OC, Cg, KH, KW) -> (OC/y, Cg/x, KH, KW, x, y), x = in_block, y = out_block."""
    oc, cg, kh, kw = w.shape
    split = w.reshape(oc // out_block, out_block, cg // in_block, in_block, kh, kw)
    return np.ascontiguousarray(split.transpose(0, 2, 4, 5, 3, 1))


def pack_channels(v: np.ndarray, block: int) -> np.ndarray:
    """A per-channel vector (C,) -> (C/x, x): bias, batch-norm and scale-shift params.
    The same bytes; the shape tells the compute to index it by block and lane."""
    return np.ascontiguousarray(v.reshape(-1, block))


def pack_operand(a: np.ndarray, channels: int, block: int) -> np.ndarray | None:
    """A constant broadcast against an (N, C, H, W) tensor, re-laid out to broadcast
    the same way against its blocked form (N, C/x, H, W, x); None if it cannot be."""
    if a.ndim > 4:
        return None
    full = a.reshape((1,) * (4 - a.ndim) + a.shape)
    if full.shape[1] == channels:
        return to_blocked(full, block)
    if full.shape[1] == 1:  # the same value for every channel: a lane axis of 1
        return np.ascontiguousarray(full[..., None])
    return None
