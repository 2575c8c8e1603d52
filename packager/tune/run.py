"""``packager tune``: extract a model's tasks and tune each, costliest first."""

from __future__ import annotations

import time
from pathlib import Path

from .. import interrupts, resources
from ..boards import Board
from ..frontend.importer import load_model
from ..package import prepare_graph
from ..target import same_target
from .log import TuningLog, read_records
from .measure import Measurer, Settings
from .model_check import check_in_model
from .progress import Progress, summary_table
from .tasks import Task, extract_tasks
from .tuner import Options, TaskResult, tune_task


def model_tasks(model_path: str, board: Board, input_shapes=None, algorithms=None) -> list[Task]:
    """The graph exactly as ``packager build`` lowers it, so task keys match the build's.
    ``algorithms``: the conv forms to tune (conv_algorithms.ALGORITHMS; None: all)."""
    graph, plan = prepare_graph(load_model(model_path), board, input_shapes, model_path)
    return extract_tasks(graph, board, plan.inplace, algorithms)


def default_log_path(model_path: str, board: Board) -> Path:
    """``tuning_logs/BOARD/MODEL.jsonl`` in a source checkout, else in the user's data
    directory (resources.tuning_log_home); ``packager build`` reads both."""
    return resources.tuning_log_home() / board.name / f"{Path(model_path).stem}.jsonl"


def tune_model(
    model_path: str,
    board: Board,
    opts: Options,
    log_path: Path,
    input_shapes=None,
    time_budget_min: float | None = None,
    settings: Settings | None = None,
    progress: Progress | None = None,
    algorithms=None,
    model_check: bool = True,
) -> list[TaskResult]:
    """Tune each of the model's tasks, costliest first, into ``log_path``; then (with
    ``model_check``) run the default and the tuned build of the whole model on the board
    and keep the default for the kernels whose tuned schedule was not faster there
    (model_check.check_in_model)."""
    tasks = model_tasks(model_path, board, input_shapes, algorithms)
    log = TuningLog(log_path)
    opts.transfer = read_records(log_path)
    if time_budget_min:
        opts.deadline = time.monotonic() + 60 * time_budget_min
    progress = progress or Progress()
    measurer = Measurer(board, settings, log=progress.note)
    results: list[TaskResult] = []
    try:
        for k, task in enumerate(tasks, 1):
            if opts.deadline is not None and time.monotonic() > opts.deadline:
                progress.note(f"time limit: {len(tasks) - k + 1} of {len(tasks)} tasks not tuned")
                break
            progress.start(k, len(tasks), task.label, opts.trials, task.unit)
            res = tune_task(task, measurer, log, opts, progress)
            progress.finish(res.trials, res.rate(res.best_cost), res.stop_reason)
            results.append(res)
        recheck_forms(tasks, measurer, log, progress)
        if model_check:
            check_in_model(model_path, board, log_path, tasks, input_shapes, progress.note)
    except KeyboardInterrupt:
        progress.note(
            f"interrupted: {len(results)} of {len(tasks)} tasks tuned; every measurement "
            f"is in {log_path}, running again resumes"
        )
        raise
    finally:
        for line in measurer.runner.summary():  # a pool: who measured what
            progress.note(line)
        measurer.close()
    return results


def recheck_forms(tasks: list[Task], measurer, log: TuningLog, progress) -> None:
    """Measure the chosen config of every form of each conv once more, side by side.

    The build runs the form whose chosen config (log.choose: the lowest median of its
    confirm rounds) is fastest, and forms are tuned minutes apart: a burst of load on the
    board during one form's tuning would decide the choice. Measured again back to back,
    each form's choice gets one more confirm round taken under the same conditions."""
    from .log import choose, make_record, measures_today
    from .space import space_of

    groups: dict[str, list[Task]] = {}
    for t in tasks:
        if t.conv:
            groups.setdefault(t.conv, []).append(t)
    groups = {k: g for k, g in groups.items() if len(g) > 1}
    if not groups:
        return
    n = len(groups)
    progress.note(f"measuring the chosen config of each form again ({n} conv{'s' * (n != 1)})")
    records = log.records()
    for forms in groups.values():
        for t in forms:
            interrupts.check()
            here = t.target.fingerprint()
            mine = [
                r
                for r in records
                if r["task"]["key"] == t.key
                and same_target(r.get("target"), here)
                and r["board"]["name"] == t.board.name
                and measures_today(r, t)
            ]
            chosen = choose(mine)
            space = space_of(t)
            index = space.index_of(chosen["config"]["knobs"]) if chosen else None
            if index is None:
                continue
            (m,) = measurer.measure(t, [(index, space.get(index))])
            extra = {**m.extra, "confirm": True}
            log.append(
                make_record(t.board, t, m.index, m.knobs, m.costs, m.error, m.device, extra, m.prim)
            )


def summary(results: list[TaskResult]) -> str:
    rows = [
        {
            "task": r.task.label,
            "weight": r.task.weight,
            "trials": r.trials,
            "default": r.rate(r.default_cost),
            "best": r.rate(r.best_cost),
            "unit": r.task.unit,
            "stopped": r.stop_reason,
        }
        for r in results
    ]
    return summary_table(rows)
