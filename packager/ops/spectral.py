"""Framing for spectral front ends: the overlapping windows an STFT (or a strided
one-channel Conv) reads, laid out as the rows of a matrix so that the transform itself
is one dense product against a constant basis (the gemm op's packed kernel)."""

from __future__ import annotations

from .. import te
from .registry import register_op


@register_op("frame", "injective")
def frame(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
    """attrs: size, hop, rows (optional). x (batch, length) -> (rows, size), row
    b * frames + f holding x[b, f * hop : f * hop + size]; frames = (length - size) //
    hop + 1. rows defaults to batch * frames; more rows repeat the last frame (a product
    over the frames gets a row count its register tiles divide)."""
    (x,) = inputs
    size, hop = int(attrs["size"]), int(attrs["hop"])
    if x.ndim != 2 or size < 1 or hop < 1 or x.shape[1] < size:
        raise ValueError(f"frame: cannot cut frames of {size} (hop {hop}) from {list(x.shape)}")
    batch, frames = x.shape[0], (x.shape[1] - size) // hop + 1
    rows = int(attrs.get("rows", batch * frames))
    if rows < batch * frames:
        raise ValueError(f"frame: rows={rows} is fewer than the {batch * frames} frames")

    def body(r, k):
        if rows > batch * frames:
            r = te.min_(r, te.const(batch * frames - 1, te.INDEX))
        if batch == 1:
            return x[te.const(0, te.INDEX), r * hop + k]
        return x[te.binary("floordiv", r, frames), (r % frames) * hop + k]

    return [te.compute([rows, size], body, tag="injective")]
