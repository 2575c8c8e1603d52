"""Tuning on the host board: a short tune writes a valid log that the next build applies,
and a run stopped mid-way resumes without measuring a config twice."""

from __future__ import annotations

import json

import pytest

from packager.boards import load_board
from packager.codegen.c import codegen_c
from packager.runner import selftest_local
from packager.tune.log import TuningLog, choose, confirming, cost
from packager.tune.measure import Measurer, Settings
from packager.tune.run import model_tasks
from packager.tune.space import space_of
from packager.tune.tasks import lower_config
from packager.tune.tuner import Options, tune_task

FAST = Settings(min_seconds=0.002, samples=3)


def direct_task(model, board):
    """The model's one conv, in its direct form (its Winograd forms are tasks too)."""
    (task,) = [t for t in model_tasks(str(model), board) if t.template == "conv2d_nchwc"]
    return task


def _conv_kernel(bundle):
    (src,) = [p for p in (bundle / "kernels").glob("*conv2d_nchwc*.c")]
    return src.read_text()


@pytest.mark.slow
def test_tune_writes_a_log_the_next_build_applies(conv_onnx, tmp_path, cli):
    log = tmp_path / "conv.jsonl"
    # The model check (test_model_check.py) may append a failed confirm round for each
    # confirmed config when, on a noisy machine, the tuned kernel ran no faster in the
    # model: this test counts the search's and the confirm rounds' records only.
    code, out, err = cli(
        "tune", conv_onnx, "--board", "host", "--trials", 16, "--log", log, "--no-model-check"
    )
    assert code == 0, err
    assert "model check" not in err
    assert "conv2d_nchwc" in out and "trials exhausted (16 of 16)" in out
    assert "16/16 trials  best " in err
    lines = log.read_text().splitlines()
    direct = [json.loads(line) for line in lines]
    direct = [r for r in direct if r["task"]["template"] == "conv2d_nchwc"]
    # 16 valid measurements of the direct form in the search (failed configs are logged,
    # not trials), then the confirm rounds of its fastest and default configs, and the
    # chosen one measured once more beside the Winograd forms' (test_tune_algorithms.py)
    ok = [r["config"]["index"] for r in direct if cost(r) < float("inf") and not confirming(r)]
    assert len(ok) == 16 and len(set(ok)) == 16
    confirms = [r["config"]["index"] for r in direct if confirming(r)]
    assert set(confirms) <= set(ok) and len(confirms) == 3 * len(set(confirms)) + 1
    for rec in map(json.loads, lines):
        assert {"version", "board", "task", "config", "result"} <= set(rec)
        assert rec["board"]["name"] == "host"
        assert rec["result"]["error"] in (None, "invalid", "compile_error", "wrong_answer")
    best = choose(direct)
    # Keep the direct form's records only: the build would take a faster Winograd form.
    log.write_text("".join(json.dumps(r) + "\n" for r in direct))

    code, _, err = cli("build", conv_onnx, "--board", "host", "-o", tmp_path / "plain")
    assert code == 0 and "1 of 1 tunable kernels use default schedules" in err
    code, _, err = cli(
        "build", conv_onnx, "--board", "host", "-o", tmp_path / "tuned", "--tuning-log", log
    )
    assert code == 0 and "1 of 1 tunable kernels use tuned schedules" in err
    task = direct_task(conv_onnx, load_board("host"))
    knobs = space_of(task).get(best["config"]["index"])
    tuned_src = _conv_kernel(tmp_path / "tuned")
    name = tuned_src.split("int32_t ")[-1].split("(")[0]
    assert codegen_c(lower_config(task, knobs, name)) in tuned_src  # the best record's kernel
    if knobs != space_of(task).get(space_of(task).default_index()):
        assert tuned_src != _conv_kernel(tmp_path / "plain")
    assert selftest_local(tmp_path / "tuned", load_board("host")).returncode == 0


class _Killed(Exception):
    pass


class _DiesAfter(Measurer):
    """Measures ``left`` configs, then dies as a killed run would (between records)."""

    def __init__(self, board, left: int):
        super().__init__(board, FAST)
        self.left = left

    def measure(self, task, batch):
        if self.left <= 0:
            raise _Killed
        batch = batch[: self.left]
        self.left -= len(batch)
        return super().measure(task, batch)


def test_a_stopped_tune_resumes(conv_onnx, tmp_path):
    board = load_board("host")
    task = direct_task(conv_onnx, board)
    log = TuningLog(tmp_path / "t.jsonl")
    opts = Options(trials=12, batch=4, tuner="random")
    with pytest.raises(_Killed):
        tune_task(task, _DiesAfter(board, 6), log, opts)
    first = [r["config"]["index"] for r in log.records()]
    assert len(first) == 6
    res = tune_task(task, Measurer(board, FAST), log, opts)
    search = [r for r in log.records() if not confirming(r)]
    indices = [r["config"]["index"] for r in search]
    assert indices[:6] == first
    assert len(indices) == len(set(indices))
    assert sum(cost(r) < float("inf") for r in search) == 12 == res.trials
