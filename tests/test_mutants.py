"""Randomly mutated real models: every build ends in a bundle that passes its selftest or a
clear error (exit 2), never an internal error, a traceback or a hang (tests/mutation.py).

The quick test builds the first few hundred mutants; the slow one (CI runs it too) the rest
up to 1,000, so together they cover seeds 0-999. PACKAGER_MUTANTS=N makes the slow one go up
to N. bench/mutants.py runs any count and prints the outcomes; ``--seed N`` reproduces one.
"""

from __future__ import annotations

import os

import pytest

from tests.mutation import run_many

QUICK = 240
FULL = 1000


def _check(seeds: range, tmp_path) -> None:
    failures = [o for o in run_many(seeds, jobs=2, workdir=tmp_path) if o.failed]
    report = [
        f"seed {o.seed} [{o.kind}] {o.base}: {'; '.join(o.changes)}\n    {o.message[:300]}"
        for o in failures
    ]
    assert not failures, f"{len(failures)} of {len(seeds)} mutants failed:\n" + "\n".join(report)


def test_mutants_build_or_are_refused_clearly(tmp_path):
    _check(range(QUICK), tmp_path)


@pytest.mark.slow
def test_a_thousand_mutants(tmp_path):
    _check(range(QUICK, int(os.environ.get("PACKAGER_MUTANTS", FULL))), tmp_path)
