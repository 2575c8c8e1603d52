"""Building a bundle with CMake and running it on the local board."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from .boards import Board
from .bundle import sha256_file
from .errors import PackagerError
from .names import safe_name
from .safe_paths import BUNDLE_FORMAT, remove_quietly, signals_held, write_bytes_atomic

BUILD_DIR = "build"


def cmake_bin() -> str:
    try:
        import cmake  # the PyPI package ships the binary

        path = Path(cmake.CMAKE_BIN_DIR) / "cmake"
        if path.exists():
            return str(path)
    except ImportError:
        pass
    found = shutil.which("cmake")
    if not found:
        raise PackagerError("cmake not found: pip install cmake")
    return found


SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def load_manifest(bundle: Path) -> dict:
    """manifest.json, checked field by field: everything later steps read from it has
    the right type, and every path in ``files`` stays inside the bundle."""
    path = Path(bundle) / "manifest.json"
    if not path.is_file():
        raise PackagerError(f"{bundle}: not a bundle (no manifest.json)")
    try:
        doc = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise PackagerError(f"{path}: not valid JSON: {e}") from e
    for field, problem in _manifest_problems(doc):
        raise PackagerError(f"{path}: {field}: {problem}; package the model again")
    for rel in doc["files"]:
        _check_file_key(Path(bundle), path, rel)
    return doc


def _manifest_problems(doc) -> Iterator[tuple[str, str]]:
    """(field, what is wrong) for each problem, the first one first."""
    if not isinstance(doc, dict):
        yield "the document", "expected a JSON object"
        return
    if doc.get("format") != BUNDLE_FORMAT:
        yield "format", f"expected {BUNDLE_FORMAT!r}, got {doc.get('format')!r}"
    board = doc.get("board")
    if not isinstance(board, dict) or not all(
        isinstance(board.get(k), str) for k in ("name", "arch")
    ):
        yield "board", "expected an object with string fields name and arch"
    for kind in ("inputs", "outputs"):
        values = doc.get(kind)
        if not isinstance(values, list):
            yield kind, "missing or not a list"
            continue
        for k, v in enumerate(values):
            why = _io_problem(v)
            if why:
                yield f"{kind}[{k}]", why
    files = doc.get("files")
    if not isinstance(files, dict):
        yield "files", "missing or not an object (path -> sha256)"
        return
    for rel, digest in files.items():
        if not isinstance(digest, str) or not SHA256_HEX.fullmatch(digest):
            yield f"files[{rel!r}]", "expected a sha256 (64 lowercase hex digits)"


def _io_problem(v) -> str | None:
    if not isinstance(v, dict):
        return "expected an object with name, shape and dtype"
    if not isinstance(v.get("name"), str) or not v["name"]:
        return "name: expected a non-empty string"
    shape = v.get("shape")
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        return "shape: expected a list of non-negative integers"
    if not isinstance(v.get("dtype"), str):
        return "dtype: expected a string"
    return None


def _check_file_key(bundle: Path, manifest: Path, rel: str) -> None:
    """A relative path of plain parts, through no symbolic link, inside the bundle."""
    parts = rel.split("/")
    bad = not rel or "\\" in rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts)
    if bad:
        raise PackagerError(
            f"{manifest}: files: {rel!r} is not a plain relative path inside the bundle "
            f"(absolute, '..', '.', empty part or backslash); package the model again"
        )
    for k in range(1, len(parts) + 1):
        if (bundle / Path(*parts[:k])).is_symlink():
            raise PackagerError(
                f"{manifest}: files: {rel!r} goes through a symbolic link "
                f"({'/'.join(parts[:k])}); a bundle holds its own files"
            )
    root = bundle.resolve()
    if root not in (root / rel).resolve().parents:
        raise PackagerError(f"{manifest}: files: {rel!r} resolves outside the bundle")


def file_digests(bundle: Path) -> dict[str, str]:
    """sha256 of every file of the bundle as it is on disk now (build/ aside)."""
    bundle = Path(bundle)
    out = {}
    for top, dirs, names in os.walk(bundle):
        if Path(top) == bundle and BUILD_DIR in dirs:
            dirs.remove(BUILD_DIR)
        dirs.sort()
        for name in sorted(names):
            p = Path(top) / name
            if p.is_file():
                out[p.relative_to(bundle).as_posix()] = sha256_file(p)
    return out


def verify_files(bundle: Path, manifest: dict, digests: dict[str, str]) -> None:
    """Every file the manifest lists, present and unchanged since packaging."""
    for rel, want in sorted(manifest["files"].items()):
        got = digests.get(rel)
        if got is None:
            raise PackagerError(
                f"{bundle / rel}: missing: the bundle is incomplete; package it again"
            )
        if got != want:
            raise PackagerError(
                f"{bundle / rel}: sha256 mismatch: the bundle was changed after packaging; "
                f"package it again, or run with --no-verify"
            )


def build_key(bundle: Path, board: Board, digests: dict[str, str]) -> str:
    """What a build depends on: every source as on disk now (any file of the bundle),
    the CMake configure arguments (compiler, flags, toolchain file) and the compiler
    binary itself. Any change gives another key and a rebuild."""
    cc = shutil.which(board.toolchain.cc)
    st = os.stat(cc) if cc else None
    doc = {
        "files": digests,
        "configure": compiler_args(bundle, board),
        "compiler": [os.path.realpath(cc), st.st_size, st.st_mtime_ns] if st else None,
        "cmake": cmake_bin(),
    }
    return json.dumps(doc, sort_keys=True, indent=0) + "\n"


def build(bundle: Path, board: Board, log=None, digests: dict[str, str] | None = None) -> Path:
    """Configure and build the bundle in ``bundle/build`` unless the stamp there says it
    was built from exactly these sources and settings; returns run_bundle's path.

    ``digests``: file_digests(bundle), when the caller has them already. The stamp is
    written (atomically) only after a successful build, and removed first: a build
    stopped half-way is never taken for a finished one."""
    bundle = Path(bundle)
    build_dir = bundle / BUILD_DIR
    exe = build_dir / "run_bundle"
    stamp = build_dir / ".built-from"
    key = build_key(bundle, board, digests if digests is not None else file_digests(bundle))
    if exe.exists() and stamp.is_file() and stamp.read_text() == key:
        return exe
    if log:
        log(f"building {bundle} with CMake")
    check_compiler(board)
    # Another bundle's (or board's) cache would keep its compiler: start clean.
    if build_dir.is_symlink() or build_dir.is_file():
        raise PackagerError(f"{build_dir}: not a directory; remove it and run again")
    stamp.unlink(missing_ok=True)
    shutil.rmtree(build_dir, ignore_errors=True)
    configure = [
        cmake_bin(),
        "-S",
        str(bundle),
        "-B",
        str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release",
        *compiler_args(bundle, board),
    ]
    jobs = str(os.cpu_count() or 2)
    for cmd in (configure, [cmake_bin(), "--build", str(build_dir), "-j", jobs]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-30:])
            raise PackagerError(f"{bundle}: build failed ({shlex.join(cmd[:2])} ...):\n{tail}")
    write_bytes_atomic(stamp, key.encode())
    return exe


def compiler_args(bundle: Path, board: Board) -> list[str]:
    """The bundle's toolchain file when it has one (cross builds), else the board's cc."""
    flags = f"-DPK_CFLAGS={' '.join(board.toolchain.cflags)}"
    toolchain = bundle / "toolchain.cmake"
    if toolchain.is_file():
        return [f"-DCMAKE_TOOLCHAIN_FILE={toolchain.resolve()}", flags]
    return [f"-DCMAKE_C_COMPILER={board.toolchain.cc}", flags]


def check_compiler(board: Board) -> None:
    cc = board.toolchain.cc
    if shutil.which(cc) is None:
        where = f" ({board.path})" if board.path else ""
        raise PackagerError(
            f"board {board.name}{where}: toolchain.cc {cc!r} is not installed on this machine "
            f"(Debian: apt-get install gcc-aarch64-linux-gnu or gcc-arm-linux-gnueabihf for "
            f"ARM boards), or set toolchain.build_on_device: true to build on the board"
        )


def check_bundle_board(manifest: dict, board: Board) -> None:
    """A bundle runs only where its code runs: refuse one packaged for another arch."""
    packaged = manifest.get("board", {})
    if packaged.get("arch", board.arch) != board.arch:
        raise PackagerError(
            f"--board {board.name}: the bundle was packaged for {packaged.get('name')!r} "
            f"({packaged.get('arch')}), not for {board.arch}; package it again with "
            f"--board {board.name}"
        )


def check_inputs(manifest: dict, inputs: dict[str, str]) -> None:
    """Each input given names a model input and is a .npy of its shape and dtype (inputs
    not given are filled by run_bundle)."""
    want = {i["name"]: i for i in manifest["inputs"]}
    unknown = [n for n in inputs if n not in want]
    if unknown:
        raise PackagerError(
            f"--input {unknown[0]}: the model has no such input (inputs: {', '.join(want)})"
        )
    for name, path in inputs.items():
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as e:
            raise PackagerError(f"--input {name}={path}: cannot read .npy: {e}") from e
        spec = want[name]
        got_dtype = "bool" if arr.dtype == np.bool_ else str(arr.dtype)
        if list(arr.shape) != spec["shape"] or got_dtype != spec["dtype"]:
            raise PackagerError(
                f"--input {name}={path}: expected {spec['dtype']}{spec['shape']}, "
                f"got {got_dtype}{list(arr.shape)}"
            )


def run_local(
    bundle: Path,
    board: Board,
    inputs: dict[str, str],
    output_dir: str | None,
    repeat: int = 0,
    log=None,
    digests: dict[str, str] | None = None,
    extra: Sequence[str] = (),
) -> subprocess.CompletedProcess:
    """Run the bundle on this machine (``extra``: more run_bundle arguments, e.g. --fill,
    --seed, --top); outputs go to ``output_dir/<safe name>.npy`` when there is one, else
    only run_bundle's printed summary tells them.

    run_bundle writes into a fresh directory inside ``output_dir``; only when it
    succeeds is each output renamed into place, so ``output_dir`` never holds a partial
    .npy and keeps everything else it held."""
    bundle = Path(bundle)
    manifest = load_manifest(bundle)
    check_inputs(manifest, inputs)
    exe = build(bundle, board, log, digests)
    cmd = [str(exe), str(bundle)]
    for name, path in inputs.items():
        cmd += ["--input", f"{name}={os.path.abspath(path)}"]
    cmd += ["--repeat", str(repeat)] if repeat else []
    cmd += list(extra)
    if output_dir is None:
        return subprocess.run(cmd, capture_output=True, text=True)
    out = Path(output_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PackagerError(f"--output-dir {output_dir}: cannot create it: {e}") from e
    work = None
    try:
        with signals_held():  # an interrupt held here arrives with ``work`` already set
            work = Path(tempfile.mkdtemp(prefix=".packager-run-", dir=out))
        r = subprocess.run([*cmd, "--output-dir", str(work)], capture_output=True, text=True)
        if r.returncode == 0:
            with signals_held():
                for src, dest in zip(
                    output_files(manifest, str(work)), output_files(manifest, str(out)), strict=True
                ):
                    os.replace(src, dest)
        return r
    finally:
        if work is not None:
            remove_quietly(work)


def bench_row(stdout: str) -> tuple[dict, str]:
    """run_bundle --repeat's timing (its last line) and, with --profile, its kernel table
    (the lines from the one headed ``kernel`` to the timing; "" without)."""
    lines = stdout.strip().splitlines()
    heads = [k for k, line in enumerate(lines) if line.startswith("kernel ")]
    table = "\n".join(lines[heads[-1] : -1]) if heads else ""
    return json.loads(lines[-1]), table


def selftest_local(
    bundle: Path, board: Board, log=None, digests: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    exe = build(Path(bundle), board, log, digests)
    return subprocess.run([str(exe), str(bundle), "--selftest"], capture_output=True, text=True)


def output_files(manifest: dict, output_dir: str) -> list[Path]:
    return [Path(output_dir) / f"{safe_name(o['name'])}.npy" for o in manifest["outputs"]]
