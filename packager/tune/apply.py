"""Build time: the chosen record of each task, as knobs for its schedule template.

Logs come from ``--tuning-log FILE``, from ``tuning_logs/<board>/*.jsonl`` shipped with
the product and from the user's ``~/.local/share/packager/tuning_logs/<board>/*.jsonl``
(packager/resources.py). Each kernel builds with the config whose confirm rounds (the
tuner's last measurements of a task, log.choose) have the lowest median; a kernel whose
records were never confirmed keeps its default schedule. A record applies when board
name, target family and kernel key match, it was measured on this target (its
``"target"`` equals the kernel target's ``Target.fingerprint()``) and its knobs still form
a setting of the template's current space (a template that changed since the log was
written falls back to defaults, and says so).

A record of another target, or one without a target, is foreign: a schedule fastest on
another CPU is no evidence for this one. The build says in one line how many it left out;
``use_foreign`` (``--use-foreign-records``) applies them anyway.
"""

from __future__ import annotations

from pathlib import Path

from .. import resources
from ..target import targets_of
from .log import choose, cost, read_records, record_family
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

    def __init__(self, board, files: list[Path], use_foreign: bool = False):
        self.board, self.use_foreign = board, use_foreign
        own = [t.fingerprint() for t in targets_of(board)]
        # (target family, kernel key) -> records of this board's targets / of others
        found: tuple[dict, dict] = ({}, {})
        for f in files:
            for r in read_records(f):
                if r["board"]["name"] != board.name:
                    continue
                key = (record_family(r), r["task"]["key"])
                found[r.get("target") not in own].setdefault(key, []).append(r)
        # the record each kernel builds with (log.choose), and the kernels whose records
        # were never confirmed
        self.own: dict[tuple[str, str], dict] = {}
        self.others: dict[tuple[str, str], dict] = {}
        self.unconfirmed: set[tuple[str, str]] = set()
        for key, recs in found[0].items():
            rec = choose(recs)
            if rec is not None:
                self.own[key] = rec
            elif any(cost(r) < float("inf") for r in recs):
                self.unconfirmed.add(key)
        for key, recs in found[1].items():  # no evidence here either way: confirmed or not
            good = [r for r in recs if cost(r) < float("inf")]
            rec = choose(recs) or (min(good, key=cost) if good else None)
            if rec is not None:
                self.others[key] = rec
        self.best = {**self.others, **self.own} if use_foreign else self.own
        self.foreign: list[dict] = []  # the foreign records of this build's kernels
        self.tuned: list[str] = []
        self.fallback: list[str] = []  # "label: why"
        self.waiting = 0  # of the fallbacks, kernels whose records wait for confirm rounds

    def pick_algorithm(self, plan, target=None):
        """A conv_algorithms policy and its gain on ``target`` (a CpuTarget; None: the
        untuned rule of narrower vectors), as (pick, gain). pick: the variant with
        the fastest record where the form the untuned rule (conv_algorithms.
        default_algorithm) takes has one, else that form: records that never measured it
        (none at all, a run that left it out with ``--conv-algorithm``, or records from
        before its kernel, and so its key, changed) do not overrule it. gain: the seconds
        a Winograd variant saves over the direct conv by their records (records of
        different variants of one conv come from the same board, so their costs compare;
        a variant its records show slower saves nothing), else conv_algorithms.
        model_gain's estimate."""
        from ..graph.conv_algorithms import by_default, model_gain
        from ..lowering import kernel_key

        untuned_pick = by_default(target)

        def costs(k, trial) -> dict[str, float]:
            found = {}
            for algorithm, n, g in trial:
                rec = self.best.get(("cpu", kernel_key(n, g, plan.inplace.get(k, ()))))
                if rec is not None:
                    found[algorithm] = cost(rec)
            return found

        def pick(k, node, trial):
            found = costs(k, trial)
            untuned = untuned_pick(k, node, trial)
            return min(found, key=found.get) if untuned in found else untuned

        def gain(k, variant, trial):
            found = costs(k, trial)
            if "direct" in found and variant.algorithm in found:
                return found["direct"] - found[variant.algorithm]
            return model_gain(k, variant, trial)

        return pick, gain

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
        if (family, key) not in self.own and (family, key) in self.others:
            self.foreign.append(self.others[(family, key)])
        if rec is None and (family, key) in self.unconfirmed:
            self.fallback.append(f"{name}: records not confirmed (tune again to confirm them)")
            self.waiting += 1
            return None
        if rec is None:
            self.fallback.append(f"{name}: no record")
            return None
        if not self.use_foreign and rec.get("target") != task.target.fingerprint():
            self.fallback.append(f"{name}: record of another target")
            return None
        knobs = rec["config"]["knobs"]
        space = space_of(task)
        index = space.index_of(knobs)
        if index is None:
            self.fallback.append(f"{name}: record does not fit the template's knobs")
            return None
        self.tuned.append(name)
        return space.get(index)  # the template's own values (JSON turned tuples to lists)

    def report(self, tune_command: str, verbose: bool = False) -> list[str]:
        """One line on how many tunable kernels use tuned schedules, with the command that
        tunes the rest; ``verbose``: then each default-schedule kernel and why."""
        tuned, n = len(self.tuned), len(self.tuned) + len(self.fallback)
        if not self.fallback:
            head = [f"{tuned} of {n} tunable kernels use tuned schedules"] if n else []
            return head + ([self._foreign_line()] if self.foreign else [])
        head = f"{tuned} of {n} tunable kernels use tuned schedules, {len(self.fallback)}"
        if not tuned:
            head = f"{n} of {n} tunable kernels use"
        lines = [f"{head} default schedules: run `{tune_command}` to tune them"]
        lines += [self._foreign_line()] if self.foreign else []
        if self.waiting:
            lines.append(
                f"{self.waiting} of them have records never confirmed (a run older than the "
                "confirm rounds): tuning again confirms them without a new search"
            )
        if verbose:
            lines += [f"  default schedule: {f}" for f in self.fallback]
        return lines

    def summary(self) -> dict:
        """What the build applied, for the manifest: tunable kernels with a tuned and with
        a default schedule, and foreign records (of another target) left out or applied."""
        foreign = "foreign_applied" if self.use_foreign else "foreign_not_applied"
        return {"tuned": len(self.tuned), "default": len(self.fallback), foreign: len(self.foreign)}

    def _foreign_line(self) -> str:
        n = len(self.foreign)
        were = "record was" if n == 1 else "records were"
        where = "; ".join(dict.fromkeys(describe_target(r.get("target")) for r in self.foreign))
        head = f"{n} tuning {were} measured on another CPU ({where})"
        if self.use_foreign:
            return f"{head}; applied (--use-foreign-records)"
        return f"{head}; not applied: --use-foreign-records to apply them"


def describe_target(fingerprint: dict | None) -> str:
    """A record's target in a few words: CPU name (or model), vector width, cores; a GPU's
    device and compute units; an accelerator's GEMM core, buffers and clock."""
    if not fingerprint:
        return "not recorded"
    if fingerprint.get("family") == "accel":
        gemm = "x".join(str(d) for d in fingerprint.get("gemm") or [])
        kib = "/".join(str(b // 1024) for b in fingerprint.get("buffers") or [])
        return f"accelerator {gemm} GEMM, {kib} KiB buffers, {fingerprint.get('clock_mhz')} MHz"
    if fingerprint.get("family") != "cpu":
        words = [fingerprint.get("device"), f"{fingerprint.get('compute_units')} compute units"]
        return ", ".join(str(w) for w in words)
    name = fingerprint.get("cpu_name") or fingerprint.get("model")
    return f"{name}, {fingerprint.get('vector_bits')}-bit, {fingerprint.get('cores')} cores"
