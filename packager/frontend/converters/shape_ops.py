"""Converters of ONNX ops that only move data: reshapes (Reshape, Flatten, Squeeze,
Unsqueeze), Transpose, Concat, Slice, Split, Expand, Tile.

Shape-like inputs (Reshape's shape, Slice's starts, ...) must be constants; the
converters resolve them (0 and -1 dims, default axes) into the library ops' attrs.
"""

from __future__ import annotations

import math

from ._common import axis_in, check_attrs, ints
from .registry import converter


def _shape(ctx, name: str) -> tuple[int, ...]:
    return ctx.value(name).shape


def _reshape_to(ctx, node, shape):
    return [ctx.node("reshape", node, [node.input[0]], shape=[int(d) for d in shape])]


@converter("Reshape")
def reshape(ctx, node):
    check_attrs(ctx, node, {"shape", "allowzero"})
    x = _shape(ctx, node.input[0])
    target = ctx.attr(node, "shape") if ctx.opset < 5 else ints(ctx, node, 1, "shape")
    if target is None:
        ctx.fail(node, "the target shape is missing")
    allowzero = ctx.attr(node, "allowzero", 0)
    out = [
        x[k] if d == 0 and not allowzero and k < len(x) else int(d) for k, d in enumerate(target)
    ]
    if out.count(-1) > 1 or any(d < -1 for d in out):
        ctx.fail(node, f"shape {list(target)} is not valid")
    known = math.prod(d for d in out if d != -1)
    if -1 in out:
        if known == 0 or math.prod(x) % known:
            ctx.fail(node, f"cannot reshape {list(x)} to {list(target)}")
        out[out.index(-1)] = math.prod(x) // known
    if math.prod(out) != math.prod(x):
        ctx.fail(node, f"cannot reshape {list(x)} to {list(target)}")
    return _reshape_to(ctx, node, out)


@converter("Flatten")
def flatten(ctx, node):
    check_attrs(ctx, node, {"axis"})
    x = _shape(ctx, node.input[0])
    axis = ctx.attr(node, "axis", 1)
    if not -len(x) <= axis <= len(x):
        ctx.fail(node, f"axis {axis} is out of range for {len(x)} dims")
    axis = axis % len(x) if axis < 0 else axis
    return _reshape_to(ctx, node, [math.prod(x[:axis]), math.prod(x[axis:])])


def _axes(ctx, node, what: str) -> list[int] | None:
    """Axes from the attribute (opset < 13) or the constant input 1."""
    if ctx.opset < 13:
        axes = ctx.attr(node, "axes")
        return None if axes is None else list(axes)
    return ints(ctx, node, 1, what)


@converter("Squeeze")
def squeeze(ctx, node):
    check_attrs(ctx, node, {"axes"})
    x = _shape(ctx, node.input[0])
    axes = _axes(ctx, node, "axes")
    if axes is None:
        drop = {k for k, d in enumerate(x) if d == 1}
    else:
        drop = {axis_in(ctx, node, a, len(x)) for a in axes}
        for k in sorted(drop):
            if x[k] != 1:
                ctx.fail(node, f"cannot squeeze axis {k} of size {x[k]}")
    return _reshape_to(ctx, node, [d for k, d in enumerate(x) if k not in drop])


@converter("Unsqueeze")
def unsqueeze(ctx, node):
    check_attrs(ctx, node, {"axes"})
    x = _shape(ctx, node.input[0])
    axes = _axes(ctx, node, "axes")
    if axes is None:
        ctx.fail(node, "axes are missing")
    ndim = len(x) + len(axes)
    new = {axis_in(ctx, node, a, ndim) for a in axes}
    if len(new) != len(axes):
        ctx.fail(node, f"axes {axes} repeat an axis")
    rest = iter(x)
    return _reshape_to(ctx, node, [1 if k in new else next(rest) for k in range(ndim)])


@converter("Transpose")
def transpose(ctx, node):
    check_attrs(ctx, node, {"perm"})
    ndim = len(_shape(ctx, node.input[0]))
    perm = ctx.attr(node, "perm")
    perm = list(range(ndim))[::-1] if perm is None else [int(p) for p in perm]
    if sorted(perm) != list(range(ndim)):
        ctx.fail(node, f"perm {perm} is not a permutation of {ndim} dims")
    return [ctx.node("transpose", node, [node.input[0]], perm=perm)]


@converter("Concat")
def concat(ctx, node):
    check_attrs(ctx, node, {"axis"})
    inputs = [i for i in node.input if i]
    ndim = len(_shape(ctx, inputs[0]))
    axis = ctx.attr(node, "axis", 1 if ctx.opset < 4 else None)
    if axis is None:
        ctx.fail(node, "attribute axis is missing")
    return [ctx.node("concat", node, inputs, axis=axis_in(ctx, node, axis, ndim))]


@converter("Slice")
def slice_(ctx, node):
    check_attrs(ctx, node, {"starts", "ends", "axes"})
    if ctx.opset < 10:
        starts, ends = ctx.attr(node, "starts"), ctx.attr(node, "ends")
        axes, steps = ctx.attr(node, "axes"), None
    else:
        starts, ends = ints(ctx, node, 1, "starts"), ints(ctx, node, 2, "ends")
        axes, steps = ints(ctx, node, 3, "axes"), ints(ctx, node, 4, "steps")
    if starts is None or ends is None:
        ctx.fail(node, "starts and ends are required")
    attrs = {"starts": list(starts), "ends": list(ends), "axes": axes, "steps": steps}
    return [
        ctx.node(
            "slice", node, [node.input[0]], **{k: v for k, v in attrs.items() if v is not None}
        )
    ]


@converter("Split")
def split(ctx, node):
    """One slice node per output: each output is a contiguous range of the axis."""
    check_attrs(ctx, node, {"axis", "split", "num_outputs"})
    x = _shape(ctx, node.input[0])
    axis = axis_in(ctx, node, ctx.attr(node, "axis", 0), len(x))
    sizes = _split_sizes(ctx, node, x[axis])
    nodes, start = [], 0
    for out, size in zip(node.output, sizes, strict=True):
        if out:
            attrs = {"starts": [start], "ends": [start + size], "axes": [axis]}
            nodes.append(ctx.node("slice", node, [node.input[0]], outputs=[out], **attrs))
        start += size
    return nodes


def _split_sizes(ctx, node, dim: int) -> list[int]:
    n = len(node.output)
    sizes = ctx.attr(node, "split")
    if sizes is None and ctx.has_input(node, 1):
        sizes = ints(ctx, node, 1, "split")
    num_outputs = ctx.attr(node, "num_outputs")
    if sizes is None and num_outputs is not None:
        # Opset 18: chunks of ceil(dim / n), the last one smaller.
        chunk = -(-dim // num_outputs)
        sizes = [min(chunk, max(dim - k * chunk, 0)) for k in range(num_outputs)]
    elif sizes is None:
        if dim % n:
            ctx.fail(node, f"axis of size {dim} does not split into {n} equal parts")
        sizes = [dim // n] * n
    sizes = [int(s) for s in sizes]
    if len(sizes) != n or sum(sizes) != dim or min(sizes) < 0:
        ctx.fail(node, f"split sizes {sizes} do not fit {n} outputs of an axis of size {dim}")
    return sizes


@converter("Expand")
def expand(ctx, node):
    check_attrs(ctx, node, ())
    shape = ints(ctx, node, 1, "shape")
    return [ctx.node("broadcast_to", node, [node.input[0]], shape=shape)]


@converter("Tile")
def tile(ctx, node):
    check_attrs(ctx, node, ())
    if ctx.opset < 6:
        ctx.fail(node, "Tile before opset 6 (tiles/axis inputs) is not supported")
    repeats = ints(ctx, node, 1, "repeats")
    if len(repeats) != len(_shape(ctx, node.input[0])):
        ctx.fail(node, f"repeats {repeats} do not match the input's rank")
    return [ctx.node("tile", node, [node.input[0]], repeats=repeats)]
