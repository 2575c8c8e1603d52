"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

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
