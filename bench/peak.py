"""This machine's single-core FMA peak, and each conv layer's GFLOPS as a fraction of it.

The peak comes from a generated microkernel: K independent chains of vector FMAs (enough
to cover the FMA latency on every pipe), compiled with the host board's flags and timed.
The per-layer figures come from `run_bundle --profile-json` on a packaged model (one thread).

    python bench/peak.py                       # peak, then ResNet-18-style conv layers
    python bench/peak.py --model mobilenet_v2 --top 15
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "bench"))


def microkernel(lanes: int, chains: int) -> str:
    """C source of a timed loop of ``chains`` independent ``acc = acc * x + y`` vector FMAs."""
    accs = [f"a{k}" for k in range(chains)]
    decl = "\n".join(f"    v {a} = x * {k + 1}.0f;" for k, a in enumerate(accs))
    body = "\n".join(f"        {a} = {a} * x + y;" for a in accs)
    total = " + ".join(accs)
    return f"""#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef float v __attribute__((vector_size({lanes * 4})));
int main(int argc, char **argv) {{
    long iters = atol(argv[1]);
    v x, y;
    for (int i = 0; i < {lanes}; i++) {{ x[i] = 0.999f + 1e-6f * i; y[i] = 1e-3f; }}
{decl}
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < iters; i++) {{
{body}
    }}
    clock_gettime(CLOCK_MONOTONIC, &t1);
    v s = {total};
    double secs = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    double flops = 2.0 * {lanes} * {chains} * (double)iters;
    printf("%.3f %g\\n", flops / secs * 1e-9, (double)s[0]);
    return 0;
}}
"""


def measure_peak(lanes: int = 8, chains: int = 12, cflags=("-O2", "-march=native")) -> float:
    """Best GFLOPS over a few runs of the microkernel on one core."""
    with tempfile.TemporaryDirectory() as d:
        src, exe = Path(d) / "peak.c", Path(d) / "peak"
        src.write_text(microkernel(lanes, chains))
        subprocess.run(["cc", *cflags, "-ffp-contract=fast", str(src), "-o", str(exe)], check=True)
        runs = [
            subprocess.run([str(exe), "200000000"], capture_output=True, text=True, check=True)
            for _ in range(3)
        ]
        return max(float(r.stdout.split()[0]) for r in runs)


def conv_flops(node: dict, graph: dict) -> float:
    """Multiply-adds x 2 of a conv node from its output shape and weight shape."""
    shapes = graph["attrs"]["shape"]
    row = graph["node_row_ptr"]
    out = shapes[row[graph["nodes"].index(node)]]
    w = shapes[row[node["inputs"][1][0]] + node["inputs"][1][1]]
    n_out = 1
    for d in out:
        n_out *= d
    per_out = 1
    for d in w[1:]:
        per_out *= d
    if len(w) == 6:  # blocked weights (OC/y, IC/x, KH, KW, x, y): reduction is IC*KH*KW
        per_out = w[1] * w[2] * w[3] * w[4]
    if any(op.startswith("conv2d_winograd") for op in node.get("ops", [])):
        # transformed filters (a, a, OC/y, IC, y) of a 3x3 conv: the direct conv's IC*3*3
        per_out = w[3] * 9
    return 2.0 * n_out * per_out


def layer_report(model_name: str, peak: float, top: int, algorithm: str = "direct") -> None:
    import numpy as np
    from compare_ort import MODELS, build_bundle, input_feeds

    model = MODELS[model_name]()
    with tempfile.TemporaryDirectory() as d:
        bundle, exe = build_bundle(model, Path(d), algorithm=algorithm)
        doc = Path(d) / "profile.json"
        cmd = [str(exe), str(bundle), "--profile-json", str(doc), "--repeat", "5"]
        for k, (name, a) in enumerate(input_feeds(model).items()):
            np.save(f"{d}/in{k}.npy", a)
            cmd += ["--input", f"{name}={d}/in{k}.npy"]
        env = dict(os.environ, PACKAGER_NUM_THREADS="1")
        subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
        graph = json.loads((bundle / "graph.json").read_text())
        kernels = json.loads(doc.read_text())["kernels"]  # one row per kernel, all its calls
    by_name = {n["name"]: n for n in graph["nodes"]}
    rows = []
    for k in kernels:
        if "conv" not in k["func"]:
            continue
        flops = sum(conv_flops(by_name[n], graph) for n in k["nodes"])
        gflops = flops / (k["median_ms"] * 1e6)
        rows.append((k["median_ms"], ", ".join(k["nodes"]), k["func"], gflops, gflops / peak))
    rows.sort(reverse=True)
    print(f"\n{model_name}: conv kernels by time (1 thread, 3x3 convs {algorithm})")
    print(f"{'ms':>8}  {'GFLOPS':>7}  {'of peak':>7}  nodes (kernel)")
    for ms, name, func, g, frac in rows[:top]:
        print(f"{ms:8.3f}  {g:7.2f}  {frac:7.1%}  {name} ({func})")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="resnet18", help="a model of bench/compare_ort.py")
    p.add_argument("--top", type=int, default=20, help="how many layers to list")
    p.add_argument("--lanes", type=int, default=8, help="float lanes per vector (8 = 256-bit)")
    p.add_argument("--peak-only", action="store_true")
    p.add_argument(
        "--conv-algorithm",
        default="direct",
        help="3x3 stride-1 convs as this algorithm (default direct: a Winograd layer's "
        "GFLOPS count the direct conv's work, so they can read above the peak)",
    )
    args = p.parse_args(argv)
    peak = measure_peak(args.lanes)
    print(f"single-core FMA peak: {peak:.1f} GFLOPS ({args.lanes} lanes)")
    if not args.peak_only:
        layer_report(args.model, peak, args.top, args.conv_algorithm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
