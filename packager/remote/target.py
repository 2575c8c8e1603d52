"""Where a bundle runs, behind one small interface: ``LocalTarget`` (this machine, through
packager/runner.py) and ``RemoteTarget`` (a board's devices over SSH, as a pool). The CLI
calls ``open_target(board)`` and never asks which one it got."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import runner
from ..boards import Board
from . import device_ops, pool
from .errors import DeviceLost, RemoteError
from .ssh import Limits, Result, Session


@dataclass
class DeployLine:
    """One device's deploy: what it printed and whether its selftest passed."""

    device: str
    text: str
    ok: bool
    selftest_failed: bool = False


class LocalTarget:
    def __init__(self, board: Board, log=None):
        self.board, self.log = board, log

    def close(self) -> None:
        pass

    def run(
        self,
        bundle: Path,
        inputs,
        output_dir,
        repeat=0,
        timeout_s=None,
        verify=True,
        extra=(),
        profile_json=None,
    ) -> Result:
        digests = _check_bundle(bundle, self.board, inputs, verify)
        if profile_json is not None:  # run_bundle writes it whole itself
            extra = [*extra, "--profile-json", os.path.abspath(profile_json)]
        r = runner.run_local(
            bundle, self.board, inputs, output_dir, repeat, self.log, digests, extra
        )
        # A signal's death as a remote shell reports it (128+N), so the CLI reads both alike.
        code = 128 - r.returncode if r.returncode < 0 else r.returncode
        return Result(code, r.stdout, r.stderr, 0.0)

    def deploy(self, bundle: Path, verify=True) -> tuple[list[DeployLine], list[str]]:
        digests = _check_bundle(bundle, self.board, verify=verify)
        r = runner.selftest_local(bundle, self.board, self.log, digests)
        line = DeployLine("local", f"built in {bundle}/build; {_selftest_word(r)}", True)
        line.selftest_failed = r.returncode != 0
        return [line], []

    def bench(self, bundles: list[Path], repeat: int, timeout_s=None, verify=True, profile=False):
        rows = []
        for b in bundles:
            digests = _check_bundle(b, self.board, verify=verify)
            exe = runner.build(b, self.board, self.log, digests)
            with tempfile.TemporaryDirectory(prefix="packager-bench-") as tmp:
                doc = Path(tmp) / "profile.json"
                cmd = [str(exe), str(b), "--selftest", "--repeat", str(repeat)]
                cmd += ["--profile-json", str(doc)] if profile else []
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
                if r.returncode != 0:
                    raise RemoteError(
                        f"{b}: run_bundle failed ({r.returncode}): {r.stderr.strip()}"
                    )
                timing, table = runner.bench_row(r.stdout)
                row = {"bundle": str(b), "device": "local", **timing}
                if profile:
                    row.update(profile=json.loads(doc.read_text()), table=table)
            rows.append(row)
        return rows, []

    def ping(self) -> list[dict]:
        return [{"device": "local", "reachable": True, "arch": platform.machine()}]

    def clean(self) -> tuple[list[str], bool]:
        return ["local board: nothing to clean (bundles build in place)"], True


class RemoteTarget:
    def __init__(self, board: Board, limits: Limits, trust_on_first_use=False, log=None):
        self.board, self.log = board, log
        self.sessions = [
            Session(board.name, c, limits, trust_on_first_use, log) for c in board.connections
        ]

    def close(self) -> None:
        for s in self.sessions:
            s.close()

    def run(
        self,
        bundle: Path,
        inputs,
        output_dir,
        repeat=0,
        timeout_s=None,
        verify=True,
        extra=(),
        profile_json=None,
    ) -> Result:
        digests = _check_bundle(bundle, self.board, inputs, verify)
        prepared = device_ops.prepare(bundle, self.board, self.log, digests)

        def job(s: Session, _):
            return device_ops.run(
                s,
                self.board,
                prepared,
                inputs,
                output_dir,
                repeat,
                timeout_s,
                self.log,
                extra,
                profile_json,
            )

        return self._one(pool.spread(self.sessions, [bundle], job, self.log))

    def deploy(self, bundle: Path, verify=True) -> tuple[list[DeployLine], list[str]]:
        digests = _check_bundle(bundle, self.board, verify=verify)
        prepared = device_ops.prepare(bundle, self.board, self.log, digests)
        report = pool.each_device(
            self.sessions, lambda s: device_ops.deploy(s, self.board, prepared), self.log
        )
        self._require_some(report)
        return [_deploy_line(o) for o in report.outcomes], report.summary()

    def bench(self, bundles: list[Path], repeat: int, timeout_s=None, verify=True, profile=False):
        jobs = [
            device_ops.prepare(b, self.board, self.log, _check_bundle(b, self.board, verify=verify))
            for b in bundles
        ]

        def job(s: Session, prepared):
            return device_ops.bench(s, self.board, prepared, repeat, timeout_s, self.log, profile)

        report = pool.spread(self.sessions, jobs, job, self.log)
        self._require_some(report)
        if len(report.outcomes) < len(jobs):
            raise DeviceLost(self._all_down(report, "some measurements were not done"))
        for o in report.outcomes:
            if o.error:
                raise o.error
        return [o.result for o in report.outcomes], report.summary()

    def ping(self) -> list[dict]:
        def one(s: Session) -> dict:
            try:
                return device_ops.ping(s)
            except RemoteError as e:
                return {"device": s.conn.label, "reachable": False, "error": str(e)}

        with _threads(len(self.sessions)) as ex:
            return list(ex.map(one, self.sessions))

    def clean(self) -> tuple[list[str], bool]:
        """A line per device, and whether every device was cleaned (a refused workdir or
        an unreachable device is not)."""
        report = pool.each_device(self.sessions, device_ops.clean, self.log)
        self._require_some(report)
        lines = [
            f"{o.device}: {o.result}" if not o.error else f"{o.device}: error: {o.error}"
            for o in report.outcomes
        ]
        down = [f"{d}: unreachable: {why}" for d, why in sorted(report.down.items())]
        return lines + down, not down and not any(o.error for o in report.outcomes)

    # --- helpers -------------------------------------------------------------------------

    def _one(self, report: pool.PoolReport) -> Result:
        self._require_some(report)
        outcome = report.outcomes[0]
        if outcome.error:
            raise outcome.error
        if self.log and len(self.sessions) > 1:
            self.log(f"ran on {outcome.device}")
        return outcome.result

    def _require_some(self, report: pool.PoolReport) -> None:
        if not report.outcomes:
            raise DeviceLost(self._all_down(report, "no device of the board could do the work"))

    def _all_down(self, report: pool.PoolReport, what: str) -> str:
        why = "; ".join(report.down.values()) or "no device answered"
        return f"board {self.board.name}: {what}: {why}"


def open_target(board: Board, limits: Limits | None = None, trust_on_first_use=False, log=None):
    if board.is_local:
        return LocalTarget(board, log)
    return RemoteTarget(board, limits or Limits(), trust_on_first_use, log)


def _check_bundle(bundle: Path, board: Board, inputs=None, verify=False):
    """The bundle's file digests (as on disk now) when ``verify``: checked against its
    manifest before anything runs."""
    manifest = runner.load_manifest(Path(bundle))
    runner.check_bundle_board(manifest, board)
    if inputs is not None:
        runner.check_inputs(manifest, inputs)
    if not verify:
        return None
    digests = runner.file_digests(Path(bundle))
    runner.verify_files(Path(bundle), manifest, digests)
    return digests


def _selftest_word(r) -> str:
    if r.returncode == 0:
        return "selftest PASS"
    tail = (r.stdout + r.stderr).strip().splitlines()[-3:]
    return f"selftest FAILED (run_bundle exit {r.returncode}): " + " | ".join(tail)


def _deploy_line(o: pool.Outcome) -> DeployLine:
    if o.error:
        return DeployLine(o.device, f"deploy failed: {o.error}", False)
    rep = o.result
    text = (
        f"uploaded {rep.uploaded} file(s) ({rep.bytes_sent} bytes), {rep.skipped} already "
        f"there, in {rep.seconds:.1f}s; {_selftest_word(rep.selftest)}"
    )
    return DeployLine(o.device, text, True, rep.selftest.returncode != 0)


def _threads(n: int):
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max_workers=max(1, n))
