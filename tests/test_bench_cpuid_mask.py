"""bench/cpuid_mask.py holds a process to an AVX2 machine's CPUID, so ORT runs its AVX2
kernels beside a host-avx2 bundle (`--ort-isa avx2`). Each check runs in a process of
its own: the hold lasts for the process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

from .helpers import bench_module

BENCH = Path(__file__).resolve().parent.parent / "bench"
mask = bench_module("cpuid_mask")

pytestmark = pytest.mark.skipif(
    not mask.can_mask(), reason="this CPU or kernel cannot fault CPUID (no cpuid_fault)"
)

# leaf 7.0 EBX: AVX2 (5), BMI2 (8); AVX-512 F (16), DQ (17), CD (28), BW (30), VL (31)
AVX512_EBX = (1 << 16) | (1 << 17) | (1 << 28) | (1 << 30) | (1 << 31)
VNNI_ECX = 1 << 11  # leaf 7.0 ECX: AVX512_VNNI
AVX_VNNI_EAX = 1 << 4  # leaf 7.1 EAX
AMX_EDX = (1 << 22) | (1 << 24) | (1 << 25)  # leaf 7.0 EDX: AMX-BF16, TILE, INT8


def _child(code: str) -> subprocess.CompletedProcess:
    prelude = f"import sys, json; sys.path.insert(0, {str(BENCH)!r}); import cpuid_mask as m\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=120
    )


def test_the_hold_clears_the_wide_features_and_keeps_the_rest():
    exec_leaf7 = (
        f"import sys, json; sys.path.insert(0, {str(BENCH)!r}); import cpuid_mask as m; "
        "print(json.dumps(m.cpuid(7, 0)))"
    )
    r = _child(
        f"""
import subprocess, threading
before = [m.cpuid(1), m.cpuid(7, 0), m.cpuid(7, 1)]
m.hold_to_avx2()
after = [m.cpuid(1), m.cpuid(7, 0), m.cpuid(7, 1)]
seen = []
t = threading.Thread(target=lambda: seen.append(m.cpuid(7, 0)))
t.start(); t.join()
child = subprocess.run([sys.executable, "-c", {exec_leaf7!r}], capture_output=True, text=True)
print(json.dumps({{"before": before, "after": after, "thread": seen[0],
                  "exec": json.loads(child.stdout), "traps": m.traps()}}))
"""
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    (b1, b7, _), (a1, a7, a71) = out["before"], out["after"]
    assert a1 == b1  # leaf 1 (SSE to AVX, FMA) as it was
    assert a7[1] & (1 << 5) and a7[1] & (1 << 8)  # AVX2 and BMI2 kept
    assert a7[1] & AVX512_EBX == 0 and a7[2] & VNNI_ECX == 0 and a7[3] & AMX_EDX == 0
    assert a71[0] & AVX_VNNI_EAX == 0
    keep = ~AVX512_EBX & 0xFFFFFFFF
    assert a7[1] & keep == b7[1] & keep & ~((1 << 21) | (1 << 26) | (1 << 27))
    assert out["thread"] == a7  # a thread started after the hold is held too
    assert out["exec"] == b7  # a program it starts sees the real CPU
    assert out["traps"] >= 4


def test_a_fault_that_is_not_cpuid_still_kills_the_process():
    r = _child(
        """
import ctypes, mmap
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
page = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
libc.munmap(page, 4096)
m.hold_to_avx2()
ctypes.string_at(page, 1)  # a page no longer mapped
print('survived')"""
    )
    assert r.returncode == -signal.SIGSEGV
    assert "survived" not in r.stdout


def test_ort_held_to_avx2_asks_cpuid_and_computes_the_same(tmp_path):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        [w],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "m.onnx")
    x = rng.standard_normal((1, 4, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    outs = {}
    for isa in ("native", "avx2"):
        hold = "m.hold_to_avx2()" if isa == "avx2" else ""
        r = _child(
            f"""{hold}
import numpy as np, onnxruntime as ort
s = ort.InferenceSession({str(tmp_path / "m.onnx")!r}, providers=["CPUExecutionProvider"])
x = np.load({str(tmp_path / "x.npy")!r})
np.save({str(tmp_path / isa)!r} + ".npy", s.run(None, {{"x": x}})[0])
print(m.traps() if {bool(hold)} else 0)"""
        )
        assert r.returncode == 0, r.stderr
        outs[isa] = np.load(tmp_path / f"{isa}.npy"), int(r.stdout.split()[-1])
    assert outs["avx2"][1] > 0  # ORT's kernel choice read the held CPUID
    np.testing.assert_allclose(outs["avx2"][0], outs["native"][0], rtol=1e-4, atol=1e-4)


def test_compare_ort_times_ort_in_a_held_process(tmp_path, monkeypatch):
    co = bench_module("compare_ort")
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [w],
    )
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.ones((1, 4), np.float32))
    monkeypatch.setattr(co, "ORT_ISA", "avx2")
    ms = co.time_ort_process(tmp_path / "m.onnx", {"x": str(tmp_path / "x.npy")}, 3, 1)
    assert ms > 0
    cmd = [sys.executable, co.__file__, "--ort-child", str(tmp_path / "m.onnx"), "1", "3"]
    cmd.append(f"x={tmp_path / 'x.npy'}")
    for isa, held in (("avx2", True), ("native", False)):
        r = subprocess.run(
            cmd, capture_output=True, text=True, env={**os.environ, "PK_ORT_ISA": isa}
        )
        row = json.loads(r.stdout.splitlines()[-1])
        assert (row.get("cpuid_traps", 0) > 0) == held, (isa, row)
    monkeypatch.setattr(co, "ORT_ISA", "avx512")
    with pytest.raises(subprocess.CalledProcessError):  # an ISA it cannot hold to
        co.time_ort_process(tmp_path / "m.onnx", {"x": str(tmp_path / "x.npy")}, 3, 1)
