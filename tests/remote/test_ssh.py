"""The SSH layer against a real sshd: quoting, timeouts that kill the process group, host-key
checks with messages that say how to trust a board, retries with backoff."""

import threading
import time
from pathlib import Path

import pytest

from packager.boards import Connection
from packager.remote.errors import DeviceLost, HostKeyRefused, RemoteTimeout
from packager.remote.shell import command
from packager.remote.ssh import Limits, Session

from .conftest import write_profile
from .sshd import descendants, free_port, keygen

NASTY = [
    "plain",
    "with space",
    "it's",
    'double "quoted"',
    "semi; echo INJECTED",
    "$(touch {canary})",
    "`touch {canary}`",
    "back\\slash",
    "new\nline",
    "-dash",
    "*",
]


def connection(server, **changes) -> Connection:
    values = {**server.connection("/tmp/unused"), "exec_wrapper": None, **changes}
    return Connection(**values)


def session(server, limits=None, **changes) -> Session:
    return Session("test", connection(server, **changes), limits or Limits(retries=0))


def test_every_argument_arrives_verbatim(sshd, tmp_path):
    canary = tmp_path / "canary"
    args = [a.format(canary=canary) for a in NASTY]
    cwd = tmp_path / "dir with 'quote' and $(x)"
    cwd.mkdir()
    s = session(sshd)
    try:
        r = s.sh(command(["python3", "-c", PRINT_ARGS, *args], cwd=str(cwd)))
    finally:
        s.close()
    assert r.stdout.split("\0")[:-1] == [str(cwd), *args]
    assert not canary.exists()


PRINT_ARGS = "import os, sys; print(os.getcwd(), *sys.argv[1:], sep='\\0', end='\\0')"


def test_exec_wrapper_words_are_quoted(sshd, tmp_path):
    canary = tmp_path / "canary"
    s = session(sshd)
    try:
        wrapper = f"env 'PK_NOTE=a b; touch {canary}'"
        r = s.sh(command(["sh", "-c", 'printf "%s" "$PK_NOTE"'], wrapper=wrapper))
    finally:
        s.close()
    assert r.stdout == f"a b; touch {canary}"
    assert not canary.exists()


def test_hanging_command_is_killed_with_its_process_group(sshd):
    s = session(sshd)
    marker = "37.25"  # a sleep nobody else runs
    t0 = time.monotonic()
    try:
        with pytest.raises(RemoteTimeout) as info:
            s.sh(f"sleep {marker} & sleep {marker}; wait", timeout_s=1)
        assert "did not finish within 1s" in str(info.value)
        assert "killed" in str(info.value) and "process group" in str(info.value)
    finally:
        s.close()
    assert time.monotonic() - t0 < 10
    time.sleep(0.2)
    left = [p for p in descendants(sshd.proc.pid) if marker in _cmdline(p)]
    assert not left, "sleep processes survived the timeout"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_unknown_host_key_refused_then_trusted_on_request(sshd, tmp_path):
    known = tmp_path / "known_hosts"
    s = session(sshd, known_hosts=str(known))
    with pytest.raises(HostKeyRefused) as info:
        s.sh("true")
    msg = str(info.value)
    assert f"[127.0.0.1]:{sshd.port}" in msg and str(known) in msg
    assert "ssh-keyscan" in msg and "--trust-on-first-use" in msg and "SHA256:" in msg
    assert not known.exists()

    trusting = Session("test", connection(sshd, known_hosts=str(known)), trust_on_first_use=True)
    assert trusting.sh("echo ok").stdout == "ok\n"
    trusting.close()
    assert f"[127.0.0.1]:{sshd.port} ssh-ed25519 " in known.read_text()
    again = session(sshd, known_hosts=str(known))  # recorded: no flag needed any more
    assert again.sh("echo ok").stdout == "ok\n"
    again.close()


def test_changed_host_key_refused_even_when_trusting(sshd, tmp_path, cli):
    other = keygen(tmp_path / "other")
    kind, b64 = Path(f"{other}.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {kind} {b64}\n")
    board = write_profile(
        tmp_path / "boards", "qemu-aarch64", [sshd.connection("/tmp/x", known_hosts=str(known))]
    )
    code, out, err = cli("boards", "--ping", board, "--trust-on-first-use", "--retries", "0")
    assert code == 2
    assert "UNREACHABLE" in out and "CHANGED" in out and "ssh-keygen -R" in out
    assert "board qemu-aarch64" in out and str(known) in out
    assert known.read_text().count("\n") == 1  # nothing added


def test_ping_reports_each_device(sshd, tmp_path, cli):
    board = write_profile(tmp_path / "b", "qemu-aarch64", [sshd.connection("/tmp/x")])
    code, out, err = cli("boards", "--ping", board)
    assert code == 0, out + err
    assert f"127.0.0.1:{sshd.port}: reachable, arch x86_64" in out
    assert "host key ssh-ed25519 SHA256:" in out and "rtt " in out


def test_refused_connection_retried_with_backoff(tmp_path):
    dead = Connection("127.0.0.1", free_port(), None, None, None, "/tmp/x", None)
    s = Session("test", dead, Limits(retries=2, backoff_s=0.2, connect_timeout_s=2))
    t0 = time.monotonic()
    with pytest.raises(DeviceLost) as info:
        s.sh("true")
    assert time.monotonic() - t0 >= 0.6  # waited 0.2 s, then 0.4 s
    assert "failed after 3 attempt(s)" in str(info.value)
    assert f"127.0.0.1:{dead.port}" in str(info.value)


def test_dropped_connection_comes_back(own_sshd):
    s = session(own_sshd, Limits(retries=4, backoff_s=0.3))
    assert s.sh("echo one").stdout == "one\n"
    own_sshd.stop()  # the board goes away, then comes back while the client backs off
    restart = threading.Timer(0.4, own_sshd.start)
    restart.start()
    try:
        assert s.sh("echo two").stdout == "two\n"
    finally:
        restart.join()
        s.close()
