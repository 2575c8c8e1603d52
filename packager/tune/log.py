"""Tuning logs: JSON Lines, one record per measurement, append-only.

A search measures each config once, so its fastest config is partly the one a quiet
moment favoured. At the end of each task the tuner measures its fastest few and the
default once more in a few rounds, side by side (``"confirm": true`` in the result), and
the build takes the config with the lowest median over those rounds (``choose``).

Each record is written whole and flushed (and fsynced) before the next measurement, so
a killed run leaves only complete lines; a line that still fails to parse (a disk
filled up mid-write) is skipped with a warning instead of losing the whole log.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

from ..safe_paths import signals_held
from .space import valid
from .tasks import CODE_FAMILIES, kernel_code

VERSION = 1
CONFIRM_ROUNDS = 3  # measurements of each confirmed config
CONFIRM_TOP = 3  # fastest configs of a search confirmed, besides the default
EXACT_FAMILIES = ("accel",)  # measured by a simulator's cycles: one record is the cost
# a CPU record's "caches": timed with its weights out of the caches, or (a CPU whose
# caches user code cannot flush, ARMv7) with them as the last call left them
FLUSHED, WARM = "weights_flushed", "warm"
# a CPU record's "inputs": written again by the pool's threads before each timed call
# (driver.py's produce_args), as the kernel before it in a model writes them
PRODUCED = "produced"
# a confirm round's error for a config that ran no faster than the default in the model
# (model_check.py)
SLOWER = "slower_in_model"
ERRORS = ("compile_error", "runtime_error", "timeout", "wrong_answer", "invalid", SLOWER)


def make_record(
    board,
    task,
    index: int,
    knobs: dict,
    costs: list,
    error: str | None,
    device=None,
    extra: dict | None = None,
    prim=None,
) -> dict:
    """``device``: the pool device (``user@host:port``) that measured it, for a remote board.
    ``extra``: more fields of the result (an accelerator candidate's ``"measured_by":
    "simulator"``, its ``"cycles"``, a failure's ``"message"``). The record carries the
    fingerprint of the task's target (``Target.fingerprint``) and what was timed: the
    config's kernel code and the task's base (tasks.kernel_code; ``prim``: the candidate
    as it was lowered for the board, else it is lowered here)."""
    result = {"costs": costs, "error": error, "timestamp": round(time.time(), 3)}
    if device:
        result["device"] = device
    result.update(extra or {})
    config = {"index": index, "knobs": knobs}
    task_part = {"template": task.template, "key": task.key, "flops": task.flops}
    if task.family in CODE_FAMILIES:
        config["code"] = kernel_code(task, prim if prim is not None else valid(task, knobs))
        task_part["base"] = task.base_code
    return {
        "version": VERSION,
        "board": {"name": board.name, "cpu": board.cpu, "arch": board.arch},
        "target": task.target.fingerprint(),
        "task": task_part,
        "config": config,
        "result": result,
        "host": platform.node() if board.is_local else None,
    }


def measures_today(record: dict, task) -> bool:
    """Whether the record was measured on the kernels this packager makes of ``task``: its
    base is the task's base_code (the default config's code). A record from before
    records carried code, or of a template or code generator that has changed since, is
    not; in families whose records are not of compiled code (CODE_FAMILIES) every one is."""
    return task.family not in CODE_FAMILIES or record["task"].get("base") == task.base_code


def record_family(record: dict) -> str:
    """The target family a record was measured on (records older than targets: cpu)."""
    return (record.get("target") or {}).get("family", "cpu")


def cost(record: dict) -> float:
    """Median seconds of a good measurement, +inf for an error."""
    r = record["result"]
    if r.get("error") or not r.get("costs"):
        return float("inf")
    c = sorted(r["costs"])
    return c[len(c) // 2]


def confirming(record: dict) -> bool:
    """Whether the record is one of the confirm rounds' measurements, timed as the timing
    driver times today. On a CPU: with the weights flushed from the caches before each
    call where the CPU lets user code flush them (a record timed with them hot, from
    before the driver flushed, is no evidence for a kernel inside a model), and, on a
    target with more than one core, with its inputs written again by the pool's threads
    (from before that, a config whose threads each read the whole input found it in
    both cores' caches; with one core nothing changed)."""
    r = record["result"]
    if not r.get("confirm"):
        return False
    if record_family(record) != "cpu":
        return True
    cores = (record.get("target") or {}).get("cores")
    produced = r.get("inputs") == PRODUCED or cores == 1
    return r.get("caches") in (FLUSHED, WARM) and produced


def confirmed(records: list[dict]) -> dict[str, list[dict]]:
    """The confirm rounds' records of one kernel, by config (its target and knobs)."""
    runs: dict[str, list[dict]] = {}
    for r in records:
        if confirming(r):
            config = json.dumps([r.get("target"), r["config"]["knobs"]], sort_keys=True)
            runs.setdefault(config, []).append(r)
    return runs


def rounds_cost(costs: list[float]) -> float:
    """A config's cost over its confirm rounds: their median, +inf if any round failed."""
    if not costs or float("inf") in costs:
        return float("inf")
    return sorted(costs)[len(costs) // 2]


def choose(records: list[dict]) -> dict | None:
    """The record to build with, of one kernel's records on one board and target family:
    the config with the lowest median over its confirm rounds (a config that failed in
    any round is out), as its last record with the rounds' costs as its ``costs`` (so
    ``cost`` of it is that median). A simulated accelerator's cycles do not vary: there
    the fastest record. None: no confirmed config (records of a run that predates the
    confirm rounds; tuning again confirms them without searching anew)."""
    best = ranked(records)
    return best[0] if best else None


def ranked(records: list[dict]) -> list[dict]:
    """Every config ``choose`` could take, as it would give it, best first (the build
    takes the first whose kernel is still the one measured)."""
    if records and all(record_family(r) in EXACT_FAMILIES for r in records):
        return sorted((r for r in records if cost(r) < float("inf")), key=cost)
    rounds = [(rounds_cost([cost(r) for r in runs]), runs) for runs in confirmed(records).values()]
    rounds = sorted((c, n, runs) for n, (c, runs) in enumerate(rounds) if c < float("inf"))
    return [
        {**runs[-1], "result": {**runs[-1]["result"], "costs": [cost(r) for r in runs]}}
        for _, _, runs in rounds
    ]


class TuningLog:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, record: dict) -> None:
        line = json.dumps(record, sort_keys=True) + "\n"
        if _ends_mid_line(self.path):
            line = "\n" + line  # a torn last line must not swallow this record
        with signals_held(), open(self.path, "a") as f:  # an interrupt waits for the line
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def records(self) -> list[dict]:
        return read_records(self.path)


def _ends_mid_line(path: Path) -> bool:
    if not path.exists() or path.stat().st_size == 0:
        return False
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


def read_records(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            print(f"warning: {path}:{n}: not a complete record, skipped", file=sys.stderr)
            continue
        if rec.get("version") == VERSION:
            out.append(rec)
    return out


def measured(records: list[dict], board_name: str, key: str) -> dict[int, dict]:
    """Config index -> record, for one task on one board (what a resumed run skips)."""
    return {
        r["config"]["index"]: r
        for r in records
        if r["board"]["name"] == board_name and r["task"]["key"] == key
    }
