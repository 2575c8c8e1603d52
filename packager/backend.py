"""An ONNX backend (onnx.backend.base) that runs models through the real path:
import, lower, write a bundle, compile its kernels and the C runtime, run run_bundle."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from .bundle import write_bundle_files
from .errors import PackagerError
from .names import safe_name
from .native import build_run_bundle
from .package import compile_model


class PackagerRep(BackendRep):
    def __init__(self, tmp: tempfile.TemporaryDirectory, exe: Path, inputs, outputs):
        self._tmp = tmp  # keeps the bundle alive as long as the rep
        self.bundle = Path(tmp.name) / "bundle"
        self.exe = exe
        self.inputs = inputs
        self.outputs = outputs

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            arrays = [inputs[n] for n in self.inputs]
        else:
            arrays = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if len(arrays) != len(self.inputs):
            raise PackagerError(f"expected {len(self.inputs)} inputs, got {len(arrays)}")
        with tempfile.TemporaryDirectory() as d:
            cmd = [str(self.exe), str(self.bundle), "--output-dir", f"{d}/out"]
            for k, (name, a) in enumerate(zip(self.inputs, arrays, strict=True)):
                path = f"{d}/in{k}.npy"
                np.save(path, np.asarray(a, order="C"), allow_pickle=False)
                cmd += ["--input", f"{name}={path}"]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if r.returncode != 0:
                raise RuntimeError(
                    f"run_bundle failed ({r.returncode}): {r.stderr.strip()[-2000:]}"
                )
            return tuple(np.load(f"{d}/out/{safe_name(n)}.npy") for n in self.outputs)


class PackagerBackend(Backend):
    @classmethod
    def prepare(
        cls,
        model: onnx.ModelProto,
        device: str = "CPU",
        input_shapes=None,
        conv_algorithm: str | None = None,
        board=None,
        **kwargs,
    ) -> PackagerRep:
        """``board``: a boards.Board to compile for (default: the host); one with an
        opencl section runs its kernels on this machine's OpenCL device."""
        super().prepare(model, device, **kwargs)
        compiled = compile_model(
            model, board, input_shapes=input_shapes, conv_algorithm=conv_algorithm
        )
        tmp = tempfile.TemporaryDirectory(prefix="packager-backend-")
        bundle = Path(tmp.name) / "bundle"
        bundle.mkdir()
        write_bundle_files(bundle, compiled, {}, None)
        exe = build_run_bundle(bundle)
        return PackagerRep(tmp, exe, compiled.graph.inputs, compiled.graph.outputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device in ("CPU", "cpu")


prepare = PackagerBackend.prepare
run_model = PackagerBackend.run_model
run_node = PackagerBackend.run_node
supports_device = PackagerBackend.supports_device
