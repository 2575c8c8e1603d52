"""MaxPool's Indices output: for each window, the flat index (over N, C and the spatial
dims, row-major, or column-major over the spatial dims for storage_order 1) of its first
maximum in scan order. The maximum, then the first tap holding it, then that tap's index:
three small stages, each a reduction or elementwise."""

from __future__ import annotations

import math

from .. import te
from .pool import _lowest, _Window
from .registry import register_op


@register_op("max_pool_indices", "opaque")
def max_pool_indices(inputs, attrs):
    """attrs: the max_pool's window attrs, and storage_order."""
    (x,) = inputs
    w = _Window(x, attrs, _lowest(x.dtype))
    spatial = list(x.shape[2:])
    best = te.compute(
        w.shape,
        lambda n, c, *o: te.max_reduce(w.load(n, c, o), w.rk),
        name="pool_idx_max",
        tag="pool",
    )
    taps = [k.extent for k in w.rk]
    none = te.const(math.prod(taps), te.INDEX)

    def source(o, ks):
        """Unpadded input index of tap ks of the window at o, per spatial dim."""
        return [o[i] * w.strides[i] - w.before[i] + ks[i] * w.dilations[i] for i in range(w.nd)]

    def first(n, c, *o):
        lin = te.const(0, te.INDEX)
        for k, extent in zip(w.rk, taps, strict=True):
            lin = lin * extent + k.var
        pos = source(o, [k.var for k in w.rk])
        inside = [te.all_of(p >= 0, p < spatial[i]) for i, p in enumerate(pos)]
        hit = te.all_of(te.eq(w.load(n, c, o), best[(n, c, *o)]), *inside)
        return te.min_reduce(te.select(hit, lin, none), w.rk)

    tap = te.compute(w.shape, first, name="pool_idx_tap", tag="reduce")
    column_major = bool(attrs.get("storage_order", 0))

    def index(n, c, *o):
        rest, ks = tap[(n, c, *o)], []
        for extent in reversed(taps):
            ks.append(rest % extent)
            rest = rest // extent
        pos = source(o, list(reversed(ks)))
        order = list(reversed(range(w.nd))) if column_major else list(range(w.nd))
        flat = n * x.shape[1] + c
        for i in order:
            flat = flat * spatial[i] + pos[i]
        return te.cast("int64", flat)

    return [te.compute(w.shape, index, name="max_pool_indices", tag="injective")]
