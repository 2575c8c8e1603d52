"""A tuning record holds for the code it timed. Each record carries its kernel's code and
its task's base (the code of the task's default config when it was measured): the build
leaves out records of kernels that have changed since and says so, takes the next best
confirmed config where the chosen one's own kernel changed, and a tune measures the
configs of changed kernels anew."""

from __future__ import annotations

import json

from packager.boards import load_board
from packager.codegen.c import codegen_c
from packager.tune.log import FLUSHED, PRODUCED, TuningLog, confirming, make_record
from packager.tune.measure import Measurement
from packager.tune.space import space_of, valid
from packager.tune.tasks import kernel_code, lower_config
from packager.tune.tuner import Options, tune_task

from .test_tune_host import direct_task

OLD = "0123456789abcdef"  # a code no kernel of this packager has


def _configs(task):
    """Two configs of the task other than its default, and the default, as indices."""
    space = space_of(task)
    default = space.default_index()
    others = (i for i in range(space.size) if i != default and valid(task, space.get(i)))
    return next(others), next(others), default


def _rounds(task, costs: dict, code: dict | None = None, base: str | None = None) -> list:
    """Three confirm rounds of each config in ``costs`` (index -> seconds); ``code`` and
    ``base`` replace what the records say of the kernels they timed."""
    space = space_of(task)
    out = []
    for _ in range(3):
        for i, seconds in costs.items():
            extra = {"confirm": True, "caches": FLUSHED, "inputs": PRODUCED}
            rec = make_record(task.board, task, i, space.get(i), [seconds] * 3, None, extra=extra)
            if code and i in code:
                rec["config"]["code"] = code[i]
            if base is not None:
                rec["task"]["base"] = base
            out.append(rec)
    return out


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _conv_source(bundle):
    (src,) = (bundle / "kernels").glob("*conv2d_nchwc*.c")
    return src.read_text()


def _kernel_of(task, knobs, bundle_source: str) -> str:
    name = bundle_source.split("int32_t ")[-1].split("(")[0]
    return codegen_c(lower_config(task, knobs, name))


def test_a_record_names_the_code_the_build_makes_of_its_config(conv_onnx, tmp_path, cli):
    task = direct_task(conv_onnx, load_board("host"))
    fast, _, default = _configs(task)
    log = _write(tmp_path / "t.jsonl", _rounds(task, {fast: 1e-4, default: 1e-3}))
    rec = json.loads(log.read_text().splitlines()[0])
    knobs = space_of(task).get(fast)
    assert rec["config"]["code"] == kernel_code(task, lower_config(task, knobs, "any_name"))
    assert rec["task"]["base"] == kernel_code(task, lower_config(task, None, "another"))
    assert rec["config"]["code"] != rec["task"]["base"]

    build = ("build", conv_onnx, "--board", "host", "--tuning-log", log, "-o", tmp_path / "b")
    code, _, err = cli(*build)
    assert code == 0 and "1 of 1 tunable kernels use tuned schedules" in err, err
    source = _conv_source(tmp_path / "b")
    assert _kernel_of(task, knobs, source) in source


def test_records_of_a_kernel_that_changed_since_are_left_out(conv_onnx, tmp_path, cli):
    """Measured when the task's default made other code (an older packager), or before
    records carried their code: the build keeps the default schedule and says why."""
    task = direct_task(conv_onnx, load_board("host"))
    fast, _, default = _configs(task)
    older = _rounds(task, {fast: 1e-4, default: 1e-3}, base=OLD)
    legacy = _rounds(task, {fast: 1e-4, default: 1e-3})
    for r in legacy:
        del r["config"]["code"], r["task"]["base"]
    for name, records in (("older", older), ("legacy", legacy)):
        log = _write(tmp_path / f"{name}.jsonl", records)
        out = tmp_path / name
        code, _, err = cli(
            "build", conv_onnx, "--board", "host", "--tuning-log", log, "-o", out, "-v"
        )
        assert code == 0 and "1 of 1 tunable kernels use default schedules" in err, err
        assert "1 of them have records measured on kernels that have changed since" in err
        assert "records measured on a kernel that has changed since (tune again)" in err
        default_knobs = space_of(task).get(default)
        source = _conv_source(out)
        assert _kernel_of(task, default_knobs, source) in source


def test_a_config_whose_own_kernel_changed_gives_way_to_the_next(conv_onnx, tmp_path, cli):
    task = direct_task(conv_onnx, load_board("host"))
    fast, next_, default = _configs(task)
    costs = {fast: 1e-4, next_: 2e-4, default: 1e-3}
    log = _write(tmp_path / "t.jsonl", _rounds(task, costs, code={fast: OLD}))
    code, _, err = cli(
        "build", conv_onnx, "--board", "host", "--tuning-log", log, "-o", tmp_path / "b"
    )
    assert code == 0 and "1 of 1 tunable kernels use tuned schedules" in err, err
    source = _conv_source(tmp_path / "b")
    assert _kernel_of(task, space_of(task).get(next_), source) in source


class _Counting:
    """Times config i at (1 + i % 5) ms without the board, and keeps what it was asked."""

    def __init__(self, board):
        self.board = board
        self.asked: list[int] = []

    def measure(self, task, batch):
        out = []
        for i, knobs in batch:
            self.asked.append(i)
            if valid(task, knobs) is None:
                out.append(Measurement(i, knobs, [], error="invalid"))
            else:
                seconds = 1e-3 * (1 + i % 5) + 1e-9 * i
                out.append(
                    Measurement(
                        i, knobs, [seconds] * 3, extra={"caches": FLUSHED, "inputs": PRODUCED}
                    )
                )
        return out


def test_a_tune_measures_the_configs_of_changed_kernels_anew(conv_onnx, tmp_path):
    board = load_board("host")
    task = direct_task(conv_onnx, board)
    log = TuningLog(tmp_path / "t.jsonl")
    opts = Options(trials=6, batch=3, tuner="random")
    tune_task(task, _Counting(board), log, opts)
    stub = _Counting(board)
    tune_task(task, stub, log, opts)
    assert stub.asked == []  # today's records: nothing to measure again

    for r in (records := log.records()):
        r["task"]["base"] = OLD
    _write(log.path, records)
    stub = _Counting(board)
    res = tune_task(task, stub, log, opts)
    assert res.trials == 6 and len(stub.asked) >= 6 + 3  # a search, then confirm rounds
    fresh = log.records()[len(records) :]
    assert {r["task"]["base"] for r in fresh} == {task.base_code}
    assert sum(confirming(r) for r in fresh) >= 3
