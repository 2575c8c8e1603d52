"""bench/ab_bundles.py's bookkeeping: which kernels a change touched, and the order of
the sides in each round."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import ab_bundles  # noqa: E402


def _bundle(root: Path, name: str, kernels: dict[str, str]) -> str:
    d = root / name / "kernels"
    d.mkdir(parents=True)
    for k, src in kernels.items():
        (d / f"{k}.c").write_text(src)
    (d / "registry.c").write_text(name)  # not a kernel: never listed
    return str(root / name)


def test_changed_kernels_are_those_whose_source_differs_or_exists_once(tmp_path):
    a = _bundle(tmp_path, "a", {"k_0_conv": "x", "k_1_conv": "y", "k_2_pool": "z"})
    b = _bundle(tmp_path, "b", {"k_0_conv": "x", "k_1_conv": "y2", "k_3_gemm": "w"})
    assert ab_bundles.changed_kernels(a, b) == {"k_1_conv", "k_2_pool", "k_3_gemm"}
    assert ab_bundles.changed_kernels(a, a) == set()


def test_rounds_alternate_which_side_runs_first():
    runs = [("a", "a0"), ("b", "b0"), ("a", "a1"), ("b", "b1")]
    assert ab_bundles.round_order(runs, 0) == runs
    assert ab_bundles.round_order(runs, 1) == runs[::-1]
    assert ab_bundles.round_order(runs, 2) == runs


def test_sums_split_by_kernel_set():
    best = {"A": {"k_0": 2.0, "k_1": 1.0}, "B": {"k_0": 1.0, "k_1": 1.0}}
    assert ab_bundles._sums(best, "A", "B", {"k_0"}) == (
        "A 2.000 ms, B 1.000 ms, B/A 0.500 (1 kernel)"
    )
    assert ab_bundles._sums(best, "A", "B", set()).endswith("B/A - (0 kernels)")
