"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx

from packager.bundle import write_bundle_files
from packager.frontend.importer import import_onnx
from packager.lowering import lower_graph
from packager.names import safe_name
from packager.native import build_run_bundle
from packager.runner import run_local  # noqa: F401  (re-exported for tests)


def run_model(
    model: onnx.ModelProto, feeds: dict[str, np.ndarray], shapes=None
) -> list[np.ndarray]:
    """Package ``model``, build it with the compiler directly, run it, return its outputs."""
    import subprocess

    graph = import_onnx("model", shapes, model=model)
    kernels, funcs = lower_graph(graph)
    with tempfile.TemporaryDirectory() as d:
        bundle = Path(d) / "bundle"
        bundle.mkdir()
        write_bundle_files(bundle, graph, kernels, funcs, {}, None)
        exe = build_run_bundle(bundle)
        cmd = [str(exe), str(bundle), "--output-dir", f"{d}/out"]
        for k, name in enumerate(graph.inputs):
            np.save(f"{d}/in{k}.npy", feeds[name])
            cmd += ["--input", f"{name}={d}/in{k}.npy"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return [np.load(f"{d}/out/{safe_name(n)}.npy") for n in graph.outputs]


def ort_outputs(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)
