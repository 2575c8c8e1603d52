"""What the graph optimizer and the memory plan do to each model.

For onnx's light zoo and the test networks (examples/networks.py), prints: ONNX nodes,
kernel calls after the optimizer, arena / live lower bound, arena / no reuse, the time
compile_model takes, and host latency without the "fuse" pass and with every pass
(run_bundle --repeat N, the two bundles alternating for --rounds rounds, medians).

    python bench/graph_stats.py                              # everything (several minutes)
    python bench/graph_stats.py --models squeezenet resnet --rounds 5 --repeat 10
    python bench/graph_stats.py --no-latency                 # plan figures only (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import networks  # noqa: E402

from packager.boards import load_board  # noqa: E402
from packager.bundle import write_bundle_files  # noqa: E402
from packager.native import build_run_bundle  # noqa: E402
from packager.package import compile_model  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
ZOO = sorted(p.stem.removeprefix("light_") for p in LIGHT.glob("light_*.onnx"))


def models() -> dict:
    table = {name: (lambda n=name: onnx.load(LIGHT / f"light_{n}.onnx")) for name in ZOO}
    table["mobilenet_v2"] = networks.mobilenet_v2
    table["resnet"] = networks.resnet
    return table


def feeds(model: onnx.ModelProto, workdir: Path) -> list[str]:
    """--input arguments with random data for each model input."""
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    args = []
    for k, vi in enumerate(v for v in model.graph.input if v.name not in inits):
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        path = workdir / f"in{k}.npy"
        np.save(path, rng.uniform(0, 1, shape).astype(np.float32))
        args += ["--input", f"{vi.name}={path}"]
    return args


def build(compiled, where: Path, board) -> Path:
    where.mkdir()
    write_bundle_files(where, compiled, {}, None)
    return build_run_bundle(where, cflags=["-O2", "-std=c99", *board.toolchain.cflags])


def time_ms(exe: Path, bundle: Path, inputs: list[str], repeat: int, threads: int) -> float:
    env = dict(os.environ, PACKAGER_NUM_THREADS=str(threads))
    cmd = [str(exe), str(bundle), *inputs, "--repeat", str(repeat)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])["median_ms"]


def measure(name: str, make, args, board) -> dict:
    model = make()
    t = time.perf_counter()
    fused = compile_model(model, board)
    seconds = time.perf_counter() - t
    plan = fused.plan
    row = {
        "model": name,
        "onnx_nodes": len(model.graph.node),
        "kernels": len(fused.graph.nodes),
        "arena_bytes": plan.arena_bytes,
        "arena/bound": plan.arena_bytes / max(plan.live_lower_bound_bytes, 1),
        "arena/no_reuse": plan.arena_bytes / max(plan.no_reuse_bytes, 1),
        "package_s": seconds,
    }
    if args.latency:
        row.update(latency(model, fused, args, board))
    return row


def latency(model, fused, args, board) -> dict:
    unfused = compile_model(model, board, disabled_passes={"fuse"})
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        inputs = feeds(model, work)
        runs = [
            (build(c, work / tag, board), work / tag) for tag, c in (("a", unfused), ("b", fused))
        ]
        before, after = [], []
        for _ in range(args.rounds):  # alternating: both see the same machine noise
            before.append(time_ms(*runs[0], inputs, args.repeat, args.threads))
            after.append(time_ms(*runs[1], inputs, args.repeat, args.threads))
    return {"before_ms": statistics.median(before), "after_ms": statistics.median(after)}


COLUMNS = [
    ("model", "model", "{}"),
    ("onnx_nodes", "nodes", "{}"),
    ("kernels", "kernels", "{}"),
    ("arena/bound", "arena/bound", "{:.3f}"),
    ("arena/no_reuse", "arena/no-reuse", "{:.3f}"),
    ("package_s", "package s", "{:.2f}"),
    ("before_ms", "unfused ms", "{:.2f}"),
    ("after_ms", "fused ms", "{:.2f}"),
    ("speedup", "speedup", "{:.2f}"),
]


def print_table(rows: list[dict]) -> None:
    for r in rows:
        if "after_ms" in r:
            r["speedup"] = r["before_ms"] / r["after_ms"]
    cols = [c for c in COLUMNS if any(c[0] in r for r in rows)]
    cells = [[fmt.format(r[key]) if key in r else "-" for key, _, fmt in cols] for r in rows]
    heads = [h for _, h, _ in cols]
    widths = [max(len(x) for x in [h, *(c[k] for c in cells)]) for k, h in enumerate(heads)]
    print("  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True)))
    for c in cells:
        print("  ".join(x.rjust(w) for x, w in zip(c, widths, strict=True)))


def main(argv=None) -> int:
    table = models()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(table), choices=list(table))
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds per model (3)")
    p.add_argument("--repeat", type=int, default=1, help="timed runs per round (1)")
    p.add_argument("--threads", type=int, default=4, help="PACKAGER_NUM_THREADS (4)")
    p.add_argument("--no-latency", dest="latency", action="store_false", help="skip timing")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = p.parse_args(argv)
    board = load_board("host")
    rows = []
    for name in args.models:
        rows.append(measure(name, table[name], args, board))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # progress, row by row
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
