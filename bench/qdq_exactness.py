"""How exactly int8 bundles compute a QDQ model, against its arithmetic in float64.

For each model (torchvision's ResNet-18 and MobileNetV2 architectures, random weights,
quantized as bench/compare_int8.py does: onnxruntime's quantize_static, per-channel int8
weights, uint8 activations) and random inputs, the logits (the last DequantizeLinear's
output, on a grid of its scale: one step) of

- ours: the int8 bundle (packager.backend, the host board),
- ORT exact: ONNX Runtime with graph optimizations off (dequantize, compute in float32),
- ORT: ONNX Runtime optimized (its own integer kernels),
- onnx float32: onnx's reference evaluator on the model as written,

each against the model's arithmetic in float64 (packager/quantize/exact.py): the share of
logits within one step and the share equal, the lowest and the median over the inputs.
The last column is ours against ORT exact (within one step).

    python bench/qdq_exactness.py --models tv_mobilenet_v2 tv_resnet18 --inputs 8
    python bench/qdq_exactness.py --weight-bits 7
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_int8 as ci  # noqa: E402

SIDES = ("ours", "ort_exact", "ort", "onnx_f32")


def sessions(qdq: onnx.ModelProto) -> dict:
    """side -> (float32 input -> logits)."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    from packager.backend import PackagerBackend
    from packager.quantize.exact import float64_copy

    def ort_run(level):
        o = ort.SessionOptions()
        o.graph_optimization_level, o.intra_op_num_threads = level, 1
        s = ort.InferenceSession(qdq.SerializeToString(), o, providers=["CPUExecutionProvider"])
        return lambda x: s.run(None, {name: x})[0]

    name = qdq.graph.input[0].name
    # onnx's evaluator knows QuantizeLinear from opset 19 on; float64_copy lifts the opset
    # too, so the float32 evaluator takes the same lift and nothing else
    f32 = onnx.ModelProto()
    f32.CopyFrom(qdq)
    for op in f32.opset_import:
        if op.domain in ("", "ai.onnx"):
            op.version = max(op.version, 21)
    ref32 = ReferenceEvaluator(f32)
    ref64 = ReferenceEvaluator(float64_copy(qdq))
    ours = PackagerBackend.prepare(qdq)
    return {
        "ours": lambda x: ours.run([x])[0],
        "ort_exact": ort_run(ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
        "ort": ort_run(ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
        "onnx_f32": lambda x: ref32.run(None, {name: x})[0],
        "f64": lambda x: ref64.run(None, {name: x})[0],
    }


def logits_step(qdq: onnx.ModelProto) -> float:
    last = [n for n in qdq.graph.node if n.op_type == "DequantizeLinear"][-1]
    assert last.output[0] == qdq.graph.output[0].name, "the logits are not dequantized"
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in qdq.graph.initializer}
    return float(inits[last.input[1]])


def measure(name: str, size: int, inputs: int, weight_bits: int) -> dict:
    from packager.quantize.exact import step_agreement

    shape = (1, 3, size, size)
    with tempfile.TemporaryDirectory() as d:
        qdq = ci.quantize(ci.MODELS[name](size), Path(d), shape, weight_bits)
    step, run = logits_step(qdq), sessions(qdq)
    rows = {s: ([], []) for s in SIDES}
    vs_exact = []
    rng = np.random.default_rng(7)
    for _ in range(inputs):
        x = rng.uniform(0, 1, shape).astype(np.float32)
        out = {s: run[s](x) for s in (*SIDES, "f64")}
        for s in SIDES:
            within, equal = step_agreement(out[s], out["f64"], step)
            rows[s][0].append(within)
            rows[s][1].append(equal)
        vs_exact.append(step_agreement(out["ours"], out["ort_exact"], step)[0])
    return {"rows": rows, "vs_exact": vs_exact, "step": step}


def pct(values: list[float]) -> str:
    return f"{100 * min(values):6.2f} {100 * statistics.median(values):6.2f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["tv_mobilenet_v2", "tv_resnet18"])
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--inputs", type=int, default=8)
    p.add_argument("--weight-bits", type=int, choices=(8, 7), default=8)
    args = p.parse_args(argv)
    print(
        "against the float64 arithmetic: % within one step, % equal (lowest, median over "
        f"{args.inputs} inputs); {args.weight_bits}-bit weights, uint8 activations"
    )
    head = "".join(f" | {s:>27s}" for s in SIDES)
    print(f"{'model':18s}{head} | ours vs ORT exact within")
    for name in args.models:
        r = measure(name, args.size, args.inputs, args.weight_bits)
        cells = "".join(f" | {pct(r['rows'][s][0])} {pct(r['rows'][s][1])}" for s in SIDES)
        print(f"{name:18s}{cells} | {pct(r['vs_exact'])}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
