"""Schedules: how to run the computes of a tensor expression, kept apart from what
they compute.

A Schedule has one Stage per compute op reachable from its outputs (placeholders
have none), in producer-before-consumer order. A Stage starts with the op's axes
then reduce axes as its leaf iteration variables; split/fuse record relations
between IterVars and replace leaves, reorder permutes them, and per-leaf
annotations (parallel, vectorized, unrolled, thread binding) choose loop kinds.
Extents are re-derived from the relations at lowering time, so a stage computed
at a consumer's loop (whose region is smaller than its shape) keeps its schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..target import CpuTarget
from .expr import (
    ComputeOp,
    Const,
    IterVar,
    Load,
    PlaceholderOp,
    Tensor,
    Var,
    compute,
    distinct,
    rewrite,
    substitute,
)


@dataclass(eq=False)
class Split:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int | None
    nparts: int | None


@dataclass(eq=False)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(eq=False)
class Stage:
    tensor: Tensor
    is_output: bool = False
    leaf_iter_vars: list[IterVar] = field(default_factory=list)
    relations: list = field(default_factory=list)
    iter_attrs: dict = field(default_factory=dict)  # IterVar -> loop kind
    thread_tags: dict = field(default_factory=dict)  # IterVar -> "blockIdx.x" ...
    attach_type: str = "root"  # root | inline | scope
    scope: str = "global"  # where a stage computed at another lives: local | shared
    attach_stage: Stage | None = None
    attach_ivar: IterVar | None = None
    tensorized: tuple | None = None  # (leaf IterVar, TensorIntrin)
    prefetches: list = field(default_factory=list)  # (tensor, axis, offset): prefetch

    def __post_init__(self):
        self.leaf_iter_vars = list(self.op.axis) + list(self.op.reduce_axis)

    @property
    def op(self) -> ComputeOp:
        return self.tensor.op

    @property
    def name(self) -> str:
        return self.op.name

    # --- loop transforms ---

    def _leaf_pos(self, iv: IterVar) -> int:
        for k, leaf in enumerate(self.leaf_iter_vars):
            if leaf is iv:
                return k
        raise ValueError(f"{iv.name} is not a leaf iteration variable of stage {self.name}")

    def split(self, iv: IterVar, factor: int | None = None, nparts: int | None = None):
        """(outer, inner) with inner extent ``factor`` (or outer extent ``nparts``).
        A factor that does not divide the extent is fine: the tail is guarded."""
        if (factor is None) == (nparts is None):
            raise ValueError("split takes exactly one of factor and nparts")
        if (factor or nparts) <= 0:
            raise ValueError("split factor must be positive")
        pos = self._leaf_pos(iv)
        inner_ext = factor if factor is not None else _ceil_div(iv.extent, nparts)
        outer_ext = nparts if nparts is not None else _ceil_div(iv.extent, factor)
        outer = IterVar(Var(f"{iv.name}_o"), outer_ext, iv.kind)
        inner = IterVar(Var(f"{iv.name}_i"), inner_ext, iv.kind)
        self.relations.append(Split(iv, outer, inner, factor, nparts))
        self.leaf_iter_vars[pos : pos + 1] = [outer, inner]
        return outer, inner

    def fuse(self, *ivs: IterVar) -> IterVar:
        """One IterVar running over the adjacent leaves ``ivs`` (outermost first)."""
        if not ivs:
            raise ValueError("fuse needs at least one IterVar")
        out = ivs[0]
        for iv in ivs[1:]:
            out = self._fuse2(out, iv)
        return out

    def _fuse2(self, outer: IterVar, inner: IterVar) -> IterVar:
        pos = self._leaf_pos(outer)
        if self._leaf_pos(inner) != pos + 1:
            raise ValueError(f"fuse: {outer.name} and {inner.name} are not adjacent leaves")
        if outer.kind != inner.kind:
            raise ValueError("fuse: cannot fuse a data axis with a reduction axis")
        fused = IterVar(
            Var(f"{outer.name}_{inner.name}_f"), outer.extent * inner.extent, outer.kind
        )
        self.relations.append(Fuse(outer, inner, fused))
        self.leaf_iter_vars[pos : pos + 2] = [fused]
        return fused

    def reorder(self, *ivs: IterVar) -> None:
        """Put ``ivs`` in this order, in the leaf positions they occupy now."""
        slots = sorted(self._leaf_pos(iv) for iv in ivs)
        if len(set(slots)) != len(slots):
            raise ValueError("reorder: repeated IterVar")
        for slot, iv in zip(slots, ivs, strict=False):
            self.leaf_iter_vars[slot] = iv

    def tile(self, x: IterVar, y: IterVar, x_factor: int, y_factor: int):
        xo, xi = self.split(x, x_factor)
        yo, yi = self.split(y, y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    # --- loop annotations ---

    def _annotate(self, iv: IterVar, kind: str) -> None:
        self._leaf_pos(iv)
        self.iter_attrs[iv] = kind

    def vectorize(self, iv: IterVar) -> None:
        self._annotate(iv, "vectorized")

    def unroll(self, iv: IterVar) -> None:
        self._annotate(iv, "unrolled")

    def keep_rolled(self, iv: IterVar) -> None:
        """A serial loop the compiler is asked not to unroll (``#pragma GCC unroll 1``):
        a register tile's short reduction loops, whose unrolling multiplies the values
        live at once past the registers the ISA has."""
        self._annotate(iv, "rolled")

    def parallel(self, iv: IterVar) -> None:
        if iv.kind == "reduce":
            raise ValueError("parallel on a reduction axis would race on the output")
        self._annotate(iv, "parallel")

    def virtual_thread(self, iv: IterVar) -> None:
        """Run the iterations of leaf ``iv`` as interleaved copies of its body, each
        with its own copy of the buffers allocated inside (lowering keeps them inside
        the loop), so an accelerator loads one copy's data while it computes another's."""
        if iv.kind == "reduce":
            raise ValueError("virtual_thread on a reduction axis would race on the output")
        self._annotate(iv, "virtual_thread")

    def bind(self, iv: IterVar, thread_tag: str) -> None:
        """Bind a leaf to a GPU grid axis (blockIdx.x, threadIdx.y, ...)."""
        self._annotate(iv, "thread_binding")
        self.thread_tags[iv] = thread_tag

    def tensorize(self, iv: IterVar, intrin) -> None:
        """Replace the loops from leaf ``iv`` inward with one call of ``intrin`` (a
        te.tensorize.TensorIntrin). Lowering checks those loops compute the intrinsic's
        declaration and raises TensorizeError naming this stage otherwise. The kernel
        takes the compiler hints the intrinsic asks for (``intrin.hints``)."""
        self._leaf_pos(iv)
        unknown = sorted(set(intrin.hints) - HINTS)
        if unknown:
            raise ValueError(
                f"{intrin.name}: unknown compiler hints {unknown}; known: {sorted(HINTS)}"
            )
        self.tensorized = (iv, intrin)

    def prefetch(self, tensor: Tensor, axis: int, offset: int) -> None:
        """Along with each element of ``tensor`` this stage reads, fetch the cache line
        of the element ``offset`` further along ``axis`` (a conv's weights for the next
        tile of output blocks while this tile still computes). Lowering places each
        prefetch outside the loops its address does not depend on (a vectorized loop's
        at its first lane); it changes no result. A tensorized stage pairs its intrinsic
        call's reads of ``tensor`` (the first element each call reads)."""
        if not isinstance(tensor.op, PlaceholderOp):
            raise ValueError(
                f"prefetch {tensor.name}: not a kernel argument (a stage's buffer is local)"
            )
        if not any(ld.tensor is tensor for ld in distinct(self.op.body, Load)):
            raise ValueError(f"prefetch on {self.name}: it does not read {tensor.name}")
        if not 0 <= axis < len(tensor.shape):
            raise ValueError(f"prefetch {tensor.name}: axis {axis} of {len(tensor.shape)}")
        if offset == 0:
            raise ValueError(f"prefetch {tensor.name}: offset 0 fetches what is read anyway")
        self.prefetches.append((tensor, axis, int(offset)))

    # --- placement ---

    def compute_inline(self) -> None:
        if self.op.reduce_axis:
            raise ValueError(f"cannot inline the reduction {self.name}")
        if self.is_output:
            raise ValueError(f"cannot inline the output {self.name}")
        self.attach_type = "inline"

    def compute_at(self, parent: Stage, iv: IterVar) -> None:
        """Compute the part of this stage that ``parent`` needs per iteration of
        ``parent``'s leaf ``iv``, just inside that loop."""
        parent._leaf_pos(iv)
        if self.is_output:
            raise ValueError(f"cannot compute the output {self.name} at another stage")
        self.attach_type = "scope"
        self.attach_stage = parent
        self.attach_ivar = iv

    def compute_root(self) -> None:
        self.attach_type = "root"
        self.attach_stage = self.attach_ivar = None


# Compiler hints a schedule may give its kernel (Schedule.hint):
# "no_predictive_commoning": GCC's predictive commoning carries a wide tile's broadcast
# activations from one tap to the next (the column a tap further right is the next
# column's of the tap before) and spills them with the accumulators
# (conv_schedule.carried_taps_spill); an int16-pair tap loop on AVX2 has the same
# rotation (int8_intrin.pair_intrin).
HINTS = frozenset({"no_predictive_commoning"})


class Schedule:
    def __init__(self, outputs: list[Tensor]):
        self.outputs = list(outputs)
        self.hints: set[str] = set()
        self.stages: list[Stage] = []
        self._by_op: dict[int, Stage] = {}
        for t in _post_order(self.outputs):
            st = Stage(t, is_output=any(t is o for o in self.outputs))
            self.stages.append(st)
            self._by_op[id(t.op)] = st

    def __getitem__(self, t) -> Stage:
        op = t.op if isinstance(t, Tensor) else t
        st = self._by_op.get(id(op))
        if st is None:
            raise KeyError(f"{getattr(op, 'name', op)} has no stage in this schedule")
        return st

    def hint(self, name: str) -> None:
        """Ask the compiler of this kernel for ``name`` (one of HINTS)."""
        if name not in HINTS:
            raise ValueError(f"unknown compiler hint {name!r}; known: {sorted(HINTS)}")
        self.hints.add(name)

    def stage_of(self, t: Tensor) -> Stage | None:
        return self._by_op.get(id(t.op))

    def _insert_before(self, st: Stage, new: Stage) -> None:
        self.stages.insert(self.stages.index(st), new)
        self._by_op[id(new.op)] = new

    def cache_write(self, t: Tensor, scope: str) -> Tensor:
        """Compute ``t`` into a ``scope`` buffer first (a reduction's accumulators in
        registers, ``local``), then copy it out: ``t``'s stage becomes the copy and the
        returned tensor's new stage holds the computation (place it with compute_at).
        Call it before any other primitive on ``t``'s stage."""
        st = self[t]
        if (
            st.relations
            or st.iter_attrs
            or st.prefetches
            or st.leaf_iter_vars != _initial_leaves(st.op)
        ):
            raise ValueError(f"cache_write on {st.name}: call it before other primitives")
        op = st.op
        axis = tuple(IterVar(Var(f"{iv.name}_c"), iv.extent) for iv in op.axis)
        body = substitute(op.body, {o.var: n.var for o, n in zip(op.axis, axis, strict=True)})
        cache = Tensor(t.shape, t.dtype, ComputeOp(f"{op.name}_{scope}", axis, body, op.tag))
        op.body = Load(cache, tuple(iv.var for iv in op.axis))
        st.leaf_iter_vars = list(op.axis)
        new = Stage(cache, scope=scope)
        self._insert_before(st, new)
        return cache

    def cache_read(self, t: Tensor, scope: str, readers: list[Tensor]) -> Tensor:
        """A ``scope`` copy of ``t`` (``shared``: one per work-group, fetched by its
        work-items together) that ``readers`` load instead of ``t``; place its stage with
        compute_at in a reader (bound inference sizes it to the region read there)."""
        axis_name = t.name
        cache = compute(t.shape, lambda *i: t[i], name=f"{axis_name}_{scope}")
        for r in readers:
            rop = self[r].op
            rop.body = rewrite(
                rop.body,
                lambda n: Load(cache, n.indices) if isinstance(n, Load) and n.tensor is t else n,
            )
        first = min((self.stages.index(self[r]) for r in readers), default=len(self.stages))
        new = Stage(cache, scope=scope)
        self.stages.insert(first, new)
        self._by_op[id(cache.op)] = new
        return cache


def _initial_leaves(op: ComputeOp) -> list[IterVar]:
    return list(op.axis) + list(op.reduce_axis)


def _post_order(outputs: list[Tensor]) -> list[Tensor]:
    """Compute tensors reachable from ``outputs``, producers first."""
    order: list[Tensor] = []
    seen: set[int] = set()
    for out in outputs:
        stack = [(out, False)]
        while stack:
            t, ready = stack.pop()
            if not isinstance(t.op, ComputeOp) or (id(t) in seen and not ready):
                continue
            if ready:
                if id(t) not in seen:
                    seen.add(id(t))
                    order.append(t)
                continue
            stack.append((t, True))
            stack.extend((x, False) for x in reversed(t.op.input_tensors) if id(x) not in seen)
    return order


def create_schedule(outs) -> Schedule:
    """A schedule computing ``outs`` (a Tensor or a list) with every stage at root."""
    return Schedule([outs] if isinstance(outs, Tensor) else list(outs))


# Below this many output elements a kernel is too small to pay for waking the pool.
PARALLEL_MIN_ELEMS = 1 << 14
# Parallel loops hand out one index at a time: aim for a few per thread to balance.
PARALLEL_CHUNKS_PER_CORE = 4
_ITEM_BITS = {"float64": 64, "int64": 64, "uint64": 64, "float32": 32, "int32": 32}
_ITEM_BITS.update({"uint32": 32, "int16": 16, "uint16": 16, "int8": 8, "uint8": 8})


def default_schedule(outs, target: CpuTarget | None = None) -> Schedule:
    """The safe default for any op or fused group: inline every non-output stage
    without reduce axes; compute a reduction inside the loop nest of the one stage
    that reads it element for element (so it needs no whole-tensor buffer), else at
    root. Given a cpu target, each root stage also runs its innermost axis in the target's
    vectors and its outer axes on the thread pool (when it has cores to spare) when large."""
    sch = create_schedule(outs)
    for st in sch.stages:
        if not st.is_output and not st.op.reduce_axis:
            st.compute_inline()
    for st in sch.stages:
        if not st.is_output and st.op.reduce_axis:
            _attach_to_sole_reader(sch, st)
    attached = {id(st.attach_ivar) for st in sch.stages if st.attach_type == "scope"}
    for st in sch.stages:
        if st.attach_type != "root" or not st.leaf_iter_vars:
            continue
        inner = None
        if target and not st.op.reduce_axis and id(st.leaf_iter_vars[-1]) not in attached:
            inner = vectorize_innermost(st, target)
        if target and target.cores > 1:
            parallel_outer(st, target, keep={id(inner), *attached})
    return sch


def vector_lanes(dtype: str, target: CpuTarget) -> int:
    """Elements of ``dtype`` per vector register of ``target`` (0 for bool: no vector type)."""
    bits = _ITEM_BITS.get(dtype)
    return target.vector_bits // bits if bits else 0


def fitting_lanes(extent: int, lanes: int) -> int:
    """The widest vector of at most ``lanes`` that whole covers ``extent``: ``lanes``,
    else half of it and so on down to 2 (0: none). A 1000-wide axis at 16 lanes runs
    in vectors of 8 rather than in scalar code."""
    while lanes >= 2:
        if extent % lanes == 0:
            return lanes
        lanes //= 2
    return 0


def vectorize_innermost(st: Stage, target: CpuTarget) -> IterVar | None:
    """Vectorize the stage's innermost data axis (its store is contiguous along it)
    when whole vectors cover it (half vectors and so on when full ones do not); a
    vector holds at most one register of the widest element the stage computes with
    (_compute_bits). Returns the vector loop. A body the codegen cannot vectorize
    (strided or non-arithmetic reads) falls back to a scalar loop."""
    iv = st.leaf_iter_vars[-1]
    widest = target.vector_bits // _compute_bits(st)  # one register of the widest
    lanes = min(vector_lanes(st.tensor.dtype, target), widest)
    quad = _byte_quad_row(st, min(QUAD_ROW_LANES, widest))
    if quad is not None:
        iv, lanes = quad, min(QUAD_ROW_LANES, widest)
    if iv.extent > lanes:
        lanes = fitting_lanes(iv.extent, lanes)
    if lanes < 2 or iv.kind != "data":
        return None
    if iv.extent == lanes or (iv.extent < lanes and iv.extent in (2, 4, 8, 16)):
        st.vectorize(iv)
        return iv
    if iv.extent % lanes:
        return None  # a guarded tail would sit inside the vector loop and block it
    _, vec = st.split(iv, lanes)
    st.vectorize(vec)
    return vec


# A byte tensor whose innermost axis is a quad (int8 blocks of an RGB image) stores 4
# bytes a pixel: a vector of them is emulated in general registers, so the row and the
# quad are fused and run up to 16 bytes (4 pixels) a vector, as many as one register
# of the stage's widest element holds. The image's quantize into quads (a float read
# per lane, gathered) went from 0.0866 to 0.0623 ms (MobileNetV2-style int8, host).
QUAD_ROW_LANES = 16


def _byte_quad_row(st: Stage, lanes: int) -> IterVar | None:
    """The fused (row, quad) loop of a byte tensor whose innermost axis is a quad, when
    whole vectors of ``lanes`` (more than a quad) cover it."""
    leaves = st.leaf_iter_vars
    if _ITEM_BITS.get(st.tensor.dtype) != 8 or len(leaves) < 2 or lanes <= 4:
        return None
    row, quad = leaves[-2:]
    if quad.extent != 4 or row.kind != "data" or quad.kind != "data":
        return None
    if (row.extent * 4) % lanes:
        return None
    return st.fuse(row, quad)


def _compute_bits(st: Stage) -> int:
    """Bits of the widest element of at most 32 that the stage computes with: its own,
    and those it reads through the stages without a reduction (which default_schedule
    inlines into it); a stage of 64-bit elements only: its own. A vector of byte stores
    computed in float would otherwise span four registers, and GCC compares and
    selects across such a vector lane by lane in general registers (a float -> uint8
    quantize of 16 lanes at 256 bits: 32 ucomiss and cmove)."""
    bits = [_ITEM_BITS.get(st.tensor.dtype, 32)]
    todo, seen = [st.op], set()
    while todo:
        op = todo.pop()
        for t in op.input_tensors:
            if id(t) in seen:
                continue
            seen.add(id(t))
            bits.append(_ITEM_BITS.get(t.dtype, 32))
            if isinstance(t.op, ComputeOp) and not t.op.reduce_axis:
                todo.append(t.op)
    narrow = [b for b in bits if b <= 32]
    return max(narrow) if narrow else bits[0]  # 64-bit only: its own lanes, as before


def parallel_outer(st: Stage, target: CpuTarget, keep=frozenset()) -> IterVar | None:
    """Fuse the leading data leaves until there are a few iterations per core of
    ``target`` and run
    them in parallel, when the stage is large enough. Leaves whose id is in ``keep``
    (the vector loop, attach points) and the innermost leaf stay out. Returns the
    parallel loop."""
    total = 1
    for iv in st.op.axis:
        total *= iv.extent
    if total < PARALLEL_MIN_ELEMS:
        return None
    prefix, n = [], 1
    for iv in st.leaf_iter_vars[:-1]:
        if iv.kind != "data" or id(iv) in keep or iv in st.iter_attrs:
            break
        prefix.append(iv)
        n *= iv.extent
        if n >= PARALLEL_CHUNKS_PER_CORE * target.cores:
            break
    if n < 2:
        return None
    fused = st.fuse(*prefix)
    st.parallel(fused)
    return fused


def _attach_to_sole_reader(sch: Schedule, st: Stage) -> None:
    """compute_at ``st`` at the innermost data loop of its only non-inlined reader when
    that reader loads it at the reader's own index: then each iteration needs exactly
    one element, so nothing is computed twice."""
    readers = [r for r in sch.stages if r.attach_type != "inline" and _reads(sch, r, st.tensor)]
    if len(readers) != 1:
        return
    reader = readers[0]
    data = [iv for iv in reader.leaf_iter_vars if iv.kind == "data"]
    if not data or reader.leaf_iter_vars[: len(data)] != data:
        return
    if _reads(sch, reader, st.tensor) == "own_index":
        st.compute_at(reader, data[-1])


def _reads(sch: Schedule, reader: Stage, target: Tensor) -> str | None:
    """How ``reader`` (with its inlined producers) loads ``target``: None (never),
    "own_index" (only at its own output index), or "other"."""
    return _loads_of(sch, reader.op, target, {})


def _loads_of(sch: Schedule, op: ComputeOp, target: Tensor, memo: dict) -> str | None:
    if id(op) in memo:
        return memo[id(op)]
    found = None
    for n in _loads(op.body):
        if n.tensor is target:
            kind = "own_index"
        else:
            st = sch.stage_of(n.tensor)
            if st is None or st.attach_type != "inline":
                continue
            kind = _loads_of(sch, st.op, target, memo)
            if kind is None:
                continue
        if kind == "other" or not _is_own_index(n, op):
            found = "other"
            break
        found = "own_index"
    memo[id(op)] = found
    return found


def _loads(e) -> list[Load]:
    return distinct(e, Load)


def _is_own_index(load: Load, op: ComputeOp) -> bool:
    """``load`` reads at ``op``'s output index: each index is the matching axis
    variable, or 0 along an axis of extent 1 (broadcast loads write it so)."""
    if len(load.indices) != len(op.axis) or load.tensor.shape != tuple(iv.extent for iv in op.axis):
        return False
    return all(
        i is iv.var or (iv.extent == 1 and isinstance(i, Const) and i.value == 0)
        for i, iv in zip(load.indices, op.axis, strict=True)
    )
