"""Progress on stderr: one updating line per task, and a summary table at the end."""

from __future__ import annotations

import sys
import time


def _fmt_s(s: float) -> str:
    return f"{int(s // 60)}m{int(s % 60):02d}s" if s >= 60 else f"{s:.0f}s"


class Progress:
    def __init__(self, stream=None, quiet: bool = False):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = getattr(self.stream, "isatty", lambda: False)()

    def start(self, k: int, n: int, label: str, total: int, unit: str = "GFLOP/s") -> None:
        """A task begins; ``unit``: what its speed is told in (tasks.Task.unit)."""
        self.head, self.total, self.t0 = f"[{k}/{n}] {label}", total, time.monotonic()
        self.unit = unit

    def note(self, msg: str) -> None:
        """A line of its own (a device taken out of the pool, the pool's summary)."""
        if not self.quiet:
            print(("\n" if self.tty else "") + msg, file=self.stream, flush=True)

    def update(self, trials: int, best: float) -> None:
        """After a batch: trials so far, the best speed in the task's unit."""
        if not self.tty and trials >= self.total:
            return  # finish() gives the same line, with why the task stopped
        spent = time.monotonic() - self.t0
        left = spent / trials * (self.total - trials) if trials else 0.0
        self._show(trials, best, f"ETA {_fmt_s(left)}", final=False)

    def finish(self, trials: int, best: float, why: str) -> None:
        """The task's last line: where it ended, and why."""
        self._show(trials, best, f"stopped: {why}" if why else "done", final=True)

    def _show(self, trials: int, best: float, tail: str, final: bool) -> None:
        if self.quiet:
            return
        width = 20
        fill = int(width * min(trials / max(self.total, 1), 1))
        line = (
            f"{self.head} |{'#' * fill}{'.' * (width - fill)}| {trials}/{self.total} trials"
            f"  best {best:.2f} {self.unit}  {tail}"
        )
        # A terminal gets one line redrawn in place; a log file gets a line per batch.
        end = "\n" if final or not self.tty else ""
        print(("\r\033[K" if self.tty else "") + line, end=end, file=self.stream, flush=True)


def summary_table(rows: list[dict]) -> str:
    """rows: task, weight, trials, default and best speed, unit, why it stopped."""
    head = ("task", "weight", "trials", "default", "best", "unit", "speed-up", "stopped")
    body = [
        (
            r["task"],
            str(r["weight"]),
            str(r["trials"]),
            f"{r['default']:.2f}",
            f"{r['best']:.2f}",
            r["unit"],
            f"{r['best'] / r['default']:.2f}x" if r["default"] else "-",
            r["stopped"],
        )
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = [
        "  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)).rstrip()
        for row in [head, *body]
    ]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])
