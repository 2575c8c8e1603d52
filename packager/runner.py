"""Building a bundle with CMake and running it on the local board."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import numpy as np

from .boards import Board
from .errors import PackagerError
from .names import safe_name


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


def load_manifest(bundle: Path) -> dict:
    import json

    path = bundle / "manifest.json"
    if not path.is_file():
        raise PackagerError(f"{bundle}: not a bundle (no manifest.json)")
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise PackagerError(f"{path}: not valid JSON: {e}") from e


def build(bundle: Path, board: Board, log=None) -> Path:
    """Configure and build the bundle in ``bundle/build`` (once); returns run_bundle's path."""
    bundle = Path(bundle)
    build_dir = bundle / "build"
    exe = build_dir / "run_bundle"
    stamp = build_dir / ".built-from"
    key = (bundle / "manifest.json").read_bytes()
    if exe.exists() and stamp.exists() and stamp.read_bytes() == key:
        return exe
    if log:
        log(f"building {bundle} with CMake")
    check_compiler(board)
    # Another bundle's (or board's) cache would keep its compiler: start clean.
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
    stamp.write_bytes(key)
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
    """Every model input given once, each .npy of the right shape and dtype."""
    want = {i["name"]: i for i in manifest["inputs"]}
    unknown = [n for n in inputs if n not in want]
    if unknown:
        raise PackagerError(
            f"--input {unknown[0]}: the model has no such input (inputs: {', '.join(want)})"
        )
    missing = [n for n in want if n not in inputs]
    if missing:
        raise PackagerError(f"missing --input for: {', '.join(missing)}")
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
    output_dir: str,
    repeat: int = 0,
    log=None,
) -> subprocess.CompletedProcess:
    """Run the bundle on this machine; outputs go to ``output_dir/<safe name>.npy``."""
    bundle = Path(bundle)
    check_inputs(load_manifest(bundle), inputs)
    exe = build(bundle, board, log)
    cmd = [str(exe), str(bundle)]
    for name, path in inputs.items():
        cmd += ["--input", f"{name}={os.path.abspath(path)}"]
    cmd += ["--output-dir", str(output_dir)]
    if repeat:
        cmd += ["--repeat", str(repeat)]
    return subprocess.run(cmd, capture_output=True, text=True)


def selftest_local(bundle: Path, board: Board, log=None) -> subprocess.CompletedProcess:
    exe = build(Path(bundle), board, log)
    return subprocess.run([str(exe), str(bundle), "--selftest"], capture_output=True, text=True)


def output_files(manifest: dict, output_dir: str) -> list[Path]:
    return [Path(output_dir) / f"{safe_name(o['name'])}.npy" for o in manifest["outputs"]]
