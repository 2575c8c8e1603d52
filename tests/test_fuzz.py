"""The libFuzzer harnesses of c_runtime/fuzz/ build (clang, ASAN + UBSAN) and run for a
short while on seeds from real bundles without a crash. bench/fuzz.py runs them for long."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .helpers import bench_module

ROOT = Path(__file__).resolve().parent.parent


def _have_libfuzzer(tmp: Path) -> bool:
    if not shutil.which("clang"):
        return False
    src = tmp / "probe.c"
    src.write_text(
        "#include <stdint.h>\n#include <stddef.h>\n"
        "int LLVMFuzzerTestOneInput(const uint8_t* d, size_t n) { return 0; }\n"
    )
    r = subprocess.run(
        ["clang", "-fsanitize=fuzzer", src, "-o", tmp / "probe"], capture_output=True
    )
    return r.returncode == 0


@pytest.fixture(scope="module")
def fuzzers(tmp_path_factory):
    work = tmp_path_factory.mktemp("fuzz")
    if not _have_libfuzzer(work):
        why = "clang with libFuzzer not installed (scripts/setup.sh installs it)"
        if os.environ.get("CI"):  # scripts/test.sh installed it: its absence is a failure
            pytest.fail(why)
        pytest.skip(why)
    fuzz = bench_module("fuzz")
    kernels = fuzz.make_seeds(work)
    return fuzz, fuzz.build_fuzzers(work / "build", kernels), work


@pytest.mark.slow
@pytest.mark.parametrize("name", ["graph", "params", "npy", "bundle", "accel_program"])
def test_fuzzer_runs_without_crash(fuzzers, name):
    fuzz, build, work = fuzzers
    seeds = sorted((work / "corpus" / name).iterdir())
    assert len(seeds) >= 3  # every fuzzer starts from real bundles' files
    res = fuzz.run_fuzzer(
        build / f"fuzz_{name}", work / "corpus" / name, work / "crashes" / name, seconds=15
    )
    assert not res["crashed"], res["log"][-6000:]
    assert res["runs"] > 100, res["log"][-2000:]
    assert not any((work / "crashes" / name).iterdir())
