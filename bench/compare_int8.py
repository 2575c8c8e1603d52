"""int8 bundles against our fp32 bundle and ONNX Runtime on the same QDQ model.

For each model (ResNet-18-style, MobileNetV2-style from examples/networks.py, and the
torchvision-style exports of examples/torchvision_nets.py, ResNeXt-50's grouped convs
among them): quantize it
with onnxruntime.quantization.quantize_static (QDQ, per-channel int8 weights, uint8
activations, calibrated on random inputs), package the fp32 and the QDQ model for the
host, then alternate rounds of the int8 bundle, the fp32 bundle and ORT running the QDQ
model (graph optimizations on: its own int8 kernels), at one thread. Prints the medians,
int8/fp32 and int8/ORT (and round by round: the median, lowest and highest of the
ratios of each round's runs), and the int8 logits' top-1 agreement and cosine similarity with
fp32 over random inputs.

    python bench/compare_int8.py --models resnet18 --rounds 3 --size 224
    python bench/compare_int8.py --board host-avx2   # the AVX2 kernels (vpmaddwd, no VNNI)
    python bench/compare_int8.py --weight-bits 7     # 7-bit weights: vpmaddubsw on AVX2
    python bench/compare_int8.py --models light_shufflenet light_densenet121   # light zoo
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_ort as co  # noqa: E402

networks = co.networks

MODELS = {
    "resnet18": lambda s: networks.resnet(blocks=(2, 2, 2, 2), width=64, size=s, classes=1000),
    "mobilenet_v2": lambda s: networks.mobilenet_v2(width=1.0, size=s, classes=1000),
    # torchvision's architectures as torch.onnx.export writes them (BN folded)
    "tv_resnet18": lambda s: co.torchvision_nets.tv_resnet18(size=s),
    "tv_mobilenet_v2": lambda s: co.torchvision_nets.tv_mobilenet_v2(size=s),
    "tv_resnext50": lambda s: co.torchvision_nets.tv_resnext50_32x4d(size=s),
}
# the onnx package's light zoo (224x224, IR version 3, weights built by ConstantOfShape:
# constant, so top-1 agreement says nothing there); `packager quantize` quantizes them,
# as onnxruntime's quantize_static refuses initializers listed as graph inputs
LIGHT = ("squeezenet", "shufflenet", "inception_v1", "densenet121", "resnet50")


def _light(name: str):
    return lambda size: co.MODELS[name]()


MODELS |= {f"light_{n}": _light(n) for n in LIGHT}


def quantize_light(model: onnx.ModelProto, weight_bits: int = 8) -> onnx.ModelProto:
    """`packager quantize --calib random:4` (minmax, uint8 activations)."""
    from packager.quantize import quantize_model
    from packager.quantize.samples import random_samples

    return quantize_model(model, random_samples(4, model), weight_bits=weight_bits)[0]


def quantize(model: onnx.ModelProto, work: Path, shape, weight_bits: int = 8) -> onnx.ModelProto:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    name = model.graph.input[0].name

    class Calib(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(1)
            self.it = iter([{name: rng.uniform(0, 1, shape).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.it, None)

    raw, pre, out = work / "raw.onnx", work / "pre.onnx", work / "qdq.onnx"
    onnx.save(model, raw)
    quant_pre_process(str(raw), str(pre), skip_symbolic_shape=True)
    quantize_static(
        str(pre),
        str(out),
        Calib(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        reduce_range=weight_bits == 7,  # weights in [-64, 64]
    )
    return onnx.load(out)


def agreement(fp32: onnx.ModelProto, qdq: onnx.ModelProto, shape, n: int = 8):
    """(top-1 agreement, mean cosine similarity) of the int8 bundle's outputs with
    fp32's, through the packager's Python backend."""
    from packager.backend import PackagerBackend

    f, q = PackagerBackend.prepare(fp32), PackagerBackend.prepare(qdq)
    rng = np.random.default_rng(7)
    top, cos = [], []
    for _ in range(n):
        x = rng.uniform(0, 1, shape).astype(np.float32)
        a, b = f.run([x])[0].ravel(), q.run([x])[0].ravel()
        top.append(int(np.argmax(a) == np.argmax(b)))
        cos.append(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30)))
    return float(np.mean(top)), float(np.mean(cos))


def bench(
    name: str, size: int, rounds: int, repeat: int, board: str = "host", weight_bits: int = 8
) -> dict:
    shape = (1, 3, size, size)
    fp32 = MODELS[name](size)
    with tempfile.TemporaryDirectory() as d:
        work = Path(d)
        if name.startswith("light_"):
            qdq = quantize_light(fp32, weight_bits)
        else:
            qdq = quantize(fp32, work, shape, weight_bits)
        (work / "f").mkdir()
        (work / "q").mkdir()
        fb, fexe = co.build_bundle(fp32, work / "f", board_name=board)
        qb, qexe = co.build_bundle(qdq, work / "q", board_name=board)
        feeds = co.input_feeds(fp32)
        paths = {}
        for i, (k, v) in enumerate(feeds.items()):
            paths[k] = str(work / f"input{i}.npy")  # a name may hold '/' (gpu_0/data_0)
            np.save(paths[k], v)
        qpath = work / "qdq_run.onnx"
        onnx.save(qdq, qpath)
        t = {"int8": [], "fp32": [], "ort_int8": []}
        runs = {
            "int8": lambda: co.time_bundle(qexe, qb, paths, repeat, 1),
            "fp32": lambda: co.time_bundle(fexe, fb, paths, repeat, 1),
            "ort_int8": lambda: co.time_ort_process(qpath, paths, repeat, 1),
        }
        keys = list(runs)
        for r in range(rounds):
            for k in keys[r % 3 :] + keys[: r % 3]:
                co.settle()
                t[k].append(runs[k]())
        med = {k: statistics.median(v) for k, v in t.items()}
        top1, cos = agreement(fp32, qdq, shape)
    return {
        "model": name,
        "size": size,
        **{f"{k}_ms": round(v, 3) for k, v in med.items()},
        "int8_vs_fp32_speedup": round(med["fp32"] / med["int8"], 3),
        "int8_over_ort": round(med["int8"] / med["ort_int8"], 3),
        # round by round (co.paired): median, lowest, highest
        "int8_over_ort_rounds": [round(v, 3) for v in co.paired(t["int8"], t["ort_int8"])],
        "fp32_over_int8_rounds": [round(v, 3) for v in co.paired(t["fp32"], t["int8"])],
        "top1_agree": top1,
        "cosine": round(cos, 5),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = [m for m in MODELS if not m.startswith("light_")]
    p.add_argument("--models", nargs="+", default=default, choices=list(MODELS))
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument(
        "--board",
        default="host",
        help="the local board both bundles are built for (default host; host-avx2: the "
        "AVX2 kernels, no VNNI, on an AVX-512 machine, against ORT's own kernels for it)",
    )
    p.add_argument(
        "--weight-bits",
        type=int,
        choices=(8, 7),
        default=8,
        help="7: weights in 7 bits (onnxruntime's reduce_range, `packager quantize "
        "--weight-bits 7`), which an AVX2 CPU without VNNI multiplies with vpmaddubsw",
    )
    co.add_ort_isa(p)
    args = p.parse_args(argv)
    co.use_ort_isa(p, args)
    for name in args.models:
        row = bench(name, args.size, args.rounds, args.repeat, args.board, args.weight_bits)
        row.update(board=args.board, weight_bits=args.weight_bits, ort_isa=args.ort_isa)
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
