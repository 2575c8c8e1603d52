"""Building a bundle's run_bundle directly with the C compiler, without CMake.

For the ONNX backend and the test suite, where thousands of small bundles are built:
every object is cached by the hash of its source, headers and flags, and compiled in
parallel. Bundles users build go through their own CMakeLists.txt instead.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .errors import PackagerError
from .names import safe_name

# ISO C mode turns floating-point contraction off; kernels are written to become FMAs.
CFLAGS = ("-O2", "-std=c99", "-fno-math-errno", "-ffp-contract=fast")


def cache_dir() -> Path:
    d = Path(os.environ.get("PACKAGER_CACHE_DIR") or Path.home() / ".cache" / "packager") / "obj"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _headers_digest(include_dirs: list[Path]) -> bytes:
    h = hashlib.sha256()
    for d in include_dirs:
        for p in sorted(Path(d).glob("*.h")):
            h.update(p.name.encode() + p.read_bytes())
    return h.digest()


def compile_object(
    src: Path, cc: str, flags: list[str], include_dirs: list[Path], salt: bytes
) -> Path:
    """The object file for ``src``, from the cache when its inputs are unchanged."""
    key = hashlib.sha256(salt + cc.encode() + " ".join(flags).encode() + src.read_bytes())
    obj = cache_dir() / f"{key.hexdigest()[:32]}.o"
    if obj.exists():
        return obj
    from .safe_paths import temp_file_beside

    # Through a temporary name (parallel workers may race to fill the same entry), which
    # an error or an interrupt removes.
    with temp_file_beside(obj) as tmp:
        cmd = [cc, *flags, *[f"-I{d}" for d in include_dirs], "-c", str(src), "-o", str(tmp)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise PackagerError(f"{src.name}: compile failed:\n{r.stderr[-3000:]}")
    return obj


def thread_flags(bundle: Path) -> list[str]:
    """The defines CMakeLists.txt derives from bundle.cmake, for builds without CMake."""
    path = bundle / "bundle.cmake"
    text = path.read_text() if path.exists() else ""
    threads = re.search(r"set\(PK_NUM_THREADS (\d+)\)", text)
    pins = re.search(r'set\(PK_PIN_CORES "([0-9,]*)"\)', text)
    if not threads or int(threads.group(1)) <= 1:
        return []
    return [
        "-DPK_USE_THREADS",
        f"-DPK_NUM_THREADS={threads.group(1)}",
        f'-DPK_PIN_CORES="{pins.group(1) if pins else ""}"',
    ]


def opencl_enabled(bundle: Path) -> bool:
    """Whether bundle.cmake asks for the runtime's OpenCL backend (``set(PK_OPENCL ON)``)."""
    path = bundle / "bundle.cmake"
    return path.exists() and re.search(r"set\(PK_OPENCL ON\)", path.read_text()) is not None


def opencl_flags(bundle: Path) -> list[str]:
    """The defines CMakeLists.txt adds for an OpenCL bundle."""
    return ["-DPK_OPENCL", "-DCL_TARGET_OPENCL_VERSION=120"] if opencl_enabled(bundle) else []


def accel_driver(bundle: Path) -> str | None:
    """The accelerator driver bundle.cmake asks for (``set(PK_ACCEL sim)``), else None."""
    path = bundle / "bundle.cmake"
    found = re.search(r"set\(PK_ACCEL (sim|uio)\)", path.read_text()) if path.exists() else None
    return found.group(1) if found else None


def accel_parts(bundle: Path) -> tuple[list[Path], list[str], list[Path]]:
    """(sources, defines, include dirs) the runtime's accelerator backend adds, as
    CMakeLists.txt adds them: the backend and the driver's sources (the simulator's or
    the board's UIO one; the other driver's files are left out)."""
    driver = accel_driver(bundle)
    if driver is None:
        return [], [], []
    rt = bundle / "runtime"
    other = "uio" if driver == "sim" else "sim"
    drivers = [p for p in sorted((rt / "accel").glob("*.c")) if f"_{other}" not in p.name]
    defines = ["-DPK_ACCEL"] + (["-DPK_ACCEL_UIO"] if driver == "uio" else [])
    return [rt / "src" / "backends" / "pk_accel.c", *drivers], defines, [rt / "accel"]


def static_enabled(bundle: Path) -> bool:
    """Whether bundle.cmake asks for a static run_bundle (``set(PK_STATIC ON)``)."""
    path = bundle / "bundle.cmake"
    return path.exists() and re.search(r"set\(PK_STATIC ON\)", path.read_text()) is not None


# libpthread whole: with a glibc before 2.34 (a board's own sysroot), a static link that
# takes only the members it sees referenced misses pthread functions libc calls through
# weak references. From 2.34 on libpthread.a is empty and this changes nothing.
STATIC_THREAD_LIBS = ["-Wl,--whole-archive", "-lpthread", "-Wl,--no-whole-archive"]


def link_libraries(static: bool, opencl: bool = False) -> list[str]:
    """What follows the objects on a link line for the board's runtime: ``static`` is the
    profile's ``toolchain.link: static`` (Toolchain.static)."""
    if not static:
        return (["-lOpenCL"] if opencl else []) + ["-lm", "-lpthread"]
    if opencl:
        raise PackagerError(
            "PK_STATIC and PK_OPENCL cannot go together: the OpenCL loader opens the GPU "
            "driver with dlopen, which a static executable cannot do (link the board's "
            "bundles dynamically: toolchain.link: dynamic)"
        )
    return ["-static", "-lm", *STATIC_THREAD_LIBS]


def link_args(bundle: Path) -> list[str]:
    """run_bundle's libraries, as CMakeLists.txt links them from bundle.cmake's settings."""
    try:
        return link_libraries(static_enabled(bundle), opencl_enabled(bundle))
    except PackagerError as e:
        raise PackagerError(f"{bundle / 'bundle.cmake'}: {e}") from None


def _compile_bundle(bundle: Path, cc: str, cflags, jobs: int | None, tools: bool) -> list[Path]:
    """The objects of the bundle's kernels and runtime (with its tools: run_bundle's main)."""
    rt = bundle / "runtime"
    accel_sources, accel_defines, accel_includes = accel_parts(bundle)
    includes = [rt / "include", rt / "src", *accel_includes]
    salt = _headers_digest(includes)
    sources = sorted((bundle / "kernels").glob("*.c")) + sorted((rt / "src").glob("*.c"))
    if tools:
        sources += sorted((rt / "tools").glob("*.c"))
    if opencl_enabled(bundle):
        sources += [rt / "src" / "backends" / "pk_opencl.c"]
    sources += accel_sources
    flags = list(cflags) + thread_flags(bundle) + opencl_flags(bundle) + accel_defines
    with ThreadPoolExecutor(jobs or os.cpu_count() or 2) as pool:
        return list(pool.map(lambda s: compile_object(s, cc, flags, includes, salt), sources))


def _link(bundle: Path, cc: str, objs: list[Path], out: Path, libs: list[str]) -> Path:
    out.parent.mkdir(exist_ok=True)
    cmd = [cc, *map(str, objs), "-o", str(out), *libs]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise PackagerError(f"{bundle}: link failed:\n{r.stderr[-3000:]}")
    return out


def build_run_bundle(bundle: Path, cc: str = "cc", cflags=CFLAGS, jobs: int | None = None) -> Path:
    """Compile the bundle's kernels and runtime and link ``bundle/build/run_bundle``."""
    libs = link_args(bundle)
    objs = _compile_bundle(bundle, cc, cflags, jobs, tools=True)
    return _link(bundle, cc, objs, bundle / "build" / "run_bundle", libs)


def build_shared_library(
    bundle: Path, cc: str = "cc", cflags=CFLAGS, jobs: int | None = None
) -> Path:
    """Compile the bundle's kernels and runtime position-independent and link
    ``bundle/build/libpk_bundle.so``: the pk_runtime.h API for a process that loads the
    bundle itself (through ctypes, or dlopen). Linked dynamically whatever the profile's
    ``toolchain.link`` says (a shared object is never static)."""
    libs = ["-shared", *link_libraries(False, opencl_enabled(bundle))]
    objs = _compile_bundle(bundle, cc, [*cflags, "-fPIC"], jobs, tools=False)
    return _link(bundle, cc, objs, bundle / "build" / "libpk_bundle.so", libs)


def clear_cache() -> None:
    shutil.rmtree(cache_dir(), ignore_errors=True)


def run_outputs(exe: Path, bundle: Path, inputs: dict, outputs: list[str], timeout_s=600):
    """Run ``bundle`` with ``exe`` (its run_bundle) on ``inputs`` (name -> array) in a
    temporary directory and return its outputs, in the order of ``outputs`` (names)."""
    with tempfile.TemporaryDirectory(prefix="packager-run-") as d:
        cmd = [str(exe), str(bundle), "--output-dir", f"{d}/out"]
        for k, (name, a) in enumerate(inputs.items()):
            path = f"{d}/in{k}.npy"
            np.save(path, np.asarray(a, order="C"), allow_pickle=False)
            cmd += ["--input", f"{name}={path}"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if r.returncode != 0:
            raise RuntimeError(f"run_bundle failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
        return [np.load(f"{d}/out/{safe_name(n)}.npy") for n in outputs]
