"""bench/compare_opencl.py starts, and reports an engine that cannot run instead of
crashing. The benchmark itself is run by hand, not by the test suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import bench_module

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "compare_opencl.py"


def test_help_lists_the_flags():
    r = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for flag in ("--models", "--rounds", "--repeat", "--threads", "--setup"):
        assert flag in r.stdout
    assert "mobilenet_v2" in r.stdout and "squeezenet" in r.stdout


def test_failing_engine_is_unavailable_with_its_last_error_line():
    mod = bench_module("compare_opencl")
    code = "import sys; sys.stderr.write('loading\\nno OpenCL platform found\\n'); sys.exit(3)"
    with pytest.raises(mod.EngineUnavailable, match="^no OpenCL platform found$"):
        mod.run_child([sys.executable, "-c", code], {})


def test_opencv_falling_back_to_the_cpu_is_refused():
    mod = bench_module("compare_opencl")
    warn = "DNN: OpenCL target is not supported with current OpenCL device, switching to CPU."
    code = f"import sys; sys.stderr.write({warn!r}); print('{{\"median_ms\": 1.0}}')"
    with pytest.raises(mod.EngineUnavailable, match="switching to CPU"):
        mod.run_child([sys.executable, "-c", code], {})


def test_row_of_an_engine_that_cannot_run():
    mod = bench_module("compare_opencl")
    row = {"model": "resnet18", "threads": 2, "ort_ms": 80.0, "ours_error": "build failed: x"}
    text = mod.format_row(row)
    assert "ours       n/a ms" in text and "ort-cpu     80.00 ms" in text
    assert "ours/ort    n/a" in text
    assert "ours: cannot run: build failed: x" in text
