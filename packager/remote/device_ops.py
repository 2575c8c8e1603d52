"""What the packager does on one remote device: deploy a bundle, run it on inputs, measure
it, clean up, check the device. The remote counterpart of packager/runner.py.

Remote layout, under the connection's workdir (packager/remote/workdir.py: created with
mode 0700 and marked; the packager writes and deletes nowhere else):
  .packager-workdir  the mark: this directory is the packager's
  NAME/            the deployed bundle (NAME: the bundle directory's name), with
    build/run_bundle   cross-compiled on the host and uploaded, or built here
    .packager-complete the marker: the hash of the whole file set, written last
  .NAME.partial/   a deploy in progress (or one that failed; the next resumes from it)
  .runs/ID/        one run's inputs and outputs, removed when the run ends
"""

from __future__ import annotations

import json
import posixpath
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..boards import Board
from ..names import safe_name
from ..runner import load_manifest
from ..safe_paths import temp_file_beside
from . import transfer, workdir
from .errors import RemoteError
from .shell import command, q, rpath
from .ssh import Result, Session

EXE = "build/run_bundle"
PROFILE = "profile.json"  # run_bundle --profile-json's file in a run's directory


@dataclass
class Prepared:
    """A bundle ready to send: its files by remote relative path, and how it gets built."""

    bundle: Path
    name: str  # the bundle's directory name on the device
    files: dict[str, Path]
    build_on_device: bool
    digests: dict[str, str]


def prepare(
    bundle: Path, board: Board, log=None, digests: dict[str, str] | None = None
) -> Prepared:
    """Cross-compile on the host (unless the board builds on the device) and list what to
    upload: the manifest's files, manifest.json and, when cross-compiled, run_bundle.
    ``digests``: runner.file_digests(bundle), when the caller has just computed them (a
    large params.bin is then hashed once, not once per step)."""
    from ..runner import build

    bundle = Path(bundle)
    name = remote_name(bundle)
    manifest = load_manifest(bundle)
    rels = sorted(set(manifest.get("files", {})) | {"manifest.json"})
    files = {rel: bundle / rel for rel in rels}
    missing = [rel for rel, p in files.items() if not p.is_file()]
    if missing:
        raise RemoteError(f"{bundle}: bundle file {missing[0]} is missing; build it again")
    on_device = board.toolchain.build_on_device
    if not on_device:
        files[EXE] = build(bundle, board, log, digests)
    known = digests or {}
    hashes = {rel: known.get(rel) or transfer.sha256_file(p) for rel, p in files.items()}
    return Prepared(bundle, name, files, on_device, hashes)


def remote_name(bundle: Path) -> str:
    """The name of the bundle's directory on the device: the last component of its
    resolved path (``.`` is the current directory's name), from a safe character set."""
    name = Path(bundle).resolve().name
    if not workdir.BUNDLE_NAME.fullmatch(name):
        raise RemoteError(
            f"{bundle}: the bundle directory's name {name!r} cannot name a directory on the "
            f"board: use letters, digits, '.', '_' and '-', not starting with '.'"
        )
    return name


@dataclass
class DeployReport:
    device: str
    uploaded: int
    skipped: int
    bytes_sent: int
    seconds: float
    selftest: Result | None


def deploy(
    session: Session,
    board: Board,
    prepared: Prepared,
    selftest: bool = True,
    progress: Callable[[str], None] | None = None,
) -> DeployReport:
    t0 = time.monotonic()
    final = rpath(workdir.prepare(session), prepared.name)
    _refuse_foreign_bundle(session, final)
    build = None
    if prepared.build_on_device:
        build = lambda staging: _build_on_device(session, staging)
    stats = transfer.sync(
        session,
        final,
        prepared.files,
        build=build,
        keep=("build/",) if prepared.build_on_device else (),
        progress=progress,
    )
    check = run_bundle(session, board, final, ["--selftest"]) if selftest else None
    return DeployReport(
        session.who,
        len(stats.uploaded),
        len(stats.skipped),
        stats.bytes_sent,
        time.monotonic() - t0,
        check,
    )


def _refuse_foreign_bundle(session: Session, final: str) -> None:
    """A directory in the workdir that has the bundle's name but no completion marker was
    not put there by a deploy (which moves a bundle into place marked): leave it alone."""
    r = session.sh(f"[ ! -e {q(final)} ] || [ -f {q(rpath(final, transfer.MARKER))} ]", check=False)
    if r.returncode != 0:
        raise RemoteError(
            f"{session.who}: {final} exists and is not a bundle the packager deployed (no "
            f"{transfer.MARKER}); move it away or rename the bundle"
        )


def _build_on_device(session: Session, staging: str) -> None:
    script = (
        f"cd -- {q(staging)} && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "
        f"-DCMAKE_TOOLCHAIN_FILE=toolchain.cmake >build.log 2>&1 && "
        f'cmake --build build -j "$(nproc 2>/dev/null || echo 2)" >>build.log 2>&1'
        f" || {{ tail -n 30 build.log >&2; exit 1; }}"
    )
    r = session.sh(script, check=False)
    if r.returncode != 0:
        raise RemoteError(
            f"{session.who}: building the bundle on the device failed:\n{r.stderr.strip()}"
        )


def ensure_deployed(session: Session, board: Board, prepared: Prepared, log=None) -> str:
    """The bundle's directory on the device, deploying it first (no selftest) unless the
    device already holds exactly these files."""
    final = rpath(workdir.prepare(session), prepared.name)
    if not transfer.is_current(session, final, prepared.digests):
        if log:
            log(f"{session.who}: bundle not deployed (or out of date): deploying it")
        deploy(session, board, prepared, selftest=False)
    return final


def run_bundle(
    session: Session, board: Board, final: str, args: list[str], timeout_s=None
) -> Result:
    """``run_bundle . ARGS`` in the deployed bundle, through the board's exec_wrapper."""
    argv = [f"./{EXE}", ".", *args]
    wrapper = session.conn.exec_wrapper
    return session.sh(command(argv, cwd=final, wrapper=wrapper), timeout_s, check=False)


def run(
    session: Session,
    board: Board,
    prepared: Prepared,
    inputs: dict[str, str],
    output_dir: str | None,
    repeat: int = 0,
    timeout_s: float | None = None,
    log=None,
    extra: Sequence[str] = (),
    profile_json: str | None = None,
) -> Result:
    """Upload ``inputs`` (name -> local .npy), run (run_bundle fills the inputs not given,
    as ``extra``'s --fill and --seed say), fetch the outputs into ``output_dir`` as
    <safe name>.npy when there is one and the run succeeds, and the profile into
    ``profile_json`` when asked. The run's directory is removed."""
    final = ensure_deployed(session, board, prepared, log)
    run_dir = rpath(posixpath.dirname(final), workdir.RUNS, uuid.uuid4().hex)
    remote_profile = rpath(run_dir, PROFILE)
    try:
        args = _upload_inputs(session, run_dir, inputs)
        args += ["--output-dir", rpath(run_dir, "out")] if output_dir is not None else []
        args += ["--repeat", str(repeat)] if repeat else []
        args += ["--profile-json", remote_profile] if profile_json is not None else []
        args += list(extra)
        r = run_bundle(session, board, final, args, timeout_s)
        if r.returncode == 0 and output_dir is not None:
            _fetch_outputs(session, prepared.bundle, rpath(run_dir, "out"), Path(output_dir))
        if r.returncode == 0 and profile_json is not None:
            with temp_file_beside(Path(profile_json)) as tmp:  # a whole file or none
                transfer.fetch(session, remote_profile, tmp)
        return r
    finally:
        session.sh(f"rm -rf -- {q(run_dir)}", check=False)


def _upload_inputs(session: Session, run_dir: str, inputs: dict[str, str]) -> list[str]:
    """Each input keeps its file name on the device (in its own directory: two inputs may
    share a name); returns the --input arguments."""
    dirs = [rpath(run_dir, "in", str(k)) for k in range(len(inputs))]
    session.sh(f"mkdir -p -- {q(rpath(run_dir, 'out'))} {' '.join(q(d) for d in dirs)}")
    args = []
    for d, (name, path) in zip(dirs, inputs.items(), strict=True):
        target = rpath(d, Path(path).name)
        session.call("upload", lambda s, p=path, t=target: s.sftp().put(p, t))
        args += ["--input", f"{name}={target}"]
    return args


def _fetch_outputs(session: Session, bundle: Path, remote_out: str, output_dir: Path) -> None:
    for o in load_manifest(bundle)["outputs"]:
        name = f"{safe_name(o['name'])}.npy"
        with temp_file_beside(output_dir / name) as tmp:  # a whole file or none
            transfer.fetch(session, rpath(remote_out, name), tmp)


def bench(session, board, prepared, repeat: int, timeout_s=None, log=None, profile=False) -> dict:
    """Time ``repeat`` runs on the selftest inputs (checked first); the last JSON line of
    run_bundle, with the device that measured it. With ``profile``, also the profile
    document run_bundle wrote on the device (``profile``) and its table (``table``)."""
    from ..runner import bench_row

    final = ensure_deployed(session, board, prepared, log)
    run_dir = rpath(posixpath.dirname(final), workdir.RUNS, uuid.uuid4().hex)
    args = ["--selftest", "--repeat", str(repeat)]
    args += ["--profile-json", rpath(run_dir, PROFILE)] if profile else []
    try:
        session.sh(f"mkdir -p -- {q(run_dir)}")
        r = run_bundle(session, board, final, args, timeout_s)
        if r.returncode != 0:
            raise RemoteError(
                f"{session.who}: run_bundle failed ({r.returncode}) on {prepared.bundle}:\n"
                + (r.stderr or r.stdout).strip()[-2000:]
            )
        timing, table = bench_row(r.stdout)
        row = {"bundle": str(prepared.bundle), "device": session.conn.label, **timing}
        if profile:
            data = session.call("download", lambda s: _read_remote(s, rpath(run_dir, PROFILE)))
            row.update(profile=json.loads(data), table=table)
        return row
    finally:
        session.sh(f"rm -rf -- {q(run_dir)}", check=False)


def _read_remote(session: Session, path: str) -> bytes:
    with session.sftp().open(path, "rb") as f:
        return f.read()


def clean(session: Session) -> str:
    """Remove what the packager wrote in the workdir (see packager/remote/workdir.py)."""
    return workdir.clean(session)


def ping(session: Session) -> dict:
    """Reachable?, host key, arch the device reports, round-trip time of a trivial command."""
    from .hostkeys import fingerprint

    t0 = time.monotonic()
    session.client()
    connect_s = time.monotonic() - t0
    key = session.client().get_transport().get_remote_server_key()
    t1 = time.monotonic()
    r = session.sh("uname -m")
    return {
        "device": session.conn.label,
        "reachable": True,
        "host_key": f"{key.get_name()} {fingerprint(key)}",
        "arch": r.stdout.strip(),
        "rtt_ms": round((time.monotonic() - t1) * 1000, 1),
        "connect_ms": round(connect_s * 1000, 1),
    }
