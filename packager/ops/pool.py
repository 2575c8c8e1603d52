"""N-d max, average and Lp pooling over the spatial dims of NC... tensors.

attrs: kernel, strides, dilations, pads (all begins, then all ends), ceil_mode;
avg_pool: count_include_pad; lp_pool: p. Windows start at ``o * stride - pad_begin``
(ceil_mode may add a last window that reaches past the end padding).

The spatial dims are the len(kernel) dims after N and C; dims after them are carried
through untouched, which is what the blocked layout NCHW{x}c needs (its channel block
is the last dim): the *_nchwc ops are the same computes under their own names.
"""

from __future__ import annotations

from .. import te
from ._cpu import blocked_reduce_schedule
from ._window import out_len, reduce_axes, span, split_pads, window_index
from .pad import pad_tensor
from .registry import register_op, register_schedule


def _lowest(dtype: str):
    if te.is_float(dtype):
        return float("-inf")
    if dtype.startswith("uint"):
        return 0
    return -(2 ** (int(dtype[3:]) - 1))


class _Window:
    """Output shape and the padded input of a pooling op."""

    def __init__(self, x: te.Tensor, attrs: dict, fill, clamp: bool = False):
        self.kernel = list(attrs["kernel"])
        nd = len(self.kernel)
        self.nd = nd
        tail = list(x.shape[2 + nd :])  # the channel block of a blocked layout
        self.strides = list(attrs.get("strides") or [1] * nd)
        self.dilations = list(attrs.get("dilations") or [1] * nd)
        self.before, self.after = split_pads(attrs.get("pads"), nd)
        ceil = bool(attrs.get("ceil_mode", 0))
        self.spatial = [
            out_len(
                x.shape[2 + i],
                self.kernel[i],
                self.strides[i],
                self.dilations[i],
                self.before[i],
                self.after[i],
                ceil,
            )
            for i in range(nd)
        ]
        self.shape = [*x.shape[:2], *self.spatial, *tail]
        # Pad to exactly what the windows read (ceil_mode may read past the end pads).
        need = [
            (self.spatial[i] - 1) * self.strides[i] + span(self.kernel[i], self.dilations[i])
            for i in range(nd)
        ]
        end = [need[i] - x.shape[2 + i] - self.before[i] for i in range(nd)]
        self.rk = reduce_axes(self.kernel, "rk")
        self.x, self.end = x, end
        self.clamp = clamp and self._edges_in_windows()
        if not self.clamp:
            keep = [0] * len(tail)
            self.padded = pad_tensor(
                x, [0, 0, *self.before, *keep], [0, 0, *end, *keep], value=fill, name="pool_pad"
            )

    def _edges_in_windows(self) -> bool:
        """Whether a tap outside the input may read the nearest edge element instead of
        the pad value, for an op (max, min) that a repeated element of the window cannot
        change: with dilation 1 a window is a run of taps, so when every window overlaps
        the input, the edge element nearest a tap outside it is one of the window's own."""
        for i in range(self.nd):
            first_window_end = self.kernel[i] - 1 - self.before[i]
            last_window_start = (self.spatial[i] - 1) * self.strides[i] - self.before[i]
            n = self.x.shape[2 + i]
            if self.dilations[i] != 1 or first_window_end < 0 or last_window_start > n - 1:
                return False
        return True

    def load(self, n, c, o):
        """``o``: the output's spatial indices, then those of the carried dims."""
        xi = [
            window_index(o[i], self.rk[i], self.strides[i], self.dilations[i])
            for i in range(self.nd)
        ]
        if not self.clamp:
            return self.padded[(n, c, *xi, *o[self.nd :])]
        for i in range(self.nd):  # clamped into the input: no padded copy
            if self.before[i]:
                xi[i] = te.max_(xi[i] - self.before[i], 0)
            if self.end[i] > 0:
                xi[i] = te.min_(xi[i], self.x.shape[2 + i] - 1)
        return self.x[(n, c, *xi, *o[self.nd :])]

    def count(self, o, lo, hi):
        """Taps of the window at ``o`` whose input index t (unpadded coordinates)
        satisfies lo[d] <= t < hi[d] in every dim, as an INDEX expression."""
        total = None
        for i in range(self.nd):
            s, d, k = self.strides[i], self.dilations[i], self.kernel[i]
            start = o[i] * s - self.before[i]
            # first tap >= lo: ceil((lo - start) / d); last tap < hi: floor((hi-1-start)/d)
            first = te.max_(-((start - lo[i]) // d), 0)
            last = te.min_((hi[i] - 1 - start) // d, k - 1)
            n = te.max_(last - first + 1, 0)
            total = n if total is None else total * n
        return total


@register_op("max_pool", "opaque")
def max_pool(inputs, attrs):
    (x,) = inputs
    w = _Window(x, attrs, _lowest(x.dtype), clamp=True)
    # The maximum in its own stage, read once by a copy: a schedule can keep a tile of
    # it in registers (a default schedule computes it inside the copy's loop).
    best = te.compute(
        w.shape,
        lambda n, c, *o: te.nanmax_reduce(w.load(n, c, o), w.rk),
        name="max_pool_acc",
        tag="pool",
    )
    return [te.compute(w.shape, lambda *i: best[i], name="max_pool", tag="elemwise")]


@register_op("avg_pool", "opaque")
def avg_pool(inputs, attrs):
    (x,) = inputs
    w = _Window(x, attrs, 0)
    total = te.compute(
        w.shape, lambda n, c, *o: te.sum(w.load(n, c, o), w.rk), name="avg_pool_sum", tag="pool"
    )
    sizes = x.shape[2 : 2 + w.nd]
    if attrs.get("count_include_pad", 0):
        # Pads count, the region past the end pads (ceil_mode) does not.
        lo = [-b for b in w.before]
        hi = [sizes[i] + w.after[i] for i in range(w.nd)]
    else:
        lo, hi = [0] * w.nd, list(sizes)

    def f(n, c, *o):
        return total[(n, c, *o)] / te.cast(x.dtype, w.count(o, lo, hi))

    return [te.compute(w.shape, f, name="avg_pool", tag="elemwise")]


@register_op("lp_pool", "opaque")
def lp_pool(inputs, attrs):
    """(sum |x|^p)^(1/p) over each window; zero padding."""
    (x,) = inputs
    w = _Window(x, attrs, 0)
    p = float(attrs.get("p", 2))
    dt = x.dtype

    def powered(v):
        if p == 2.0:
            return v * v
        if p == 1.0:
            return te.call("fabs", v)
        return te.call("pow", te.call("fabs", v), te.const(p, dt))

    total = te.compute(
        w.shape,
        lambda n, c, *o: te.sum(powered(w.load(n, c, o)), w.rk),
        name="lp_pool_sum",
        tag="pool",
    )

    def root(*idx):
        v = total[idx]
        if p == 1.0:
            return v
        if p == 2.0:
            return te.call("sqrt", v)
        return te.call("pow", v, te.const(1.0 / p, dt))

    return [te.compute(w.shape, root, name="lp_pool", tag="elemwise")]


# Blocked layout (N, C/x, H, W, x): the same computes, named for the layout.
for _name, _compute in (("max_pool", max_pool), ("avg_pool", avg_pool), ("lp_pool", lp_pool)):
    register_op(f"{_name}_nchwc", "opaque")(_compute)


# cpu: the window loops outside the (contiguous) channel block, which runs in vectors.
for _name in ("max_pool", "avg_pool", "lp_pool"):
    for _op in (_name, f"{_name}_nchwc"):
        register_schedule(_op, "cpu")(blocked_reduce_schedule)
