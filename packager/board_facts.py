"""``packager boards --show`` and ``--probe``: a profile as the packager resolves it (which
values were detected on this machine), and a remote board's CPU facts read over SSH into
the user's copy of its profile.

The probe writes only the user's boards directory, never a shipped profile: the user's
copy starts as the shipped file's text. Only the probed keys change; everything else in
the file, comments included, stays as it was. A user profile the packager has not written
before (no ``PROBE_MARK`` line) is changed only with ``--write``: without it, the probe
says what it would change and leaves the file alone.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import yaml

from . import resources
from .boards import SCHEMA, Board, check_board_file
from .cpuinfo import PROBE_SCRIPT, profile_values, split_sections
from .errors import PackagerError

PROBE_MARK = "# packager boards --probe"
PROBED_KEYS = ("arch", "cores", "vector_bits", "cpu_name", "cpu_id", "features", "cache")


# --- show ----------------------------------------------------------------------------------


def show_lines(board: Board) -> list[str]:
    """``key: value`` per schema key the profile has, dotted inside maps; a value read from
    this machine (``detect: true``) is marked ``# detected``."""
    lines = [f"# {board.name}: {board.path}"]
    for f in SCHEMA:
        value = getattr(board, f.key)
        if f.key == "connections" or value in (None, ()):
            continue
        if f.fields:  # a map: one line per key it has
            for sub in f.fields:
                inner = getattr(value, sub.key)
                if inner not in (None, ()):
                    lines.append(_line(f"{f.key}.{sub.key}", inner, board.detected))
        else:
            lines.append(_line(f.key, value, board.detected))
    lines += [f"connections: {', '.join(c.label for c in board.connections)}"] * (
        len(board.connections) > 1
    )
    return lines


def _line(key: str, value, detected: tuple[str, ...]) -> str:
    text = f"{key}: {_yaml_scalar(value)}"
    return f"{text:<48}  # detected" if key in detected else text


def _yaml_scalar(value) -> str:
    if isinstance(value, tuple):
        value = list(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000)
    return text.strip().removesuffix("...").strip()  # a lone scalar ends the document


# --- probe ---------------------------------------------------------------------------------


def probe(session) -> dict:
    """The profile keys PROBE_SCRIPT reads on the device of ``session``."""
    r = session.sh(PROBE_SCRIPT)
    values = profile_values(split_sections(r.stdout))
    return {k: values[k] for k in PROBED_KEYS if k in values}


def changes(board: Board, values: dict) -> list[tuple[str, object, object]]:
    """(dotted key, profile's value, probed value) for every probed value that differs."""
    out = []
    for key, new in values.items():
        if isinstance(new, dict):
            old_map = getattr(board, key)
            for sub, v in new.items():
                old = getattr(old_map, sub) if old_map is not None else None
                if old != v:
                    out.append((f"{key}.{sub}", old, v))
            continue
        old = getattr(board, key)
        old = list(old) if isinstance(old, tuple) else old
        if old != new:
            out.append((key, old, new))
    return out


def user_copy(board: Board) -> Path:
    return resources.user_boards() / f"{board.name}.yaml"


def written_by_packager(path: Path) -> bool:
    """Whether the probe may change ``path`` unasked: it does not exist yet, or it carries
    the block an earlier probe wrote."""
    return not path.exists() or path.read_text(encoding="utf-8").startswith(PROBE_MARK)


def updated_text(base: str, values: dict, source: str) -> str:
    """``base`` without its top-level blocks of the probed keys (and an earlier probe's
    mark), the probed values appended under a first line that marks the file as the
    packager's."""
    kept, skipping = [], False
    for line in base.splitlines():
        key = line.split(":", 1)[0]
        if line.startswith(PROBE_MARK) or line.startswith("# probed from "):
            continue
        if not line.startswith((" ", "-", "#")) and ":" in line:
            skipping = key in values
        elif line and not line.startswith((" ", "-")):
            skipping = False
        if not skipping:
            kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    block = yaml.safe_dump(values, sort_keys=False, default_flow_style=None, width=10_000)
    when = time.strftime("%Y-%m-%d")
    head = [f"{PROBE_MARK} wrote the keys below its last line; they are re-read by the next probe"]
    return "\n".join([*head, *kept, "", f"# probed from {source} on {when}", block])


def write_profile(board: Board, values: dict, source: str) -> Path:
    """Write the user's copy of ``board``'s profile with ``values``: checked as a profile
    before it replaces anything (a temporary file, then an atomic rename)."""
    path = user_copy(board)
    base = path.read_text(encoding="utf-8") if path.exists() else board.path.read_text()
    text = updated_text(base, values, source)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        candidate = Path(tmp) / path.name  # check_board_file wants name == file stem
        candidate.write_text(text, encoding="utf-8")
        try:
            check_board_file(candidate)
        except PackagerError as e:
            raise PackagerError(
                f"{path}: the probed profile is invalid, not written: {e}"
            ) from None
        os.replace(candidate, path)
    return path
