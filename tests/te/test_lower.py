import time

from packager import te
from packager.codegen import codegen_c
from packager.te.expr import Const
from packager.te.ir import Allocate, For, IfThenElse, Store
from packager.te.visitor import LoopVisitor, stmts_of, walk_stmts


def _elementwise_chain(n_ops, shape=(1, 64, 112, 112)):
    A = te.placeholder(shape, name="A")
    t = A
    for k in range(n_ops):
        prev = t
        t = te.compute(shape, lambda *i, p=prev: p[i] * p[i] + 1.0, name=f"e{k}")
    return A, t


def test_inline_chain_is_one_nest_without_buffers():
    A, out = _elementwise_chain(3)
    f = te.lower(te.default_schedule(out), [A, out], "k")
    nodes = list(walk_stmts(f.body))
    assert not any(isinstance(n, Allocate) for n in nodes)
    assert sum(isinstance(n, Store) for n in nodes) == 1
    assert sum(isinstance(n, For) for n in nodes) == 3  # the batch loop of extent 1 is gone


def test_inlining_is_not_exponential():
    A, out = _elementwise_chain(40)
    t0 = time.perf_counter()
    src = codegen_c(te.lower(te.default_schedule(out), [A, out], "k"))
    assert time.perf_counter() - t0 < 2.0
    assert len(src) < 20000  # x*x shares its operand: one temporary per level


def test_lowering_is_fast():
    X = te.placeholder((1, 64, 112, 112), name="X")
    Y = te.compute(X.shape, lambda n, c, h, w: te.max_(X[n, c, h, w], 0.0), name="Y")
    t0 = time.perf_counter()
    for _ in range(20):
        codegen_c(te.lower(te.default_schedule(Y), [X, Y], "k"))
    assert (time.perf_counter() - t0) / 20 < 0.05


def test_dividing_split_has_no_guard():
    A = te.placeholder((16, 8), name="A")
    B = te.compute((16, 8), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B)
    s[B].split(s[B].op.axis[0], 4)
    f = te.lower(s, [A, B], "k")
    assert not any(isinstance(n, IfThenElse) for n in walk_stmts(f.body))
    s[B].split(s[B].op.axis[1], 3)
    f = te.lower(s, [A, B], "k")
    assert any(isinstance(n, IfThenElse) for n in walk_stmts(f.body))


def test_flat_index_is_clean():
    A = te.placeholder((10, 20), name="A")
    B = te.compute((10, 20), lambda i, j: A[i, j] * 2.0, name="B")
    src = codegen_c(te.lower(te.default_schedule(B), [A, B], "k"))
    assert "((B_i0 * 20) + B_i1)" in src


def test_default_schedule_keeps_reductions_and_outputs():
    A = te.placeholder((4, 5), name="A")
    k = te.reduce_axis(5, "k")
    R = te.compute((4,), lambda i: te.sum(A[i, k], k), name="R")
    E = te.compute((4,), lambda i: R[i] * 2.0, name="E")
    F = te.compute((4,), lambda i: E[i] + 1.0, name="F")
    s = te.default_schedule([E, F])
    # R is read only by E, at E's own index: computed inside E's loop, no buffer.
    assert s[R].attach_type == "scope" and s[R].attach_stage is s[E]
    assert s[E].attach_type == "root"


def test_default_schedule_keeps_broadcast_reductions_at_root():
    """A reduction read at another index (here broadcast along j) would be recomputed
    per element inside the reader's loop: it stays at root."""
    A = te.placeholder((4, 5), name="A")
    k = te.reduce_axis(5, "k")
    R = te.compute((4,), lambda i: te.max_reduce(A[i, k], k), name="R")
    E = te.compute((4, 5), lambda i, j: A[i, j] - R[i], name="E")
    assert te.default_schedule(E)[R].attach_type == "root"


def test_default_schedule_sees_through_inlined_stages():
    A = te.placeholder((1, 3, 4), name="A")
    k = te.reduce_axis(4, "k")
    R = te.compute((1, 3, 4), lambda n, c, i: te.sum(A[n, c, k] * A[n, c, i], k), name="R")
    B = te.compute((1, 3, 4), lambda n, c, i: R[0, c, i] + 1.0, name="B")  # inlined
    E = te.compute((1, 3, 4), lambda n, c, i: B[n, c, i] * 2.0, name="E")
    s = te.default_schedule(E)
    assert s[B].attach_type == "inline" and s[R].attach_stage is s[E]
    src = codegen_c(te.lower(s, [A, E], "k"))
    assert "R[12]" not in src and "R[1]" in src  # a one-element local, not the tensor


def test_deterministic_source():
    def make():
        A = te.placeholder((8, 8), name="A")
        B = te.compute((8, 8), lambda i, j: A[j, i] + A[i, j], name="B")
        s = te.create_schedule(B)
        io, ii = s[B].split(s[B].op.axis[0], 4)
        s[B].parallel(io)
        return codegen_c(te.lower(s, [A, B], "k_t"))

    assert make() == make()


def _local_producer(parallel: bool):
    """B computed per row of C, inside C's serial row loop (below a parallel one)."""
    A = te.placeholder((4, 8, 16), name="A")
    B = te.compute((4, 8, 16), lambda n, i, j: A[n, i, j] + 1.0, name="B")
    C = te.compute((4, 8, 16), lambda n, i, j: B[n, i, j] * 2.0, name="C")
    s = te.create_schedule(C)
    n, i, _ = s[C].op.axis
    if parallel:
        s[C].parallel(n)
    s[B].compute_at(s[C], i)
    return te.lower(s, [A, C], "k")


def _loops_around_allocations(f):
    found = []

    class Where(LoopVisitor):
        def visit_Allocate(self, s):
            found.append((s.buffer.name, [lp.kind for lp in self.loops]))
            self.generic_visit(s)

    Where().visit(f.body)
    return found


def test_allocations_leave_serial_loops_and_stay_in_parallel_ones():
    # one row buffer per thread, reused by every row of that thread
    assert _loops_around_allocations(_local_producer(parallel=True)) == [("B", ["parallel"])]
    # without threads, one buffer for the whole kernel
    assert _loops_around_allocations(_local_producer(parallel=False)) == [("B", [])]
    assert [s.buffer.size for s in stmts_of(_local_producer(True).body, Allocate)] == [16]


def test_final_simplify_drops_dead_guards_and_unit_loops():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B)
    s[B].split(s[B].op.axis[0], 8)  # one outer iteration, and i < 8 always holds
    f = te.lower(s, [A, B], "k")
    assert [type(n).__name__ for n in walk_stmts(f.body)] == ["For", "Store"]


def _masked_rowsum():
    """out[i] = sum of A[i, k] over k < i % 5 + 1: a reduction masked by ``k < bound(i)``."""
    A = te.placeholder((6, 8), name="A")
    k = te.reduce_axis(8, "k")
    out = te.compute((6,), lambda i: te.sum(A[i, k], k, where=k < i % 5 + 1), name="S")
    return A, out


def test_masked_reduction_stops_its_loop_at_the_mask():
    """A ``where`` of the form k < bound (bound independent of k) becomes the bound of
    k's loop, with no guard left inside it; the sum is the masked one."""
    import numpy as np

    from packager.tune.features import flop_count

    from .helpers import run

    A, out = _masked_rowsum()
    sch = te.default_schedule(out)
    func = te.lower(sch, [A, out], "k")
    loops = [n for n in walk_stmts(func.body) if isinstance(n, For)]
    (red,) = [f for f in loops if f.var.name == "k"]
    assert not isinstance(red.extent, Const) and not isinstance(red.body, IfThenElse)
    assert not any(isinstance(n, IfThenElse) for n in walk_stmts(func.body))
    a = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)
    (got,), _ = run(sch, [A, out], "k", [a])
    want = [a[i, : i % 5 + 1].sum() for i in range(6)]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # the cost features count the loop at its most (i % 5 + 1 <= 5), not as one iteration
    assert flop_count(func) == 6 * 5


def test_masked_reduction_under_a_tile_loop_stops_at_the_largest_bound():
    """A mask reading an unrolled loop between it and the reduction (a register tile's
    rows, each with its own bound) stays, and the reduction stops at the largest bound."""
    import numpy as np

    from .helpers import run

    A, out = _masked_rowsum()
    sch = te.create_schedule([out])
    st = sch[out]
    (i,) = st.op.axis
    (k,) = st.op.reduce_axis
    io, ii = st.split(i, 2)
    st.reorder(io, k, ii)
    st.unroll(ii)
    func = te.lower(sch, [A, out], "k")
    (red,) = [n for n in walk_stmts(func.body) if isinstance(n, For) and n.var.name == "k"]
    assert "max" in repr(red.extent)
    assert any(isinstance(n, IfThenElse) for n in walk_stmts(red.body))
    a = np.random.default_rng(1).standard_normal((6, 8)).astype(np.float32)
    (got,), _ = run(sch, [A, out], "k", [a])
    want = [a[r, : r % 5 + 1].sum() for r in range(6)]
    np.testing.assert_allclose(got, want, rtol=1e-5)
