"""One SSH session to one device: connect with the host-key policy, retry with backoff when
the connection drops, run commands with a timeout in their own process group.

Only this module talks to paramiko's client and channels; callers get ``Result``s and
``RemoteError``s that name the device.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import paramiko

from ..boards import Connection
from . import hostkeys, shell
from .errors import DeviceLost, HostKeyRefused, RemoteError, RemoteTimeout

T = TypeVar("T")

# paramiko logs connection trouble itself; without a handler Python would print those
# records on stderr beside our own message, which already says what happened.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

# What a dropped or refused connection raises, at any point of a session.
DROPPED = (
    OSError,  # socket errors, refused connections, paramiko's NoValidConnectionsError
    EOFError,
    paramiko.SSHException,
)


@dataclass(frozen=True)
class Limits:
    """Timeouts and retries. ``retries`` is how many more attempts follow a dropped
    connection; the waits between them start at ``backoff_s`` and double."""

    connect_timeout_s: float = 10.0
    command_timeout_s: float = 600.0
    retries: int = 3
    backoff_s: float = 0.5


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    seconds: float


class Session:
    """A lazily opened, reopened-on-drop SSH connection to one device of a board."""

    def __init__(
        self,
        board: str,
        conn: Connection,
        limits: Limits | None = None,
        trust_on_first_use: bool = False,
        log: Callable[[str], None] | None = None,
    ):
        self.board, self.conn = board, conn
        self.limits = limits or Limits()
        self.trust = trust_on_first_use or conn.trust_on_first_use
        self.log = log or (lambda msg: None)
        self.who = f"board {board} ({conn.label})"
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._lock = threading.Lock()

    # --- connection ----------------------------------------------------------------------

    def client(self) -> paramiko.SSHClient:
        """The open client, connecting (with retries) if there is none or it dropped."""
        transport = self._client.get_transport() if self._client else None
        if transport is None or not transport.is_active():
            self.close()
            self._client = self._retrying("connect", self._connect_once)
        return self._client

    def sftp(self) -> paramiko.SFTPClient:
        if self._sftp is None or self._sftp.sock.closed:
            self._sftp = self.client().open_sftp()
            self._sftp.get_channel().settimeout(self.limits.command_timeout_s)
        return self._sftp

    def close(self) -> None:
        for thing in (self._sftp, self._client):
            try:
                if thing is not None:
                    thing.close()
            except Exception:  # closing a dead connection: nothing left to do
                pass
        self._sftp = self._client = None

    def _connect_once(self) -> paramiko.SSHClient:
        c = self.conn
        known = hostkeys.known_hosts_path(c.known_hosts)
        client = paramiko.SSHClient()
        hostkeys.load(client, known)
        client.set_missing_host_key_policy(
            hostkeys.Policy(self.who, known, c.port, self.trust, self.log)
        )
        key = os.path.expanduser(c.key) if c.key else None
        if key and not os.path.isfile(key):
            raise RemoteError(f"{self.who}: connection.key: no such key file {key}")
        t = self.limits.connect_timeout_s
        try:
            client.connect(
                c.host,
                port=c.port,
                username=c.user,
                key_filename=key,
                look_for_keys=key is None,
                allow_agent=True,
                timeout=t,
                banner_timeout=t,
                auth_timeout=t,
            )
        except paramiko.BadHostKeyException as e:
            client.close()
            entry = hostkeys.host_entry(c.host, c.port)
            raise HostKeyRefused(
                hostkeys.changed_message(self.who, known, entry, e.key, e.expected_key)
            ) from None
        except paramiko.AuthenticationException as e:
            client.close()
            raise RemoteError(
                f"{self.who}: authentication failed ({e}); check connection.user and "
                f"connection.key, or load the key into ssh-agent"
            ) from None
        except BaseException:
            client.close()
            raise
        return client

    def _retrying(self, what: str, op: Callable[[], T]) -> T:
        """``op()``, tried again with backoff while the connection drops or is refused.
        Host-key refusals, authentication failures and timeouts are final at once."""
        delay, attempts = self.limits.backoff_s, self.limits.retries + 1
        for attempt in range(1, attempts + 1):
            try:
                return op()
            except (HostKeyRefused, RemoteTimeout, RemoteError):
                raise
            except DROPPED as e:
                self.close()
                if attempt == attempts:
                    raise DeviceLost(
                        f"{self.who}: {what} failed after {attempts} attempt(s): {_describe(e)}"
                    ) from None
                self.log(f"{self.who}: {what}: {_describe(e)}; retrying in {delay:g}s")
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def call(self, what: str, op: Callable[[Session], T]) -> T:
        """Run ``op(self)``, reconnecting and running it again if the connection drops. Only
        for idempotent operations (everything here is: uploads skip what is already there)."""
        return self._retrying(what, lambda: op(self))

    # --- commands ------------------------------------------------------------------------

    def sh(self, script: str, timeout_s: float | None = None, check: bool = True) -> Result:
        """Run a shell script (made of shell.q-quoted parts) on the device."""
        r = self.call("command", lambda s: s._exec(script, timeout_s))
        if check and r.returncode != 0:
            raise RemoteError(
                f"{self.who}: remote command failed ({r.returncode}): {script}\n"
                + (r.stderr or r.stdout).strip()[-2000:]
            )
        return r

    def _exec(self, script: str, timeout_s: float | None) -> Result:
        timeout_s = timeout_s or self.limits.command_timeout_s
        transport = self.client().get_transport()
        chan = transport.open_session(timeout=self.limits.connect_timeout_s)
        start, got = time.monotonic(), _Output()
        try:
            chan.exec_command(shell.in_own_process_group(script))
            got.collect(chan, transport, start + timeout_s)
        except RemoteTimeout:
            self._kill(got.pgid)
            raise RemoteTimeout(
                f"{self.who}: command did not finish within {timeout_s:g}s and was killed "
                f"with its process group (pgid {got.pgid}): {script}"
            ) from None
        finally:
            chan.close()
        if got.pgid is None or not chan.exit_status_ready():
            raise ConnectionResetError("the connection dropped while the command ran")
        return Result(chan.recv_exit_status(), got.stdout(), got.stderr(), time.monotonic() - start)

    def _kill(self, pgid: int | None) -> None:
        if pgid is None:
            return
        kill = self.client().get_transport().open_session(timeout=self.limits.connect_timeout_s)
        try:
            kill.exec_command(shell.kill_group(pgid))
            kill.recv_exit_status()
        finally:
            kill.close()


class _Output:
    """What a command printed, and its process group id (the first line of stdout)."""

    def __init__(self):
        self.out, self.err = bytearray(), bytearray()
        self.pgid: int | None = None

    def collect(self, chan, transport, deadline: float) -> None:
        """Read until the command exits and both streams end, the connection drops
        (returns early, pgid may be None) or the deadline passes (RemoteTimeout)."""
        while True:
            if chan.recv_ready():
                self.out += chan.recv(1 << 16)
                self._take_pgid()
            elif chan.recv_stderr_ready():
                self.err += chan.recv_stderr(1 << 16)
            elif chan.exit_status_ready() and (chan.eof_received or chan.closed):
                return
            elif not transport.is_active():
                return
            elif time.monotonic() > deadline:
                raise RemoteTimeout()
            else:
                select.select([chan], [], [], 0.05)

    def _take_pgid(self) -> None:
        if self.pgid is None and b"\n" in self.out:
            first, _, rest = bytes(self.out).partition(b"\n")
            tag, _, pid = first.decode("ascii", "replace").partition(" ")
            if tag == shell.PGID_TAG and pid.isdigit():
                self.pgid = int(pid)
                self.out = bytearray(rest)

    def stdout(self) -> str:
        return self.out.decode("utf-8", "replace")

    def stderr(self) -> str:
        return self.err.decode("utf-8", "replace")


def _describe(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return f"{type(e).__name__}: {text}" if type(e).__name__ not in text else text
