"""Real models that public packages ship (scripts/fetch_models.py fetches them at
set-up): PP-OCR's text detector, recognizer and direction classifier, and Silero's voice
activity detector, packaged with their dynamic dims given, against ONNX Runtime."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from packager.backend import freeze_inputs
from tests.helpers import ort_outputs, run_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from fetch_models import model_path  # noqa: E402


def load(name: str) -> onnx.ModelProto:
    path = model_path(name)
    if not path.exists():
        raise FileNotFoundError(f"{path}: run scripts/setup.sh (scripts/fetch_models.py)")
    return onnx.load(path)


def _image(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


@pytest.mark.parametrize(
    "name, shape, atol",
    [
        ("ppocr_cls", (1, 3, 48, 192), 1e-5),
        ("ppocr_v4_rec", (1, 3, 48, 320), 1e-4),
        pytest.param("ppocr_v4_det", (1, 3, 320, 320), 1e-4, marks=pytest.mark.slow),
    ],
)
def test_ppocr_models_match_onnxruntime(name, shape, atol):
    model = load(name)
    feeds = {"x": _image(shape)}
    (got,) = run_model(model, feeds, shapes={"x": shape})
    (want,) = ort_outputs(model, feeds)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=atol, rtol=1e-3)


@pytest.mark.parametrize("name", ["silero_vad", "silero_vad_16k_op15", "silero_vad_openvino_16k"])
def test_silero_vad_steps_match_onnxruntime_with_their_state(name):
    """Three steps of 16 kHz audio, each feeding the next its state."""
    model = load(name)
    names = {i.name for i in model.graph.input}
    samples = 576 if name == "silero_vad_openvino_16k" else 512
    rng = np.random.default_rng(3)
    state = np.zeros((2, 1, 128), np.float32)
    shapes = {"input": (1, samples), "state": (2, 1, 128)}
    rep_feeds = []
    for _ in range(3):
        feeds = {"input": (rng.standard_normal((1, samples)) * 0.3).astype(np.float32)}
        feeds["state"] = state
        if "sr" in names:
            feeds["sr"] = np.array(16000, np.int64)
        want = ort_outputs(model, feeds)
        rep_feeds.append((feeds, want))
        state = want[1]
    if "sr" in names:  # the sample rate chooses the If's branch: packaged for 16 kHz
        model = freeze_inputs(model, {"sr": np.array(16000, np.int64)})
    for feeds, want in rep_feeds:
        feeds = {k: v for k, v in feeds.items() if k != "sr"}
        got = run_model(model, feeds, shapes=shapes)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, atol=2e-5, rtol=1e-4)


def test_silero_vad_if_on_the_sample_rate_names_the_input_to_give(tmp_path):
    """Its If on sr is data-dependent; the 8 kHz branch does not take 512 samples: the
    build says so and names the input whose value keeps only the branch taken, and with
    that value it builds."""
    import subprocess

    src = str(model_path("silero_vad"))
    cmd = [sys.executable, "-m", "packager.cli", "build", src, "--board", "host"]
    cmd += ["--input-shape", "input=1,512", "--input-shape", "state=2,1,128"]
    r = subprocess.run([*cmd, "-o", str(tmp_path / "a")], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "node 'If_0' (If): its condition is known only at run time" in r.stderr
    assert "the else branch does not take these shapes" in r.stderr
    assert "give --input-value sr=V to package only the branch it takes" in r.stderr
    assert not (tmp_path / "a").exists()
    r = subprocess.run(
        [*cmd, "--input-value", "sr=16000", "-o", str(tmp_path / "b")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "b" / "graph.json").exists()


def test_silero_vad_frozen_packages_whether_or_not_onnx_runtime_crashes_on_it(tmp_path):
    """ONNX Runtime 1.32 dies of SIGSEGV creating a session for Silero VAD once its dims
    are fixed and sr is a constant: the build's reference then comes from onnx's
    evaluator (one line says so), and the selftest holds the evaluator's outputs."""
    from packager.boards import load_board
    from packager.package import package
    from packager.reference import evaluator

    model = load("silero_vad")
    dims = {"input": (1, 512), "state": (2, 1, 128)}
    for vi in model.graph.input:
        if vi.name in dims:
            for d, n in zip(vi.type.tensor_type.shape.dim, dims[vi.name], strict=True):
                d.Clear()
                d.dim_value = n
    model = freeze_inputs(model, {"sr": np.array(16000, np.int64)})
    path = tmp_path / "vad16k.onnx"
    onnx.save(model, path)
    lines = []
    package(str(path), load_board("host"), str(tmp_path / "b"), log=lines.append)
    crashed = [ln for ln in lines if ln.startswith("ONNX Runtime crashed")]
    assert len(crashed) <= 1, lines
    sel = tmp_path / "b" / "selftest"
    feeds = {"input": np.load(sel / "input_0.npy"), "state": np.load(sel / "input_1.npy")}
    want = evaluator(model).run(None, feeds)
    for k, w in enumerate(want):
        np.testing.assert_allclose(np.load(sel / f"output_{k}.npy"), w, atol=1e-6, rtol=1e-5)
