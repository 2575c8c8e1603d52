"""Framing for spectral front ends: the overlapping windows an STFT (or a strided
one-channel Conv) reads, laid out as the rows of a matrix so that the transform itself
is one dense product against a constant basis (the gemm op's packed kernel)."""

from __future__ import annotations

from .. import te
from .registry import register_op


@register_op("frame", "injective")
def frame(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
    """attrs: size, hop. x (batch, length) -> (batch * frames, size), row b * frames + f
    holding x[b, f * hop : f * hop + size]; frames = (length - size) // hop + 1."""
    (x,) = inputs
    size, hop = int(attrs["size"]), int(attrs["hop"])
    if x.ndim != 2 or size < 1 or hop < 1 or x.shape[1] < size:
        raise ValueError(f"frame: cannot cut frames of {size} (hop {hop}) from {list(x.shape)}")
    batch, frames = x.shape[0], (x.shape[1] - size) // hop + 1

    def body(r, k):
        if batch == 1:
            return x[te.const(0, te.INDEX), r * hop + k]
        return x[te.binary("floordiv", r, frames), (r % frames) * hop + k]

    return [te.compute([batch * frames, size], body, tag="injective")]
