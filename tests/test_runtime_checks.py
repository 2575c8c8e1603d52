"""run_bundle on a real packaged bundle (examples/tiny_cnn.onnx, built with ASAN + UBSAN)
that was tampered with: kernel functions swapped in graph.json, the kernel table edited,
FIFOs and directories where files belong, a too-long output directory, bad tolerances and
misaligned .npy data. Each must end in exit code 2 and a message, never in a signal or a
sanitizer report."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.test_c_runtime import SANITIZE, cmake_build, have_cc, run

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    if not have_cc():
        pytest.skip("no C compiler")
    from packager.cli import main

    d = tmp_path_factory.mktemp("tiny")
    assert main(["build", str(EXAMPLE), "--board", "host", "-o", str(d / "b")]) == 0
    cmake_build(d / "b", d / "build", f"-DPK_CFLAGS={SANITIZE}")
    exe = d / "build" / "run_bundle"
    assert run(exe, d / "b", "--selftest").returncode == 0
    return d / "b", exe


def copy_bundle(root: Path, dst: Path) -> Path:
    shutil.copytree(root, dst, ignore=shutil.ignore_patterns("build"))
    return dst


def kernel_nodes(gj: dict) -> dict[str, int]:
    return {n["func"]: i for i, n in enumerate(gj["nodes"]) if n["op"] == "kernel"}


def check_refused(r: subprocess.CompletedProcess, *messages: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    for m in messages:
        assert m in r.stderr, r.stderr


@pytest.mark.parametrize(
    "a, b, message",
    [
        # same argument count, different shapes: max pool would read a [1,10] buffer as
        # [1,1,32,32,8]
        (
            "k_1_max_pool_nchwc",
            "k_7_softmax",
            "func 'k_7_softmax' argument 0 (input 0): "
            "expected float32[1,10], got float32[1,1,32,32,8]",
        ),
        (
            "k_0_conv2d_nchwc_relu",
            "k_1_max_pool_nchwc",
            "func 'k_1_max_pool_nchwc' takes 2 arguments, the node passes 4 (3 inputs, 1 outputs)",
        ),
    ],
)
def test_swapped_funcs_refused(tiny, tmp_path, a, b, message):
    root, exe = tiny
    bad = copy_bundle(root, tmp_path / "b")
    gj = json.loads((bad / "graph.json").read_text())
    nodes = kernel_nodes(gj)
    gj["nodes"][nodes[a]]["func"], gj["nodes"][nodes[b]]["func"] = b, a
    (bad / "graph.json").write_text(json.dumps(gj))
    check_refused(run(exe, bad, "--selftest"), "cannot load bundle", message)


def test_registry_edits_refused(tiny, tmp_path):
    """kernels/registry.c edited, the bundle rebuilt with CMake: refused at load."""
    root, _ = tiny
    bad = copy_bundle(root, tmp_path / "b")
    registry = bad / "kernels" / "registry.c"
    good = registry.read_text()
    assert "    {0, 0, 0},\n};\nconst int32_t pk_kernel_count = 8;" in good
    # the classifier's weight is packed by the machine's vector width: read its form
    gemm = re.search(
        r'\{"k_6_gemm", k_6_gemm, "float32\[1,8\] (\S+) float32\[10\] float32\[1,10\]"\}', good
    )
    assert gemm, good
    gemm, weight = gemm.group(0), gemm.group(1)
    other = weight.replace("[", "[3,", 1)  # one more dimension: never the real form
    cases = [
        (
            "pk_kernel_count = 8",
            "pk_kernel_count = 9",
            "pk_kernel_count is 9, but the {0, 0, 0} sentinel is entry 8",
        ),
        (
            "pk_kernel_count = 8",
            "pk_kernel_count = 7",
            "entry 7 ('k_7_softmax') should be the {0, 0, 0} sentinel",
        ),
        (
            '{"k_6_gemm", k_6_gemm',
            '{"k_5_layout_transform_reshape", k_6_gemm',
            "entries 5 and 6 share name 'k_5_layout_transform_reshape'",
        ),
        (
            gemm,
            gemm.replace(weight, other),
            f"func 'k_6_gemm' argument 1 (input 1): expected {other}, got {weight}",
        ),
        (gemm, gemm.replace(" float32[10] ", " "), "func 'k_6_gemm' takes 3 arguments"),
    ]
    for old, new, message in cases:
        registry.write_text(good.replace(old, new))
        cmake_build(bad, tmp_path / "build", f"-DPK_CFLAGS={SANITIZE}")
        r = run(tmp_path / "build" / "run_bundle", bad, "--selftest")
        check_refused(r, "cannot load bundle", message)
    # Unsorted but consistent: found by a linear scan, and the bundle runs.
    lines = good.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.startswith('    {"k_0_'))
    lines[first], lines[first + 1] = lines[first + 1], lines[first]
    registry.write_text("".join(lines))
    cmake_build(bad, tmp_path / "build", f"-DPK_CFLAGS={SANITIZE}")
    r = run(tmp_path / "build" / "run_bundle", bad, "--selftest")
    assert r.returncode == 0 and "selftest: PASS" in r.stdout, r.stdout + r.stderr


VICTIMS = [
    "graph.json",
    "params.bin",
    "selftest/input_0.npy",
    "selftest/output_0.npy",
    "selftest/tolerance.json",
]


@pytest.mark.parametrize("kind", ["fifo", "directory"])
@pytest.mark.parametrize("victim", VICTIMS)
def test_non_regular_files_refused(tiny, tmp_path, victim, kind):
    root, exe = tiny
    bad = copy_bundle(root, tmp_path / "b")
    path = bad / victim
    path.unlink(missing_ok=True)
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    # A FIFO with no writer: reading it would block forever.
    r = subprocess.run([exe, bad, "--selftest"], capture_output=True, text=True, timeout=60)
    check_refused(
        r, f"{victim}: not a regular file (a {'FIFO' if kind == 'fifo' else 'directory'})"
    )


def test_input_fifo_refused(tiny, tmp_path):
    root, exe = tiny
    os.mkfifo(tmp_path / "x.npy")
    r = subprocess.run(
        [exe, root, "--input", f"input={tmp_path / 'x.npy'}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    check_refused(r, "x.npy: not a regular file (a FIFO)")


def test_long_output_dir(tiny, tmp_path):
    """A 4,095-character output directory: the directories are made, the file name is too
    long for the system, which is reported (no fixed-size buffer in run_bundle)."""
    root, exe = tiny
    parts, length = [], len(str(tmp_path))
    while length + 201 <= 4095:
        parts.append("d" * 200)
        length += 201
    parts.append("e" * (4095 - length - 1))
    out = tmp_path.joinpath(*parts)
    assert len(str(out)) == 4095
    r = run(exe, root, "--selftest", "--output-dir", out)
    check_refused(r, "File name too long")


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"rtol": 1e999}', "rtol: expected a finite number in [0, 1e+06], got 1e999"),
        ('{"atol": -0.5}', "atol: expected a finite number in [0, 1e+06], got -0.5"),
        ('{"rtol": "0.1"}', 'rtol: expected a finite number in [0, 1e+06], got "0.1"'),
        ('{"atol": 1e7}', "atol: expected a finite number in [0, 1e+06], got 1e7"),
        ('{"rtol": NaN}', "tolerance.json"),
        ("[0.1, 0.2]", 'expected an object {"rtol": r, "atol": a}'),
    ],
)
def test_bad_tolerance_refused(tiny, tmp_path, text, message):
    root, exe = tiny
    bad = copy_bundle(root, tmp_path / "b")
    (bad / "selftest" / "tolerance.json").write_text(text)
    check_refused(run(exe, bad, "--selftest"), message)
    assert "selftest: PASS" not in run(exe, bad, "--selftest").stdout


def test_good_tolerance_and_flags(tiny, tmp_path):
    root, exe = tiny
    bad = copy_bundle(root, tmp_path / "b")
    (bad / "selftest" / "tolerance.json").write_text('{"rtol": 0.01, "atol": 0}')
    r = run(exe, bad, "--selftest")
    assert r.returncode == 0 and "rtol 0.01 atol 0" in r.stdout, r.stdout + r.stderr
    check_refused(run(exe, bad, "--selftest", "--atol", "inf"), "non-negative number")


def save_npy_misaligned(path: Path, a: np.ndarray, pad: int) -> None:
    """An .npy (format 1.0) whose data starts `pad` bytes past a multiple of 64 (numpy
    pads to one), so not at a multiple of the dtype's size."""
    header = f"{{'descr': '{a.dtype.str}', 'fortran_order': False, 'shape': {a.shape}, }}"
    header += " " * ((pad - 10 - len(header) - 1) % 64) + "\n"
    path.write_bytes(
        b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + a.tobytes()
    )


@pytest.mark.parametrize("pad", [1, 2, 3, 5])
def test_misaligned_npy(tiny, tmp_path, pad):
    root, exe = tiny
    bad = copy_bundle(root, tmp_path / "b")
    for name in ("input_0.npy", "output_0.npy"):
        a = np.load(bad / "selftest" / name)
        save_npy_misaligned(bad / "selftest" / name, a, pad)
        assert len((bad / "selftest" / name).read_bytes()) - a.nbytes == 128 + pad
        np.testing.assert_array_equal(np.load(bad / "selftest" / name), a)
    r = run(exe, bad, "--selftest")
    assert r.returncode == 0 and "selftest: PASS" in r.stdout, r.stdout + r.stderr


def test_registry_source_lists_signatures_sorted():
    from packager.bundle import registry_source
    from packager.lowering import Kernel

    kernels = [
        Kernel("k_1_relu", "", "relu", ("float32[2,3]", "float32[2,3]")),
        Kernel("k_0_add", "", "add", ("float32[2,3]", "float32[]", "float32[2,3]")),
    ]
    src = registry_source(kernels)
    assert src == registry_source(kernels[::-1])  # deterministic, whatever the order
    assert (
        "const pk_kernel_entry pk_kernel_table[] = {\n"
        '    {"k_0_add", k_0_add, "float32[2,3] float32[] float32[2,3]"},\n'
        '    {"k_1_relu", k_1_relu, "float32[2,3] float32[2,3]"},\n'
        "    {0, 0, 0},\n};\nconst int32_t pk_kernel_count = 2;\n"
    ) in src
    assert "{0, 0, 0},\n};\nconst int32_t pk_kernel_count = 0;" in registry_source([])


@pytest.mark.parametrize(
    "var, value, message",
    [
        ("PACKAGER_NUM_THREADS", "abc", "PACKAGER_NUM_THREADS='abc': expected a number of threads"),
        ("PACKAGER_NUM_THREADS", "0", "PACKAGER_NUM_THREADS='0'"),
        ("PACKAGER_NUM_THREADS", "-3", "PACKAGER_NUM_THREADS='-3'"),
        ("PACKAGER_NUM_THREADS", "4x", "PACKAGER_NUM_THREADS='4x'"),
        ("PACKAGER_PIN_CORES", "1,,2", "PACKAGER_PIN_CORES='1,,2': expected a comma-separated"),
        ("PACKAGER_PIN_CORES", "99999", "PACKAGER_PIN_CORES='99999': core 99999 is not on this"),
    ],
)
def test_bad_thread_env_refused(tiny, monkeypatch, var, value, message):
    """A typo in the runtime's environment is an error, not a silent default."""
    root, exe = tiny
    monkeypatch.setenv(var, value)
    check_refused(run(exe, root, "--selftest"), "cannot load bundle", message)


def test_fortran_order_input(tiny, tmp_path):
    """A Fortran-ordered .npy (np.asfortranarray, then np.save) gives the same outputs as the
    same values in C order."""
    root, exe = tiny
    x = np.load(root / "selftest" / "input_0.npy")
    x = np.random.default_rng(0).standard_normal(x.shape).astype(x.dtype)
    np.save(tmp_path / "c.npy", x)
    np.save(tmp_path / "f.npy", np.asfortranarray(x))
    assert b"'fortran_order': True" in (tmp_path / "f.npy").read_bytes()[:128]
    name = json.loads((root / "manifest.json").read_text())["inputs"][0]["name"]
    for order in "cf":
        r = run(
            exe,
            root,
            "--input",
            f"{name}={tmp_path / order}.npy",
            "--output-dir",
            tmp_path / f"out_{order}",
        )
        assert r.returncode == 0, r.stderr
    outs = sorted((tmp_path / "out_c").iterdir())
    assert outs
    for out in outs:
        np.testing.assert_array_equal(np.load(out), np.load(tmp_path / "out_f" / out.name))
