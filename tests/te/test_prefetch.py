"""Stage.prefetch: where lowering puts the prefetches, what C prints, what is refused."""

import numpy as np
import pytest

from packager import te
from packager.codegen import codegen_c
from packager.te.ir import For, Prefetch
from packager.te.tensorize import TensorIntrin
from packager.te.visitor import LoopVisitor

from .helpers import run


def _matmul(M=6, N=32, K=5):
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], k), name="C")
    return A, B, C


def _tiled(prefetch_b=True, prefetch_a=False):
    """C's columns in tiles of 8 (vectorized), the reduction outside each tile."""
    A, B, C = _matmul()
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    jo, ji = s[C].split(j, 8)
    s[C].reorder(i, jo, k, ji)
    s[C].vectorize(ji)
    if prefetch_b:
        s[C].prefetch(B, 1, 8)  # the next tile's columns of B
    if prefetch_a:
        s[C].prefetch(A, 0, 1)  # the next row of A
    return s, (A, B, C)


class _Where(LoopVisitor):
    """Each prefetch with the loops around it."""

    def __init__(self):
        super().__init__()
        self.found = []

    def visit_Prefetch(self, s):
        self.found.append(([f.var.name for f in self.loops], s))


def _prefetches(func):
    w = _Where()
    w.visit(func.body)
    return w.found


def test_a_prefetch_sits_in_the_loops_its_address_uses():
    """B[k, j + 8] inside the k loop (not per lane of the vectorized tile: at its
    first), A[i + 1, k] the same; neither in the 8-lane loop."""
    s, args = _tiled(prefetch_a=True)
    func = te.lower(s, list(args), "k_pf")
    found = _prefetches(func)
    assert len(found) == 2
    for loops, _ in found:
        assert loops[-1] == "k" and "C_i1_i" not in loops
    by = {pf.target.buffer.name: pf for _, pf in found}
    index_b = str(by["B"].target.index)
    assert "C_i1_i" not in index_b and "8" in index_b


def test_prefetches_change_no_result_and_print_once():
    s, args = _tiled()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((5, 32)).astype(np.float32)
    (c,), src = run(s, list(args), "k_pf", [a, b])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert src.count("__builtin_prefetch(") == 1
    # the address is integer arithmetic: the last tile's points past B
    assert "(uintptr_t)B + (uintptr_t)(" in src and "* 4u), 0, 2);" in src


def test_without_prefetch_nothing_is_printed():
    s, args = _tiled(prefetch_b=False)
    assert "__builtin_prefetch" not in codegen_c(te.lower(s, list(args), "k_pf"))
    assert not _prefetches(te.lower(s, list(args), "k_pf"))


def _rows_of_b_ahead(inner_j: bool):
    """C's loops k, i, j (``inner_j``) or k, j, i, serial, prefetching B[k + 1, j]."""
    A, B, C = _matmul()
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    s[C].reorder(k, i, j) if inner_j else s[C].reorder(k, j, i)
    s[C].prefetch(B, 0, 1)
    return s, [A, B, C]


def test_a_prefetch_leaves_a_serial_loop_it_does_not_use():
    """B[k + 1, j] under loops k, j, i (serial): issued once per (k, j), not per i."""
    s, args = _rows_of_b_ahead(inner_j=False)
    ((loops, _),) = _prefetches(te.lower(s, args, "k_pf"))
    assert loops == ["k", "C_i1"]


def test_a_prefetch_leaves_with_a_loop_of_its_own():
    """B[k + 1, j] under loops k, i, j: the prefetch needs j but not i, so it leaves i in
    a loop over j of its own, ahead of the i loop (once per (k, j), not per (k, i, j)),
    and the kernel still computes the product."""
    s, args = _rows_of_b_ahead(inner_j=True)
    ((loops, _),) = _prefetches(te.lower(s, args, "k_pf"))
    assert loops == ["k", "C_i1"]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((5, 32)).astype(np.float32)
    (c,), src = run(s, args, "k_pf", [a, b])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert src.count("__builtin_prefetch(") == 1


def test_prefetch_refusals():
    A, B, C = _matmul()
    other = te.placeholder((5, 32), name="D")
    s = te.create_schedule(C)
    with pytest.raises(ValueError, match="C: it does not read D"):
        s[C].prefetch(other, 0, 1)
    with pytest.raises(ValueError, match="B: axis 2 of 2"):
        s[C].prefetch(B, 2, 1)
    with pytest.raises(ValueError, match="offset 0 fetches what is read anyway"):
        s[C].prefetch(B, 0, 0)
    row = te.compute((32,), lambda j: C[0, j], name="row")  # reads the stage C
    with pytest.raises(ValueError, match="prefetch C: not a kernel argument"):
        te.create_schedule(row)[row].prefetch(C, 0, 1)
    s[C].prefetch(B, 1, 8)
    with pytest.raises(ValueError, match="call it before other primitives"):
        s.cache_write(C, "local")


def test_a_tensorized_stage_prefetches_ahead_of_its_calls():
    """An elementwise intrinsic over 4 elements of x and y: prefetching x 4 on puts one
    prefetch of x[i + 4] ahead of each call (at the first element the call reads), none
    for y."""
    x = te.placeholder((16,), name="x")
    y = te.placeholder((16,), name="y")
    out = te.compute((16,), lambda i: x[i] + y[i], name="out")
    xd, yd = te.placeholder((4,), name="xd"), te.placeholder((4,), name="yd")
    intrin = TensorIntrin("vadd4", te.compute((4,), lambda i: xd[i] + yd[i], name="d"), "")
    s = te.create_schedule(out)
    io, ii = s[out].split(s[out].op.axis[0], 4)
    s[out].tensorize(ii, intrin)
    s[out].prefetch(x, 0, 4)
    func = te.lower(s, [x, y, out], "k_pf")
    ((loops, pf),) = _prefetches(func)
    assert loops == ["out_i0_o"] and pf.target.buffer.name == "x"
    lines = codegen_c(func).splitlines()
    k = next(n for n, line in enumerate(lines) if "__builtin_prefetch(" in line)
    assert "(uintptr_t)x + (uintptr_t)(((out_i0_o * 4) + 4)) * 4u), 0, 2);" in lines[k]
    assert any(x.strip().startswith("vadd4(") for x in lines[k + 1 : k + 3])  # then the call


def test_the_for_loops_keep_their_kinds():
    """Taking the prefetches out leaves the vectorized loop a vectorized loop (so it is
    still printed as vector code)."""
    s, args = _tiled()
    func = te.lower(s, list(args), "k_pf")
    kinds = {}

    class _Kinds(LoopVisitor):
        def visit_For(self, f: For):
            kinds[f.var.name] = f.kind
            super().visit_For(f)

    _Kinds().visit(func.body)
    assert kinds["C_i1_i"] == "vectorized"
    assert isinstance(_prefetches(func)[0][1], Prefetch)
    assert "pk_f32x8" in codegen_c(func)
