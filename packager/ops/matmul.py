"""Matrix products: batched matmul with numpy broadcasting, and Gemm."""

from __future__ import annotations

from .. import te
from ..te.schedule import default_schedule, fitting_lanes
from ._cpu import epilogue_stage, fallback, lanes_of
from .registry import ScheduleContext, register_op, register_schedule


def _batch_shape(a: tuple, b: tuple) -> list[int]:
    nd = max(len(a), len(b))
    a, b = (1,) * (nd - len(a)) + a, (1,) * (nd - len(b)) + b
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and 1 not in (x, y):
            raise ValueError(f"matmul: batch dims {a} and {b} do not broadcast")
        out.append(max(x, y))
    return out


def _batch_index(batch: tuple, shape: tuple, nb: int) -> list:
    """Indices into the batch dims (the leading ndim-2) of an operand of ``shape`` for
    output batch ``batch``."""
    dims = shape[: len(shape) - 2]
    own = batch[nb - len(dims) :] if dims else ()
    return [0 if d == 1 else i for i, d in zip(own, dims, strict=True)]


class _Operand:
    """A matmul operand read through the Transpose folded into it (``perm``, as ONNX
    Transpose's: logical dim d is stored dim perm[d]), so no transposed copy is made."""

    def __init__(self, t: te.Tensor, perm):
        self.t = t
        self.perm = [int(p) for p in perm] if perm else list(range(t.ndim))
        if sorted(self.perm) != list(range(t.ndim)):
            raise ValueError(f"matmul: perm {self.perm} is not a permutation of {t.ndim} dims")
        self.shape = tuple(t.shape[p] for p in self.perm)
        self.ndim = t.ndim

    def __getitem__(self, idx):
        src = [None] * self.ndim
        for d, p in enumerate(self.perm):
            src[p] = idx[d]
        return self.t[tuple(src)]


@register_op("matmul", "out_elemwise_fusable")
def matmul(inputs, attrs):
    """numpy.matmul: a 1-D operand gets a unit dim (dropped from the result).

    attrs (set by graph passes, never by ONNX): ``perm_a``/``perm_b``, a Transpose folded
    into the operand's indexing; ``b_block``, a constant 2-D B packed as gemm's is
    ((N / b_block, K, b_block))."""
    nb = int(attrs.get("b_block", 0))
    a = _Operand(inputs[0], attrs.get("perm_a"))
    if nb:
        packed = inputs[1]
        b_shape = (packed.shape[1], packed.shape[0] * nb)
        b = lambda idx: packed[idx[1] // nb, idx[0], idx[1] % nb]  # noqa: E731
    else:
        bo = _Operand(inputs[1], attrs.get("perm_b"))
        b_shape, b = bo.shape, bo.__getitem__
    a_vec, b_vec = len(a.shape) == 1, len(b_shape) == 1
    a_shape = (1, *a.shape) if a_vec else a.shape
    b_shape = (*b_shape, 1) if b_vec else b_shape
    if a_shape[-1] != b_shape[-2]:
        raise ValueError(f"matmul: inner dims differ: {a.shape} @ {b_shape}")
    batch = _batch_shape(a_shape[:-2], b_shape[:-2])
    nb_dims = len(batch)
    rows, cols = a_shape[-2], b_shape[-1]
    k = te.reduce_axis(a_shape[-1], "k")
    shape = batch + ([] if a_vec else [rows]) + ([] if b_vec else [cols])

    def f(*idx):
        bi = idx[:nb_dims]
        rest = list(idx[nb_dims:])
        i = None if a_vec else rest.pop(0)
        j = None if b_vec else rest.pop(0)
        ai = [k] if a_vec else [*_batch_index(bi, a_shape, nb_dims), i, k]
        bj = [k] if b_vec else [*_batch_index(bi, b_shape, nb_dims), k, j]
        return te.sum(a[tuple(ai)] * b(tuple(bj)), k)

    kept = {n: attrs[n] for n in ("perm_a", "perm_b", "b_block") if attrs.get(n)}
    return [te.compute(shape, f, name="matmul", tag="matmul", attrs=kept)]


def _broadcast_2d(c: te.Tensor, i, j):
    """Element (i, j) of ``c`` broadcast unidirectionally to 2-D."""
    shape = (1,) * (2 - c.ndim) + c.shape
    idx = [0 if d == 1 else v for d, v in zip(shape, (i, j), strict=True)]
    return c[tuple(idx[2 - c.ndim :])] if c.ndim else c[()]


@register_op("gemm", "out_elemwise_fusable")
def gemm(inputs, attrs):
    """alpha * A' B' + beta * C; attrs alpha, beta, trans_a, trans_b; C optional.

    ``b_block`` (set by the pack_gemm_weights pass, never by ONNX): B is packed as
    (N / b_block, K, b_block), B[k, j] at [j // b_block, k, j % b_block], so a block of
    output columns reads its weights as one contiguous stream over k."""
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    ta, tb = bool(attrs.get("trans_a", 0)), bool(attrs.get("trans_b", 0))
    nb = int(attrs.get("b_block", 0))
    m, kk = (a.shape[1], a.shape[0]) if ta else a.shape
    if nb:
        if tb or b.ndim != 3 or b.shape[2] != nb or b.shape[1] != kk:
            raise ValueError(f"gemm: packed B {b.shape} does not match b_block={nb}, K={kk}")
        n = b.shape[0] * nb
    else:
        n, bk = (b.shape[0], b.shape[1]) if tb else (b.shape[1], b.shape[0])
        if bk != kk:
            raise ValueError(
                f"gemm: inner dims differ: A {a.shape} (trans_a={int(ta)}) against "
                f"B {b.shape} (trans_b={int(tb)})"
            )
    k = te.reduce_axis(kk, "k")

    def f(i, j):
        av = a[k, i] if ta else a[i, k]
        if nb:
            bv = b[j // nb, k, j % nb]
        else:
            bv = b[j, k] if tb else b[k, j]
        return te.sum(av * bv, k)

    out = te.compute(
        [m, n],
        f,
        name="gemm",
        tag="dense",
        attrs={"trans_a": int(ta), "trans_b": int(tb), **({"b_block": nb} if nb else {})},
    )
    if alpha == 1.0 and (c is None or beta == 0.0):
        return [out]
    dt = out.dtype

    def epilogue(i, j):
        v = out[i, j] if alpha == 1.0 else out[i, j] * te.const(alpha, dt)
        if c is None or beta == 0.0:
            return v
        cv = _broadcast_2d(c, i, j)
        return v + (cv if beta == 1.0 else cv * te.const(beta, dt))

    return [te.compute([m, n], epilogue, name="gemm_epilogue", tag="elemwise")]


# --- cpu schedule -------------------------------------------------------------------

# Products with fewer multiply-adds than this run on one thread: waking the pool costs more.
PARALLEL_MIN_MACS = 1 << 16


# Vector accumulators a register tile aims for by default. Each k step of a tile is one
# FMA per accumulator into its own dependency chain, so fewer than (FMA latency x FMA
# ports) chains leave the FMA units waiting: a one-row product (a classifier's GEMV) with
# a single vector accumulator ran 1280 dependent FMAs per column block (measured, EPYC,
# one thread, 1280 -> 1000 with hot weights: 0.17 ms with 1 vector, 0.068 with 5, 0.061
# with 5 over packed weights; ONNX Runtime 0.07).
ACCUMULATORS = 8
# Bytes of B from which its column panels go outermost (about a core's L2).
B_PANEL_BYTES = 1 << 20


def _tiles(ctx: ScheduleContext, m: int, n: int, lanes: int) -> tuple[int, int]:
    """Register block: rows x (vectors of ``lanes``) accumulators, both dividing the
    output so no tile needs a guard (which would block the vector loop). Fewer rows
    (a GEMV has one) get more column vectors, up to ~ACCUMULATORS in all."""
    rows = ctx.cfg.define_split("tile_m", m, 4, most=8)
    want = max(2, ACCUMULATORS // rows)
    cols = ctx.cfg.define_split("tile_n_vectors", n // lanes, want, most=8)
    return rows, cols * lanes


def _block(st, i, j, rows: int, width: int, lanes: int):
    """Tile (i, j) by rows x width, width in vectors of ``lanes``; returns the leaves
    (io, jo, ii, jc, jl) after unrolling the block and vectorizing its lanes."""
    io, jo, ii, ji = st.tile(i, j, rows, width)
    jc, jl = st.split(ji, lanes)
    st.unroll(ii)
    st.unroll(jc)
    st.vectorize(jl)
    return io, jo, ii, jc, jl


def _product(t: te.Tensor) -> te.Tensor:
    """The sum of products itself: gemm's anchor is its alpha/beta epilogue when it has one."""
    if t.op.reduce_axis:
        return t
    return next((x for x in t.op.input_tensors if getattr(x.op, "reduce_axis", ())), t)


def _dense_cpu(ctx: ScheduleContext) -> te.Schedule:
    """Products (batched or not): each (rows x width) output tile accumulates in
    registers over the whole k loop (k outside the block, lanes innermost), then the fused
    epilogue (bias, activation, residual) runs on the tile before it is stored; batch
    dims outermost; parallel over batches and tiles."""
    acc = _product(ctx.anchor)
    m, n = acc.shape[-2:] if acc.ndim >= 2 else (0, 0)
    # half vectors where full ones do not cover the columns (1000 classes at 16 lanes),
    # and no wider than a packed B's column block, whose lanes are contiguous
    lanes = fitting_lanes(n, min(lanes_of(ctx, acc), acc.op.attrs.get("b_block") or 1 << 30))
    if not acc.op.reduce_axis or acc.ndim < 2 or lanes < 2 or n % lanes:
        return fallback(ctx)
    sch = default_schedule(ctx.outs)
    if ctx.outs[0] is acc:
        # no epilogue: accumulate in a register tile and copy it out, as with one; summed
        # in place the output tile was loaded and stored around every FMA (a store-to-
        # load chain per k step: 54 GFLOP/s on a 104x512x544 DFT, AVX-512)
        acc = sch.cache_write(acc, "local")
    out = epilogue_stage(ctx, sch)
    if out is None:
        return fallback(ctx)
    rows, width = _tiles(ctx, m, n, lanes)
    *batch, i, j = out.op.axis
    io, jo, *_ = _block(out, i, j, rows, width, lanes)
    if n * acc.op.reduce_axis[0].extent * 4 > B_PANEL_BYTES and n > m:
        # B (K x N) outweighs A and the cache: each column panel of B is read once while
        # all of A's rows pass it, not all of B once per row block (a 5 MB classifier
        # re-read per 4 tokens from memory)
        out.reorder(jo, io)
        io, jo = jo, io
    macs = m * n * acc.op.reduce_axis[0].extent
    for d in acc.shape[:-2]:
        macs *= d
    if ctx.target.cores > 1 and macs >= PARALLEL_MIN_MACS:
        jo = out.fuse(*batch, io, jo)
        out.parallel(jo)
    st = sch[acc]
    st.compute_at(out, jo)
    *_, i, j = st.op.axis
    (k,) = st.op.reduce_axis
    jc, jl = st.split(j, lanes)
    st.reorder(k, i, jc, jl)
    st.unroll(i)
    st.unroll(jc)
    st.vectorize(jl)
    return sch


register_schedule("gemm", "cpu")(_dense_cpu)
register_schedule("matmul", "cpu")(_dense_cpu)
