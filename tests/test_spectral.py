"""Log-mel front ends (1 s of 16 kHz audio, hop 160) against ONNX Runtime and against a
float64 numpy reference: a strided-Conv DFT, ONNX STFT with a HannWindow and
MelWeightMatrix folded at package time, and ONNX DFT on gathered frames."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import networks  # noqa: E402

from packager.frontend.converters.spectral import dft_basis  # noqa: E402
from tests.conformance.node_suite import run_case  # noqa: E402
from tests.helpers import ort_outputs, run_model  # noqa: E402


def _audio():
    return {"audio": np.random.default_rng(0).uniform(-1, 1, (1, 16000)).astype(np.float32)}


def _true_log_mel(audio, n_fft, mels, hann_periodic=True, pad=False, floor=1e-10):
    x = audio.astype(np.float64)[0]
    if pad:
        x = np.pad(x, n_fft // 2, mode="reflect")
    frames = (len(x) - n_fft) // 160 + 1
    cut = x[np.arange(frames)[:, None] * 160 + np.arange(n_fft)[None]] * networks._hann(n_fft)
    power = np.abs(np.fft.rfft(cut)) ** 2
    return np.log(np.maximum(power @ networks._mel_filterbank(n_fft, mels, 16000), floor))


@pytest.mark.parametrize(
    "name, n_fft, mels, pad", [("mel_conv", 512, 40, True), ("mel_dft", 400, 80, False)]
)
def test_front_end_matches_ort_and_float64(name, n_fft, mels, pad):
    model, feeds = getattr(networks, name)(), _audio()
    (got,) = run_model(model, feeds)
    (want,) = ort_outputs(model, feeds)
    # Log of ~0 magnifies float32 rounding: the error is taken against the output's scale
    # (the log-mel of white noise spans ~[-8, 8]); the float64 truth bounds it tighter.
    assert np.abs(got - want).max() / np.abs(want).max() <= 1e-3
    truth = _true_log_mel(feeds["audio"], n_fft, mels, pad=pad)
    assert np.abs(got - truth).max() <= 1e-4


def test_stft_front_end_matches_ort():
    model, feeds = networks.mel_stft(), _audio()
    (got,) = run_model(model, feeds)
    (want,) = ort_outputs(model, feeds)
    assert got.shape == (1, 97, 40)
    assert np.abs((got - want) / want).max() <= 1e-3


# (components, inverse, onesided): a one-sided forward DFT takes a real signal only
@pytest.mark.parametrize(
    "comps, inverse, onesided",
    [(c, i, o) for c in (1, 2) for i in (0, 1) for o in (0, 1) if not (o and not i and c == 2)],
)
def test_dft_basis_is_numpys_fft(comps, inverse, onesided):
    x = np.random.default_rng(1).standard_normal((3, 10, comps))
    z = x[..., 0] + (1j * x[..., 1] if comps == 2 else 0)
    got = x.reshape(3, -1) @ dft_basis(10, comps, 12, bool(inverse), bool(onesided))
    if inverse and onesided:
        want = np.fft.irfft(z, n=12)
    else:
        y = (np.fft.ifft if inverse else np.fft.fft)(z, n=12)
        y = y[:, :7] if onesided else y
        want = np.stack([y.real, y.imag], -1)
    np.testing.assert_allclose(got, want.reshape(3, -1), atol=1e-12)


NODE_CASES = [
    "test_dft_opset19_cpu",
    "test_dft_axis_opset19_cpu",
    "test_dft_irfft_opset19_cpu",
    "test_dft_rfft_opset19_cpu",
]


@pytest.mark.parametrize("case", NODE_CASES)
def test_dft_node_cases(case):
    assert run_case(case) == ("pass", "")


@pytest.mark.parametrize("name", ["test_dft_inverse", "test_dft_inverse_opset19"])
def test_inverse_dft_node_cases_against_float64(name):
    # These node cases expect their float32 FFT's rounding (1.9e-7 where the exact value is
    # 0, above the suite's atol): check our answer against the exact result instead.
    from onnx.backend.test.case.node import collect_testcases

    from packager.backend import PackagerBackend

    (case,) = [c for c in collect_testcases(None) if c.name == name]
    inputs = case.data_sets[0][0]
    (got,) = PackagerBackend.run_model(case.model, inputs)
    x = inputs[0].astype(np.float64)
    exact = np.fft.ifft(x[..., 0] + 1j * x[..., 1], axis=1)
    want = np.stack([exact.real, exact.imag], axis=-1)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()
