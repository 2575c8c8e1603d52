"""A pool of devices: the connections of one board, used in parallel.

Each device first passes a health check (connect, host key, a trivial command) or is taken
out. ``each_device`` runs one job per healthy device (deploy, clean); ``spread`` hands a
list of jobs to whichever device is idle, and when a device drops out mid-job (its
connection is lost) the job goes back to the queue for the others. The report says which
device did what and why a device was taken out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .errors import DeviceLost, HostKeyRefused, RemoteError
from .ssh import Session

# A device that fails with one of these is out of the pool; any other error is the job's.
DEVICE_FAILURES = (DeviceLost, HostKeyRefused)


@dataclass
class Outcome:
    job: Any
    device: str
    result: Any = None
    error: RemoteError | None = None


@dataclass
class PoolReport:
    outcomes: list[Outcome] = field(default_factory=list)
    down: dict[str, str] = field(default_factory=dict)  # device label -> why it is out

    def summary(self) -> list[str]:
        lines = []
        devices = sorted({o.device for o in self.outcomes})
        for d in devices:
            mine = [o for o in self.outcomes if o.device == d]
            failed = sum(1 for o in mine if o.error)
            lines.append(f"{d}: {len(mine)} job(s)" + (f", {failed} failed" if failed else ""))
        lines += [f"{d}: out of the pool: {why}" for d, why in sorted(self.down.items())]
        return lines


def health_check(session: Session) -> None:
    session.sh("true", timeout_s=session.limits.connect_timeout_s)


def each_device(sessions: list[Session], work: Callable[[Session], Any], log=None) -> PoolReport:
    """``work(session)`` on every healthy device, in parallel."""
    report, lock = PoolReport(), threading.Lock()

    def one(s: Session) -> None:
        outcome = Outcome(job=s.conn.label, device=s.conn.label)
        try:
            health_check(s)
            outcome.result = work(s)
        except DEVICE_FAILURES as e:
            with lock:
                report.down[s.conn.label] = str(e)
            _say(log, f"{s.who}: taken out of the pool: {e}")
            return
        except RemoteError as e:
            outcome.error = e
        with lock:
            report.outcomes.append(outcome)

    _run_threads(one, sessions)
    report.outcomes.sort(key=lambda o: o.device)
    return report


def spread(
    sessions: list[Session], jobs: list[Any], work: Callable[[Session, Any], Any], log=None
) -> PoolReport:
    """Every job done once, by whichever healthy device is free; jobs of a device that
    drops out are retried on the others. Jobs left when every device is out stay undone
    (``report.outcomes`` is shorter than ``jobs``)."""
    queue = _JobQueue(jobs)
    report, lock = PoolReport(), threading.Lock()

    def worker(s: Session) -> None:
        try:
            health_check(s)
        except DEVICE_FAILURES as e:
            with lock:
                report.down[s.conn.label] = str(e)
            _say(log, f"{s.who}: taken out of the pool: {e}")
            return
        while (job := queue.take()) is not _DONE:
            outcome = Outcome(job=job, device=s.conn.label)
            try:
                outcome.result = work(s, job)
            except DEVICE_FAILURES as e:
                with lock:
                    report.down[s.conn.label] = str(e)
                _say(log, f"{s.who}: lost during a job, retrying it on another device: {e}")
                queue.give_back(job)
                return
            except RemoteError as e:
                outcome.error = e
            except BaseException:
                queue.finished()  # a bug of ours: let the other workers stop too
                raise
            with lock:
                report.outcomes.append(outcome)
            queue.finished()

    _run_threads(worker, sessions)
    order = {id(j): i for i, j in enumerate(jobs)}
    report.outcomes.sort(key=lambda o: order.get(id(o.job), 0))
    return report


_DONE = object()


class _JobQueue:
    """Jobs waiting, and how many are being worked on: a worker waits while another may
    still give a job back, and stops when nothing is waiting or in progress."""

    def __init__(self, jobs: list[Any]):
        self.waiting = list(reversed(jobs))
        self.busy = 0
        self.cond = threading.Condition()

    def take(self) -> Any:
        with self.cond:
            while not self.waiting and self.busy:
                self.cond.wait()
            if not self.waiting:
                return _DONE
            self.busy += 1
            return self.waiting.pop()

    def finished(self) -> None:
        with self.cond:
            self.busy -= 1
            self.cond.notify_all()

    def give_back(self, job: Any) -> None:
        with self.cond:
            self.busy -= 1
            self.waiting.append(job)
            self.cond.notify_all()


def _run_threads(fn: Callable[[Session], None], sessions: list[Session]) -> None:
    with ThreadPoolExecutor(max_workers=max(1, len(sessions))) as ex:
        for f in [ex.submit(fn, s) for s in sessions]:
            f.result()  # re-raises a bug of ours (anything not a RemoteError)


def _say(log, msg: str) -> None:
    if log:
        log(msg)
