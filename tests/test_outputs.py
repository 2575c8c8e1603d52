"""What the commands may write: `build -o OUT` replaces only a bundle, run/tune/inspect add
their own files and nothing else, and an interrupt (SIGINT, SIGTERM) leaves no temporary
behind and every tuning-log line whole. The interrupts are sent to real CLI processes."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from .helpers import sigint_default_in_child

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"


def snapshot(path: Path) -> dict:
    """Every entry under ``path`` (itself included) with its kind and bytes."""
    if path.is_symlink():
        return {".": ("link", os.readlink(path))}
    if path.is_file():
        return {".": ("file", path.read_bytes())}
    return {
        str(p.relative_to(path)): ("file", p.read_bytes()) if p.is_file() else ("dir", None)
        for p in sorted(path.rglob("*"))
    }


def temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".tmp-" in p.name or ".old-" in p.name)


def fake_bundle(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "manifest.json").write_text('{"format": "packager-bundle"}\n')
    return path


# --- build -o OUT -----------------------------------------------------------------------


def _regular_file(tmp, model):
    (tmp / "notes.txt").write_text("my notes")
    return tmp / "notes.txt", "is a file"


def _symlink(tmp, model):
    target = fake_bundle(tmp / "real")
    (tmp / "link").symlink_to(target)
    return tmp / "link", "is a symbolic link"


def _foreign_dir(tmp, model):
    (tmp / "src").mkdir()
    (tmp / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    return tmp / "src", "is a non-empty directory that is not a bundle"


def _not_our_manifest(tmp, model):
    d = tmp / "other"
    d.mkdir()
    (d / "manifest.json").write_text('{"format": "something-else"}')
    return d, "is a non-empty directory that is not a bundle"


def _model_itself(tmp, model):
    return model, "is the model file itself"


def _bundle_holding_model(tmp, model):
    # Even a directory that looks like a bundle: replacing it would delete the model.
    d = fake_bundle(model.parent)
    return d, "contains the model"


def _root(tmp, model):
    return Path("/"), "is the root directory"


REFUSED = [
    _regular_file,
    _symlink,
    _foreign_dir,
    _not_our_manifest,
    _model_itself,
    _bundle_holding_model,
    _root,
]


@pytest.mark.parametrize("make", REFUSED, ids=lambda f: f.__name__.strip("_"))
def test_build_refuses_what_it_did_not_write(cli, tmp_path, make):
    model_dir = tmp_path / "models"
    model_dir.mkdir()
    model = model_dir / "m.onnx"
    model.write_bytes(EXAMPLE.read_bytes())
    out, why = make(tmp_path, model)
    before = snapshot(out) if out != Path("/") else None
    parent = snapshot(tmp_path)
    code, stdout, err = cli("build", model, "--board", "host", "-o", out)
    assert code == 2, err
    assert f"-o {out}: {why}" in err and "refusing to replace it" in err, err
    assert "imported" not in err  # refused before any work
    if before is not None:
        assert snapshot(out) == before
    assert snapshot(tmp_path) == parent  # nothing beside it either


def test_build_refuses_the_current_directory_even_a_bundle(cli, tmp_path, monkeypatch):
    cwd = fake_bundle(tmp_path / "work")
    monkeypatch.chdir(cwd)
    before = snapshot(tmp_path)
    code, _, err = cli("build", EXAMPLE, "--board", "host", "-o", ".")
    assert code == 2 and "is the current directory" in err, err
    # and a directory holding the current one
    code, _, err = cli("build", EXAMPLE, "--board", "host", "-o", tmp_path)
    assert code == 2 and "is the current directory (or contains it)" in err, err
    assert snapshot(tmp_path) == before


def test_build_refuses_home(cli, tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    before = snapshot(home)
    code, _, err = cli("build", EXAMPLE, "--board", "host", "-o", home)
    assert code == 2 and "is your home directory" in err, err
    assert snapshot(home) == before


def test_build_refuses_before_reading_the_model(cli, tmp_path):
    """The refusal is immediate: a model that does not even parse is not looked at."""
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    (tmp_path / "out").write_text("x")
    code, _, err = cli("build", bad, "--board", "host", "-o", tmp_path / "out")
    assert code == 2 and "is a file" in err and "bad.onnx" not in err, err


def test_build_creates_fills_and_replaces(cli, tmp_path):
    nested = tmp_path / "a" / "b" / "tiny"
    code, _, err = cli("build", EXAMPLE, "--board", "host", "-o", nested)
    assert code == 0, err
    assert (nested / "manifest.json").is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = cli("build", EXAMPLE, "--board", "host", "-o", empty)
    assert code == 0, err
    # A bundle is replaced whole: a file left in it by hand goes, as the old bundle does.
    (nested / "stale.txt").write_text("old")
    code, _, err = cli("build", EXAMPLE, "--board", "host", "-o", nested)
    assert code == 0, err
    assert not (nested / "stale.txt").exists() and (nested / "params.bin").is_file()
    assert temporaries(nested.parent) == [] and temporaries(tmp_path) == []


# --- run --output-dir, tune --log, inspect --plan-png -------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from packager.cli import main

    out = tmp_path_factory.mktemp("b") / "tiny"
    assert main(["build", str(EXAMPLE), "--board", "host", "-o", str(out)]) == 0
    return out


def run_args(bundle: Path, out_dir: Path, *extra):
    x = bundle / "selftest" / "input_0.npy"
    return (
        "run",
        bundle,
        "--board",
        "host",
        "--input",
        f"input={x}",
        "--output-dir",
        out_dir,
        *extra,
    )


def test_run_output_dir_keeps_what_is_there(tiny, cli, tmp_path):
    res = tmp_path / "res"
    res.mkdir()
    (res / "mine.txt").write_text("keep me")
    code, _, err = cli(*run_args(tiny, res))
    assert code == 0, err
    (output,) = json.loads((tiny / "manifest.json").read_text())["outputs"]
    assert sorted(p.name for p in res.iterdir()) == ["mine.txt", output["file"]]
    assert (res / "mine.txt").read_text() == "keep me"
    assert (res / output["file"]).stat().st_mode & 0o644 == 0o644
    want = np.load(tiny / "selftest" / "output_0.npy")
    np.testing.assert_allclose(np.load(res / output["file"]), want, rtol=1e-3, atol=1e-5)


def test_run_refuses_an_output_dir_that_is_a_file(tiny, cli, tmp_path):
    res = tmp_path / "res"
    res.write_text("a file")
    code, _, err = cli(*run_args(tiny, res))
    assert code == 2, err
    assert f"--output-dir {res}: is a file, not a directory" in err
    assert res.read_text() == "a file"


def test_tune_log_refusals(cli, tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(EXAMPLE.read_bytes())
    code, _, err = cli("tune", model, "--board", "host", "--trials", 1, "--log", tmp_path)
    assert code == 2 and f"--log {tmp_path}: is a directory" in err, err
    readme = tmp_path / "README.md"
    readme.write_text("# My project\n")
    code, _, err = cli("tune", model, "--board", "host", "--trials", 1, "--log", readme)
    assert code == 2, err
    assert f"--log {readme}: exists and is not a tuning log" in err
    assert readme.read_text() == "# My project\n"
    # the model given as the log by mistake
    before = model.read_bytes()
    code, _, err = cli("tune", model, "--board", "host", "--trials", 1, "--log", model)
    assert code == 2 and "is not a tuning log" in err, err
    assert model.read_bytes() == before


def test_inspect_plan_png_refusals_and_atomic_write(cli, tmp_path):
    code, _, err = cli("inspect", EXAMPLE, "--plan-png", tmp_path)
    assert code == 2 and f"--plan-png {tmp_path}: is a directory" in err, err
    notes = tmp_path / "notes.txt"
    notes.write_text("keep")
    code, _, err = cli("inspect", EXAMPLE, "--plan-png", notes)
    assert code == 2 and "exists and is not a PNG image" in err, err
    assert notes.read_text() == "keep"
    png = tmp_path / "plan.png"
    for _ in range(2):  # written, then replaced: a PNG may be overwritten
        code, _, err = cli("inspect", EXAMPLE, "--plan-png", png)
        assert code == 0, err
        assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "plan.png"]


# --- interrupts: real processes ---------------------------------------------------------


@pytest.fixture
def sigint_default():
    """This process's SIGINT as Python sets it when nothing ignores it."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def start_cli(*args, cwd=None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "packager.cli", *map(str, args)],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default_in_child,
    )


def wait_for(proc: subprocess.Popen, ready, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            pytest.fail(f"exited {proc.returncode} before the moment: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("never reached the moment to interrupt")
        time.sleep(0.002)


def big_params_model(path: Path) -> Path:
    """One MatMul with a 64 MB weight: writing and hashing params.bin takes a while."""
    w = np.random.default_rng(0).standard_normal((4096, 4096)).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4096])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4096])
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    graph = helper.make_graph([node], "big", [x], [y], [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


@pytest.fixture(scope="module")
def big_model(tmp_path_factory):
    return big_params_model(tmp_path_factory.mktemp("big") / "big.onnx")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_build_interrupted_while_writing_leaves_the_old_bundle(big_model, tiny, tmp_path, sig):
    import shutil

    out = tmp_path / "big"
    shutil.copytree(tiny, out, ignore=shutil.ignore_patterns("build"))
    before = snapshot(out)
    proc = start_cli("build", big_model, "--board", "host", "-o", out)
    wait_for(proc, lambda: any(p.name.startswith(".big.tmp-") for p in tmp_path.iterdir()))
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert "interrupted" in err
    assert temporaries(tmp_path) == []
    assert snapshot(out) == before


def _busy(n: int = 200_000) -> int:
    """Python work long enough for a pending signal handler to run (it runs between
    bytecodes, never inside a C call)."""
    total = 0
    for i in range(n):
        total += i
    return total


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_signals_held_waits_when_another_thread_takes_the_signal(sig, sigint_default):
    """The kernel hands a process signal to any thread that does not mask it (numpy's BLAS
    keeps workers); the held block must still finish before the handler runs. Before the
    fix, a SIGINT taken by such a thread interrupted `mkdtemp` after it made the directory
    and the build left `.OUT.tmp-*` behind."""
    import threading

    from packager.interrupts import raise_interrupted as _raise_interrupted
    from packager.safe_paths import signals_held

    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        other = threading.Thread(target=time.sleep, args=(2,), daemon=True)
        other.start()
        steps = []
        with pytest.raises(KeyboardInterrupt):
            with signals_held():
                signal.pthread_kill(other.ident, sig)
                _busy()
                steps.append("block ended")
            steps.append("after the block")
        assert steps == ["block ended"]
        assert signal.getsignal(signal.SIGTERM) is _raise_interrupted
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_signals_held_nested_delivers_once_at_the_outer_end(sigint_default):
    from packager.safe_paths import signals_held

    steps = []
    with pytest.raises(KeyboardInterrupt):
        with signals_held():
            with signals_held():
                signal.raise_signal(signal.SIGINT)
                _busy()
                steps.append("inner ended")
            _busy()
            steps.append("outer ended")
    assert steps == ["inner ended", "outer ended"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_tune_interrupted_leaves_whole_log_lines(tmp_path, sig):
    from .tune.conftest import conv_model

    model = tmp_path / "conv.onnx"
    onnx.save(conv_model(), model)
    log = tmp_path / "logs" / "conv.jsonl"
    proc = start_cli("tune", model, "--board", "host", "--trials", 200, "--log", log)
    wait_for(proc, lambda: log.exists() and log.read_text().count("\n") >= 2)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    lines = log.read_text().splitlines()
    assert len(lines) >= 2
    for line in lines:
        assert json.loads(line)["version"] == 1
    assert log.read_bytes().endswith(b"\n")
    assert sorted(p.name for p in log.parent.iterdir()) == ["conv.jsonl"]


def test_run_interrupted_leaves_no_temporaries(tiny, tmp_path):
    res = tmp_path / "res"
    res.mkdir()
    (res / "mine.txt").write_text("keep me")
    x = tiny / "selftest" / "input_0.npy"
    proc = start_cli(
        "run", tiny, "--board", "host", "--input", f"input={x}", "--output-dir", res,
        "--repeat", 10_000_000,
    )  # fmt: skip
    wait_for(proc, lambda: any(p.name.startswith(".packager-run-") for p in res.iterdir()))
    time.sleep(0.2)  # well into run_bundle's loop
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert sorted(p.name for p in res.iterdir()) == ["mine.txt"]
