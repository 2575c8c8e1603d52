"""Lowering: a Schedule to a loop-IR PrimFunc.

Each root stage becomes a loop nest over its leaf IterVars; the original axes are
recovered from the leaves through the split/fuse relations (non-dividing splits
add a guard). Inlined stages are substituted into their consumers (memoized per
(stage, index), so chains stay DAGs); stages computed at a consumer's loop get a
local buffer covering the region bound inference finds, addressed relative to the
region's base. Reductions store the identity, then update in place. Non-argument
root stages get a whole-tensor temporary. A final pass simplifies every
expression with the ranges of all loops and hoists constant-size allocations out
of serial loops (up to the nearest parallel or virtual-thread loop, so threads keep
private copies).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re

from .bound import infer_region
from .expr import (
    INDEX,
    Binary,
    Const,
    Expr,
    Load,
    PlaceholderOp,
    Select,
    Tensor,
    Var,
    const,
    distinct,
    input_tensors,
    rewrite,
    substitute,
)
from .ir import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    Prefetch,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    seq,
)
from .schedule import Fuse, Schedule, Split, Stage
from .simplify import INT_RANGE, Simplifier
from .tensorize import Intrinsic, TensorizeError
from .tensorize import match as tensorize_match
from .visitor import StmtMutator, walk_exprs

_COMBINE = {"sum": "+", "prod": "*", "max": "max", "min": "min"}


def _combine(combiner: str, acc: Expr, value: Expr) -> Expr:
    """The running value of a reduction updated with ``value``."""
    if combiner == "nanmax":  # a NaN value compares false and leaves acc as it is
        return Select(Binary(">", value, acc, "bool"), value, acc, acc.dtype)
    return Binary(_COMBINE[combiner], acc, value, acc.dtype)


def _ic(v: int) -> Const:
    return Const(int(v), INDEX)


def identity(combiner: str, dtype: str) -> Const:
    """The value of an empty reduction."""
    if combiner in ("sum", "prod"):
        return const(0 if combiner == "sum" else 1, dtype)
    up = combiner in ("max", "nanmax")
    if dtype in ("float32", "float64"):
        return const(-math.inf if up else math.inf, dtype)
    lo, hi = INT_RANGE[dtype]
    return const(lo if up else hi, dtype)


def flat_index(indices, shape) -> Expr:
    out: Expr = _ic(0)
    for idx, dim in zip(indices, shape, strict=False):
        out = out * dim + idx
    return out


class _Nest:
    """Leaf loops of one stage for one region: extents, root values, guards."""

    def __init__(self, stage: Stage, region: list):
        op = stage.op
        roots = list(op.axis) + list(op.reduce_axis)
        bases = [b for b, _ in region] + [_ic(0)] * len(op.reduce_axis)
        ext = {iv: e for iv, (_, e) in zip(op.axis, region, strict=False)}
        ext.update({iv: iv.extent for iv in op.reduce_axis})
        for rel in stage.relations:
            if isinstance(rel, Split):
                e = ext[rel.parent]
                inner = rel.factor if rel.factor is not None else -(-e // rel.nparts)
                ext[rel.inner] = inner
                ext[rel.outer] = -(-e // inner)
            else:
                ext[rel.fused] = ext[rel.outer] * ext[rel.inner]
        value = {iv: iv.var for iv in stage.leaf_iter_vars}
        guards: list[tuple[str, Expr]] = []
        for rel in reversed(stage.relations):
            if isinstance(rel, Split):
                v = value[rel.outer] * ext[rel.inner] + value[rel.inner]
                value[rel.parent] = v
                if ext[rel.outer] * ext[rel.inner] != ext[rel.parent]:
                    guards.append((rel.parent.kind, v < ext[rel.parent]))
            elif isinstance(rel, Fuse):
                value[rel.outer] = value[rel.fused] // ext[rel.inner]
                value[rel.inner] = value[rel.fused] % ext[rel.inner]
        self.stage = stage
        self.ext = ext
        self.rel_value = [value[iv] for iv in op.axis]  # relative to the region base
        self.var_map = {iv.var: b + value[iv] for iv, b in zip(roots, bases, strict=False)}
        self.guards = guards
        self.shape = tuple(e for _, e in region)
        self.bases = tuple(b for b, _ in region)


class _Lowering:
    def __init__(self, sch: Schedule, args: list[Tensor], name: str):
        self.sch = sch
        self.name = name
        self.ranges: dict = {}
        self.simp = Simplifier(self.ranges)
        self.buffers: dict[int, tuple[Buffer, tuple]] = {}  # tensor id -> (buffer, origin)
        self.names: set[str] = set()
        self.params = [self._bind(t, tuple(_ic(0) for _ in t.shape), t.shape) for t in args]
        self.inline_memo: dict = {}
        self.inlined: dict[int, Expr] = {}
        self.attached: dict[int, list[Stage]] = {}
        for st in sch.stages:
            if st.attach_type == "scope":
                self.attached.setdefault(id(st.attach_ivar), []).append(st)

    def _bind(self, t: Tensor, origin: tuple, shape: tuple, scope="global") -> Buffer:
        base = re.sub(r"\W", "_", t.name) or "t"
        if base[0].isdigit():
            base = "t" + base
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        buf = Buffer(name, t.dtype, tuple(shape), scope)
        self.buffers[id(t)] = (buf, origin)
        return buf

    # --- inlining ---

    def body_of(self, st: Stage) -> Expr:
        """The stage's body with every inlined producer substituted."""
        got = self.inlined.get(id(st))
        if got is None:
            got = self.inlined[id(st)] = rewrite(st.op.body, self._inline_load)
        return got

    def _inline_load(self, n: Expr) -> Expr:
        if not isinstance(n, Load):
            return n
        st = self.sch.stage_of(n.tensor)
        if st is None or st.attach_type != "inline" or id(n.tensor) in self.buffers:
            return n
        idx = tuple(self.simp(i) for i in n.indices)
        key = (id(n.tensor),) + tuple(id(i) for i in idx)
        got = self.inline_memo.get(key)
        if got is None:
            mapping = {iv.var: i for iv, i in zip(st.op.axis, idx, strict=False)}
            got = self.simp(substitute(self.body_of(st), mapping))
            self.inline_memo[key] = got
        return got

    # --- loop nests ---

    def stage_nest(self, st: Stage, region: list) -> Stmt:
        nest = _Nest(st, region)
        for iv in st.leaf_iter_vars:
            self.ranges[iv.var] = (0, nest.ext[iv] - 1)
        body = substitute(self.body_of(st), nest.var_map)
        reduce = getattr(body, "combiner", None)
        value = body.body if reduce else body
        allocs = self._attach_producers(
            st, nest, [value] + ([body.where] if reduce and body.where is not None else [])
        )
        buf, _ = self.buffers[id(st.tensor)]
        index = flat_index(nest.rel_value, buf.shape)
        leaves = st.leaf_iter_vars
        loaded = self.to_buffers(value)
        if not reduce:
            store: Stmt = seq(*self._prefetches(st, loaded), Store(buf, index, loaded))
            if st.tensorized is not None:  # an elementwise intrinsic
                leaves, store = self._tensorized(st, nest, leaves, None, value, index, buf)
                store = seq(*self._prefetches(st, store.ins), store)
            return self.loops(st, nest, leaves, store, allocs, nest.guards)
        split_at = next((k for k, iv in enumerate(leaves) if iv.kind == "reduce"), len(leaves))
        init = Store(buf, index, identity(reduce, body.dtype))
        update = Store(buf, index, _combine(reduce, BufferLoad(buf, index), loaded))
        upd: Stmt = seq(*self._prefetches(st, loaded), update)
        guards = nest.guards
        if body.where is not None and st.tensorized is None:
            # like a split's guard: just inside the innermost loop it depends on (a mask
            # of whole reduction steps leaves the loops inside it guard-free, and one of
            # the form ``k < bound`` becomes the bound of k's loop: _Finish)
            # (simplified first: the variables of loops of one iteration drop out)
            guards = [*guards, ("reduce", self.simp(self.to_buffers(body.where)))]
        elif body.where is not None:
            upd = IfThenElse(self.to_buffers(body.where), update)
        data_guards = [g for g in nest.guards if g[0] == "data"]
        inner = leaves[split_at:]
        init_nest = self.loops(
            st, nest, [iv for iv in inner if iv.kind == "data"], init, {}, data_guards, attach=False
        )
        if st.tensorized is not None:
            inner, upd = self._tensorized(st, nest, inner, body, value, index, buf)
            upd = seq(*self._prefetches(st, upd.ins), upd)
        upd_nest = self.loops(st, nest, inner, upd, allocs, guards)
        return self.loops(st, nest, leaves[:split_at], seq(init_nest, upd_nest), allocs, [])

    def _prefetches(self, st: Stage, reads) -> list[Prefetch]:
        """The stage's prefetches (Stage.prefetch): each read of a prefetched tensor, in
        the stage's value (an expression) or an intrinsic call's operands (a list of
        loads, each the first element the call reads), moved ``offset`` along the axis:
        by its stride in the argument's flat buffer."""
        loads = distinct(reads, BufferLoad)
        out = []
        for tensor, axis, offset in st.prefetches:
            buf = self.buffers[id(tensor)][0]
            step = offset * math.prod(tensor.shape[axis + 1 :])
            out += [Prefetch(BufferLoad(buf, ld.index + step)) for ld in loads if ld.buffer is buf]
        return out

    def _tensorized(self, st: Stage, nest: _Nest, inner: list, reduce, value, index, buf):
        """The update loops that stay, and the intrinsic call replacing the rest
        (``reduce``: the stage's reduction, None for an elementwise stage)."""
        iv, intrin = st.tensorized
        k = next((j for j, x in enumerate(inner) if x is iv), None)
        if k is None:
            raise TensorizeError(
                f"tensorize {st.name} with {intrin.name}: {iv.name} is not inside the "
                "stage's reduction (the replaced loops must include its innermost ones)"
            )
        replaced = inner[k:]
        rvars = {x.var for x in replaced}
        for _, g in nest.guards:
            if any(v in rvars for v in _vars(g)):
                raise TensorizeError(
                    f"tensorize {st.name} with {intrin.name}: a split leaves a guarded "
                    "tail inside the replaced loops"
                )
        if any(id(x) in self.attached for x in replaced):
            raise TensorizeError(
                f"tensorize {st.name} with {intrin.name}: a stage is computed inside "
                "the replaced loops"
            )
        span = [(x.var, nest.ext[x]) for x in replaced]
        ins, base = tensorize_match(
            st.name,
            intrin,
            reduce,
            self.to_buffers(value),
            index,
            [p for p, x in zip(span, replaced, strict=True) if x.kind == "data"],
            [p for p, x in zip(span, replaced, strict=True) if x.kind == "reduce"],
            self.simp,
        )
        return inner[:k], Intrinsic(intrin, BufferLoad(buf, base), ins)

    def loops(self, st, nest, leaves, body: Stmt, allocs: dict, guards: list, attach=True) -> Stmt:
        """The loops over ``leaves`` around ``body``. Each guard sits just inside the
        innermost loop it depends on (so inner loops stay guard-free and
        vectorizable); producers computed at a leaf go first inside its loop."""
        pos = {iv.var: k for k, iv in enumerate(leaves)}
        at: dict[int, list] = {}
        for _, g in guards:
            k = max((pos[v] for v in _vars(g) if v in pos), default=-1)
            at.setdefault(k, []).append(g)
        for k in range(len(leaves) - 1, -1, -1):
            iv = leaves[k]
            if attach and id(iv) in allocs:
                prod_nests, bufs = allocs[id(iv)]
                body = seq(*prod_nests, body)
                for b in bufs:
                    body = Allocate(b, body)
            # outside the producers: an iteration past a split's tail computes nothing
            # (its producers would read outside their inputs)
            body = _guard(at.get(k, []), body)
            kind = st.iter_attrs.get(iv, "serial")
            body = For(iv.var, _ic(0), _ic(nest.ext[iv]), kind, body, st.thread_tags.get(iv, ""))
        return _guard(at.get(-1, []), body)

    def _attach_producers(self, st: Stage, nest: _Nest, exprs: list) -> dict:
        """Lower the stages computed at this stage's leaves: {leaf id: (nests, bufs)}.
        A producer may also be read by stages computed after it at the same leaf (a
        softmax row's max, read by its sum and by the outputs), or at a deeper leaf of
        this stage (a depthwise conv's padded plane, read by the tiles computed inside
        it): its region then covers their reads too, so regions are inferred last stage
        first, the deepest leaf first."""
        out: dict = {}
        leaves = st.leaf_iter_vars
        deeper: list = []  # producers at deeper leaves, their reads and their loops' ranges
        deeper_reads: list = []
        deeper_ranges: dict = {}
        found = []  # (leaf, its producers, their regions), the deepest leaf first
        for k in range(len(leaves) - 1, -1, -1):
            iv = leaves[k]
            prods = self.attached.get(id(iv), [])
            if not prods:
                continue
            ranging = {x.var: (0, nest.ext[x] - 1) for x in leaves[k + 1 :]}
            ranging.update(deeper_ranges)
            regions: dict = {}
            readers: list = list(exprs) + deeper_reads  # what each producer's region covers
            for j in range(len(prods) - 1, -1, -1):
                prod = prods[j]
                self._check_single_consumer(prod, st, prods[j + 1 :] + deeper)
                regions[j] = infer_region(readers, prod.tensor, ranging, self.simp)
                pnest = _Nest(prod, regions[j])
                for x in prod.leaf_iter_vars:
                    ranging[x.var] = self.ranges[x.var] = (0, pnest.ext[x] - 1)
                readers.append(substitute(self.body_of(prod), pnest.var_map))
            deeper, deeper_reads, deeper_ranges = deeper + prods, readers[len(exprs) :], ranging
            found.append((iv, prods, regions))
        bound = []  # every buffer bound before any nest is lowered: a deeper one reads them
        for iv, prods, regions in reversed(found):
            for j, prod in enumerate(prods):
                region = regions[j]
                shape = tuple(e for _, e in region)
                # a stage cached in a named scope (shared, accel.inp, ...) keeps it
                scope = "local" if prod.scope == "global" else prod.scope
                buf = self._bind(prod.tensor, tuple(b for b, _ in region), shape, scope)
                bound.append((iv, prod, region, buf))
        for iv, prod, region, buf in bound:
            nests, bufs = out.setdefault(id(iv), ([], []))
            nests.append(self.stage_nest(prod, region))
            bufs.append(buf)
        return out

    def _check_single_consumer(self, prod: Stage, consumer: Stage, siblings=()) -> None:
        for st in self.sch.stages:
            if st is consumer or st.attach_type == "inline" or any(st is s for s in siblings):
                continue
            if any(t is prod.tensor for t in input_tensors(self.body_of(st))):
                raise NotImplementedError(
                    f"{prod.name} is computed at {consumer.name} but also read by {st.name}"
                )

    def to_buffers(self, e: Expr) -> Expr:
        """Tensor loads become flat buffer loads (relative to a local region's base)."""

        def conv(n: Expr) -> Expr:
            if not isinstance(n, Load):
                return n
            got = self.buffers.get(id(n.tensor))
            if got is None:
                kind = "placeholder" if isinstance(n.tensor.op, PlaceholderOp) else "stage"
                raise ValueError(
                    f"{kind} {n.tensor.name} is read but is not an argument and has no buffer here"
                )
            buf, origin = got
            idx = [i - o for i, o in zip(n.indices, origin, strict=False)]
            return BufferLoad(buf, flat_index(idx, buf.shape))

        return rewrite(e, conv)

    # --- the whole function ---

    def run(self) -> PrimFunc:
        temps = []
        for st in self.sch.stages:
            if st.attach_type == "root" and id(st.tensor) not in self.buffers:
                temps.append(
                    self._bind(st.tensor, tuple(_ic(0) for _ in st.tensor.shape), st.tensor.shape)
                )
        for t in self.sch.outputs:
            if id(t) not in self.buffers or self.buffers[id(t)][0] in temps:
                raise ValueError(f"output {t.name} is not among the kernel arguments")
        nests = []
        for st in self.sch.stages:
            if st.attach_type == "root":
                region = [(_ic(0), d) for d in st.tensor.shape]
                nests.append(self.stage_nest(st, region))
        body = _allocate(temps, seq(*nests))
        body = _Finish(self.ranges).visit(body)
        body = _PlacePrefetches(Simplifier(self.ranges)).visit(body)
        body = _hoist_allocations(body)
        hints = set(self.sch.hints)
        for st in self.sch.stages:
            if st.tensorized:
                hints |= st.tensorized[1].hints
        return PrimFunc(self.name, self.params, body, hints=frozenset(hints))


def _guard(conds: list, s: Stmt) -> Stmt:
    if not conds:
        return s
    cond = conds[0]
    for g in conds[1:]:
        cond = Binary("and", cond, g, "bool")
    return IfThenElse(cond, s)


def _vars(e: Expr) -> list[Var]:
    return distinct(e, Var)


class _Finish(StmtMutator):
    """Simplify every expression with all loop ranges known; drop dead branches and
    the loops and allocations left empty."""

    def __init__(self, ranges: dict):
        self.simp = Simplifier(ranges)

    def mutate_expr(self, e: Expr) -> Expr:
        return self.simp(e)

    def visit_For(self, s: For) -> Stmt | None:
        body = self.visit(s.body)
        if body is None:
            return None
        if _is_one(s.extent) and s.kind in ("serial", "rolled", "unrolled", "vectorized"):
            return body  # the simplifier already replaced its variable by 0
        extent = self.simp(s.extent)
        if s.kind in ("serial", "rolled") and _is_zero(s.min):
            extent, body = _bound_from_guard(s.var, extent, body, self.simp)
        return For(s.var, self.simp(s.min), extent, s.kind, body, s.thread_tag)

    def visit_Seq(self, s: Seq) -> Stmt | None:
        parts = [p for p in map(self.visit, s.stmts) if p is not None]
        return seq(*parts) if parts else None

    def visit_IfThenElse(self, s: IfThenElse) -> Stmt | None:
        cond = self.simp(s.cond)
        if isinstance(cond, Const):
            taken = s.then if cond.value else s.else_
            return self.visit(taken) if taken is not None else None
        then = self.visit(s.then)
        els = self.visit(s.else_) if s.else_ is not None else None
        return IfThenElse(cond, then, els) if then is not None else None

    def visit_Allocate(self, s: Allocate) -> Stmt | None:
        body = self.visit(s.body)
        return Allocate(s.buffer, body) if body is not None else None


def _is_one(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 1


def _is_zero(e: Expr) -> bool:
    return isinstance(e, Const) and e.value == 0


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, Binary) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


# The most iterations of the loops between a loop and a guard on its variable that
# _bound_from_guard evaluates the guard's bound for (a conv's register tile of output
# blocks, 4 at most).
MAX_GUARD_POINTS = 16


def _bound_from_guard(var: Var, extent: Expr, body: Stmt, simp) -> tuple[Expr, Stmt]:
    """``for v < n: if (v < e && rest) s`` (e independent of v, no else) as ``for v <
    min(n, e): if (rest) s``: the loop stops where the guard would turn every later
    iteration off (a reduction masked by ``k < bound``: conv2d_nchwc's spanned groups).
    A guard under a few loops of constant extent whose variables e reads (a register
    tile's output blocks, each with its own bound) stays, and the loop stops at the
    largest e over them."""
    path: list[For] = []
    node = body
    while isinstance(node, For) and _is_zero(node.min) and isinstance(node.extent, Const):
        path.append(node)
        node = node.body
    if not isinstance(node, IfThenElse) or node.else_ is not None:
        return extent, body
    conds = _conjuncts(node.cond)
    for k, c in enumerate(conds):
        if not (isinstance(c, Binary) and c.op == "<" and c.a is var and c.b.dtype == INDEX):
            continue
        used = set(_vars(c.b))
        if var in used:
            continue
        if not path:
            rest = conds[:k] + conds[k + 1 :]
            new = node.then if not rest else IfThenElse(_and(rest), node.then)
            return simp(Binary("min", extent, c.b, INDEX)), new
        loops = [f for f in path if f.var in used]
        points = math.prod(int(f.extent.value) for f in loops)
        if not loops or points > MAX_GUARD_POINTS:
            continue
        most = None
        for values in itertools.product(*(range(int(f.extent.value)) for f in loops)):
            e = substitute(c.b, {f.var: _ic(v) for f, v in zip(loops, values, strict=True)})
            most = e if most is None else Binary("max", most, e, INDEX)
        return simp(Binary("min", extent, most, INDEX)), body
    return extent, body


def _and(conds: list[Expr]) -> Expr:
    out = conds[0]
    for c in conds[1:]:
        out = Binary("and", out, c, "bool")
    return out


class _PlacePrefetches(StmtMutator):
    """Move each prefetch out of the loops its address does not depend on (once per
    iteration of the loops it does), and out of a vectorized loop at its first lane
    (a vector's elements share one or two cache lines): a prefetch in the innermost
    loop of a register tile would otherwise be issued once per accumulator. A prefetch
    under a loop it depends on, itself under one it does not (a tile's blocks inside
    its pixels), leaves with a loop of its own over the first. Parallel loops keep
    theirs (each task fetches ahead for itself)."""

    def __init__(self, simp: Simplifier):
        self.simp = simp

    def visit_For(self, s: For) -> Stmt:
        body = self.visit(s.body)
        if body is None or s.kind not in _SERIAL_KINDS + ("vectorized",):
            return dataclasses.replace(s, body=body) if body is not s.body else s
        out, keep = [], []
        for x in _parts(body):
            if _prefetch_only(x) and not _uses_var(x, s.var):
                out.append(x)
            elif isinstance(x, Prefetch) and s.kind == "vectorized":
                first = self.simp(substitute(x.target.index, {s.var: s.min}))
                out.append(Prefetch(BufferLoad(x.target.buffer, first)))
            elif isinstance(x, For) and x.kind in _SERIAL_KINDS and not _prefetch_only(x):
                inner = _parts(x.body)
                moved = [p for p in inner if _prefetch_only(p) and not _uses_var(p, s.var)]
                if moved:
                    out.append(dataclasses.replace(x, body=seq(*moved)))
                    x = dataclasses.replace(x, body=seq(*[p for p in inner if p not in moved]))
                keep.append(x)
            else:
                keep.append(x)
        if not keep:
            return seq(*out)
        if not out and body is s.body:
            return s
        return seq(*out, dataclasses.replace(s, body=seq(*keep)))


_SERIAL_KINDS = ("serial", "rolled", "unrolled")


def _parts(s: Stmt) -> list[Stmt]:
    return list(s.stmts) if isinstance(s, Seq) else [s]


def _prefetch_only(s: Stmt) -> bool:
    """A prefetch, or a serial loop of nothing but prefetches."""
    if isinstance(s, Prefetch):
        return True
    return (
        isinstance(s, For)
        and s.kind in _SERIAL_KINDS
        and all(_prefetch_only(p) for p in _parts(s.body))
    )


def _uses_var(s: Stmt, var: Var) -> bool:
    return any(e is var for e in walk_exprs(s))


class _Hoist(StmtMutator):
    """Move Allocates out of serial loops: one buffer reused by every iteration
    instead of one allocation per iteration. Parallel loops keep theirs, so each
    thread has its own copy. ``lifted``: the buffers taken out so far, in order."""

    def __init__(self) -> None:
        self.lifted: list[Buffer] = []
        self.shared: list[Buffer] = []  # work-group memory: declared at the kernel's top

    def visit_Allocate(self, s: Allocate) -> Stmt:
        (self.shared if s.buffer.scope == "shared" else self.lifted).append(s.buffer)
        return self.visit(s.body)

    def visit_For(self, s: For) -> Stmt:
        if s.kind not in ("parallel", "thread_binding", "virtual_thread"):
            return self.generic_visit(s)
        outside, self.lifted = self.lifted, []
        body = _allocate(self.lifted, self.visit(s.body))
        self.lifted = outside
        return dataclasses.replace(s, body=body)


def _hoist_allocations(s: Stmt | None) -> Stmt | None:
    if s is None:  # everything was dead
        return s
    hoist = _Hoist()
    body = hoist.visit(s)
    return _allocate(hoist.shared + hoist.lifted, body)


def _allocate(bufs: list[Buffer], body: Stmt) -> Stmt:
    """``body`` inside an Allocate of each buffer, the first outermost."""
    for buf in reversed(bufs):
        body = Allocate(buf, body)
    return body


def lower(sch: Schedule, args: list[Tensor], name: str) -> PrimFunc:
    """The kernel ``name`` computing the schedule; ``args``: placeholders then
    outputs, in kernel-ABI order."""
    return _Lowering(sch, list(args), name).run()
