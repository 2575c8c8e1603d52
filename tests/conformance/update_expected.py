"""Rewrite node_expected_failures.txt from a full run: python -m tests.conformance.update_expected

Prints the counts per status. Every failing case is listed with its status, but the suite
accepts only 'rejected' ones: a case that gives a wrong answer or an error is printed here
and keeps failing the suite until it is fixed.
"""

import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

from .node_suite import EXPECTED, NAMES, load_expected, run_case


def main() -> int:
    with ProcessPoolExecutor() as pool:
        results = dict(zip(NAMES, pool.map(run_case, NAMES, chunksize=8), strict=True))
    counts = Counter(s for s, _ in results.values())
    lines = [
        "# ONNX node cases expected to fail, with the reason (status: detail).",
        "# Regenerate: python -m tests.conformance.update_expected",
    ]
    kept = {n: r for n, r in load_expected().items() if r.startswith("tolerance")}
    for name, (status, detail) in sorted(results.items()):
        if name in kept and status == "wrong":  # checked against float64 by a test of ours
            lines.append(f"{name} {kept[name]}")
        elif status != "pass":
            lines.append(f"{name} {status}: {detail}")
    EXPECTED.write_text("\n".join(lines) + "\n")
    print(dict(counts), f"total {len(NAMES)}")
    for name, (status, detail) in sorted(results.items()):
        if status in ("wrong", "error") and name not in kept:
            print(f"  {status}: {name}: {detail}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
