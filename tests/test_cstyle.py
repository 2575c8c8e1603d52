"""The C-style printer is one renderer and a language is a table: a C dialect with its
own type names and vector spelling renders through the same printer, compiles and
computes the right answer; what a language lacks (a barrier, a thread index in C) is
refused naming the kernel."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from packager import te
from packager.codegen.build import compile_shared, have_compiler, load_kernel
from packager.codegen.c import C, codegen_c
from packager.codegen.opencl import codegen_opencl
from packager.errors import PackagerError
from packager.te.expr import INDEX, Binary, Const, Select, Var
from packager.te.ir import Allocate, Barrier, Buffer, BufferLoad, For, PrimFunc, Seq, Store

# C with other names for its scalar types, a vector of N lanes spelled REAL_vN and
# declared with a reduced alignment, so loads and stores are pointer casts (no memcpy);
# broadcasts are compound literals; no unroll pragma.
DIALECT = dataclasses.replace(
    C,
    name="C-dialect",
    prelude=(
        '#include "pk_kernel.h"\n'
        "typedef float real32;\ntypedef int32_t word32;\ntypedef int64_t idx64;"
    ),
    types={**C.types, "float32": "real32", "int32": "word32", "int64": "idx64"},
    vector_lanes=(4,),
    max_vector_bytes=16,
    vector_type="{scalar}_v{lanes}",
    vector_decl="typedef {scalar} {name} __attribute__((vector_size({bytes}), aligned(4)));",
    vector_load="{dst} = *(const {type}*)&{buf}[{index}];",
    vector_store="*({type}*)&{buf}[{index}] = {src};",
    vector_broadcast="({type}){{{elems}}}",
    unroll_pragma=None,
)


def _scaled_max(rows=6, cols=12):
    """out[i, j] = max(a[i, j] * w[j], 0.25) + a[i, j]: rows in parallel, the columns
    in vectors of 4 (a broadcast constant and a NaN-propagating vector max)."""
    a = te.placeholder((rows, cols), name="a")
    w = te.placeholder((cols,), name="w")
    out = te.compute(
        (rows, cols),
        lambda i, j: te.max_(a[i, j] * w[j], te.const(0.25, "float32")) + a[i, j],
        name="out",
    )
    s = te.create_schedule(out)
    i, j = s[out].op.axis
    jo, ji = s[out].split(j, 4)
    s[out].vectorize(ji)
    s[out].unroll(jo)
    s[out].parallel(i)
    return te.lower(s, [a, w, out], "k_scaled")


def test_a_language_is_a_table_the_shared_printer_renders():
    func = _scaled_max()
    src = codegen_c(func, DIALECT)
    # the dialect's spellings, and none of C's own
    assert "typedef real32 real32_v4 __attribute__((vector_size(16), aligned(4)));" in src
    assert "typedef word32 word32_v4" in src  # the max's compare mask
    assert re.search(r"= \*\(const real32_v4\*\)&a\[", src)
    assert re.search(r"\*\(real32_v4\*\)&out\[.*\] = pk_t\d+;", src)
    assert "(real32_v4){0.25f, 0.25f, 0.25f, 0.25f}" in src
    assert "for (idx64 " in src
    body = src.removeprefix(DIALECT.prelude)  # the typedefs name C's types
    assert not re.search(r"\bfloat\b|int64_t \w+ =|pk_f32x4|__builtin_memcpy|GCC unroll", body)
    # C's own methods still apply: the parallel loop goes through the runtime's pool
    assert "pk_parallel_for(k_scaled_par0" in src
    # the same function in C keeps C's table
    c_src = codegen_c(func)
    assert "pk_f32x4" in c_src and "__builtin_memcpy" in c_src and "real32" not in c_src

    if not have_compiler():
        pytest.skip("no C compiler")
    kernel = load_kernel(compile_shared({func.name: src}), func.name)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 12)).astype("float32")
    w = rng.standard_normal(12).astype("float32")
    a[1, 3] = np.nan  # the max keeps a NaN operand
    out = np.zeros((6, 12), "float32")
    kernel(a, w, out)
    np.testing.assert_array_equal(out, np.maximum(a * w, np.float32(0.25)) + a)


def _kernel(name: str, body_of) -> PrimFunc:
    buf = Buffer("x", "float32", (8,))
    return PrimFunc(name, [buf], body_of(buf))


def test_a_barrier_in_a_c_kernel_is_refused_naming_the_kernel():
    def body(x):
        return Seq([Store(x, Const(0, INDEX), Const(1.0, "float32")), Barrier()])

    with pytest.raises(PackagerError, match=r"kernel k_sync: C has no barrier \(shared memory\)"):
        codegen_c(_kernel("k_sync", body))


def test_a_thread_bound_loop_in_a_c_kernel_is_refused_naming_the_kernel():
    def body(x):
        t = Var("tx", INDEX)
        store = Store(x, t, Const(1.0, "float32"))
        return For(t, Const(0, INDEX), Const(8, INDEX), "thread_binding", store, "threadIdx.x")

    with pytest.raises(PackagerError, match=r"kernel k_tid: C has no thread index 'threadIdx.x'"):
        codegen_c(_kernel("k_tid", body))


def test_thread_indices_barriers_and_scopes_are_the_table_s():
    """A language that has them: the thread read, the barrier and a shared buffer's
    declaration are its table's text."""
    gpu = dataclasses.replace(
        C,
        name="gpu-dialect",
        thread_index={"threadIdx.x": "thread_x()"},
        barrier="sync_group();",
        scope_prefix={"shared": "group_mem "},
    )

    def body(x):
        t = Var("tx", INDEX)
        tile = Buffer("tile", "float32", (8,), scope="shared")
        nest = Seq(
            [
                Store(tile, t, BufferLoad(x, t)),
                Barrier(),
                Store(x, t, BufferLoad(tile, Const(0, INDEX))),
            ]
        )
        return Allocate(
            tile, For(t, Const(0, INDEX), Const(8, INDEX), "thread_binding", nest, "threadIdx.x")
        )

    lines = [line.strip() for line in codegen_c(_kernel("k_group", body), gpu).splitlines()]
    assert "group_mem float tile[8];" in lines
    assert "const int64_t tx = thread_x();" in lines
    assert (
        lines.index("tile[tx] = x[tx];")
        < lines.index("sync_group();")
        < lines.index("x[tx] = tile[0];")
    )


def test_opencl_private_arrays_take_whole_vectors_without_vload():
    """A private array is declared aligned; its vector accesses at multiples of the lanes
    are plain vector loads and stores (kept in registers), one at another index and
    those of global buffers stay vloadN / vstoreN."""

    def body(x):
        v = Var("v", INDEX)
        acc = Buffer("acc", "float32", (12,), scope="local")

        def vec(stmt):
            return For(v, Const(0, INDEX), Const(4, INDEX), "vectorized", stmt)

        four, one = Const(4, INDEX), Const(1, INDEX)
        return Allocate(
            acc,
            Seq(
                [
                    vec(Store(acc, v + four, BufferLoad(x, v))),
                    vec(Store(acc, v + one, BufferLoad(x, v))),
                    vec(Store(x, v, BufferLoad(acc, v + four) + BufferLoad(acc, v + one))),
                ]
            ),
        )

    src = codegen_opencl(_kernel("k_priv", body))
    assert "float acc[12] __attribute__((aligned(64)));" in src
    assert "*((__private float4*)(acc + 4)) = " in src
    assert re.search(r"= \*\(\(__private float4\*\)\(acc \+ 4\)\);", src)
    assert re.search(r"vstore4\(pk_t\d+, 0, acc \+ 1\);", src)  # index 1: unaligned
    assert "vload4(0, acc + 1);" in src
    assert "vload4(0, x + 0);" in src and "0, x + 0);" in src  # global: vloadN, vstoreN


def test_opencl_guarded_loads_are_unconditional_loads_of_a_safe_index():
    """A padding guard (cond ? x[i] : 0) loads x[cond ? i : 0] whatever the condition, then
    selects: no branch around the load. C keeps the guarded load."""

    def body(x):
        i = Var("i", INDEX)
        cond = Binary("<", i, Const(5, INDEX), "bool")
        guarded = Select(cond, BufferLoad(x, i + Const(3, INDEX)), Const(0.0, "float32"), "float32")
        return For(i, Const(0, INDEX), Const(8, INDEX), "serial", Store(x, i, guarded))

    src = codegen_opencl(_kernel("k_pad", body))
    m = re.search(r"const int (pk_t\d+) = \(i < 5\);", src)
    assert m, src
    c = m.group(1)
    load = re.search(rf"const float (pk_t\d+) = x\[{c} \? \(i \+ 3\) : 0\];", src)
    assert load, src
    assert f"x[i] = ({c} ? {load.group(1)} : 0.0f);" in src
    assert "? x[(i + 3)] : 0.0f" in codegen_c(_kernel("k_pad", body))


def test_a_schedules_compiler_hint_reaches_c_only():
    """Schedule.hint travels with the lowered kernel: C puts its pragma after the
    prelude, before every function; OpenCL has no such switch and drops it; a hint
    nobody knows is refused by name."""
    a = te.placeholder((8,), name="a")
    out = te.compute((8,), lambda i: a[i] + a[i], name="out")
    s = te.create_schedule(out)
    s.hint("no_predictive_commoning")
    func = te.lower(s, [a, out], "k_hinted")
    assert func.hints == frozenset({"no_predictive_commoning"})
    src = codegen_c(func)
    pragma = '#pragma GCC optimize("no-predictive-commoning")'
    assert src.index('#include "pk_kernel.h"') < src.index(pragma) < src.index("k_hinted(")
    assert pragma not in codegen_c(te.lower(te.create_schedule(out), [a, out], "k_plain"))
    assert "pragma" not in codegen_opencl(func)
    with pytest.raises(ValueError, match="unknown compiler hint 'fast'"):
        s.hint("fast")
