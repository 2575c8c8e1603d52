"""boards --probe against the loopback board (a real sshd on 127.0.0.1, so the device is
this machine): it reads the CPU's facts over SSH into the user's copy of the profile,
changing a file the packager did not write only with --write."""

from __future__ import annotations

import os
from pathlib import Path

from packager.boards import load_board
from packager.cpuinfo import FEATURES

from .conftest import write_profile

NAME = "qemu-aarch64"  # its connection is replaced by the loopback sshd's


def _flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.split(":")[0].strip() in ("flags", "Features"):
            return set(line.split(":", 1)[1].split())
    return set()


def test_probe_writes_the_detected_fields(sshd, tmp_path, monkeypatch, cli):
    boards = tmp_path / "boards"
    monkeypatch.setenv("PACKAGER_BOARDS_DIR", str(boards))
    conn = sshd.connection(str(tmp_path / "wd"), exec_wrapper=None)
    path = write_profile(boards, NAME, [conn], arch="x86_64", cores=64, vector_bits=128)
    path.write_text("# my own notes\n" + path.read_text())
    before = path.read_text()

    # A user's own file: the probe says what it would change, and changes nothing.
    code, out, _ = cli("boards", "--probe", NAME)
    assert code == 1
    assert f"  cores: 64 -> {len(os.sched_getaffinity(0))}" in out.splitlines()
    assert "not written by the packager: not changed (--write to change it" in out
    assert path.read_text() == before

    code, out, _ = cli("boards", "--probe", NAME, "--write")
    assert code == 0 and f"wrote {path}" in out
    board = load_board(NAME)
    assert board.cores == len(os.sched_getaffinity(0))
    assert list(board.features) == [f for f in FEATURES if f in _flags()]
    assert board.vector_bits == (512 if "avx512f" in _flags() else 256)
    assert board.cache.l1d_kib and board.cache.l2_kib
    assert board.cpu_id == load_board("host").cpu_id  # the same /proc/cpuinfo
    assert board.connection.port == sshd.port  # the rest of the file is kept
    assert "# my own notes" in path.read_text()

    # Now the packager's own: a probe may rewrite it unasked (and finds nothing new).
    code, out, _ = cli("boards", "--probe", NAME)
    assert code == 0 and "the profile already says what" in out


def test_probe_refuses_the_local_board(cli):
    code, _, err = cli("boards", "--probe", "host")
    assert code == 2 and "board 'host' is this machine: say `detect: true`" in err
