"""The virtual_thread schedule primitive and named buffer scopes through lowering."""

import pytest

from packager import te
from packager.te.ir import Allocate, For
from packager.te.visitor import stmts_of


def _two_stage(scope: str):
    a = te.placeholder((8, 16), "int32", "a")
    b = te.compute((8, 16), lambda i, j: a[(i, j)] + 1, name="b")
    s = te.create_schedule(b)
    cache = s.cache_read(a, scope, [b])
    io, ii = s[b].split(b.op.axis[0], 2)
    return a, b, s, cache, io, ii


def test_buffers_stay_inside_a_virtual_thread_loop_with_their_scope():
    """Each virtual thread keeps its own copy: the allocation is not hoisted out of the
    loop (a serial loop's is), and the cache keeps its accel.inp scope."""
    a, b, s, cache, io, ii = _two_stage("accel.inp")
    s[b].virtual_thread(ii)
    s[cache].compute_at(s[b], ii)
    f = te.lower(s, [a, b], "k")
    vt = [x for x in stmts_of(f.body, For) if x.kind == "virtual_thread"]
    assert len(vt) == 1 and vt[0].extent.value == 2
    inner = stmts_of(vt[0].body, Allocate)
    assert [(x.buffer.scope, x.buffer.shape) for x in inner] == [("accel.inp", (1, 16))]

    a, b, s, cache, io, ii = _two_stage("accel.inp")  # the same, serial: hoisted to the top
    s[cache].compute_at(s[b], ii)
    f = te.lower(s, [a, b], "k")
    assert isinstance(f.body, Allocate) and f.body.buffer.scope == "accel.inp"


def test_virtual_thread_on_a_reduction_axis_is_refused():
    a = te.placeholder((8, 16), "int32", "a")
    r = te.reduce_axis(16, "r")
    b = te.compute((8,), lambda i: te.sum(a[(i, r)], [r]), name="b")
    s = te.create_schedule(b)
    with pytest.raises(ValueError, match="virtual_thread on a reduction axis"):
        s[b].virtual_thread(r)
