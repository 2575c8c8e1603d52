"""Measuring candidates on the board: build one timing driver per batch, run it there.

Candidates compile in parallel on the host (cross-compiled for ARM boards) through the
object cache into one driver binary. It runs locally for a board without a connection;
over SSH the batch is cut into one share per live device of the board's pool, and the
shares go to whichever device is idle (``remote.pool.spread``): the devices measure at
the same time, a device lost mid-share is taken out and its share measured by another,
and each measurement names the device that made it. Timings are run with the board's
thread count through the runtime's own ``pk_parallel_for``.

A GPU task (a task of the board's OpenCL target) is measured on the OpenCL device: on this
machine in-process through packager/opencl_local.py (each candidate's launch checked
against the default schedule's output, then timed by its profiling events), on a remote
board by the OpenCL timing driver (cl_driver.py), built with the board's toolchain and
run there like the CPU driver.

An accelerator task (family ``accel``) is measured on the accelerator's behavioural
simulator on this machine, for every board with an accelerator, local or remote (no
board driver can time one program yet): each candidate is lowered, turned into a program
(packager/accel/codegen.py) and run once on the node's constants and seeded random int8
activations (the simulator is deterministic); its output bytes are checked against the
default schedule's program, and its cost is the simulator's cycles at the profile's
clock. Its record says ``"measured_by": "simulator"`` and the cycles.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..boards import Board
from ..bundle import C_RUNTIME
from ..codegen.build import INCLUDE
from ..codegen.c import codegen_c
from ..codegen.opencl import codegen_opencl, launch_of
from ..errors import PackagerError
from ..native import compile_object, link_libraries
from ..target import Target
from .cl_driver import cl_driver_source
from .driver import FLUSHING_ARCHS, driver_source, parse_output
from .log import FLUSHED, PRODUCED, WARM
from .space import valid
from .tasks import Task, default_func, lower_config

# As bundles are built (CMakeLists.txt, native.py): contraction on, so FMAs are measured.
PARALLEL_FOR = C_RUNTIME / "src" / "pk_parallel.c"


def cpu_timing(board: Board) -> dict:
    """How the CPU timing driver times on ``board``, as its records say (log.confirming):
    the weights flushed where the arch lets user code flush them (driver.py's flush_args),
    else warm, and the inputs produced on the pool (produce_args)."""
    return {"caches": FLUSHED if board.arch in FLUSHING_ARCHS else WARM, "inputs": PRODUCED}


SCRATCH = C_RUNTIME / "src" / "pk_scratch.c"
EXTRA_FLAGS = ("-std=c99", "-fno-math-errno", "-ffp-contract=fast")


@dataclass
class Measurement:
    index: int
    knobs: dict
    costs: list[float] = field(default_factory=list)
    error: str | None = None
    prim: object = None  # the lowered candidate (features come from it)
    device: str | None = None  # the pool device that ran it (remote boards)
    # more of the record's result: why it failed ("message"), what measured it
    # ("measured_by": "simulator") and what it counted ("cycles")
    extra: dict = field(default_factory=dict)

    @property
    def median(self) -> float:
        if self.error or not self.costs:
            return float("inf")
        return sorted(self.costs)[len(self.costs) // 2]


@dataclass
class Settings:
    min_seconds: float = 0.02  # per candidate, over all samples
    samples: int = 5
    jobs: int = os.cpu_count() or 2


class Measurer:
    """Builds and runs batches of candidates of one board."""

    def __init__(self, board: Board, settings: Settings | None = None, log=None):
        self.board, self.settings = board, settings or Settings()
        self.runner = LocalRunner() if board.is_local else RemoteRunner(board, log)
        self.flags = [*board.toolchain.cflags, *EXTRA_FLAGS]
        self._runtime_objs: list[Path] | None = None
        if board.toolchain.sysroot:
            self.flags.append(f"--sysroot={board.toolchain.sysroot}")

    def close(self) -> None:
        self.runner.close()

    def measure(self, task: Task, batch: list[tuple[int, dict]]) -> list[Measurement]:
        ms = [Measurement(i, k) for i, k in batch]
        if task.family == "accel":
            self._measure_accel(task, ms)
            return ms
        for m in ms:
            m.prim = valid(task, m.knobs, f"pk_cand_{m.index}")
            if m.prim is None:
                m.error = "invalid"
        todo = [m for m in ms if m.prim is not None]
        if todo and task.family == "opencl" and self.board.is_local:
            self._measure_cl_local(task, todo)
        elif todo:
            with tempfile.TemporaryDirectory(prefix="pk-tune-") as tmp:
                exe, built = self._build(task, todo, Path(tmp))
                if built:
                    self._run(exe, built)
            if task.family == "cpu":
                for m in todo:
                    m.extra.update(cpu_timing(self.board))
        return ms

    # --- building ------------------------------------------------------------------------

    def _compile(self, source: str, where: Path) -> Path:
        src = where / f"{hashlib.sha256(source.encode()).hexdigest()[:16]}.c"
        src.write_text(source)
        return compile_object(src, self.board.toolchain.cc, self.flags, [INCLUDE], b"tune1")

    def _build(self, task: Task, todo: list[Measurement], tmp: Path):
        if task.family == "opencl":
            return self._build_cl(task, todo, tmp)
        ref = default_func(task)
        ref.name = "pk_ref"
        sources = [codegen_c(ref)] + [codegen_c(m.prim) for m in todo]
        with ThreadPoolExecutor(self.settings.jobs) as pool:
            objs = list(pool.map(lambda s: _try(self._compile, s, tmp), sources))
        if isinstance(objs[0], Exception):
            raise PackagerError(
                f"task {task.label}: the default kernel does not compile: {objs[0]}"
            )
        built = []
        for m, obj in zip(todo, objs[1:], strict=True):
            if isinstance(obj, Exception):
                m.error = "compile_error"
            else:
                built.append((m, obj))
        n_in = len(task.node.inputs)
        weights = [task.graph.values[i].is_const for i in task.node.inputs]
        driver = driver_source(ref, n_in, {m.index: m.prim.name for m, _ in built}, weights)
        extra = [self._compile(driver, tmp), *self._runtime_objects()]
        exe = tmp / "driver"
        cmd = [self.board.toolchain.cc, *self.flags, objs[0], *[o for _, o in built], *extra]
        libs = link_libraries(self.board.toolchain.static)  # runs where run_bundle runs
        r = subprocess.run([*map(str, cmd), "-o", str(exe), *libs], capture_output=True, text=True)
        if r.returncode != 0:
            raise PackagerError(f"task {task.label}: linking the timing driver failed:\n{r.stderr}")
        return exe, [m for m, _ in built]

    def _build_cl(self, task: Task, todo: list[Measurement], tmp: Path):
        """The OpenCL timing driver of the batch, for the board (its kernels are built by the
        board's OpenCL driver when they run)."""
        ref = default_func(task)
        ref.name = "pk_ref"
        source = cl_driver_source(ref, len(task.node.inputs), {m.index: m.prim for m in todo})
        exe = tmp / "cl_driver"
        obj = self._compile(source, tmp)
        cmd = [self.board.toolchain.cc, *self.flags, obj, "-o", exe, *link_libraries(False, True)]
        r = subprocess.run(list(map(str, cmd)), capture_output=True, text=True)
        if r.returncode != 0:
            raise PackagerError(
                f"task {task.label}: linking the OpenCL timing driver failed (the board's "
                f"toolchain needs the OpenCL ICD loader, libOpenCL):\n{r.stderr}"
            )
        return exe, todo

    def _measure_cl_local(self, task: Task, todo: list[Measurement]) -> None:
        """On this machine's OpenCL device: the default kernel's output is the reference;
        each candidate's first launch is checked against it and warms up, then it is timed
        by profiling events (launches per sample so a sample lasts its share of
        min_seconds)."""
        from ..opencl_local import device

        dev, s = device(), self.settings
        ref = default_func(task)
        ref.name = "pk_ref"
        arrays = _cl_arrays(ref, len(task.node.inputs))
        n_out = len(arrays) - len(task.node.inputs)
        try:
            want = dev.run(codegen_opencl(ref), ref.name, arrays, n_out, launch_of(ref)).outputs
        except PackagerError as e:
            raise PackagerError(f"task {task.label}: the default kernel fails: {e}") from e
        for m in todo:
            source = codegen_opencl(m.prim)
            try:
                dev.program(source)
            except PackagerError:
                m.error = "compile_error"
                continue
            try:
                m.error, m.costs = _time_cl(dev, source, m.prim, arrays, want, s)
            except PackagerError:  # CL_OUT_OF_RESOURCES, an invalid work-group, ...
                m.error = "runtime_error"
            finally:
                dev.forget(source)

    def _measure_accel(self, task: Task, ms: list[Measurement]) -> None:
        """On the accelerator's simulator, here: the default schedule's program gives the
        reference bytes; each candidate that lowers, generates and runs is checked against
        them and costs its cycles over the profile's clock (one run: the cycle model is
        deterministic). Race checking is on, so a program missing a token is refused."""
        from ..accel.codegen import codegen_accel
        from ..accel.simulator import Simulator

        target = task.target
        n_args = len(task.node.inputs) + len(task.node.outputs)
        sim = Simulator(target.config(), check=True)
        arrays = accel_arrays(task)
        n_in = len(task.node.inputs)
        try:
            ref = codegen_accel(default_func(task), target, n_args)
            want = [a.copy() for a in arrays]
            sim.run(ref, want)
        except (PackagerError, ValueError, NotImplementedError) as e:
            raise PackagerError(f"task {task.label}: the default program fails: {e}") from e
        for m in ms:
            m.extra = {"measured_by": "simulator"}
            stage = "invalid"  # the template or lowering refuses the setting
            try:
                m.prim = lower_config(task, m.knobs, f"pk_cand_{m.index}")
                stage = "compile_error"  # the code generator refuses it
                program = codegen_accel(m.prim, target, n_args)
                stage = "runtime_error"  # the simulator refuses it (a race, a bad field)
                got = [a.copy() for a in arrays]
                run = sim.run(program, got)
            except Exception as e:  # any refusal is the candidate's error record, as valid()
                m.error, m.extra["message"] = stage, str(e) or type(e).__name__
                continue
            m.extra["cycles"] = run.cycles
            wrong = _differs(got[n_in:], want[n_in:])
            if wrong:
                m.error, m.extra["message"] = "wrong_answer", wrong
                continue
            m.costs = [run.cycles / (target.clock_mhz * 1e6)]

    def _runtime_objects(self) -> list[Path]:
        """The runtime's own parallel-for, with the board's thread count (candidates are
        timed with the threads the bundle will run them with: the parallel knob matters),
        and its scratch memory. Compiled once per measurer, so every candidate of a run
        is timed with the same runtime even if its source changes meanwhile."""
        if self._runtime_objs is None:
            cores = Target.cpu(self.board).cores
            defines = ["-DPK_USE_THREADS", f"-DPK_NUM_THREADS={cores}"] if cores > 1 else []
            flags = [*self.flags, *defines]
            cc = self.board.toolchain.cc
            self._runtime_objs = [
                compile_object(PARALLEL_FOR, cc, flags, [INCLUDE], b"tune-pool"),
                compile_object(SCRATCH, cc, self.flags, [INCLUDE], b"tune-scratch"),
            ]
        return self._runtime_objs

    # --- running -------------------------------------------------------------------------

    def _run(self, exe: Path, built: list[Measurement]) -> None:
        """Every candidate, in shares run side by side on the devices of the runner."""
        pos = {m.index: k for k, m in enumerate(built)}
        n = max(1, min(self.runner.width(), len(built)))
        shares = [built[k::n] for k in range(n)]
        self.runner.map(exe, shares, lambda run, share: self._run_share(run, share, pos))

    def _run_share(self, run, share: list[Measurement], pos: dict[int, int]) -> None:
        """Run a share's candidates with ``run(args, timeout)``; a crash or hang is blamed on
        the candidate that started last, and the rest run again in a fresh process."""
        by_index = {m.index: m for m in share}
        for m in share:  # a share given back by a lost device starts over
            m.error, m.costs = None, []
        todo = list(by_index)
        s = self.settings
        while todo:
            timeout = 30 + len(todo) * (4 * s.min_seconds + 1)
            args = [f"{s.min_seconds:g}", str(s.samples), *[str(pos[i]) for i in todo]]
            text, status = run(args, timeout)
            results, started = parse_output(text)
            for i, (err, costs) in results.items():
                by_index[i].error, by_index[i].costs = err, costs
            if status != "ok" and started is not None and started not in results:
                by_index[started].error = status
            todo = [i for i in todo if i not in results and by_index[i].error is None]
            if status == "ok" or started is None:
                for i in todo:  # the driver ended without measuring them: blame it on them
                    by_index[i].error = "runtime_error" if status != "timeout" else status
                return


def accel_arrays(task: Task, seed: int = 0) -> list:
    """An accelerator task's arguments (node_arrays of its node)."""
    return node_arrays(task.node, task.graph, seed)


def node_arrays(node, graph, seed: int = 0) -> list:
    """A node's arguments, to run its program alone: the node's constants (weights,
    epilogue parameters) where the graph has them, else seeded random int8 values
    (activations); outputs filled with one byte value, so bytes a program leaves unwritten
    show."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    n_in = len(node.inputs)
    for k, name in enumerate([*node.inputs, *node.outputs]):
        v = graph.values[name]
        if k < n_in and v.data is not None:
            a = np.array(v.data, dtype=v.dtype, order="C")
        elif k < n_in:
            a = rng.integers(-128, 128, v.shape).astype(v.dtype)
        else:
            a = np.full(v.shape, 0x5A, v.dtype)
        out.append(np.ascontiguousarray(a))
    return out


def _differs(got: list, want: list) -> str:
    """ "" when every output has the reference's bytes, else which differs and how much."""
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.tobytes() != w.tobytes():
            n = int((g.reshape(-1).view("u1") != w.reshape(-1).view("u1")).sum())
            return f"output {k} differs from the default schedule's in {n} of {w.nbytes} bytes"
    return ""


def _cl_arrays(ref, n_in: int) -> list:
    """Inputs from a fixed seed (floats in [-1, 1), integers zero: valid indices), then
    outputs full of NaN (what a candidate leaves unwritten fails the check)."""
    import numpy as np

    rng = np.random.default_rng(0)
    out = []
    for k, b in enumerate(ref.params):
        shape = tuple(int(d) for d in b.shape)
        a = np.zeros(shape, b.dtype)
        if k < n_in and a.dtype.kind == "f":
            a = rng.uniform(-1, 1, shape).astype(b.dtype)
        elif k >= n_in and a.dtype.kind == "f":
            a.fill(np.nan)
        out.append(a)
    return out


def _time_cl(dev, source: str, prim, arrays: list, want: list, s: Settings):
    """(error or None, seconds per launch of each sample) of one candidate."""
    import numpy as np

    n_out, launch = len(want), launch_of(prim)
    first = dev.run(source, prim.name, arrays, n_out, launch)
    for got, ref in zip(first.outputs, want, strict=True):
        if not np.allclose(got, ref, rtol=1e-3, atol=1e-3, equal_nan=True):
            return "wrong_answer", []
    number = int(s.min_seconds / s.samples / max(first.kernel_ms / 1e3, 1e-9)) + 1
    run = dev.run(source, prim.name, arrays, n_out, launch, repeat=s.samples * number)
    ms = run.samples
    return None, [sum(ms[k : k + number]) / number / 1e3 for k in range(0, len(ms), number)]


def _try(fn, *args):
    try:
        return fn(*args)
    except (PackagerError, OSError) as e:
        return e


class LocalRunner:
    def close(self) -> None:
        pass

    def summary(self) -> list[str]:
        return []

    def width(self) -> int:
        return 1

    def map(self, exe: Path, shares: list, job) -> None:
        for share in shares:
            job(lambda args, timeout: self.run(exe, args, timeout), share)

    def run(self, exe: Path, args: list[str], timeout: float) -> tuple[str, str]:
        try:
            r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            return out, "timeout"
        return r.stdout, "ok" if r.returncode == 0 else "runtime_error"


class RemoteRunner:
    """The board's pool of devices. Each share uploads the driver (named by its hash), runs
    it with stdout to a file on the device (so a killed run still tells how far it got),
    and reads the file back. A device that drops out (lost connection, refused host key)
    stays out for the rest of the run."""

    def __init__(self, board: Board, log=None):
        from ..remote.ssh import Limits, Session

        self.board, self.log = board, log
        self.sessions = [Session(board.name, c, Limits(), log=log) for c in board.connections]
        self.down: dict[str, str] = {}  # device label -> why it is out
        self.counts: dict[str, int] = {}  # device label -> candidates it ran
        self.workdirs: dict[int, str] = {}  # id(session) -> its checked workdir

    def close(self) -> None:
        for s in self.sessions:
            s.close()

    def live(self) -> list:
        return [s for s in self.sessions if s.conn.label not in self.down]

    def width(self) -> int:
        return max(1, len(self.live()))

    def map(self, exe: Path, shares: list, job) -> None:
        from ..remote import pool

        def work(session, share):
            for m in share:
                m.device = session.conn.label
            job(lambda args, timeout: self.run(exe, args, timeout, session), share)

        report = pool.spread(self.live(), shares, work, self.log)
        self.down.update(report.down)
        for o in report.outcomes:
            self.counts[o.device] = self.counts.get(o.device, 0) + len(o.job)
        for o in report.outcomes:
            if o.error:
                raise o.error
        if len(report.outcomes) < len(shares):
            why = "; ".join(f"{d}: {w}" for d, w in sorted(self.down.items()))
            raise PackagerError(f"board {self.board.name}: every device is out ({why})")

    def _workdir(self, session) -> str:
        """The device's packager workdir (created and marked, or checked, once per
        session): the tuner writes only inside it, as deploy does."""
        from ..remote import workdir

        if id(session) not in self.workdirs:
            self.workdirs[id(session)] = workdir.prepare(session)
        return self.workdirs[id(session)]

    def summary(self) -> list[str]:
        """Which device measured how many candidates, and which devices are out."""
        lines = [f"{d}: {n} measured" for d, n in sorted(self.counts.items())]
        return lines + [f"{d}: out of the pool: {why}" for d, why in sorted(self.down.items())]

    def run(self, exe: Path, args: list[str], timeout: float, session=None) -> tuple[str, str]:
        from ..remote import workdir
        from ..remote.errors import RemoteTimeout
        from ..remote.shell import command, q, rpath

        s = session or self.live()[0]
        digest = hashlib.sha256(exe.read_bytes()).hexdigest()[:16]
        tune_dir = rpath(self._workdir(s), workdir.TUNE)
        remote = rpath(tune_dir, f"driver-{digest}-{os.getpid()}-{threading.get_ident()}")
        out = remote + ".out"
        s.sh(f"mkdir -p -- {q(tune_dir)}")
        s.call("upload", lambda ss: ss.sftp().put(str(exe), remote))
        s.sh(f"chmod +x -- {q(remote)}")
        wrapper = s.conn.exec_wrapper
        script = command([remote, *args], wrapper=wrapper) + f" > {q(out)}"
        try:
            r = s.sh(script, timeout_s=timeout * 20 if wrapper else timeout, check=False)
            status = "ok" if r.returncode == 0 else "runtime_error"
        except RemoteTimeout:
            status = "timeout"
        text = s.sh(f"cat -- {q(out)}; rm -f -- {q(out)} {q(remote)}", check=False).stdout
        return text, status
