"""The 2-layer transformer encoder (examples/networks.py) against ONNX Runtime.

Packages the encoder for the host board, then alternates rounds of `run_bundle --repeat
N` and N timed ORT runs in a process of its own (compare_ort.py's method), at one thread
by default, and prints the CPU, each median and the median ratio bundle/ORT.

    python bench/compare_transformer.py
    python bench/compare_transformer.py --rounds 9 --repeat 50 --threads 1 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's packager, not an installed one
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "bench"))

import networks  # noqa: E402
from compare_ort import build_bundle, settle, time_bundle, time_ort_process  # noqa: E402


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", nargs="+", type=int, default=[1])
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    p.add_argument("--repeat", type=int, default=50, help="timed runs per round")
    args = p.parse_args(argv)
    model = networks.transformer_encoder()
    feeds = networks.transformer_feeds(model)
    print(f"cpu: {cpu_model()}")
    with tempfile.TemporaryDirectory() as d:
        bundle, exe = build_bundle(model, Path(d))
        paths = {}
        for name, a in feeds.items():
            paths[name] = f"{d}/{name}.npy"
            np.save(paths[name], a)
        model_path = Path(d) / "model.onnx"
        onnx.save(model, model_path)
        for threads in args.threads:
            runs = {
                "bundle": lambda t=threads: time_bundle(exe, bundle, paths, args.repeat, t),
                "ort": lambda t=threads: time_ort_process(model_path, paths, args.repeat, t),
            }
            times: dict[str, list[float]] = {k: [] for k in runs}
            ratios = []
            for r in range(args.rounds):
                order = list(runs) if r % 2 == 0 else list(runs)[::-1]
                for label in order:
                    times[label].append(runs[label]())
                    settle()
                ratios.append(times["bundle"][-1] / times["ort"][-1])
            print(
                f"transformer_encoder {threads:>2} thread(s)  "
                f"bundle {statistics.median(times['bundle']):7.3f} ms  "
                f"ort {statistics.median(times['ort']):7.3f} ms  "
                f"bundle/ort (median of {args.rounds} rounds) {statistics.median(ratios):5.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
