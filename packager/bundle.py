"""Writing a bundle: graph.json, params.bin, kernels/, runtime/, CMakeLists.txt,
manifest.json and selftest/ (format: docs/bundle-format.md).

Everything is written into a temporary directory beside the destination and renamed
into place at the end, so a failure never leaves a half-written bundle behind. The
output is a function of the inputs only: no time stamps, no absolute paths.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from . import __version__, resources
from .codegen.opencl import render_program
from .errors import PackagerError
from .graph.ir import Graph, Node, Value, np_dtype
from .graph.memory import MemoryPlan
from .graph.plan_report import plan_stats
from .lowering import Kernel
from .names import safe_name
from .params_file import file_size, write_params
from .safe_paths import check_bundle_output, remove_quietly, signals_held
from .toolchain import cmake_quote
from .tune.features import flop_count

C_RUNTIME = resources.c_runtime()
RUNTIME_PARTS = ("include", "src", "tools", "accel", "CMakeLists.txt")


def graph_json(
    graph: Graph,
    funcs: list[str],
    plan: MemoryPlan,
    devices: dict[str, str] | None = None,
    flops: dict[str, float] | None = None,
) -> dict:
    """The graph.json document: nodes in execution order, entries, storage plan.
    ``devices``: function -> the device it runs on, where that is not the CPU.
    ``flops``: function -> floating-point operations of one call (kernel_flops)."""
    doc = _graph_doc(graph, funcs, plan, devices or {}, flops or {}, "")
    return {"format": "packager-graph", "version": 1, **doc}


def bundle_params(graph: Graph, prefix: str = "") -> list[tuple[str, Value]]:
    """Every tensor of params.bin, by its name there: the graph's constants, then those of
    each control-flow node's subgraphs, named ``NODE.K/NAME`` (K: the subgraph's place)."""
    out = [(prefix + v.name, v) for v in graph.consts()]
    for node in graph.nodes:
        for k, sub in enumerate(node.attrs.get("subgraphs", ())):
            out += bundle_params(sub, _sub_prefix(prefix, node, k))
    return out


def _sub_prefix(prefix: str, node: Node, k: int) -> str:
    return f"{prefix}{node.name}.{k}/"


def _graph_doc(graph, funcs, plan, devices, flops, prefix: str) -> dict:
    nodes, row_ptr, entry_of = [], [0], {}
    shapes, dtypes = [], []

    def add(node: dict, outs: list[str]):
        for k, name in enumerate(outs):
            entry_of[name] = (len(nodes), k)
            v = graph.values[name]
            shapes.append(list(v.shape))
            dtypes.append(v.dtype)
        nodes.append(node)
        row_ptr.append(row_ptr[-1] + len(outs))

    for name in graph.inputs:
        add({"op": "input", "name": name, "inputs": []}, [name])
    for v in graph.consts():
        add({"op": "param", "name": prefix + v.name, "inputs": []}, [v.name])
    arg_nodes = list(range(len(nodes)))
    for k, (node, func) in enumerate(zip(graph.nodes, funcs, strict=True)):
        ins = [list(entry_of[i]) for i in node.inputs]
        if "subgraphs" in node.attrs:
            add(_control_doc(node, ins, devices, flops, prefix), node.outputs)
            continue
        doc = {
            "op": "kernel",
            "name": node.name,
            "func": func,
            "inputs": ins,
            "num_outputs": len(node.outputs),
            **node_cost(graph, node, flops.get(func)),
        }
        if devices.get(func, "cpu") != "cpu":
            doc["device"] = devices[func]
        if plan.inplace.get(k):  # outputs written over a dying input: [out_pos, in_pos]
            doc["inplace"] = [list(p) for p in plan.inplace[k]]
        add(doc, node.outputs)
    entries = sorted(entry_of, key=lambda n: row_ptr[entry_of[n][0]] + entry_of[n][1])
    storage = [
        {**st, "param": prefix + st["param"]} if st["kind"] == "param" else st
        for st in plan.storage
    ]
    return {
        "nodes": nodes,
        "arg_nodes": arg_nodes,
        "node_row_ptr": row_ptr,
        "heads": [list(entry_of[o]) for o in graph.outputs],
        "outputs": list(graph.outputs),
        "attrs": {
            "shape": shapes,
            "dtype": dtypes,
            "storage_id": [plan.storage_of[n] for n in entries],
        },
        "storage": storage,
        "arena_bytes": plan.arena_bytes,
    }


def _control_doc(node: Node, ins, devices, flops, prefix: str) -> dict:
    """An ``if`` or ``loop`` node: its subgraphs as graph documents of their own."""
    subs = [
        _graph_doc(g, f, p, devices, flops, _sub_prefix(prefix, node, k))
        for k, (g, f, p) in enumerate(
            zip(node.attrs["subgraphs"], node.attrs["funcs"], node.attrs["plans"], strict=True)
        )
    ]
    doc = {"op": node.op, "name": node.name, "inputs": ins, "num_outputs": len(node.outputs)}
    if node.op == "if":
        doc["branches"] = subs
    else:
        doc.update(
            num_carried=node.attrs["num_carried"], max_trips=node.attrs["max_trips"], body=subs[0]
        )
    return doc


def node_cost(graph: Graph, node: Node, flops: float | None) -> dict:
    """What a profile reads of a kernel node: the ops fused into it in order, the bytes its
    inputs and outputs hold (what one call moves at least), and its flops when known:
    the loop IR's floating-point operations plus two per integer multiply-accumulate of
    its integer convs and dense layers (their ``macs``, which the loop IR's tensorized
    intrinsics hide)."""
    inner = node.attrs["nodes"] if node.op == "fused" else [{"op": node.op, "attrs": node.attrs}]
    ops = [n["op"] for n in inner]
    moved = sum(graph.values[n].nbytes for n in [*node.inputs, *node.outputs])
    cost = {"ops": ops, "bytes": float(moved)}
    int_ops = sum(2.0 * n["attrs"].get("macs", 0) for n in inner if n["op"] in INTEGER_MAC_OPS)
    if flops is not None or int_ops:
        cost["flops"] = (flops or 0.0) + int_ops
    return cost


# Ops whose node carries its multiply-accumulates in attrs["macs"] (quantize, place_accel).
INTEGER_MAC_OPS = ("qconv2d", "qdense", "accel_conv2d", "accel_dense")


def kernel_flops(kernels: list[Kernel]) -> dict[str, float]:
    """Floating-point operations of one call of each kernel, counted on its loop IR as the
    tuner counts them (a max or a copy is no flop)."""
    return {k.func: flop_count(k.prim) for k in kernels if k.prim is not None}


def registry_source(kernels: list[Kernel], program: str = "") -> str:
    """kernels/registry.c: the kernel table sorted by name (the runtime bisects), each
    function with its argument signature, ended by the {0, 0, 0} sentinel. With OpenCL
    kernels, also their table (signature and work sizes) and ``program``, the OpenCL C
    source of kernels/program.cl, as a string."""
    by_name = sorted((k for k in kernels if k.device == "cpu"), key=lambda k: k.func)
    lines = ['#include "pk_kernel.h"', ""]
    lines += [f"int32_t {k.func}(void *const *args);" for k in by_name]
    lines += ["", "/* Sorted by name: the runtime looks functions up by bisection. */"]
    lines += ["const pk_kernel_entry pk_kernel_table[] = {"]
    lines += [f'    {{"{k.func}", {k.func}, "{" ".join(k.signature)}"}},' for k in by_name]
    lines += ["    {0, 0, 0},", "};", f"const int32_t pk_kernel_count = {len(by_name)};", ""]
    gpu = sorted((k for k in kernels if k.device == "opencl"), key=lambda k: k.func)
    if not gpu:
        return "\n".join(lines)
    lines += ["/* OpenCL kernels of kernels/program.cl: signature, global and local work sizes. */"]
    lines += ["const pk_cl_kernel_entry pk_cl_kernel_table[] = {"]
    for k in gpu:
        g, loc = (", ".join(map(str, x)) for x in (k.launch.global_size, k.launch.local_size))
        lines.append(f'    {{"{k.func}", "{" ".join(k.signature)}", {{{g}}}, {{{loc}}}}},')
    lines += ["    {0, 0, {0, 0, 0}, {0, 0, 0}},", "};"]
    lines += [f"const int32_t pk_cl_kernel_count = {len(gpu)};", ""]
    lines += ["const char pk_cl_program_source[] ="]
    lines += [f"    {c_string(line + chr(10))}" for line in program.splitlines()]
    lines += ["    ;", ""]
    return "\n".join(lines)


def c_string(text: str) -> str:
    """``text`` as a C string literal (ASCII; quotes, backslashes and control characters
    escaped)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.append(f"\\{ord(ch):03o}")
    return '"' + "".join(out) + '"'


def opencl_program(kernels: list[Kernel]) -> str:
    """kernels/program.cl: every OpenCL kernel, in one translation unit ("" if none)."""
    prims = [k.prim for k in kernels if k.device == "opencl"]
    return render_program(prims) if prims else ""


def accel_program(compiled) -> bytes:
    """kernels/program.accel: every accelerator kernel's program, by function name, with
    the accelerator's config (b"" if none)."""
    from .accel.program import write_programs

    accel = sorted((k for k in compiled.kernels if k.device == "accel"), key=lambda k: k.func)
    if not accel:
        return b""
    return write_programs([k.program for k in accel], compiled.accel.config())


def runtime_settings(compiled) -> str:
    """bundle.cmake: the runtime's build settings from the board profile."""
    pins = ",".join(str(c) for c in compiled.pin_cores)
    opencl = any(k.device == "opencl" for k in compiled.kernels)
    accel = any(k.device == "accel" for k in compiled.kernels)
    return (
        "# Runtime settings from the board profile, read by CMakeLists.txt (and by the\n"
        "# packager's own builds). PK_NUM_THREADS 1 builds without pthreads; PK_OPENCL ON\n"
        "# builds the OpenCL backend (the bundle has OpenCL kernels); PK_ACCEL sim or uio\n"
        "# builds the accelerator backend with that driver (the bundle has\n"
        "# kernels/program.accel); PK_STATIC ON links run_bundle with -static (the\n"
        "# profile's toolchain.link). PK_BOARD_CFLAGS is the default of PK_CFLAGS (the\n"
        "# profile's toolchain.cflags): the kernels are written for the board's vector\n"
        "# unit and run many times slower without them.\n"
        f"set(PK_NUM_THREADS {compiled.threads})\n"
        f"set(PK_BOARD_CFLAGS {cmake_quote(' '.join(compiled.cflags))})\n"
        f'set(PK_PIN_CORES "{pins}")\n'
        + ("set(PK_OPENCL ON)\n" if opencl else "")
        + (f"set(PK_ACCEL {compiled.accel.driver})\n" if accel else "")
        + ("set(PK_STATIC ON)\n" if compiled.static else "")
    )


# What the runtime holds besides params, arena and I/O, measured as run_bundle's peak
# resident size on a one-node model: its code, the C library, the thread pool's stacks.
RUNTIME_FIXED_BYTES = 2 << 20


def memory_estimate(compiled) -> dict:
    """manifest.json's ``memory``: the bytes the runtime needs to run the bundle once.

    params.bin is read whole; the arena holds every intermediate tensor; the caller (or
    run_bundle) keeps its inputs and outputs in buffers of its own; graph.json is read
    whole and parsed into tables about as large again (counted twice, with
    RUNTIME_FIXED_BYTES, in ``peak_bytes``). Kernel temporaries (pk_scratch: padded
    inputs, Winograd tiles) are not counted."""
    graph, plan = compiled.graph, compiled.plan
    devices = {k.func: k.device for k in compiled.kernels if k.device != "cpu"}
    text = json.dumps(graph_json(graph, compiled.funcs, plan, devices), indent=1)
    consts = [(n, v.shape, np_dtype(v.dtype).itemsize) for n, v in bundle_params(graph)]
    io = sum(graph.values[n].nbytes for n in [*graph.inputs, *graph.outputs])
    memory = {"params_bytes": file_size(consts), "arena_bytes": plan.arena_bytes, "io_bytes": io}
    memory["subgraph_bytes"] = subgraph_bytes(graph)
    runtime = 2 * len(text) + RUNTIME_FIXED_BYTES
    memory["peak_bytes"] = sum(memory.values()) + runtime
    return memory


def subgraph_bytes(graph: Graph) -> int:
    """The memory the runtime allocates at load for control-flow nodes' subgraphs (each
    its own arena, inputs and outputs, 64-aligned; nested ones too)."""
    total = 0
    for node in graph.nodes:
        for sub, plan in zip(
            node.attrs.get("subgraphs", ()), node.attrs.get("plans", ()), strict=True
        ):
            io = [sub.values[n].nbytes for n in [*sub.inputs, *sub.outputs]]
            total += -(-plan.arena_bytes // 64) * 64 + sum(-(-b // 64) * 64 for b in io)
            total += subgraph_bytes(sub)
    return total


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _write_json(path: Path, doc) -> None:
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")


def _io_list(graph: Graph, names: list[str]) -> list[dict]:
    return [
        {
            "name": n,
            "shape": list(graph.values[n].shape),
            "dtype": graph.values[n].dtype,
            "file": safe_name(n) + ".npy",
        }
        for n in names
    ]


def write_bundle_files(
    root: Path,
    compiled,
    manifest: dict,
    selftest: tuple[list[np.ndarray], list[np.ndarray]] | None,
    extra_files: dict[str, str] | None = None,
) -> None:
    """Write every file of ``compiled`` (a package.Compiled) under ``root``, an empty
    directory, plus ``extra_files`` (relative path -> text, e.g. the board's
    toolchain.cmake), all listed in the manifest."""
    graph, kernels = compiled.graph, compiled.kernels
    (root / "kernels").mkdir()
    for k in kernels:
        if k.device == "cpu":
            (root / "kernels" / f"{k.func}.c").write_text(k.source)
    program = opencl_program(kernels)
    if program:
        (root / "kernels" / "program.cl").write_text(program)
    (root / "kernels" / "registry.c").write_text(registry_source(kernels, program))
    programs = accel_program(compiled)
    if programs:
        (root / "kernels" / "program.accel").write_bytes(programs)
    devices = {k.func: k.device for k in kernels if k.device != "cpu"}
    gj = graph_json(graph, compiled.funcs, compiled.plan, devices, kernel_flops(kernels))
    _write_json(root / "graph.json", gj)
    params = [
        (name, np.asarray(v.data, dtype=np_dtype(v.dtype), order="C"))
        for name, v in bundle_params(graph)
    ]
    (root / "params.bin").write_bytes(write_params(params))
    runtime = root / "runtime"
    runtime.mkdir()
    for part in RUNTIME_PARTS:
        src = C_RUNTIME / part
        if src.is_dir():
            shutil.copytree(src, runtime / part)
        else:
            shutil.copyfile(src, runtime / part)
    shutil.copyfile(C_RUNTIME / "bundle" / "CMakeLists.txt", root / "CMakeLists.txt")
    (root / "bundle.cmake").write_text(runtime_settings(compiled))
    for rel, text in sorted((extra_files or {}).items()):
        (root / rel).write_text(text)
    if selftest is not None:
        (root / "selftest").mkdir()
        for kind, arrays in zip(("input", "output"), selftest, strict=True):
            for i, a in enumerate(arrays):
                np.save(root / "selftest" / f"{kind}_{i}.npy", a, allow_pickle=False)
    manifest = dict(manifest)
    manifest["inputs"] = _io_list(graph, graph.inputs)
    manifest["outputs"] = _io_list(graph, graph.outputs)
    manifest["stats"] = plan_stats(graph, compiled.plan, len(kernels))
    files = sorted(p for p in root.rglob("*") if p.is_file())
    manifest["files"] = {str(p.relative_to(root)): sha256_file(p) for p in files}
    _write_json(root / "manifest.json", manifest)


def write_bundle(
    out_dir: str | os.PathLike, write: Callable[[Path], None], protect: tuple[str, ...] = ()
) -> Path:
    """Run ``write(tmp)`` into a fresh directory beside ``out_dir``, then move it into place.

    ``out_dir`` must pass safe_paths.check_bundle_output (missing, empty, or a bundle;
    ``protect``: the model, which it must not hold). On any error or interrupt the
    temporaries are removed and ``out_dir`` is left as it was.
    """
    out = check_bundle_output(out_dir, protect)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PackagerError(f"-o {out_dir}: cannot create its directory: {e}") from e
    tmp = None
    try:
        # An interrupt held here is delivered as the hold ends: inside the try, with
        # ``tmp`` already set, so the cleanup below sees the directory.
        with signals_held():
            tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
        write(tmp)
        check_bundle_output(out_dir, protect)  # again: OUT may have changed meanwhile
        with signals_held():  # no interrupt between the two renames: OUT never missing
            if out.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
                os.replace(out, old / "b")
                os.replace(tmp, out)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, out)
    except BaseException:
        if tmp is not None:
            remove_quietly(tmp)
        raise
    return out


__all__ = ["write_bundle", "write_bundle_files", "graph_json", "registry_source", "__version__"]
