"""Placing buffers with known lifetimes at offsets of one arena.

The problem: each block has a size and a lifetime ``[first, last]`` (execution steps,
inclusive); give each an offset so that two blocks whose lifetimes intersect never share
a byte, and the arena (the largest ``offset + size``) is as small as possible. It is
NP-hard in general (dynamic storage allocation), so we use a greedy heuristic:

*Greedy by order with best-fit gaps* (as in TensorFlow Lite's arena planner): take the
blocks one at a time in some priority order; for each, look only at the blocks already
placed whose lifetimes intersect it, sort them by offset and walk the gaps between them
(and below the first); put the block in the smallest gap it fits, or else just above the
highest of them. Blocks that are never alive at the same time do not constrain each
other at all, which is what makes this better than a free list replayed in time order:
a big block placed first reserves its range only for its own lifetime.

The order matters, and no single order wins on every graph, so we run three and keep
the smallest arena (ties: the first): by size (largest first: big blocks are the hard
ones to fit), by size × lifetime (long, large blocks form the skeleton), and by
lifetime start (the free-list order, good for chains). Each run is O(n²) in the number
of blocks with numpy doing the inner loop, a few milliseconds for a few hundred blocks.

The *live lower bound* is the largest sum of sizes of blocks alive at one step: no
placement can use less, so ``arena / lower bound`` measures the heuristic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Block:
    size: int  # bytes (callers pass sizes already rounded to the alignment)
    first: int  # first step it is alive (written)
    last: int  # last step it is alive (read), >= first


def live_lower_bound(blocks: list[Block]) -> int:
    """The largest total size of the blocks alive at one step."""
    if not blocks:
        return 0
    steps = max(b.last for b in blocks) + 2
    delta = np.zeros(steps, dtype=np.int64)
    for b in blocks:
        delta[b.first] += b.size
        delta[b.last + 1] -= b.size
    return int(np.cumsum(delta).max())


def place(blocks: list[Block]) -> tuple[list[int], int]:
    """(offset of each block, arena size): the best of the orderings above."""
    orders = (
        lambda i: (-blocks[i].size, blocks[i].first, i),
        lambda i: (-blocks[i].size * (blocks[i].last - blocks[i].first + 1), i),
        lambda i: (blocks[i].first, -blocks[i].size, i),
    )
    best: tuple[list[int], int] | None = None
    for key in orders:
        offsets, arena = _place_in_order(blocks, sorted(range(len(blocks)), key=key))
        if best is None or arena < best[1]:
            best = (offsets, arena)
    return best if best is not None else ([], 0)


def _place_in_order(blocks: list[Block], order: list[int]) -> tuple[list[int], int]:
    n = len(blocks)
    first = np.array([b.first for b in blocks], dtype=np.int64)
    last = np.array([b.last for b in blocks], dtype=np.int64)
    size = np.array([b.size for b in blocks], dtype=np.int64)
    offset = np.zeros(n, dtype=np.int64)
    placed = np.zeros(n, dtype=bool)
    for i in order:
        live = placed & (first <= last[i]) & (last >= first[i]) & (size > 0)
        idx = np.nonzero(live)[0]
        offset[i] = _best_gap(offset[idx], size[idx], int(size[i]))
        placed[i] = True
    arena = int((offset + size).max()) if n else 0
    return [int(o) for o in offset], arena


def _best_gap(offsets: np.ndarray, sizes: np.ndarray, need: int) -> int:
    """The start of the smallest free gap of at least ``need`` bytes among the given
    occupied ranges, or the end of the highest one."""
    best, best_gap, top = None, None, 0
    for k in np.argsort(offsets, kind="stable"):
        start, end = int(offsets[k]), int(offsets[k] + sizes[k])
        gap = start - top
        if gap >= need and (best_gap is None or gap < best_gap):
            best, best_gap = top, gap
        top = max(top, end)
    return top if best is None else best
