"""The C runtime's accel backend on the simulator: its ctest programs under ASAN+UBSAN, and
run_bundle on a hand-made bundle (built with c_runtime/bundle/CMakeLists.txt and
``set(PK_ACCEL sim)``) whose program file packager/accel/program.py writes: a CPU node feeding
an accel GEMM, outputs, ``accel: sim`` at load and the profile's accelerator counters."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from packager.accel import isa
from packager.accel.program import UOPS, AccelConfig, Program, write_programs
from packager.params_file import write_params

from .test_c_runtime import C_RUNTIME, SAN_ENV, SANITIZE, cmake_build, cmake_exe, needs_cc, run

INC = """#include "pk_kernel.h"
int32_t k_inc_16(void* const* args) {
    const int8_t* x = args[0];
    int8_t* y = args[1];
    for (int i = 0; i < 16; i++) y[i] = (int8_t)(x[i] + 1);
    return 0;
}
"""
REGISTRY = """#include "pk_kernel.h"
int32_t k_inc_16(void* const* args);
const pk_kernel_entry pk_kernel_table[] = {
    {"k_inc_16", k_inc_16, "int8[1,16] int8[1,16]"},
    {0, 0, 0},
};
const int32_t pk_kernel_count = 1;
"""
W = ((np.arange(16)[:, None] * 37 + np.arange(16)[None, :] * 101) % 255 - 127).astype(np.int8)


def gemm_program(name: str = "k_1_accel_dense") -> Program:
    """y[16] = low bytes of W (16 x 16, one wgt tile) . t (16, one inp tile): arguments t, W, y."""
    mem = {"y_size": 1, "x_size": 1, "x_stride": 1}
    loop = {"uop_bgn": 0, "uop_end": 1, "iter_out": 1, "iter_in": 1}
    insns = [
        {"opcode": isa.LOAD, "buffer": isa.UOP, **mem},
        {"opcode": isa.LOAD, "buffer": isa.INP, **mem},
        {"opcode": isa.LOAD, "buffer": isa.WGT, "push_next": 1, **mem},
        {"opcode": isa.GEMM, "reset": 1, **loop},
        {"opcode": isa.GEMM, "pop_prev": 1, "push_next": 1, **loop},
        {"opcode": isa.STORE, "buffer": isa.ACC, "pop_prev": 1, "push_prev": 1, **mem},
        {"opcode": isa.FINISH, "pop_next": 1},
    ]
    relocs = [(0, UOPS), (1, 0), (2, 1), (5, 2)]
    return Program(name, 3, insns, [(0, 0, 0)], relocs)


def graph() -> dict:
    """x int8[1,16] -> inc (cpu) -> t; fc (accel) on t and the param W -> y; heads y, t."""
    return {
        "format": "packager-graph",
        "version": 1,
        "nodes": [
            {"op": "input", "name": "x", "inputs": []},
            {"op": "param", "name": "W", "inputs": []},
            {
                "op": "kernel",
                "name": "inc",
                "func": "k_inc_16",
                "inputs": [[0, 0]],
                "num_outputs": 1,
            },
            {
                "op": "kernel",
                "name": "fc",
                "func": "k_1_accel_dense",
                "device": "accel",
                "inputs": [[2, 0], [1, 0]],
                "num_outputs": 1,
                "flops": 512,
                "bytes": 288,
            },
        ],  # fmt: skip
        "arg_nodes": [0, 1],
        "node_row_ptr": [0, 1, 2, 3, 4],
        "heads": [[3, 0], [2, 0]],
        "outputs": ["y", "t"],
        "attrs": {
            "shape": [[1, 16], [16, 16], [1, 16], [1, 16]],
            "dtype": ["int8"] * 4,
            "storage_id": [0, 1, 2, 3],
        },
        "storage": [
            {"kind": "input", "bytes": 16},
            {"kind": "param", "bytes": 256, "param": "W"},
            {"kind": "output", "bytes": 16},
            {"kind": "output", "bytes": 16},
        ],
        "arena_bytes": 0,
    }


def reference(x: np.ndarray) -> list[np.ndarray]:
    t = (x.astype(np.int32) + 1).astype(np.int8)
    acc = W.astype(np.int32) @ t.astype(np.int32).reshape(16)
    return [(acc & 0xFF).astype(np.uint8).view(np.int8).reshape(1, 16), t]


def make_bundle(root: Path, program: Program) -> None:
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "k_inc_16.c").write_text(INC)
    (root / "kernels" / "registry.c").write_text(REGISTRY)
    (root / "kernels" / "program.accel").write_bytes(write_programs([program], AccelConfig()))
    (root / "graph.json").write_text(json.dumps(graph(), indent=1))
    (root / "params.bin").write_bytes(write_params([("W", W)]))
    (root / "bundle.cmake").write_text("set(PK_ACCEL sim)\n")

    shutil.copytree(C_RUNTIME, root / "runtime", ignore=shutil.ignore_patterns("tests", "bundle"))
    shutil.copyfile(C_RUNTIME / "bundle" / "CMakeLists.txt", root / "CMakeLists.txt")


@pytest.fixture(scope="module")
def accel_bundle(tmp_path_factory):
    d = tmp_path_factory.mktemp("accel")
    make_bundle(d / "b", gemm_program())
    cmake_build(d / "b", d / "build", f"-DPK_CFLAGS={SANITIZE} -Wall -Wextra -Werror")
    return d / "b", d / "build" / "run_bundle"


@needs_cc
def test_ctest_accel_sim_under_sanitizers(tmp_path):
    build = tmp_path / "build"
    cmake_build(
        C_RUNTIME,
        build,
        "-DCMAKE_BUILD_TYPE=Debug",
        f"-DCMAKE_C_FLAGS={SANITIZE}",
        "-DPK_ACCEL=sim",
    )
    ctest = Path(cmake_exe()).with_name("ctest")
    r = subprocess.run(
        [str(ctest) if ctest.exists() else "ctest", "--output-on-failure", "-R", "accel"],
        cwd=build,
        capture_output=True,
        text=True,
        env={**os.environ, **SAN_ENV},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    ran = set(re.findall(r"Test +#\d+: (\S+) \.+ +Passed", r.stdout))
    assert {"test_accel_backend", "test_accel_program"} <= ran, r.stdout


@needs_cc
def test_run_bundle_accel_outputs(accel_bundle, tmp_path):
    root, exe = accel_bundle
    x = (np.arange(16, dtype=np.int8) * 9 - 60).reshape(1, 16)
    np.save(tmp_path / "x.npy", x)
    r = run(exe, root, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert "accel: sim\n" in r.stderr
    for name, want in zip(["y", "t"], reference(x), strict=True):
        np.testing.assert_array_equal(np.load(tmp_path / "out" / f"{name}.npy"), want)


@needs_cc
def test_run_bundle_accel_profile(accel_bundle, tmp_path):
    root, exe = accel_bundle
    prof = tmp_path / "profile.json"
    r = run(exe, root, "--seed", 3, "--repeat", 3, "--profile-json", prof)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line.startswith("k_")}
    assert rows["k_1_accel_dense"].split()[-1] == "accel" and rows["k_inc_16"].split()[-1] == "cpu"
    doc = json.loads(prof.read_text())
    assert doc["version"] == 1 and doc["device"] == "sim"
    kernels = {k["func"]: k for k in doc["kernels"]}
    assert "accel" not in kernels["k_inc_16"]
    a = kernels["k_1_accel_dense"]["accel"]
    # one run: 7 instructions; one tile each of uops (4 B), inp (16 B) and wgt (256 B) in,
    # 16 int8 out; 256 multiply-accumulates
    assert a["insns"] == 7 and a["macs"] == 256
    assert a["load_bytes"] == 4 + 16 + 256 and a["store_bytes"] == 16
    assert a["cycles"] > 0 and 0 < a["gemm_utilisation"] <= 1
    assert a["gemm_utilisation"] == pytest.approx(a["gemm_cycles"] / a["cycles"], abs=1e-6)
    assert all(a[f"{m}_busy"] > 0 for m in ("load", "compute", "store"))
    line = next(s for s in r.stdout.splitlines() if s.startswith("accel k_1_accel_dense: "))
    assert f"{a['cycles']} cycles" in line and "276 bytes loaded, 16 stored" in line
    # the node's time is the device's at the file's 100 MHz, plus the host's copies
    assert kernels["k_1_accel_dense"]["median_ms"] >= a["cycles"] / 1e5


@needs_cc
def test_run_bundle_accel_bad_program(tmp_path):
    """A STORE running past y (16 bytes) is refused at load, naming program, node, byte."""
    p = gemm_program()
    p.insns[5]["dram_base"] = 8
    make_bundle(tmp_path / "b", p)
    cmake_build(tmp_path / "b", tmp_path / "build")
    r = run(tmp_path / "build" / "run_bundle", tmp_path / "b", "--seed", 1)
    assert r.returncode != 0
    assert (
        "kernels/program.accel: program 'k_1_accel_dense' instruction 5: STORE reaches byte 24 "
        "of argument 2, which has 16 bytes (graph.json nodes[3] 'fc')" in r.stderr
    ), r.stderr
