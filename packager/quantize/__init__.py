"""Post-training quantization: a float ONNX model to a QDQ model (int8 weights per channel,
uint8 or int8 activations, int32 biases), calibrated on sample inputs.

prepare.py folds batch norms and lifts the opset; calibrate.py observes the activations;
methods.py turns what it saw into ranges; qdq.py rewrites the graph.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import onnx

from ..errors import PackagerError
from ..safe_paths import QUANTIZED_MARKER, check_quantized_output, write_bytes_atomic
from .calibrate import collect
from .methods import METHODS, NEEDS_HISTOGRAM
from .prepare import prepare
from .qdq import (
    ACT_DTYPES,
    WEIGHT_BITS,
    Summary,
    activation_tensors,
    concat_shared_ranges,
    rewrite,
)
from .samples import directory_samples, parse_calib, random_samples

RANDOM_WARNING = (
    "warning: --calib random:{n} calibrates on random inputs; the ranges fit no real data, "
    "so use it only for testing (give a directory of real inputs for a model you deploy)"
)


def _warn(msg: str) -> None:
    print(msg, file=sys.stderr)


def load_float_model(path: str) -> onnx.ModelProto:
    try:
        model = onnx.load(path)
    except FileNotFoundError:
        raise PackagerError(f"{path}: no such file") from None
    except Exception as e:
        raise PackagerError(f"{path}: not a readable ONNX model ({e})") from None
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node):
        raise PackagerError(f"{path}: is quantized already (it has QuantizeLinear nodes)")
    return model


def _ranges(stats: dict, method: str, percentile: float, activations: str) -> dict:
    def levels(s):  # a non-negative tensor in uint8 has all 256 levels on its side of 0
        return 256 if activations == "uint8" and s.lo >= 0 else 128

    fn = METHODS[method]
    return {t: fn(s, percentile=percentile, levels=levels(s)) for t, s in stats.items()}


def quantize_model(
    model: onnx.ModelProto,
    samples: list,
    method: str = "minmax",
    percentile: float = 99.99,
    activations: str = "uint8",
    path: str = "model",
    weight_bits: int = 8,
) -> tuple[onnx.ModelProto, Summary]:
    """The QDQ model of a float ``model``, calibrated on ``samples`` (dicts of input arrays)."""
    if method not in METHODS:
        raise PackagerError(f"--method {method}: expected one of {', '.join(METHODS)}")
    if activations not in ACT_DTYPES:
        raise PackagerError(f"--activations {activations}: expected uint8 or int8")
    if not 0 < percentile <= 100:
        raise PackagerError(f"--percentile {percentile}: expected a value in (0, 100]")
    if weight_bits not in WEIGHT_BITS:
        raise PackagerError(f"--weight-bits {weight_bits}: expected 8 or 7")
    model = prepare(model, path)
    tensors = activation_tensors(model)
    stats = collect(model, tensors, samples, NEEDS_HISTOGRAM[method])
    ranges = concat_shared_ranges(model, _ranges(stats, method, percentile, activations))
    qmodel, summary = rewrite(model, ranges, activations, weight_bits)
    weights = "int8 per channel" + (", 7-bit" if weight_bits == 7 else "")
    settings = {"method": method, "activations": activations, "weights": weights}
    if method == "percentile":
        settings["percentile"] = percentile
    onnx.helper.set_model_props(qmodel, {QUANTIZED_MARKER: json.dumps(settings)})
    onnx.checker.check_model(qmodel)
    return qmodel, summary


def quantize_file(
    model_path: str,
    output: str,
    calib: str,
    method: str = "minmax",
    percentile: float = 99.99,
    activations: str = "uint8",
    warn: Callable[[str], None] = _warn,
    weight_bits: int = 8,
) -> Summary:
    """Quantize MODEL into OUTPUT; every check runs before anything is written, and OUTPUT
    appears whole (temporary file, then rename) or not at all."""
    out = check_quantized_output(output, model_path)
    model = load_float_model(model_path)
    spec = parse_calib(calib)
    if isinstance(spec, int):
        warn(RANDOM_WARNING.format(n=spec))
        samples = random_samples(spec, model)
    else:
        samples = directory_samples(spec, model)
    qmodel, summary = quantize_model(
        model, samples, method, percentile, activations, model_path, weight_bits
    )
    write_bytes_atomic(Path(out), qmodel.SerializeToString())
    return summary
