"""Tuner convergence and what tuning buys, on the host board.

Part 1 (convergence): three 3x3 conv workloads of ResNet-18 (blocked layout, as the
packager lowers them), spaces of 50-80 thousand configs. Each config is measured on the
board once, the first time any tuner asks for it, and kept in a table (saved under
--table-dir, so a second run replays without measuring); the tuners (xgb, random, ga)
replay against the table for several seeds, so their curves differ only by the order
in which they ask, not by machine noise. Prints for each workload random search's best
after 400 trials (mean over seeds) and the trials each xgb and ga run needs to reach it
(within 1%), and the mean best-so-far at a few trial counts; writes best-so-far GFLOPS
against trials as a PNG.

Measured on the host board (EPYC, 2 threads; `python bench/tuner_convergence.py --seeds 6`),
trials an xgb run needs to reach random's mean best after 400 (within 1%), per seed:
conv64x56 [87, 78, 30, 126, 85, 210] (ga [31, 336, 157, 87, 109, 67]), conv128x28
[34, 91, 16, 38, 49, 6] (ga [63, 37, 34, 45, 85, 6]); 11 of 12 runs within 150, the first
three seeds (the default --seeds 3) all within 150. conv256x14: [1, 1, 1] (there the
template's default is already within 1% of random's best after 400).

Part 2 (--latency): tune the ResNet-18-style and MobileNetV2-style networks, then time
the default bundle, the tuned bundle and ONNX Runtime, interleaved, at 1 thread.

    python bench/tuner_convergence.py --png convergence.png
    python bench/tuner_convergence.py --latency --trials 64
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "examples")]

from packager.boards import load_board  # noqa: E402
from packager.graph.plan_png import draw_text, encode_png  # noqa: E402
from packager.tune.log import TuningLog  # noqa: E402
from packager.tune.measure import Measurement, Measurer, Settings  # noqa: E402
from packager.tune.run import model_tasks  # noqa: E402
from packager.tune.space import space_of, valid  # noqa: E402
from packager.tune.tuner import Options, tune_task  # noqa: E402

WORKLOADS = {"conv64x56": (64, 56), "conv128x28": (128, 28), "conv256x14": (256, 14)}
TUNERS = ("xgb", "random", "ga")
COLORS = {"xgb": (200, 30, 30), "random": (30, 30, 200), "ga": (30, 150, 30)}


def conv_onnx(c: int, hw: int, path: Path) -> Path:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, hw, hw])
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    g = helper.make_graph(nodes, "conv", [x], [y], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


class TableMeasurer:
    """Answers from a table of costs measured once per config (the replay of part 1): a
    config no run has asked for yet is measured on the board (in the asking run's batch)
    and kept, so every tuner and seed sees the same number for it."""

    def __init__(self, board, table: dict[int, Measurement], measurer=None):
        self.board, self.table, self.measurer = board, table, measurer

    def measure(self, task, batch):
        new = [(i, k) for i, k in batch if i not in self.table]
        if new:
            for m in self.measurer.measure(task, new):
                m.prim = None
                self.table[m.index] = m
        out = []
        for i, knobs in batch:
            m = self.table[i]
            out.append(Measurement(i, knobs, m.costs, m.error, valid(task, knobs)))
        return out


class _NullLog(TuningLog):
    def __init__(self):
        pass

    def append(self, record):
        pass

    def records(self):
        return []


def load_table(path: Path) -> dict[int, Measurement]:
    if not path.exists():
        return {}
    rows = json.loads(path.read_text())
    return {int(i): Measurement(int(i), {}, r["costs"], r["error"]) for i, r in rows.items()}


def save_table(path: Path, table: dict[int, Measurement]) -> None:
    rows = {str(i): {"costs": m.costs, "error": m.error} for i, m in sorted(table.items())}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows))


def curves(task, board, table, measurer, trials: int, seeds: int) -> dict[str, list[list[float]]]:
    """Best-so-far GFLOPS after each trial, per tuner and seed."""
    out: dict[str, list[list[float]]] = {}
    for tuner in TUNERS:
        for seed in range(seeds):
            opts = Options(trials=trials, tuner=tuner, seed=seed)
            res = tune_task(task, TableMeasurer(board, table, measurer), _NullLog(), opts)
            gf = [res.gflops(c) for c in res.history]
            out.setdefault(tuner, []).append(gf)
            print(f"  {tuner} seed {seed}: best {max(gf, default=0):.2f} GFLOPS", file=sys.stderr)
    return out


def reach(curve: list[float], target: float) -> int | None:
    """Trials until the curve reaches ``target`` (within 1%), or None."""
    for k, g in enumerate(curve, 1):
        if g >= 0.99 * target:
            return k
    return None


def plot(results: dict, path: Path) -> None:
    """One panel per workload: mean best-so-far GFLOPS against trials, per tuner."""
    w, h, pad = 360, 260, 40
    img = np.full((h, w * len(results), 3), 255, np.uint8)
    for p, (name, cv) in enumerate(results.items()):
        x0 = p * w
        top = max(max(max(c) for c in runs) for runs in cv.values()) * 1.05
        n = max(len(c) for runs in cv.values() for c in runs)
        img[h - pad, x0 + pad : x0 + w - 10] = 0
        img[10 : h - pad, x0 + pad] = 0
        draw_text(img, x0 + pad, 2, f"{name} (GFLOPS vs trials, max {top / 1.05:.1f})")
        for k, tuner in enumerate(TUNERS):
            mean = np.mean([c + [c[-1]] * (n - len(c)) for c in cv[tuner]], axis=0)
            xs = x0 + pad + (np.arange(n) * (w - pad - 12) / max(n - 1, 1)).astype(int)
            ys = (h - pad - mean / top * (h - pad - 12)).astype(int)
            for a in range(1, n):
                _line(img, xs[a - 1], ys[a - 1], xs[a], ys[a], COLORS[tuner])
            draw_text(img, x0 + w - 80, h - pad + 8 + 10 * k, tuner, COLORS[tuner])
        draw_text(img, x0 + pad, h - pad + 8, f"0 .. {n}")
    path.write_bytes(encode_png(img))


def _line(img, x0, y0, x1, y1, color) -> None:
    steps = max(abs(x1 - x0), abs(y1 - y0), 1)
    for t in np.linspace(0, 1, steps + 1):
        img[int(round(y0 + (y1 - y0) * t)), int(round(x0 + (x1 - x0) * t))] = color


def pin_thread_pool(directory: Path) -> None:
    """Time every candidate with the committed thread pool as it is now (the working copy
    may be mid-edit during a long run)."""
    import subprocess

    from packager.tune import measure

    rel = measure.PARALLEL_FOR.relative_to(ROOT)
    r = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode == 0:
        path = directory / measure.PARALLEL_FOR.name
        path.write_text(r.stdout)
        measure.PARALLEL_FOR = path


def convergence(args) -> None:
    board = load_board("host")
    if args.thread_pool:  # the one a kept table was measured with
        from packager.tune import measure

        measure.PARALLEL_FOR = Path(args.thread_pool)
    else:
        pin_thread_pool(Path(tempfile.mkdtemp(prefix="tc-pool-")))
    settings = Settings(min_seconds=args.min_seconds, samples=args.samples)
    measurer = Measurer(board, settings)
    results = {}
    marks = [k for k in (50, 100, 150, 200, 400) if k <= args.trials]
    print(
        f"{'workload':<11} {'space':>6} {'measured':>8}  random best@{args.trials}  "
        "trials to reach it, per seed (- = not within the run)"
    )
    lines = []
    with tempfile.TemporaryDirectory() as d:
        for name, (c, hw) in WORKLOADS.items():
            if args.workloads and name not in args.workloads:
                continue
            onnx_path = str(conv_onnx(c, hw, Path(d) / f"{name}.onnx"))
            (task,) = model_tasks(onnx_path, board, algorithms=["direct"])
            path = Path(args.table_dir) / f"{name}.json"
            table = load_table(path)
            try:
                cv = curves(task, board, table, measurer, args.trials, args.seeds)
            finally:
                save_table(path, table)
            results[name] = cv
            target = statistics.mean(c[min(len(c), args.trials) - 1] for c in cv["random"])
            hits = {t: [reach(c, target) or "-" for c in cv[t]] for t in TUNERS}
            print(
                f"{name:<11} {space_of(task).size:>6} {len(table):>8}  {target:8.2f} GFLOPS  "
                + "  ".join(f"{t} {hits[t]}" for t in TUNERS if t != "random"),
                flush=True,
            )
            for t in TUNERS:
                means = [statistics.mean(c[min(k, len(c)) - 1] for c in cv[t]) for k in marks]
                lines.append(
                    f"{name:<11} {t:<6} "
                    + "  ".join(f"@{k} {m:7.2f}" for k, m in zip(marks, means, strict=True))
                )
    print("mean best-so-far GFLOPS")
    print("\n".join(lines))
    if args.png:
        plot(results, Path(args.png))
        print(f"wrote {args.png}")


def latency(args) -> None:
    import compare_ort as co

    from packager.bundle import write_bundle_files
    from packager.native import build_run_bundle
    from packager.package import compile_model
    from packager.tune.apply import Tuning
    from packager.tune.progress import Progress

    board = load_board("host")
    for name in ("resnet18", "mobilenet_v2"):
        model = co.MODELS[name]()
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / f"{name}.onnx"
            onnx.save(model, path)
            log = Path(args.log_dir) / f"{name}.jsonl"
            tasks = model_tasks(str(path), board)
            for k, task in enumerate(tasks, 1):
                prog = Progress()
                prog.start(k, len(tasks), task.label, args.trials)
                opts = Options(trials=args.trials, early_stopping=args.trials // 2)
                tune_task(task, Measurer(board), TuningLog(log), opts, prog)
            exes = {}
            for kind, tuning in (("default", None), ("tuned", Tuning(board, [log]))):
                bundle = Path(d) / kind
                bundle.mkdir()
                write_bundle_files(bundle, compile_model(model, board, tuning=tuning), {}, None)
                exes[kind] = (
                    bundle,
                    build_run_bundle(bundle, cflags=["-O2", "-std=c99", *board.toolchain.cflags]),
                )
            feeds = co.input_feeds(model)
            paths = {}
            for k, (n, a) in enumerate(feeds.items()):
                paths[n] = f"{d}/in{k}.npy"
                np.save(paths[n], a)
            sess = co.ort_session(model, 1)
            times = {"default": [], "tuned": [], "ort": []}
            for _ in range(args.rounds):
                for kind, (b, exe) in exes.items():
                    times[kind].append(co.time_bundle(exe, b, paths, 10, 1))
                times["ort"].append(co.time_ort(sess, feeds, 10))
            m = {k: statistics.median(v) for k, v in times.items()}
            print(
                f"{name:<13} default {m['default']:8.2f} ms  tuned {m['tuned']:8.2f} ms  "
                f"ort {m['ort']:8.2f} ms  speed-up {m['default'] / m['tuned']:.2f}x  "
                f"tuned/ort {m['tuned'] / m['ort']:.2f}",
                flush=True,
            )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=400)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--min-seconds", type=float, default=0.02)
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--png", default="tuner_convergence.png")
    p.add_argument(
        "--table-dir",
        default=str(Path(tempfile.gettempdir()) / "tuner_convergence"),
        help="where each workload's measured table is kept (a rerun replays it)",
    )
    p.add_argument(
        "--thread-pool",
        metavar="pk_parallel.c",
        help="time with this thread pool source (default: the committed one, copied at start)",
    )
    p.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), help="default: all")
    p.add_argument("--latency", action="store_true")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--log-dir", default=str(ROOT / "tuning_logs" / "host"))
    args = p.parse_args(argv)
    if args.latency:
        latency(args)
    else:
        convergence(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
