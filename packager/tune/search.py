"""Proposing the next batch of configs: model-guided (simulated annealing), random,
genetic, or grid. Every proposer returns indices not measured yet.

Annealing walks the index space one knob at a time (a neighbour changes one knob to
another candidate), accepting worse points with a probability that falls with the
temperature, and keeps the best-scored points it saw. A quarter of the batch is the
model's best one-knob changes of the three best measured configs (the fine steps, a loop
order or a split, that annealing over a model of a space spanning 100x in speed tends to
step over); the rest takes the annealing's points in score order, skipping any within
one knob of a point already taken (diversity), and fills a share with random picks so
the model keeps seeing the parts of the space it rates low.
"""

from __future__ import annotations

import math

import numpy as np

from .space import ConfigSpace


def _random_new(space: ConfigSpace, seen: set[int], n: int, rng) -> list[int]:
    out: list[int] = []
    if space.size - len(seen) <= 4 * n:  # nearly exhausted: take what is left
        left = [i for i in range(space.size) if i not in seen]
        rng.shuffle(left)
        return left[:n]
    while len(out) < n:
        i = int(rng.integers(space.size))
        if i not in seen and i not in out:
            out.append(i)
    return out


def random_batch(space, seen, n, rng, **_) -> list[int]:
    return _random_new(space, seen, n, rng)


def grid_batch(space, seen, n, rng, **_) -> list[int]:
    return [i for i in range(space.size) if i not in seen][:n]


def _neighbour(space: ConfigSpace, index: int, rng) -> int:
    digits = space.digits(index)
    movable = [k for k, knob in enumerate(space.knobs) if len(knob.candidates) > 1]
    if not movable:
        return index
    k = movable[int(rng.integers(len(movable)))]
    step = int(rng.integers(1, len(space.knobs[k].candidates)))
    digits[k] = (digits[k] + step) % len(space.knobs[k].candidates)
    return space.from_digits(digits)


def anneal(space, score, starts: list[int], rng, steps: int = 60, keep: int = 64) -> dict:
    """{index: score} of the best points the chains visited; ``score(list) -> array``."""
    points = list(starts)
    scores = list(score(points))
    best = dict(zip(points, scores, strict=True))
    for step in range(steps):
        temp = max(1e-3, 1.0 - step / steps)
        cand = [_neighbour(space, p, rng) for p in points]
        new = score(cand)
        for k, (c, s) in enumerate(zip(cand, new, strict=True)):
            best[c] = s
            if s >= scores[k] or rng.random() < math.exp((s - scores[k]) / temp):
                points[k], scores[k] = c, s
        if len(best) > 4 * keep:
            best = dict(sorted(best.items(), key=lambda kv: -kv[1])[: 2 * keep])
    return best


def _hamming(space: ConfigSpace, a: int, b: int) -> int:
    return sum(x != y for x, y in zip(space.digits(a), space.digits(b), strict=True))


def neighbours(space: ConfigSpace, index: int) -> list[int]:
    """Every setting one knob away from ``index``."""
    digits = space.digits(index)
    out = []
    for k, knob in enumerate(space.knobs):
        for d in range(len(knob.candidates)):
            if d != digits[k]:
                out.append(space.from_digits([*digits[:k], d, *digits[k + 1 :]]))
    return out


def _local(space, seen, n, score, top) -> list[int]:
    """The model's best unmeasured one-knob changes of the best measured configs: the fine
    steps (a loop order, a split) annealing over a model trained mostly on coarse
    differences tends to step over."""
    cand = list(dict.fromkeys(j for i in list(top)[:3] for j in neighbours(space, i)))
    cand = [j for j in cand if j not in seen]
    if not cand or n <= 0:
        return []
    order = np.argsort(-np.asarray(score(cand)), kind="stable")
    return [cand[k] for k in order[:n]]


def model_batch(space, seen, n, rng, score=None, top=(), eps=0.2, local=0.25, **_) -> list[int]:
    """Annealing over the model's scores from the best measured points and random ones; a
    share ``local`` of the batch from the best measured configs' neighbours, a share
    ``eps`` random."""
    n_random = max(1, int(round(n * eps)))
    picked = _local(space, seen, min(int(n * local), n - n_random), score, top)
    starts = list(top)[:8] + _random_new(space, seen, 32, rng)
    found = anneal(space, score, starts, rng, steps=150)
    ranked = [i for i, _ in sorted(found.items(), key=lambda kv: -kv[1]) if i not in seen]
    for i in ranked:
        if len(picked) >= n - n_random:
            break
        if all(_hamming(space, i, p) > 1 for p in picked):
            picked.append(i)
    for i in ranked:  # the diversity filter may leave the batch short: fill it up
        if len(picked) >= n - n_random:
            break
        if i not in picked:
            picked.append(i)
    return picked + _random_new(space, seen | set(picked), n - len(picked), rng)


def ga_batch(space, seen, n, rng, top=(), **_) -> list[int]:
    """One generation: uniform crossover of two of the best measured, then a mutation."""
    parents = list(top)[:16]
    if len(parents) < 2:
        return _random_new(space, seen, n, rng)
    out: list[int] = []
    for _ in range(n * 20):
        if len(out) >= n:
            break
        a, b = (space.digits(parents[int(rng.integers(len(parents)))]) for _ in range(2))
        child = [x if rng.random() < 0.5 else y for x, y in zip(a, b, strict=True)]
        i = space.from_digits(child)
        if rng.random() < 0.3 or i in seen:
            i = _neighbour(space, i, rng)
        if i not in seen and i not in out:
            out.append(i)
    return out + _random_new(space, seen | set(out), n - len(out), rng)


PROPOSERS = {"xgb": model_batch, "random": random_batch, "ga": ga_batch, "grid": grid_batch}


def new_rng(seed: int):
    return np.random.default_rng(seed)
