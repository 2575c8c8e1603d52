"""Shared pieces of the cpu schedule templates (conv, matmul, pool, reduce, softmax)."""

from __future__ import annotations

import math

import numpy as np

from .. import te
from ..te.expr import Call, Select, walk
from ..te.schedule import PARALLEL_MIN_ELEMS, default_schedule, parallel_outer, vector_lanes
from .registry import ScheduleContext

# What the conv templates assume where a target does not give its cache sizes.
DEFAULT_L1_BYTES = 32 << 10
DEFAULT_L2_BYTES = 512 << 10
# Multiply-adds one straight-line body of a conv tile may hold (register tile x unrolled
# reduction steps): longer ones miss the instruction cache and take the compiler seconds.
MAX_UNROLLED = 128
# A 1x1 conv's row tile walks its rows outside its output blocks where its input is more
# than OUTER_INPUT_L2 times the L2 and would be read OUTER_MIN_PASSES times or more
# (conv_schedule.default_outer_order has the measurements).
OUTER_INPUT_L2 = 2
OUTER_MIN_PASSES = 4


def input_outgrows_l2(input_bytes: int, target, passes: int) -> bool:
    """Whether a 1x1 conv reading ``input_bytes`` ``passes`` times (once per tile of
    output blocks) would stream it from beyond the L2 each time."""
    l2 = target.l2_bytes or DEFAULT_L2_BYTES
    return passes >= OUTER_MIN_PASSES and input_bytes > OUTER_INPUT_L2 * l2


def rows_first(target, conv: te.Tensor, weight: te.Tensor | None) -> bool:
    """Whether ``conv`` built for a multi-core ``target`` gives each core a share of the
    output rows (all the channel blocks of its rows) rather than of the channel blocks
    (all the rows): where its ``weight`` is no larger than its input and output
    together (False without a packed weight). The thread pool gives each core the same
    share of every parallel loop (runtime/src/pk_parallel.c), so with rows outside a
    core reads the rows its stage before wrote from its own cache (but for a window's
    edge rows), where with blocks outside every conv reads all its input channels, half
    of them written by the other core. Where the weights are the larger (a 3x3 conv at
    7x7, 320 -> 1280 at 7x7), rows outside, each core would read all of them rather
    than its blocks' share: tv_resnet18's 256 -> 512 3x3 conv at 7x7 (4.7 MB of
    weights) took 1.81x its time.

    Measured on an Intel Xeon (family 6 model 167, 2 cores, L2 2 MiB each), untuned,
    run_bundle alternating A and B: tv_mobilenet_v2 at 2 threads 0.936x the time
    (`host`, AVX-512; and 0.936x `host-avx2`), tv_resnet18 0.977x; at 1 thread 1.00x,
    1.01x and 0.99x. Its 1x1 convs and stem that turned took 0.68-0.94x their time; the
    depthwise convs (row_bands) over 56x56 and 112x112 inputs 0.82-0.92x, while those
    over 14x14 and 28x28 took 1.15-1.33x, all of them against kernels split by blocks
    on both sides of them."""
    if target.cores < 2 or weight is None:
        return False
    data = tensor_bytes(conv.op.input_tensors[0]) + tensor_bytes(conv)
    return tensor_bytes(weight) <= data


def row_bands(target, rows: int) -> int:
    """Bands of output rows, one per core, a depthwise conv or a pool of ``rows`` output
    rows takes outside its channel blocks (their weights are a few taps: rows_first
    holds), where the rows share out evenly; 1 (channel blocks outside) elsewhere: bands
    of 4 rows over 7, a guard past the last, made tv_mobilenet_v2's 7x7 depthwise convs
    7x slower."""
    cores = target.cores
    return cores if cores > 1 and rows % cores == 0 else 1


def tensor_bytes(t: te.Tensor) -> int:
    return math.prod(t.shape) * np.dtype(t.dtype).itemsize


def vector_registers(target) -> int:
    """Vector registers the ISA has: 32 with AVX-512 and on AArch64, else 16 (AVX2,
    ARMv7 NEON)."""
    return 32 if target.vector_bits >= 512 or target.arch == "aarch64" else 16


def find_tagged(t: te.Tensor, tag: str) -> te.Tensor | None:
    """The nearest compute tensor tagged ``tag`` at or above ``t``."""
    stack, seen = [t], set()
    while stack:
        x = stack.pop()
        if id(x) in seen or not isinstance(x.op, te.ComputeOp):
            continue
        seen.add(id(x))
        if x.op.tag == tag:
            return x
        stack.extend(x.op.input_tensors)
    return None


def inline_around_pad(sch: te.Schedule, conv: te.Tensor) -> te.Tensor | None:
    """Inline every stage of a conv's group but its outputs, its reductions and the conv's
    padded input; returns that input (None when the conv reads its input as it is)."""
    pad = find_tagged(conv, "pad") if conv.op.input_tensors else None
    for st in sch.stages:
        if not (st.is_output or st.op.reduce_axis or (pad is not None and st.tensor is pad)):
            st.compute_inline()
    return pad


def padded_copy_at_root(st, parallel: bool, vectorize: bool) -> None:
    """A padded input made once at root: its rows (n, block, row fused) on the thread
    pool, and each channel block of a blocked (5-d) input one vector copy (the padding
    guard decided once per block)."""
    if vectorize and len(st.op.axis) == 5:
        st.vectorize(st.op.axis[-1])
    if parallel:
        n, cb, h = st.op.axis[:3]
        st.parallel(st.fuse(n, cb, h))


def fallback(ctx: ScheduleContext) -> te.Schedule:
    """The generic schedule, for shapes and dtypes a template does not handle."""
    return default_schedule(ctx.outs, ctx.target)


def lanes_of(ctx: ScheduleContext, t: te.Tensor) -> int:
    return vector_lanes(t.dtype, ctx.target)


def epilogue_stage(ctx: ScheduleContext, sch: te.Schedule):
    """The one output stage of a group whose outputs are an elementwise epilogue of the
    anchor (same shape), or None when the group has several outputs or reshapes."""
    if len(ctx.outs) != 1 or tuple(ctx.outs[0].shape) != tuple(ctx.anchor.shape):
        return None
    return sch[ctx.outs[0]]


def run_parallel(ctx: ScheduleContext, st, keep=frozenset()):
    """Parallel outer loops of ``st`` when the board has more than one core."""
    if ctx.target.cores > 1:
        return parallel_outer(st, ctx.target, keep)
    return None


def _reduction_of(sch: te.Schedule, shape: tuple):
    """The stage of the group's reduction producing ``shape`` (the output's), if any."""
    for st in sch.stages:
        if st.op.reduce_axis and tuple(st.tensor.shape) == shape:
            return st
    return None


def _vector_friendly(sch: te.Schedule, red) -> bool:
    """A sum of plain loads and arithmetic (no padding selects, no max/min, no calls):
    the codegen turns its update into vector code. Other bodies would become a scalar
    loop over the block that updates memory per step, slower than the generic order."""
    if red.op.body.combiner != "sum" or red.op.body.where is not None:
        return False
    for st in sch.stages:
        if st.attach_type == "inline" or st is red:
            body = st.op.body.body if st is red else st.op.body
            if any(isinstance(n, (Select, Call)) for n in walk(body)):
                return False
    return True


def _lanes_inside(st, iv) -> None:
    """Move the reduce axes outside ``iv`` (the stage's innermost data axis) and
    vectorize it: each reduction step then updates a whole vector of outputs."""
    reduce = [x for x in st.leaf_iter_vars if x.kind == "reduce"]
    st.reorder(*reduce, iv)
    st.vectorize(iv)


def blocked_reduce_schedule(ctx: ScheduleContext) -> te.Schedule:
    """Reductions (pools, global pools) whose innermost axis is kept, as in the blocked
    layout's channel block: the window loops go outside the block, the block runs in
    vectors, the outer axes in parallel. Other shapes take the generic schedule."""
    sch = default_schedule(ctx.outs)
    out = epilogue_stage(ctx, sch)
    red = _reduction_of(sch, tuple(ctx.outs[0].shape)) if out is not None else None
    lanes = lanes_of(ctx, ctx.outs[0])
    inner = ctx.outs[0].shape[-1] if ctx.outs[0].ndim else 0
    if red is None or lanes < 2 or inner not in (2, 4, 8, 16) or inner > lanes:
        return interleaved_reduce_schedule(ctx)
    if not _vector_friendly(sch, red):
        return fallback(ctx)
    if red is out:
        vec = out.op.axis[-1]
        _lanes_inside(out, vec)
        run_parallel(ctx, out, {id(vec)})
        return sch
    vec = out.op.axis[-1]
    out.vectorize(vec)
    at = out.leaf_iter_vars[-2] if len(out.leaf_iter_vars) > 1 else None
    if at is None:
        return fallback(ctx)
    red.compute_at(out, at)
    _lanes_inside(red, red.op.axis[-1])
    run_parallel(ctx, out, {id(vec), id(at)})
    return sch


# Independent sums one reduction stage interleaves. Each output's sum is one chain of
# dependent adds (the compiler may not reassociate floats), so a global pool over an NCHW
# tensor ran at one add per add latency: SqueezeNet's 1000 x 13 x 13 average pool took
# 0.095 ms of an int8 run of 2.9 ms (7 GB/s).
CHAINS = 8
# Reduced elements per output below which one chain is short enough as it is.
MIN_CHAIN = 16


def interleaved_reduce_schedule(ctx: ScheduleContext) -> te.Schedule:
    """A reduction whose outputs are not a vector block (an NCHW global pool, a mean over
    a row): CHAINS outputs of the innermost output axis accumulate side by side, the
    reduce loops outside them, so each step adds to CHAINS independent chains. Every
    output still sums its elements in the same order as one chain: the results are the
    generic schedule's, bit for bit. Other shapes take the generic schedule."""
    sch = default_schedule(ctx.outs)
    out = epilogue_stage(ctx, sch)
    red = _reduction_of(sch, tuple(ctx.outs[0].shape)) if out is not None else None
    if red is None:
        return fallback(ctx)
    per_output = 1
    for r in red.op.reduce_axis:
        per_output *= r.extent
    axis = next((iv for iv in reversed(out.op.axis) if iv.extent > 1), None)
    # the most chains that divide the axis: a guarded tail would sit in the unrolled loop
    chains = next((d for d in range(CHAINS, 1, -1) if axis and axis.extent % d == 0), 0)
    if per_output < MIN_CHAIN or not chains:
        return fallback(ctx)
    outer, inner = out.split(axis, chains)
    leaves = out.leaf_iter_vars
    at = out.fuse(*leaves[: leaves.index(outer) + 1])
    work = per_output
    for iv in out.op.axis:
        work *= iv.extent
    if ctx.target.cores > 1 and work >= PARALLEL_MIN_ELEMS and at.extent > 1:
        out.parallel(at)
    if red is not out:
        red.compute_at(out, at)
    reduce = [x for x in red.leaf_iter_vars if x.kind == "reduce"]
    red.reorder(*reduce, *[x for x in red.leaf_iter_vars if x.kind == "data" and x is not at])
    red.unroll(inner if red is out else red.op.axis[list(out.op.axis).index(axis)])
    return sch
