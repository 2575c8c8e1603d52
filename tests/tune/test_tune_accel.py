"""Tuning the accelerator's tiles on accel-sim: each accelerator node is a task of the
board's AccelTarget, its candidates cost the behavioural simulator's cycles at the
profile's clock, a tiling that does not fit is an error record saying why, and a build
with the log runs the tuned programs and still gives the untuned bundle's bytes."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re

import numpy as np
import onnx
import pytest

from packager.accel.simulator import Simulator
from packager.boards import load_board
from packager.frontend.importer import load_model
from packager.lowering import ACCEL_OPS, kernel_key, lower_accel
from packager.package import prepare_graph
from packager.target import AccelTarget
from packager.tune.features import feature_length, features
from packager.tune.log import TuningLog, cost, make_record, read_records
from packager.tune.measure import Measurer, _differs, accel_arrays
from packager.tune.run import model_tasks
from packager.tune.space import space_of, valid
from packager.tune.tuner import Options, tune_task
from tests.accel.test_place_accel import quantized_resnet

BOARD = "accel-sim"
TRIALS = 4


@pytest.fixture(scope="module")
def board():
    return load_board(BOARD)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    """A small quantized ResNet (blocks 1-1, width 16, 32x32): six accelerator convs
    (7x7 stem, 3x3, a stride-2 3x3 and its 1x1 shortcut) and the classifier's dense."""
    path = tmp_path_factory.mktemp("accel-tune") / "qres.onnx"
    onnx.save(quantized_resnet("uint8", blocks=(1, 1), width=16, size=32), path)
    return path


@pytest.fixture(scope="module")
def tuned(model_path, board):
    """``packager tune`` with a handful of trials: (exit code, stdout, stderr, log)."""
    from packager.cli import main

    log = model_path.parent / "qres.jsonl"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["tune", str(model_path), "--board", BOARD, "--trials", str(TRIALS),
                     "--log", str(log)])  # fmt: skip
    return code, out.getvalue(), err.getvalue(), log


def accel_tasks(model_path, board):
    return [t for t in model_tasks(str(model_path), board) if t.family == "accel"]


def graph_of(model_path, board):
    graph, plan = prepare_graph(load_model(str(model_path)), board, None, str(model_path))
    return graph, plan


def test_accel_nodes_are_tasks_of_the_accel_target(model_path, board):
    graph, plan = graph_of(model_path, board)
    accel_keys = {
        kernel_key(n, graph, plan.inplace.get(k, ()))
        for k, n in enumerate(graph.nodes)
        if n.op in ACCEL_OPS
    }
    tasks = model_tasks(str(model_path), board)
    on_accel = [t for t in tasks if t.family == "accel"]
    assert {t.key for t in on_accel} == accel_keys and len(accel_keys) >= 6
    target = AccelTarget.of(board)
    assert all(t.target == target and t.template in ACCEL_OPS for t in on_accel)
    assert {t.template for t in on_accel} == set(ACCEL_OPS)
    others = [t for t in tasks if t.family != "accel"]
    assert others and all(t.family == "cpu" for t in others)  # no GPU on this board
    knobs = {k.name for k in space_of(on_accel[0]).knobs}
    assert knobs == {"tile_oc", "tile_oh", "tile_ow", "tile_ic", "vthreads"}

    # flops: two per multiply-accumulate, as the simulator counts them
    sim = Simulator(target.config())
    for t in on_accel:
        program = lower_accel(t.node, t.graph, "k", target).program
        run = sim.run(program, accel_arrays(t))
        assert t.flops == 2 * run.macs > 0, t.label


def test_records_cost_the_simulators_cycles_at_the_profiles_clock(tuned, model_path, board):
    code, out, err, log = tuned
    assert code == 0, err
    recs = [r for r in read_records(log) if r["target"]["family"] == "accel"]
    fingerprint = AccelTarget.of(board).fingerprint()
    assert recs and all(r["target"] == fingerprint for r in recs)
    assert all(r["result"]["measured_by"] == "simulator" for r in recs)
    good = [r for r in recs if math.isfinite(cost(r))]
    assert len({r["task"]["key"] for r in good}) >= 6
    clock = board.accel.clock_mhz * 1e6
    for r in good:
        assert r["result"]["costs"] == [r["result"]["cycles"] / clock]

    # one record again, independently: the build's lowering of that node with the
    # record's knobs, run on the simulator
    graph, plan = graph_of(model_path, board)
    rec = max(good, key=lambda r: r["task"]["flops"])
    by_key = {kernel_key(n, graph, plan.inplace.get(k, ())): n for k, n in enumerate(graph.nodes)}
    node = by_key[rec["task"]["key"]]
    target = AccelTarget.of(board)
    program = lower_accel(node, graph, "k", target, rec["config"]["knobs"]).program
    args = [np.zeros(graph.values[v].shape, graph.values[v].dtype)
            for v in [*node.inputs, *node.outputs]]  # fmt: skip
    run = Simulator(target.config()).run(program, args)
    assert cost(rec) == run.cycles / (target.clock_mhz * 1e6)

    # the tuner measures the default first: the best is never worse
    for key in {r["task"]["key"] for r in good}:
        mine = [r for r in good if r["task"]["key"] == key]
        task = next(t for t in accel_tasks(model_path, board) if t.key == key)
        default = space_of(task).default_index()
        (first,) = [r for r in mine if r["config"]["index"] == default]
        assert min(map(cost, mine)) <= cost(first)


def test_the_summary_shows_the_accel_tasks(tuned):
    code, out, err, _ = tuned
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.startswith("accel_")]
    assert len(rows) >= 7 and any(r.startswith("accel_dense") for r in rows)
    stem = next(r for r in rows if "x7x1x16x16" in r)  # its 7 taps across are channels
    assert "GFLOP/s" in stem and f"trials exhausted ({TRIALS} of {TRIALS})" in stem
    assert re.search(rf"accel_conv2d .*\| {TRIALS}/{TRIALS} trials  best [1-9][\d.]* GFLOP/s", err)


def test_a_tiling_that_does_not_fit_is_an_error_record_naming_the_buffer(model_path, board):
    task = max(accel_tasks(model_path, board), key=lambda t: t.flops)  # the 7x7 stem
    space = space_of(task)
    widest = {k.name: max(k.candidates) for k in space.knobs}  # every tile whole, 2 threads
    index = space.index_of(widest)
    (m,) = Measurer(board).measure(task, [(index, widest)])
    rec = make_record(board, task, m.index, m.knobs, m.costs, m.error, m.device, m.extra)
    assert rec["result"]["error"] == "invalid" and cost(rec) == math.inf
    assert re.search(r"does not fit: inp buffer: the tiling needs \d+ tiles, the accelerator "
                     r"has 2048", rec["result"]["message"]), rec["result"]  # fmt: skip
    assert rec["result"]["measured_by"] == "simulator"


def test_outputs_other_than_the_defaults_are_a_wrong_answer():
    want = [np.arange(-8, 8, dtype=np.int8).reshape(1, 16)]
    assert _differs([w.copy() for w in want], want) == ""
    got = [want[0].copy()]
    got[0][0, 3] = 90  # a byte the candidate left unwritten (the fill)
    assert _differs(got, want) == "output 0 differs from the default schedule's in 1 of 16 bytes"


def test_loop_features_of_accel_candidates_train_the_model(model_path, board, tmp_path):
    task = max(accel_tasks(model_path, board), key=lambda t: t.flops)
    space = space_of(task)
    picked = [i for i in range(0, space.size, 3) if space.get(i)["vthreads"] == 1 or i % 2]
    # the settings that fit the buffers (space.valid: None for one refused at lowering)
    prims = [p for i in picked if (p := valid(task, space.get(i), f"c{i}")) is not None]
    assert len(prims) >= 8
    feats = np.stack([features(p, "accel") for p in prims])
    assert feats.shape[1] == feature_length("accel") > feature_length("cpu")
    extra = feats[:, feature_length("cpu") :]
    assert len({tuple(row) for row in extra}) > len(prims) // 2  # tiles, threads, DMA differ

    # the tuner with loop features: its XGBoost model fits on them after the first batch
    # and ranks the second batch's candidates by them
    log = TuningLog(tmp_path / "loop.jsonl")
    opts = Options(trials=8, batch=4, feature_kind="loop")
    res = tune_task(task, Measurer(board), log, opts)
    assert res.trials == 8 and res.best_cost <= res.default_cost < math.inf


def test_a_build_with_the_log_runs_the_tuned_programs_with_the_same_bytes(
    tuned, model_path, board, tmp_path, cli
):
    from packager.accel.program import read_programs

    code, _, err, log = tuned
    assert code == 0, err
    recs = read_records(log)
    tasks = {t.key: t for t in accel_tasks(model_path, board)}
    # Per accel task only its measured settings other than the default: the build can only
    # take a tuned one. The CPU tasks' records stay.
    kept = []
    for r in recs:
        task = tasks.get(r["task"]["key"]) if r["target"]["family"] == "accel" else None
        if task is None or r["config"]["index"] != space_of(task).default_index():
            kept.append(r)
    tuned_log = tmp_path / "tuned.jsonl"
    tuned_log.write_text("".join(json.dumps(r) + "\n" for r in kept))

    code, _, err = cli("build", model_path, "--board", BOARD, "-o", tmp_path / "plain")
    assert code == 0, err
    n = int(re.search(r"(\d+) of \1 tunable kernels use default schedules", err).group(1))
    assert n >= len(tasks)
    code, _, err = cli("build", model_path, "--board", BOARD, "-o", tmp_path / "tuned",
                       "--tuning-log", tuned_log)  # fmt: skip
    assert code == 0, err
    assert f"{n} of {n} tunable kernels use tuned schedules" in err, err
    manifest = json.loads((tmp_path / "tuned" / "manifest.json").read_text())
    assert manifest["tuning"]["tuned"] == n and manifest["tuning"]["default"] == 0

    plain = read_programs((tmp_path / "plain" / "kernels" / "program.accel").read_bytes())
    mine = read_programs((tmp_path / "tuned" / "kernels" / "program.accel").read_bytes())
    assert len(mine[1]) == len(plain[1]) == len(tasks)
    changed = [p.name for p, q in zip(mine[1], plain[1], strict=True) if p.insns != q.insns]
    assert changed, "no accelerator program changed with the tuned knobs"

    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32) * 40
    np.save(tmp_path / "x.npy", x)
    outs = {}
    for b in ("plain", "tuned"):
        res = tmp_path / f"res-{b}"
        code, _, err = cli("run", tmp_path / b, "--board", BOARD, "--input",
                           f"input={tmp_path / 'x.npy'}", "--output-dir", res)  # fmt: skip
        assert code == 0, err
        outs[b] = [np.load(p) for p in sorted(res.iterdir())]
    assert outs["plain"] and len(outs["plain"]) == len(outs["tuned"])
    for got, want in zip(outs["tuned"], outs["plain"], strict=True):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
