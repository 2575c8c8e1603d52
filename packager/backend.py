"""An ONNX backend (onnx.backend.base) that runs models through the real path:
import, lower, write a bundle, compile its kernels and the C runtime, run run_bundle.

A model may feed, as a graph input, a value the packager needs as a constant (a Reshape's
shape, a Resize's scales, a reduction's axes, a Range's bounds: the node test suite
does). Such an input is
frozen to the value the first run gives it, as if the model had it as an initializer, and
the model is packaged then; a later run with another value for it is refused."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from .bundle import write_bundle_files
from .errors import NeedsConstantError, PackagerError
from .native import build_run_bundle, run_outputs
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
        feeds = dict(zip(self.inputs, arrays, strict=True))
        return tuple(run_outputs(self.exe, self.bundle, feeds, self.outputs))


class FrozenInputsRep(BackendRep):
    """A model packaged at its first run, its inputs named in ``frozen`` made constants
    with the values that run gives them (more join as the import asks for them)."""

    def __init__(self, model: onnx.ModelProto, frozen: set[str], build):
        self.model = model
        self.frozen = set(frozen)
        self.build = build  # model -> PackagerRep
        self.values: dict[str, np.ndarray] | None = None
        self.rep: PackagerRep | None = None

    def run(self, inputs, **kwargs):
        names = [i.name for i in runtime_inputs(self.model)]
        feeds = dict(inputs) if isinstance(inputs, dict) else dict(zip(names, inputs, strict=True))
        if self.rep is None:
            self.rep, self.values = self._package(feeds)
        for name, value in self.values.items():
            if not np.array_equal(np.asarray(feeds[name]), value):
                raise PackagerError(
                    f"input '{name}' was frozen to the value of the first run; a new value "
                    "needs a new package"
                )
        return self.rep.run({n: feeds[n] for n in self.rep.inputs})

    def _package(self, feeds):
        while True:
            values = {n: np.asarray(feeds[n]) for n in sorted(self.frozen)}
            try:
                return self.build(freeze_inputs(self.model, values)), values
            except PackagerError as e:
                more = set(must_be_constant(e)) - self.frozen
                if not more or not more <= set(feeds):
                    raise
                self.frozen |= more


def must_be_constant(e: PackagerError) -> tuple[str, ...]:
    """The values an import refused for not being constants (none for other errors)."""
    if isinstance(e, NeedsConstantError):
        return (e.input_name,)
    return getattr(e, "needs_constant", ())


def runtime_inputs(model: onnx.ModelProto):
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def freeze_inputs(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``model`` with the named graph inputs made initializers of these values."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [i for i in out.graph.input if i.name not in values]
    del out.graph.input[:]
    out.graph.input.extend(kept)
    out.graph.initializer.extend(
        onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in values.items()
    )
    return out


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
    ) -> BackendRep:
        """``board``: a boards.Board to compile for (default: the host); one with an
        opencl section runs its kernels on this machine's OpenCL device."""
        super().prepare(model, device, **kwargs)

        def build(m: onnx.ModelProto) -> PackagerRep:
            return cls._build(m, input_shapes, conv_algorithm, board)

        try:
            return build(model)
        except PackagerError as e:
            names = set(must_be_constant(e))
            if not names or not names <= {i.name for i in runtime_inputs(model)}:
                raise
            return FrozenInputsRep(model, names, build)

    @staticmethod
    def _build(model, input_shapes, conv_algorithm, board) -> PackagerRep:
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
