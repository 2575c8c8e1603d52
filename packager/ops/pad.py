"""Pad: constant, edge, reflect and wrap modes; also the padding stage of conv and pools.

``pad_tensor`` is a separate compute stage on purpose: a schedule can inline it into
its consumer (a guarded load) or compute it at a tile of the consumer.
"""

from __future__ import annotations

from .. import te
from .registry import register_op

PAD_MODES = ("constant", "edge", "reflect", "wrap")


def _source_index(i, before: int, n: int, mode: str):
    """The input index read for output index ``i`` of a dim padded by ``before``."""
    j = i - before if before else i
    if mode == "edge":
        return te.min_(te.max_(j, 0), n - 1)
    if mode == "wrap":
        return j % n
    if mode == "reflect":
        if n == 1:
            return te.const(0, te.INDEX)
        # Reflection without repeating the edge is periodic with period 2(n-1).
        m = j % (2 * (n - 1))
        return te.min_(m, 2 * (n - 1) - m)
    return j


def pad_tensor(x: te.Tensor, before, after, mode: str = "constant", value=0, name=None):
    """``x`` padded by ``before[d]``/``after[d]`` elements per dim (negative: cropped)."""
    before, after = [int(b) for b in before], [int(a) for a in after]
    if not any(before) and not any(after):
        return x
    shape = [n + b + a for n, b, a in zip(x.shape, before, after, strict=True)]
    fill = te.const(value, x.dtype)

    def f(*idx):
        src, inside = [], []
        for i, b, a, n in zip(idx, before, after, x.shape, strict=True):
            src.append(_source_index(i, b, n, mode))
            if mode == "constant":
                if b > 0:
                    inside.append(i >= b)
                if a > 0:
                    inside.append(i < b + n)
        if not inside:
            return x[tuple(src)]
        return te.select(te.all_of(*inside), x[tuple(src)], fill)

    return te.compute(shape, f, name=name or "pad", tag="pad")


@register_op("pad", "injective")
def pad(inputs, attrs):
    """attrs: pads (begins of every dim, then ends), mode, value (constant mode)."""
    (x,) = inputs
    pads = attrs["pads"]
    nd = x.ndim
    return [
        pad_tensor(x, pads[:nd], pads[nd:], attrs.get("mode", "constant"), attrs.get("value", 0))
    ]
