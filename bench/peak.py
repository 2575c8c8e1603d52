"""This machine's single-core FMA peak, and each conv layer's GFLOPS as a fraction of it.

The peak comes from a generated microkernel: K independent chains of vector FMAs (enough
to cover the FMA latency on every pipe), compiled with the host board's flags and timed.
The per-layer figures come from `run_bundle --profile-json` on a packaged model (one thread).
``--int8`` also times the integer multiply-accumulate the int8 kernels use on this CPU
(x86: `vpdpbusd` with AVX-512 VNNI, else AVX2's `vpmaddubsw` + `vpmaddwd` + `vpaddd`;
AArch64: `sdot` with dotprod, else `smull`/`smlal2` + `sadalp`), in GOPS (2 per
multiply-accumulate), and its ratio to the FMA peak: the most an int8 kernel can gain over
an fp32 one where both are bound by arithmetic.

    python bench/peak.py                       # peak, then ResNet-18-style conv layers
    python bench/peak.py --model mobilenet_v2 --top 15
    python bench/peak.py --peak-only --int8    # the fp32 and int8 peaks
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


# The int8 kernels' multiply-accumulate into int32 accumulators {c} from 4-byte groups of
# unsigned activations {a} and signed weights ``w`` (ops/int8_intrin.py), per instruction
# set, first match wins: (the compiler's macro, setup, vector type, zero, step,
# multiply-accumulates per step, what it is, the asm constraint of a vector register).
INT8_STEPS = (
    (
        "__AVX512VNNI__",
        "const __m512i w = _mm512_set1_epi8(2);",
        "__m512i",
        "_mm512_setzero_si512()",
        "_mm512_dpbusd_epi32({c}, {a}, w)",
        64,
        "x86 VNNI vpdpbusd",
        "+v",
    ),
    (
        "__AVX2__",
        "const __m256i w = _mm256_set1_epi8(2), ones = _mm256_set1_epi16(1);",
        "__m256i",
        "_mm256_setzero_si256()",
        "_mm256_add_epi32({c}, _mm256_madd_epi16(_mm256_maddubs_epi16({a}, w), ones))",
        32,
        "x86 AVX2 vpmaddubsw + vpmaddwd + vpaddd",
        "+x",
    ),
    (
        "__ARM_FEATURE_DOTPROD",
        "const int8x16_t w = vdupq_n_s8(2);",
        "int32x4_t",
        "vdupq_n_s32(0)",
        "vdotq_s32({c}, {a}, w)",
        16,
        "AArch64 sdot",
        "+w",
    ),
    (
        "__aarch64__",
        "const int8x16_t w = vdupq_n_s8(2);",
        "int32x4_t",
        "vdupq_n_s32(0)",
        "vpadalq_s16({c}, vmlal_high_s8(vmull_s8(vget_low_s8({a}), vget_low_s8(w)), {a}, w))",
        16,
        "AArch64 smull + smlal2 + sadalp",
        "+w",
    ),
)


def int8_microkernel(chains: int) -> str:
    """C source timing ``chains`` independent int8 multiply-accumulate chains with the first
    sequence of INT8_STEPS the compiler's target has; prints GOPS (2 per multiply-
    accumulate), a lane of the sums (so they are computed) and what it timed. Each chain
    has activations of its own, passed through an empty asm every iteration, so no product
    is shared between chains or hoisted out of the loop."""
    branches = []
    for k, (macro, setup, vec, zero, step, macs, name, reg) in enumerate(INT8_STEPS):
        n = min(chains, 6) if vec == "__m256i" else chains  # 16 registers: acc + activations
        accs, acts = [f"c{i}" for i in range(n)], [f"a{i}" for i in range(n)]
        act = "int8x16_t" if vec == "int32x4_t" else vec
        splat = {"__m512i": "_mm512_set1_epi8", "__m256i": "_mm256_set1_epi8"}.get(
            vec, "vdupq_n_s8"
        )
        decl = "\n".join(
            f"    {vec} {c} = {zero};\n    {act} {a} = {splat}({i + 1});"
            for i, (c, a) in enumerate(zip(accs, acts, strict=True))
        )
        body = "\n".join(
            f'        __asm__("" : "{reg}"({a}));\n'
            f'        {c} = {step.format(c=c, a=a)}; __asm__("" : "{reg}"({c}));'
            for c, a in zip(accs, acts, strict=True)
        )
        keep = "\n".join(f"    memcpy(&lane, &{c}, sizeof lane); check ^= lane;" for c in accs)
        branches.append(
            f"""#{"elif" if k else "if"} defined({macro})
    {setup}
{decl}
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < iters; i++) {{
{body}
    }}
    clock_gettime(CLOCK_MONOTONIC, &t1);
{keep}
    macs = {macs}.0 * {n} * (double)iters;
    name = "{name}";"""
        )
    return f"""#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif
int main(int argc, char **argv) {{
    long iters = atol(argv[1]);
    struct timespec t0, t1;
    double macs = 0;
    const char *name = "none";
    int lane, check = 0;
{chr(10).join(branches)}
#else
    (void)iters, (void)lane;
    printf("0 0 none\\n");
    return 0;
#endif
    double secs = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    printf("%.3f %d %s\\n", 2.0 * macs / secs * 1e-9, check, name);
    return 0;
}}
"""


def _best_of_runs(source: str, cflags, iters: str, fields: int = 2) -> list[str]:
    """The microkernel's output fields of its fastest of 3 runs on one core."""
    with tempfile.TemporaryDirectory() as d:
        src, exe = Path(d) / "peak.c", Path(d) / "peak"
        src.write_text(source)
        subprocess.run(["cc", *cflags, "-ffp-contract=fast", str(src), "-o", str(exe)], check=True)
        runs = [
            subprocess.run([str(exe), iters], capture_output=True, text=True, check=True)
            for _ in range(3)
        ]
    return max((r.stdout.split(maxsplit=fields - 1) for r in runs), key=lambda f: float(f[0]))


def measure_peak(lanes: int = 8, chains: int = 12, cflags=("-O2", "-march=native")) -> float:
    """Best GFLOPS over a few runs of the microkernel on one core."""
    return float(_best_of_runs(microkernel(lanes, chains), cflags, "200000000")[0])


def measure_int8_peak(chains: int = 8, cflags=("-O2", "-march=native")) -> tuple[float, str]:
    """Best int8 GOPS over a few runs of int8_microkernel on one core, and the sequence
    timed ("none" where the compiler's target has none of INT8_STEPS)."""
    gops, _, name = _best_of_runs(int8_microkernel(chains), cflags, "100000000", 3)
    return float(gops), name.strip()


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
    p.add_argument(
        "--lanes",
        type=int,
        help="float lanes per vector (8 = 256-bit; default: the host board's vector width, "
        "the width its kernels are built for)",
    )
    p.add_argument("--peak-only", action="store_true")
    p.add_argument("--int8", action="store_true", help="also the int8 multiply-accumulate peak")
    p.add_argument(
        "--conv-algorithm",
        default="direct",
        help="3x3 stride-1 convs as this algorithm (default direct: a Winograd layer's "
        "GFLOPS count the direct conv's work, so they can read above the peak)",
    )
    args = p.parse_args(argv)
    if args.lanes is None:
        from packager.boards import load_board

        args.lanes = load_board("host").vector_bits // 32
    peak = measure_peak(args.lanes)
    print(f"single-core FMA peak: {peak:.1f} GFLOPS ({args.lanes} lanes)")
    if args.int8:
        gops, name = measure_int8_peak()
        print(f"single-core int8 peak: {gops:.1f} GOPS ({name}), {gops / peak:.2f}x the FMA peak")
    if not args.peak_only:
        layer_report(args.model, peak, args.top, args.conv_algorithm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
