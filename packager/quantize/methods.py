"""Range methods: from an activation's observed statistics to the range it is quantized over.

Every method sees one ``Stats`` per tensor (its min, max and a histogram of |x| over
[0, max |x|]) and returns ``(lo, hi)``; qdq.py turns the range into a scale and zero point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BINS = 2048  # histogram resolution of |x|: the entropy search's candidate thresholds


@dataclass
class Stats:
    lo: float
    hi: float
    hist: np.ndarray | None = None  # counts of non-zero |x| in BINS bins over [0, absmax]
    # Exact zeros (half of a Relu's outputs) are counted apart: every quantizer represents
    # 0 exactly, and a spike in the first bin would pull the entropy search towards small
    # thresholds (the spike smeared over a merged bucket costs more the wider it is).
    zeros: int = 0

    @property
    def absmax(self) -> float:
        return max(abs(self.lo), abs(self.hi))


def minmax_range(stats: Stats, **_) -> tuple[float, float]:
    return stats.lo, stats.hi


def percentile_threshold(
    hist: np.ndarray, absmax: float, percentile: float, zeros: int = 0
) -> float:
    """The smallest bin edge below which ``percentile`` % of the |x| counts lie (``zeros``
    more values at 0, outside ``hist``)."""
    cdf = np.cumsum(hist, dtype=np.float64) + zeros
    if cdf[-1] == 0:
        return absmax
    i = int(np.searchsorted(cdf, cdf[-1] * percentile / 100.0))
    return absmax * min(i + 1, len(hist)) / len(hist)


def _expand(p: np.ndarray, levels: int) -> np.ndarray:
    """P merged into ``levels`` buckets, each spread evenly over its non-empty bins: the
    distribution a quantizer with that many levels can represent."""
    sizes = np.full(levels, len(p) // levels)
    sizes[: len(p) % levels] += 1
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    nonzero = p > 0
    sums = np.add.reduceat(p, starts)
    counts = np.add.reduceat(nonzero.astype(np.float64), starts)
    return np.repeat(sums / np.maximum(counts, 1), sizes) * nonzero


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    p = p / p.sum()
    q = q / q.sum()
    mask = p > 0
    # A bin P holds that Q lost costs a large but finite penalty instead of infinity.
    return float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))


def entropy_threshold(hist: np.ndarray, absmax: float, levels: int = 128) -> float:
    """The threshold T minimising KL(P || Q): P is the |x| histogram clipped at T (the
    counts above folded into its last bin), Q that histogram squeezed to ``levels`` levels."""
    hist = hist.astype(np.float64)
    if hist.sum() == 0 or len(hist) <= levels:
        return absmax
    best_i, best_kl = len(hist), np.inf
    for i in range(levels, len(hist) + 1):
        p = hist[:i].copy()
        p[-1] += hist[i:].sum()
        q = _expand(hist[:i], levels)
        kl = _kl(p, q) if q.sum() else np.inf
        if kl < best_kl:
            best_i, best_kl = i, kl
    return absmax * (best_i + 0.5) / len(hist) if best_i < len(hist) else absmax


def _clipped(stats: Stats, t: float) -> tuple[float, float]:
    return max(stats.lo, -t), min(stats.hi, t)


def percentile_range(stats: Stats, percentile: float = 99.99, **_) -> tuple[float, float]:
    return _clipped(stats, percentile_threshold(stats.hist, stats.absmax, percentile, stats.zeros))


def entropy_range(stats: Stats, levels: int = 128, **_) -> tuple[float, float]:
    # A tensor with no more distinct magnitudes than levels (an image of 16 grey levels, a
    # few logits) is no distribution to fit: every clipped P is trivially matched (KL ~ 0).
    if np.count_nonzero(stats.hist) <= levels:
        return minmax_range(stats)
    return _clipped(stats, entropy_threshold(stats.hist, stats.absmax, levels))


METHODS = {"minmax": minmax_range, "percentile": percentile_range, "entropy": entropy_range}
NEEDS_HISTOGRAM = {"minmax": False, "percentile": True, "entropy": True}
