"""The accelerator's layers of an int8 ResNet-18-style model on the simulator: one virtual
thread against two (latency hiding), per layer and in total.

The model (examples/networks.py resnet, 2-2-2-2 blocks, width 64) is quantized by the
packager's own quantizer on random calibration inputs and packaged for ``accel-sim``
exactly as ``packager build`` does; each accelerator node is then lowered with its
default tiles and ``vthreads`` 1 and 2 and run on the C behavioural simulator (the
cycle model of docs/accel.md with the profile's clock and DMA figures). Prints the
placement (share of multiply-accumulates on the accelerator), then per layer: shape,
MMACs, cycles and GEMM utilisation with one and two threads, and the ratio.

    python bench/accel_layers.py                 # 224x224 input
    python bench/accel_layers.py --size 112 --json rows.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import networks  # noqa: E402

from packager.accel.simulator import Simulator  # noqa: E402
from packager.boards import load_board  # noqa: E402
from packager.graph.passes.place_accel import placement  # noqa: E402
from packager.lowering import ACCEL_OPS, lower_accel  # noqa: E402
from packager.package import prepare_graph  # noqa: E402
from packager.quantize import quantize_model  # noqa: E402
from packager.target import AccelTarget  # noqa: E402
from packager.tune.measure import node_arrays  # noqa: E402


def quantized_resnet18(size: int):
    model = networks.resnet(blocks=(2, 2, 2, 2), width=64, size=size, classes=1000)
    rng = np.random.default_rng(0)
    samples = [
        {"input": rng.standard_normal((1, 3, size, size)).astype(np.float32)} for _ in range(2)
    ]
    return quantize_model(model, samples, activations="uint8")[0]


def layer_rows(size: int) -> tuple[list[dict], dict]:
    board = load_board("accel-sim")
    target = AccelTarget.of(board)
    graph, _ = prepare_graph(quantized_resnet18(size), board)
    sim = Simulator(target.config())
    rows = []
    for node in graph.nodes:
        if node.op not in ACCEL_OPS:
            continue
        row = {"layer": node.name, "op": node.op, "macs": int(node.attrs["macs"])}
        x, w = graph.values[node.inputs[0]].shape, graph.values[node.inputs[1]].shape
        row["shape"] = f"{x[1] * x[-1]}x{'x'.join(map(str, x[2:-1]))} k{w[2] if len(w) == 6 else 1}"
        for vt in (1, 2):
            try:
                kernel = lower_accel(node, graph, f"k_{vt}", target, {"vthreads": vt})
            except Exception as e:  # a tiling two threads cannot split
                row[f"vt{vt}"] = {"error": str(e)}
                continue
            res = sim.run(kernel.program, node_arrays(node, graph, seed=1))
            row[f"vt{vt}"] = {"cycles": res.cycles, "utilisation": res.utilisation}
        rows.append(row)
    return rows, placement(graph)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--size", type=int, default=224, help="input height and width")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = p.parse_args(argv)
    rows, placed = layer_rows(args.size)
    share = 100.0 * placed["accel_macs"] / placed["macs"]
    print(
        f"int8 ResNet-18-style {args.size}x{args.size} on accel-sim: {placed['accel_nodes']} "
        f"of {placed['nodes']} convs/dense on the accelerator, {share:.1f}% of multiply-accumulates"
    )
    print(
        f"{'layer':<34} {'shape':<14} {'MMACs':>8} {'cycles 1 vt':>12} {'cycles 2 vt':>12}"
        f" {'1/2':>5} {'GEMM util 1 -> 2':>17}"
    )
    totals = {1: 0, 2: 0}
    gemm = {1: 0.0, 2: 0.0}
    for r in rows:
        one, two = r["vt1"], r.get("vt2", {})
        if "error" in two:  # counted at one thread's cycles in both totals
            two = one
        for vt, res in ((1, one), (2, two)):
            totals[vt] += res["cycles"]
            gemm[vt] += res["utilisation"] * res["cycles"]
        print(
            f"{r['layer'][:34]:<34} {r['shape']:<14} {r['macs'] / 1e6:8.1f} {one['cycles']:12d}"
            f" {two['cycles']:12d} {one['cycles'] / two['cycles']:5.2f}"
            f" {100 * one['utilisation']:7.1f}% -> {100 * two['utilisation']:5.1f}%"
        )
    print(
        f"{'total':<34} {'':<14} {sum(r['macs'] for r in rows) / 1e6:8.1f} {totals[1]:12d}"
        f" {totals[2]:12d} {totals[1] / totals[2]:5.2f}"
        f" {100 * gemm[1] / totals[1]:7.1f}% -> {100 * gemm[2] / totals[2]:5.1f}%"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"placement": placed, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
