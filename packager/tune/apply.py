"""Build time: the best record of each task, as knobs for its schedule template.

Logs come from ``--tuning-log FILE``, from ``tuning_logs/<board>/*.jsonl`` shipped with
the product and from the user's ``~/.local/share/packager/tuning_logs/<board>/*.jsonl``
(packager/resources.py). A record applies to a kernel when board name, target family and
kernel key match (a GPU record also needs the fingerprint of the board's GPU target) and
its knobs still form a setting of the template's current space (a template that changed
since the log was written falls back to defaults, and says so).
"""

from __future__ import annotations

from pathlib import Path

from .. import resources
from ..target import targets_of
from .log import cost, read_records
from .space import space_of
from .tasks import Task, template_of


def log_files(board_name: str, extra=()) -> list[Path]:
    """The shipped logs of the board, the user's, those in ``packager tune``'s default place
    and ``extra``; a file found twice is read once."""
    homes = (
        resources.shipped_tuning_logs(),
        resources.user_tuning_logs(),
        resources.tuning_log_home(),
    )
    found = [p for home in homes for p in sorted((home / board_name).glob("*.jsonl"))]
    files = {p.resolve(): p for p in [*found, *(Path(e) for e in extra)]}
    return list(files.values())


class Tuning:
    """The best knobs per (target family, kernel key) for one board; remembers what it
    applied."""

    def __init__(self, board, files: list[Path]):
        self.board = board
        self.best: dict[tuple[str, str], dict] = {}
        gpus = {t.family: t.fingerprint() for t in targets_of(board)[1:]}
        for f in files:
            for r in read_records(f):
                family = r.get("target", {}).get("family", "cpu")
                if family != "cpu" and r["target"] != gpus.get(family):
                    continue  # measured on another GPU (or the board has none now)
                if r["board"]["name"] == board.name and cost(r) < float("inf"):
                    key = (family, r["task"]["key"])
                    if key not in self.best or cost(r) < cost(self.best[key]):
                        self.best[key] = r
        self.tuned: list[str] = []
        self.fallback: list[str] = []  # "label: why"

    def pick_algorithm(self, plan):
        """A conv_algorithms policy: the variant with the fastest record (the untuned
        rule, conv_algorithms.default_algorithm, when no variant has one). Records of
        different variants of one conv come from the same board, so their costs compare."""
        from ..graph.conv_algorithms import by_default
        from ..lowering import kernel_key

        def pick(k, node, trial):
            costs = {}
            for algorithm, n, g in trial:
                rec = self.best.get(("cpu", kernel_key(n, g, plan.inplace.get(k, ()))))
                if rec is not None:
                    costs[algorithm] = cost(rec)
            return min(costs, key=costs.get) if costs else by_default(k, node, trial)

        return pick

    def knobs_for(self, key: str, node, graph, inplace=(), target=None) -> dict | None:
        """Knobs of the kernel on ``target`` (None: the board's cpu)."""
        family = target.family if target is not None else "cpu"
        template = template_of(node, graph, family)
        if template is None:
            return None  # not tunable: nothing to report
        task = Task(key, template, node, graph, tuple(inplace), self.board, target)
        where = f", {family}" if family != "cpu" else ""
        name = f"{node.source or node.op} ({task.label}{where})"
        rec = self.best.get((family, key))
        if rec is None:
            self.fallback.append(f"{name}: no record")
            return None
        knobs = rec["config"]["knobs"]
        space = space_of(task)
        index = space.index_of(knobs)
        if index is None:
            self.fallback.append(f"{name}: record does not fit the template's knobs")
            return None
        self.tuned.append(name)
        return space.get(index)  # the template's own values (JSON turned tuples to lists)

    def report(self) -> list[str]:
        n = len(self.tuned) + len(self.fallback)
        lines = [f"tuning: {len(self.tuned)} of {n} tunable kernels use a tuned config"]
        lines += [f"  default schedule: {f}" for f in self.fallback]
        return lines
