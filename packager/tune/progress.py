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

    def start(self, k: int, n: int, label: str, total: int) -> None:
        self.head, self.total, self.t0 = f"[{k}/{n}] {label}", total, time.monotonic()

    def note(self, msg: str) -> None:
        """A line of its own (a device taken out of the pool, the pool's summary)."""
        if not self.quiet:
            print(("\n" if self.tty else "") + msg, file=self.stream, flush=True)

    def update(self, trials: int, gflops: float, final: bool = False) -> None:
        if self.quiet:
            return
        spent = time.monotonic() - self.t0
        left = spent / trials * (self.total - trials) if trials else 0.0
        width = 20
        fill = int(width * min(trials / max(self.total, 1), 1))
        line = (
            f"{self.head} |{'#' * fill}{'.' * (width - fill)}| {trials}/{self.total} trials"
            f"  best {gflops:.2f} GFLOPS  ETA {_fmt_s(0 if final else left)}"
        )
        # A terminal gets one line redrawn in place; a log file gets a line per batch.
        end = "\n" if final or not self.tty else ""
        if line == getattr(self, "last", None) and not self.tty:
            return  # the final line repeats the last batch's
        self.last = line
        print(("\r" if self.tty else "") + line, end=end, file=self.stream, flush=True)


def summary_table(rows: list[dict]) -> str:
    """rows: task, weight, trials, default/best GFLOPS."""
    head = ("task", "weight", "trials", "default GFLOPS", "best GFLOPS", "speed-up")
    body = [
        (
            r["task"],
            str(r["weight"]),
            str(r["trials"]),
            f"{r['default_gflops']:.2f}",
            f"{r['best_gflops']:.2f}",
            f"{r['best_gflops'] / r['default_gflops']:.2f}x" if r["default_gflops"] else "-",
        )
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = [
        "  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)) for row in [head, *body]
    ]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])
