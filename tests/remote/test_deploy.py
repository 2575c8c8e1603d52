"""deploy, run, bench and clean on an emulated aarch64 board (sshd + qemu-user), through the
command line, with tensor and file names that would break any unquoted remote command."""

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.boards import load_board
from packager.package import package
from packager.remote import device_ops, transfer
from packager.remote.errors import DeviceLost
from packager.remote.ssh import Limits, Session

from .conftest import ROOT, write_profile

EXAMPLE = ROOT / "examples" / "tiny_cnn.onnx"
IN_NAME = "x y'\"; $(touch {canary})"
OUT_NAME = "out `touch {canary}`; z"


def nasty_model(canary: Path, scale: float = 2.0) -> onnx.ModelProto:
    x, y = IN_NAME.format(canary=canary), OUT_NAME.format(canary=canary)
    w = numpy_helper.from_array(np.full((1, 4), scale, np.float32), "w; $(id)")
    graph = helper.make_graph(
        [helper.make_node("Mul", [x, "w; $(id)"], ["m"]), helper.make_node("Relu", ["m"], [y])],
        "nasty",
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [3, 4])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def board_dir(sshd, tmp_path_factory):
    d = tmp_path_factory.mktemp("boards")
    work = tmp_path_factory.mktemp("board-root") / "work dir; $(x)"
    write_profile(d, "qemu-aarch64", [sshd.connection(str(work))])
    return d


@pytest.fixture(scope="module")
def board(board_dir):
    return board_dir / "qemu-aarch64.yaml"


@pytest.fixture(scope="module")
def nasty_bundle(board, tmp_path_factory):
    d = tmp_path_factory.mktemp("nasty")
    canary = d / "canary"
    onnx.save(nasty_model(canary), d / "m.onnx")
    # Spaces and quotes in the local path (not $(...): make itself cannot build under such
    # a path); the name, which is the bundle's directory on the board, begins with '-'.
    out = package(str(d / "m.onnx"), load_board(board), str(d / "in 'b' q" / "-bundle"))
    return out, canary


def test_toolchain_file_in_the_bundle(nasty_bundle):
    bundle, _ = nasty_bundle
    text = (bundle / "toolchain.cmake").read_text()
    assert "set(CMAKE_SYSTEM_PROCESSOR aarch64)" in text
    assert 'set(CMAKE_C_COMPILER "aarch64-linux-gnu-gcc")' in text
    assert "-march=armv8-a" in text and "-march=native" not in text
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert "toolchain.cmake" in manifest["files"]


def test_deploy_run_bench_clean(nasty_bundle, board, cli, tmp_path):
    bundle, canary = nasty_bundle
    code, out, err = cli("deploy", bundle, "--board", board)
    assert code == 0, out + err
    assert "selftest PASS" in out and "0 already there" in out
    exe = Path(load_board(board).connection.workdir) / bundle.name / "build" / "run_bundle"
    assert exe.read_bytes()[:4] == b"\x7fELF" and _machine(exe) == "AArch64"

    code, out, err = cli("deploy", bundle, "--board", board)  # nothing changed: nothing sent
    assert code == 0, out + err
    assert "uploaded 0 file(s)" in out and "selftest PASS" in out

    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    inp = tmp_path / "in put 'q' $(touch pwned); `touch pwned`.npy"  # no '/' in a file name
    np.save(inp, x)
    name = IN_NAME.format(canary=canary)
    res = tmp_path / "res"
    code, out, err = cli(
        "run", bundle, "--board", board, "--input", f"{name}={inp}", "--output-dir", res,
        "--repeat", "2",
    )  # fmt: skip
    assert code == 0, out + err
    assert json.loads(out.strip().splitlines()[-1])["repeat"] == 2
    (got,) = [np.load(p) for p in res.iterdir()]
    np.testing.assert_array_equal(got, np.maximum(x * 2, 0))
    assert not canary.exists()
    workdir = Path(load_board(board).connection.workdir)
    assert not [*workdir.rglob("pwned"), *Path.home().glob("pwned")]

    code, out, err = cli("bench", bundle, "--board", board, "--repeat", "3")
    assert code == 0, out + err
    row = json.loads(out.strip().splitlines()[-1])
    assert (
        row["median_ms"] > 0
        and row["repeat"] == 3
        and row["device"].endswith(f":{load_board(board).connection.port}")
    )

    assert not list((workdir / ".runs").iterdir())  # every run cleaned up after itself
    code, out, err = cli("clean", "--board", board)
    assert code == 0 and "removed" in out
    assert not workdir.exists()


def test_bench_and_run_profile_on_the_board(nasty_bundle, board, cli, tmp_path):
    bundle, canary = nasty_bundle
    graph = json.loads((bundle / "graph.json").read_text())
    funcs = {n["func"] for n in graph["nodes"] if n["op"] == "kernel"}
    code, out, err = cli("bench", bundle, "--board", board, "--repeat", "3", "--profile")
    assert code == 0, out + err
    lines = out.strip().splitlines()
    port = load_board(board).connection.port
    assert (
        lines[0].startswith(f"== m ({bundle}) on ") and f":{port}: board qemu-aarch64" in lines[0]
    )
    assert lines[1].split()[:3] == ["kernel", "ops", "fused"]
    assert {line.split()[0] for line in lines[2 : 2 + len(funcs)]} == funcs
    assert lines[2 + len(funcs)].startswith(f"total ({len(funcs)} kernels)")
    row = json.loads(lines[-1])
    assert row["repeat"] == 3 and "profile" not in row and "table" not in row

    doc_path = tmp_path / "profile.json"  # run's --profile-json: fetched from the board
    code, out, err = cli(
        "run", bundle, "--board", board, "--repeat", "2", "--profile-json", doc_path
    )
    assert code == 0, out + err
    doc = json.loads(doc_path.read_text())
    assert (doc["repeat"], doc["board"], doc["model"]) == (2, "qemu-aarch64", "m")
    assert {k["func"] for k in doc["kernels"]} == funcs
    assert sum(k["share"] for k in doc["kernels"]) == pytest.approx(1, abs=1e-3)
    assert not canary.exists()
    workdir = Path(load_board(board).connection.workdir)
    assert not list((workdir / ".runs").iterdir())  # the runs cleaned up after themselves


def _machine(exe: Path) -> str:
    """The ELF header's e_machine: 0xB7 is AArch64, 0x28 32-bit ARM."""
    code = int.from_bytes(exe.read_bytes()[18:20], "little")
    return {0xB7: "AArch64", 0x28: "ARM", 0x3E: "x86-64"}.get(code, hex(code))


def test_hanging_run_is_killed_at_its_timeout(nasty_bundle, sshd, tmp_path, cli, board):
    bundle, canary = nasty_bundle
    assert cli("deploy", bundle, "--board", board)[0] == 0
    # Same board and workdir, but everything run there hangs.
    conn = load_board(board).connection
    hang = write_profile(
        tmp_path,
        "qemu-aarch64",
        [sshd.connection(conn.workdir, exec_wrapper="sh -c 'sleep 41.5' --")],
    )
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((3, 4), np.float32))
    name = IN_NAME.format(canary=canary)
    code, _, err = cli(
        "run", bundle, "--board", hang, "--input", f"{name}={x}", "--output-dir",
        tmp_path / "res", "--timeout", "1.5",
    )  # fmt: skip
    assert code == 2
    assert "did not finish within 1.5s and was killed with its process group" in err
    assert "board qemu-aarch64" in err
    assert not (tmp_path / "res").exists()
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "sleep 41.5" not in ps


def test_unknown_board_host_refused_with_exit_2(tmp_path, cli, nasty_bundle, sshd):
    bundle, _ = nasty_bundle
    board = write_profile(
        tmp_path, "qemu-aarch64", [sshd.connection("/tmp/x", known_hosts=str(tmp_path / "kh"))]
    )
    code, out, err = cli("deploy", bundle, "--board", board)
    assert code == 2
    assert f"is not in {tmp_path / 'kh'}" in err
    assert "--trust-on-first-use" in err and "board qemu-aarch64" in err


def test_sshd_stopped_during_upload(own_sshd, tmp_path):
    """The board dies half way through an upload: a clear error, the deployed bundle is
    still the previous complete one (never a mix), the next deploy succeeds."""
    board_path = write_profile(
        tmp_path / "b", "qemu-aarch64", [own_sshd.connection(str(tmp_path / "w"))]
    )
    board = load_board(board_path)
    first = package(str(EXAMPLE), board, str(tmp_path / "v1" / "tiny"))
    session = Session(board.name, board.connection, Limits(retries=1, backoff_s=0.2))
    prepared = device_ops.prepare(first, board)
    device_ops.deploy(session, board, prepared, selftest=False)
    final = tmp_path / "w" / "tiny"
    marker = (final / transfer.MARKER).read_text().strip()
    assert marker == transfer.tree_digest(prepared.digests)

    # Version 2: other weights, so params.bin and the manifest differ.
    onnx.save(_reseeded(EXAMPLE), tmp_path / "v2.onnx")
    second = package(str(tmp_path / "v2.onnx"), board, str(tmp_path / "v2" / "tiny"))
    prepared2 = device_ops.prepare(second, board)
    sent = []

    def pull_the_plug(rel):
        sent.append(rel)
        own_sshd.stop()

    with pytest.raises(DeviceLost) as info:
        device_ops.deploy(session, board, prepared2, selftest=False, progress=pull_the_plug)
    assert "failed after 2 attempt(s)" in str(info.value)
    assert "did not finish" in str(info.value) and "not replaced or marked complete" in str(
        info.value
    )
    assert f"127.0.0.1:{own_sshd.port}" in str(info.value)
    assert len(sent) == 1
    # The deployed bundle is still version 1, complete; version 2 waits in .partial.
    assert (final / transfer.MARKER).read_text().strip() == marker
    assert (final / "params.bin").read_bytes() == (first / "params.bin").read_bytes()
    partial = tmp_path / "w" / ".tiny.partial"
    assert partial.is_dir() and not (partial / transfer.MARKER).exists()

    own_sshd.start()
    report = device_ops.deploy(session, board, prepared2, selftest=True)
    session.close()
    assert report.selftest.returncode == 0, report.selftest.stdout + report.selftest.stderr
    assert report.skipped  # resumed: what reached the board before the cut is not sent again
    assert (final / "params.bin").read_bytes() == (second / "params.bin").read_bytes()
    assert (final / transfer.MARKER).read_text().strip() == transfer.tree_digest(prepared2.digests)
    assert not partial.exists()


def _reseeded(path: Path) -> onnx.ModelProto:
    model = onnx.load(path)
    for t in model.graph.initializer:
        a = numpy_helper.to_array(t)
        t.CopyFrom(numpy_helper.from_array((a * 0.5).astype(a.dtype), t.name))
    return model


def splitmix_floats(seed: int, index: int, n: int) -> np.ndarray:
    """run_bundle's --fill random for float32 input ``index``: splitmix64, the top 24 bits
    of each number mapped to [-1, 1)."""
    mask, state, out = 2**64 - 1, seed ^ (index * 0xD1B54A32D192ED03) & (2**64 - 1), []
    for _ in range(n):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out.append(((z ^ (z >> 31)) >> 40) / 2**23 - 1)
    return np.array(out, np.float32)


def test_run_fills_inputs_on_the_device(nasty_bundle, board, cli, tmp_path):
    """No --input, no --output-dir: run_bundle on the board fills the input and prints the
    summary; the random fill is the same there as the generator's definition here."""
    bundle, canary = nasty_bundle
    code, out, err = cli("run", bundle, "--board", board, "--fill", "zeros")
    assert code == 0, out + err
    assert "float32[3, 4]: no --input, filled with zeros" in err
    assert out.strip().endswith("float32[3, 4] min 0 max 0 mean 0")
    assert list(tmp_path.iterdir()) == []

    res = tmp_path / "res"
    code, out, err = cli("run", bundle, "--board", board, "--seed", "9", "--output-dir", res)
    assert code == 0, out + err
    assert "filled with random values (seed 9)" in err
    (got,) = [np.load(p) for p in res.iterdir()]
    x = splitmix_floats(9, 0, 12).reshape(3, 4)
    np.testing.assert_array_equal(got, np.maximum(x * 2, 0))
    assert f"min {got.min():.6g} max {got.max():.6g} mean " in out
    assert not canary.exists()
