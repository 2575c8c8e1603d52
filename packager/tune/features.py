"""Features of a candidate kernel, read off its lowered loop IR (a fixed-length vector).

The cost model ranks candidates of one task, so the features describe what differs
between schedules of the same computation: loop order and extents, what is vectorized,
unrolled or parallel, and for each buffer access its stride along the innermost loop,
its footprint and its reuse. Everything is on a log scale: costs are multiplicative.

A GPU kernel (family ``opencl``) has these and then what decides its speed on a GPU
(``gpu_features``): work-group size, number of work-groups, work per work-item, vector
width of its stores, local-memory bytes, barriers and unrolled statements. An accelerator
kernel (family ``accel``) has the loop features and then ``accel_features``: its virtual
threads, the bytes of each on-chip buffer it allocates, the DMA bytes it loads and
stores, its DMA transfers and its GEMM micro-op iterations. Each family has one vector
length (``feature_length``), so one cost model sees comparable rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..te.expr import Binary, Call, Const, Var, is_float, walk
from ..te.ir import Allocate, Barrier, BufferLoad, PrimFunc, Store
from ..te.simplify import Bounds
from ..te.visitor import LoopVisitor, stmts_of

KINDS = ("serial", "parallel", "vectorized", "unrolled")
LOOP_SLOTS = 8  # innermost first
ACCESS_SLOTS = 4  # the store, then the loads with the largest footprints
ELEM_BYTES = {"float64": 8, "int64": 8, "uint64": 8, "float32": 4, "int32": 4, "uint32": 4}


@dataclass
class Loop:
    var: Var
    extent: int
    kind: str


def _loops(fors) -> list[Loop]:
    """The loops around a statement, each with its trip count: a loop bounded at run
    time (a masked reduction's, lower.py) counts at its most, from the ranges of the
    loops outside it; 1 where unknown."""
    ranges: dict = {}
    out = []
    for f in fors:
        if isinstance(f.extent, Const):
            n = int(f.extent.value)
        else:
            hi = Bounds(ranges)(f.extent)[1]
            n = max(int(hi), 1) if hi is not None else 1
        ranges[f.var] = (0, n - 1)
        out.append(Loop(f.var, n, "serial" if f.kind == "rolled" else f.kind))
    return out


def stores(prim: PrimFunc) -> list[tuple[list[Loop], Store]]:
    """Every store with the loops around it (outermost first)."""
    found = _Stores()
    found.visit(prim.body)
    return found.out


class _Stores(LoopVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.out: list[tuple[list[Loop], Store]] = []

    def visit_Store(self, s: Store) -> None:
        loops = _loops(self.loops)
        self.out.append((loops, s))


def _flops_per_iter(store: Store) -> int:
    return sum(
        1
        for n in walk(store.value)
        if isinstance(n, (Binary, Call)) and is_float(n.dtype) and getattr(n, "op", "") != "max"
    )


def _iters(loops: list[Loop]) -> int:
    return math.prod(lp.extent for lp in loops)


def flop_count(prim: PrimFunc) -> float:
    return float(sum(_iters(lp) * _flops_per_iter(s) for lp, s in stores(prim)))


def coeff(e, v: Var) -> float:
    """How much ``e`` moves when ``v`` grows by one (affine index arithmetic; a division
    scales it down, which is what a blocked index does on average)."""
    if e is v:
        return 1.0
    if not isinstance(e, Binary):
        return 0.0
    a, b = coeff(e.a, v), coeff(e.b, v)
    if e.op == "+":
        return a + b
    if e.op == "-":
        return a - b
    if e.op == "*":
        return a * _const(e.b, 1) + b * _const(e.a, 1)
    if e.op in ("floordiv", "truncdiv"):
        return a / max(_const(e.b, 1), 1)
    if e.op in ("floormod", "truncmod"):
        return a
    return 0.0


def _const(e, fallback: float) -> float:
    return float(e.value) if isinstance(e, Const) else fallback


def _uses(e, v: Var) -> bool:
    return any(n is v for n in walk(e))


def _access(buf, index, loops: list[Loop]) -> list[float]:
    size = ELEM_BYTES.get(buf.dtype, 4)
    used = [lp for lp in loops if _uses(index, lp.var)]
    footprint = min(math.prod(lp.extent for lp in used) * size, buf.size * size)
    stride = abs(coeff(index, loops[-1].var)) if loops else 0.0
    reuse = _iters(loops) * size / max(footprint, 1)
    return [
        math.log2(footprint + 1),
        math.log2(stride + 1),
        float(stride == 0),
        float(stride == 1),
        math.log2(reuse),
        float(len(used)),
    ]


ACCESS_LEN = 6


def _loop_slots(loops: list[Loop], store: Store) -> list[float]:
    out: list[float] = []
    for lp in list(reversed(loops))[:LOOP_SLOTS]:
        kind = KINDS.index(lp.kind) if lp.kind in KINDS else 0
        reduction = float(not _uses(store.index, lp.var))
        out += [math.log2(lp.extent + 1), float(kind), reduction]
    return out + [0.0] * (3 * LOOP_SLOTS - len(out))


def _annotations(loops: list[Loop]) -> list[float]:
    def prod(kind):
        return math.prod(lp.extent for lp in loops if lp.kind == kind)

    inner = loops[-1] if loops else Loop(Var("_"), 1, "serial")
    onehot = [float(inner.kind == k) for k in KINDS]
    return [math.log2(prod(k)) for k in ("vectorized", "unrolled", "parallel")] + [
        math.log2(inner.extent + 1),
        *onehot,
    ]


def features(prim: PrimFunc, family: str = "cpu") -> np.ndarray:
    """The feature vector of one candidate of ``family``: the loop features, then for a
    GPU kernel its GPU features, for an accelerator kernel its accel features."""
    loop = loop_features(prim)
    if family == "cpu":
        return loop
    extra = accel_features(prim) if family == "accel" else gpu_features(prim)
    return np.concatenate([loop, extra])


def feature_length(family: str) -> int:
    extra = {"cpu": 0, "accel": ACCEL_LEN}.get(family, GPU_LEN)
    return _HEAD_LEN + _BODY_LEN + extra


GPU_LEN = 7


def gpu_features(prim: PrimFunc) -> np.ndarray:
    """log2 of: work-items per work-group, work-groups, loop iterations per work-item,
    the widest vectorized loop around a store (the vector width of its loads and stores),
    local-memory bytes, barriers + 1, statements after unrolling (stores times the extents
    of the unrolled loops around them)."""
    from ..codegen.cstyle import SIZE
    from ..codegen.opencl import launch_of

    launch = launch_of(prim)
    items = launch.work_group_items
    sizes = zip(launch.global_size, launch.local_size, strict=True)
    groups = math.prod(g // max(n, 1) for g, n in sizes)
    found = stores(prim)
    iters = sum(_iters(lp) for lp, _ in found)
    vector = max(
        (lp.extent for loops, _ in found for lp in loops if lp.kind == "vectorized"), default=1
    )
    shared = sum(
        s.buffer.size * SIZE.get(s.buffer.dtype, 4)
        for s in stmts_of(prim.body, Allocate)
        if s.buffer.scope == "shared"
    )
    barriers = len(stmts_of(prim.body, Barrier))
    unrolled = sum(
        math.prod(lp.extent for lp in loops if lp.kind == "unrolled") for loops, _ in found
    )
    values = [items, groups, iters / max(items * groups, 1), vector, shared, barriers + 1, unrolled]
    return np.array([math.log2(v + 1) for v in values], dtype=np.float32)


ACCEL_LEN = 8
ACCEL_SCOPES = ("accel.inp", "accel.wgt", "accel.acc")


def accel_features(prim: PrimFunc) -> np.ndarray:
    """log2 (+1) of: virtual threads; bytes of the accel.inp, accel.wgt and accel.acc
    buffers it allocates (every thread's); bytes its copies into those buffers read from
    the arguments (estimated DMA loads: the padding included); bytes it copies from them
    to the arguments (STOREs); copies run (DMA transfers: each copy nest once per
    iteration of the loops around it that do not index its destination); GEMM micro-op
    iterations (the tensorized GEMM's calls, the compute module's busy cycles)."""
    found = _Stores()
    found.visit(prim.body)
    calls = _Intrinsics()
    calls.visit(prim.body)
    vthreads = max(
        (
            math.prod(lp.extent for lp in loops if lp.kind == "virtual_thread")
            for loops, _ in [*found.out, *calls.out]
        ),
        default=1,
    )
    alloc = {sc: 0 for sc in ACCEL_SCOPES}
    for a in stmts_of(prim.body, Allocate):
        if a.buffer.scope in alloc:
            alloc[a.buffer.scope] += a.buffer.size * ELEM_BYTES.get(a.buffer.dtype, 1)
    loaded = stored = transfers = 0
    for loops, st in found.out:
        reads = {n.buffer.scope for n in walk(st.value) if isinstance(n, BufferLoad)}
        into_accel = st.buffer.scope in alloc and "global" in reads
        out_of_accel = st.buffer.scope == "global" and reads & set(ACCEL_SCOPES)
        if not (into_accel or out_of_accel):
            continue
        size = _iters(loops) * ELEM_BYTES.get(st.buffer.dtype, 1)
        if into_accel:
            loaded += size
        else:
            stored += size
        transfers += math.prod(lp.extent for lp in loops if not _uses(st.index, lp.var))
    gemm = sum(_iters(loops) for loops, _ in calls.out)
    values = [vthreads, *alloc.values(), loaded, stored, transfers, gemm]
    return np.array([math.log2(v + 1) for v in values], dtype=np.float32)


class _Intrinsics(LoopVisitor):
    """Every tensorized call with the loops around it."""

    def __init__(self) -> None:
        super().__init__()
        self.out: list = []

    def visit_Intrinsic(self, s) -> None:
        self.out.append((_loops(self.loops), s))


def loop_features(prim: PrimFunc) -> np.ndarray:
    """Whole-kernel totals, then the heaviest store."""
    found = stores(prim)
    total_flops = flop_count(prim)
    local = sum(s.buffer.size for s in stmts_of(prim.body, Allocate))
    head = [
        math.log2(total_flops + 1),
        math.log2(sum(_iters(lp) for lp, _ in found) + 1),
        float(len(found)),
        float(max((len(lp) for lp, _ in found), default=0)),
        math.log2(local + 1),
    ]
    if not found:
        return np.array(head + [0.0] * (_BODY_LEN), dtype=np.float32)
    loops, store = max(found, key=lambda f: _iters(f[0]) * (1 + _flops_per_iter(f[1])))
    accesses = [(store.buffer, store.index)] + _loads(store)
    acc = [_access(b, i, loops) for b, i in accesses]
    acc = [acc[0]] + sorted(acc[1:], key=lambda a: -a[0])
    acc_flat = [x for a in acc[:ACCESS_SLOTS] for x in a]
    acc_flat += [0.0] * (ACCESS_SLOTS * ACCESS_LEN - len(acc_flat))
    touched = sum(2 ** a[0] for a in acc)
    intensity = _iters(loops) * _flops_per_iter(store) / max(touched, 1)
    body = [
        float(len(loops)),
        math.log2(_iters(loops) + 1),
        float(_flops_per_iter(store)),
        *_annotations(loops),
        *_loop_slots(loops, store),
        *acc_flat,
        math.log2(intensity + 1),
    ]
    return np.array(head + body, dtype=np.float32)


_HEAD_LEN = 5
_BODY_LEN = 3 + 8 + 3 * LOOP_SLOTS + ACCESS_SLOTS * ACCESS_LEN + 1


def _loads(store: Store) -> list:
    return [(n.buffer, n.index) for n in walk(store.value) if isinstance(n, BufferLoad)]


def knob_features(space, digits: list[int]) -> np.ndarray:
    """The alternative, at no cost (no lowering): the knob setting itself. A knob of numbers
    gives log2 of its value, a yes/no knob 0 or 1, any other knob one slot per candidate
    (its choices have no order: a loop order, a parallel pattern); then the log2 of the
    product of the split knobs (``tile_*``: the register tile's accumulators)."""
    out: list[float] = []
    tile = 0.0
    for knob, d in zip(space.knobs, digits, strict=True):
        value = knob.candidates[d]
        if isinstance(value, bool):
            out.append(float(value))
        elif isinstance(value, int):
            out.append(math.log2(value + 1))
            if knob.name.startswith("tile_"):
                tile += math.log2(max(value, 1))
        else:
            out += [float(k == d) for k in range(len(knob.candidates))]
    return np.array([*out, tile], dtype=np.float32)
