"""Build time: the chosen record of each task, as knobs for its schedule template.

Logs come from ``--tuning-log FILE``, from ``tuning_logs/<board>/*.jsonl`` shipped with
the product and from the user's ``~/.local/share/packager/tuning_logs/<board>/*.jsonl``
(packager/resources.py). Each kernel builds with the config whose confirm rounds (the
tuner's last measurements of a task, log.choose) have the lowest median; a kernel whose
records were never confirmed keeps its default schedule, and so does one whose records
were measured on kernels that have changed since (log.measures_today: their task's
default config then made other code than it makes now); where the chosen config no longer
makes the code it timed, the next best confirmed config that does is taken. A record
applies when board name, target family and kernel key match, it was measured on this target (its
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
from ..target import same_target, targets_of
from .log import choose, cost, measures_today, ranked, read_records, record_family
from .space import space_of, valid
from .tasks import CODE_FAMILIES, Task, kernel_code, template_of


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
                found[not any(same_target(r.get("target"), o) for o in own)].setdefault(
                    key, []
                ).append(r)
        # this target's records, chosen per kernel when a build asks for it (_choose needs
        # the kernel's task); the record chosen (or None) and why not (NO_RECORD,
        # UNCONFIRMED, CHANGED), by kernel
        self._records = found[0]
        self.best: dict[tuple[str, str], dict | None] = {}
        self._why: dict[tuple[str, str], str] = {}
        self._tasks: dict[tuple[str, str], Task | None] = {}
        self.others: dict[tuple[str, str], dict] = {}
        for key, recs in found[1].items():  # no evidence here either way: confirmed or not
            good = [r for r in recs if cost(r) < float("inf")]
            rec = choose(recs) or (min(good, key=cost) if good else None)
            if rec is not None:
                self.others[key] = rec
        self.foreign: list[dict] = []  # the foreign records of this build's kernels
        self.tuned: list[str] = []
        self.fallback: list[str] = []  # "label: why"
        self.waiting = 0  # of the fallbacks, kernels whose records wait for confirm rounds
        self.stale = 0  # of the fallbacks, kernels whose records are of changed kernels

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
                inplace = plan.inplace.get(k, ())
                task = self._task(kernel_key(n, g, inplace), n, g, inplace)
                rec = self._applied(task) if task is not None else None
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
        task = self._task(key, node, graph, inplace, target)
        if task is None:
            return None  # not tunable: nothing to report
        family = task.family
        where = f", {family}" if family != "cpu" else ""
        name = f"{node.source or node.op} ({task.label}{where})"
        rec = self._applied(task)
        if self.best.get((family, key)) is None and (family, key) in self.others:
            self.foreign.append(self.others[(family, key)])
        if rec is None:
            why = self._why.get((family, key), NO_RECORD)
            self.waiting += why == UNCONFIRMED
            self.stale += why == CHANGED
            self.fallback.append(f"{name}: {why}")
            return None
        if not self.use_foreign and not same_target(rec.get("target"), task.target.fingerprint()):
            self.fallback.append(f"{name}: record of another target")
            return None
        space = space_of(task)
        index = space.index_of(rec["config"]["knobs"])
        if index is None:
            self.fallback.append(f"{name}: record does not fit the template's knobs")
            return None
        self.tuned.append(name)
        return space.get(index)  # the template's own values (JSON turned tuples to lists)

    def _task(self, key: str, node, graph, inplace=(), target=None) -> Task | None:
        """The kernel's task (None: not tunable), made once per kernel."""
        family = target.family if target is not None else "cpu"
        if (family, key) not in self._tasks:
            template = template_of(node, graph, family)
            self._tasks[(family, key)] = template and Task(
                key, template, node, graph, tuple(inplace), self.board, target
            )
        return self._tasks[(family, key)]

    def _applied(self, task: Task) -> dict | None:
        """The record the kernel builds with: this target's chosen one (_choose), else with
        ``use_foreign`` another target's."""
        key = (task.family, task.key)
        if key not in self.best:
            self.best[key], self._why[key] = self._choose(task, self._records.get(key, []))
        rec = self.best[key]
        return rec if rec is not None or not self.use_foreign else self.others.get(key)

    def _choose(self, task: Task, records: list[dict]) -> tuple[dict | None, str]:
        """The best confirmed config (log.ranked) among the records measured on today's
        kernels (log.measures_today) whose own kernel is still the one timed, or None
        and why not."""
        if not any(cost(r) < float("inf") for r in records):
            return None, NO_RECORD
        today = [r for r in records if measures_today(r, task)]
        if not any(cost(r) < float("inf") for r in today):
            return None, CHANGED
        best = ranked(today)
        if not best:
            return None, UNCONFIRMED
        space = space_of(task)
        for rec in best:
            if _same_kernel(task, space, rec):
                return rec, ""
        return None, CHANGED

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
        if self.stale:
            lines.append(
                f"{self.stale} of them have records measured on kernels that have changed since "
                "(another version of the packager): tuning again measures them anew"
            )
        if self.waiting:
            lines.append(
                f"{self.waiting} of them have records never confirmed as the tuner times "
                "today (a run older than its confirm rounds, or than its inputs written on "
                "the threads): tuning again confirms them without a new search"
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


NO_RECORD = "no record"
UNCONFIRMED = "records not confirmed (tune again to confirm them)"
CHANGED = "records measured on a kernel that has changed since (tune again)"


def _same_kernel(task: Task, space, rec: dict) -> bool:
    """Whether the record's config still makes the kernel it timed (its code)."""
    if task.family not in CODE_FAMILIES:
        return True
    index = space.index_of(rec["config"]["knobs"])
    if index is None:
        return True  # knobs_for says it does not fit the template
    if index == space.default_index():
        return rec["config"].get("code") == task.base_code
    return rec["config"].get("code") == kernel_code(task, valid(task, space.get(index)))


def describe_target(fingerprint: dict | None) -> str:
    """A record's target in a few words: CPU name (or model) and cpu_id, vector width,
    cores; a GPU's
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
    if fingerprint.get("cpu_id"):
        name = f"{name} ({fingerprint['cpu_id']})"
    return f"{name}, {fingerprint.get('vector_bits')}-bit, {fingerprint.get('cores')} cores"
