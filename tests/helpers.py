"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import importlib.util
import signal
from pathlib import Path

import numpy as np
import onnx

from packager.backend import PackagerBackend


def run_model(
    model: onnx.ModelProto,
    feeds: dict[str, np.ndarray],
    shapes=None,
    conv_algorithm=None,
    board=None,
) -> list[np.ndarray]:
    """Package ``model`` (for ``board``, default the host), build it with the compiler
    directly, run it, return its outputs."""
    rep = PackagerBackend.prepare(
        model, input_shapes=shapes, conv_algorithm=conv_algorithm, board=board
    )
    return list(rep.run(feeds))


def ort_outputs(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def unoptimized_ort_session(model):
    """ONNX Runtime with graph optimizations off, on ``model`` (a ModelProto or a path):
    a QDQ model as written (dequantize, compute in float), not ORT's fused integer
    kernels, whose AVX2 int8-activation path saturates int16 pair sums."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = model if isinstance(model, (str, Path)) else model.SerializeToString()
    return ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])


def bench_module(name: str):
    """bench/NAME.py imported as a module (bench/ is not a package)."""
    path = Path(__file__).resolve().parent.parent / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"pk_bench_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sigint_default_in_child() -> None:
    """For subprocess.Popen(preexec_fn=...): a shell without job control starts its
    background commands with SIGINT ignored (a test run started with `&`), and so every
    CLI a test starts would ignore a Ctrl-C. Interrupt tests are about a terminal's."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
