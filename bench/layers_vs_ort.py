"""Where a bundle loses to ONNX Runtime, layer by layer: each kernel of the bundle against
the ORT nodes that compute the same ONNX nodes, at one thread count.

The bundle runs `run_bundle --profile-json` (each kernel's median per run, all its calls);
ORT runs the same model and input with its profiler on, and each node's median over the
runs is charged to the ONNX node it computes: ORT names a node after its output (a fused
Conv + Clip after the Clip's), so the name is followed back through the elementwise ops
fused into it to the node the bundle's kernel lists. ORT's nodes that match none (its
layout reorders) are summed in one row. Rows are sorted by how much longer the bundle
takes; the ratio is bundle / ORT.

    python bench/layers_vs_ort.py --model tv_mobilenet_v2 --threads 1 --repeat 50
    python bench/layers_vs_ort.py --model resnet50 --top 10
    python bench/layers_vs_ort.py --model tv_mobilenet_v2 --tuned   # tuning_logs/host/ applied
    python bench/layers_vs_ort.py --model tv_resnet18 --paired 60   # run by run, one process

Two profilers, two overheads: compare rows with each other and against the totals, not
with bench/compare_ort.py's whole-run medians.

``--paired N`` (one thread): the bundle loaded in this process (bench/paired_ort.py's
SharedBundle) and the ORT session run in turn N times, the order alternating; each row's
ratio is then the median over the runs of the kernel's time against its ORT nodes' time
in the run beside it, so a slow stretch of a shared machine falls on both sides of a
pair instead of on one side's whole measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_ort as co  # noqa: E402

# ONNX ops ORT folds into the node before them, which then carries their output's name
FOLDED = {"Relu", "Clip", "Add", "Sum", "BatchNormalization", "Sigmoid", "Mul", "LeakyRelu"}
SUFFIXES = ("_kernel_time", "_nchwc")


def bundle_kernels(
    model, workdir: Path, board: str, threads: int, repeat: int, tuned: bool = False
) -> list[dict]:
    """The bundle's kernel rows (func, nodes, median_ms) from run_bundle --profile-json;
    ``tuned``: with the board's tuning records for this machine."""
    bundle, exe = co.build_bundle(model, workdir, "own" if tuned else None, board_name=board)
    doc = workdir / "profile.json"
    cmd = [str(exe), str(bundle), "--profile-json", str(doc), "--repeat", str(repeat)]
    for k, (name, a) in enumerate(co.input_feeds(model).items()):
        np.save(workdir / f"in{k}.npy", a)
        cmd += ["--input", f"{name}={workdir / f'in{k}.npy'}"]
    env = dict(os.environ, PACKAGER_NUM_THREADS=str(threads))
    subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(doc.read_text())["kernels"]


def profiled_session(model, workdir: Path, threads: int):
    """An ORT session on ``threads`` threads with its profiler on (its file under
    ``workdir``), and its options."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.enable_profiling = True
    opts.profile_file_prefix = str(workdir / "ort_profile")
    model.ir_version = min(model.ir_version, 10)
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess, opts


def ort_node_medians(model, workdir: Path, threads: int, repeat: int):
    """(median ms per run of each ORT node, by ORT's node name; ORT's whole-run median
    without the profiler)."""
    import onnxruntime as ort

    sess, opts = profiled_session(model, workdir, threads)
    feeds = co.input_feeds(model)
    sess.run(None, feeds)  # warm-up, profiled too: its events are dropped below
    for _ in range(repeat):
        sess.run(None, feeds)
    events = json.loads(Path(sess.end_profiling()).read_text())
    opts.enable_profiling = False
    plain = ort.InferenceSession(
        model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    whole = co.time_ort(plain, feeds, repeat)
    times: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            times[e["name"]].append(e["dur"] / 1e3)
    return {name: statistics.median(t[1:] or t) for name, t in times.items()}, whole


def paired_runs(model, workdir: Path, board: str, runs: int, tuned: bool = False):
    """``runs`` alternating runs on one thread, in this process: ({kernel func: its ONNX
    nodes}, [the bundle's {kernel func: ms}] a run, {ORT node name: [ms a run]})."""
    import paired_ort as po

    from packager.boards import load_board
    from packager.native import CFLAGS, build_shared_library

    bundle, _ = co.build_bundle(model, workdir, "own" if tuned else None, board_name=board)
    lib = build_shared_library(bundle, cflags=[*CFLAGS, *load_board(board).toolchain.cflags])
    os.environ["PACKAGER_NUM_THREADS"] = "1"
    ours = po.SharedBundle(bundle, lib)
    sess, _ = profiled_session(model, workdir, 1)
    feeds = co.input_feeds(model)
    try:
        kernels = ours.kernel_nodes()
        ours.set_inputs(feeds)
        ours.run()
        sess.run(None, feeds)  # warm-ups; ORT's events of it are dropped below
        mine = []
        for k in range(runs):
            for side in (0, 1) if k % 2 == 0 else (1, 0):
                if side == 0:
                    mine.append(ours.run_profiled())
                else:
                    sess.run(None, feeds)
    finally:
        ours.close()
    events = json.loads(Path(sess.end_profiling()).read_text())
    theirs: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            theirs[e["name"]].append(e["dur"] / 1e3)
    return kernels, mine, {name: t[-runs:] for name, t in theirs.items() if len(t) > runs}


def compare_paired(model, board: str, runs: int, tuned: bool = False):
    """Rows (bundle ms, ORT ms, kernel func, first node, median of the runs' ratios), the
    ORT time charged to no kernel, and the median of the whole runs' ratios (kernels
    against ORT's nodes)."""
    with tempfile.TemporaryDirectory() as d:
        kernels, mine, theirs = paired_runs(model, Path(d), board, runs, tuned)
    producer = {o: n for n in model.graph.node for o in n.output}
    nodes = {n.name: n for n in model.graph.node}
    owner = {n: func for func, names in kernels.items() for n in names}
    charged: dict[str, list[float]] = defaultdict(lambda: [0.0] * runs)
    unmatched = [0.0] * runs
    for name, ms in theirs.items():
        anchor = anchor_of(name, producer, nodes, set(owner))
        into = unmatched if anchor is None else charged[owner[anchor]]
        for k, t in enumerate(ms):
            into[k] += t
    rows = []
    for func, names in kernels.items():
        a = [run.get(func, 0.0) for run in mine]
        b = charged.get(func, [0.0] * runs)
        ratios = [x / y for x, y in zip(a, b, strict=True) if y > 0]
        r = statistics.median(ratios) if ratios else float("nan")
        rows.append((statistics.median(a), statistics.median(b), func, names[0], r))
    whole = [
        sum(run.values()) / (sum(c[k] for c in charged.values()) + unmatched[k])
        for k, run in enumerate(mine)
    ]
    return rows, statistics.median(unmatched), statistics.median(whole)


def anchor_of(onnx_name: str, producer: dict, nodes: dict, wanted: set[str]) -> str | None:
    """The ONNX node among ``wanted`` that an ORT node named ``onnx_name`` computes."""
    name = onnx_name
    for suffix in SUFFIXES:
        name = name.removesuffix(suffix)
    node = nodes.get(name) or producer.get(name)
    while node is not None and node.name not in wanted and node.op_type in FOLDED:
        node = next((producer[i] for i in node.input if i in producer), None)
    return node.name if node is not None and node.name in wanted else None


def compare(model, board: str, threads: int, repeat: int, tuned: bool = False) -> list[tuple]:
    """Rows (bundle ms, ORT ms, kernel func, first node), the ORT time charged to no
    kernel, and ORT's whole run without the profiler."""
    with tempfile.TemporaryDirectory() as d:
        kernels = bundle_kernels(model, Path(d), board, threads, repeat, tuned)
        ort_ms, whole = ort_node_medians(model, Path(d), threads, repeat)
    producer = {o: n for n in model.graph.node for o in n.output}
    nodes = {n.name: n for n in model.graph.node}
    owner = {n: k["func"] for k in kernels for n in k["nodes"]}
    charged: dict[str, float] = defaultdict(float)
    unmatched = 0.0
    for name, ms in ort_ms.items():
        anchor = anchor_of(name, producer, nodes, set(owner))
        if anchor is None:
            unmatched += ms
        else:
            charged[owner[anchor]] += ms
    rows = [
        (k["median_ms"], charged.get(k["func"], 0.0), k["func"], k["nodes"][0]) for k in kernels
    ]
    return rows, unmatched, whole


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--model", default="tv_mobilenet_v2", choices=sorted(co.MODELS))
    ap.add_argument("--board", default="host")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--tuned", action="store_true", help="apply tuning_logs/BOARD/ (own records)")
    ap.add_argument(
        "--paired",
        type=int,
        metavar="N",
        help="N runs of each side in one process, alternating (one thread; see above)",
    )
    args = ap.parse_args(argv)
    model = co.MODELS[args.model]()
    if args.paired:
        if args.threads != 1:
            ap.error("--paired runs one thread (bench/paired_ort.py says why)")
        return _print_paired(args, model)
    rows, unmatched, whole = compare(model, args.board, args.threads, args.repeat, args.tuned)
    ours, theirs = sum(r[0] for r in rows), sum(r[1] for r in rows) + unmatched
    print(
        f"{args.model}, {args.threads} thread(s), board {args.board}"
        f"{' tuned' if args.tuned else ''}: kernels {ours:.3f} ms, "
        f"ORT nodes {theirs:.3f} ms ({unmatched:.3f} in nodes of its own; "
        f"{whole:.3f} ms a run without its profiler), bundle/ORT {ours / theirs:.2f}"
    )
    print(f"{'bundle ms':>9} {'ORT ms':>8} {'ratio':>6} {'diff':>7}  kernel (first ONNX node)")
    for b, o, func, node in sorted(rows, key=lambda r: r[1] - r[0])[: args.top]:
        ratio = f"{b / o:6.2f}" if o else "     -"
        print(f"{b:9.4f} {o:8.4f} {ratio} {b - o:+7.4f}  {func} ({node})")
    return 0


def _print_paired(args, model) -> int:
    rows, unmatched, whole = compare_paired(model, args.board, args.paired, args.tuned)
    ours, theirs = sum(r[0] for r in rows), sum(r[1] for r in rows) + unmatched
    print(
        f"{args.model}, 1 thread, board {args.board}{' tuned' if args.tuned else ''}, "
        f"{args.paired} paired runs: kernels {ours:.3f} ms, ORT nodes {theirs:.3f} ms "
        f"({unmatched:.3f} in nodes of its own), bundle/ORT by runs {whole:.2f}"
    )
    print(f"{'bundle ms':>9} {'ORT ms':>8} {'runs':>6} {'diff':>7}  kernel (first ONNX node)")
    for b, o, func, node, r in sorted(rows, key=lambda r: r[1] - r[0])[: args.top]:
        print(f"{b:9.4f} {o:8.4f} {r:6.2f} {b - o:+7.4f}  {func} ({node})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
