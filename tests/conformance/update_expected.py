"""Rewrite node_expected_failures.txt from a full run: python -m tests.conformance.update_expected

Prints the counts per status. Cases giving a wrong answer are listed too (so the suite
stays green while they are fixed) but printed loudly: each one is a bug to fix.
"""

import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

from .node_suite import EXPECTED, NAMES, run_case


def main() -> int:
    with ProcessPoolExecutor() as pool:
        results = dict(zip(NAMES, pool.map(run_case, NAMES, chunksize=8)))
    counts = Counter(s for s, _ in results.values())
    lines = ["# ONNX node cases expected to fail, with the reason (status: detail).",
             "# Regenerate: python -m tests.conformance.update_expected"]
    for name, (status, detail) in sorted(results.items()):
        if status != "pass":
            lines.append(f"{name} {status}: {detail}")
    EXPECTED.write_text("\n".join(lines) + "\n")
    print(dict(counts), f"total {len(NAMES)}")
    for name, (status, detail) in sorted(results.items()):
        if status in ("wrong", "error"):
            print(f"  {status}: {name}: {detail}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
