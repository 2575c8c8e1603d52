"""The CMake toolchain file a bundle carries for its board: compiler, flags and, when
cross-compiling, the target system and optional sysroot. Its bytes depend on the profile
only, so bundles stay byte-identical from build to build."""

from __future__ import annotations

from .boards import Board

FILE_NAME = "toolchain.cmake"

# The board's arch as CMake's CMAKE_SYSTEM_PROCESSOR spells it.
CMAKE_PROCESSOR = {"x86_64": "x86_64", "aarch64": "aarch64", "armv7": "arm"}


def wants_toolchain_file(board: Board) -> bool:
    """Local x86_64 boards build with the host's compiler as before; every other board
    names its compiler (and usually a cross one) in the bundle itself."""
    return not board.is_local or board.arch != "x86_64"


def is_cross(board: Board) -> bool:
    """Compiled on the packager's machine for another one."""
    return not board.is_local and not board.toolchain.build_on_device


def toolchain_file(board: Board) -> str:
    tc = board.toolchain
    lines = [
        f"# CMake toolchain file for board '{board.name}', written by packager from its profile.",
        "#   cmake -S BUNDLE -B BUILD -DCMAKE_TOOLCHAIN_FILE=BUNDLE/toolchain.cmake",
    ]
    if not tc.build_on_device:
        lines += [
            "set(CMAKE_SYSTEM_NAME Linux)",
            f"set(CMAKE_SYSTEM_PROCESSOR {CMAKE_PROCESSOR[board.arch]})",
        ]
    lines.append(f"set(CMAKE_C_COMPILER {cmake_quote(tc.cc)})")
    if tc.sysroot:
        lines += [
            f"set(CMAKE_SYSROOT {cmake_quote(tc.sysroot)})",
            "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)",
            "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)",
            "set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)",
        ]
    flags = " ".join(tc.cflags)
    # A cache entry, so `-DPK_CFLAGS=...` on the command line still wins.
    lines.append(f'set(PK_CFLAGS {cmake_quote(flags)} CACHE STRING "Board flags ({board.name})")')
    return "\n".join(lines) + "\n"


def cmake_quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'
