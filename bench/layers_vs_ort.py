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

Two profilers, two overheads: compare rows with each other and against the totals, not
with bench/compare_ort.py's whole-run medians.
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


def ort_node_medians(model, workdir: Path, threads: int, repeat: int):
    """(median ms per run of each ORT node, by ORT's node name; ORT's whole-run median
    without the profiler)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.enable_profiling = True
    opts.profile_file_prefix = str(workdir / "ort_profile")
    model.ir_version = min(model.ir_version, 10)
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
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
    args = ap.parse_args(argv)
    model = co.MODELS[args.model]()
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


if __name__ == "__main__":
    sys.exit(main())
