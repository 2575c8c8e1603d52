"""Hold this process to an AVX2 machine's view of the CPU, so ONNX Runtime runs the
kernels it runs on one (its MLAS picks them by CPUID at first use).

    import cpuid_mask
    cpuid_mask.hold_to_avx2()   # before onnxruntime is imported
    import onnxruntime

The benchmarks' `--ort-isa avx2` does this in ORT's own process, so a bundle built for
`host-avx2` meets ORT's AVX2 code on the same core, not its AVX-512 or VNNI kernels.
It needs Linux on x86_64 with CPUID faulting (`cpuid_fault` in /proc/cpuinfo, which
KVM guests have too); cpuid_mask.c says how it works. Processes started afterwards see
the real CPU again.
"""

from __future__ import annotations

import ctypes
import platform
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("cpuid_mask.c")
_lib = None


class CannotMask(RuntimeError):
    pass


def _load() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        if platform.machine() not in ("x86_64", "AMD64"):
            raise CannotMask(f"CPUID masking is for x86_64, not {platform.machine()}")
        with tempfile.TemporaryDirectory() as d:
            so = Path(d) / "cpuid_mask.so"
            r = subprocess.run(
                ["cc", "-O2", "-shared", "-fPIC", "-o", str(so), str(SOURCE)],
                capture_output=True,
                text=True,
            )
            if r.returncode:
                raise CannotMask(f"cc could not build {SOURCE}:\n{r.stderr}")
            _lib = ctypes.CDLL(str(so))  # mapped: the file may go with the directory
        _lib.pk_cpuid.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32 * 4]
        _lib.pk_cpuid_traps.restype = ctypes.c_long
    return _lib


def can_mask() -> bool:
    """Whether this machine can fault CPUID (Linux shows the `cpuid_fault` flag)."""
    try:
        return "cpuid_fault" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def hold_to_avx2() -> None:
    """From now on this process (its current thread and the threads started after)
    sees no AVX-512, VNNI, AMX or AVX10 in CPUID; raises CannotMask where it cannot."""
    if not can_mask():
        raise CannotMask(
            "this CPU or kernel cannot fault CPUID (no cpuid_fault flag in /proc/cpuinfo)"
        )
    if _load().pk_hold_to_avx2() != 0:
        raise CannotMask("arch_prctl(ARCH_SET_CPUID, 0) failed")


def cpuid(leaf: int, sub: int = 0) -> tuple[int, int, int, int]:
    """(eax, ebx, ecx, edx) of CPUID as this thread sees it."""
    out = (ctypes.c_uint32 * 4)()
    _load().pk_cpuid(leaf, sub, out)
    return tuple(out)


def traps() -> int:
    """How many CPUID instructions the hold has answered."""
    return int(_load().pk_cpuid_traps())
