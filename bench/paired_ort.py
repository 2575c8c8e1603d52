"""A bundle against ONNX Runtime one inference at a time, in one process: the bundle's
runtime loaded as a shared library (packager.native.build_shared_library, pk_runtime.h
through ctypes) and an ORT session, called in turn on the same input, and the ratio of
each pair of calls.

    python bench/paired_ort.py --models tv_resnet18 tv_mobilenet_v2 --pairs 200
    python bench/paired_ort.py --models tv_mobilenet_v2 --tuned
    python bench/paired_ort.py --int8 7 --models tv_resnet18 tv_mobilenet_v2
    python bench/paired_ort.py --models tv_mobilenet_v2 --against host-avx2  # widths
    python bench/paired_ort.py --board host-avx2 --ort-isa avx2 --tuned  # AVX2 peers

compare_ort.py alternates whole processes, N inferences each: on a shared virtual
machine whose neighbours' load comes in phases of seconds, one side's round can fall in
a slow phase and the other's in a quiet one. Here the two calls of a pair are a few
milliseconds apart and the order alternates pair by pair (bundle first, then ORT first),
so each pair sees one phase; the median of the pairs' ratios is the figure, and the
quartiles of those ratios say how far a single pair strays. Each side's call follows
the other's, so neither finds its weights in the caches from its own last run (a model
under the L3's size runs colder than in compare_ort.py's back-to-back inferences).

``--int8 BITS`` takes compare_int8.py's models and QDQ quantization (BITS-bit weights):
three sides in turn, the order rotating, the int8 bundle, ORT on the QDQ model and our
fp32 bundle; it prints int8 / ORT and fp32 / int8 (the speedup) by pairs.
``--against BOARD`` adds a bundle of the same model built for another profile of this
machine (host-avx2 beside a 512-bit host: the same kernels at 8 lanes) to the rotation,
so two vector widths are compared inference by inference.
``--ort-isa avx2`` holds this process's CPUID to an AVX2 machine's before ORT loads
(cpuid_mask.py), so a ``--board host-avx2`` bundle meets ORT's AVX2 kernels pair by pair;
the bundle's code, compiled for its board, asks no CPUID and runs as it would anyway.

One thread only. At two, ORT's idle pool spins on the cores the bundle's pool needs
next: measured on a Zen 3 (2 cores, tv_mobilenet_v2, 100 pairs) the bundle took 10.7
ms beside a spinning ORT session against 6.0 ms beside one made with
``session.intra_op.allow_spinning`` 0, even with 20 ms between the calls, while that
setting slowed ORT itself from 7.05 to 8.7 ms. Neither is a fair pair, so thread
counts above one stay with compare_ort.py, whose ORT process is gone when the bundle's
runs.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import compare_ort as co  # noqa: E402
import cpuid_mask  # noqa: E402

from packager.boards import load_board  # noqa: E402
from packager.native import CFLAGS, build_shared_library  # noqa: E402

# pk_graph_run_profiled's clock (milliseconds from any origin)
CLOCK_MS = ctypes.CFUNCTYPE(ctypes.c_double)(lambda: time.perf_counter() * 1e3)


class SharedBundle:
    """A bundle's graph loaded in this process through ``libpk_bundle.so``."""

    def __init__(self, bundle: Path, lib: Path):
        self.lib = ctypes.CDLL(str(lib))
        L = self.lib  # noqa: N806
        L.pk_graph_load_dir.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
        L.pk_graph_input_index.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        L.pk_graph_output_index.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        L.pk_graph_set_input.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int32,
            ctypes.c_void_p,
            ctypes.c_size_t,
        ]
        L.pk_graph_get_output.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int32,
            ctypes.c_void_p,
            ctypes.c_size_t,
        ]
        L.pk_graph_run.argtypes = [ctypes.c_void_p]
        L.pk_graph_destroy.argtypes = [ctypes.c_void_p]
        L.pk_last_error.restype = ctypes.c_char_p
        L.pk_graph_num_nodes.argtypes = [ctypes.c_void_p]
        L.pk_graph_node_func.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        L.pk_graph_node_func.restype = ctypes.c_char_p
        L.pk_graph_node_name.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        L.pk_graph_node_name.restype = ctypes.c_char_p
        L.pk_graph_run_profiled.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_double),
        ]
        self.g = ctypes.c_void_p()
        if L.pk_graph_load_dir(str(bundle).encode(), ctypes.byref(self.g)) != 0:
            raise RuntimeError(f"{bundle}: {L.pk_last_error().decode()}")
        n = L.pk_graph_num_nodes(self.g)
        self.funcs = [(L.pk_graph_node_func(self.g, i) or b"").decode() for i in range(n)]
        self.names = [(L.pk_graph_node_name(self.g, i) or b"").decode() for i in range(n)]
        self._node_ms = (ctypes.c_double * n)()
        self._clock = CLOCK_MS

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what}: {self.lib.pk_last_error().decode()}")

    def set_inputs(self, feeds: dict[str, np.ndarray]) -> None:
        self._keep = []
        for name, a in feeds.items():
            a = np.ascontiguousarray(a)
            self._keep.append(a)
            i = self.lib.pk_graph_input_index(self.g, name.encode())
            self._check(-1 if i < 0 else 0, f"input {name!r}")
            self._check(self.lib.pk_graph_set_input(self.g, i, a.ctypes.data, a.nbytes), name)

    def run(self) -> None:
        self._check(self.lib.pk_graph_run(self.g), "run")

    def kernel_nodes(self) -> dict[str, list[str]]:
        """Each kernel function's nodes (the ONNX nodes it computes), in execution order."""
        out: dict[str, list[str]] = {}
        for func, name in zip(self.funcs, self.names, strict=True):
            if func and not func.startswith("("):
                out.setdefault(func, []).append(name)
        return out

    def run_profiled(self) -> dict[str, float]:
        """One run, each kernel's milliseconds (all its calls) by its function's name."""
        for i in range(len(self.funcs)):
            self._node_ms[i] = 0.0
        clock = ctypes.cast(self._clock, ctypes.c_void_p)
        self._check(self.lib.pk_graph_run_profiled(self.g, clock, self._node_ms), "run")
        out: dict[str, float] = {}
        for func, ms in zip(self.funcs, self._node_ms, strict=True):
            if func and not func.startswith("("):  # control flow: timed with its subgraphs
                out[func] = out.get(func, 0.0) + ms
        return out

    def output(self, name: str, like: np.ndarray) -> np.ndarray:
        out = np.empty_like(like)
        i = self.lib.pk_graph_output_index(self.g, name.encode())
        self._check(-1 if i < 0 else 0, f"output {name!r}")
        self._check(self.lib.pk_graph_get_output(self.g, i, out.ctypes.data, out.nbytes), name)
        return out

    def close(self) -> None:
        if self.g:
            self.lib.pk_graph_destroy(self.g)
            self.g = ctypes.c_void_p()


def ort_session(model: onnx.ModelProto):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def pairs(ours, theirs, n: int) -> tuple[list[float], list[float]]:
    """``n`` pairs of calls of ``ours`` and ``theirs`` (ms each), the order alternating."""
    a, b = rotations([ours, theirs], n)
    return a, b


def rotations(sides: list, n: int) -> list[list[float]]:
    """``n`` rounds of calls of each of ``sides`` (ms each), the order rotating by one a
    round (with two sides: pairs()'s alternation)."""
    times: list[list[float]] = [[] for _ in sides]
    for k in range(n):
        for j in range(len(sides)):
            i = (j + k) % len(sides)
            t = time.perf_counter()
            sides[i]()
            times[i].append((time.perf_counter() - t) * 1e3)
    return times


def summary(a: list[float], b: list[float]) -> dict:
    """Medians of each side, their ratio, and the median and quartiles of the pairs'
    ratios a[k] / b[k]."""
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return {
        "bundle_ms": statistics.median(a),
        "ort_ms": statistics.median(b),
        "ratio_of_medians": statistics.median(a) / statistics.median(b),
        "pair_median": statistics.median(ratios),
        "pair_quartiles": [q1, q3],
    }


def bench(
    name: str,
    model: onnx.ModelProto,
    n: int,
    tuned=None,
    board: str = "host",
    against: str | None = None,
) -> dict:
    """One model's pairs (a bundle built for ``board``; ``tuned``: as compare_ort's) and
    its summary, with the largest difference of the first output from ORT's. With
    ``against`` (another board this machine runs, e.g. host-avx2: the narrower vectors) a
    bundle built for it takes turns too, the three sides' order rotating; the row gains
    its milliseconds and ``board_over_against``, the median of board / against by round."""
    feeds = co.input_feeds(model, name)
    with tempfile.TemporaryDirectory(prefix="paired_ort_") as d:
        sides = []
        try:
            for tag in [board] + ([against] if against else []):
                work = Path(d) / tag
                work.mkdir()
                bundle, _ = co.build_bundle(model, work, tuned=tuned, board_name=tag)
                flags = [*CFLAGS, *load_board(tag).toolchain.cflags]
                sides.append(SharedBundle(bundle, build_shared_library(bundle, cflags=flags)))
                sides[-1].set_inputs(feeds)
            sess = ort_session(model)
            want = sess.run(None, feeds)
            first = sess.get_outputs()[0].name
            err = 0.0
            for g in sides:
                g.run()
                err = max(err, float(np.max(np.abs(g.output(first, want[0]) - want[0]))))
            calls = [sides[0].run, lambda: sess.run(None, feeds), *(g.run for g in sides[1:])]
            times = rotations(calls, n) if against else list(pairs(*calls, n))
        finally:
            for g in sides:
                g.close()
    row = {"model": name, "tuned": bool(tuned), "pairs": n, "max_abs_diff": err}
    row |= summary(times[0], times[1])
    if against:
        other = summary(times[0], times[2])
        row |= {
            "against": against,
            "against_ms": other["ort_ms"],
            "board_over_against": other["pair_median"],
            "board_over_against_quartiles": other["pair_quartiles"],
        }
    return row


def bench_int8(name: str, n: int, bits: int, board: str = "host", size: int = 224) -> dict:
    """compare_int8.py's model ``name`` (``size`` square inputs) and its QDQ form: rounds
    of the int8 bundle, ORT on the QDQ model (its optimizations on: its integer kernels)
    and our fp32 bundle."""
    import compare_int8 as ci

    fp32 = ci.MODELS[name](size)
    flags = [*CFLAGS, *load_board(board).toolchain.cflags]
    with tempfile.TemporaryDirectory(prefix="paired_int8_") as d:
        work = Path(d)
        if name.startswith("light_"):
            qdq = ci.quantize_light(fp32, bits)
        else:
            qdq = ci.quantize(fp32, work, (1, 3, size, size), bits)
        feeds = co.input_feeds(fp32)
        sides = []
        try:
            for tag, m in (("q", qdq), ("f", fp32)):
                (work / tag).mkdir()
                bundle, _ = co.build_bundle(m, work / tag, board_name=board)
                g = SharedBundle(bundle, build_shared_library(bundle, cflags=flags))
                sides.append(g)
                g.set_inputs(feeds)
                g.run()
            sess = ort_session(qdq)
            sess.run(None, feeds)
            q, o, f = rotations([sides[0].run, lambda: sess.run(None, feeds), sides[1].run], n)
        finally:
            for g in sides:
                g.close()
    vs_ort, speedup = summary(q, o), summary(f, q)
    return {"model": name, "weight_bits": bits, "rounds": n, "fp32_ms": speedup["bundle_ms"]} | {
        "int8_ms": vs_ort["bundle_ms"],
        "ort_int8_ms": vs_ort["ort_ms"],
        "int8_over_ort": vs_ort["pair_median"],
        "int8_over_ort_quartiles": vs_ort["pair_quartiles"],
        "speedup": speedup["pair_median"],
        "speedup_quartiles": speedup["pair_quartiles"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument(
        "--models",
        nargs="+",
        default=["tv_resnet18", "tv_mobilenet_v2"],
        help="compare_ort.py's models (with --int8: compare_int8.py's)",
    )
    ap.add_argument(
        "--int8",
        type=int,
        choices=(7, 8),
        metavar="BITS",
        help="the int8 bundle of each model's QDQ form (BITS-bit weights) against ORT on "
        "it and against our fp32 bundle",
    )
    ap.add_argument("--pairs", type=int, default=100, help="pairs of calls per model")
    ap.add_argument(
        "--tuned",
        nargs="?",
        const="own",
        choices=("own", "all"),
        help="the bundle built with tuning_logs/BOARD/ (as compare_ort.py --tuned)",
    )
    ap.add_argument("--board", default="host")
    ap.add_argument(
        "--against",
        metavar="BOARD",
        help="also a bundle built for BOARD (another profile of this machine, e.g. "
        "host-avx2 beside a 512-bit host), in the same rotation: BOARD's ms and "
        "board / BOARD by rounds",
    )
    ap.add_argument("--json", action="store_true", help="one JSON object a model")
    co.add_ort_isa(ap)
    args = ap.parse_args(argv)
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")
    co.use_ort_isa(ap, args)
    if args.ort_isa == "avx2":
        # in this process, before ORT's first import: the bundle's code is compiled for
        # its board and asks no CPUID, so only ORT's kernel choice changes
        if "onnxruntime" in sys.modules:
            ap.error("--ort-isa avx2: onnxruntime was imported before the hold")
        cpuid_mask.hold_to_avx2()
    # before the first library loads: the pool reads it once, at its first parallel loop
    os.environ["PACKAGER_NUM_THREADS"] = "1"
    b = load_board(args.board)
    features = ", ".join(b.features) or "none listed"
    cpu = b.cpu_name or "cpu unnamed"
    print(f"board {b.name}: {cpu}, {b.cores} cores, {b.vector_bits}-bit vectors ({features})")
    import compare_int8 as ci

    known = ci.MODELS if args.int8 else co.MODELS
    unknown = [m for m in args.models if m not in known]
    if unknown:
        ap.error(f"unknown models {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    for name in args.models:
        if args.int8:
            row = bench_int8(name, args.pairs, args.int8, args.board)
            if args.json:
                print(json.dumps(row), flush=True)
                continue
            (lo, hi), (slo, shi) = row["int8_over_ort_quartiles"], row["speedup_quartiles"]
            print(
                f"{name:<16} int8 {row['int8_ms']:7.2f} ms  ort {row['ort_int8_ms']:7.2f} ms  "
                f"fp32 {row['fp32_ms']:7.2f} ms  int8/ort {row['int8_over_ort']:.2f} "
                f"({lo:.2f}-{hi:.2f})  fp32/int8 {row['speedup']:.2f} ({slo:.2f}-{shi:.2f}); "
                f"{args.pairs} rounds",
                flush=True,
            )
            continue
        row = bench(name, co.MODELS[name](), args.pairs, args.tuned, args.board, args.against)
        row["ort_isa"] = args.ort_isa
        if args.ort_isa == "avx2":
            row["cpuid_traps"] = cpuid_mask.traps()  # ORT's kernel choice read the hold
        if args.json:
            print(json.dumps(row), flush=True)
            continue
        lo, hi = row["pair_quartiles"]
        tag = "tuned" if args.tuned else "default"
        print(
            f"{name:<16} {tag}  bundle {row['bundle_ms']:8.2f} ms"
            f"  ort {row['ort_ms']:8.2f} ms  bundle/ort {row['ratio_of_medians']:.2f}"
            f"  (pairs {row['pair_median']:.2f}, quartiles {lo:.2f}-{hi:.2f}; {args.pairs} pairs)",
            flush=True,
        )
        if args.against:
            lo, hi = row["board_over_against_quartiles"]
            print(
                f"{'':<16} {args.against} bundle {row['against_ms']:8.2f} ms"
                f"  {args.board}/{args.against} {row['board_over_against']:.2f}"
                f" (quartiles {lo:.2f}-{hi:.2f}, by rounds)",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
