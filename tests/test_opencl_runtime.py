"""The runtime's OpenCL backend on this machine's OpenCL device (PoCL): its ctest programs
built with -DPK_OPENCL=ON, and a hand-made bundle whose add runs on OpenCL and relu on the
CPU, built with the bundle's CMakeLists.txt and with packager.native; a runtime built
without OpenCL refuses that graph."""

from __future__ import annotations

import ctypes.util
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from packager import native
from packager.runner import cmake_bin
from tests.test_c_runtime import C_RUNTIME, feeds, have_cc, make_bundle, reference, tiny_graph

pytestmark = [
    pytest.mark.skipif(not have_cc(), reason="no C compiler"),
    pytest.mark.skipif(not ctypes.util.find_library("OpenCL"), reason="no OpenCL ICD loader"),
]

PROGRAM = """__kernel void k_add_6(__global float* a_base, const ulong a_off,
                      __global float* b_base, const ulong b_off,
                      __global float* y_base, const ulong y_off) {
    __global float* restrict a = a_base + a_off;
    __global float* restrict b = b_base + b_off;
    __global float* restrict y = y_base + y_off;
    size_t i = get_global_id(0);
    y[i] = a[i] + b[i];
}
"""
CL_REGISTRY = """
const pk_cl_kernel_entry pk_cl_kernel_table[] = {
    {"k_add_6", "float32[2,3] float32[2,3] float32[2,3]", {6, 1, 1}, {3, 1, 1}},
    {0, 0, {0, 0, 0}, {0, 0, 0}},
};
const int32_t pk_cl_kernel_count = 1;
const char pk_cl_program_source[] = %s;
"""


def make_opencl_bundle(root: Path, enable: bool = True) -> Path:
    """The tiny bundle of test_c_runtime with its add on OpenCL."""
    make_bundle(root)
    graph = tiny_graph()
    graph["nodes"][3]["device"] = "opencl"
    (root / "graph.json").write_text(json.dumps(graph, indent=1))
    (root / "kernels" / "program.cl").write_text(PROGRAM)
    registry = root / "kernels" / "registry.c"
    registry.write_text(registry.read_text() + CL_REGISTRY % json.dumps(PROGRAM))
    (root / "bundle.cmake").write_text("set(PK_OPENCL ON)\n" if enable else "")
    return root


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKAGER_CL_CACHE_DIR", str(tmp_path / "clcache"))
    monkeypatch.delenv("PACKAGER_OPENCL_DEVICE", raising=False)


def cmake(*args, cwd=None):
    r = subprocess.run([cmake_bin(), *map(str, args)], capture_output=True, text=True, cwd=cwd)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def test_ctest_with_opencl(tmp_path, env):
    build = tmp_path / "build"
    cmake("-S", C_RUNTIME, "-B", build, "-DPK_OPENCL=ON", "-DCMAKE_BUILD_TYPE=Debug")
    cmake("--build", build, "-j2")
    ctest = Path(cmake_bin()).with_name("ctest")
    r = subprocess.run(
        [str(ctest), "--output-on-failure"], cwd=build, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr
    ran = set(re.findall(r"Test +#\d+: (\S+) \.+ +Passed", r.stdout))
    assert {"test_opencl", "test_opencl_bad_program", "test_graph", "test_registry"} <= ran


def check_bundle_run(root: Path, exe: Path, tmp: Path) -> None:
    out, doc = tmp / "out", tmp / "profile.json"
    r = subprocess.run(
        [exe, root, *feeds(tmp), "--output-dir", out, "--repeat", "3", "--profile-json", doc],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert re.search(r"^opencl device: \S", r.stderr, re.M), r.stderr
    x, idx = np.load(tmp / "x.npy"), np.load(tmp / "idx.npy")
    for name, want in zip(["y_out", "sum_0", "idx_copy"], reference(x, idx), strict=True):
        np.testing.assert_array_equal(np.load(out / f"{name}.npy"), want)
    profile = json.loads(doc.read_text())
    kernels = profile["kernels"]
    assert {n: k["device"] for k in kernels for n in k["nodes"]} == {"add": "opencl", "relu": "cpu"}
    assert all(k["median_ms"] >= 0 for k in kernels)
    assert f"opencl device: {profile['device']}\n" in r.stderr  # the device's name, not "cpu"
    assert list(Path(os.environ["PACKAGER_CL_CACHE_DIR"]).glob("*.bin"))


def test_opencl_bundle_cmake(tmp_path, env):
    root = make_opencl_bundle(tmp_path / "b")
    build = tmp_path / "build"
    cmake("-S", root, "-B", build, "-DPK_CFLAGS=-Wall -Wextra -Werror")
    cmake("--build", build, "-j2")
    check_bundle_run(root, build / "run_bundle", tmp_path)


def test_opencl_bundle_native(tmp_path, env):
    root = make_opencl_bundle(tmp_path / "b")
    check_bundle_run(root, native.build_run_bundle(root), tmp_path)


def test_runtime_without_opencl_refuses_opencl_nodes(tmp_path, env):
    root = make_opencl_bundle(tmp_path / "b", enable=False)
    exe = native.build_run_bundle(root)
    r = subprocess.run([exe, root, *feeds(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert (
        "graph.json: nodes[3] 'add' runs on opencl, but this runtime was built without OpenCL "
        "(PK_OPENCL)" in r.stderr
    )
