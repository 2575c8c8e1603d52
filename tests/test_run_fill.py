"""Running a bundle with no prepared inputs: run_bundle fills the inputs it is not given
(--fill random|zeros, --seed) and prints each output's dtype, shape, min, max and mean
(--top K: the largest scores); `packager run` passes the same flags and needs neither
--input nor --output-dir. A real build of examples/tiny_cnn.onnx."""

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"
STATS = re.compile(
    r"output 0 'softmax_32': float32\[1, 10\] min (\S+) max (\S+) mean (\S+)(?: top (\d+):(.*))?$"
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from packager.boards import load_board
    from packager.cli import main
    from packager.runner import build

    out = tmp_path_factory.mktemp("b") / "tiny"
    assert main(["build", str(EXAMPLE), "--board", "host", "-o", str(out)]) == 0
    build(out, load_board("host"))
    return out


def run_bundle(bundle: Path, *args) -> subprocess.CompletedProcess:
    exe = bundle / "build" / "run_bundle"
    return subprocess.run([exe, bundle, *map(str, args)], capture_output=True, text=True)


def stats(stdout: str) -> tuple[float, float, float, list[tuple[int, float]]]:
    """min, max, mean and the top (index, value) pairs of the summary line."""
    (line,) = [s for s in stdout.splitlines() if s.startswith("output ")]
    m = STATS.fullmatch(line)
    assert m, line
    top = [(int(i), float(v)) for i, v in (p.split("=") for p in (m[5] or "").split())]
    return float(m[1]), float(m[2]), float(m[3]), top


def output(res: Path) -> np.ndarray:
    return np.load(res / "softmax_32.npy")


def test_no_inputs_prints_each_outputs_stats(tiny, tmp_path):
    r = run_bundle(tiny, "--output-dir", tmp_path)
    assert r.returncode == 0, r.stderr
    assert (
        "input 'input' float32[1, 3, 32, 32]: no --input, filled with random values (seed 0)"
        in r.stderr
    )
    lo, hi, mean, top = stats(r.stdout)
    got = output(tmp_path)
    assert top == []
    np.testing.assert_allclose([lo, hi, mean], [got.min(), got.max(), got.mean()], rtol=1e-5)
    assert 0 < lo < hi < 1  # a softmax of non-constant inputs


def test_fill_zeros_matches_onnxruntime(tiny, tmp_path):
    import onnx

    from packager.reference import run_reference

    r = run_bundle(tiny, "--fill", "zeros", "--output-dir", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "input 'input' float32[1, 3, 32, 32]: no --input, filled with zeros" in r.stderr
    zeros = {"input": np.zeros((1, 3, 32, 32), np.float32)}
    (want,) = run_reference(onnx.load(EXAMPLE), zeros)  # ONNX Runtime when installed
    np.testing.assert_allclose(output(tmp_path), want, rtol=1e-4, atol=1e-6)


def test_seed_gives_repeatable_inputs(tiny, tmp_path):
    def with_seed(seed, name):
        r = run_bundle(tiny, "--seed", seed, "--output-dir", tmp_path / name)
        assert r.returncode == 0, r.stderr
        assert f"filled with random values (seed {seed})" in r.stderr
        return output(tmp_path / name)

    a, again, other = with_seed(7, "a"), with_seed(7, "again"), with_seed(8, "other")
    np.testing.assert_array_equal(a, again)
    assert not np.allclose(a, other)
    default = run_bundle(tiny).stdout
    assert stats(default) == stats(run_bundle(tiny, "--seed", "0").stdout)


def test_top_lists_the_largest_scores(tiny, tmp_path):
    r = run_bundle(tiny, "--seed", "3", "--top", "3", "--output-dir", tmp_path)
    assert r.returncode == 0, r.stderr
    got = output(tmp_path).ravel()
    *_, top = stats(r.stdout)
    assert [i for i, _ in top] == list(np.argsort(got)[::-1][:3])
    np.testing.assert_allclose([v for _, v in top], np.sort(got)[::-1][:3], rtol=1e-5)
    *_, everything = stats(run_bundle(tiny, "--seed", "3", "--top", "50").stdout)
    assert sorted(i for i, _ in everything) == list(range(10))  # K past the end: all of them


@pytest.mark.parametrize(
    "args, message",
    [
        (["--fill", "ones"], "--fill wants 'random' or 'zeros', got 'ones'"),
        (["--top", "0"], "--top wants an integer >= 1, got '0'"),
        (["--top", "2.5"], "--top wants an integer >= 1, got '2.5'"),
        (["--seed", "-1"], "--seed wants an integer in [0, 2^64), got '-1'"),
        (["--seed", "18446744073709551616"], "--seed wants an integer in [0, 2^64)"),
        (["--seed"], "--seed needs a value"),
        (["--selftest", "--fill", "zeros"], "--selftest takes its inputs from selftest/"),
    ],
)
def test_bad_values_refused(tiny, args, message):
    r = run_bundle(tiny, *args)
    assert r.returncode == 2
    assert message in r.stderr
    assert r.stdout == ""


def test_readme_profile_line_works(tiny):
    r = run_bundle(tiny, "--repeat", "20", "--profile")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert json.loads(lines[-1])["repeat"] == 20
    head = next(k for k, line in enumerate(lines) if line.startswith("kernel "))
    assert lines[-2].startswith("total (8 kernels)") and len(lines) - 2 - head == 9
    stats(r.stdout)


def test_packager_run_needs_no_inputs_or_output_dir(tiny, cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("run", tiny, "--board", "host", "--fill", "zeros", "--top", "2")
    assert code == 0, err
    assert "input 'input' float32[1, 3, 32, 32]: no --input, filled with zeros" in err
    zeros = run_bundle(tiny, "--fill", "zeros", "--top", "2")
    assert stats(out) == stats(zeros.stdout)
    assert len(stats(out)[3]) == 2
    assert list(tmp_path.iterdir()) == []  # no --output-dir: nothing written

    code, out, err = cli("run", tiny, "--board", "host", "--seed", "5", "--output-dir", "res")
    assert code == 0, err
    lo, hi, mean, _ = stats(out)
    got = np.load(tmp_path / "res" / "softmax_32.npy")
    np.testing.assert_allclose([lo, hi, mean], [got.min(), got.max(), got.mean()], rtol=1e-5)
    x = tiny / "selftest" / "input_0.npy"
    code, out, err = cli("run", tiny, "--board", "host", "--input", f"input={x}")
    assert code == 0 and "filled" not in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--top", "0"], "error: --top 0: expected an integer >= 1"),
        (["--seed", "-3"], "error: --seed -3: expected an integer in [0, 2^64)"),
        (["--fill", "ones"], "invalid choice: 'ones'"),
    ],
)
def test_packager_run_refuses_bad_values(tiny, cli, capsys, args, message):
    try:
        code, _, err = cli("run", tiny, "--board", "host", *args)
    except SystemExit as e:  # argparse's own refusal
        code, err = e.code, capsys.readouterr().err
    assert code == 2
    assert message in err
