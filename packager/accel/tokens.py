"""The dependency-token pass (docs/accel.md, "Modules, queues and dependency tokens").

The load, compute and store modules run concurrently, each in program order; an
instruction of one that touches buffer tiles another module wrote (or reads tiles another
will overwrite) must wait for it. For each instruction j, in program order, and each
neighbouring module A, the pass finds the latest earlier A instruction i whose tiles
conflict with j's (read after write, write after read, write after write) and, unless j's
module already waited for i or a later A instruction, makes i push a token to j's module
and j pop it. The queues are FIFO, so the k-th pop takes the k-th push: pushes are placed
in increasing order along A exactly as pops are along j's module, and every push has its
pop. Footprints are tile intervals per buffer (conservative: a strided access covers its
whole span). With virtual threads the buffers of one thread are disjoint from another's,
so a thread's loads wait only for its own earlier computes."""

from __future__ import annotations

import numpy as np

from . import isa

LOAD_MOD, COMPUTE_MOD, STORE_MOD = range(3)
_LOADED_BY_LOAD_MODULE = (isa.INP, isa.WGT)


def module_of(insn: dict) -> int:
    op = insn["opcode"]
    if op == isa.LOAD:
        return LOAD_MOD if insn.get("buffer", 0) in _LOADED_BY_LOAD_MODULE else COMPUTE_MOD
    return STORE_MOD if op == isa.STORE else COMPUTE_MOD


def _span(uops, k: int, insn: dict, factor: str) -> tuple[int, int]:
    vals = [u[k] for u in uops[insn["uop_bgn"] : insn["uop_end"]]]
    if not vals:
        return 0, -1
    reach = (insn["iter_out"] - 1) * insn.get(f"{factor}_factor_out", 0)
    reach += (insn["iter_in"] - 1) * insn.get(f"{factor}_factor_in", 0)
    return min(vals), max(vals) + reach


def footprint(insn: dict, uops: list) -> tuple[list, list]:
    """(reads, writes): (buffer, first tile, last tile) intervals the instruction touches."""
    op = insn["opcode"]
    if op in (isa.LOAD, isa.STORE):
        rows = insn["y_pad_0"] + insn["y_size"] + insn["y_pad_1"]
        cols = insn["x_pad_0"] + insn["x_size"] + insn["x_pad_1"]
        region = [(insn["buffer"], insn["sram_base"], insn["sram_base"] + rows * cols - 1)]
        return ([], region) if op == isa.LOAD else (region, [])
    if op == isa.GEMM:
        acc = (isa.ACC, *_span(uops, 0, insn, "dst"))
        if insn["reset"]:
            return [], [acc]
        inp = (isa.INP, *_span(uops, 1, insn, "src"))
        wgt = (isa.WGT, *_span(uops, 2, insn, "wgt"))
        return [inp, wgt, acc], [acc]
    if op == isa.ALU:
        dst = (isa.ACC, *_span(uops, 0, insn, "dst"))
        src = [] if insn["use_imm"] else [(isa.ACC, *_span(uops, 1, insn, "src"))]
        return [dst, *src], [dst]
    return [], []


def _flags(a: int, b: int) -> tuple[str, str]:
    """(push flag on module a's instruction, pop flag on module b's) for a -> b."""
    return ("push_next", "pop_prev") if a < b else ("push_prev", "pop_next")


def insert_tokens(insns: list[dict], uops: list, depths: dict[int, int]) -> list[dict]:
    """Set the dependency flags of ``insns`` (a program ending in FINISH) in place and
    return them. ``depths``: tiles of each buffer id."""
    for i in insns:
        for f in ("pop_prev", "pop_next", "push_prev", "push_next"):
            i[f] = 0
    # latest writer and reader of each tile, per module
    last_w = {(b, m): np.full(d, -1, np.int64) for b, d in depths.items() for m in range(3)}
    last_r = {(b, m): np.full(d, -1, np.int64) for b, d in depths.items() for m in range(3)}
    last_of = [-1, -1, -1]  # latest instruction of each module
    synced: dict[tuple[int, int], int] = {}
    for j, insn in enumerate(insns):
        b = module_of(insn)
        need = [-1, -1, -1]
        if insn["opcode"] == isa.FINISH:  # the run ends when every module is done
            need = list(last_of)
        reads, writes = footprint(insn, uops)
        for a in range(3):
            if a == b:
                continue
            hits = [last_w[(buf, a)][lo : hi + 1] for buf, lo, hi in reads + writes]
            hits += [last_r[(buf, a)][lo : hi + 1] for buf, lo, hi in writes]
            need[a] = max([need[a]] + [int(h.max()) for h in hits if h.size])
        for a in range(3):
            i = need[a]
            if a == b or i < 0 or abs(a - b) != 1 or i <= synced.get((a, b), -1):
                continue
            push, pop = _flags(a, b)
            insns[i][push] = 1
            insn[pop] = 1
            synced[(a, b)] = i
        for buf, lo, hi in reads:
            last_r[(buf, b)][lo : hi + 1] = j
        for buf, lo, hi in writes:
            last_w[(buf, b)][lo : hi + 1] = j
        last_of[b] = j
    return insns
