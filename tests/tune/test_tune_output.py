"""What `packager tune` says per task: the speed in the unit that fits the kernel (GFLOP/s,
effective GFLOP/s for Winograd, GB/s for memory-bound ones) and why each task, or the
run, stopped."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.boards import load_board
from packager.tune.measure import Settings
from packager.tune.progress import Progress
from packager.tune.run import tune_model
from packager.tune.tuner import Options

from ..helpers import sigint_default_in_child

ROOT = Path(__file__).resolve().parents[2]
FAST = Settings(min_seconds=0.002, samples=3)
NUMBER = r"\d+\.\d\d"


@pytest.fixture
def conv_pool_onnx(tmp_path) -> Path:
    """A 3x3 conv (direct and Winograd forms), then a max pool (memory-bound)."""
    w = (np.random.default_rng(0).standard_normal((16, 16, 3, 3)) * 0.1).astype(np.float32)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 14, 14])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 7, 7])
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], [numpy_helper.from_array(w, "w")])
    path = tmp_path / "conv_pool.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def final_lines(err: str) -> dict[str, str]:
    """Each task's last line, by its template."""
    lines = [line for line in err.splitlines() if "stopped: " in line]
    return {line.split("] ")[1].split(" 1x")[0]: line for line in lines}


@pytest.mark.slow
def test_each_task_line_has_its_unit_and_stop_reason(conv_pool_onnx, tmp_path, cli):
    log = tmp_path / "t.jsonl"
    code, out, err = cli("tune", conv_pool_onnx, "--board", "host", "--trials", 4, "--log", log)
    assert code == 0, err
    lines = final_lines(err)
    assert re.search(
        rf"4/4 trials  best {NUMBER} GFLOP/s  stopped: trials exhausted \(4 of 4\)$",
        lines["conv2d_nchwc"],
    )
    for tile in (2, 4):
        line = lines[f"conv2d_winograd_nchwc F{tile}x{tile}"]
        # a wide-vector target may have fewer Winograd settings than trials
        stop = r"(trials exhausted \(4 of 4\)|space exhausted \(all [1-3] configs measured\))"
        assert re.search(rf"best {NUMBER} effective GFLOP/s  stopped: {stop}$", line)
    pool = lines["max_pool_nchwc"]
    # A max pool does no arithmetic: its speed is its memory traffic.
    assert re.search(rf"best {NUMBER} GB/s  stopped: ", pool) and "GFLOP" not in pool
    assert "best 0.00" not in pool
    assert re.search(r"stopped: (space exhausted \(all \d+ configs measured\)|trials exh)", pool)
    table = out.splitlines()
    assert table[0].split() == [
        "task", "weight", "trials", "default", "best", "unit", "speed-up", "stopped"
    ]  # fmt: skip
    (pool_row,) = [row for row in table if row.startswith("max_pool_nchwc")]
    assert " GB/s " in pool_row


@pytest.mark.slow
def test_early_stop_and_time_limit_are_named(conv_pool_onnx, tmp_path):
    board = load_board("host")
    stream = io.StringIO()
    opts = Options(trials=200, early_stopping=1, batch=8)
    tune_model(
        str(conv_pool_onnx),
        board,
        opts,
        tmp_path / "a.jsonl",
        settings=FAST,
        progress=Progress(stream),
        algorithms=["direct"],
    )
    # With a patience of one trial, a batch whose last trial is not the best ends the task.
    (conv,) = [line for line in stream.getvalue().splitlines() if "stopped:" in line][:1]
    assert conv.endswith("stopped: early stop: no improvement in 1 trials"), conv

    stream = io.StringIO()
    opts = Options(trials=200, batch=8)
    tune_model(
        str(conv_pool_onnx),
        board,
        opts,
        tmp_path / "b.jsonl",
        time_budget_min=0.5 / 60,
        settings=FAST,
        progress=Progress(stream),
        algorithms=["direct"],
    )
    lines = stream.getvalue().splitlines()
    assert [line for line in lines if "stopped:" in line][0].endswith("stopped: time limit")
    assert "time limit: 1 of 2 tasks not tuned" in lines


@pytest.mark.slow
def test_an_interrupted_run_says_so(conv_pool_onnx, tmp_path):
    log = tmp_path / "t.jsonl"
    cmd = [sys.executable, "-m", "packager.cli", "tune", str(conv_pool_onnx), "--board", "host"]
    cmd += ["--trials", "500", "--log", str(log)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(
        cmd,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=sigint_default_in_child,
    )
    first = p.stderr.readline()  # the first batch of the first task is measured
    assert first.startswith("[1/4] "), first
    time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130
    assert (
        f"interrupted: 0 of 4 tasks tuned; every measurement is in {log}, running again resumes"
    ) in err
    assert err.rstrip().endswith("interrupted")
