"""A bundle with integer kernels checks itself against the packager's own integer results
(computed on this machine at build time), not against a float reference that may differ
by a quantization step: `run_bundle --selftest` passes on the host and on the
accelerator's simulator, and the expected outputs are the int8 bundle's own bytes."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import onnx
import pytest

from packager.boards import load_board
from packager.cli import main
from packager.native import CFLAGS, build_run_bundle
from packager.reference import run_reference
from tests.accel.test_place_accel import quantized_resnet


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("q") / "qr.onnx"
    onnx.save(quantized_resnet("uint8", blocks=(1, 1), width=16, size=32), path)
    return path


def _outputs(exe, bundle, x, tmp):
    np.save(tmp / "x.npy", x)
    out = tmp / "out"
    subprocess.run(
        [str(exe), str(bundle), "--input", f"input={tmp / 'x.npy'}", "--output-dir", str(out)],
        check=True,
        capture_output=True,
    )
    return np.load(out / "softmax_56.npy")


@pytest.mark.parametrize("board", ["host", "accel-sim"])
def test_int8_bundle_passes_its_selftest_with_its_own_integer_results(
    model, board, tmp_path, capsys
):
    bundle = tmp_path / "b"
    assert main(["build", str(model), "--board", board, "-o", str(bundle)]) == 0
    assert "selftest: expected outputs from this machine's build of the integer kernels" in (
        capsys.readouterr().err
    )
    # the flags the packager built its expected outputs with (the host's): the float tail
    # compiled with other flags (no FMA) may differ in the last bits
    exe = build_run_bundle(bundle, cflags=[*CFLAGS, *load_board("host").toolchain.cflags])
    r = subprocess.run([str(exe), str(bundle), "--selftest"], capture_output=True, text=True)
    assert r.returncode == 0 and "selftest: PASS" in r.stdout, r.stdout + r.stderr
    assert "max_abs_err 0 " in r.stdout  # the very bytes (the float tail runs the same code)
    x = np.load(bundle / "selftest" / "input_0.npy")
    want = np.load(bundle / "selftest" / "output_0.npy")
    assert _outputs(exe, bundle, x, tmp_path).tobytes() == want.tobytes()
    # the float reference of the QDQ model is close, not the expected bytes
    (ref,) = run_reference(onnx.load(model), {"input": x})
    np.testing.assert_allclose(want, ref, atol=0.05)


def test_float_models_keep_the_float_reference(tmp_path, capsys):
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn.onnx"
    assert main(["build", str(example), "--board", "host", "-o", str(tmp_path / "b")]) == 0
    assert "integer kernels" not in capsys.readouterr().err
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    x = np.load(tmp_path / "b" / "selftest" / "input_0.npy")
    want = np.load(tmp_path / "b" / "selftest" / "output_0.npy")
    name = manifest["inputs"][0]["name"]
    (ref,) = run_reference(onnx.load(example), {name: x})
    assert want.tobytes() == ref.tobytes()
