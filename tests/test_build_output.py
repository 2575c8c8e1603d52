"""What `packager build` says: one line on tuning, progress on a terminal only, a final
summary with the memory the bundle needs (recorded in the manifest), and a refusal when
that exceeds the board's ram_mb."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.boards import check_board_file
from packager.errors import PackagerError
from tests.tune.conftest import conv_model

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def conv_onnx(tmp_path):
    path = tmp_path / "conv.onnx"
    onnx.save(conv_model(), path)
    return path


def chain_model(n: int, size: int) -> onnx.ModelProto:
    """``n`` MatMuls of 1 x size by size x size weights (each weight its own tensor)."""
    rng = np.random.default_rng(0)
    inits, nodes, prev = [], [], "x"
    for k in range(n):
        w = (rng.standard_normal((size, size)) * 0.01).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{k}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{k}"], [f"h{k}"]))
        prev = f"h{k}"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size])
    y = helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, size])
    graph = helper.make_graph(nodes, "chain", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def profile_copy(tmp_path: Path, extra: str, name: str = "small") -> Path:
    text = (ROOT / "board_profiles" / "host.yaml").read_text()
    text = text.replace("name: host", f"name: {name}")
    path = tmp_path / f"{name}.yaml"
    path.write_text(text + extra)
    return path


def test_a_build_says_once_that_kernels_use_default_schedules(conv_onnx, tmp_path, cli):
    code, out, err = cli("build", conv_onnx, "--board", "host", "-o", tmp_path / "b")
    assert code == 0, err
    hint = f"run `packager tune {conv_onnx} --board host` to tune them"
    assert f"1 of 1 tunable kernels use default schedules: {hint}" in err
    assert "default schedule:" not in err  # the per-kernel list waits for --verbose
    code, _, err = cli("build", conv_onnx, "--board", "host", "-o", tmp_path / "b", "-v")
    assert code == 0 and "  default schedule: Conv+Relu" in err and ": no record" in err


def test_a_build_ends_with_a_summary_and_records_its_memory(conv_onnx, tmp_path, cli):
    out_dir = tmp_path / "b"
    code, out, err = cli("build", conv_onnx, "--board", "host", "-o", out_dir)
    assert code == 0, err
    manifest = json.loads((out_dir / "manifest.json").read_text())
    graph = json.loads((out_dir / "graph.json").read_text())
    memory = manifest["memory"]
    assert memory["params_bytes"] == (out_dir / "params.bin").stat().st_size
    assert memory["arena_bytes"] == graph["arena_bytes"]
    assert memory["io_bytes"] == (16 * 14 * 14 * 4) * 2  # one input, one output
    fixed = memory["peak_bytes"] - memory["params_bytes"] - memory["arena_bytes"]
    fixed -= memory["io_bytes"]
    assert 2 << 20 < fixed < 3 << 20  # the runtime's code and graph.json
    last = err.strip().splitlines()[-1]
    mb = memory["peak_bytes"] / 1e6
    assert last.startswith(f"built {out_dir} in ")
    n = manifest["stats"]["kernels"]
    assert f": {n} kernels ({n} cpu, 0 opencl), weights 0.0 MB, arena " in last
    assert last.endswith(f"peak memory ~{mb:.1f} MB")


def _build_in(stream: str, model: Path, out: Path) -> str:
    """stderr of a build whose stderr is a terminal (``pty``) or a pipe."""
    cmd = [sys.executable, "-m", "packager.cli", "build", str(model), "--board", "host"]
    cmd += ["-o", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if stream == "pipe":
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 0, p.stderr
        return p.stderr
    main, sub = pty.openpty()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=sub, env=env)
    os.close(sub)
    chunks = []
    while True:
        ready, _, _ = select.select([main], [], [], 300)
        try:
            data = os.read(main, 4096) if ready else b""
        except OSError:  # the child closed the terminal
            data = b""
        if not data:
            break
        chunks.append(data)
    os.close(main)
    assert p.wait(timeout=60) == 0
    return b"".join(chunks).decode()


def test_progress_shows_on_a_terminal_only(tmp_path):
    model = tmp_path / "chain.onnx"
    onnx.save(chain_model(3, 8), model)
    on_tty = _build_in("tty", model, tmp_path / "a")
    assert "\r\x1b[Klowering kernels 1/3" in on_tty and "lowering kernels 3/3" in on_tty
    # the next message takes the progress line's place
    assert "lowering kernels 3/3\r\x1b[K1 of 1 tunable kernels use default" in on_tty
    piped = _build_in("pipe", model, tmp_path / "b")
    assert "lowering" not in piped and "\r" not in piped and "\x1b" not in piped
    assert "built " in piped


def test_a_bundle_larger_than_ram_mb_is_refused(tmp_path, cli):
    model = tmp_path / "chain.onnx"
    onnx.save(chain_model(3, 1024), model)  # 3 weights of 4 MiB: 12 MiB of params
    board = profile_copy(tmp_path, "ram_mb: 12\n")
    out = tmp_path / "out"
    code, _, err = cli("build", model, "--board", board, "-o", out)
    assert code == 2
    assert f"error: {model}: does not fit board 'small': it needs about 14.0 MiB at peak " in err
    assert "(params 12.0 + arena 0.0 + inputs/outputs 0.0 + runtime 2.0 MiB)" in err
    assert "more than its 12 MiB (ram_mb: 12)" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.onnx", "small.yaml"]
    board = profile_copy(tmp_path, "ram_mb: 15\n", "roomy")
    code, _, err = cli("build", model, "--board", board, "-o", out)
    assert code == 0, err


def test_memory_mb_is_refused_with_its_new_name(tmp_path):
    with pytest.raises(PackagerError, match="'memory_mb' is now called 'ram_mb': rename the key"):
        check_board_file(profile_copy(tmp_path, "memory_mb: 512\n"))
