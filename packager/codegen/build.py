"""Compiling generated C into a shared library, and calling kernels from Python.

Objects are cached by a hash of (source, flags, compiler) under
``~/.cache/packager/`` (``PACKAGER_CACHE_DIR`` overrides) and compiled in
parallel; the library itself is cached by the hash of its objects.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .. import resources

INCLUDE = resources.c_runtime() / "include"
SERIAL_PARALLEL_FOR = Path(__file__).with_name("serial_parallel_for.c")
SCRATCH = resources.c_runtime() / "src" / "pk_scratch.c"
DEFAULT_CFLAGS = ("-O2", "-fPIC", "-std=c99", "-ffp-contract=fast")


def cache_dir() -> Path:
    d = os.environ.get("PACKAGER_CACHE_DIR")
    path = Path(d) if d else Path.home() / ".cache" / "packager"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _compiler() -> str:
    return os.environ.get("CC", "cc")


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _atomic_write_from(tmp: Path, dest: Path) -> None:
    os.replace(tmp, dest)  # another process may build the same file concurrently


def _compile_object(source: str, cflags: tuple, out_dir: Path) -> Path:
    cc = _compiler()
    key = _digest(source, " ".join(cflags), cc, str(INCLUDE))
    obj = out_dir / f"{key}.o"
    if obj.exists():
        return obj
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        src = Path(tmp) / "k.c"
        src.write_text(source)
        tmp_obj = Path(tmp) / "k.o"
        cmd = [cc, *cflags, "-I", str(INCLUDE), "-c", str(src), "-o", str(tmp_obj)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(
                f"C compilation failed ({' '.join(cmd)}):\n{res.stderr}\n--- source ---\n{source}"
            )
        _atomic_write_from(tmp_obj, obj)
    return obj


def compile_shared(
    sources: dict[str, str],
    extra_c_files=(),
    cflags=DEFAULT_CFLAGS,
    with_serial_parallel_for: bool | None = None,
) -> Path:
    """A shared library of ``sources`` ({name: C text}) and ``extra_c_files``.

    Unless the extra files define ``pk_parallel_for`` (the real runtime), a serial
    definition is linked in (``with_serial_parallel_for`` forces the choice); the
    runtime's scratch memory (pk_scratch.c) is linked in unless they define it.
    """
    cflags = tuple(cflags)
    out_dir = cache_dir()
    texts = [sources[k] for k in sorted(sources)]
    texts += [Path(f).read_text() for f in extra_c_files]
    if with_serial_parallel_for is None:
        with_serial_parallel_for = not any(_defines_parallel_for(t) for t in texts)
    if with_serial_parallel_for:
        texts.append(SERIAL_PARALLEL_FOR.read_text())
    if not any(_defines(t, "pk_scratch_alloc") for t in texts):
        texts.append(SCRATCH.read_text())  # the runtime's, as in a bundle
    workers = min(len(texts), os.cpu_count() or 1) or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        objs = list(pool.map(lambda t: _compile_object(t, cflags, out_dir), texts))
    link_flags = tuple(f for f in cflags if f.startswith("-fsanitize") or f == "-pthread")
    lib = out_dir / f"lib{_digest(*(o.name for o in objs), *link_flags)}.so"
    if not lib.exists():
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            tmp_lib = Path(tmp) / "lib.so"
            cmd = [_compiler(), "-shared", *link_flags, *map(str, objs), "-o", str(tmp_lib), "-lm"]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                raise RuntimeError(f"link failed ({' '.join(cmd)}):\n{res.stderr}")
            _atomic_write_from(tmp_lib, lib)
    return lib


def _defines_parallel_for(text: str) -> bool:
    return _defines(text, "pk_parallel_for")


def _defines(text: str, function: str) -> bool:
    """Whether C ``text`` defines ``function`` (a pointer- or void-returning one)."""
    pattern = rf"^\s*void\s*\*?\s*{function}\s*\([^;]*\)\s*\{{"
    return re.search(pattern, text, re.M) is not None


def load_kernel(lib_path, name: str):
    """A Python callable ``f(*arrays)`` (inputs then outputs, C-contiguous numpy
    arrays of the kernel's dtypes) that runs kernel ``name``; raises on a
    non-zero return code."""
    lib = ctypes.CDLL(str(lib_path))
    fn = getattr(lib, name)
    fn.restype = ctypes.c_int32
    fn.argtypes = [ctypes.POINTER(ctypes.c_void_p)]

    def call(*arrays: np.ndarray) -> None:
        for a in arrays:
            if not (isinstance(a, np.ndarray) and a.flags["C_CONTIGUOUS"]):
                raise ValueError("kernel arguments must be C-contiguous numpy arrays")
        args = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        rc = fn(args)
        if rc != 0:
            raise RuntimeError(f"kernel {name} returned {rc}")

    call.lib = lib  # keep the library loaded while the callable lives
    return call


def build_kernel(func, cflags=DEFAULT_CFLAGS):
    """Lowered PrimFunc -> Python callable (codegen + compile + load)."""
    from .c import codegen_c

    lib = compile_shared({func.name: codegen_c(func)}, cflags=cflags)
    return load_kernel(lib, func.name)


def have_compiler() -> bool:
    return shutil.which(_compiler()) is not None
