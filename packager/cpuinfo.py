"""What a Linux machine's CPU is, read from the kernel's own reports: the architecture,
the model name, the ISA features the schedules care about, the cores this process may
use and the cache sizes. The packager's own machine is read directly (``detect_local``,
for a profile with ``detect: true``); a remote board is read over SSH with ``PROBE_SCRIPT``
(``packager boards --probe``). Both hand the same sections of text to ``profile_values``,
which turns them into profile keys (packager/boards.py's schema), so the two agree.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from pathlib import Path

# The ISA features that change which kernels are fastest, as /proc/cpuinfo spells them
# (x86 "flags", ARM "Features"): FMA and the vector widths, the int8 dot products, half
# precision arithmetic.
FEATURES = (
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx_vnni",
    "neon",
    "asimd",
    "asimddp",
    "fphp",
    "asimdhp",
)

# uname -m -> the profile's arch.
ARCHS = {
    "x86_64": "x86_64",
    "amd64": "x86_64",
    "aarch64": "aarch64",
    "arm64": "aarch64",
    "armv7l": "armv7",
    "armv8l": "armv7",
}

# ARM cores name themselves by part number only ("CPU part" of implementer 0x41, Arm).
ARM_PARTS = {
    "0xd03": "Cortex-A53",
    "0xd04": "Cortex-A35",
    "0xd05": "Cortex-A55",
    "0xd07": "Cortex-A57",
    "0xd08": "Cortex-A72",
    "0xd09": "Cortex-A73",
    "0xd0a": "Cortex-A75",
    "0xd0b": "Cortex-A76",
    "0xd0d": "Cortex-A77",
    "0xd41": "Cortex-A78",
    "0xd0c": "Neoverse-N1",
    "0xd40": "Neoverse-V1",
    "0xd49": "Neoverse-N2",
    "0xc07": "Cortex-A7",
    "0xc09": "Cortex-A9",
    "0xc0f": "Cortex-A15",
}

CACHE_DIR = "/sys/devices/system/cpu/cpu0/cache"
# (level, type) in sysfs, name in lscpu -> the profile's cache key
CACHE_KEYS = {("1", "Data"): "l1d_kib", ("2", "Unified"): "l2_kib", ("3", "Unified"): "l3_kib"}
LSCPU_KEYS = {"L1d": "l1d_kib", "L2": "l2_kib", "L3": "l3_kib"}

# One shell script for a remote board; its sections are what detect_local reads itself.
# nproc counts the CPUs the process may run on (OMP_* would change its answer).
PROBE_SCRIPT = (
    "echo '== arch'; uname -m; "
    "echo '== cores'; env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc; "
    "echo '== cpuinfo'; cat /proc/cpuinfo; "
    f"echo '== cache'; for d in {CACHE_DIR}/index*; do "
    '[ -r "$d/size" ] && echo "$(cat "$d/level") $(cat "$d/type") $(cat "$d/size")"; '
    "done; "
    "echo '== lscpu'; lscpu --caches=NAME,ONE-SIZE --bytes --noheadings 2>/dev/null; true"
)


def split_sections(text: str) -> dict[str, str]:
    """PROBE_SCRIPT's output -> {section name: its text}."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("== "):
            current = sections.setdefault(line[3:].strip(), [])
        elif current is not None:
            current.append(line)
    return {k: "\n".join(v) for k, v in sections.items()}


def profile_values(sections: dict[str, str]) -> dict:
    """Profile keys (arch, cores, vector_bits, cpu_name, cpu_id, features, cache) from the
    sections of one machine's reports; a fact that cannot be read is left out."""
    arch = ARCHS.get(sections.get("arch", "").strip())
    fields = cpuinfo_fields(sections.get("cpuinfo", ""))
    flags = set(" ".join(fields.get("flags", []) + fields.get("Features", [])).split())
    features = [f for f in FEATURES if f in flags]
    values: dict = {"arch": arch, "cpu_name": cpu_name(fields), "features": features}
    values["cpu_id"] = cpu_id(fields)
    cores = sections.get("cores", "").strip()
    values["cores"] = int(cores) if cores.isdigit() and int(cores) > 0 else None
    values["vector_bits"] = vector_bits(arch, features) if arch else None
    cache = sys_caches(sections.get("cache", "")) or lscpu_caches(sections.get("lscpu", ""))
    values["cache"] = cache or None
    return {k: v for k, v in values.items() if v is not None}


def cpuinfo_fields(text: str) -> dict[str, list[str]]:
    """/proc/cpuinfo -> {field: its value on each processor, in order}."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip():
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def cpu_name(fields: dict[str, list[str]]) -> str | None:
    """The model name; an ARM core's from its part number (a big.LITTLE board's parts
    joined, in processor order: ``Cortex-A53 + Cortex-A72``)."""
    parts = [ARM_PARTS.get(p.lower(), f"ARM part {p}") for p in fields.get("CPU part", [])]
    if parts:
        return " + ".join(dict.fromkeys(parts))
    names = fields.get("model name") or fields.get("Processor") or fields.get("cpu model")
    return names[0] if names else None


def cpu_id(fields: dict[str, list[str]]) -> str | None:
    """An x86 CPU's vendor, family and model numbers (``AuthenticAMD family 25 model
    17``): a virtual machine's model name is often only the vendor's brand (``AMD EPYC``
    for Zen 2 to Zen 5 alike), these numbers name the microarchitecture. None elsewhere
    (an ARM core's part is in its name already)."""
    vendor, family, model = (fields.get(k, [None])[0] for k in ("vendor_id", "cpu family", "model"))
    if not (vendor and family and model and family.isdigit() and model.isdigit()):
        return None
    return f"{vendor} family {family} model {model}"


def vector_bits(arch: str, features: list[str]) -> int:
    """The SIMD width kernels are scheduled for: AVX-512F 512, AVX2 256, else 128 (SSE,
    NEON/ASIMD)."""
    if arch == "x86_64" and "avx512f" in features:
        return 512
    if arch == "x86_64" and "avx2" in features:
        return 256
    return 128


def size_kib(text: str) -> int | None:
    """A sysfs cache size (``48K``, ``2M``) in KiB."""
    text = text.strip().upper()
    scale = {"K": 1, "M": 1024, "G": 1024 * 1024}
    if text[-1:] in scale and text[:-1].isdigit():
        return int(text[:-1]) * scale[text[-1]]
    return int(text) // 1024 if text.isdigit() else None


def sys_caches(text: str) -> dict[str, int]:
    """Lines ``LEVEL TYPE SIZE`` (one per cpu0/cache/index*) -> cache keys."""
    out = {}
    for line in text.splitlines():
        words = line.split()
        key = CACHE_KEYS.get(tuple(words[:2])) if len(words) == 3 else None
        kib = size_kib(words[2]) if key else None
        if key and kib:
            out[key] = kib
    return out


def lscpu_caches(text: str) -> dict[str, int]:
    """``lscpu --caches=NAME,ONE-SIZE --bytes`` -> cache keys."""
    out = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] in LSCPU_KEYS and words[1].isdigit():
            out[LSCPU_KEYS[words[0]]] = int(words[1]) // 1024
    return out


@functools.cache
def detect_local() -> dict:
    """profile_values of the machine the packager runs on (read once per process)."""
    return profile_values(local_sections())


def local_sections() -> dict[str, str]:
    """PROBE_SCRIPT's sections, read here without a shell (lscpu only when sysfs has no
    cache sizes)."""
    cache = []
    for d in sorted(Path(CACHE_DIR).glob("index*")):
        try:
            cache.append(" ".join((d / f).read_text().strip() for f in ("level", "type", "size")))
        except OSError:
            continue
    sections = {
        "arch": platform.machine(),
        "cores": str(len(os.sched_getaffinity(0))),
        "cpuinfo": _read("/proc/cpuinfo"),
        "cache": "\n".join(cache),
    }
    if not sys_caches(sections["cache"]):
        sections["lscpu"] = _lscpu()
    return sections


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _lscpu() -> str:
    try:
        argv = ["lscpu", "--caches=NAME,ONE-SIZE", "--bytes", "--noheadings"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
