"""The confirm rounds: a search measures each config once, so a quiet moment can make a
slow config look fastest. At the end of a task its fastest configs and the default are
measured again, side by side, and the build takes the lowest median of those rounds."""

from __future__ import annotations

import json
from dataclasses import replace

import onnx
import pytest

from packager.boards import load_board
from packager.package import compile_model
from packager.tune.apply import Tuning
from packager.tune.log import (
    CONFIRM_ROUNDS,
    FLUSHED,
    PRODUCED,
    TuningLog,
    choose,
    confirming,
    cost,
    make_record,
    read_records,
)
from packager.tune.measure import Measurement
from packager.tune.space import space_of, valid
from packager.tune.tuner import Options, tune_task

from .test_tune_host import direct_task


def _true_cost(i: int) -> float:
    """Config i's time: 1 + i % 7 ms, and i ns more, so no two configs tie (with ties
    the winner would hang on which configs a search happened to draw)."""
    return 1e-3 * (1 + i % 7) + 1e-9 * i


class _Lucky:
    """Answers without the board: config i takes _true_cost(i) (a config the template
    refuses is an error, as on the board), except the second valid config the search
    asks for, whose first measurement came at a quiet moment (1 us) and every
    later one at its true 9 ms."""

    def __init__(self, board):
        self.board = board
        self.batches: list[list[int]] = []
        self.lucky: int | None = None

    def measure(self, task, batch):
        # a config the template refuses is an error, as on the board: no kernel to time
        batch_ok = [(i, k) for i, k in batch if valid(task, k) is not None]
        self.batches.append([i for i, _ in batch_ok])
        asked = [i for b in self.batches for i in b]
        if self.lucky is None and len(asked) >= 2:
            self.lucky = asked[1]
        out = [Measurement(i, k, [], error="invalid") for i, k in batch if (i, k) not in batch_ok]
        for i, knobs in batch_ok:
            if i == self.lucky:
                seconds = 1e-6 if asked.count(i) == 1 else 9e-3
            else:
                seconds = _true_cost(i)
            out.append(
                Measurement(i, knobs, [seconds] * 3, extra={"caches": FLUSHED, "inputs": PRODUCED})
            )
        return out


def _tune(conv_onnx, log, stub=None, board=None):
    board = board or load_board("host")
    task = direct_task(conv_onnx, board)
    stub = stub or _Lucky(board)
    res = tune_task(task, stub, log, Options(trials=8, batch=4, tuner="random"))
    return task, stub, res


def test_a_lucky_measurement_does_not_win(conv_onnx, tmp_path):
    log = TuningLog(tmp_path / "t.jsonl")
    task, stub, res = _tune(conv_onnx, log)
    space = space_of(task)
    search = [r for r in log.records() if not confirming(r) and not r["result"]["error"]]
    assert len(search) == 8
    lucky = min(search, key=cost)
    assert lucky["config"]["index"] == stub.lucky and cost(lucky) == 1e-6
    # the three fastest of the search and the default, three rounds each, in a new order
    # each round
    rounds = stub.batches[-CONFIRM_ROUNDS:]
    top = sorted(search, key=lambda r: (cost(r), r["config"]["index"]))[:3]
    picks = {r["config"]["index"] for r in top} | {space.default_index()}
    assert all(set(b) == picks for b in rounds)
    assert len({b[0] for b in rounds}) == CONFIRM_ROUNDS
    confirms = [r for r in log.records() if confirming(r)]
    assert sorted(r["config"]["index"] for r in confirms) == sorted([*picks] * CONFIRM_ROUNDS)
    # the lucky config measured 9 ms in every round: the next fastest wins
    want = min(picks - {stub.lucky}, key=_true_cost)
    assert res.best_index == want and res.best_cost == _true_cost(want)
    assert res.default_cost == _true_cost(space.default_index())
    chosen = choose(log.records())
    assert chosen["config"]["index"] == want and cost(chosen) == res.best_cost


def test_a_resumed_run_measures_nothing_again(conv_onnx, tmp_path):
    log = TuningLog(tmp_path / "t.jsonl")
    _, _, first = _tune(conv_onnx, log)
    n = len(log.records())
    task, stub, again = _tune(conv_onnx, log)
    assert stub.batches == [] and len(log.records()) == n
    assert again.best_index == first.best_index and again.best_cost == first.best_cost


def test_records_never_confirmed_keep_the_default_until_tuned_again(conv_onnx, tmp_path, cli):
    """A log from before the confirm rounds: the build keeps the default schedule and
    says why; tuning again only runs the confirm rounds, and the build then applies it."""
    log = TuningLog(tmp_path / "t.jsonl")
    _tune(conv_onnx, log)
    old = [r for r in log.records() if not confirming(r)]
    log.path.write_text("".join(json.dumps(r) + "\n" for r in old))
    build = ("build", conv_onnx, "--board", "host", "--tuning-log", log.path, "-o")
    code, _, err = cli(*build, tmp_path / "a")
    assert code == 0 and "1 of 1 tunable kernels use default schedules" in err
    assert "1 of them have records never confirmed" in err and "tuning again" in err

    task, stub, res = _tune(conv_onnx, log)
    assert len(stub.batches) == CONFIRM_ROUNDS  # no new search
    code, _, err = cli(*build, tmp_path / "b", "--verbose")
    assert code == 0 and "1 of 1 tunable kernels use tuned schedules" in err, err
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["tuning"]["tuned"] == 1
    assert choose(read_records(log.path))["config"]["index"] == res.best_index


@pytest.mark.parametrize("cores", [2, 1])
def test_rounds_timed_before_the_inputs_were_produced_confirm_on_one_core_only(
    conv_onnx, tmp_path, cores
):
    """Confirm rounds from before the driver wrote the inputs again on the pool's threads:
    on a target of several cores the build keeps the default and says why, and tuning
    again runs the confirm rounds only; on one core they still count."""
    board = replace(load_board("host"), cores=cores)
    log = TuningLog(tmp_path / "t.jsonl")
    _tune(conv_onnx, log, board=board)
    old = log.records()
    for r in old:
        r["result"].pop("inputs", None)
    log.path.write_text("".join(json.dumps(r) + "\n" for r in old))

    def build():
        tuning = Tuning(board, [log.path])
        compile_model(onnx.load(conv_onnx), board, tuning=tuning)
        return tuning.report("tune")

    if cores == 1:
        assert build() == ["1 of 1 tunable kernels use tuned schedules"]
        return
    head, why = build()
    assert head.startswith("1 of 1 tunable kernels use default schedules")
    assert why.startswith("1 of them have records never confirmed as the tuner times today")
    _, stub, res = _tune(conv_onnx, log, board=board)
    assert len(stub.batches) == CONFIRM_ROUNDS  # no new search
    assert build() == ["1 of 1 tunable kernels use tuned schedules"]
    assert choose(read_records(log.path))["config"]["index"] == res.best_index


def test_a_config_that_failed_a_round_is_not_chosen(conv_onnx):
    board = load_board("host")
    task = direct_task(conv_onnx, board)
    space = space_of(task)

    def rec(i, seconds, error=None):
        costs = [] if error else [seconds]
        extra = {"confirm": True, "caches": FLUSHED, "inputs": PRODUCED}
        return make_record(board, task, i, space.get(i), costs, error, extra=extra)

    fast_but_flaky = [rec(1, 1e-4), rec(1, 1e-4), rec(1, 0, "wrong_answer")]
    steady = [rec(2, 3e-4), rec(2, 2e-4), rec(2, 9e-4)]
    chosen = choose([*fast_but_flaky, *steady])
    assert chosen["config"]["index"] == 2 and cost(chosen) == 3e-4  # the median
    assert choose([make_record(board, task, 3, space.get(3), [1e-5], None)]) is None
    hot = make_record(board, task, 3, space.get(3), [1e-5], None, extra={"confirm": True})
    assert choose([hot]) is None  # confirmed with the caches warm: no evidence


def test_simulated_cycles_need_no_confirm_rounds(conv_onnx):
    board = load_board("host")
    task = direct_task(conv_onnx, board)
    space = space_of(task)
    recs = [make_record(board, task, i, space.get(i), [c], None) for i, c in [(1, 2.0), (2, 1.0)]]
    for r in recs:
        r["target"] = {"family": "accel"}
    assert choose(recs)["config"]["index"] == 2
