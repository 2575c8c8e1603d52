"""Tuner convergence and what tuning buys, on the host board.

Part 1 (convergence): three 3x3 conv workloads of ResNet-18 (blocked layout, as the
packager lowers them). Every config of each space is measured once on the board (a
table); the tuners (xgb, random, ga) then replay against the table for several seeds, so
their curves differ only by the order in which they ask, not by machine noise. Prints
for each workload random search's best after 400 trials (or the whole space, if
smaller) and the trials xgb needs to reach it; writes best-so-far GFLOPS against
trials as a PNG.

Part 2 (--latency): tune the ResNet-18-style and MobileNetV2-style networks, then time
the default bundle, the tuned bundle and ONNX Runtime, interleaved, at 1 thread.

    python bench/tuner_convergence.py --png convergence.png
    python bench/tuner_convergence.py --latency --trials 64
"""

from __future__ import annotations

import argparse
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
    """Answers from costs measured once per config (the replay of part 1)."""

    def __init__(self, board, table: dict[int, Measurement]):
        self.board, self.table = board, table

    def measure(self, task, batch):
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


def measure_space(task, board, settings) -> dict[int, Measurement]:
    space = space_of(task)
    measurer = Measurer(board, settings)
    table = {}
    batch = [(i, space.get(i)) for i in range(space.size)]
    for k in range(0, len(batch), 32):
        for m in measurer.measure(task, batch[k : k + 32]):
            table[m.index] = m
    return table


def curves(task, board, table, trials: int, seeds: int) -> dict[str, list[list[float]]]:
    """Best-so-far GFLOPS after each trial, per tuner and seed."""
    out: dict[str, list[list[float]]] = {}
    for tuner in TUNERS:
        for seed in range(seeds):
            opts = Options(trials=trials, tuner=tuner, seed=seed)
            res = tune_task(task, TableMeasurer(board, table), _NullLog(), opts)
            gf = [res.gflops(c) for c in res.history]
            out.setdefault(tuner, []).append(gf)
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


def convergence(args) -> None:
    board = load_board("host")
    settings = Settings(min_seconds=args.min_seconds, samples=5)
    results = {}
    print(f"{'workload':<12} {'space':>5}  random best@400  xgb trials to reach it (per seed)")
    with tempfile.TemporaryDirectory() as d:
        for name, (c, hw) in WORKLOADS.items():
            (task,) = model_tasks(str(conv_onnx(c, hw, Path(d) / f"{name}.onnx")), board)
            table = measure_space(task, board, settings)
            cv = curves(task, board, table, args.trials, args.seeds)
            results[name] = cv
            target = statistics.mean(c[min(len(c), 400) - 1] for c in cv["random"])
            hits = [reach(c, target) for c in cv["xgb"]]
            ga = [reach(c, target) for c in cv["ga"]]
            print(
                f"{name:<12} {space_of(task).size:>5}  {target:8.2f} GFLOPS   xgb {hits}  "
                f"ga {ga}  (space best {max(max(c) for c in cv['random']):.2f})",
                flush=True,
            )
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
    p.add_argument("--png", default="tuner_convergence.png")
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
