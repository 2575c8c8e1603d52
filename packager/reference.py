"""Reference outputs computed on the host, for selftest/ and for checks."""

from __future__ import annotations

import numpy as np
import onnx


def run_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The model's outputs for ``feeds``: ONNX Runtime when installed, else onnx's
    reference evaluator with our corrections (slower, always there)."""
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    if ort is not None:
        try:
            opts = ort.SessionOptions()
            opts.log_severity_level = 3
            sess = ort.InferenceSession(
                model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
            )
            return [np.asarray(o) for o in sess.run(None, feeds)]
        except Exception:  # an op or opset ORT lacks: the evaluator may still know it
            pass
    return [np.asarray(o) for o in evaluator(model).run(None, feeds)]


def evaluator(model: onnx.ModelProto):
    """onnx's reference evaluator for ``model``, with the ops it gets wrong replaced by
    ours (reference_ops), which follow the ONNX spec at every opset."""
    from onnx.reference import ReferenceEvaluator

    from .reference_ops import NEW_OPS

    return ReferenceEvaluator(model, new_ops=NEW_OPS)


def random_input(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Deterministic test data: floats in [-1, 1), small non-negative integers, booleans."""
    if dtype.startswith("float"):
        return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    return rng.integers(0, 4, size=shape).astype(dtype)
