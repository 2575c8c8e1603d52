"""Blocked channel layouts (NCHW{x}c) and the transform between them and NCHW.

NCHW{x}c splits the channel axis C into C/x blocks of x channels and moves the block
to the innermost axis: (N, C, H, W) -> (N, C/x, H, W, x), element [n, c, h, w] at
[n, c // x, h, w, c % x]. With x the board's float lanes per vector, the innermost
loop of a blocked conv reads and writes x contiguous channels: one vector.

Layout names are strings: "NCHW" and "NCHW8c" (any rank: the channel is axis 1 and
the block, if any, the last axis).
"""

from __future__ import annotations

import re

from .. import te
from .registry import register_op

_BLOCKED = re.compile(r"^NCHW(\d+)c$")


def blocked(block: int) -> str:
    return f"NCHW{block}c"


def block_of(layout: str) -> int:
    """The block of a layout name; 1 for plain NCHW (which is NCHW1c in memory)."""
    if layout == "NCHW":
        return 1
    m = _BLOCKED.match(layout)
    if not m or int(m.group(1)) < 1:
        raise ValueError(f"unknown layout {layout!r} (NCHW or NCHW<x>c)")
    return int(m.group(1))


def _to_blocked(x: te.Tensor, block: int) -> te.Tensor:
    """Channels that do not fill the last block are zeros, so a blocked conv reading
    them adds nothing."""
    c = x.shape[1]
    nblocks = -(-c // block)
    zero = te.const(0, x.dtype)

    def f(n, cb, *rest):
        *spatial, ci = rest
        ch = cb * block + ci
        load = x[(n, ch, *spatial)]
        return load if c % block == 0 else te.select(ch < c, load, zero)

    shape = [x.shape[0], nblocks, *x.shape[2:], block]
    return te.compute(shape, f, name="to_blocked", tag="layout_transform")


def _from_blocked(x: te.Tensor, channels: int) -> te.Tensor:
    block = x.shape[-1]

    def f(n, ch, *spatial):
        return x[(n, ch // block, *spatial, ch % block)]

    shape = [x.shape[0], channels, *x.shape[2:-1]]
    return te.compute(shape, f, name="from_blocked", tag="layout_transform")


@register_op("layout_transform", "injective")
def layout_transform(inputs, attrs):
    """attrs: src, dst (layout names, one of them NCHW); channels: the NCHW channel
    count when leaving a blocked layout (default: every channel of the blocks)."""
    (x,) = inputs
    src, dst = block_of(attrs["src"]), block_of(attrs["dst"])
    if src == dst:
        return [te.compute(x.shape, lambda *i: x[i], name="same_layout", tag="injective")]
    if src != 1 and dst != 1:
        raise ValueError(f"layout_transform {attrs['src']} -> {attrs['dst']}: go through NCHW")
    if src == 1:
        return [_to_blocked(x, dst)]
    return [_from_blocked(x, int(attrs.get("channels") or x.shape[1] * src))]
