"""Real boards for the remote tests: OpenSSH's sshd on 127.0.0.1 and, for ARM, qemu-user
running the cross-compiled bundles. Profiles are copies of the committed ones whose
connection points at the sshd the test started."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from .sshd import SSHD, SshServer

ROOT = Path(__file__).resolve().parents[2]
NEEDED = {
    "sshd": SSHD,
    "qemu-aarch64": "qemu-aarch64",
    "qemu-arm": "qemu-arm",
    "aarch64-linux-gnu-gcc": "aarch64-linux-gnu-gcc",
    "arm-linux-gnueabihf-gcc": "arm-linux-gnueabihf-gcc",
}
MISSING = [name for name, exe in NEEDED.items() if not shutil.which(exe)]
if MISSING:  # scripts/setup.sh installs them; say what is missing rather than fail obscurely
    pytest.skip(f"remote tests need {', '.join(MISSING)} (bash scripts/setup.sh)", True)


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    server = SshServer(tmp_path_factory.mktemp("sshd")).start()
    yield server
    server.stop()


@pytest.fixture
def own_sshd(tmp_path):
    """A server of the test's own, for tests that stop it."""
    server = SshServer(tmp_path / "sshd").start()
    yield server
    server.stop()


def write_profile(directory: Path, base: str, connections: list[dict], **changes) -> Path:
    """``board_profiles/BASE.yaml`` with its connection(s) replaced (keys not given, such as
    exec_wrapper, kept from the profile), written to DIRECTORY/BASE.yaml (the name must
    match the file)."""
    data = yaml.safe_load((ROOT / "board_profiles" / f"{base}.yaml").read_text())
    committed = data.pop("connection", None) or {}
    data.pop("connections", None)
    connections = [{**committed, **c} for c in connections]
    if len(connections) == 1:
        data["connection"] = connections[0]
    else:
        data["connections"] = connections
    for key, value in changes.items():
        if isinstance(value, dict):
            data[key] = {**data.get(key, {}), **value}
        else:
            data[key] = value
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{base}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
