"""``packager tune``: extract a model's tasks and tune each, costliest first."""

from __future__ import annotations

import time
from pathlib import Path

from ..boards import Board
from ..frontend.importer import load_model
from ..package import prepare_graph
from .log import TuningLog, read_records
from .measure import Measurer, Settings
from .progress import Progress, summary_table
from .tasks import Task, extract_tasks
from .tuner import Options, TaskResult, tune_task


def model_tasks(model_path: str, board: Board, input_shapes=None, algorithms=None) -> list[Task]:
    """The graph exactly as ``packager build`` lowers it, so task keys match the build's.
    ``algorithms``: the conv forms to tune (conv_algorithms.ALGORITHMS; None: all)."""
    graph, plan = prepare_graph(load_model(model_path), board, input_shapes, model_path)
    return extract_tasks(graph, board, plan.inplace, algorithms)


def default_log_path(model_path: str, board: Board) -> Path:
    return Path("tuning_logs") / board.name / f"{Path(model_path).stem}.jsonl"


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
) -> list[TaskResult]:
    tasks = model_tasks(model_path, board, input_shapes, algorithms)
    log = TuningLog(log_path)
    opts.transfer = read_records(log_path)
    if time_budget_min:
        opts.deadline = time.monotonic() + 60 * time_budget_min
    progress = progress or Progress()
    measurer = Measurer(board, settings, log=progress.note)
    results = []
    try:
        for k, task in enumerate(tasks, 1):
            progress.start(k, len(tasks), task.label, opts.trials)
            res = tune_task(task, measurer, log, opts, progress)
            progress.update(res.trials, res.gflops(res.best_cost), final=True)
            results.append(res)
    finally:
        for line in measurer.runner.summary():  # a pool: who measured what
            progress.note(line)
        measurer.close()
    return results


def summary(results: list[TaskResult]) -> str:
    rows = [
        {
            "task": r.task.label,
            "weight": r.task.weight,
            "trials": r.trials,
            "default_gflops": r.gflops(r.default_cost),
            "best_gflops": r.gflops(r.best_cost),
        }
        for r in results
    ]
    return summary_table(rows)
