"""Bundle latency with and without the layout pass (blocked NCHW{x}c convs).

For each model: package it twice for the host board (the second time with the "layout"
pass disabled), build both, then alternate rounds of `run_bundle --repeat N` between
the two, so both see the same machine noise. Prints the layout_transform count, each
median of the per-round medians and the median per-round ratio blocked/plain.

    python bench/layout.py                                  # light resnet50, MobileNetV2
    python bench/layout.py --models mobilenet_v2 --rounds 7 --repeat 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
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
MODELS = {
    "resnet50": lambda: onnx.load(LIGHT / "light_resnet50.onnx"),
    "mobilenet_v2": lambda: networks.mobilenet_v2(),
}
VARIANTS = {"blocked": set(), "plain": {"layout"}}


def build(model, disabled: set[str], where: Path, feeds: dict) -> tuple[list[str], int]:
    """A built bundle in ``where``; the run_bundle command and the transform count."""
    compiled = compile_model(model, load_board("host"), disabled_passes=disabled)
    where.mkdir()
    write_bundle_files(where, compiled, {}, None)
    exe = build_run_bundle(where)
    cmd = [str(exe), str(where)]
    for k, (name, a) in enumerate(feeds.items()):
        np.save(where / f"in{k}.npy", a)
        cmd += ["--input", f"{name}={where / f'in{k}.npy'}"]
    transforms = sum(n.op == "layout_transform" for n in compiled.graph.nodes)
    inner = [n for f in compiled.graph.nodes for n in f.attrs.get("nodes", [])]
    transforms += sum(n["op"] == "layout_transform" for n in inner)
    return cmd, transforms


def median_ms(cmd: list[str], repeat: int) -> float:
    out = subprocess.run(
        cmd + ["--repeat", str(repeat)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["median_ms"]


def feeds_of(model) -> dict:
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    return {
        vi.name: rng.uniform(0, 1, [d.dim_value for d in vi.type.tensor_type.shape.dim]).astype(
            np.float32
        )
        for vi in model.graph.input
        if vi.name not in inits
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            model = MODELS[name]()
            feeds = feeds_of(model)
            cmds = {}
            for v, disabled in VARIANTS.items():
                cmds[v], count = build(model, disabled, Path(tmp) / f"{name}_{v}", feeds)
                print(f"{name} {v}: {count} layout_transform nodes", flush=True)
            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for _ in range(args.rounds):
                for v in VARIANTS:
                    times[v].append(median_ms(cmds[v], args.repeat))
            med = {v: statistics.median(t) for v, t in times.items()}
            # Each round's two runs share its noise: the median of per-round ratios.
            ratios = [b / p for b, p in zip(times["blocked"], times["plain"], strict=True)]
            print(
                f"{name}: blocked {med['blocked']:.2f} ms, plain {med['plain']:.2f} ms, "
                f"ratio {statistics.median(ratios):.2f} (rounds {[round(r, 2) for r in ratios]})",
                flush=True,
            )


if __name__ == "__main__":
    main()
