"""The model check: the default and the tuned build of the model run on the board in turns,
and a kernel whose tuned schedule was not faster there keeps its default."""

from __future__ import annotations

import json

import onnx
import pytest

from packager.boards import load_board
from packager.errors import PackagerError
from packager.package import package_compiled
from packager.tune.log import (
    FLUSHED,
    PRODUCED,
    SLOWER,
    TuningLog,
    choose,
    make_record,
    read_records,
)
from packager.tune.model_check import check_in_model
from packager.tune.run import model_tasks
from packager.tune.space import space_of, valid

from .test_tune_host import direct_task
from .test_tune_opencl import two_convs


def _confirmed(log, board, task, index, seconds):
    space = space_of(task)
    extra = {"confirm": True, "caches": FLUSHED, "inputs": PRODUCED}
    for _ in range(3):
        log.append(
            make_record(board, task, index, space.get(index), [seconds] * 3, None, extra=extra)
        )


def _slow_config(task) -> int:
    """A config far slower than the default: no vectors, one column per tile, one thread."""
    space = space_of(task)
    knobs = {**space.get(space.default_index()), "vectorize_oc": False, "parallel": "none"}
    knobs["tile_ow"] = 1
    index = space.index_of(knobs)
    assert index is not None and valid(task, space.get(index)) is not None
    return index


def _conv_source(conv_onnx, board, out, log_path) -> str:
    _, compiled = package_compiled(
        str(conv_onnx), board, str(out), selftest=False, tuning_logs=[log_path]
    )
    (kernel,) = [k for k in compiled.kernels if "conv2d" in k.func]
    return kernel.source


def test_a_config_slower_in_the_model_keeps_the_default(conv_onnx, tmp_path):
    """Records that say a scalar single-thread config beat the default (a lucky search):
    run in the model it is slower, so the check rejects it and the build goes back to the
    default's code."""
    board = load_board("host")
    task = direct_task(conv_onnx, board)
    space = space_of(task)
    log = TuningLog(tmp_path / "t.jsonl")
    slow = _slow_config(task)
    _confirmed(log, board, task, slow, 1e-9)
    _confirmed(log, board, task, space.default_index(), 1.0)
    assert choose(read_records(log.path))["config"]["index"] == slow
    default_code = _conv_source(conv_onnx, board, tmp_path / "d", tmp_path / "none.jsonl")
    assert _conv_source(conv_onnx, board, tmp_path / "a", log.path) != default_code

    lines: list[str] = []
    tasks = model_tasks(str(conv_onnx), board)
    rejected = check_in_model(str(conv_onnx), board, log.path, tasks, note=lines.append)

    assert len(rejected) == 1 and rejected[0].startswith("k_1_conv2d_nchwc_relu (conv2d_nchwc ")
    assert (
        lines[0] == "model check: building the model with the default and with the tuned schedules"
    )
    assert lines[1] == "model check: running both on host in turns, 5 rounds (1 kernel differs)"
    assert lines[2].startswith("model check: 0 of 1 tuned kernels ran faster than their default")
    assert lines[2].endswith("; 1 keep the default") and lines[3].startswith(
        "  keeps the default: k_1"
    )
    last = read_records(log.path)[-1]
    assert last["config"]["index"] == slow and last["result"]["error"] == SLOWER
    assert last["result"]["confirm"] and "ms in the model, its default" in last["result"]["message"]
    assert last["result"]["inputs"] == PRODUCED and last["result"]["costs"] == []
    # the build keeps the default's code now; the default's rounds are the ones chosen
    assert _conv_source(conv_onnx, board, tmp_path / "b", log.path) == default_code
    assert choose(read_records(log.path))["config"]["index"] == space.default_index()


def test_nothing_to_compare_when_the_records_choose_the_defaults(conv_onnx, tmp_path):
    board = load_board("host")
    task = direct_task(conv_onnx, board)
    log = TuningLog(tmp_path / "t.jsonl")
    _confirmed(log, board, task, space_of(task).default_index(), 1e-4)
    before = log.path.read_bytes()
    lines: list[str] = []
    tasks = model_tasks(str(conv_onnx), board)
    assert check_in_model(str(conv_onnx), board, log.path, tasks, note=lines.append) == []
    assert lines[1:] == [
        "model check: no tuned kernel differs from its default; nothing to compare"
    ]
    assert log.path.read_bytes() == before  # nothing appended


def test_tune_runs_the_model_check_unless_told_not_to(conv_onnx, tmp_path, cli):
    log = tmp_path / "t.jsonl"
    args = ("tune", conv_onnx, "--board", "host", "--trials", 4, "--log", log)
    code, _, err = cli(*args, "--no-model-check")
    assert code == 0, err
    assert "model check" not in err
    code, _, err = cli(*args)
    assert code == 0, err
    checked = [line for line in err.splitlines() if line.startswith("model check: ")]
    assert checked, err
    records = [json.loads(line) for line in log.read_text().splitlines()]
    rejected = {r["task"]["key"] for r in records if r["result"]["error"] == SLOWER}
    if checked[-1].startswith("model check: no tuned kernel differs"):
        assert not rejected
    else:  # which kernels keep the default is the board's call; the log says the same
        assert checked[-1].endswith(f"; {len(rejected)} keep the default"), err


def test_a_bundle_that_fails_on_the_board_stops_the_check_and_names_it(
    conv_onnx, tmp_path, monkeypatch
):
    """run_bundle refusing to run (here a malformed thread count in its environment) is an
    error naming the model check and the log; nothing is appended to the log."""
    board = load_board("host")
    task = direct_task(conv_onnx, board)
    log = TuningLog(tmp_path / "t.jsonl")
    _confirmed(log, board, task, _slow_config(task), 1e-9)
    _confirmed(log, board, task, space_of(task).default_index(), 1.0)
    before = log.path.read_bytes()
    monkeypatch.setenv("PACKAGER_NUM_THREADS", "two")
    tasks = model_tasks(str(conv_onnx), board)
    with pytest.raises(PackagerError) as e:
        check_in_model(str(conv_onnx), board, log.path, tasks, note=lambda line: None)
    assert str(e.value).startswith("model check: ") and "run_bundle failed" in str(e.value)
    assert "PACKAGER_NUM_THREADS='two'" in str(e.value) and str(log.path) in str(e.value)
    assert log.path.read_bytes() == before


def test_a_gpu_kernel_slower_in_the_model_keeps_the_default(tmp_path):
    """The same on a board with a GPU (host-opencl: this machine's PoCL device): records
    that say a scalar one-column config of the first conv beat the default; run in the
    model it is slower, and the build's OpenCL kernel goes back to the default's."""
    board = load_board("host-opencl")
    path = tmp_path / "two_convs.onnx"
    onnx.save(two_convs(), path)
    tasks = model_tasks(str(path), board)
    task = next(t for t in tasks if t.family == "opencl" and t.template == "conv2d_nchwc")
    space = space_of(task)
    knobs = {**space.get(space.default_index()), "tile_oc": 1, "tile_ow": 1, "vector": 1}
    slow = space.index_of({**knobs, "unroll_rci": 1})
    log = TuningLog(tmp_path / "t.jsonl")
    for index, seconds in ((slow, 1e-9), (space.default_index(), 1.0)):
        for _ in range(3):
            rec = make_record(board, task, index, space.get(index), [seconds] * 3, None)
            rec["result"]["confirm"] = True
            log.append(rec)

    def gpu_kernel(out):
        _, compiled = package_compiled(str(path), board, str(out), tuning_logs=[log.path])
        first = next(k for k in compiled.kernels if k.device == "opencl" and k.key == task.key)
        return first.source, first.launch

    _, base = package_compiled(str(path), board, str(tmp_path / "d"), records=False)
    base_kernel = next(k for k in base.kernels if k.device == "opencl" and k.key == task.key)
    default = (base_kernel.source, base_kernel.launch)
    assert gpu_kernel(tmp_path / "a") != default

    lines: list[str] = []
    rejected = check_in_model(str(path), board, log.path, tasks, note=lines.append)
    assert len(rejected) == 1 and ", opencl): " in rejected[0], lines
    last = read_records(log.path)[-1]
    assert last["result"]["error"] == SLOWER and last["config"]["index"] == slow
    assert last["target"]["family"] == "opencl" and "caches" not in last["result"]
    assert gpu_kernel(tmp_path / "b") == default
