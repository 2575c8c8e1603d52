"""bench/compare_ort.py's round-by-round ratios."""

from __future__ import annotations

import pytest

from .helpers import bench_module


def test_paired_ratios_take_each_round_against_its_own_peer():
    co = bench_module("compare_ort")
    # a phase of load slows both sides of the second round: by medians 31 / 41 = 0.76,
    # by rounds 30/40, 42/44, 31/41 -> 0.750, 0.955, 0.756
    med, lo, hi = co.paired([30.0, 42.0, 31.0], [40.0, 44.0, 41.0])
    assert med == pytest.approx(31 / 41)
    assert (lo, hi) == (pytest.approx(0.75), pytest.approx(42 / 44))
    assert co._rounds((med, lo, hi)) == "(rounds 0.76, 0.75-0.95)"
    # the rounds pair by position: 10/30, 11/10, 30/11 -> median 1.1, where the
    # ratio of the medians is 11 / 11
    assert co.paired([10.0, 11.0, 30.0], [30.0, 10.0, 11.0])[0] == pytest.approx(1.1)
    with pytest.raises(ValueError):
        co.paired([1.0, 2.0], [1.0])
