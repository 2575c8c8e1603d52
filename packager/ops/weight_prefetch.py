"""Fetching the next tile's weights (Stage.prefetch) in the CPU conv templates
(conv_schedule.py's row tiles, conv_pixels_schedule.py's pixel tiles, quantized.py's
integer tiles): the knob ``prefetch_weights`` and its default."""

from __future__ import annotations

import math

import numpy as np

from .. import te
from ._cpu import DEFAULT_L1_BYTES
from .knobs import Config

PREFETCH_TILE_L1 = 1.5  # the most a tile's weights take, in L1s
PREFETCH_MOST_PIXELS = 14 * 14  # the most output pixels a conv has


def prefetches_next_weights(weight: te.Tensor, pixels: int, target, oc_tile: int) -> bool:
    """Whether a tile of ``oc_tile`` output blocks fetches the next tile's ``weight``
    (packed, its output blocks first) into the L2 as it reads its own: where the output
    has at most 14x14 ``pixels``, the tile's weights fit 1.5x the L1, and another tile
    follows. A tile of output blocks reads its weights once per output row (or pixel
    tile), the first time from memory where the model's weights do not stay in the
    caches between runs; over few pixels that first read is a large part of its time,
    and fetched while the tile before computes, the weights arrive early. Measured on a
    Zen 4 (32 KiB L1, 1 MiB L2, 1 thread, bench/ab_bundles.py, 4-5 rounds,
    tv_mobilenet_v2 at 512 bits): its expanding 1x1 convs at 7x7 and 14x14 0.88-0.97x
    their time (160 -> 960: 0.875x, 320 -> 1280 with its 40 KB tile: 0.91x), the
    kernels left alike 1.00x; the AVX2 code's pixel tiles on the same machine 0.81-0.93x
    (9 kernels 0.91x), and its integer tiles 0.94x with VNNI, 0.98x on AVX2 int16 pairs
    (22 kernels each). ARM boards take the same rule (aarch64 prfm pldl2keep, armv7
    pld), unmeasured there. Tried and not taken: every conv with a next tile (the
    projections' 2 x 960-channel tiles, read from the L2 every row anyway, 1.01-1.06x;
    ResNet-50's 1x1 convs at 56x56 and 28x28 up to 1.12x, each weight serving hundreds
    of pixels), and prefetching into the L1 (its own weights evicted: the gains
    halved)."""
    if weight.shape[0] // oc_tile < 2 or pixels > PREFETCH_MOST_PIXELS:
        return False
    tile_bytes = oc_tile * math.prod(weight.shape[1:]) * np.dtype(weight.dtype).itemsize
    return tile_bytes <= PREFETCH_TILE_L1 * (target.l1d_bytes or DEFAULT_L1_BYTES)


def conv_weight(conv: te.Tensor) -> te.Tensor | None:
    """The conv reduction's packed weight: the 6-d kernel argument it reads, output
    blocks first (conv_nchwc.py, quantized.qconv2d); None for a stage that reads none (a
    compute scheduled before, cache_write's copy)."""
    found = [t for t in conv.op.input_tensors if t.ndim == 6 and isinstance(t.op, te.PlaceholderOp)]
    return found[0] if len(found) == 1 else None


def prefetch_next_weights(
    cfg: Config, st, weight: te.Tensor | None, pixels: int, target, oc_tile: int
) -> None:
    """Knob ``prefetch_weights`` (default: prefetches_next_weights): stage ``st``, the
    conv tile, prefetches ``weight`` ``oc_tile`` output blocks further on."""
    if weight is None:
        return
    default = prefetches_next_weights(weight, pixels, target, oc_tile)
    if cfg.define("prefetch_weights", (False, True), default):
        st.prefetch(weight, 0, oc_tile)
