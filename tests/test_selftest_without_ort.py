"""Bundles built where ONNX Runtime is not installed pass their own self-test: their
reference outputs then come from onnx's evaluator with packager.reference_ops."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import networks
import numpy as np
import onnx
import pytest

from packager.boards import load_board
from packager.runner import selftest_local

from .helpers import ort_outputs
from .test_models import LIGHT, ZOO

ROOT = Path(__file__).resolve().parent.parent

# Loaded at interpreter start: `import onnxruntime` raises as if it were not installed.
BLOCK_ORT = """
import sys

class _NoOnnxRuntime:
    def find_spec(self, name, path=None, target=None):
        if name == "onnxruntime" or name.startswith("onnxruntime."):
            raise ImportError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, _NoOnnxRuntime())
"""

BUILD = """
import sys
try:
    import onnxruntime  # noqa: F401
except ImportError:
    pass
else:
    sys.exit("onnxruntime is importable: the test would not cover the evaluator")
from packager.cli import main
sys.exit(main(["build", sys.argv[1], "--board", "host", "-o", sys.argv[2]]))
"""


def build_without_ort(model_path: Path, out: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    site = tmp_path / "no_ort"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_ORT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
    cmd = [sys.executable, "-c", textwrap.dedent(BUILD), str(model_path), str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)


MODELS = {f"light_{z}": lambda z=z: onnx.load(LIGHT / f"light_{z}.onnx") for z in ZOO}
MODELS["mobilenet_v2"] = lambda: networks.mobilenet_v2(seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODELS))
def test_selftest_passes_without_onnxruntime(name, tmp_path):
    model_path = tmp_path / f"{name}.onnx"
    onnx.save(MODELS[name](), model_path)
    bundle = tmp_path / "bundle"
    r = build_without_ort(model_path, bundle, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    result = selftest_local(bundle, load_board("host"))
    assert result.returncode == 0, result.stdout + result.stderr
    # The reference itself, closer than the self-test's tolerance: ONNX Runtime's outputs.
    model = onnx.load(model_path)
    inits = {t.name for t in model.graph.initializer}
    names = [vi.name for vi in model.graph.input if vi.name not in inits]
    feeds = {n: np.load(bundle / "selftest" / f"input_{i}.npy") for i, n in enumerate(names)}
    for i, want in enumerate(ort_outputs(model, feeds)):
        got = np.load(bundle / "selftest" / f"output_{i}.npy")
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7, err_msg=f"output {i}")


def test_onnxruntime_is_blocked_in_the_subprocess(tmp_path):
    """The blocking works (else the slow cases would test ONNX Runtime's outputs)."""
    site = tmp_path / "no_ort"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_ORT)
    env = dict(os.environ, PYTHONPATH=str(site))
    code = "import onnxruntime"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 1
    assert "No module named 'onnxruntime'" in r.stderr
