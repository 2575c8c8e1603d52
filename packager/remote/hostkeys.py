"""Host keys: checked against a known_hosts file by default; an unknown key is trusted only
on request (trust on first use), a changed key never. Refusals say how to trust the board."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import paramiko

from .errors import HostKeyRefused

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's form: SHA256:base64 without padding."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_path(configured: str | None) -> Path:
    return Path(os.path.expanduser(configured or DEFAULT_KNOWN_HOSTS))


def host_entry(host: str, port: int) -> str:
    """How known_hosts names a host: ``host``, or ``[host]:port`` off port 22."""
    return host if port == 22 else f"[{host}]:{port}"


def load(client: paramiko.SSHClient, path: Path) -> None:
    if path.is_file():
        client.load_host_keys(str(path))


class Policy(paramiko.MissingHostKeyPolicy):
    """What to do with a host that is not in known_hosts."""

    def __init__(self, who: str, path: Path, port: int, trust_on_first_use: bool, log=None):
        self.who, self.path, self.port = who, path, port
        self.trust = trust_on_first_use
        self.log = log or (lambda msg: None)

    def missing_host_key(self, client, hostname, key):
        if not self.trust:
            raise HostKeyRefused(unknown_message(self.who, self.path, hostname, self.port, key))
        # Append rather than rewrite the file: keeps the user's comments and hashed entries.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.log(f"{self.who}: trusted on first use: {key.get_name()} {fingerprint(key)}")


def unknown_message(who: str, path: Path, entry: str, port: int, key) -> str:
    host = entry.strip("[").split("]")[0]
    return (
        f"{who}: host key of {entry} is not in {path} ({key.get_name()} {fingerprint(key)}); "
        f"refusing to connect. To trust it, check the fingerprint on the board "
        f"(ssh-keygen -lf /etc/ssh/ssh_host_{_file_kind(key)}_key.pub) and add it with "
        f"`ssh-keyscan -p {port} {host} >> {path}`, or pass --trust-on-first-use "
        f"(profile: connection.trust_on_first_use: true)"
    )


def changed_message(who: str, path: Path, entry: str, got, want) -> str:
    return (
        f"{who}: host key of {entry} CHANGED: {path} has {want.get_name()} {fingerprint(want)}, "
        f"the board offers {got.get_name()} {fingerprint(got)}; refusing to connect (this is "
        f"what a man-in-the-middle looks like). If the board was reinstalled, remove the old "
        f"key with `ssh-keygen -R '{entry}' -f {path}` and connect again"
    )


def _file_kind(key) -> str:
    name = key.get_name()
    return {"ssh-ed25519": "ed25519", "ssh-rsa": "rsa"}.get(name, "ecdsa")
