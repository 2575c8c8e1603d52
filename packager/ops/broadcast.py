"""Numpy broadcasting for n-ary computes, shared by every op that broadcasts.

Shapes align at their last dims; a dim of size 1 stretches to the other sizes. An
input dim that stretches is always read at index 0, so the loads of a broadcast
compute need no bounds checks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .. import te


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The numpy broadcast of ``shapes``; ValueError if they are incompatible."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(ndim):
        dims = {s[len(s) - ndim + k] for s in shapes if len(s) - ndim + k >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ValueError(f"shapes {', '.join(str(list(s)) for s in shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_load(t: te.Tensor, idx: Sequence[te.Expr]) -> te.Expr:
    """Element of ``t`` at output index ``idx`` (len(idx) >= t.ndim), numpy-aligned."""
    lead = len(idx) - t.ndim
    return t[tuple(0 if d == 1 else idx[lead + k] for k, d in enumerate(t.shape))]


def broadcast_compute(
    inputs: Sequence[te.Tensor],
    fn: Callable[..., te.Expr],
    name: str | None = None,
    tag: str = "broadcast",
) -> te.Tensor:
    """out[i] = fn(x0[i'], x1[i''], ...) over the broadcast shape of the inputs."""
    shape = broadcast_shape(*(t.shape for t in inputs))

    def body(*idx):
        return fn(*(broadcast_load(t, idx) for t in inputs))

    return te.compute(shape, body, name=name, tag=tag)


def elementwise_compute(
    x: te.Tensor, fn: Callable[[te.Expr], te.Expr], name: str | None = None
) -> te.Tensor:
    """out[i] = fn(x[i])."""
    return te.compute(x.shape, lambda *i: fn(x[i]), name=name, tag="elementwise")
