"""Two builds of one model, kernel by kernel: alternate `packager bench --profile` on
bundle A and bundle B for some rounds (one thread; ``--threads N``), keep each kernel's
lowest median over the rounds (a shared machine's neighbours only ever add time), and
print the sums and the kernels that cost most in A with their B/A ratios.

    python bench/ab_bundles.py out/before out/after --board host-avx2 --rounds 6

Build A and B from the same model (kernel names match) with the change between them.

On a virtual machine a build can be slow as a whole: one copy of a bundle ran an
unchanged kernel 1.5x slower than another copy of the same files in every round, and a
fresh copy of the slow one was fast (the memory its pages landed in, not its code).
``--copies N`` measures each side from N fresh copies (each built on its own) and keeps
the lowest; compare only where the kernels the change did not touch stay at 1.00.

Each round runs the sides in the other order from the last (A B, B A, ...): on a noisy
virtual machine (Zen 3, 2 cores) the side that always ran second read 0.76-0.90x on
kernels whose code was the same in both. The sums are printed twice, for the kernels
whose C source differs between A and B and for the rest, whose ratio is the noise floor.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROW = re.compile(r"^(k_\S+)\s+\S+\s+(\d+)\s+([0-9.]+)\s")


def profile(
    bundle: str, board: str, repeat: int, threads: int = 1
) -> tuple[dict[str, float], float]:
    """Per-kernel medians (ms) and the whole run's median of one `bench --profile`."""
    cmd = [shutil.which("packager") or "packager", "bench", bundle, "--board", board]
    cmd += ["--repeat", str(repeat), "--profile"]
    env = dict(os.environ, PACKAGER_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    kernels, total = {}, float("nan")
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            kernels[m.group(1)] = float(m.group(3))
        elif line.startswith("{"):
            total = json.loads(line)["median_ms"]
    return kernels, total


def _copy(bundle: str, dest: str) -> str:
    """A copy of the bundle's files without its build, which the first run makes anew."""
    shutil.copytree(bundle, dest, ignore=shutil.ignore_patterns("build"))
    return dest


def changed_kernels(a: str, b: str) -> set[str]:
    """The kernels (function names) whose generated C differs between bundles a and b, or
    exists in one of them only."""

    def source(bundle: str, name: str) -> bytes | None:
        path = Path(bundle, "kernels", f"{name}.c")
        return path.read_bytes() if path.is_file() else None

    names = {p.stem for d in (a, b) for p in Path(d, "kernels").glob("k_*.c")}
    return {n for n in names if source(a, n) != source(b, n)}


def round_order(runs: list, r: int) -> list:
    """The runs of round ``r``: as given in even rounds, reversed in odd ones."""
    return runs if r % 2 == 0 else runs[::-1]


def _sums(best: dict, a: str, b: str, kernels: set[str]) -> str:
    sa = sum(best[a].get(k, 0.0) for k in kernels)
    sb = sum(best[b].get(k, 0.0) for k in kernels)
    ratio = f"{sb / sa:.3f}" if sa else "-"
    count = f"{len(kernels)} kernel{'' if len(kernels) == 1 else 's'}"
    return f"A {sa:.3f} ms, B {sb:.3f} ms, B/A {ratio} ({count})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--board", default="host")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--copies", type=int, default=1, help="fresh copies of each bundle")
    ap.add_argument("--threads", type=int, default=1, help="PACKAGER_NUM_THREADS of the runs")
    args = ap.parse_args(argv)
    best: dict[str, dict[str, float]] = {args.a: {}, args.b: {}}
    totals: dict[str, list[float]] = {args.a: [], args.b: []}
    with tempfile.TemporaryDirectory(prefix="ab_bundles_") as tmp:
        runs = [(x, x) for x in (args.a, args.b)]
        if args.copies > 1:
            runs = [
                (x, _copy(x, os.path.join(tmp, f"{side}{k}")))
                for k in range(args.copies)
                for side, x in (("a", args.a), ("b", args.b))
            ]
        for r in range(args.rounds):
            for side, bundle in round_order(runs, r):
                kernels, total = profile(bundle, args.board, args.repeat, args.threads)
                totals[side].append(total)
                for k, ms in kernels.items():
                    best[side][k] = min(ms, best[side].get(k, ms))
    sa, sb = (sum(best[x].values()) for x in (args.a, args.b))
    mid = {x: sorted(t)[len(t) // 2] for x, t in totals.items()}
    print(f"kernels, sum of lowest medians: A {sa:.3f} ms, B {sb:.3f} ms, B/A {sb / sa:.3f}")
    print(f"whole runs, median of medians:  A {mid[args.a]:.3f} ms, B {mid[args.b]:.3f} ms")
    changed = changed_kernels(args.a, args.b)
    every = set(best[args.a]) | set(best[args.b])
    print(f"kernels the change made differ: {_sums(best, args.a, args.b, every & changed)}")
    print(f"kernels alike in A and B:       {_sums(best, args.a, args.b, every - changed)}")
    for k in sorted(best[args.a], key=lambda k: -best[args.a][k])[: args.top]:
        a, b = best[args.a][k], best[args.b].get(k, float("nan"))
        print(f"  {k:<40} {a:8.4f} {b:8.4f}  {b / a:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
