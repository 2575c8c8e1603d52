"""ReverseSequence: per batch element, the first lens[b] steps along time reversed."""

from __future__ import annotations

from .. import te
from .registry import register_op


@register_op("reverse_sequence", "injective")
def reverse_sequence(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
    """attrs: batch_axis, time_axis (0 or 1). Along time, the first lens[b] elements of
    batch b come reversed, the rest as they are."""
    x, lens = inputs
    b_ax, t_ax = attrs["batch_axis"], attrs["time_axis"]
    steps = x.shape[t_ax]

    def body(*idx):
        n = te.cast(te.INDEX, lens[(idx[b_ax],)])
        t = idx[t_ax]
        src = te.select(t < n, n - 1 - t, t)
        pos = list(idx)
        pos[t_ax] = te.min_(te.max_(src, te.const(0, te.INDEX)), te.const(steps - 1, te.INDEX))
        return x[tuple(pos)]

    return [te.compute(x.shape, body, name="reverse_sequence", tag="injective")]
