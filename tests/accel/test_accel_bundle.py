"""Whole models on the accelerator: an accel-sim bundle, its accelerator nodes running
their programs on the behavioural simulator through the C runtime, gives the bytes of
the same model's plain host int8 bundle, and its profile counts the accelerator's work."""

from __future__ import annotations

import json
import subprocess

import pytest

from packager.boards import load_board
from packager.package import compile_model
from tests.accel.test_place_accel import _inputs, _run, quantized_resnet


@pytest.fixture(scope="module")
def sim():
    return load_board("accel-sim")


@pytest.mark.parametrize("act", ["uint8", "int8"])
def test_accel_bundle_gives_the_host_int8_bytes(sim, act):
    model = quantized_resnet(act, blocks=(1, 1), width=16, size=32)
    placed = compile_model(model, sim)
    accel = [k for k in placed.kernels if k.device == "accel"]
    assert len(accel) >= 4 and all(k.program is not None for k in accel)
    host = compile_model(model, load_board("host"))
    inputs = _inputs((1, 3, 32, 32), 40.0)
    for got, want in zip(_run(placed, inputs), _run(host, inputs), strict=True):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@pytest.mark.slow
def test_resnet18_on_the_simulator_is_bit_exact_and_counted(sim, tmp_path):
    """ResNet-18-style (2-2-2-2, width 64) at 64x64: every conv and the dense on the
    accelerator, the same bytes as the host's int8 bundle, and run_bundle's profile has
    the accelerator's counters for each of its kernels."""
    model = quantized_resnet("uint8", blocks=(2, 2, 2, 2), width=64, size=64, classes=100)
    placed = compile_model(model, sim)
    assert placed.placement["accel_macs"] >= 0.9 * placed.placement["macs"]
    host = compile_model(model, load_board("host"))
    x = _inputs((1, 3, 64, 64), 40.0)[:2]
    for got, want in zip(_run(placed, x), _run(host, x), strict=True):
        assert got.tobytes() == want.tobytes()

    from packager.bundle import write_bundle_files
    from packager.native import build_run_bundle

    bundle = tmp_path / "b"
    bundle.mkdir()
    write_bundle_files(bundle, placed, {}, None)
    exe = build_run_bundle(bundle)
    doc = tmp_path / "p.json"
    r = subprocess.run(
        [str(exe), str(bundle), "--fill", "random", "--repeat", "2", "--profile-json", str(doc)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "accel: sim" in r.stderr
    kernels = json.loads(doc.read_text())["kernels"]
    on_accel = [k for k in kernels if k["device"] == "accel"]
    assert len(on_accel) == len([k for k in placed.kernels if k.device == "accel"])
    for k in on_accel:
        c = k["accel"]
        assert c["cycles"] > 0 and 0 < c["gemm_utilisation"] <= 1, k
    assert all(k["accel"]["macs"] > 0 for k in on_accel)
