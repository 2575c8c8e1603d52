"""Accuracy of `packager quantize`: fp32 against int8 (QDQ) on real and synthetic data.

1. A small CNN (conv 3x3 + relu + max pool + dense) trained in numpy on scikit-learn's
   digits (8x8 images, 10 classes), exported with onnx.helper, quantized with every method
   and activation type through the CLI (calibrated on the training split), and scored on the
   test split in ONNX Runtime: top-1 fp32 and int8. The int8 model is also built with
   `packager build --board host` and run; the column says why when the build refuses it.
2. ResNet-18- and MobileNetV2-style networks of examples/networks.py (random weights),
   calibrated on random inputs: int8-vs-fp32 top-1 agreement and output cosine similarity
   on other random inputs.

    pip install -e .[bench]
    python bench/quantize_accuracy.py                  # everything
    python bench/quantize_accuracy.py --no-networks --no-build
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT))

import networks  # noqa: E402

from packager.quantize import quantize_model  # noqa: E402
from packager.quantize.samples import random_samples  # noqa: E402

CHANNELS, CLASSES = 16, 10
METHODS = ("minmax", "percentile", "entropy")


def digits_split(seed: int = 0):
    """(x_train, y_train, x_test, y_test): images as float32 [N, 1, 8, 8] in [0, 1]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    return train_test_split(x, d.target, test_size=0.25, random_state=seed, stratify=d.target)


def _cols(x: np.ndarray) -> np.ndarray:
    """3x3 patches with zero padding: [N, 64, 9], patch index dy * 3 + dx."""
    p = np.pad(x[:, 0], ((0, 0), (1, 1), (1, 1)))
    return np.stack([p[:, dy : dy + 8, dx : dx + 8] for dy in range(3) for dx in range(3)], -1)


def _forward(params, cols):
    wc, bc, wd, bd = params
    z = cols.reshape(len(cols), 64, 9) @ wc.T + bc  # [N, 64, C]
    a = np.maximum(z, 0).reshape(-1, 4, 2, 4, 2, CHANNELS)
    pooled = a.max(axis=(2, 4))  # [N, 4, 4, C]
    flat = pooled.transpose(0, 3, 1, 2).reshape(len(cols), -1)  # ONNX Flatten of NCHW
    return z, a, pooled, flat, flat @ wd.T + bd


def _grads(params, cols, y):
    wc, bc, wd, bd = params
    n = len(cols)
    z, a, pooled, flat, logits = _forward(params, cols)
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(n), y] -= 1
    dlogits = p / n
    dflat = (dlogits @ wd).reshape(n, CHANNELS, 4, 4).transpose(0, 2, 3, 1)
    mask = a == pooled[:, :, None, :, None, :]
    dz = (mask * dflat[:, :, None, :, None, :]).reshape(n, 64, CHANNELS) * (z > 0)
    cols = cols.reshape(n, 64, 9)
    return [
        np.einsum("npk,npj->kj", dz, cols),
        dz.sum((0, 1)),
        dlogits.T @ flat,
        dlogits.sum(0),
    ]


def train(x, y, epochs: int = 30, lr: float = 0.05, batch: int = 32, seed: int = 0):
    """SGD with momentum; the parameters as float32 arrays (conv [C, 9], dense [10, 16C])."""
    rng = np.random.default_rng(seed)
    params = [
        rng.standard_normal((CHANNELS, 9)) * (2 / 9) ** 0.5,
        np.zeros(CHANNELS),
        rng.standard_normal((CLASSES, 16 * CHANNELS)) * (2 / (16 * CHANNELS)) ** 0.5,
        np.zeros(CLASSES),
    ]
    velocity = [np.zeros_like(p) for p in params]
    cols = _cols(x)
    for _ in range(epochs):
        order = rng.permutation(len(x))
        for i in range(0, len(x), batch):
            idx = order[i : i + batch]
            for p, v, g in zip(params, velocity, _grads(params, cols[idx], y[idx]), strict=True):
                v *= 0.9
                v -= lr * g
                p += v
    return [p.astype(np.float32) for p in params]


def export(params) -> onnx.ModelProto:
    """image [N, 1, 8, 8] -> Conv 3x3 -> Relu -> MaxPool 2 -> Flatten -> Gemm -> logits."""
    wc, bc, wd, bd = params
    inits = [
        numpy_helper.from_array(wc.reshape(CHANNELS, 1, 3, 3), "conv_w"),
        numpy_helper.from_array(bc, "conv_b"),
        numpy_helper.from_array(wd, "fc_w"),
        numpy_helper.from_array(bd, "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("MaxPool", ["relu"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "digits_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", CLASSES])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def ort_run(model: onnx.ModelProto | str, feeds: dict) -> np.ndarray:
    import onnxruntime as ort

    data = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def top1(logits: np.ndarray, y: np.ndarray) -> float:
    return 100.0 * float(np.mean(logits.argmax(1) == y))


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "packager.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def build_top1(qpath: Path, x_test, y_test, work: Path) -> tuple[float | None, str]:
    """Top-1 of the int8 model built for the host board, or None and why not."""
    out = work / f"{qpath.stem}.bundle"
    shape = ",".join(map(str, x_test.shape))
    b = cli("build", qpath, "--board", "host", "-o", out, "--input-shape", f"image={shape}")
    if b.returncode:
        return None, " ".join(b.stderr.split()) or "build failed"
    np.save(work / "test.npy", x_test)
    r = cli("run", out, "--board", "host", "--input", f"image={work / 'test.npy'}",
            "--output-dir", work / "res")  # fmt: skip
    if r.returncode:
        return None, " ".join(r.stderr.split()) or "run failed"
    return top1(np.load(work / "res" / "logits.npy"), y_test), ""


def digits_bench(epochs: int, build: bool, weight_bits: int = 8) -> list[dict]:
    x_tr, x_te, y_tr, y_te = digits_split()
    t = time.perf_counter()
    model = export(train(x_tr, y_tr, epochs))
    print(f"digits: trained {epochs} epochs in {time.perf_counter() - t:.1f} s "
          f"({len(x_tr)} train, {len(x_te)} test images)")  # fmt: skip
    fp32 = top1(ort_run(model, {"image": x_te}), y_te)
    rows, refusal = [], None
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        onnx.save(model, work / "digits.onnx")
        (work / "calib").mkdir()
        np.save(work / "calib" / "train.npy", x_tr)  # one batch: the batch dim is symbolic
        for act in ("uint8", "int8"):
            for method in METHODS:
                qpath = work / f"digits.{method}.{act}.onnx"
                q = cli("quantize", work / "digits.onnx", "-o", qpath, "--calib",
                        work / "calib", "--method", method, "--activations", act,
                        "--weight-bits", str(weight_bits))  # fmt: skip
                if q.returncode:
                    raise SystemExit(f"quantize failed: {q.stderr}")
                row = {"method": method, "activations": act, "fp32": fp32}
                row["int8"] = top1(ort_run(str(qpath), {"image": x_te}), y_te)
                if build and refusal is None:
                    row["build"], refusal = build_top1(qpath, x_te, y_te, work)
                    refusal = refusal or None
                rows.append(row)
    print_digits(rows, build, refusal)
    return rows


def print_digits(rows: list[dict], build: bool, refusal: str | None) -> None:
    print(f"{'method':<11}{'acts':<7}{'fp32 top-1':>11}{'int8 top-1':>11}{'delta':>7}"
          f"{'build top-1':>13}")  # fmt: skip
    for r in rows:
        b = "-" if r.get("build") is None else f"{r['build']:.2f}"
        print(f"{r['method']:<11}{r['activations']:<7}{r['fp32']:>11.2f}{r['int8']:>11.2f}"
              f"{r['int8'] - r['fp32']:>+7.2f}{b:>13}")  # fmt: skip
    if not build:
        print("build column skipped (--no-build)")
    elif refusal:
        print(
            f"build column skipped: `packager build --board host` refused the int8 model: {refusal}"
        )


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    return float(np.mean((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))


def network_bench(calib: int, evals: int, weight_bits: int = 8) -> None:
    nets = {
        "resnet18 (64x64)": networks.resnet(size=64),
        "mobilenet_v2 (96x96)": networks.mobilenet_v2(),
    }
    print(f"\nrandom-weight networks: calibrated on {calib} random inputs, compared on "
          f"{evals} others (outputs: softmax)")  # fmt: skip
    print(f"{'network':<22}{'method':<11}{'acts':<7}{'top-1 agree':>12}{'cosine':>9}")
    for name, model in nets.items():
        calib_set = random_samples(calib, model, seed=0)
        evals_set = random_samples(evals, model, seed=1)
        ref = np.concatenate([ort_run(model, s) for s in evals_set])
        for act in ("uint8", "int8"):
            for method in METHODS:
                q, _ = quantize_model(
                    model, calib_set, method, activations=act, weight_bits=weight_bits
                )
                got = np.concatenate([ort_run(q, s) for s in evals_set])
                agree = 100.0 * float(np.mean(ref.argmax(1) == got.argmax(1)))
                print(f"{name:<22}{method:<11}{act:<7}{agree:>11.1f}%{cosine(ref, got):>9.4f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--no-build", action="store_true", help="skip the packager build column")
    ap.add_argument("--no-networks", action="store_true", help="only the digits CNN")
    ap.add_argument("--calib", type=int, default=16, help="random calibration inputs")
    ap.add_argument("--evals", type=int, default=32, help="random comparison inputs")
    ap.add_argument(
        "--weight-bits", type=int, choices=(8, 7), default=8, help="`packager quantize` weights"
    )
    args = ap.parse_args(argv)
    digits_bench(args.epochs, not args.no_build, args.weight_bits)
    if not args.no_networks:
        network_bench(args.calib, args.evals, args.weight_bits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
