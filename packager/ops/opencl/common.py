"""Pieces the OpenCL templates for products (convs, dense layers) share: a register tile
per work-item accumulated in private memory, then the group's epilogue applied to it
and stored once, vectors along the innermost output axis.

Loop nest of every such template (knobs in quotes):

    work-groups x work-items over the output tiles   -- "group_size", "group_shape"
      acc[tile] = 0 (private: registers)                   (sch.cache_write, "local")
      for the reduction ("unroll_*" knobs unroll its inner loops):
        for each tile row/block, column (unrolled):        -- "tile_*"
          acc[..][0:V] += a * b[0:V]                       -- "vector" (V lanes)
      out[tile] = epilogue(acc[tile])  (bias, relu, clip, residual; vstore)

Mali GPUs want several float4 outputs per work-item and no local memory (it is emulated
in main memory there); PoCL compiles a work-group into loops over its work-items, so
groups of 32-256 items with contiguous vectors per item suit it as well.
"""

from __future__ import annotations

from ... import te
from ...codegen.opencl import GPU_DTYPES
from ...target import OpenCLTarget
from .generic import gpu_default_schedule, group_size

VECTOR_LANES = (2, 4, 8, 16)
GROUP_SIZES = (32, 64, 128, 256)
GROUP = 64  # work-items per group by default: a few of Mali's and PoCL's SIMD widths
MAX_UNROLLED = 256  # multiply-adds in one unrolled reduction step (compile time, I-cache)


def fallback(ctx) -> te.Schedule:
    """The generic GPU schedule, for shapes and dtypes a template does not handle."""
    return gpu_default_schedule(ctx.outs, ctx.target)


def fits(ctx, acc: te.Tensor) -> bool:
    """One output of the product's shape (an elementwise epilogue at most) in a dtype the
    GPU runs: what every product template needs."""
    out = ctx.outs[0]
    return (
        len(ctx.outs) == 1
        and tuple(out.shape) == tuple(acc.shape)
        and acc.dtype in GPU_DTYPES
        and acc.dtype != "bool"
        and all(d > 0 for d in acc.shape)
    )


def accumulate_privately(ctx, product: te.Tensor):
    """A schedule where ``product`` accumulates in a private buffer and every other stage
    but the output is inlined into the output (the epilogue runs from registers).
    Returns (schedule, accumulator tensor), or None when the group has another reduction
    (it would need its own nest)."""
    sch = te.create_schedule(ctx.outs)
    acc = sch.cache_write(product, "local")
    for st in sch.stages:
        if st.is_output or st.tensor is acc:
            continue
        if st.op.reduce_axis:
            return None
        st.compute_inline()
    return sch, acc


def vector_knob(cfg, lanes: int, target: OpenCLTarget, name: str = "vector") -> int:
    """Lanes of the vector loads/stores along an innermost axis of ``lanes`` elements: the
    device's preferred width (Mali: 4) capped by the axis, 1 for scalar code."""
    options = [v for v in VECTOR_LANES if lanes % v == 0]
    default = max((v for v in options if v <= target.preferred_vector_width), default=1)
    if target.preferred_vector_width >= lanes and lanes in options:
        default = lanes
    return cfg.define(name, [1, *options], default)


def bind_groups(st, cfg, target: OpenCLTarget, outer: list, xy: tuple | None = None):
    """Bind the stage's tile loops ``outer`` (adjacent leaves, outermost first) to
    work-groups and work-items; returns the innermost work-item leaf.

    "group_shape" flat: the loops fused and split into groups of "group_size" items along
    x (consecutive items take consecutive tiles). xy: ``xy`` = (row loop, column loop)
    (the last two of ``outer``) split into groups of rows x columns (y, x), the other
    loops fused along z: neighbouring items then share input rows."""
    want = cfg.define("group_size", GROUP_SIZES, GROUP)
    shape = cfg.define("group_shape", ("flat", "xy"), "flat") if xy else "flat"
    if shape == "flat":
        fused = st.fuse(*outer) if len(outer) > 1 else outer[0]
        bo, ti = st.split(fused, whole_groups(fused.extent, group_size(fused.extent, target, want)))
        st.bind(bo, "blockIdx.x")
        st.bind(ti, "threadIdx.x")
        return ti
    row, col = xy
    rest = [iv for iv in outer if iv is not row and iv is not col]
    tx = group_size(col.extent, target, min(want, 16))
    ty = group_size(row.extent, target, max(1, want // tx))
    bx, ix = st.split(col, tx)
    by, iy = st.split(row, ty)
    z = st.fuse(*rest) if len(rest) > 1 else (rest[0] if rest else None)
    order = ([z] if z is not None else []) + [by, bx, iy, ix]
    st.reorder(*order)
    if z is not None:
        st.bind(z, "blockIdx.z")
    st.bind(by, "blockIdx.y")
    st.bind(bx, "blockIdx.x")
    st.bind(iy, "threadIdx.y")
    st.bind(ix, "threadIdx.x")
    return ix


def whole_groups(total: int, size: int) -> int:
    """A group size dividing ``total`` between size/2 and size when there is one: no
    work-item past the end, whose accumulation (outside the guard on the store) would
    read past the inputs; else ``size``."""
    return next((d for d in range(size, size // 2, -1) if total % d == 0), size)


def vector_tail(st, iv, vec: int):
    """Split ``iv`` into an unrolled part and a vectorized one of ``vec`` lanes (vec 1:
    the whole axis unrolled, scalar code); returns the leaves, outermost first."""
    if vec == 1:
        st.unroll(iv)
        return [iv]
    if vec == iv.extent:
        st.vectorize(iv)
        return [iv]
    o, i = st.split(iv, vec)
    st.unroll(o)
    st.vectorize(i)
    return [o, i]


def unroll_split(st, iv, factor: int):
    """Unroll ``iv`` by ``factor`` (all of it when it is the extent); returns the leaves
    replacing ``iv``."""
    if factor <= 1:
        return [iv]
    if factor >= iv.extent:
        st.unroll(iv)
        return [iv]
    o, i = st.split(iv, factor)
    st.unroll(i)
    return [o, i]


def divisor_default(n: int, most: int) -> int:
    return max((d for d in range(1, min(n, most) + 1) if n % d == 0), default=1)
