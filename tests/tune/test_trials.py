"""Trials are valid measurements: configs the template refuses, or that fail to compile,
crash or give a wrong answer, are logged but do not count, and a space where nothing is
valid still ends (after ``max_errors`` of them)."""

from __future__ import annotations

import numpy as np

from packager.boards import load_board
from packager.tune.log import TuningLog, cost
from packager.tune.measure import Measurement, Measurer, Settings
from packager.tune.run import model_tasks
from packager.tune.space import space_of
from packager.tune.tuner import Options, refused_limit, tune_task


class _Stub:
    """Answers without the board: every third config (by index) fails as ``error``,
    the rest cost a made-up time; ``all_fail`` fails everything, ``fail_first`` the
    first so many configs asked."""

    def __init__(self, board, error="compile_error", all_fail=False, fail_first=0):
        self.board, self.error, self.all_fail, self.fail_first = board, error, all_fail, fail_first
        self.asked: list[int] = []

    def measure(self, task, batch):
        out = []
        for i, knobs in batch:
            self.asked.append(i)
            if self.all_fail or i % 3 == 0 or len(self.asked) <= self.fail_first:
                out.append(Measurement(i, knobs, [], self.error))
            else:
                out.append(Measurement(i, knobs, [1e-3 * (1 + i % 17)]))
        return out


def _task(conv_onnx):
    board = load_board("host")
    (task,) = model_tasks(str(conv_onnx), board, algorithms=["direct"])
    return board, task


def test_invalid_configs_do_not_count_as_trials(conv_onnx, tmp_path):
    board, task = _task(conv_onnx)
    for tuner in ("random", "xgb", "ga"):
        log = TuningLog(tmp_path / f"{tuner}.jsonl")
        stub = _Stub(board)
        # errors allowed beyond the trials: a third of the configs fail here, and a wide
        # vector target's space refuses more tiles on top
        opts = Options(trials=20, batch=8, tuner=tuner, max_errors=200)
        res = tune_task(task, stub, log, opts)
        recs = [r for r in log.records() if not r["result"].get("confirm")]  # the search's
        good = [r for r in recs if np.isfinite(cost(r))]
        bad = [r for r in recs if not np.isfinite(cost(r))]
        assert len(good) == 20 == res.trials == len(res.history), tuner
        assert bad and res.errors == len(bad), tuner  # logged, not counted
        assert all(r["result"]["error"] == "compile_error" for r in bad)
        asked = stub.asked[: len(recs)]  # then the confirm rounds (test_confirm.py)
        assert len(set(asked)) == len(asked) == len(recs)  # nothing asked twice


def test_a_space_of_invalid_configs_still_ends(conv_onnx, tmp_path):
    board, task = _task(conv_onnx)
    log = TuningLog(tmp_path / "t.jsonl")
    res = tune_task(task, _Stub(board, all_fail=True), log, Options(trials=12, batch=5))
    assert res.trials == 0 and res.history == [] and res.best_index is None
    assert res.errors == 12 == len(log.records())  # max_errors defaults to the trials
    res = tune_task(
        task,
        _Stub(board, "wrong_answer", all_fail=True),
        TuningLog(tmp_path / "u.jsonl"),
        Options(trials=12, batch=5, max_errors=7, tuner="random"),
    )
    assert res.errors == 7 and res.trials == 0


def test_refused_configs_do_not_use_up_the_error_budget(conv_onnx, tmp_path):
    """More configs refused on the host than a short run has trials: the run still gets
    all its trials (the failures the board would see stay bounded by max_errors); a space
    the template refuses entirely ends after refused_limit."""
    board, task = _task(conv_onnx)
    res = tune_task(
        task, _Stub(board, "invalid", fail_first=10), TuningLog(tmp_path / "t.jsonl"),
        Options(trials=6, batch=4, tuner="random"),
    )  # fmt: skip
    assert res.trials == 6 and res.errors >= 10 and "trials exhausted" in res.stop_reason
    res = tune_task(
        task, _Stub(board, "invalid", all_fail=True), TuningLog(tmp_path / "u.jsonl"),
        Options(trials=2, batch=16, tuner="random"),
    )  # fmt: skip
    assert res.trials == 0 and res.errors == refused_limit(2) == 64
    assert res.stop_reason == "too many refused configs (64)"


def test_a_refused_config_is_logged_invalid_and_not_counted(conv_onnx, tmp_path):
    """The conv template refuses a register tile with too long an unrolled body; the
    real measurer says so without compiling it, and the tuner measures another."""
    board, task = _task(conv_onnx)
    space = space_of(task)
    knobs = {**space.get(space.default_index()), "tile_oh": 2, "unroll_rci": 8}
    tile_oc = next(k.candidates for k in space.knobs if k.name == "tile_oc")[-1]
    knobs.update(tile_ow=14, tile_oc=tile_oc)  # the widest tile: the most statements
    refused = space.index_of(knobs)
    (m,) = Measurer(board, Settings(min_seconds=0.001, samples=1)).measure(task, [(refused, knobs)])
    assert m.error == "invalid" and m.median == float("inf")

    class _AsksRefusedFirst(Measurer):
        def measure(self, task, batch):
            if not hasattr(self, "done"):
                self.done = True
                batch = [(refused, knobs), *batch[1:]]
            return super().measure(task, batch)

    log = TuningLog(tmp_path / "t.jsonl")
    meas = _AsksRefusedFirst(board, Settings(min_seconds=0.001, samples=1))
    res = tune_task(task, meas, log, Options(trials=4, batch=4, tuner="random"))
    errors = [r["result"]["error"] for r in log.records() if not r["result"].get("confirm")]
    # the refused config first (others may be refused too: wide vectors refuse more tiles)
    assert errors[0] == "invalid" and res.errors >= errors.count("invalid") >= 1
    assert res.trials == 4 == sum(e is None for e in errors)
