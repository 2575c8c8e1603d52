"""The tuned kernels checked in their place in the model, on the board.

A task is tuned alone: the timing driver flushes its weights and writes its input on the
pool's threads as a model's kernel before it would, but the kernels around it in the model
still differ from the driver's loop (what they leave in the caches, how the threads are
spread over the data). On the 2-core Xeon, tv_resnet18's tuned 7x7 Winograd kernels ran
1.10x slower than their defaults inside the model after the tuner had timed them
1.04-1.06x faster, and 3 more of its 12 tuned kernels were no faster there.

``check_in_model`` builds the model twice, with the templates' default schedules and with
the records a build would apply, and runs the two bundles on the board in turns (ROUNDS
rounds of ``run_bundle --selftest --repeat N --profile-json``, the first of each round
alternating; the selftest checks the tuned bundle's answers too). Each CPU or GPU kernel
whose code (or work sizes) differ between the two is compared by its median time over the
rounds; an accelerator's are not (its records are the simulator's exact cycles). A kernel
whose tuned schedule was not faster than its default gets, for every confirmed config of
its task other than the default, a confirm-round record with the error
``slower_in_model`` (its message holds both times): the build then keeps the default
schedule for it. A kernel that takes another conv form in the tuned build is not
compared (no default kernel of the same form to run beside it).
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

from .. import interrupts
from ..boards import Board
from ..errors import PackagerError
from ..remote.errors import DeviceLost, RemoteError
from ..target import same_target
from .apply import log_files
from .log import (
    SLOWER,
    TuningLog,
    confirmed,
    make_record,
    measures_today,
    read_records,
)
from .measure import cpu_timing
from .space import space_of
from .tasks import Task

ROUNDS = 5
COMPARED = ("cpu", "opencl")  # the kernels compared: CPU and GPU, not an accelerator's
RUN_SECONDS = 0.3  # each run_bundle call: about this long (its repeat set from the first)


def check_in_model(
    model_path: str,
    board: Board,
    log_path: Path,
    tasks: list[Task],
    input_shapes=None,
    note=print,
    rounds: int = ROUNDS,
) -> list[str]:
    """Run the default and the tuned build of the model on ``board`` in turns and reject
    (in ``log_path``) the tuned configs of the kernels that were not faster; returns the
    labels of the kernels rejected. ``tasks``: the model's tasks (tune.run.model_tasks)."""
    from ..package import package_compiled

    by_key = {(t.family, t.key): t for t in tasks if t.family in COMPARED}
    note("model check: building the model with the default and with the tuned schedules")
    with tempfile.TemporaryDirectory(prefix="pk-model-check-") as tmp:
        builds = {}
        for name, records in (("default", False), ("tuned", True)):
            out = Path(tmp) / name
            builds[name] = package_compiled(
                model_path, board, str(out), input_shapes, tuning_logs=[log_path], records=records
            )
        pairs, other_form = _tuned_kernels(builds["default"][1], builds["tuned"][1], by_key)
        if other_form:
            note(f"model check: {other_form} kernels take another conv form; not compared")
        if not pairs:
            note("model check: no tuned kernel differs from its default; nothing to compare")
            return []
        note(
            f"model check: running both on {board.name} in turns, {rounds} rounds "
            f"({len(pairs)} {'kernel differs' if len(pairs) == 1 else 'kernels differ'})"
        )
        bundles = [builds["default"][0], builds["tuned"][0]]
        for one in _devices(board):
            try:
                times = _run_in_turns(one, bundles, rounds)
                break
            except DeviceLost as e:  # the next device of a pool runs it
                note(f"model check: {e}")
            except RemoteError as e:  # a build that fails on the board, a selftest that fails
                raise PackagerError(
                    f"model check: {e}\n(every measurement of the tuning is in {log_path}; "
                    "--no-model-check skips the check)"
                ) from e
        else:
            note("model check: no device of the board could run it; the records stand unchecked")
            return []
    device = None if board.is_local else one.connection.label
    rejected = []
    log = TuningLog(log_path)
    records = None  # every log a build reads, read once when a kernel is rejected
    for func, key in pairs:
        default, tuned = (statistics.median(t[func]) for t in times)
        if tuned < default:
            continue
        task = by_key[key]
        if records is None:
            records = [r for p in log_files(board.name, [log_path]) for r in read_records(p)]
        why = f"{tuned:.4f} ms in the model, its default {default:.4f}"
        _reject(task, records, log, why, device)
        where = f", {task.family}" if task.family != "cpu" else ""
        rejected.append(f"{func} ({task.label}{where}): {tuned / default:.2f}x its default")
    kept = len(pairs) - len(rejected)
    note(
        f"model check: {kept} of {len(pairs)} tuned kernels ran faster than their default in "
        f"the model; {len(rejected)} keep the default"
    )
    for line in rejected:
        note(f"  keeps the default: {line}")
    return rejected


def _tuned_kernels(default, tuned, by_key) -> tuple[list[tuple[str, tuple[str, str]]], int]:
    """(function, (family, task key)) of each tunable CPU or GPU kernel whose code (or GPU
    work sizes) differ between the two builds, and how many tunable kernels took another
    form (another key in its place)."""
    base = {k.func: k for k in default.kernels}
    pairs, other_form = [], 0
    for k in tuned.kernels:
        if (k.device, k.key) not in by_key:
            continue
        d = base.get(k.func)
        if d is None or d.key != k.key:
            other_form += 1
        elif (d.source, d.launch) != (k.source, k.launch):
            pairs.append((k.func, (k.device, k.key)))
    return pairs, other_form


def _devices(board: Board) -> list[Board]:
    """The board as each of its devices alone, in order (both builds run on the same one);
    the local machine as itself."""
    if board.is_local:
        return [board]
    return [replace(board, connection=c, connections=(c,)) for c in board.connections]


def _run_in_turns(board: Board, bundles: list[Path], rounds: int) -> list[dict[str, list]]:
    """Per bundle, each kernel's median milliseconds per run, one per round."""
    from ..remote.target import open_target

    times: list[dict[str, list]] = [{} for _ in bundles]
    target = open_target(board)
    try:
        repeat = 3
        for r in range(rounds):
            order = list(range(len(bundles)))
            order = order if r % 2 == 0 else order[::-1]
            slowest = 0.0
            for i in order:
                (row,), _ = target.bench([bundles[i]], repeat, profile=True)
                for k in row["profile"]["kernels"]:
                    times[i].setdefault(k["func"], []).append(k["median_ms"])
                slowest = max(slowest, row["median_ms"] / 1e3)
            if r == 0:  # every later run about RUN_SECONDS long
                repeat = max(3, int(RUN_SECONDS / max(slowest, 1e-6)))
            interrupts.check()
    finally:
        target.close()
    return times


def _reject(task: Task, records: list[dict], log: TuningLog, why: str, device=None) -> None:
    """Append a failed confirm round for every confirmed config of ``task`` among
    ``records`` other than its default (those on its target, of today's kernels): the
    build keeps the default."""
    here = task.target.fingerprint()
    mine = [
        r
        for r in records
        if r["task"]["key"] == task.key
        and same_target(r.get("target"), here)
        and measures_today(r, task)
    ]
    space = space_of(task)
    default = space.get(space.default_index())
    extra = {"confirm": True, "message": why}
    if task.family == "cpu":  # marked as the CPU timing driver marks its rounds
        extra.update(cpu_timing(task.board))
    for runs in confirmed(mine).values():
        index = space.index_of(runs[-1]["config"]["knobs"])
        if index is not None and space.get(index) != default:
            knobs = space.get(index)
            log.append(make_record(task.board, task, index, knobs, [], SLOWER, device, extra))
