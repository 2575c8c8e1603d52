"""toolchain.link: static. Bundles cross-built for the Raspberry Pi profiles must run on the
boards' own OS (Raspberry Pi OS Bullseye: glibc 2.31), not only where they were built (the
cross compilers' glibc is newer): checked on the binary itself, then run under qemu-user
with no target libraries at all."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import onnx
import pytest

from packager import native, runner
from packager.boards import check_board_file, list_boards, load_board
from packager.errors import PackagerError
from packager.package import package

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "examples" / "tiny_cnn.onnx"
BULLSEYE_GLIBC = (2, 31)
QEMU = {"aarch64": "qemu-aarch64", "armv7": "qemu-arm"}
OBJDUMP = {"aarch64": "aarch64-linux-gnu-objdump", "armv7": "arm-linux-gnueabihf-objdump"}
BUILDS = {
    "native": lambda bundle, board: native.build_run_bundle(
        bundle, board.toolchain.cc, [*native.CFLAGS, *board.toolchain.cflags]
    ),
    "cmake": runner.build,
}


def needs_tools(board, *tools):
    for tool in (board.toolchain.cc, QEMU[board.arch], OBJDUMP[board.arch], *tools):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (bash scripts/setup.sh)")


def glibc_versions(exe: Path, arch: str) -> list[tuple[int, ...]] | None:
    """The GLIBC_x.y versions the executable's dynamic symbols need; None when it is static
    (no dynamic section at all)."""
    r = subprocess.run([OBJDUMP[arch], "-T", str(exe)], capture_output=True, text=True)
    if "not a dynamic object" in r.stderr:
        return None
    assert r.returncode == 0, r.stderr
    found = {tuple(map(int, v.split("."))) for v in re.findall(r"\(GLIBC_([0-9.]+)\)", r.stdout)}
    assert found, r.stdout  # a dynamic executable needs some glibc: the parse went wrong
    return sorted(found)


def run_selftest(exe: Path, bundle: Path, arch: str) -> subprocess.CompletedProcess:
    """run_bundle --selftest under qemu-user without -L: a static executable needs no
    target root (a dynamic one stops at once: no /lib/ld-linux-*.so here)."""
    cmd = [QEMU[arch], "-strace", str(exe), str(bundle), "--selftest"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def assert_cross_selftest_passes(model, board, tmp_path: Path) -> None:
    """``model`` (a ModelProto) packaged for ``board``, built with its cross compiler and
    run with --selftest under qemu-user: the selftest passes."""
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    bundle = Path(package(str(path), board, str(tmp_path / "b")))
    r = run_selftest(BUILDS["native"](bundle, board), bundle, board.arch)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[-1] == "selftest: PASS"


# --- the profiles ----------------------------------------------------------------------------


def test_which_shipped_profiles_link_statically():
    static = sorted(b.name for b in list_boards() if b.toolchain.static)
    assert static == ["pynq-z2", "rpi-zero2w", "rpi3", "rpi4", "rpi5"]
    assert load_board("host").toolchain.link == "dynamic"
    assert load_board("rk3399").toolchain.link == "dynamic"  # its OpenCL GPU needs dlopen


PROFILE = """\
name: b
description: a test board
arch: aarch64
cpu: cortex-a72
cores: 4
vector_bits: 128
toolchain:
  cc: aarch64-linux-gnu-gcc
  link: {link}
"""

OPENCL = """\
opencl:
  device: Mali-T860
  compute_units: 4
  max_work_group_size: 256
  max_work_item_sizes: [256, 256, 256]
  local_memory_kib: 32
  version: "1.2"
"""


def error_of(path: Path) -> str:
    with pytest.raises(PackagerError) as info:
        check_board_file(path)
    return str(info.value)


def test_link_field_is_validated(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text(PROFILE.format(link="shared"))
    assert error_of(path) == f"{path}: toolchain.link: 'shared' is not one of dynamic, static"
    path.write_text(PROFILE.format(link="true"))
    assert error_of(path) == f"{path}: toolchain.link: expected a string, got bool"
    path.write_text(PROFILE.format(link="static") + OPENCL)
    assert error_of(path).startswith(
        f"{path}: toolchain.link: 'static' cannot go with an 'opencl' section: the OpenCL "
        "loader (libOpenCL) opens the GPU driver with dlopen"
    )
    path.write_text(PROFILE.format(link="dynamic") + OPENCL)
    assert check_board_file(path).toolchain.link == "dynamic"


def test_bundle_settings_say_static(tmp_path):
    package(str(MODEL), load_board("rpi4"), str(tmp_path / "pi"), selftest=False)
    package(str(MODEL), load_board("host"), str(tmp_path / "host"), selftest=False)
    assert "set(PK_STATIC ON)\n" in (tmp_path / "pi" / "bundle.cmake").read_text()
    assert "set(PK_STATIC" not in (tmp_path / "host" / "bundle.cmake").read_text()
    assert native.link_args(tmp_path / "host") == ["-lm", "-lpthread"]


def test_static_and_opencl_settings_are_refused_by_both_builds(tmp_path):
    """A bundle.cmake edited by hand to ask for both."""
    bundle = tmp_path / "b"
    package(str(MODEL), load_board("rpi4"), str(bundle), selftest=False)
    with open(bundle / "bundle.cmake", "a") as f:
        f.write("set(PK_OPENCL ON)\n")
    with pytest.raises(PackagerError, match="PK_STATIC and PK_OPENCL cannot go together"):
        native.build_run_bundle(bundle, "aarch64-linux-gnu-gcc")
    cmd = [runner.cmake_bin(), "-S", str(bundle), "-B", str(tmp_path / "build")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode != 0
    assert "PK_STATIC and PK_OPENCL cannot go together" in r.stderr


# --- the binaries ----------------------------------------------------------------------------


@pytest.mark.parametrize("build", sorted(BUILDS))
@pytest.mark.parametrize("name", ["rpi4", "rpi3"])
def test_pi_bundle_needs_no_newer_glibc_and_runs(name, build, tmp_path):
    board = load_board(name)
    needs_tools(board, "cmake" if build == "cmake" else board.toolchain.cc)
    bundle = Path(package(str(MODEL), board, str(tmp_path / "b")))
    exe = BUILDS[build](bundle, board)
    versions = glibc_versions(exe, board.arch)
    assert versions is None, f"dynamic, needs GLIBC {versions}"  # static: no dynamic section
    r = run_selftest(exe, bundle, board.arch)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[-1] == "selftest: PASS"
    # The thread pool started its workers (pthreads work in the static executable).
    assert r.stderr.count("CLONE_THREAD") == board.cores - 1, r.stderr[-2000:]


def test_dynamic_pi_bundle_needs_the_build_machines_glibc(tmp_path):
    """The same bundle linked dynamically, as before: the check above is not vacuous."""
    board = load_board("rpi4")
    needs_tools(board)
    board = dataclasses.replace(
        board, toolchain=dataclasses.replace(board.toolchain, link="dynamic")
    )
    bundle = Path(package(str(MODEL), board, str(tmp_path / "b")))
    exe = BUILDS["native"](bundle, board)
    versions = glibc_versions(exe, board.arch)
    assert versions is not None and versions[-1] > BULLSEYE_GLIBC
    if not Path("/lib/ld-linux-aarch64.so.1").exists():  # no target root: no loader to run it
        assert "ld-linux-aarch64.so.1" in run_selftest(exe, bundle, board.arch).stderr


def test_the_tuners_timing_driver_links_like_run_bundle(tmp_path, monkeypatch, cli):
    # The timing driver runs where run_bundle runs: on a static board it must need no
    # newer C library than run_bundle does. A host copy with link: static builds, links
    # and runs it here for real; the link lines it ran are checked.
    text = (Path("board_profiles") / "host.yaml").read_text()
    text = text.replace("name: host", "name: shost").replace("  cc: cc", "  cc: cc\n  link: static")
    (tmp_path / "shost.yaml").write_text(text)
    monkeypatch.setenv("PACKAGER_BOARDS_DIR", str(tmp_path))
    import packager.tune.measure as measure

    links, run = [], subprocess.run

    def recording(cmd, *args, **kwargs):
        words = [str(c) for c in cmd]
        if "-o" in words and Path(words[words.index("-o") + 1]).name == "driver":
            links.append(words)
        return run(cmd, *args, **kwargs)

    monkeypatch.setattr(measure.subprocess, "run", recording)
    log = tmp_path / "t.jsonl"
    code, _, err = cli(
        "tune", "examples/tiny_cnn.onnx", "--board", "shost", "--trials", 1, "--log", log
    )
    assert code == 0, err
    assert links and all("-static" in words for words in links), links
