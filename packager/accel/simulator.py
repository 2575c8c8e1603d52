"""The accelerator's C simulator from Python (c_runtime/accel/pk_accel_sim.c).

The simulator and its program runner are compiled once with the host C compiler into a
shared library, cached under packager.native.cache_dir() by the hash of their sources, and
loaded with ctypes. ``Simulator.run`` runs one Program on a fresh device: one device
buffer per kernel argument, one for the micro-ops, one for the instructions, relocations
applied, every argument copied back afterwards (the outputs are the ones a program
stores to)."""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from ..errors import PackagerError
from ..native import cache_dir
from . import isa
from .program import AccelConfig, Program

ACCEL_SRC = Path(__file__).resolve().parents[2] / "c_runtime" / "accel"
SOURCES = ("pk_accel_sim.c", "pk_accel_sim_program.c")
HEADERS = ("pk_accel.h", "pk_accel_isa.h")
MODULES = ("load", "compute", "store")
ERRORS = {-1: "ARG", -2: "NOMEM", -3: "INSN", -4: "DEADLOCK", -5: "RACE", -6: "TIMEOUT"}


class SimulatorError(PackagerError):
    """A run the simulator refused; ``code`` names the driver's error (INSN, RACE, ...)."""

    def __init__(self, code: str, message: str):
        super().__init__(f"accelerator simulator: {code}: {message}")
        self.code = code


class _Config(ctypes.Structure):
    _fields_ = [
        *((n, ctypes.c_uint32) for n in ("batch", "block_in", "block_out")),
        *((n, ctypes.c_uint32) for n in ("uop_depth", "inp_depth", "wgt_depth", "acc_depth")),
        ("dma_latency_cycles", ctypes.c_uint32),
        ("clock_mhz", ctypes.c_double),
        ("dma_bytes_per_cycle", ctypes.c_double),
    ]


class _Counters(ctypes.Structure):
    _fields_ = [
        ("cycles", ctypes.c_uint64),
        ("insns", ctypes.c_uint64 * 5),
        ("load_bytes", ctypes.c_uint64 * 4),
        ("store_bytes", ctypes.c_uint64),
        ("busy", ctypes.c_uint64 * 3),
        ("stall", ctypes.c_uint64 * 3),
        ("gemm_cycles", ctypes.c_uint64),
        ("alu_cycles", ctypes.c_uint64),
        ("macs", ctypes.c_uint64),
    ]


@dataclass(frozen=True)
class RunResult:
    """What one run did (docs/accel.md, "Counters"). Dicts are keyed by opcode, buffer or
    module name."""

    cycles: int
    insns: dict[str, int]
    load_bytes: dict[str, int]
    store_bytes: int
    busy: dict[str, int]
    stall: dict[str, int]
    gemm_cycles: int
    alu_cycles: int
    macs: int
    clock_mhz: float

    @property
    def utilisation(self) -> float:
        """GEMM utilisation: the share of cycles the GEMM core did a micro-op iteration."""
        return self.gemm_cycles / self.cycles if self.cycles else 0.0

    @property
    def time_us(self) -> float:
        return self.cycles / self.clock_mhz


def _library_path() -> Path:
    h = hashlib.sha256()
    for name in SOURCES + HEADERS:
        h.update(name.encode() + (ACCEL_SRC / name).read_bytes())
    cc = os.environ.get("CC", "cc")
    h.update(cc.encode())
    lib = cache_dir() / f"pk_accel_sim_{h.hexdigest()[:24]}.so"
    if lib.exists():
        return lib
    from ..safe_paths import temp_file_beside

    with temp_file_beside(lib) as tmp:
        cmd = [cc, "-O2", "-std=c99", "-shared", "-fPIC", f"-I{ACCEL_SRC}"]
        cmd += [str(ACCEL_SRC / s) for s in SOURCES] + ["-o", str(tmp), "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise PackagerError(f"accelerator simulator: compile failed:\n{r.stderr[-3000:]}")
    return lib


@cache
def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(_library_path()))
    lib.pk_accel_sim_program.restype = ctypes.c_int
    lib.pk_accel_sim_program.argtypes = [
        ctypes.POINTER(_Config), ctypes.c_int,
        ctypes.c_char_p, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32,
        ctypes.POINTER(ctypes.c_int32), ctypes.c_uint32,
        ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint32,
        ctypes.POINTER(_Counters), ctypes.c_char_p, ctypes.c_size_t,
    ]  # fmt: skip
    lib.pk_accel_sim_decode_field.restype = ctypes.c_int
    lib.pk_accel_sim_decode_field.argtypes = [
        ctypes.c_char_p, ctypes.c_int,
        ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_int64),
    ]  # fmt: skip
    return lib


def c_decode(raw: bytes) -> list[tuple[str, int]]:
    """The C decoder's view of one 16-byte instruction: (field, value) in bit order."""
    name, value, out = ctypes.c_char_p(), ctypes.c_int64(), []
    while _lib().pk_accel_sim_decode_field(raw, len(out), ctypes.byref(name), ctypes.byref(value)):
        out.append((name.value.decode(), value.value))
    return out


def _by(names, values) -> dict[str, int]:
    return {n: int(v) for n, v in zip(names, values, strict=True)}


class Simulator:
    """Runs Programs on the behavioural simulator configured as ``config``; ``check``
    turns on race checking (PK_ACCEL_ERR_RACE)."""

    def __init__(self, config: AccelConfig, check: bool = False):
        self.config = config
        self.check = check
        self._cfg = _Config(*(getattr(config, f) for f, _ in _Config._fields_))

    def run(self, program: Program, args: list[np.ndarray]) -> RunResult:
        """Runs ``program`` with ``args`` (inputs then outputs, C-contiguous); the arrays
        are written back with what the program stored."""
        if len(args) != program.n_args:
            raise PackagerError(
                f"program {program.name}: takes {program.n_args} arguments, got {len(args)}"
            )
        for k, a in enumerate(args):
            if not a.flags.c_contiguous or not a.flags.writeable:
                raise PackagerError(f"program {program.name}: argument {k} is not a writeable "
                                    "C-contiguous array")  # fmt: skip
        insns, uops = program.insn_bytes(), program.uop_bytes()
        relocs = (ctypes.c_int32 * max(1, 2 * len(program.relocs)))(
            *(v for r in program.relocs for v in r)
        )
        ptrs = (ctypes.c_void_p * max(1, len(args)))(*(a.ctypes.data for a in args))
        sizes = (ctypes.c_size_t * max(1, len(args)))(*(a.nbytes for a in args))
        counters, err = _Counters(), ctypes.create_string_buffer(512)
        rc = _lib().pk_accel_sim_program(
            ctypes.byref(self._cfg), int(self.check),
            insns, len(program.insns), uops, len(program.uops), relocs, len(program.relocs),
            ptrs, sizes, len(args), ctypes.byref(counters), err, len(err),
        )  # fmt: skip
        if rc != 0:
            raise SimulatorError(ERRORS.get(rc, str(rc)), f"{program.name}: {err.value.decode()}")
        return RunResult(
            cycles=counters.cycles,
            insns=_by(isa.OPCODES, counters.insns),
            load_bytes=_by(isa.BUFFERS, counters.load_bytes),
            store_bytes=counters.store_bytes,
            busy=_by(MODULES, counters.busy),
            stall=_by(MODULES, counters.stall),
            gemm_cycles=counters.gemm_cycles,
            alu_cycles=counters.alu_cycles,
            macs=counters.macs,
            clock_mhz=self.config.clock_mhz,
        )
