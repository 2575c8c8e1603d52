"""Packaging a model for a board: import, optimize, plan memory, lower, write the bundle."""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx

from . import __version__
from .boards import Board
from .bundle import memory_estimate, write_bundle, write_bundle_files
from .errors import PackagerError
from .frontend.importer import freeze_inputs, import_onnx, load_model
from .graph import conv_algorithms
from .graph.ir import Graph
from .graph.memory import MemoryPlan, plan_memory
from .graph.passes.pixel_tiles import tile_pixels
from .graph.passes.place_accel import placement, placement_line
from .graph.pipeline import PassContext, optimize
from .lowering import Kernel, lower_graph
from .ops.winograd_schedule import tile_multiple
from .reference import random_input, run_reference
from .safe_paths import check_bundle_output
from .target import AccelTarget, Target, targets_of
from .toolchain import FILE_NAME, toolchain_file, wants_toolchain_file

REFERENCE_NAMES = "onnxruntime, else onnx's reference evaluator"


@dataclass
class Compiled:
    """Everything a bundle is written from."""

    graph: Graph
    plan: MemoryPlan
    kernels: list[Kernel]
    funcs: list[str]  # per node, the kernel it calls
    threads: int = 1  # the runtime's default thread count (the board's cores)
    pin_cores: tuple[int, ...] = ()  # cores the threads run on (big cores), if any
    static: bool = False  # run_bundle linked with -static (the profile's toolchain.link)
    # what the Winograd filters add to the params over the filters they replace, and the
    # most they were allowed to add (None: no limit; conv_algorithms.filter_budget)
    winograd_extra_bytes: int = 0
    winograd_budget_bytes: int | None = None
    # the board's accelerator (target.AccelTarget), None without one; and what placement
    # put there (graph/passes/place_accel.placement)
    accel: Target | None = None
    placement: dict | None = None
    # the board profile's compiler flags: the bundle's CMake build takes them by default
    cflags: tuple[str, ...] = ()


def prepare_graph(
    model: onnx.ModelProto,
    board: Board | None = None,
    input_shapes: dict[str, list[int]] | None = None,
    path: str = "model",
    disabled_passes: set[str] | None = None,
    log=None,
) -> tuple[Graph, MemoryPlan]:
    """The optimized graph and its memory plan: what lowering (and the tuner's task
    extraction, which must see the same kernels) starts from."""
    graph = import_onnx(path, input_shapes, model, memory_bytes(board or _host()))
    if log:
        log(f"imported {len(model.graph.node)} ONNX nodes -> {len(graph.nodes)} ops")
    graph = optimize(graph, PassContext(board, set(disabled_passes or ())))
    return graph, plan_memory(graph)


def compile_model(
    model: onnx.ModelProto,
    board: Board | None = None,
    input_shapes: dict[str, list[int]] | None = None,
    path: str = "model",
    log=None,
    disabled_passes: set[str] | None = None,
    tuning=None,
    conv_algorithm: str | None = None,
    progress=None,
    accel_on_cpu: bool = False,
) -> Compiled:
    """``tuning``: a tune.apply.Tuning whose best records replace template defaults and
    choose each conv's algorithm; ``conv_algorithm`` forces one wherever it applies
    (else, without records, conv_algorithms.default_algorithm decides). ``progress(what,
    done, total)`` hears of each node lowered. ``accel_on_cpu``: the accelerator's nodes
    (placed as for the board) run on the CPU, the same bytes (for checking them)."""
    say = log or (lambda msg: None)
    graph, plan = prepare_graph(model, board, input_shapes, path, disabled_passes, say)
    gpu = Target.opencl(board) if board is not None and board.opencl is not None else None
    weights = sum(v.nbytes for v in graph.consts())
    cpu_board = board or _host()  # loaded (and detected) once for the target and its RAM
    target = Target.cpu(cpu_board)
    budget, gain = None, conv_algorithms.model_gain
    if conv_algorithm is not None:  # what the caller asked for, whatever its size
        pick = conv_algorithms.forced(conv_algorithm)
    elif gpu is not None:  # the GPU schedules are direct convolutions
        pick = conv_algorithms.forced(conv_algorithms.DIRECT)
    else:
        budget = conv_algorithms.filter_budget(memory_bytes(cpu_board), weights)
        pick = conv_algorithms.by_default(target)
        if tuning is not None:
            pick, gain = tuning.pick_algorithm(plan, target)
    chosen = conv_algorithms.choose(graph, pick, budget, gain, tile_multiple(target))
    if chosen.nodes != graph.nodes:  # new filters: the params' storage is re-planned
        graph, plan = chosen, plan_memory(chosen)
    has_accel = board is not None and board.accel is not None
    if gpu is None and not has_accel:  # attributes only: the plan stands
        graph = tile_pixels(graph, target)
    extra = sum(v.nbytes for v in graph.consts()) - weights
    accel = AccelTarget.of(board) if has_accel else None
    placed = placement(graph) if has_accel else None
    kernels, funcs = lower_graph(
        graph,
        plan,
        target=target,
        progress=(lambda done, total: progress("lowering kernels", done, total))
        if progress
        else None,
        knobs_for=tuning.knobs_for if tuning else None,
        gpu=gpu,
        accel=None if accel_on_cpu else accel,
    )
    if gpu is not None:
        say(placement_summary(kernels, funcs))
    if placed is not None:
        say(placement_line(placed))
    static = board is not None and board.toolchain.static
    cflags = tuple(board.toolchain.cflags) if board is not None else ()
    return Compiled(
        graph, plan, kernels, funcs, target.cores, target.big_cores, static, extra, budget,
        accel, placed, cflags,
    )  # fmt: skip


def placement_summary(kernels: list[Kernel], funcs: list[str]) -> str:
    """How many kernel calls run on the GPU, and the ops of those that do not."""
    device = {k.func: k.device for k in kernels}
    on_gpu = sum(device.get(f) == "opencl" for f in funcs)  # "": a control-flow node
    cpu_ops = sorted({k.op for k in kernels if k.device == "cpu"})
    tail = f"; on the CPU: {', '.join(cpu_ops)}" if cpu_ops else ""
    return f"{on_gpu} of {len(funcs)} kernel calls run on the GPU (OpenCL){tail}"


def accel_manifest(compiled: Compiled) -> dict:
    """manifest.json's ``accel``: the accelerator target, the driver the runtime uses,
    what placement put where, and the kernels and node calls on each device."""
    devices = {k.func: k.device for k in compiled.kernels}
    calls: dict[str, int] = {}
    for f in compiled.funcs:
        if f:
            calls[devices[f]] = calls.get(devices[f], 0) + 1
    return {
        "target": compiled.accel.fingerprint(),
        "driver": compiled.accel.driver,
        "placement": compiled.placement,
        "node_calls": dict(sorted(calls.items())),
        "programs": sum(k.device == "accel" for k in compiled.kernels),
    }


def memory_bytes(board: Board) -> int | None:
    """The board's memory: its profile's ``ram_mb``, else this machine's when the board
    is the local machine, else unknown."""
    if board.ram_mb is not None:
        return board.ram_mb << 20
    if not board.is_local:
        return None
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):  # not every system names these
        return None


def _host() -> Board:
    from .boards import load_board

    return load_board("host")


def make_selftest(model, graph: Graph, seed: int = 0, path: str = "model", say=None):
    """Random inputs and the reference's outputs for them."""
    rng = np.random.default_rng(seed)
    inputs = [random_input(graph.values[n].shape, graph.values[n].dtype, rng) for n in graph.inputs]
    try:
        feeds = dict(zip(graph.inputs, inputs, strict=True))
        outputs = run_reference(_unique_node_names(model), feeds, say)
    except PackagerError:
        raise
    except Exception as e:  # onnxruntime and onnx's evaluator raise many types
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise PackagerError(
            f"{path}: the reference ({REFERENCE_NAMES}) cannot run the model for the "
            f"selftest: {type(e).__name__}: {first}"
        ) from e
    # A reference output a transpose left in Fortran order would be written as such.
    return inputs, [np.ascontiguousarray(o) for o in outputs]


# Ops computing in integers with the quantize pass's fixed-point requantization: their
# results are the QDQ model's within one quantization step, not to the float tolerance.
INTEGER_OPS = ("qconv2d", "qdense", "qadd", "accel_conv2d", "accel_dense")


def integer_ops(graph: Graph) -> bool:
    """Whether any node (a fused one's inner nodes too) computes in integers."""
    for n in graph.nodes:
        inner = n.attrs.get("nodes") if n.op == "fused" else None
        if any(op in INTEGER_OPS for op in ([i["op"] for i in inner] if inner else [n.op])):
            return True
    return False


def integer_selftest(model, compiled, board, input_shapes, path, inputs, say) -> list:
    """The selftest's expected outputs for a model with integer kernels: what the
    packager's own kernels give for ``inputs`` on this machine (a bundle of the model for
    the host, built and run in a temporary directory; ``compiled`` itself when ``board``
    is this machine's CPU alone). Integer kernels give the same bytes on every target
    (fixed-point requantization, no float rounding), so the board must reproduce these
    to the float tolerance; a reference that computes the QDQ model in floats (ONNX
    Runtime) differs by up to a quantization step, which the selftest's tolerance is not
    meant to absorb. How close the integer kernels are to the QDQ model is what the test
    suite checks (docs/quantization.md)."""
    import tempfile

    from .native import CFLAGS, build_run_bundle, run_outputs

    say("selftest: expected outputs from this machine's build of the integer kernels")
    if not (board.is_local and board.opencl is None and board.accel is None):
        board = _host()
        compiled = compile_model(model, board, input_shapes, path)
    with tempfile.TemporaryDirectory(prefix="packager-selftest-") as d:
        bundle = Path(d) / "bundle"
        bundle.mkdir()
        write_bundle_files(bundle, compiled, {}, None)
        exe = build_run_bundle(bundle, cflags=[*CFLAGS, *board.toolchain.cflags])
        feeds = dict(zip(compiled.graph.inputs, inputs, strict=True))
        outs = run_outputs(exe, bundle, feeds, compiled.graph.outputs)
        return [np.ascontiguousarray(o) for o in outs]


def _unique_node_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``, or a copy whose repeated node names get a suffix: ONNX allows them,
    ONNX Runtime refuses them, and the fallback evaluator is slower and less exact."""
    names = [n.name for n in model.graph.node if n.name]
    if len(set(names)) == len(names):
        return model
    copy, seen = onnx.ModelProto(), set()
    copy.CopyFrom(model)
    for k, node in enumerate(copy.graph.node):
        if node.name in seen:
            node.name = f"{node.name}__{k}"
        seen.add(node.name)
    return copy


def package(*args, **kwargs) -> Path:
    """Package a model for a board into a bundle directory; returns the bundle path (the
    arguments and what happens: package_compiled, which also returns the Compiled)."""
    return package_compiled(*args, **kwargs)[0]


def package_compiled(
    model_path: str,
    board: Board,
    out_dir: str,
    input_shapes: dict[str, list[int]] | None = None,
    selftest: bool = True,
    log=None,
    tuning_logs=(),
    conv_algorithm: str | None = None,
    progress=None,
    verbose: bool = False,
    use_foreign_records: bool = False,
    input_values: dict[str, str] | None = None,
    cpu_only: bool = False,
    records: bool = True,
) -> tuple[Path, Compiled]:
    """Package ``model_path`` for ``board`` into ``out_dir``: the bundle path and the
    Compiled it was written from.
    Tuning records apply from ``tuning_logs``, the shipped ``tuning_logs/<board>/`` and the
    user's (tune.apply.log_files); records measured on another target only with
    ``use_foreign_records``. ``log`` hears a few lines (``verbose``: also each kernel
    left with its default schedule); ``progress(what, done, total)`` hears of each step.
    A bundle whose peak memory estimate exceeds the board's memory is refused.
    ``cpu_only``: the board's CPU runs every node (its GPU and accelerator are left out),
    the baseline that ``packager bench`` sets beside the accelerated bundle. ``records``
    False: no tuning record applies (the templates' defaults, which `packager tune` checks
    the tuned kernels against)."""
    from .tune.apply import Tuning, log_files

    say = log or (lambda msg: None)
    if cpu_only:
        board = cpu_only_board(board, say)
    check_bundle_output(out_dir, (model_path,))  # refuse at once, before minutes of work
    t0 = time.perf_counter()
    model, frozen = freeze_inputs(load_model(model_path), input_values or {}, model_path)
    files = log_files(board.name, tuning_logs) if records else []
    tuning = Tuning(board, files, use_foreign_records)
    compiled = compile_model(
        model,
        board,
        input_shapes,
        model_path,
        say,
        tuning=tuning,
        conv_algorithm=conv_algorithm,
        progress=progress,
    )
    for line in tuning.report(f"packager tune {model_path} --board {board.name}", verbose):
        say(line)  # never silent about kernels left with default schedules
    memory = memory_estimate(compiled)
    check_memory(memory, board, model_path)  # before the selftest's minutes, and any file
    tests = make_selftest(model, compiled.graph, path=model_path, say=say) if selftest else None
    if tests is not None and integer_ops(compiled.graph):
        tests = (
            tests[0],
            integer_selftest(model, compiled, board, input_shapes, model_path, tests[0], say),
        )
    manifest = {
        "format": "packager-bundle",
        "version": 1,
        "packager_version": __version__,
        "model": {"file": Path(model_path).name, "sha256": _sha256(model_path)},
        "board": {"name": board.name, "arch": board.arch, "cpu": board.cpu},
        "targets": [t.fingerprint() for t in targets_of(board)],
        **({"cpu_only": True} if cpu_only else {}),
        **({"accel": accel_manifest(compiled)} if compiled.accel is not None else {}),
        "tuning": tuning.summary(),
        "input_shapes": {k: list(v) for k, v in sorted((input_shapes or {}).items())},
        # inputs frozen to constants at package time (--input-value): no longer inputs
        "input_values": {k: _frozen_doc(v) for k, v in sorted(frozen.items())},
        "memory": memory,
        "winograd_filters": {
            "extra_bytes": compiled.winograd_extra_bytes,
            "budget_bytes": compiled.winograd_budget_bytes,
        },
    }
    extra = {FILE_NAME: toolchain_file(board)} if wants_toolchain_file(board) else {}
    out = write_bundle(
        out_dir,
        lambda tmp: write_bundle_files(tmp, compiled, manifest, tests, extra),
        (model_path,),
    )
    seconds = time.perf_counter() - t0
    say(build_summary(out_dir, seconds, compiled.kernels, memory, compiled.winograd_extra_bytes))
    return out, compiled


def cpu_only_board(board: Board, say) -> Board:
    """The board as its CPU alone: no OpenCL GPU, no accelerator (same name, toolchain and
    connection, so the bundle builds and runs where the board's other bundles do)."""
    left = [what for what, part in (("GPU", board.opencl), ("accelerator", board.accel)) if part]
    if left:
        say(f"--cpu-only: the board's {' and '.join(left)} left out, every node on its CPU")
    else:
        say(f"--cpu-only: board {board.name} has no GPU or accelerator, nothing changes")
    return replace(board, opencl=None, accel=None)


def _frozen_doc(arr: np.ndarray) -> dict:
    """A frozen input in the manifest: dtype, shape, and the value itself when small."""
    doc = {"dtype": np_to_name(arr), "shape": list(arr.shape)}
    if arr.size <= 64:
        doc["value"] = arr.tolist()
    return doc


def np_to_name(arr: np.ndarray) -> str:
    return "bool" if arr.dtype == np.bool_ else str(arr.dtype)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def build_summary(
    out: str, seconds: float, kernels: list[Kernel], memory: dict, winograd_extra: int = 0
) -> str:
    """The build's last line: time, kernels by device, and the memory it needs (the part
    of the params that Winograd's transformed filters add, if any)."""
    devices = [k.device for k in kernels]
    params = f"weights {_mb(memory['params_bytes'])}"
    if winograd_extra:
        params = f"params {_mb(memory['params_bytes'])} (Winograd filters +{_mb(winograd_extra)})"
    return (
        f"built {out} in {seconds:.1f}s: {len(kernels)} kernels "
        f"({devices.count('cpu')} cpu, {devices.count('opencl')} opencl"
        + (f", {devices.count('accel')} accel" if "accel" in devices else "")
        + "), "
        f"{params}, arena {_mb(memory['arena_bytes'])}, "
        f"peak memory ~{_mb(memory['peak_bytes'])}"
    )


def check_memory(memory: dict, board: Board, model_path: str) -> None:
    """Refuse a bundle whose peak memory estimate exceeds the board's memory."""
    ram = memory_bytes(board)
    if ram is None or memory["peak_bytes"] <= ram:
        return
    whose = f"ram_mb: {board.ram_mb}" if board.ram_mb is not None else "this machine's memory"
    m = memory
    runtime = m["peak_bytes"] - m["params_bytes"] - m["arena_bytes"] - m["io_bytes"]
    raise PackagerError(
        f"{model_path}: does not fit board {board.name!r}: it needs about "
        f"{_mib(m['peak_bytes'])} MiB at peak (params {_mib(m['params_bytes'])} + arena "
        f"{_mib(m['arena_bytes'])} + inputs/outputs {_mib(m['io_bytes'])} + runtime "
        f"{_mib(runtime)} MiB), more than its {ram >> 20} MiB ({whose})"
    )


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f}"


def _sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
