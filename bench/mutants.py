"""Build randomly mutated models and count the outcomes.

    python bench/mutants.py --count 1000 [--start 0] [--jobs 2] [--timeout 30]

Each mutant is a real model with one to three seeded mutations (tests/mutation.py), built
with ``packager build`` in a process of its own. Prints the count of each outcome (ok,
refused, internal, hang, selftest), the distinct error messages, and every failure with
its seed: ``python bench/mutants.py --seed N`` rebuilds that one mutant and shows it.
Exits 1 if any mutant failed.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.mutation import TIME_LIMIT_S, run_many  # noqa: E402


def _shape_of(message: str) -> str:
    # Messages differ by names and numbers; their shape groups them.
    text = re.sub(r"'[^']*'", "'…'", message)
    return re.sub(r"-?\d+", "N", text)[:150]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--count", type=int, default=200)
    p.add_argument("--start", type=int, default=0, help="the first seed")
    p.add_argument("--seed", type=int, nargs="+", help="run just these seeds, shown in full")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=TIME_LIMIT_S)
    p.add_argument("--messages", type=int, default=40, help="distinct messages to list")
    args = p.parse_args(argv)
    seeds = args.seed if args.seed is not None else range(args.start, args.start + args.count)
    t0 = time.perf_counter()
    kinds: Counter = Counter()
    shapes: Counter = Counter()
    failures = []
    for o in run_many(seeds, args.jobs, args.timeout):
        kinds[o.kind] += 1
        if o.kind == "refused":
            shapes[_shape_of(o.message)] += 1
        if o.failed or args.seed is not None:
            failures.append(o)
    print(f"{len(seeds)} mutants in {time.perf_counter() - t0:.0f}s")
    for kind in ("ok", "refused", "internal", "hang", "selftest"):
        print(f"  {kind:<9} {kinds[kind]:>5}")
    print(f"distinct refusals ({len(shapes)}), most common first:")
    for shape, n in shapes.most_common(args.messages):
        print(f"  {n:>4}  {shape}")
    for o in failures:
        print(f"seed {o.seed} [{o.kind}, exit {o.code}] {o.base}: {'; '.join(o.changes)}")
        print(f"    {o.message[:300]}")
    return 1 if any(o.failed for o in failures) else 0


if __name__ == "__main__":
    sys.exit(main())
