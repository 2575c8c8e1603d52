"""Injective ops that read elements at positions given by data: gather, gather_elements,
one_hot, and trilu (positions given by the element's own index).

Index tensors are runtime data, so an index is wrapped (negative counts from the end)
and then clamped into range: a bad index reads a valid element instead of memory
outside the tensor.
"""

from __future__ import annotations

from .. import te
from .registry import register_op
from .shape_ops import _axis


def _index_dtype(t: te.Tensor, op: str) -> None:
    if t.dtype not in ("int32", "int64"):
        raise ValueError(f"{op}: indices must be int32 or int64, not {t.dtype}")


def safe_index(i: te.Expr, n: int) -> te.Expr:
    """``i`` (any integer dtype) as an INDEX in [0, n): wrapped if negative, clamped."""
    i = te.cast(te.INDEX, i)
    i = te.select(i < 0, i + n, i)
    return te.min_(te.max_(i, te.const(0, te.INDEX)), te.const(max(n - 1, 0), te.INDEX))


@register_op("gather", "injective")
def gather(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
    """attrs: axis. out[a, j, b] = x[a, indices[j], b]."""
    x, ind = inputs
    _index_dtype(ind, "gather")
    axis = _axis(int(attrs.get("axis", 0)), x.ndim)
    shape = x.shape[:axis] + ind.shape + x.shape[axis + 1 :]

    def body(*idx):
        j = idx[axis : axis + ind.ndim]
        pos = safe_index(ind[tuple(j)], x.shape[axis])
        return x[idx[:axis] + (pos,) + idx[axis + ind.ndim :]]

    return [te.compute(shape, body, tag="injective")]


@register_op("gather_elements", "injective")
def gather_elements(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
    """attrs: axis. out[i] = x[i with dim axis replaced by indices[i]]."""
    x, ind = inputs
    _index_dtype(ind, "gather_elements")
    axis = _axis(int(attrs.get("axis", 0)), x.ndim)
    if ind.ndim != x.ndim or any(
        a > b for k, (a, b) in enumerate(zip(ind.shape, x.shape, strict=True)) if k != axis
    ):
        raise ValueError(f"gather_elements: indices {list(ind.shape)} do not fit {list(x.shape)}")

    def body(*idx):
        pos = safe_index(ind[idx], x.shape[axis])
        return x[idx[:axis] + (pos,) + idx[axis + 1 :]]

    return [te.compute(ind.shape, body, tag="injective")]


@register_op("one_hot", "injective")
def one_hot(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
    """attrs: depth, axis. inputs: indices, values ([off, on]). An index outside
    [-depth, depth) gives a row of off values."""
    ind, values = inputs
    depth = int(attrs["depth"])
    if values.shape != (2,):
        raise ValueError(f"one_hot: values must have shape [2], not {list(values.shape)}")
    if depth < 1:
        raise ValueError(f"one_hot: depth {depth} is not positive")
    axis = _axis(int(attrs.get("axis", -1)), ind.ndim + 1)
    shape = ind.shape[:axis] + (depth,) + ind.shape[axis:]

    def body(*idx):
        i = te.cast(te.INDEX, ind[idx[:axis] + idx[axis + 1 :]])
        i = te.select(i < 0, i + depth, i)
        return te.select(te.eq(i, idx[axis]), values[1], values[0])

    return [te.compute(shape, body, tag="injective")]


@register_op("trilu", "injective")
def trilu(inputs: list[te.Tensor], attrs: dict) -> list[te.Tensor]:
    """attrs: upper (1 keeps j - i >= k, 0 keeps j - i <= k), k (diagonal offset), unless
    a second input (a runtime int64 scalar) gives k."""
    x = inputs[0]
    if x.ndim < 2:
        raise ValueError("trilu needs at least 2 dims")
    upper = int(attrs.get("upper", 1))
    if len(inputs) > 1:
        if inputs[1].size != 1 or inputs[1].dtype != "int64":
            raise ValueError("trilu: k must be one int64")
        k = inputs[1][(0,) * inputs[1].ndim]
    else:
        k = te.const(int(attrs.get("k", 0)), te.INDEX)

    def body(*idx):
        diff = idx[-1] - idx[-2]
        keep = diff >= k if upper else diff <= k
        return te.select(keep, x[idx], te.const(0, x.dtype))

    return [te.compute(x.shape, body, tag="injective")]
