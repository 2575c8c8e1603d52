"""A real OpenSSH server on 127.0.0.1 for the tests: its own host key, client key, config
file and free port. ``stop()`` kills the listener and every session process it started
(what a board losing power looks like to the client); ``start()`` brings it back on the
same port with the same keys."""

from __future__ import annotations

import getpass
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)], check=True
    )
    return path


CONFIG = """\
Port {port}
ListenAddress 127.0.0.1
HostKey {dir}/host_ed25519
PidFile {dir}/sshd.pid
AuthorizedKeysFile {dir}/client_ed25519.pub
StrictModes no
UsePAM no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
MaxStartups 100
MaxSessions 100
Subsystem sftp internal-sftp
SetEnv PATH={path}
LogLevel ERROR
"""


class SshServer:
    def __init__(self, directory: Path):
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.host_key = keygen(directory / "host_ed25519")
        self.client_key = keygen(directory / "client_ed25519")
        self.user = getpass.getuser()
        self.known_hosts = directory / "known_hosts"
        pub = (directory / "host_ed25519.pub").read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {pub[0]} {pub[1]}\n")
        # The venv's cmake and the host's compilers on the PATH of remote commands, so a
        # board that builds on the device can build here.
        path = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
        self.config = directory / "sshd_config"
        self.config.write_text(CONFIG.format(port=self.port, dir=directory, path=path))
        self.proc: subprocess.Popen | None = None

    def start(self) -> SshServer:
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", exist_ok=True)  # privilege separation directory
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "sshd.log", "ab"),  # noqa: SIM115 - lives with the server
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.dir / 'sshd.log').read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("sshd did not start listening within 10 s")

    def stop(self) -> None:
        """Kill the listener and all its session processes (descendants), then reap."""
        if self.proc is None:
            return
        for pid in [*descendants(self.proc.pid), self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)
        self.proc = None

    def connection(self, workdir: str, **extra) -> dict:
        return {
            "host": "127.0.0.1",
            "port": self.port,
            "user": self.user,
            "key": str(self.client_key),
            "known_hosts": str(self.known_hosts),
            "workdir": workdir,
            **extra,
        }


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), children before their parents' siblings."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found
