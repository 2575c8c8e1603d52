"""Accelerator programs and kernels/program.accel, the file that holds a bundle's
programs (docs/accel.md, "Programs").

A ``Program`` is one kernel on the accelerator: its instruction stream, the micro-ops its
GEMM and ALU instructions index, and one relocation per LOAD and STORE saying which
region its ``dram_base`` (a byte offset there) is relative to: argument k of the kernel
node (inputs, then outputs, as graph.json lists them) or ``UOPS`` (-1), the program's own
micro-op array, which the runtime keeps in device memory."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from . import isa

UOPS = -1
MAGIC = b"PKACCEL1"
VERSION = 1
NAME_BYTES = 64
CONFIG = struct.Struct("<8I2d")  # batch .. dma_latency_cycles, clock_mhz, dma_bytes_per_cycle
HEADER = struct.Struct("<8sII")
ENTRY = struct.Struct(f"<{NAME_BYTES}s4IQ8x")  # 96 bytes: 8 reserved at the end
RELOC = struct.Struct("<Ii")


@dataclass(frozen=True)
class AccelConfig:
    """What the programs of a file were compiled for; the simulator runs with it. Depths
    are in tiles: inp tiles are batch x block_in int8, wgt tiles block_out x block_in
    int8, acc tiles batch x block_out int32, uop entries 4 bytes."""

    batch: int = 1
    block_in: int = 16
    block_out: int = 16
    uop_depth: int = 8192
    inp_depth: int = 2048
    wgt_depth: int = 1024
    acc_depth: int = 2048
    dma_latency_cycles: int = 64
    clock_mhz: float = 100.0
    dma_bytes_per_cycle: float = 8.0

    def pack(self) -> bytes:
        return CONFIG.pack(
            self.batch, self.block_in, self.block_out, self.uop_depth, self.inp_depth,
            self.wgt_depth, self.acc_depth, self.dma_latency_cycles, self.clock_mhz,
            self.dma_bytes_per_cycle,
        )  # fmt: skip

    @classmethod
    def unpack(cls, raw: bytes) -> AccelConfig:
        return cls(*CONFIG.unpack(raw))


@dataclass
class Program:
    name: str
    n_args: int
    insns: list[dict] = field(default_factory=list)
    uops: list[tuple[int, int, int]] = field(default_factory=list)  # (acc, inp, wgt)
    relocs: list[tuple[int, int]] = field(default_factory=list)  # (insn index, arg | UOPS)

    def insn_bytes(self) -> bytes:
        return b"".join(isa.encode(i) for i in self.insns)

    def uop_bytes(self) -> bytes:
        return b"".join(isa.encode_uop(*u) for u in self.uops)


def _align(n: int, a: int = 16) -> int:
    return (n + a - 1) // a * a


def write_programs(programs: list[Program], config: AccelConfig) -> bytes:
    """The bytes of kernels/program.accel: header, config, table, then each program's
    instructions, micro-ops and relocations (each program's data 16-byte aligned)."""
    head = HEADER.pack(MAGIC, VERSION, len(programs)) + config.pack()
    offset = _align(len(head) + ENTRY.size * len(programs))
    table, data = [], []
    for p in programs:
        name = p.name.encode()
        if len(name) >= NAME_BYTES:
            raise ValueError(f"program name {p.name!r} is longer than {NAME_BYTES - 1} bytes")
        body = p.insn_bytes() + p.uop_bytes() + b"".join(RELOC.pack(*r) for r in p.relocs)
        body += bytes(_align(len(body)) - len(body))
        table.append(ENTRY.pack(name, p.n_args, len(p.insns), len(p.uops), len(p.relocs), offset))
        data.append(body)
        offset += len(body)
    out = head + b"".join(table)
    return out + bytes(_align(len(out)) - len(out)) + b"".join(data)


def read_programs(raw: bytes) -> tuple[AccelConfig, list[Program]]:
    """The inverse of write_programs (ValueError on a malformed file)."""
    if len(raw) < HEADER.size + CONFIG.size:
        raise ValueError("program.accel: truncated header")
    magic, version, count = HEADER.unpack_from(raw, 0)
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"program.accel: bad magic or version {version}")
    config = AccelConfig.unpack(raw[HEADER.size : HEADER.size + CONFIG.size])
    programs = []
    for k in range(count):
        at = HEADER.size + CONFIG.size + k * ENTRY.size
        if at + ENTRY.size > len(raw):
            raise ValueError("program.accel: truncated table")
        name, n_args, n_insns, n_uops, n_relocs, off = ENTRY.unpack_from(raw, at)
        end = off + n_insns * isa.INSN_BYTES + n_uops * isa.UOP_BYTES + n_relocs * RELOC.size
        if end > len(raw):
            raise ValueError(f"program.accel: program {k} runs past the end of the file")
        p = Program(name.rstrip(b"\0").decode(), n_args)
        pos = off
        for _ in range(n_insns):
            p.insns.append(isa.decode(raw[pos : pos + isa.INSN_BYTES]))
            pos += isa.INSN_BYTES
        for _ in range(n_uops):
            u = isa.decode_uop(raw[pos : pos + isa.UOP_BYTES])
            p.uops.append((u["acc"], u["inp"], u["wgt"]))
            pos += isa.UOP_BYTES
        for _ in range(n_relocs):
            p.relocs.append(RELOC.unpack_from(raw, pos))
            pos += RELOC.size
        programs.append(p)
    return config, programs
