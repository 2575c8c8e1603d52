"""What a command may write to, checked before any work starts, and how it writes.

The packager deletes only what it wrote itself: ``build -o OUT`` replaces OUT only when
OUT is a bundle (a directory whose manifest.json says ``"format": "packager-bundle"``),
and every other output (run's .npy files, tune's log, inspect's PNG, report's HTML) is
written beside what is there, never over something of another kind. Files appear whole or
not at all:
each is written to a temporary name in the same directory and renamed, with SIGINT and
SIGTERM held back while the rename (and the removal of the temporaries) happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from .errors import PackagerError

BUNDLE_FORMAT = "packager-bundle"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
LOG_RECORD_KEYS = ("version", "task", "config", "result")
REPORT_MARKER = '<meta name="generator" content="packager report">'  # in every report's head
_UMASK = os.umask(0o022)  # read it (there is no other way), then put it back
os.umask(_UMASK)


def is_bundle(path: Path) -> bool:
    """A directory this packager wrote: its manifest.json parses and names the format."""
    try:
        doc = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("format") == BUNDLE_FORMAT


def _contains(parent: Path, child: Path) -> bool:
    return child == parent or parent in child.parents


def _protected_reason(out: Path, protect: tuple[str, ...]) -> str | None:
    """Why OUT (resolved) may never be replaced, whatever it holds."""
    if out == Path(out.anchor):
        return "is the root directory"
    if out == Path.home().resolve():
        return "is your home directory"
    if _contains(out, Path.cwd().resolve()):
        return "is the current directory (or contains it) and cannot be moved away under you"
    for p in protect:
        model = Path(p).resolve()
        if out == model:
            return "is the model file itself"
        if _contains(out, model):
            return f"contains the model {p}"
    return None


def check_bundle_output(path: str | os.PathLike, protect: tuple[str, ...] = ()) -> Path:
    """The resolved OUT of ``build -o OUT`` if the build may write it, else PackagerError.

    OUT may be missing (it is created, parents too), an empty directory, or a bundle this
    packager wrote (replaced whole). ``protect``: paths (the model) OUT must not hold.
    """
    given = Path(path)
    fix = "choose a new directory for the bundle (it is created), or an existing bundle"
    if given.is_symlink():
        raise PackagerError(f"-o {path}: is a symbolic link; refusing to replace it; {fix}")
    out = given.resolve()
    why = _protected_reason(out, protect)
    if why is None and out.exists():
        if not out.is_dir():
            why = "is a file, not a bundle directory"
        elif any(out.iterdir()) and not is_bundle(out):
            why = "is a non-empty directory that is not a bundle (no packager manifest.json)"
    if why:
        raise PackagerError(f"-o {path}: {why}; refusing to replace it; {fix}")
    return out


def check_output_dir(path: str | os.PathLike, option: str = "--output-dir") -> Path:
    """A directory files are added to: missing (created when written) or a directory."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise PackagerError(f"{option} {path}: is a file, not a directory; give a directory")
    return p


def check_output_file(path: str | os.PathLike, option: str) -> Path:
    """A file to write whole: not a directory, in a directory that exists."""
    p = Path(path)
    if p.is_dir():
        raise PackagerError(f"{option} {path}: is a directory; give a file name")
    if not p.absolute().parent.is_dir():
        raise PackagerError(f"{option} {path}: its directory {p.absolute().parent} does not exist")
    return p


def check_log_file(path: str | os.PathLike, option: str = "--log") -> Path:
    """A tuning log to append to: missing, empty, or one whose first line is a record."""
    p = Path(path)
    if p.is_dir():
        raise PackagerError(f"{option} {path}: is a directory; give a .jsonl file")
    if not p.exists():
        return p
    try:
        with open(p, "rb") as f:
            first = f.readline(1 << 20)
    except OSError as e:
        raise PackagerError(f"{option} {path}: cannot read: {e.strerror}") from e
    if first.strip() and not _is_log_record(first):
        raise PackagerError(
            f"{option} {path}: exists and is not a tuning log (its first line is not a "
            f"tuning record); refusing to append to it; give a new or existing .jsonl log"
        )
    return p


def _is_log_record(line: bytes) -> bool:
    try:
        rec = json.loads(line)
    except ValueError:
        return False
    return isinstance(rec, dict) and all(k in rec for k in LOG_RECORD_KEYS)


def check_png_file(path: str | os.PathLike, option: str = "--plan-png") -> Path:
    """A PNG to (re)write: missing, empty, or a PNG already."""
    p = Path(path)
    if p.is_dir():
        raise PackagerError(f"{option} {path}: is a directory; give a .png file name")
    if p.exists() and p.stat().st_size:
        with open(p, "rb") as f:
            if f.read(len(PNG_SIGNATURE)) != PNG_SIGNATURE:
                raise PackagerError(
                    f"{option} {path}: exists and is not a PNG image; refusing to "
                    f"overwrite it; give a new file name"
                )
    return p


def check_report_file(path: str | os.PathLike, bundle: Path, option: str = "-o") -> Path:
    """An HTML report to (re)write: missing, empty, or a report the packager wrote (its
    head has REPORT_MARKER), and outside the bundle it describes."""
    p = Path(path)
    if p.is_dir():
        raise PackagerError(f"{option} {path}: is a directory; give an .html file name")
    if _contains(bundle.resolve(), p.parent.resolve() / p.name):
        raise PackagerError(
            f"{option} {path}: is inside the bundle {bundle}; the report never writes into "
            f"a bundle (its files are checked against manifest.json); give a path outside it"
        )
    if p.exists() and p.stat().st_size:
        with open(p, "rb") as f:
            head = f.read(4096)
        if REPORT_MARKER.encode() not in head:
            raise PackagerError(
                f"{option} {path}: exists and is not a report written by `packager report`; "
                f"refusing to overwrite it; give a new file name"
            )
    return p


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait (delivered when the block ends): for steps that must not
    stop half-way, as a rename pair or the removal of temporaries."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach Python only in the main thread
        return
    # Masking the signals in this thread is not enough: the kernel hands a process-wide
    # signal to any thread that does not mask it (numpy's BLAS keeps worker threads), and
    # Python then runs the handler here, mid-block. So the handlers note the signal
    # instead, and it is raised again, to the handlers of before, as the block ends.
    pending: list[int] = []

    def note(signum, frame):
        pending.append(signum)

    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    old = {s: h for s, h in old.items() if h is not None}  # None: set from C, left alone
    for s in old:
        signal.signal(s, note)
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(pending):
            signal.raise_signal(s)


def remove_quietly(path: Path) -> None:
    with signals_held():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


@contextlib.contextmanager
def temp_file_beside(dest: Path) -> Iterator[Path]:
    """A temporary path in ``dest``'s directory, renamed to ``dest`` when the block ends
    without error and removed otherwise."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = None
    try:
        with signals_held():  # the name is known before an interrupt can arrive
            fd, name = tempfile.mkstemp(prefix=f".{dest.name}.tmp-", dir=dest.parent)
            os.close(fd)
            tmp = Path(name)
        yield tmp
        os.chmod(tmp, 0o666 & ~_UMASK)  # as a plain open() would have made it
        with signals_held():
            os.replace(tmp, dest)
    except BaseException:
        if tmp is not None:
            remove_quietly(tmp)
        raise


def write_bytes_atomic(dest: Path, data: bytes) -> None:
    with temp_file_beside(Path(dest)) as tmp:
        tmp.write_bytes(data)


QUANTIZED_MARKER = "packager.quantize"  # metadata_props key of every model `quantize` wrote


def check_quantized_output(path: str | os.PathLike, model: str, option: str = "-o") -> Path:
    """A QDQ model to (re)write: missing, empty, or a model `packager quantize` wrote (its
    metadata has QUANTIZED_MARKER); never the input model itself."""
    p = check_output_file(path, option)
    if p.exists() and p.resolve() == Path(model).resolve():
        raise PackagerError(
            f"{option} {path}: is the input model itself; refusing to overwrite it; give a new "
            f"file name (e.g. {Path(model).stem}.int8.onnx)"
        )
    if p.exists() and p.stat().st_size and not _is_quantized_model(p):
        raise PackagerError(
            f"{option} {path}: exists and is not a model written by `packager quantize`; "
            f"refusing to overwrite it; give a new file name"
        )
    return p


def _is_quantized_model(path: Path) -> bool:
    import onnx  # only this check needs it; the module stays light for the other commands

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # any parse failure means: not ours
        return False
    return any(p.key == QUANTIZED_MARKER for p in model.metadata_props)
