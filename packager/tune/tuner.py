"""Tuning one task: propose a batch, measure it on the board, log every record, refit the
model; until the trials, the early-stopping patience or the time budget run out.

Trials are valid measurements: a config the template refuses, or that fails to compile,
crashes, hangs or gives a wrong answer, is logged (and taught to the model as the worst)
but does not count. At most ``max_errors`` such configs (default: as many as the trials)
are tried, so a space where nothing is valid still ends.

A run resumes from the log: configs already measured for this task on this board (found
by their knobs, so a template that grew knobs since still finds them) are never measured
again and count as they did.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .features import features, knob_features
from .log import TuningLog, cost, make_record
from .measure import Measurer
from .model import CostModel
from .search import PROPOSERS, new_rng
from .space import ConfigSpace, space_of, valid
from .tasks import Task


@dataclass
class Options:
    trials: int = 200
    tuner: str = "xgb"
    batch: int = 16
    early_stopping: int | None = None
    deadline: float | None = None  # time.monotonic() value
    seed: int = 0
    # "knob": the setting itself (features.knob_features), free to compute, so annealing
    # can score thousands of candidates per batch; "loop": read off each candidate's
    # lowered loop IR (features.features, ~5-15 ms of lowering each), which also carries
    # over between tasks of different shapes (transfer)
    feature_kind: str = "knob"
    transfer: list = field(default_factory=list)  # records of other tasks
    max_errors: int | None = None  # invalid configs tried at most (None: ``trials``)


@dataclass
class TaskResult:
    task: Task
    trials: int  # valid measurements
    best_index: int | None
    best_cost: float
    default_cost: float
    history: list[float]  # best-so-far cost after each trial (valid measurement)
    errors: int = 0  # invalid configs tried (not trials)

    def gflops(self, seconds: float) -> float:
        return self.task.flops / seconds / 1e9 if seconds and np.isfinite(seconds) else 0.0


class _State:
    """What one task's run knows: costs by config index, and features by index."""

    def __init__(self, task: Task, space: ConfigSpace, kind: str):
        self.task, self.space, self.kind = task, space, kind
        self.costs: dict[int, float] = {}
        self.feats: dict[int, np.ndarray | None] = {}
        self.order: list[int] = []
        self.valid = 0  # measurements with a cost

    @property
    def errors(self) -> int:
        return len(self.costs) - self.valid

    def feature(self, i: int, prim=None) -> np.ndarray | None:
        if i not in self.feats:
            if self.kind == "knob":
                self.feats[i] = knob_features(self.space, self.space.digits(i))
            else:
                prim = prim or valid(self.task, self.space.get(i), f"pk_cand_{i}")
                self.feats[i] = None if prim is None else features(prim, self.task.family)
        return self.feats[i]

    def add(self, i: int, c: float, prim=None) -> None:
        self.costs[i] = c
        self.order.append(i)
        self.valid += bool(np.isfinite(c))
        if prim is not None or self.kind == "knob":
            self.feature(i, prim)

    def training(self):
        idx = [i for i in self.costs if self.feats.get(i) is not None]
        if not idx:
            return np.zeros((0, 1), np.float32), np.zeros(0)
        return np.stack([self.feats[i] for i in idx]), np.array([self.costs[i] for i in idx])

    def top(self, n: int = 16) -> list[int]:
        good = sorted((c, i) for i, c in self.costs.items() if np.isfinite(c))
        return [i for _, i in good[:n]]


def _score_fn(state: _State, model: CostModel):
    def score(indices: list[int]) -> np.ndarray:
        feats = [state.feature(i) for i in indices]
        ok = [k for k, f in enumerate(feats) if f is not None]
        out = np.full(len(indices), -1e9)
        if ok:
            out[ok] = model.predict(np.stack([feats[k] for k in ok]))
        return out

    return score


def _transfer(model: CostModel, state: _State, records: list[dict]) -> None:
    """Warm start from the same template's records of other tasks (knob features only
    carry over when the space matches, loop features always)."""
    by_task: dict[str, list[dict]] = {}
    for r in records:
        same = r["task"]["template"] == state.task.template and _family(r) == state.task.family
        if same and r["task"]["key"] != state.task.key:
            by_task.setdefault(r["task"]["key"] + r["board"]["name"], []).append(r)
    for recs in list(by_task.values())[:8]:
        xs, cs = [], []
        for r in recs[:256]:
            i = state.space.index_of(r["config"]["knobs"])
            f = state.feature(i) if i is not None else None
            if f is not None:
                xs.append(f)
                cs.append(cost(r))
        if xs:
            model.add_group(np.stack(xs), np.array(cs))


def tune_task(task: Task, measurer: Measurer, log: TuningLog, opts: Options, progress=None):
    space = space_of(task)
    state = _State(task, space, opts.feature_kind)
    board = measurer.board
    for r in log.records():
        if r["board"]["name"] != board.name or r["task"]["key"] != task.key:
            continue
        if _family(r) != task.family:  # the same kernel's records on the board's other target
            continue
        i = space.index_of(r["config"]["knobs"])
        if i is not None and i not in state.costs:
            state.add(i, cost(r))  # resume: features are recomputed when the model needs them
    model = CostModel(opts.seed)
    if opts.tuner == "xgb":
        _transfer(model, state, opts.transfer)
    rng = new_rng(opts.seed)
    max_errors = opts.trials if opts.max_errors is None else opts.max_errors
    history = _history(state)
    while (
        state.valid < opts.trials
        and state.errors < max_errors
        and len(state.costs) < space.size
        and not _stop(state, history, opts)
    ):
        n = min(opts.batch, opts.trials - state.valid, max_errors - state.errors)
        batch = _propose(state, model, opts, rng, min(n, space.size - len(state.costs)))
        if not batch:
            break
        for m in measurer.measure(task, [(i, space.get(i)) for i in batch]):
            log.append(make_record(board, task, m.index, m.knobs, m.costs, m.error, m.device))
            state.add(m.index, m.median, m.prim)
            if np.isfinite(m.median):
                history.append(min(history[-1] if history else float("inf"), m.median))
        if opts.tuner == "xgb":
            x, c = state.training()
            model.fit(x, c)
        if progress:
            progress.update(state.valid, _gflops(task, history))
    return _result(task, state, history)


def _family(record: dict) -> str:
    return record.get("target", {}).get("family", "cpu")


def _propose(state: _State, model: CostModel, opts: Options, rng, n: int) -> list[int]:
    seen = set(state.costs)
    default = state.space.default_index()
    first = [default] if default not in seen else []
    kind = opts.tuner if (opts.tuner != "xgb" or model.fitted) else "random"
    rest = PROPOSERS[kind](
        state.space,
        seen | set(first),
        n - len(first),
        rng,
        score=_score_fn(state, model),
        top=state.top(),
    )
    return first + rest


def _stop(state: _State, history: list[float], opts: Options) -> bool:
    if opts.deadline is not None and time.monotonic() > opts.deadline:
        return True
    k = opts.early_stopping
    if not k or len(history) <= k:
        return False
    return history[-1] >= history[-k - 1]  # no improvement over the last k trials


def _history(state: _State) -> list[float]:
    out: list[float] = []
    for i in state.order:
        if np.isfinite(state.costs[i]):
            out.append(min(out[-1] if out else float("inf"), state.costs[i]))
    return out


def _gflops(task: Task, history: list[float]) -> float:
    best = history[-1] if history else float("inf")
    return task.flops / best / 1e9 if np.isfinite(best) and best > 0 else 0.0


def _result(task: Task, state: _State, history: list[float]) -> TaskResult:
    top = state.top(1)
    best = top[0] if top else None
    return TaskResult(
        task,
        state.valid,
        best,
        state.costs[best] if best is not None else float("inf"),
        state.costs.get(state.space.default_index(), float("inf")),
        history,
        state.errors,
    )
