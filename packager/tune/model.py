"""The cost model: XGBoost with a pairwise ranking objective.

It only has to order the candidates of one task (which is faster), not predict seconds,
so it learns from relative throughput: label = best cost / cost (1 for the best so far,
0 for a failed candidate). Records of the same template from other shapes or boards can
be added as their own ranking groups (transfer: a warm start before the first batch).
"""

from __future__ import annotations

import numpy as np

PARAMS = {
    "objective": "rank:pairwise",
    "eta": 0.2,
    "max_depth": 6,
    "min_child_weight": 1,
    "subsample": 0.9,
    "lambda": 1.0,
    "verbosity": 0,
    "nthread": 2,
}
ROUNDS = 60


def labels(costs: np.ndarray) -> np.ndarray:
    """Relative throughput; +inf (an error) gives 0."""
    finite = costs[np.isfinite(costs)]
    if not len(finite):
        return np.zeros(len(costs), np.float32)
    return np.where(np.isfinite(costs), finite.min() / costs, 0.0).astype(np.float32)


class CostModel:
    def __init__(self, seed: int = 0):
        self.seed = seed
        self.booster = None
        self.groups: list[tuple[np.ndarray, np.ndarray]] = []  # transfer data

    def add_group(self, x: np.ndarray, costs: np.ndarray) -> None:
        """Measurements of another task (same template): ranked among themselves only."""
        if len(x) >= 2:
            self.groups.append((x, labels(costs)))

    def fit(self, x: np.ndarray, costs: np.ndarray) -> None:
        import xgboost as xgb

        parts = [*self.groups, (x, labels(costs))]
        parts = [(a, b) for a, b in parts if len(a) and a.shape[1] == x.shape[1]]
        if sum(len(a) for a, _ in parts) < 4:
            return
        d = xgb.DMatrix(
            np.concatenate([a for a, _ in parts]), np.concatenate([b for _, b in parts])
        )
        d.set_group([len(a) for a, _ in parts])
        self.booster = xgb.train({**PARAMS, "seed": self.seed}, d, ROUNDS)

    @property
    def fitted(self) -> bool:
        return self.booster is not None

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Scores: higher is faster. Zeros before the first fit."""
        import xgboost as xgb

        if self.booster is None or not len(x):
            return np.zeros(len(x))
        return self.booster.predict(xgb.DMatrix(x))
