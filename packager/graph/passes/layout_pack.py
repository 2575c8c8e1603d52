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


def span_start(ob: int, out_block: int, og: int, cg: int, in_block: int) -> int:
    """First input block read by output block ``ob`` of a spanned grouped conv: the block
    holding the first input channel of the group of its first output channel
    (conv2d_nchwc computes the same at run time)."""
    return (ob * out_block // og) * cg // in_block


def span_end(ob: int, out_block: int, og: int, cg: int, in_block: int) -> int:
    """One past the last input block read by output block ``ob``: the block after the
    one holding the last input channel of the group of its last output channel."""
    return -(-((ob * out_block + out_block - 1) // og + 1) * cg // in_block)


def spanned_blocks(oc: int, groups: int, cg: int, in_block: int, out_block: int) -> int:
    """Input blocks an output block of a grouped conv needs, at most: the blocks covering
    every group its ``out_block`` output channels fall in (the packed weight's span; most
    output blocks read fewer, span_end - span_start)."""
    og = oc // groups
    return max(
        span_end(ob, out_block, og, cg, in_block) - span_start(ob, out_block, og, cg, in_block)
        for ob in range(oc // out_block)
    )


def pack_spanned_conv_weight(w: np.ndarray, groups: int, in_block: int, out_block: int):
    """A grouped conv whose groups do not start on block boundaries, as a dense conv per
    output block over the input blocks its groups cover: (OC, Cg, KH, KW) ->
    (OC/y, span, KH, KW, x, y), output block ob's blocks from span_start(ob), zero where
    an input channel is not in the output channel's group and past the blocks ob reads
    (span_end(ob) - span_start(ob) of them, what conv2d_nchwc reduces over). ShuffleNet's
    4 groups of 68 channels in blocks of 16: 5 blocks (80 channels) for the output
    blocks inside a group, 9 for those straddling two."""
    oc, cg, kh, kw = w.shape
    og = oc // groups
    span = spanned_blocks(oc, groups, cg, in_block, out_block)
    packed = np.zeros((oc // out_block, span, kh, kw, in_block, out_block), w.dtype)
    for o in range(oc):
        ob, oi, g = o // out_block, o % out_block, o // og
        first = span_start(ob, out_block, og, cg, in_block) * in_block
        for c in range(g * cg - first, (g + 1) * cg - first):
            packed[ob, c // in_block, :, :, c % in_block, oi] = w[o, c + first - g * cg]
    return packed


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
