"""Tuning one task: propose a batch, measure it on the board, log every record, refit the
model; until the trials, the early-stopping patience or the time budget run out
(TaskResult.stop_reason says which).

Trials are valid measurements: a config the template refuses, or that fails to compile,
crashes, hangs or gives a wrong answer, is logged (and taught to the model as the worst)
but does not count. At most ``max_errors`` configs that fail on the board (default: as
many as the trials) are tried, and at most ``refused_limit`` that the template refuses on
the host, so a space where nothing is valid still ends.

A run resumes from the log: configs already measured for this task on this board (found
by their knobs, so a template that grew knobs since still finds them) are never measured
again and count as they did. Records of kernels that have changed since (log.measures_today)
are not this task's measurements: their configs are measured anew (the model still learns
from them, as from other tasks').
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import numpy as np

from .. import interrupts
from ..target import same_target
from .features import features, knob_features
from .log import (
    CONFIRM_ROUNDS,
    CONFIRM_TOP,
    EXACT_FAMILIES,
    TuningLog,
    confirming,
    cost,
    make_record,
    measures_today,
    record_family,
    rounds_cost,
)
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
    max_errors: int | None = None  # failed configs tried at most (None: ``trials``)


@dataclass
class TaskResult:
    task: Task
    trials: int  # valid measurements
    best_index: int | None
    best_cost: float
    default_cost: float
    history: list[float]  # best-so-far cost after each trial (valid measurement)
    errors: int = 0  # failed configs tried (not trials), the refused ones included
    stop_reason: str = ""  # why the task ended: "trials exhausted (16 of 16)", ...

    def gflops(self, seconds: float) -> float:
        return self.task.flops / seconds / 1e9 if seconds and np.isfinite(seconds) else 0.0

    def rate(self, seconds: float) -> float:
        """The speed in the task's unit (Task.unit)."""
        return self.task.rate(seconds)


class _State:
    """What one task's run knows: costs by config index, and features by index."""

    def __init__(self, task: Task, space: ConfigSpace, kind: str):
        self.task, self.space, self.kind = task, space, kind
        self.costs: dict[int, float] = {}
        self.feats: dict[int, np.ndarray | None] = {}
        self.order: list[int] = []
        self.valid = 0  # measurements with a cost
        self.refused = 0  # configs the template or lowering refused on the host
        self.confirmed: dict[int, list[float]] = {}  # confirm rounds logged, by index

    @property
    def errors(self) -> int:
        """Configs that failed on the board (compile, crash, wrong answer, timeout)."""
        return len(self.costs) - self.valid - self.refused

    def feature(self, i: int, prim=None) -> np.ndarray | None:
        if i not in self.feats:
            if self.kind == "knob":
                self.feats[i] = knob_features(self.space, self.space.digits(i))
            else:
                prim = prim or valid(self.task, self.space.get(i), f"pk_cand_{i}")
                self.feats[i] = None if prim is None else features(prim, self.task.family)
        return self.feats[i]

    def add(self, i: int, c: float, prim=None, error: str | None = None) -> None:
        self.costs[i] = c
        self.order.append(i)
        self.valid += bool(np.isfinite(c))
        self.refused += error == "invalid"
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
    """Warm start from the same template's records of other tasks, and of this task on
    other targets (knob features only carry over when the space matches, loop features
    always). Each (task, board, target) is a ranking group of its own."""
    here = state.task.target.fingerprint()
    by_task: dict[str, list[dict]] = {}
    for r in records:
        same = (
            r["task"]["template"] == state.task.template and record_family(r) == state.task.family
        )
        other = r["task"]["key"] != state.task.key or not same_target(r.get("target"), here)
        if same and (other or not measures_today(r, state.task)):
            group = r["task"]["key"] + r["board"]["name"] + json.dumps(r.get("target"))
            by_task.setdefault(group, []).append(r)
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
    here = task.target.fingerprint()
    for r in log.records():
        # a record of another target is not this one's measurement (transfer learns from it)
        if r["board"]["name"] != board.name or r["task"]["key"] != task.key:
            continue
        if not same_target(r.get("target"), here) or not measures_today(r, task):
            continue
        i = space.index_of(r["config"]["knobs"])
        if i is not None and confirming(r):  # rounds a resumed run counts (_confirm)
            state.confirmed.setdefault(i, []).append(cost(r))
        if i is not None and i not in state.costs:
            # resume: features are recomputed when the model needs them
            state.add(i, cost(r), error=r["result"]["error"])
    model = CostModel(opts.seed)
    if opts.tuner == "xgb":
        _transfer(model, state, opts.transfer)
    rng = new_rng(opts.seed)
    max_errors = opts.trials if opts.max_errors is None else opts.max_errors
    history = _history(state)
    while not (why := _why_stop(state, history, opts, max_errors)):
        interrupts.check()  # a Ctrl-C that a finalizer (xgboost's DMatrix) swallowed
        n = min(opts.batch, opts.trials - state.valid, max_errors - state.errors)
        batch = _propose(state, model, opts, rng, min(n, space.size - len(state.costs)))
        if not batch:
            why = f"space exhausted (no untried config among {space.size})"
            break
        for m in measurer.measure(task, [(i, space.get(i)) for i in batch]):
            log.append(
                make_record(
                    board, task, m.index, m.knobs, m.costs, m.error, m.device, m.extra, m.prim
                )
            )
            state.add(m.index, m.median, m.prim, m.error)
            if np.isfinite(m.median):
                history.append(min(history[-1] if history else float("inf"), m.median))
        if opts.tuner == "xgb":
            x, c = state.training()
            model.fit(x, c)
        if progress:
            progress.update(state.valid, task.rate(history[-1] if history else 0.0))
    return _result(task, state, history, why, _confirm(task, state, measurer, log))


def _confirm(task: Task, state: _State, measurer: Measurer, log: TuningLog) -> dict[int, float]:
    """Measure the search's fastest configs (CONFIRM_TOP) and the default again, in
    CONFIRM_ROUNDS rounds that each run all of them side by side in a new order, each
    record marked ``"confirm"``; the build takes the lowest median of these (log.choose).
    Rounds a resumed run already logged count. Returns each confirmed config's median
    (+inf where a round failed). A simulated accelerator's cycles do not vary: none."""
    if task.family in EXACT_FAMILIES:
        return {}
    picks = state.top(CONFIRM_TOP)
    default = state.space.default_index()
    if default not in picks and state.costs.get(default, 0.0) < float("inf"):
        picks.append(default)  # measured too where a resumed search never did
    runs = {i: list(state.confirmed.get(i, [])) for i in picks}
    for n in range(CONFIRM_ROUNDS):
        todo = [i for i in picks if len(runs[i]) < CONFIRM_ROUNDS]
        if not todo:
            break
        interrupts.check()
        todo = todo[n % len(todo) :] + todo[: n % len(todo)]  # a new order each round
        for m in measurer.measure(task, [(i, state.space.get(i)) for i in todo]):
            extra = {**m.extra, "confirm": True}
            log.append(
                make_record(
                    measurer.board,
                    task,
                    m.index,
                    m.knobs,
                    m.costs,
                    m.error,
                    m.device,
                    extra,
                    m.prim,
                )
            )
            runs[m.index].append(m.median if m.error is None else float("inf"))
    return {i: rounds_cost(c) for i, c in runs.items()}


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


def refused_limit(trials: int) -> int:
    """Configs the template refuses are found on the host without the board, at the cost
    of a lowering each, so they do not count against ``max_errors``: a space where a few
    knob combinations are refused (too long an unrolled tile) would otherwise end a short
    run early. This bound still ends a space that refuses everything."""
    return max(64, 8 * trials)


def _why_stop(state: _State, history: list[float], opts: Options, max_errors: int) -> str:
    """Why the task ends now, or "" while it goes on."""
    k = opts.early_stopping
    reasons = (
        (state.valid >= opts.trials, f"trials exhausted ({state.valid} of {opts.trials})"),
        (state.errors >= max_errors, f"too many failed configs ({state.errors})"),
        (
            state.refused >= refused_limit(opts.trials),
            f"too many refused configs ({state.refused})",
        ),
        (
            len(state.costs) >= state.space.size,
            f"space exhausted (all {state.space.size} configs measured)",
        ),
        (opts.deadline is not None and time.monotonic() > opts.deadline, "time limit"),
        (
            bool(k) and len(history) > k and history[-1] >= history[-k - 1],
            f"early stop: no improvement in {k} trials",
        ),
    )
    return next((why for hit, why in reasons if hit), "")


def _history(state: _State) -> list[float]:
    out: list[float] = []
    for i in state.order:
        if np.isfinite(state.costs[i]):
            out.append(min(out[-1] if out else float("inf"), state.costs[i]))
    return out


def _result(
    task: Task, state: _State, history: list[float], why: str, confirmed: dict[int, float]
) -> TaskResult:
    """The task's outcome; ``confirmed`` (the confirm rounds' medians) decides the best
    and gives the costs where it has them."""
    costs = {**state.costs, **confirmed}
    top = sorted(confirmed, key=confirmed.get)[:1] or state.top(1)
    best = top[0] if top and np.isfinite(costs[top[0]]) else None
    return TaskResult(
        task,
        state.valid,
        best,
        costs[best] if best is not None else float("inf"),
        costs.get(state.space.default_index(), float("inf")),
        history,
        state.errors + state.refused,
        why,
    )
