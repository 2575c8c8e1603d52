"""Channel shuffle: ShuffleNet's Reshape(N, g, C/g, H, W) - Transpose(0, 2, 1, 3, 4) -
Reshape(N, C, H, W) as one op (graph/passes/fuse_shuffle.py makes it).

Output channel c reads input channel (c % g) * (C/g) + c // g. Input (N, C, H, W) or
blocked (N, C/x, H, W, x) (the output has the input's form), so a shuffle between
blocked convs needs no layout transforms. attrs: groups.
"""

from __future__ import annotations

from .. import te
from .registry import register_op


def source_channel(c, channels: int, groups: int):
    """The input channel output channel ``c`` reads."""
    return (c % groups) * (channels // groups) + c // groups


@register_op("channel_shuffle", "injective")
def channel_shuffle(inputs, attrs):
    (x,) = inputs
    g = int(attrs["groups"])
    block = x.shape[4] if x.ndim == 5 else 1
    channels = x.shape[1] * block
    if x.ndim not in (4, 5) or channels % g:
        raise ValueError(f"channel_shuffle: {g} groups do not split data {list(x.shape)}")

    def plain(n, c, h, w):
        return x[n, source_channel(c, channels, g), h, w]

    def blocked(n, cb, h, w, ci):
        src = source_channel(cb * block + ci, channels, g)
        return x[n, src // block, h, w, src % block]

    f = blocked if x.ndim == 5 else plain
    return [te.compute(list(x.shape), f, name="channel_shuffle", tag="injective")]
