"""Unit tests of the tuner's pieces: space indexing, logs, features, the cost model."""

from __future__ import annotations

import json

import numpy as np

from packager.boards import load_board
from packager.ops.knobs import Knob
from packager.tune.features import features, knob_features
from packager.tune.log import TuningLog, cost, measured, read_records
from packager.tune.model import CostModel
from packager.tune.run import model_tasks
from packager.tune.search import model_batch, neighbours
from packager.tune.space import ConfigSpace, space_of, valid


def test_space_index_round_trips():
    space = ConfigSpace(
        [
            Knob("a", (1, 2, 4), 2),
            Knob("b", (True, False), True),
            Knob("c", ((0, 1), (1, 0)), (0, 1)),
        ]
    )
    assert space.size == 12
    seen = {json.dumps(space.get(i)) for i in range(space.size)}
    assert len(seen) == 12
    for i in range(space.size):
        assert space.index_of(space.get(i)) == i
        assert space.from_digits(space.digits(i)) == i
    # a setting read back from JSON (tuples became lists) still finds its index
    assert space.index_of(json.loads(json.dumps(space.get(7)))) == 7
    assert space.index_of({"a": 3}) is None
    assert space.get(space.default_index()) == {"a": 2, "b": True, "c": (0, 1)}


def _record(i, costs, error=None, key="k"):
    return {
        "version": 1,
        "board": {"name": "host", "cpu": "native", "arch": "x86_64"},
        "task": {"template": "t", "key": key, "flops": 1.0},
        "config": {"index": i, "knobs": {"x": i}},
        "result": {"costs": costs, "error": error, "timestamp": 0},
    }


def test_log_appends_whole_records_and_skips_a_broken_line(tmp_path, capsys):
    log = TuningLog(tmp_path / "sub" / "t.jsonl")
    log.append(_record(0, [3.0, 1.0, 2.0]))
    log.append(_record(1, [], "wrong_answer"))
    with open(log.path, "a") as f:
        f.write('{"version": 1, "board": ')  # what a dead disk could leave
    log.append(_record(2, [0.5], key="other"))
    recs = read_records(log.path)
    assert [r["config"]["index"] for r in recs] == [0, 1, 2]
    assert "not a complete record" in capsys.readouterr().err
    assert cost(recs[0]) == 2.0 and cost(recs[1]) == float("inf")
    assert sorted(measured(recs, "host", "k")) == [0, 1]


def test_features_see_the_schedule(conv_onnx):
    (task,) = [
        t for t in model_tasks(str(conv_onnx), load_board("host")) if t.template == "conv2d_nchwc"
    ]
    space = space_of(task)
    assert space.size > 1
    picks = np.random.default_rng(0).choice(space.size, 150, replace=False)
    prims = [valid(task, space.get(int(i))) for i in picks]
    feats = [features(p) for p in prims if p is not None]
    assert len(feats) > 100
    assert len({f.shape for f in feats}) == 1
    assert all(np.isfinite(f).all() for f in feats)
    assert len({f.tobytes() for f in feats}) > len(feats) // 2  # schedules differ, so do they


def test_knob_features_encode_values():
    space = ConfigSpace(
        [
            Knob("tile_a", (1, 2, 4), 2),
            Knob("v", (True, False), True),
            Knob("order", (("x", "y"), ("y", "x"), ("y", "z")), ("x", "y")),
            Knob("tile_b", (1, 7), 7),
        ]
    )
    f = knob_features(space, space.digits(space.index_of({"tile_a": 4, "order": ("y", "z")})))
    # log2(4 + 1), yes, one slot per order, log2(7 + 1), then log2 of the tile (4 x 7)
    np.testing.assert_allclose(f, [np.log2(5), 1, 0, 0, 1, 3, np.log2(28)], rtol=1e-6)


def test_cost_model_ranks_better_than_chance():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (400, 6)).astype(np.float32)
    costs = 1 + 3 * (x[:, 0] - 0.3) ** 2 + x[:, 1] * x[:, 2] + 0.05 * rng.standard_normal(400)
    model = CostModel()
    model.fit(x[:200], costs[:200])
    score = model.predict(x[200:])
    c = costs[200:]
    i, j = np.triu_indices(len(c), 1)
    agree = np.mean((score[i] > score[j]) == (c[i] < c[j]))  # higher score = faster
    assert agree > 0.75


def test_model_batch_takes_the_best_one_knob_changes_of_the_best():
    space = ConfigSpace([Knob("a", (1, 2, 4, 8), 1), Knob("b", (0, 1, 2), 0), Knob("c", (0, 1), 0)])
    best = space.index_of({"a": 2, "b": 1, "c": 0})
    near = neighbours(space, best)
    assert len(near) == 3 + 2 + 1
    d = space.digits(best)
    assert all(sum(x != y for x, y in zip(d, space.digits(j), strict=True)) == 1 for j in near)
    want = space.index_of({"a": 4, "b": 1, "c": 0})

    def score(indices):  # the model likes one neighbour of the best most
        return np.array([10.0 if i == want else 0.0 for i in indices])

    batch = model_batch(space, {best}, 4, np.random.default_rng(0), score=score, top=[best])
    assert batch[0] == want and len(set(batch)) == 4 and best not in batch
