"""bench/ab_kernels.py: the kernels that differ between two bundles, each called in turn
with its counterpart in one program. The benchmark is run by hand; this checks that it
reads the signatures, compiles both sides of a changed kernel and times them, on a real
bundle of the example model."""

from __future__ import annotations

import shutil
from pathlib import Path

from packager.boards import load_board
from packager.package import package

from .helpers import bench_module

ROOT = Path(__file__).resolve().parent.parent


def test_signatures_give_each_kernels_arguments_and_their_sizes(tmp_path):
    mod = bench_module("ab_kernels")
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "registry.c").write_text(
        "const pk_kernel_entry pk_kernel_table[] = {\n"
        '    {"k_0_conv", k_0_conv, "float32[1,3,4,4] int8[2,3] int32[] uint8[1,2,4,4]"},\n'
        "    {0, 0, 0}\n};\n"
    )
    assert mod.signatures(str(tmp_path)) == {
        "k_0_conv": [("float32", 48), ("int8", 6), ("int32", 1), ("uint8", 32)]
    }


def test_a_changed_kernel_is_timed_against_its_old_self(tmp_path, capsys):
    mod = bench_module("ab_kernels")
    a = tmp_path / "a"
    package(str(ROOT / "examples" / "tiny_cnn.onnx"), load_board("host"), str(a))
    b = tmp_path / "b"
    shutil.copytree(a, b)
    (first,) = sorted((b / "kernels").glob("k_0_*.c"))
    first.write_text(first.read_text() + "/* B's copy */\n")  # differs, times the same
    assert mod.main([str(a), str(b), "--calls", "20"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["kernel", "A", "min", "B"]
    row = lines[1].split()
    assert row[0] == first.stem and len(row) == 7
    a_min, b_min, ratio = map(float, row[1:4])
    assert 0 < a_min and 0 < b_min
    # the ratio is of the unrounded minima: it agrees with the printed ones (4 decimals of
    # a millisecond: 0.0047 for a 4.7 us kernel) within their rounding and its own
    slack = 5e-4 + ratio * 5e-5 * (1 / a_min + 1 / b_min)
    assert abs(ratio - b_min / a_min) <= slack, (a_min, b_min, ratio)
    assert lines[2].startswith("sum of 1 kernels")

    assert mod.main([str(a), str(a)]) == 0
    assert capsys.readouterr().out == "no kernel differs between the bundles\n"


def test_every_argument_is_64_byte_aligned_as_the_runtime_places_tensors(tmp_path):
    """malloc's 16-byte blocks put half of a kernel's 32-byte vectors across two cache
    lines (a stride-2 3x3 conv of ResNet-18 timed 1.25x slower so): the program aligns
    each argument as the runtime aligns every tensor. Here both sides' kernels fail the
    warm-up call (exit 1) when an argument is not 64-byte aligned."""
    import subprocess

    mod = bench_module("ab_kernels")
    args = [("float32", 10), ("int8", 3), ("int32", 1), ("uint8", 77)]
    (tmp_path / "driver.c").write_text(mod.driver_source(args, args[:2], 3))
    check = """#include <stdint.h>
static int32_t misaligned(void* const* args, int n) {
    for (int i = 0; i < n; i++)
        if ((uintptr_t)args[i] % 64) return 1;
    return 0;
}
int32_t pk_ab_a(void* const* args) { return misaligned(args, 4); }
int32_t pk_ab_b(void* const* args) { return misaligned(args, 2); }
"""
    (tmp_path / "check.c").write_text(check)
    exe = tmp_path / "ab"
    subprocess.run(
        ["cc", "-O1", str(tmp_path / "driver.c"), str(tmp_path / "check.c"), "-o", str(exe)],
        check=True,
    )
    r = subprocess.run([str(exe)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(r.stdout.split()) == 4  # the four times
