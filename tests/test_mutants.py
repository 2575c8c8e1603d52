"""Randomly mutated real models: every build ends in a bundle that passes its selftest or a
clear error (exit 2), never an internal error, a traceback or a hang (tests/mutation.py).

The default run builds a few hundred mutants; PACKAGER_MUTANTS=N runs N of them.
bench/mutants.py runs any count and prints the outcomes; ``--seed N`` reproduces one.
"""

from __future__ import annotations

import os

from tests.mutation import run_many

DEFAULT_COUNT = 240


def test_mutants_build_or_are_refused_clearly(tmp_path):
    count = int(os.environ.get("PACKAGER_MUTANTS", DEFAULT_COUNT))
    failures = [o for o in run_many(range(count), jobs=2, workdir=tmp_path) if o.failed]
    report = [
        f"seed {o.seed} [{o.kind}] {o.base}: {'; '.join(o.changes)}\n    {o.message[:300]}"
        for o in failures
    ]
    assert not failures, f"{len(failures)} of {count} mutants failed:\n" + "\n".join(report)
