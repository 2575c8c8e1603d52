"""What the compiler targets: one ``Target`` per device family of a board, built from its
profile (packager/boards.py). Lowering, the schedule templates and the tuner read the
facts they need from it, never from the profile or from loose numbers.

A family's properties are a frozen dataclass of their own (each class's docstring says
what its fields mean):

- ``cpu``, ``CpuTarget``: arch, model, cpu_name, features, isa_flags, vector_bits,
  cores, big_cores, l1d_bytes, l2_bytes, l3_bytes.
- ``opencl``, ``OpenCLTarget``: device, compute_units, max_work_group_size,
  max_work_item_sizes, local_memory_bytes, preferred_vector_width, fp16, version.
- ``accel``, ``AccelTarget``: driver, batch, block_in, block_out, the four buffers'
  bytes, clock_mhz, dma_bytes_per_cycle, dma_latency_cycles (docs/accel.md).

A board always has its cpu target; it has an opencl one when its profile has an
``opencl`` section, an accel one when it has an ``accel`` section (``targets_of``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .boards import Board
from .errors import PackagerError

KIB = 1024


@dataclass(frozen=True, kw_only=True)
class Target:
    """Base of every family: ``family`` names it, ``board`` is the profile it came from
    ("" for the generic cpu target lowering uses when no board is given)."""

    family: ClassVar[str] = ""
    board: str = ""

    @classmethod
    def of(cls, board: Board) -> Target:
        """This family's target of ``board`` (each family defines it)."""
        raise NotImplementedError(f"{cls.__name__} is not a target family")

    def fingerprint(self) -> dict:
        """The facts about this target that decide which schedule is fastest: a tuning
        record carries the fingerprint of the target it was measured on, and a build applies
        it only to kernels of a target with an equal one. JSON-able; ``family`` comes first."""
        raise NotImplementedError(f"{type(self).__name__} has no fingerprint")

    @staticmethod
    def cpu(board: Board) -> CpuTarget:
        """The board's CPU target (every board has one)."""
        return CpuTarget.of(board)

    @staticmethod
    def opencl(board: Board) -> OpenCLTarget:
        """The board's OpenCL target; PackagerError when its profile has no opencl section."""
        return OpenCLTarget.of(board)

    @staticmethod
    def for_family(board: Board, family: str) -> Target:
        """The board's target of ``family``; PackagerError when it has none."""
        make = FAMILIES.get(family)
        if make is None:
            raise PackagerError(f"unknown target family {family!r} (known: {', '.join(FAMILIES)})")
        return make.of(board)


def same_target(recorded: dict | None, here: dict) -> bool:
    """Whether a tuning record's ``target`` fingerprint names ``here``: equal, or a record
    written before fingerprints carried ``cpu_id`` (2026-12-04) that equals ``here`` apart
    from its cpu_id (such a record still applies on any CPU with its model name)."""
    if recorded == here:
        return True
    if not isinstance(recorded, dict) or "cpu_id" in recorded or "cpu_id" not in here:
        return False
    return recorded == {k: v for k, v in here.items() if k != "cpu_id"}


@dataclass(frozen=True, kw_only=True)
class CpuTarget(Target):
    """The board's CPU. The defaults are the generic target: the packager's own kind of
    machine (256-bit vectors), one thread.

    model: the CPU model the compiler tunes for (``cortex-a72``, ``native``); cpu_name:
    the model the board reports (``Intel(R) Xeon(R) ...``, ``Cortex-A72``), None where the
    profile does not say; features: its ISA features (``avx512f``, ``asimddp``); isa_flags:
    the profile's compiler flags that choose the instruction set (``-m...``:
    ``-mcpu=cortex-a72``, ``-mfpu=neon``, ``-march=native``); vector_bits: the SIMD width
    kernels are scheduled for; cores: threads a kernel may use; big_cores: the CPU ids the
    bundle is pinned to on a big.LITTLE board; l1d_bytes, l2_bytes, l3_bytes: cache sizes
    where the profile gives (or detects) them.
    """

    family: ClassVar[str] = "cpu"
    arch: str = "x86_64"
    model: str = "native"
    cpu_name: str | None = None
    cpu_id: str | None = None
    features: tuple[str, ...] = ()
    isa_flags: tuple[str, ...] = ()
    vector_bits: int = 256
    cores: int = 1
    big_cores: tuple[int, ...] = ()
    l1d_bytes: int | None = None
    l2_bytes: int | None = None
    l3_bytes: int | None = None

    @classmethod
    def of(cls, board: Board) -> CpuTarget:
        cache = board.cache
        return cls(
            board=board.name,
            arch=board.arch,
            model=board.cpu,
            cpu_name=board.cpu_name,
            cpu_id=board.cpu_id,
            features=tuple(board.features),
            isa_flags=tuple(f for f in board.toolchain.cflags if f.startswith("-m")),
            vector_bits=board.vector_bits,
            cores=board.cores,
            big_cores=tuple(board.big_cores),
            l1d_bytes=_bytes(cache.l1d_kib if cache else None),
            l2_bytes=_bytes(cache.l2_kib if cache else None),
            l3_bytes=_bytes(cache.l3_kib if cache else None),
        )

    def fingerprint(self) -> dict:
        fp = {
            "family": self.family,
            "arch": self.arch,
            "model": self.model,
            "cpu_name": self.cpu_name,
            "features": list(self.features),
            "isa_flags": list(self.isa_flags),
            "vector_bits": self.vector_bits,
            "cores": self.cores,
        }
        return fp | ({"cpu_id": self.cpu_id} if self.cpu_id else {})

    @property
    def lanes(self) -> int:
        """float32 lanes in one vector register (at least 1)."""
        return max(1, self.vector_bits // 32)


@dataclass(frozen=True, kw_only=True)
class OpenCLTarget(Target):
    """The board's OpenCL GPU, as its profile's ``opencl`` section describes it (the
    figures its driver reports: docs/boards.md). local_memory_bytes is one work-group's
    local memory; preferred_vector_width is in float lanes; version is the OpenCL C
    version, e.g. "1.2"."""

    family: ClassVar[str] = "opencl"
    device: str
    compute_units: int
    max_work_group_size: int
    max_work_item_sizes: tuple[int, ...]
    local_memory_bytes: int
    preferred_vector_width: int
    fp16: bool
    version: str

    @classmethod
    def of(cls, board: Board) -> OpenCLTarget:
        oc = board.opencl
        if oc is None:
            raise PackagerError(f"board {board.name!r} has no opencl section in its profile")
        return cls(
            board=board.name,
            device=oc.device,
            compute_units=oc.compute_units,
            max_work_group_size=oc.max_work_group_size,
            max_work_item_sizes=tuple(oc.max_work_item_sizes),
            local_memory_bytes=oc.local_memory_kib * KIB,
            preferred_vector_width=oc.preferred_vector_width,
            fp16=oc.fp16,
            version=oc.version,
        )

    def fingerprint(self) -> dict:
        return {
            "family": self.family,
            "device": self.device,
            "compute_units": self.compute_units,
            "version": self.version,
        }


@dataclass(frozen=True, kw_only=True)
class AccelTarget(Target):
    """The board's FPGA accelerator (docs/accel.md), as its profile's ``accel`` section
    describes it: a GEMM core of batch x block_in x block_out int8 -> int32, on-chip
    buffers (bytes), the clock and DMA figures of the cycle model, and the driver the
    runtime uses (``sim``, the behavioural simulator, or ``uio``, the board's)."""

    family: ClassVar[str] = "accel"
    driver: str = "sim"
    batch: int = 1
    block_in: int = 16
    block_out: int = 16
    uop_buffer_bytes: int = 32 * KIB
    inp_buffer_bytes: int = 32 * KIB
    wgt_buffer_bytes: int = 256 * KIB
    acc_buffer_bytes: int = 128 * KIB
    clock_mhz: float = 100.0
    dma_bytes_per_cycle: float = 8.0
    dma_latency_cycles: int = 64

    @classmethod
    def of(cls, board: Board) -> AccelTarget:
        """The board's accelerator; PackagerError when its profile has no accel section."""
        a = board.accel
        if a is None:
            raise PackagerError(f"board {board.name!r} has no accelerator (no 'accel' section)")
        return cls(
            board=board.name,
            driver=a.driver,
            batch=a.batch,
            block_in=a.block_in,
            block_out=a.block_out,
            uop_buffer_bytes=a.uop_buffer_kib * KIB,
            inp_buffer_bytes=a.inp_buffer_kib * KIB,
            wgt_buffer_bytes=a.wgt_buffer_kib * KIB,
            acc_buffer_bytes=a.acc_buffer_kib * KIB,
            clock_mhz=float(a.clock_mhz),
            dma_bytes_per_cycle=float(a.dma_bytes_per_cycle),
            dma_latency_cycles=a.dma_latency_cycles,
        )

    def fingerprint(self) -> dict:
        return {
            "family": self.family,
            "gemm": [self.batch, self.block_in, self.block_out],
            "buffers": [
                self.uop_buffer_bytes,
                self.inp_buffer_bytes,
                self.wgt_buffer_bytes,
                self.acc_buffer_bytes,
            ],
            "clock_mhz": self.clock_mhz,
            "dma": [self.dma_bytes_per_cycle, self.dma_latency_cycles],
        }

    # tile bytes of each buffer, and its depth in tiles
    @property
    def inp_tile_bytes(self) -> int:
        return self.batch * self.block_in

    @property
    def wgt_tile_bytes(self) -> int:
        return self.block_out * self.block_in

    @property
    def acc_tile_bytes(self) -> int:
        return self.batch * self.block_out * 4

    @property
    def uop_depth(self) -> int:
        return self.uop_buffer_bytes // 4

    @property
    def inp_depth(self) -> int:
        return self.inp_buffer_bytes // self.inp_tile_bytes

    @property
    def wgt_depth(self) -> int:
        return self.wgt_buffer_bytes // self.wgt_tile_bytes

    @property
    def acc_depth(self) -> int:
        return self.acc_buffer_bytes // self.acc_tile_bytes

    def config(self):
        """The program file's config block (packager/accel/program.py)."""
        from .accel.program import AccelConfig

        return AccelConfig(
            batch=self.batch,
            block_in=self.block_in,
            block_out=self.block_out,
            uop_depth=self.uop_depth,
            inp_depth=self.inp_depth,
            wgt_depth=self.wgt_depth,
            acc_depth=self.acc_depth,
            dma_latency_cycles=self.dma_latency_cycles,
            clock_mhz=self.clock_mhz,
            dma_bytes_per_cycle=self.dma_bytes_per_cycle,
        )


FAMILIES: dict[str, type[Target]] = {t.family: t for t in (CpuTarget, OpenCLTarget, AccelTarget)}


def targets_of(board: Board) -> tuple[Target, ...]:
    """Every target the board offers: its CPU, then its OpenCL GPU and its accelerator
    where the profile has them."""
    gpu = (OpenCLTarget.of(board),) if board.opencl is not None else ()
    accel = (AccelTarget.of(board),) if board.accel is not None else ()
    return (CpuTarget.of(board), *gpu, *accel)


def _bytes(kib: int | None) -> int | None:
    return None if kib is None else kib * KIB
