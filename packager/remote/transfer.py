"""Putting a bundle on a device so that it is either complete or visibly not.

The bundle goes to ``.NAME.partial`` beside its final place, seeded from the deployed
copy so that files whose sha256 already matches are not sent again. Only when every file's
hash has been checked on the device (and an on-device build, if any, has succeeded) is the
completion marker written and the directory moved into place. A deploy that fails half way
leaves ``.partial`` behind, which the next deploy resumes from; the deployed bundle is
never a mix of two versions, and ``is_current`` says whether it is exactly this one.
"""

from __future__ import annotations

import hashlib
import posixpath
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..bundle import sha256_file
from .errors import DeviceLost, RemoteError
from .shell import q, rpath
from .ssh import Session

MARKER = ".packager-complete"


@dataclass
class SyncStats:
    uploaded: list[str]
    skipped: list[str]
    bytes_sent: int


def tree_digest(digests: dict[str, str]) -> str:
    """One hash for the whole set of files: the content of the completion marker."""
    listing = "".join(f"{digests[rel]}  {rel}\n" for rel in sorted(digests))
    return hashlib.sha256(listing.encode()).hexdigest()


def staging_of(final: str) -> str:
    head, name = posixpath.split(final.rstrip("/"))
    return rpath(head, f".{name}.partial") if head else f".{name}.partial"


def is_current(session: Session, final: str, digests: dict[str, str]) -> bool:
    r = session.sh(f"cat -- {q(rpath(final, MARKER))} 2>/dev/null", check=False)
    return r.returncode == 0 and r.stdout.strip() == tree_digest(digests)


def sync(
    session: Session,
    final: str,
    files: dict[str, Path],
    build: Callable[[str], None] | None = None,
    keep: tuple[str, ...] = (),
    progress: Callable[[str], None] | None = None,
) -> SyncStats:
    """Make ``final`` on the device hold exactly ``files`` (relative path -> local file),
    plus whatever ``build(staging)`` makes and files under the ``keep`` prefixes."""
    digests = {rel: sha256_file(path) for rel, path in files.items()}
    try:
        return session.call(
            "upload", lambda s: _sync_once(s, final, files, digests, build, keep, progress)
        )
    except DeviceLost as e:
        raise DeviceLost(
            f"{e}\nThe upload to {final} did not finish: the bundle there was not replaced "
            f"or marked complete (a previous deploy, if any, is intact). Deploy again when "
            f"the board is back; files already sent are not sent again."
        ) from None


def _sync_once(session, final, files, digests, build, keep, progress) -> SyncStats:
    # Idempotent from any point: a retry after a dropped connection resumes from .partial.
    staging = staging_of(final)
    session.sh(_prepare_script(final, staging))
    remote = remote_digests(session, staging, list(files))
    todo = [rel for rel in sorted(files) if remote.get(rel) != digests[rel]]
    sent = _upload(session, staging, files, todo, progress)
    _prune(session, staging, set(files), keep)
    _verify(session, staging, digests)
    if build:
        build(staging)
    session.sh(f"printf '%s\\n' {q(tree_digest(digests))} > {q(rpath(staging, MARKER))}")
    session.sh(_swap_script(final, staging))
    return SyncStats(todo, [r for r in sorted(files) if r not in todo], sent)


def _prepare_script(final: str, staging: str) -> str:
    parent = posixpath.dirname(final.rstrip("/")) or "."
    return (
        f"mkdir -p -- {q(parent)} && "
        f"if [ ! -d {q(staging)} ] && [ -d {q(final)} ]; then cp -a -- {q(final)} {q(staging)}; fi"
        f" && mkdir -p -- {q(staging)} && rm -f -- {q(rpath(staging, MARKER))}"
    )


def _swap_script(final: str, staging: str) -> str:
    head, name = posixpath.split(final.rstrip("/"))
    old = rpath(head, f".{name}.old") if head else f".{name}.old"
    return (
        f"rm -rf -- {q(old)} && {{ if [ -e {q(final)} ]; then mv -- {q(final)} {q(old)}; fi; }}"
        f" && mv -- {q(staging)} {q(final)} && rm -rf -- {q(old)}"
    )


def remote_digests(session: Session, root: str, rels: list[str]) -> dict[str, str]:
    """sha256 of each of ``rels`` under ``root`` that exists on the device."""
    if not rels:
        return {}
    r = session.sh(f"cd -- {q(root)} && sha256sum -- {' '.join(q(x) for x in rels)}", check=False)
    found = {}
    for line in r.stdout.splitlines():
        digest, sep, name = line.partition("  ")
        if sep and len(digest) == 64 and not line.startswith("\\"):
            found[name] = digest
    return found


def _upload(session, staging, files, todo, progress) -> int:
    dirs = sorted({posixpath.dirname(rel) for rel in todo} - {""})
    if dirs:
        session.sh(f"cd -- {q(staging)} && mkdir -p -- {' '.join(q(d) for d in dirs)}")
    sftp, sent = session.sftp(), 0
    for rel in todo:
        local, target = files[rel], rpath(staging, rel)
        # Written beside its name and renamed: a cut connection never leaves a short file
        # under the real name (its hash would not match anyway, but it stays obvious).
        sftp.put(str(local), target + ".part", confirm=True)
        if local.stat().st_mode & stat.S_IXUSR:
            sftp.chmod(target + ".part", 0o755)
        sftp.posix_rename(target + ".part", target)
        sent += local.stat().st_size
        if progress:
            progress(rel)
    return sent


def _prune(session, staging, wanted: set[str], keep: tuple[str, ...]) -> None:
    """Remove files a previous version left that this one does not have."""
    r = session.sh(f"cd -- {q(staging)} && find . -type f -print0")
    extra = [
        rel
        for rel in (p[2:] for p in r.stdout.split("\0") if p.startswith("./"))
        if rel not in wanted and not rel.startswith(keep)
    ]
    if extra:
        session.sh(f"cd -- {q(staging)} && rm -f -- {' '.join(q(x) for x in extra)}")


def _verify(session, staging, digests) -> None:
    remote = remote_digests(session, staging, list(digests))
    bad = [rel for rel in sorted(digests) if remote.get(rel) != digests[rel]]
    if bad:
        raise RemoteError(
            f"{session.who}: after upload, {len(bad)} file(s) differ on the device "
            f"(first: {bad[0]}); the bundle was not marked complete"
        )


def fetch(session: Session, remote: str, local: Path) -> None:
    local.parent.mkdir(parents=True, exist_ok=True)
    session.call("download", lambda s: s.sftp().get(remote, str(local)))
