"""Run the float model on the calibration samples and collect, per activation to quantize,
its min, max and (for the percentile and entropy methods) a histogram of its non-zero |x|
and a count of its zeros.

The tensors are observed by adding them as outputs to a copy of the model. It runs in ONNX
Runtime when that is installed, else in onnx's reference evaluator (slow, but exact). Two
passes where a histogram is wanted: the first finds each tensor's range, the second bins
|x| over [0, max |x|], so every sample lands in the same bins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from .methods import BINS, Stats
from .samples import Sample

Runner = Callable[[Sample], list[np.ndarray]]


def observing(model: onnx.ModelProto, tensors: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose outputs are exactly ``tensors`` (all float)."""
    m = onnx.ModelProto.FromString(model.SerializeToString())
    del m.graph.output[:]
    m.graph.output.extend(
        helper.make_tensor_value_info(t, TensorProto.FLOAT, None) for t in tensors
    )
    return m


def make_runner(model: onnx.ModelProto) -> Runner:
    try:
        import onnxruntime as ort
    except ImportError:
        from onnx.reference import ReferenceEvaluator

        ref = ReferenceEvaluator(model)
        return lambda feeds: ref.run(None, feeds)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # the observed outputs lack shapes; ORT would warn of each
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda feeds: sess.run(None, feeds)


def collect(
    model: onnx.ModelProto,
    tensors: Sequence[str],
    samples: Sequence[Sample],
    histogram: bool,
) -> dict[str, Stats]:
    """Stats per tensor over all samples."""
    run = make_runner(observing(model, tensors))
    stats = {t: Stats(np.inf, -np.inf) for t in tensors}
    for sample in samples:
        for t, x in zip(tensors, run(sample), strict=True):
            s = stats[t]
            s.lo, s.hi = (
                min(s.lo, float(x.min(initial=np.inf))),
                max(s.hi, float(x.max(initial=-np.inf))),
            )
    for s in stats.values():
        if not np.isfinite(s.lo):  # a tensor with no elements
            s.lo = s.hi = 0.0
    if histogram:
        for s in stats.values():
            s.hist = np.zeros(BINS, np.int64)
        for sample in samples:
            for t, x in zip(tensors, run(sample), strict=True):
                s = stats[t]
                nonzero = np.abs(x[x != 0])
                s.zeros += x.size - nonzero.size
                s.hist += np.histogram(nonzero, BINS, (0.0, s.absmax or 1.0))[0]
    return stats
