"""The packager's work directory on a device, and what in it the packager may delete.

The packager writes only inside a directory it created (or found empty) and marked with
``.packager-workdir``; a directory that is not empty and not marked is someone else's and
is refused, as are /, top-level directories, the login directory and its ancestors, and a
workdir that another user owns or may write to. ``clean`` removes only the entries the
packager makes (deployed bundles, partial deploys, ``.runs``), then the directory itself
when nothing else is left in it.
"""

from __future__ import annotations

import posixpath
import re

from .errors import RemoteError
from .shell import q, rpath
from .ssh import Session
from .transfer import MARKER as COMPLETE

MARK = ".packager-workdir"
MARK_TEXT = (
    "This directory was created by the packager (connection.workdir of a board profile). "
    "`packager clean` removes the bundles it deployed here, and the directory once "
    "nothing else is in it."
)
RUNS = ".runs"
TUNE = ".tune"  # the tuner's timing drivers, one per batch, removed after each run
# A bundle's directory name on the device: no '/', not hidden (the packager's own entries
# begin with '.'), nothing a shell or an option parser reads specially but a leading '-'.
BUNDLE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
# The entries beside bundles that deploys leave: a deploy in progress, a replaced bundle.
STAGING = re.compile(r"\.([A-Za-z0-9_-][A-Za-z0-9._-]*)\.(partial|old)")

# Run on the device with $w (the workdir) and $parent set. Prints a status word, a newline
# and the absolute workdir. $mode is "use" (create and mark it if missing or empty) or
# "inspect" (change nothing).
_SCRIPT = r"""
say() { printf '%s\n%s' "$1" "$w"; exit 0; }
if [ -d "$w" ]; then
  real=$(cd -- "$w" && pwd -P) || say unreadable
  case "$home/" in "$real"/*) say home ;; esac
  case "$real" in /*/*) ;; *) say broad ;; esac
  [ -O "$w" ] || say foreign
  case $(ls -ldL -- "$w") in ?????w*|????????w*) say shared ;; esac
  [ -f "$w/__MARK__" ] && say ours
  [ -z "$(ls -A -- "$w")" ] || say unmarked
  [ "$mode" = use ] || say empty
elif [ -e "$w" ] || [ -L "$w" ]; then
  say notdir
else
  [ "$mode" = use ] || say missing
  mkdir -p -- "$parent" && mkdir -m 700 -- "$w" || say uncreatable
fi
chmod 700 -- "$w" && printf '%s\n' __TEXT__ > "$w/__MARK__" || say uncreatable
say created
"""

_WHY = {
    "broad": "is / or a top-level directory",
    "home": "is the login directory or contains it",
    "foreign": "belongs to another user",
    "shared": "is writable by other users (group or others); `chmod 700` it if it is yours",
    "unmarked": f"is not a packager work directory (it has no {MARK}) and is not empty: "
    "the packager neither writes nor deletes there",
    "empty": f"is not a packager work directory (it has no {MARK}): nothing of the "
    "packager's to clean there",
    "notdir": "exists and is not a directory",
    "unreadable": "cannot be entered",
    "uncreatable": "could not be created with mode 0700 and marked",
}
_ADVICE = "set connection.workdir to a directory of its own, such as ~/.cache/packager"


def _refuse(session: Session, path: str, why: str) -> RemoteError:
    shown = session.conn.workdir
    where = shown if path == shown else f"{shown} ({path})"
    return RemoteError(f"{session.who}: connection.workdir {where} {why}; {_ADVICE}")


def _locate(session: Session) -> tuple[str, str]:
    """Shell assignments of ``w`` and ``parent`` from connection.workdir, normalised
    (``//usr/`` is ``/usr``, ``a/../b`` is ``b``); ``~/x`` is under the login directory."""
    raw = session.conn.workdir
    if raw == "~" or raw.startswith("~/"):
        raw = raw[1:].lstrip("/") or "."
    elif raw.startswith("~"):
        raise _refuse(session, raw, "names another user's login directory (`~user`)")
    if raw.startswith("/"):
        norm = "/" + posixpath.normpath(raw).lstrip("/")
        if norm.count("/") < 2:
            raise _refuse(session, norm, _WHY["broad"])
        if re.fullmatch(r"/root|/home/[^/]+|/Users/[^/]+", norm):
            raise _refuse(session, norm, "is a login directory")
        return f"w={q(norm)}", f"parent={q(posixpath.dirname(norm))}"
    # Relative: under the login directory, as SSH commands and SFTP start there.
    norm = posixpath.normpath(raw)
    if norm == "." or norm == ".." or norm.startswith("../"):
        raise _refuse(session, f"~/{norm}", "is the login directory or outside it")
    up = posixpath.dirname(norm)
    return f'w="$home"/{q(norm)}', (f'parent="$home"/{q(up)}' if up else 'parent="$home"')


def _check(session: Session, mode: str) -> tuple[str, str]:
    """(status, absolute workdir) as the device sees it."""
    w, parent = _locate(session)
    script = _SCRIPT.replace("__MARK__", MARK).replace("__TEXT__", q(MARK_TEXT))
    r = session.sh(f"home=$(cd && pwd -P) || exit 1; {w}; {parent}; mode={mode}\n{script}")
    status, _, path = r.stdout.partition("\n")
    if status in _WHY:
        raise _refuse(session, path, _WHY[status])
    if status not in ("ours", "created", "missing"):
        raise RemoteError(f"{session.who}: unexpected answer checking the workdir: {r.stdout!r}")
    return status, path


def prepare(session: Session) -> str:
    """The absolute workdir on the device, created (mode 0700) and marked if it was
    missing or empty; refused unless it is the packager's own."""
    return _check(session, "use")[1]


def clean(session: Session) -> str:
    """Remove what the packager made in its workdir; the workdir too when nothing else is
    in it. Returns what was done, in words."""
    status, w = _check(session, "inspect")
    if status == "missing":
        return f"nothing to clean: {w} does not exist"
    ours, others = _entries(session, w)
    if ours:
        session.sh("rm -rf -- " + " ".join(q(rpath(w, e)) for e in ours))
    if others:
        listed = ", ".join(sorted(others)[:5]) + (", ..." if len(others) > 5 else "")
        return (
            f"removed {len(ours)} item(s) from {w}; kept the directory: it holds "
            f"{len(others)} item(s) the packager did not write ({listed})"
        )
    session.sh(f"rm -f -- {q(rpath(w, MARK))} && rmdir -- {q(w)}")
    return f"removed {w}"


def _entries(session: Session, w: str) -> tuple[list[str], list[str]]:
    """The workdir's entries, split into the packager's and everything else. A bundle is
    a directory (not a link) with a completion marker and a bundle's name."""
    r = session.sh(
        f"cd -- {q(w)} && for e in * .[!.]* ..?*; do "
        f'if [ -d "$e" ] && [ ! -L "$e" ] && [ -f "$e/{COMPLETE}" ]; then t=B; '
        f'elif [ -e "$e" ] || [ -L "$e" ]; then t=O; else continue; fi; '
        f'printf \'%s%s\\0\' "$t" "$e"; done'
    )
    ours, others = [], []
    for item in filter(None, r.stdout.split("\0")):
        tag, name = item[0], item[1:]
        if name == MARK:
            continue
        mine = (
            name in (RUNS, TUNE)
            or STAGING.fullmatch(name) is not None
            or (tag == "B" and BUNDLE_NAME.fullmatch(name) is not None)
        )
        (ours if mine else others).append(name)
    return ours, others
