"""The toolchain file a bundle carries, and the committed ARM profiles' compilers and flags
(checked with the real cross compilers)."""

import dataclasses
import shutil
import subprocess

import pytest

from packager.boards import list_boards, load_board
from packager.toolchain import toolchain_file, wants_toolchain_file

ARM = [b for b in list_boards() if b.arch in ("aarch64", "armv7")]


def test_rpi3_toolchain_file():
    text = toolchain_file(load_board("rpi3"))
    assert text.splitlines()[2:] == [
        "set(CMAKE_SYSTEM_NAME Linux)",
        "set(CMAKE_SYSTEM_PROCESSOR arm)",
        'set(CMAKE_C_COMPILER "arm-linux-gnueabihf-gcc")',
        'set(PK_CFLAGS "-O2 -mcpu=cortex-a53 -mfpu=neon-fp-armv8 -mfloat-abi=hard" '
        'CACHE STRING "Board flags (rpi3)")',
    ]
    assert toolchain_file(load_board("rpi3")) == text  # the same bytes every time


def test_sysroot_and_on_device_builds():
    board = load_board("rpi4")
    tc = dataclasses.replace(board.toolchain, sysroot='/opt/rpi "root"')
    text = toolchain_file(dataclasses.replace(board, toolchain=tc))
    assert 'set(CMAKE_SYSROOT "/opt/rpi \\"root\\"")' in text
    assert "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)" in text
    tc = dataclasses.replace(board.toolchain, cc="gcc", build_on_device=True)
    text = toolchain_file(dataclasses.replace(board, toolchain=tc))
    assert "CMAKE_SYSTEM_NAME" not in text and 'set(CMAKE_C_COMPILER "gcc")' in text


def test_which_boards_carry_a_toolchain_file():
    assert not wants_toolchain_file(load_board("host"))
    assert all(wants_toolchain_file(b) for b in ARM)


@pytest.mark.parametrize("board", ARM, ids=lambda b: b.name)
def test_arm_profile_compiles_with_its_cross_compiler(board, tmp_path):
    assert "-march=native" not in board.toolchain.cflags
    if shutil.which(board.toolchain.cc) is None:
        pytest.skip(f"{board.toolchain.cc} not installed (bash scripts/setup.sh)")
    src = tmp_path / "v.c"
    src.write_text(
        "typedef float v4 __attribute__((vector_size(16)));\n"
        "v4 add(v4 a, v4 b) { return a + b; }\nint main(void) { return 0; }\n"
    )
    cmd = [board.toolchain.cc, *board.toolchain.cflags, "-c", str(src), "-o", str(tmp_path / "o")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    machine = int.from_bytes((tmp_path / "o").read_bytes()[18:20], "little")
    assert machine == {"aarch64": 0xB7, "armv7": 0x28}[board.arch]


def test_rpi5_flags_enable_the_dot_product_instructions():
    """The Cortex-A76 has ARMv8.2's sdot/udot, which int8 kernels will use: the profile's
    flags must tell the compiler so."""
    board = load_board("rpi5")
    if shutil.which(board.toolchain.cc) is None:
        pytest.skip(f"{board.toolchain.cc} not installed (bash scripts/setup.sh)")
    cmd = [board.toolchain.cc, *board.toolchain.cflags, "-dM", "-E", "-x", "c", "/dev/null"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "#define __ARM_FEATURE_DOTPROD 1" in r.stdout
    rpi4 = load_board("rpi4")
    cmd = [rpi4.toolchain.cc, *rpi4.toolchain.cflags, "-dM", "-E", "-x", "c", "/dev/null"]
    assert "__ARM_FEATURE_DOTPROD" not in subprocess.run(cmd, capture_output=True, text=True).stdout
