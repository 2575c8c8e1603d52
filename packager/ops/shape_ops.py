"""Injective ops that move elements without computing on them: every output element is
one input element (or, for concat, one of several inputs').

Attrs are already normalized by the converters (a full target shape, a full permutation,
a non-negative axis), except slice, which takes ONNX's starts/ends/axes/steps and
clamps them itself so that shape inference and the kernel agree.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import te
from .broadcast import broadcast_load, broadcast_shape
from .registry import register_op


def _axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"{what} {axis} is out of range for {ndim} dims")
    return axis % ndim


def _strides(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


def _prod(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@register_op("reshape", "injective")
def reshape(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
    """attrs: shape (the final shape, no 0 or -1 left)."""
    (x,) = inputs
    shape = tuple(int(d) for d in attrs["shape"])
    if _prod(shape) != x.size or any(d < 0 for d in shape):
        raise ValueError(f"cannot reshape {list(x.shape)} to {list(shape)}")

    def body(*idx):
        flat = flat_index(idx, shape)
        src = []
        for k, (d, st) in enumerate(zip(x.shape, _strides(x.shape), strict=True)):
            v = flat if st == 1 else te.binary("floordiv", flat, st)
            src.append(v if k == 0 or d == 1 else v % d)
        return x[
            tuple(te.const(0, te.INDEX) if d == 1 else v for v, d in zip(src, x.shape, strict=True))
        ]

    return [te.compute(shape, body, tag="injective")]


def flat_index(idx: Sequence[te.Expr], shape: Sequence[int]) -> te.Expr:
    """Row-major flat offset of ``idx`` in ``shape``."""
    terms = [
        i if st == 1 else i * st
        for i, st, d in zip(idx, _strides(shape), shape, strict=True)
        if d != 1
    ]
    flat = terms[0] if terms else te.const(0, te.INDEX)
    for t in terms[1:]:
        flat = flat + t
    return flat


@register_op("transpose", "injective")
def transpose(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
    """attrs: perm (output dim k is input dim perm[k])."""
    (x,) = inputs
    perm = [int(p) for p in attrs["perm"]]
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(f"perm {perm} is not a permutation of {x.ndim} dims")

    def body(*idx):
        src = [None] * x.ndim
        for k, p in enumerate(perm):
            src[p] = idx[k]
        return x[tuple(src)]

    return [te.compute([x.shape[p] for p in perm], body, tag="injective")]


@register_op("concat", "injective")
def concat(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
    """attrs: axis. Empty inputs contribute nothing."""
    first = inputs[0]
    axis = _axis(int(attrs["axis"]), first.ndim)
    for t in inputs[1:]:
        same = t.ndim == first.ndim and all(
            a == b for k, (a, b) in enumerate(zip(t.shape, first.shape, strict=True)) if k != axis
        )
        if not same or t.dtype != first.dtype:
            shapes = ", ".join(f"{u.dtype}{list(u.shape)}" for u in inputs)
            raise ValueError(f"cannot concatenate {shapes} on axis {axis}")
    parts = [t for t in inputs if t.shape[axis] > 0] or [first]
    total = sum(t.shape[axis] for t in inputs)
    shape = list(first.shape)
    shape[axis] = total

    def body(*idx):
        # The last part is the fallback; earlier ones are chosen by offset ranges.
        offsets = [0]
        for t in parts:
            offsets.append(offsets[-1] + t.shape[axis])
        out = None
        for t, start in reversed(list(zip(parts, offsets[:-1], strict=True))):
            load = t[tuple(i - start if k == axis and start else i for k, i in enumerate(idx))]
            end = start + t.shape[axis]
            out = load if out is None else te.select(idx[axis] < end, load, out)
        return out

    return [te.compute(shape, body, tag="injective")]


def slice_ranges(shape: Sequence[int], starts, ends, axes, steps) -> list[range]:
    """Per dim, the input indices an ONNX Slice keeps (numpy slicing semantics)."""
    ranges = [range(d) for d in shape]
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(starts) if steps is None else list(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError("slice: starts, ends, axes and steps differ in length")
    seen = set()
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        a = _axis(int(a), len(shape))
        if a in seen:
            raise ValueError(f"slice: axis {a} is repeated")
        if int(st) == 0:
            raise ValueError("slice: a step is 0")
        seen.add(a)
        ranges[a] = range(shape[a])[slice(int(s), int(e), int(st))]
    return ranges


@register_op("slice", "injective")
def slice_(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
    """attrs: starts, ends, axes (optional), steps (optional), as in ONNX Slice."""
    (x,) = inputs
    ranges = slice_ranges(
        x.shape, attrs["starts"], attrs["ends"], attrs.get("axes"), attrs.get("steps")
    )

    def body(*idx):
        return x[
            tuple(
                i if (r.start, r.step) == (0, 1) else r.start + i * r.step
                for i, r in zip(idx, ranges, strict=True)
            )
        ]

    return [te.compute([len(r) for r in ranges], body, tag="injective")]


@register_op("broadcast_to", "injective")
def broadcast_to(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
    """attrs: shape. The output has the numpy broadcast of shape and the input's shape
    (ONNX Expand: a 1 in shape keeps the input's dim)."""
    (x,) = inputs
    shape = broadcast_shape(x.shape, [int(d) for d in attrs["shape"]])
    return [te.compute(shape, lambda *idx: broadcast_load(x, idx), tag="injective")]


@register_op("tile", "injective")
def tile(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
    """attrs: repeats (one per dim)."""
    (x,) = inputs
    reps = [int(r) for r in attrs["repeats"]]
    if len(reps) != x.ndim or any(r < 0 for r in reps):
        raise ValueError(f"tile: repeats {reps} do not fit {x.ndim} dims")
    shape = [d * r for d, r in zip(x.shape, reps, strict=True)]

    def body(*idx):
        return x[tuple(i if r == 1 else i % d for i, d, r in zip(idx, x.shape, reps, strict=True))]

    return [te.compute(shape, body, tag="injective")]
