"""The C runtime: its ctest suite under ASAN+UBSAN, params.bin in Python, and run_bundle on a
tiny hand-made bundle built with c_runtime/bundle/CMakeLists.txt."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from packager.names import safe_name
from packager.params_file import DTYPE_CODES, read_params, write_params

ROOT = Path(__file__).resolve().parent.parent
C_RUNTIME = ROOT / "c_runtime"
SANITIZE = "-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
# Sanitizer reports must not pass for the exit codes the tests expect.
SAN_ENV = {"ASAN_OPTIONS": "exitcode=97", "UBSAN_OPTIONS": "exitcode=98:print_stacktrace=1"}


def cmake_exe() -> str:
    venv = Path(sys.executable).with_name("cmake")
    found = str(venv) if venv.exists() else shutil.which("cmake")
    if not found:
        pytest.skip("cmake not available")
    return found


def have_cc() -> bool:
    return shutil.which(os.environ.get("CC", "cc")) is not None


needs_cc = pytest.mark.skipif(not have_cc(), reason="no C compiler")


def cmake_build(src: Path, build: Path, *defs: str) -> None:
    cmake = cmake_exe()
    subprocess.run([cmake, "-S", src, "-B", build, *defs], check=True, capture_output=True)
    r = subprocess.run([cmake, "--build", build, "-j4"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


# ---- ctest -------------------------------------------------------------------------------


@needs_cc
def test_ctest_under_sanitizers(tmp_path):
    build = tmp_path / "build"
    cmake_build(C_RUNTIME, build, "-DCMAKE_BUILD_TYPE=Debug", f"-DCMAKE_C_FLAGS={SANITIZE}")
    ctest = Path(cmake_exe()).with_name("ctest")
    r = subprocess.run(
        [str(ctest) if ctest.exists() else "ctest", "--output-on-failure"],
        cwd=build,
        capture_output=True,
        text=True,
        env={**os.environ, **SAN_ENV},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # Every test program in c_runtime/tests is registered in CMakeLists.txt and passed.
    ran = set(re.findall(r"Test +#\d+: (\S+) \.+ +Passed", r.stdout))
    # test_opencl needs -DPK_OPENCL=ON (tests/test_opencl_runtime.py builds it),
    # test_accel_backend -DPK_ACCEL=sim (tests/test_accel_runtime.py).
    programs = {p.stem for p in (C_RUNTIME / "tests").glob("test_*.c")} - {
        "test_kernels",
        "test_opencl",
        "test_accel_backend",
    }
    assert programs >= {"test_graph", "test_npy", "test_json", "test_scratch"}
    assert ran == programs, r.stdout


# ---- params.bin ---------------------------------------------------------------------------


def sample_tensors():
    return [
        ("conv1.weight", np.arange(24, dtype=np.float32).reshape(2, 3, 4)),
        ("b", np.array([1.5, -2.0], dtype=">f8")),  # big-endian in, little-endian on disk
        ("idx", np.arange(6, dtype=np.int64).reshape(2, 3).T),  # not C-contiguous
        ("scalar", np.array(7, dtype=np.int8)),
        ("empty", np.zeros((0, 5), dtype=np.uint16)),
        ("mask", np.array([True, False, True])),
        ("caf\u00e9/x:0", np.array([1, 2], dtype=np.uint64)),
    ]


def test_params_round_trip():
    tensors = sample_tensors()
    data = write_params(tensors)
    assert data == write_params(tensors)  # deterministic
    assert data[:8] == b"PKPARAMS" and int.from_bytes(data[16:24], "little") == len(data)
    back = read_params(data)
    assert list(back) == [n for n, _ in tensors]
    for name, a in tensors:
        assert back[name].dtype == a.dtype.newbyteorder("=")
        assert back[name].shape == a.shape
        np.testing.assert_array_equal(back[name], a)
    assert read_params(write_params([])) == {}
    assert DTYPE_CODES["float32"] == 1 and DTYPE_CODES["bool"] == 11


def test_params_layout_is_aligned():
    data = write_params(sample_tensors())
    pos = 24
    for _ in range(len(sample_tensors())):
        name_len = int.from_bytes(data[pos : pos + 2], "little")
        ndim = data[pos + 3 + name_len]
        pos += 4 + name_len + 8 * ndim
        offset = int.from_bytes(data[pos : pos + 8], "little")
        assert offset % 64 == 0
        pos += 16


def _patch(data: bytes, at: int, value: int, width: int) -> bytes:
    return data[:at] + value.to_bytes(width, "little") + data[at + width :]


ONE = write_params([("w", np.array([0.5, 0.5, -10, 0.5], dtype=np.float32))])


@pytest.mark.parametrize(
    "data, message",
    [
        (ONE[:10], "shorter than the header"),
        (b"X" + ONE[1:], "bad magic"),
        (_patch(ONE, 8, 2, 4), "version 2"),
        (_patch(ONE, 16, 81, 8), "header says 81 bytes"),
        (ONE[:-1], "header says 80 bytes, file has 79"),
        (_patch(ONE, 12, 1000, 4), "does not fit"),
        (_patch(ONE, 12, 2, 4), "tensor 1 '': unknown dtype code 0"),
        (_patch(ONE, 24, 60000, 2), "truncated in tensor 0 name"),
        (_patch(ONE, 27, 99, 1), "unknown dtype code 99"),
        (_patch(ONE, 28, 40, 1), "ndim 40 over limit"),
        (_patch(ONE, 29, 5, 8), "data size 16, shape needs 20"),
        (_patch(ONE, 29, 2**64 - 1, 8), "negative dim"),
        (_patch(ONE, 37, 65, 8), "misaligned"),
        (_patch(ONE, 37, 128, 8), "past the end"),
        (_patch(ONE, 37, 0, 8), "overlaps the table"),
        (_patch(ONE, 26, 0xFF, 1), "not UTF-8"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_params_errors(data, message):
    with pytest.raises(ValueError, match=message):
        read_params(data)


def test_params_truncations_and_flips():
    data = write_params(sample_tensors())
    for n in range(len(data)):
        with pytest.raises(ValueError):
            read_params(data[:n])
    rng = np.random.default_rng(0)
    for _ in range(2000):
        b = bytearray(data)
        for _ in range(rng.integers(1, 4)):
            b[rng.integers(len(b))] ^= 1 << int(rng.integers(8))
        try:
            read_params(bytes(b))
        except ValueError:
            pass


def test_params_writer_errors():
    with pytest.raises(ValueError, match="appears twice"):
        write_params([("a", np.zeros(1)), ("a", np.zeros(2))])
    with pytest.raises(ValueError, match="unsupported dtype"):
        write_params([("c", np.zeros(2, dtype=np.complex64))])
    with pytest.raises(ValueError, match="at most 32"):
        write_params([("d", np.zeros((1,) * 33))])


# ---- a hand-made bundle -------------------------------------------------------------------

KERNELS = {
    # Shapes are baked in, as in generated kernels: [2, 3] float32.
    "k_add_6": """#include "pk_kernel.h"
int32_t k_add_6(void* const* args) {
    const float* a = args[0];
    const float* b = args[1];
    float* y = args[2];
    for (int i = 0; i < 6; i++) y[i] = a[i] + b[i];
    return 0;
}
""",
    "k_relu_6": """#include "pk_kernel.h"
typedef struct { const float* x; float* y; } ctx_t;
static void body(void* ctx, int64_t i) {
    ctx_t* c = ctx;
    c->y[i] = c->x[i] > 0 ? c->x[i] : 0;
}
int32_t k_relu_6(void* const* args) {
    ctx_t c = {args[0], args[1]};
    pk_parallel_for(body, &c, 6);
    return 0;
}
""",
}
REGISTRY = """#include "pk_kernel.h"
int32_t k_add_6(void* const* args);
int32_t k_relu_6(void* const* args);
const pk_kernel_entry pk_kernel_table[] = {
    {"k_add_6", k_add_6, "float32[2,3] float32[2,3] float32[2,3]"},
    {"k_relu_6", k_relu_6, "float32[2,3] float32[2,3]"},
    {0, 0, 0},
};
const int32_t pk_kernel_count = 2;
"""
BIAS = np.array([[0.5, -1, 2], [-3, 0, 1]], dtype=np.float32)


def tiny_graph() -> dict:
    """x[2,3] f32, idx[3] i64 (also an output), bias param; y/out = relu(x + bias)."""
    return {
        "format": "packager-graph",
        "version": 1,
        "nodes": [
            {"op": "input", "name": "x", "inputs": []},
            {"op": "input", "name": "idx", "inputs": []},
            {"op": "param", "name": "bias", "inputs": []},
            {
                "op": "kernel",
                "name": "add",
                "func": "k_add_6",
                "inputs": [[0, 0], [2, 0]],
                "num_outputs": 1,
            },
            {
                "op": "kernel",
                "name": "relu",
                "func": "k_relu_6",
                "inputs": [[3, 0]],
                "num_outputs": 1,
            },
        ],
        "arg_nodes": [0, 1, 2],
        "node_row_ptr": [0, 1, 2, 3, 4, 5],
        "heads": [[4, 0], [3, 0], [1, 0]],
        "outputs": ["y/out", "sum:0", "idx_copy"],
        "attrs": {
            "shape": [[2, 3], [3], [2, 3], [2, 3], [2, 3]],
            "dtype": ["float32", "int64", "float32", "float32", "float32"],
            "storage_id": [0, 1, 2, 3, 4],
        },
        "storage": [
            {"kind": "input", "bytes": 24},
            {"kind": "input", "bytes": 24},
            {"kind": "param", "bytes": 24, "param": "bias"},
            {"kind": "arena", "bytes": 24, "offset": 0},
            {"kind": "output", "bytes": 24},
        ],
        "arena_bytes": 64,
    }


def reference(x, idx):
    s = x + BIAS
    return [np.maximum(s, 0), s, idx]


def make_bundle(root: Path) -> None:
    root.mkdir(parents=True)
    (root / "kernels").mkdir()
    for name, src in KERNELS.items():
        (root / "kernels" / f"{name}.c").write_text(src)
    (root / "kernels" / "registry.c").write_text(REGISTRY)
    (root / "graph.json").write_text(json.dumps(tiny_graph(), indent=1))
    (root / "params.bin").write_bytes(write_params([("bias", BIAS)]))
    shutil.copytree(C_RUNTIME, root / "runtime", ignore=shutil.ignore_patterns("tests", "bundle"))
    shutil.copyfile(C_RUNTIME / "bundle" / "CMakeLists.txt", root / "CMakeLists.txt")
    (root / "selftest").mkdir()
    x = np.array([[1, 2, -3], [4, -5, 6]], dtype=np.float32)
    idx = np.array([7, 8, 9], dtype=np.int64)
    np.save(root / "selftest" / "input_0.npy", x)
    np.save(root / "selftest" / "input_1.npy", idx)
    for i, a in enumerate(reference(x, idx)):
        np.save(root / "selftest" / f"output_{i}.npy", a)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    if not have_cc():
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("bundle")
    make_bundle(d / "b")
    cmake_build(d / "b", d / "build", f"-DPK_CFLAGS={SANITIZE} -Wall -Wextra -Werror")
    return d / "b", d / "build" / "run_bundle"


def run(exe, *args):
    r = subprocess.run(
        [str(exe), *map(str, args)], capture_output=True, text=True, env={**os.environ, **SAN_ENV}
    )
    assert "runtime error" not in r.stderr and "Sanitizer" not in r.stderr, r.stderr
    return r


def feeds(tmp: Path, x=None, idx=None) -> list[str]:
    x = np.array([[1, -2, 3], [0.25, 5, -6]], dtype=np.float32) if x is None else x
    idx = np.array([1, 2, 3], dtype=np.int64) if idx is None else idx
    np.save(tmp / "x.npy", x)
    np.save(tmp / "idx.npy", idx)
    return ["--input", f"x={tmp / 'x.npy'}", "--input", f"idx={tmp / 'idx.npy'}"]


def test_run_bundle_outputs(bundle, tmp_path):
    root, exe = bundle
    out = tmp_path / "out" / "nested"
    r = run(exe, root, *feeds(tmp_path), "--output-dir", out)
    assert r.returncode == 0, r.stderr
    x, idx = np.load(tmp_path / "x.npy"), np.load(tmp_path / "idx.npy")
    for name, want in zip(tiny_graph()["outputs"], reference(x, idx), strict=True):
        got = np.load(out / f"{safe_name(name)}.npy")
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert sorted(p.name for p in out.iterdir()) == ["idx_copy.npy", "sum_0.npy", "y_out.npy"]


def test_run_bundle_repeat(bundle, tmp_path):
    root, exe = bundle
    r = run(exe, root, *feeds(tmp_path), "--repeat", 5)
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    assert stats["repeat"] == 5
    assert 0 <= stats["min_ms"] <= stats["median_ms"] and stats["mean_ms"] >= stats["min_ms"]


def test_run_bundle_fills_missing_inputs(bundle, tmp_path):
    """Under the sanitizers: filled inputs of two dtypes, the per-output summary, --top."""
    root, exe = bundle
    r = run(exe, root, "--seed", 11, "--top", 2, "--output-dir", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "input 'x' float32[2, 3]: no --input, filled with random values (seed 11)" in r.stderr
    idx = np.load(tmp_path / "idx_copy.npy")  # the filled idx, passed through
    assert idx.dtype == np.int64 and ((idx >= 0) & (idx < 10)).all()
    s = np.load(tmp_path / "sum_0.npy")
    x = s - BIAS
    assert ((x >= -1) & (x < 1)).all() and len(np.unique(x)) == x.size
    lines = r.stdout.splitlines()
    assert lines[2] == (
        f"output 2 'idx_copy': int64[3] min {idx.min()} max {idx.max()} mean {idx.mean():.6g} "
        f"top 2: " + " ".join(f"{i}={idx[i]}" for i in np.argsort(-idx, kind="stable")[:2])
    )
    assert lines[1].startswith("output 1 'sum:0': float32[2, 3] min ") and "top" not in lines[1]
    r = run(exe, root, "--fill", "zeros")
    assert r.returncode == 0, r.stderr
    assert "output 2 'idx_copy': int64[3] min 0 max 0 mean 0" in r.stdout


def test_run_bundle_selftest(bundle, tmp_path):
    root, exe = bundle
    r = run(exe, root, "--selftest")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1] == "selftest: PASS"
    r = run(exe, root, "--selftest", "--repeat", 3)
    assert r.returncode == 0 and "selftest: PASS" in r.stdout
    assert json.loads(r.stdout.strip().splitlines()[-1])["repeat"] == 3


def test_run_bundle_selftest_mismatch(bundle, tmp_path):
    root, exe = bundle
    bad = tmp_path / "b"
    shutil.copytree(root, bad)
    want = np.load(bad / "selftest" / "output_0.npy")
    np.save(bad / "selftest" / "output_0.npy", want + 0.01)
    r = run(exe, bad, "--selftest")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "selftest: FAIL" in r.stdout and "output 0 'y/out'" in r.stdout
    assert run(exe, bad, "--selftest", "--atol", "0.02").returncode == 0
    (bad / "selftest" / "tolerance.json").write_text('{"rtol": 0, "atol": 0.05}')
    assert run(exe, bad, "--selftest").returncode == 0
    np.save(bad / "selftest" / "output_2.npy", np.array([7, 8, 10]))  # ints compare exactly
    assert run(exe, bad, "--selftest").returncode == 3
    np.save(bad / "selftest" / "output_2.npy", np.array([7, 8, 9], dtype=np.int32))
    r = run(exe, bad, "--selftest")
    assert r.returncode == 3 and "expected int32[3], got int64[3]" in r.stdout


@pytest.mark.parametrize(
    "x, idx, message",
    [
        (np.zeros((3, 2), np.float32), None, "input 'x'"),
        (np.zeros((2, 3), np.float64), None, "expected float32[2, 3], got float64[2, 3]"),
        (None, np.zeros(3, np.int32), "expected int64[3], got int32[3]"),
        (np.zeros((2, 3), ">f4"), None, "big-endian"),
    ],
)
def test_run_bundle_bad_inputs(bundle, tmp_path, x, idx, message):
    root, exe = bundle
    r = run(exe, root, *feeds(tmp_path, x, idx))
    assert r.returncode == 2, r.stderr
    assert message in r.stderr


def test_run_bundle_usage_errors(bundle, tmp_path):
    root, exe = bundle
    args = feeds(tmp_path)
    r = run(exe, root, args[0], args[1])
    assert r.returncode == 0 and "input 'idx' int64[3]: no --input, filled with random" in r.stderr
    r = run(exe, root, *args, "--input", f"nope={tmp_path / 'x.npy'}")
    assert r.returncode == 2 and "no input 'nope'" in r.stderr
    r = run(exe, root, *args, *args[:2])
    assert r.returncode == 2 and "--input x given twice" in r.stderr
    r = run(exe, root, *args[2:], "--input", f"x={tmp_path / 'missing.npy'}")
    assert r.returncode == 2 and "missing.npy" in r.stderr
    assert run(exe, root, *args, "--repeat", "0").returncode == 2
    assert run(exe, root, *args, "--bogus").returncode == 2
    assert run(exe).returncode == 2
    r = run(exe, "--help")
    assert r.returncode == 0 and "--selftest" in r.stdout and "Exit status" in r.stdout


@pytest.mark.parametrize("victim", ["graph.json", "params.bin"])
def test_run_bundle_corrupt_bundle(bundle, tmp_path, victim):
    root, exe = bundle
    bad = tmp_path / "b"
    shutil.copytree(root, bad)
    data = (bad / victim).read_bytes()
    rng = np.random.default_rng(1)
    for cut in (0, len(data) // 2, len(data) - 1):
        (bad / victim).write_bytes(data[:cut])
        r = run(exe, bad, "--selftest")
        assert r.returncode == 2 and "cannot load bundle" in r.stderr and victim in r.stderr
    for _ in range(20):  # flips: load fails with 2, or loads and runs; never crashes
        b = bytearray(data)
        b[rng.integers(len(b))] ^= 1 << int(rng.integers(8))
        (bad / victim).write_bytes(bytes(b))
        assert run(exe, bad, "--selftest").returncode in (0, 2, 3)
    (bad / victim).unlink()
    assert run(exe, bad, "--selftest").returncode == 2


@needs_cc
def test_bundle_add_subdirectory(tmp_path):
    """An application links the bundle through add_subdirectory and the public API."""
    make_bundle(tmp_path / "app" / "bundle")
    (tmp_path / "app" / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.13)\nproject(app C)\nadd_subdirectory(bundle)\n"
        "add_executable(app main.c)\ntarget_link_libraries(app PRIVATE pk_bundle)\n"
    )
    (tmp_path / "app" / "main.c").write_text(
        """#include "pk_runtime.h"
#include <stdio.h>
int main(int argc, char** argv) {
    pk_graph* g;
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6];
    long long idx[3] = {0, 1, 2};
    if (argc < 2 || pk_graph_load_dir(argv[1], &g) != PK_OK) return 1;
    if (pk_graph_set_input(g, 0, x, sizeof x) || pk_graph_set_input(g, 1, idx, sizeof idx))
        return 2;
    if (pk_graph_run(g) || pk_graph_get_output(g, 0, y, sizeof y)) return 3;
    printf("%g %g\\n", y[0], y[3]);
    pk_graph_destroy(g);
    return 0;
}
"""
    )
    cmake_build(tmp_path / "app", tmp_path / "build")
    r = subprocess.run(
        [tmp_path / "build" / "app", tmp_path / "app" / "bundle"], capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout.split() == ["1.5", "1"], r.stdout + r.stderr
