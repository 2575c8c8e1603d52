"""A numpy functional model of the accelerator (docs/accel.md): runs a Program in
program order against argument arrays, and checks what the hardware would need for that
order to be the one that happens:

- tokens: every pop has a matching earlier push on its queue, no flag names a missing
  neighbour, every push is popped by the end, and the last instruction is FINISH;
- races: each instruction that touches a buffer tile another module wrote before it (or
  writes a tile another module read or wrote) is ordered after that access by the
  happens-before the modules' program order and the tokens give (vector clocks), so
  any timing of the three modules computes what program order does.

The C simulator (c_runtime/accel/pk_accel_sim.c) is the cycle model; this is the
compiler's oracle."""

from __future__ import annotations

import numpy as np

from . import isa
from .program import UOPS, AccelConfig, Program
from .tokens import module_of

_MODULES = ("load", "compute", "store")


class AccelRunError(RuntimeError):
    pass


class _Machine:
    def __init__(self, prog: Program, config: AccelConfig, args: list[np.ndarray]):
        c = config
        self.c = c
        # every field present (absent ones are 0, as in the encoding)
        self.prog = Program(
            prog.name,
            prog.n_args,
            [isa.decode(isa.encode(i)) for i in prog.insns],
            prog.uops,
            prog.relocs,
        )
        self.bufs = {
            isa.UOP: np.zeros((c.uop_depth, 3), np.int64),
            isa.INP: np.zeros((c.inp_depth, c.batch * c.block_in), np.int8),
            isa.WGT: np.zeros((c.wgt_depth, c.block_out, c.block_in), np.int8),
            isa.ACC: np.zeros((c.acc_depth, c.batch * c.block_out), np.int32),
        }
        self.tile_bytes = {
            isa.UOP: isa.UOP_BYTES,
            isa.INP: c.batch * c.block_in,
            isa.WGT: c.block_out * c.block_in,
            isa.ACC: 4 * c.batch * c.block_out,
        }
        self.regions = {k: a.reshape(-1).view(np.uint8) for k, a in enumerate(args)}
        self.regions[UOPS] = np.frombuffer(prog.uop_bytes(), np.uint8).copy()
        self.reloc = dict(prog.relocs)
        n = len(prog.insns)
        self.vc = np.zeros((n, 3), np.int64)  # vector clocks: module positions seen
        self.pos = np.zeros(n, np.int64)
        self.mod = np.zeros(n, np.int64)
        self.queues: dict[tuple[int, int], list[int]] = {}
        self.last_w = {b: np.full(len(a), -1, np.int64) for b, a in self.bufs.items()}
        self.last_r = {
            (b, m): np.full(len(a), -1, np.int64) for b, a in self.bufs.items() for m in range(3)
        }

    # --- tokens and ordering ---

    def _sync(self, j: int, insn: dict, clock: np.ndarray) -> np.ndarray:
        m = module_of(insn)
        for flag, other in (("pop_prev", m - 1), ("pop_next", m + 1)):
            if not insn.get(flag):
                continue
            if not 0 <= other < 3:
                raise AccelRunError(f"insn {j}: {flag} on the {_MODULES[m]} module, which has none")
            q = self.queues.get((other, m), [])
            if not q:
                raise AccelRunError(
                    f"insn {j}: {flag} pops the {_MODULES[other]}->{_MODULES[m]} queue "
                    "with no earlier push"
                )
            clock = np.maximum(clock, self.vc[q.pop(0)])
        return clock

    def _push(self, j: int, insn: dict) -> None:
        m = module_of(insn)
        for flag, other in (("push_prev", m - 1), ("push_next", m + 1)):
            if insn.get(flag):
                if not 0 <= other < 3:
                    raise AccelRunError(f"insn {j}: {flag} on the {_MODULES[m]} module")
                self.queues.setdefault((m, other), []).append(j)

    def _check(self, j: int, buf: int, tiles: np.ndarray, write: bool) -> None:
        """Every earlier access by another module that conflicts is ordered before j."""
        m = self.mod[j]
        tiles = np.unique(tiles)
        if tiles.size and (tiles.min() < 0 or tiles.max() >= len(self.bufs[buf])):
            raise AccelRunError(f"insn {j}: buffer {buf} tile out of range")
        for a in range(3):
            if a == m:
                continue
            prior = [self.last_w[buf][tiles]]
            if write:
                prior.append(self.last_r[(buf, a)][tiles])
            for p in prior:
                p = p[(p >= 0) & (self.mod[np.maximum(p, 0)] == a)]
                late = p[self.vc[j, a] < self.pos[p]]
                if late.size:
                    raise AccelRunError(
                        f"race: insn {j} ({_MODULES[m]}) and insn {int(late[0])} "
                        f"({_MODULES[a]}) touch buffer {buf} with no token between them"
                    )
        if write:
            self.last_w[buf][tiles] = j
        else:
            self.last_r[(buf, m)][tiles] = j

    # --- instructions ---

    def _dram(self, j: int, insn: dict, off: int, n: int) -> np.ndarray:
        region = self.reloc.get(j)
        if region is None or region not in self.regions:
            raise AccelRunError(f"insn {j}: no relocation to a region")
        mem = self.regions[region]
        if off < 0 or off + n > len(mem):
            raise AccelRunError(f"insn {j}: DMA [{off}, {off + n}) outside region {region}")
        return mem[off : off + n]

    def _memory(self, j: int, insn: dict) -> None:
        buf = insn["buffer"]
        rows = insn["y_pad_0"] + insn["y_size"] + insn["y_pad_1"]
        cols = insn["x_pad_0"] + insn["x_size"] + insn["x_pad_1"]
        tiles = insn["sram_base"] + np.arange(rows * cols)
        store = insn["opcode"] == isa.STORE
        dram_tile = self.c.batch * self.c.block_out if store else self.tile_bytes[buf]
        self._check(j, buf, tiles, write=not store)
        mem = self.bufs[buf]
        for r in range(rows):
            for c in range(cols):
                t = insn["sram_base"] + r * cols + c
                y, x = r - insn["y_pad_0"], c - insn["x_pad_0"]
                pad = not (0 <= y < insn["y_size"] and 0 <= x < insn["x_size"])
                if store:
                    if pad:
                        raise AccelRunError(f"insn {j}: STORE with padding")
                    off = insn["dram_base"] + (y * insn["x_stride"] + x) * dram_tile
                    self._dram(j, insn, off, dram_tile)[:] = mem[t].astype(np.int8).view(np.uint8)
                elif pad:
                    if buf == isa.UOP:
                        raise AccelRunError(f"insn {j}: micro-op LOAD with padding")
                    mem[t] = insn["pad_value"] if buf == isa.INP else 0
                else:
                    off = insn["dram_base"] + (y * insn["x_stride"] + x) * dram_tile
                    raw = self._dram(j, insn, off, dram_tile)
                    if buf == isa.UOP:
                        u = isa.decode_uop(raw.tobytes())
                        mem[t] = (u["acc"], u["inp"], u["wgt"])
                    else:
                        mem[t] = raw.view(mem.dtype).reshape(mem.shape[1:])

    def _loop_index(self, insn: dict, field: str, col: int) -> np.ndarray:
        uops = self.bufs[isa.UOP][insn["uop_bgn"] : insn["uop_end"], col]
        i0 = np.arange(insn["iter_out"])[:, None, None]
        i1 = np.arange(insn["iter_in"])[None, :, None]
        out = uops[None, None, :] + i0 * insn.get(f"{field}_factor_out", 0)
        return (out + i1 * insn.get(f"{field}_factor_in", 0)).reshape(-1)

    def _gemm(self, j: int, insn: dict) -> None:
        self._check(j, isa.UOP, np.arange(insn["uop_bgn"], insn["uop_end"]), write=False)
        a = self._loop_index(insn, "dst", 0)
        acc = self.bufs[isa.ACC]
        if insn["reset"]:
            self._check(j, isa.ACC, a, write=True)
            acc[a] = 0
            return
        x = self._loop_index(insn, "src", 1)
        w = self._loop_index(insn, "wgt", 2)
        self._check(j, isa.INP, x, write=False)
        self._check(j, isa.WGT, w, write=False)
        self._check(j, isa.ACC, a, write=False)
        self._check(j, isa.ACC, a, write=True)
        xs = self.bufs[isa.INP][x].astype(np.int64)
        ws = self.bufs[isa.WGT][w].astype(np.int64)
        prod = np.einsum("ni,noi->no", xs, ws)
        total = acc.astype(np.int64)
        np.add.at(total, a, prod)
        acc[:] = total.astype(np.int32)  # wraps, as the hardware's adders

    def _alu(self, j: int, insn: dict) -> None:
        self._check(j, isa.UOP, np.arange(insn["uop_bgn"], insn["uop_end"]), write=False)
        d = self._loop_index(insn, "dst", 0)
        s = self._loop_index(insn, "src", 1)
        if not insn["use_imm"]:
            self._check(j, isa.ACC, s, write=False)
        self._check(j, isa.ACC, d, write=True)
        acc = self.bufs[isa.ACC]
        if len(np.unique(d)) == len(d) and (insn["use_imm"] or not np.isin(s, d).any()):
            b = np.int64(insn["imm"]) if insn["use_imm"] else acc[s].astype(np.int64)
            acc[d] = _alu_op(insn["alu_op"], acc[d].astype(np.int64), b)
            return
        for dk, sk in zip(d, s, strict=True):  # in order: a source may be a destination
            b = np.int64(insn["imm"]) if insn["use_imm"] else acc[sk].astype(np.int64)
            acc[dk] = _alu_op(insn["alu_op"], acc[dk].astype(np.int64), b)

    def run(self) -> None:
        insns = self.prog.insns
        if not insns or insns[-1]["opcode"] != isa.FINISH:
            raise AccelRunError(f"{self.prog.name}: the program does not end with FINISH")
        count = [0, 0, 0]
        last = [-1, -1, -1]
        for j, insn in enumerate(insns):
            m = module_of(insn)
            self.mod[j] = m
            count[m] += 1
            self.pos[j] = count[m]
            clock = self.vc[last[m]].copy() if last[m] >= 0 else np.zeros(3, np.int64)
            clock = self._sync(j, insn, clock)
            clock[m] = count[m]
            self.vc[j] = clock
            last[m] = j
            op = insn["opcode"]
            if op in (isa.LOAD, isa.STORE):
                self._memory(j, insn)
            elif op == isa.GEMM:
                self._gemm(j, insn)
            elif op == isa.ALU:
                self._alu(j, insn)
            elif op == isa.FINISH:
                for a in range(3):
                    if a != m and last[a] >= 0 and self.vc[j, a] < self.pos[last[a]]:
                        raise AccelRunError(
                            f"FINISH (insn {j}) may retire before the {_MODULES[a]} module's "
                            f"last instruction {last[a]}"
                        )
            self._push(j, insn)
        left = {q: len(v) for q, v in self.queues.items() if v}
        if left:
            raise AccelRunError(f"{self.prog.name}: tokens pushed but never popped: {left}")


def _alu_op(op: int, a: np.ndarray, b) -> np.ndarray:
    if op == isa.MIN:
        r = np.minimum(a, b)
    elif op == isa.MAX:
        r = np.maximum(a, b)
    elif op == isa.ADD:
        r = a + b
    elif op == isa.SHR:
        sh = np.clip(np.abs(b), 0, 31)
        r = np.where(b >= 0, a >> sh, a << sh)
    elif op == isa.MUL:
        r = a * b
    elif op == isa.MULHI:
        r = (a * b) >> 32
    else:
        raise AccelRunError(f"unknown ALU op {op}")
    return (np.asarray(r, np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def run(program: Program, config: AccelConfig, args: list[np.ndarray]) -> None:
    """Run ``program`` on ``args`` (inputs then outputs, as its relocations number them;
    outputs are written in place), checking tokens and races (AccelRunError)."""
    for k, a in enumerate(args):
        if not a.flags.c_contiguous:
            raise AccelRunError(f"argument {k} is not a contiguous array")
    _Machine(program, config, list(args)).run()


def _duration(insn: dict, c: AccelConfig) -> int:
    op = insn["opcode"]
    if op in (isa.LOAD, isa.STORE):
        tile = {
            isa.UOP: isa.UOP_BYTES,
            isa.INP: c.batch * c.block_in,
            isa.WGT: c.block_out * c.block_in,
            isa.ACC: 4 * c.batch * c.block_out,
        }
        per = c.batch * c.block_out if op == isa.STORE else tile[insn["buffer"]]
        n = insn["y_size"] * insn["x_size"] * per
        return (
            c.dma_latency_cycles
            + -(-n // c.dma_bytes_per_cycle)
            + insn["y_pad_0"]
            + insn["y_pad_1"]
        )
    if op in (isa.GEMM, isa.ALU):
        return (insn["uop_end"] - insn["uop_bgn"]) * insn["iter_out"] * insn["iter_in"] + 4
    return 1


def estimate_cycles(program: Program, config: AccelConfig) -> dict:
    """The simulator's cycle model (docs/accel.md) on the program's timeline, for the
    compiler's own comparisons: each instruction starts at the later of its module's free
    time and the push times of the tokens it pops. {cycles, busy per module, gemm}."""
    free = [0, 0, 0]
    busy = [0, 0, 0]
    gemm = 0
    queues: dict[tuple[int, int], list[int]] = {}
    for insn in program.insns:
        insn = isa.decode(isa.encode(insn))
        m = module_of(insn)
        start = free[m]
        for flag, other in (("pop_prev", m - 1), ("pop_next", m + 1)):
            if insn[flag]:
                start = max(start, queues[(other, m)].pop(0))
        d = int(_duration(insn, config))
        free[m] = start + d
        busy[m] += d
        if insn["opcode"] == isa.GEMM:
            gemm += d
        for flag, other in (("push_prev", m - 1), ("push_next", m + 1)):
            if insn[flag]:
                queues.setdefault((m, other), []).append(free[m])
    return {"cycles": max(free), "busy": busy, "gemm_cycles": gemm}
