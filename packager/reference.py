"""Reference outputs computed on the host, for selftest/ and for checks."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx


def run_reference(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], say=None
) -> list[np.ndarray]:
    """The model's outputs for ``feeds``: ONNX Runtime when installed, else onnx's
    reference evaluator with our corrections (slower, always there). ONNX Runtime runs in
    a process of its own: a model can crash it (1.32 dies of SIGSEGV on Silero VAD with
    its sample rate frozen), and that must not take the packager down; then ``say`` gets
    one line and the evaluator answers."""
    outputs = _ort_outputs(model, feeds, say or (lambda msg: None))
    if outputs is not None:
        return outputs
    with np.errstate(all="ignore"):  # exp overflowing to inf in a sigmoid is no news
        return [np.asarray(o) for o in evaluator(model).run(None, feeds)]


# The child: the model and the feeds in, the outputs out (files in one directory); exit
# 3 when ONNX Runtime is missing or refuses the model (an op or opset it lacks).
_CHILD = """
import sys, numpy as np
d = sys.argv[1]
try:
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(d + "/model.onnx", opts, providers=["CPUExecutionProvider"])
    with np.load(d + "/in.npz", allow_pickle=False) as f:
        names = [str(n) for n in f["names"]]
        feeds = {n: f[f"a{k}"] for k, n in enumerate(names)}
    outs = [np.asarray(o) for o in sess.run(None, feeds)]
except Exception:
    sys.exit(3)
np.savez(d + "/out.npz", *outs)
"""


def _ort_outputs(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], say, child: str = _CHILD
) -> list | None:
    """ONNX Runtime's outputs from a child process (``child``, the script it runs);
    None when it cannot give them."""
    try:
        if importlib.util.find_spec("onnxruntime") is None:
            return None
    except ImportError:  # an import hook that refuses it: as if not installed
        return None
    with tempfile.TemporaryDirectory(prefix="packager-reference-") as d:
        Path(d, "model.onnx").write_bytes(model.SerializeToString())
        arrays = {f"a{k}": np.asarray(v) for k, v in enumerate(feeds.values())}
        np.savez(Path(d, "in.npz"), names=np.array(list(feeds), dtype=str), **arrays)
        r = subprocess.run([sys.executable, "-c", child, d], capture_output=True, text=True)
        if r.returncode < 0:
            sig = signal.Signals(-r.returncode).name
            say(
                f"ONNX Runtime crashed ({sig}) running the model for the reference; "
                f"using onnx's reference evaluator instead"
            )
            return None
        if r.returncode != 0:
            return None
        with np.load(Path(d, "out.npz"), allow_pickle=True) as f:
            return [f[f"arr_{k}"] for k in range(len(f.files))]


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
