"""The barrier pass: where barriers go around shared buffers, and its refusal of a
barrier that work-items of one group would not all reach."""

import pytest

from packager import te
from packager.errors import PackagerError
from packager.te.ir import Barrier, Buffer, BufferLoad, For, IfThenElse, PrimFunc, Seq, Store
from packager.te.passes import insert_barriers
from packager.te.visitor import walk_stmts

X = Buffer("x", "float32", (256,))
Y = Buffer("y", "float32", (256,))
SH = Buffer("sh", "float32", (64,), scope="shared")


def _c(v):
    return te.const(v, te.INDEX)


def _thread(var, body, extent=64):
    return For(var, _c(0), _c(extent), "thread_binding", body, "threadIdx.x")


def _tile_kernel(tiles: int, wrap=None, fetch_extent=64) -> PrimFunc:
    """Per tile k: the group fetches x[k*64 + t] into sh, then each work-item t reads
    sh[63 - t] (another work-item's element). ``wrap`` puts the tile's statements
    under a condition of the caller's."""
    b, k, t1, t2 = (te.Var(n, te.INDEX) for n in ("b", "k", "t1", "t2"))
    base = k * 64 if tiles > 1 else _c(0)
    fetch = _thread(t1, Store(SH, t1, BufferLoad(X, base + t1)), fetch_extent)
    read = _thread(t2, Store(Y, base + t2, BufferLoad(SH, _c(63) - t2)))
    body = Seq([fetch, read])
    if wrap is not None:
        body = wrap(body, t1)
    if tiles > 1:
        body = For(k, _c(0), _c(tiles), "serial", body)
    grid = For(b, _c(0), _c(1), "thread_binding", body, "blockIdx.x")
    return PrimFunc("k_tile", [X, Y], grid)


def _kinds(s) -> list[str]:
    return [type(x).__name__ for x in s.stmts]


def _inner_seq(func: PrimFunc) -> Seq:
    return next(s for s in walk_stmts(func.body) if isinstance(s, Seq))


def test_a_kernel_without_shared_buffers_is_left_alone():
    b = te.Var("b", te.INDEX)
    f = PrimFunc("k", [X, Y], For(b, _c(0), _c(256), "serial", Store(Y, b, BufferLoad(X, b))))
    assert insert_barriers(f) is f


def test_a_barrier_goes_between_the_fetch_and_its_readers():
    out = _inner_seq(insert_barriers(_tile_kernel(1)))
    assert _kinds(out) == ["For", "Barrier", "For"]  # no loop: nothing to fence after


def test_a_serial_loop_over_tiles_also_ends_with_a_barrier():
    out = _inner_seq(insert_barriers(_tile_kernel(4)))
    # after the fetch (readers wait for it) and at the end of the body (the next tile's
    # fetch waits for this tile's readers)
    assert _kinds(out) == ["For", "Barrier", "For", "Barrier"]


def test_a_barrier_under_a_condition_on_the_work_item_is_refused():
    f = _tile_kernel(1, wrap=lambda body, t: IfThenElse(_c(0) < 1, body))
    insert_barriers(f)  # a condition every work-item agrees on is fine

    # inside a threadIdx loop, a condition on its variable
    t = te.Var("t", te.INDEX)
    b = te.Var("b", te.INDEX)
    div = _thread(
        t,
        IfThenElse(
            t < 10,
            Seq([Store(SH, t, BufferLoad(X, t)), Store(Y, t, BufferLoad(SH, _c(63) - t))]),
        ),
    )
    func = PrimFunc("k_div", [X, Y], For(b, _c(0), _c(1), "thread_binding", div, "blockIdx.x"))
    with pytest.raises(
        PackagerError,
        match=r"kernel k_div: a barrier before the read of shared sh would sit under an if on "
        r"the work-item's index",
    ):
        insert_barriers(func)


def test_a_barrier_inside_a_guarded_thread_loop_is_refused():
    """A threadIdx loop shorter than the launch's is guarded: work-items past its end
    skip everything inside it, barriers included."""
    t, u, b = (te.Var(n, te.INDEX) for n in ("t", "u", "b"))
    inner = _thread(
        t,
        Seq([Store(SH, t, BufferLoad(X, t)), Store(Y, t, BufferLoad(SH, _c(47) - t))]),
        extent=48,
    )
    other = _thread(u, Store(Y, u, BufferLoad(X, u)))  # the launch has 64 work-items
    grid = For(b, _c(0), _c(1), "thread_binding", Seq([other, inner]), "blockIdx.x")
    with pytest.raises(PackagerError, match=r"kernel k_short: .*under the guard of loop t"):
        insert_barriers(PrimFunc("k_short", [X, Y], grid))


def test_a_condition_on_the_group_does_not_stop_the_barrier():
    f = _tile_kernel(1)
    f.body.body = IfThenElse(f.body.var < 1, f.body.body)  # the group's index
    out = insert_barriers(f)
    assert sum(isinstance(s, Barrier) for s in walk_stmts(out.body)) == 1
