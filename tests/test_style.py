"""Lint and format: ruff for Python, clang-format for the C runtime."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PY_DIRS = ["packager", "tests", "bench", "examples"]


def tool(name: str) -> str:
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed (scripts/setup.sh installs it)")
    return found


def run(cmd) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


def test_ruff_lint():
    r = run([tool("ruff"), "check", *PY_DIRS])
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_format():
    r = run([tool("ruff"), "format", "--check", *PY_DIRS])
    assert r.returncode == 0, r.stdout + r.stderr


def test_clang_format():
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "c_runtime").rglob("*.[ch]"))
    r = run([tool("clang-format"), "--dry-run", "--Werror", *files])
    assert r.returncode == 0, r.stdout + r.stderr
