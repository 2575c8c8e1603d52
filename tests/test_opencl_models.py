"""Whole models for the host-opencl board: kernels run on this machine's OpenCL device
(PoCL), the others on the CPU, and the outputs match onnx's light zoo and ONNX Runtime."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import networks
import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from packager.boards import load_board
from packager.bundle import write_bundle_files
from packager.package import compile_model

from .helpers import ort_outputs, run_model
from .test_models import LIGHT, SLOW, ZOO, dummy_input

BOARD = load_board("host-opencl")


def gpu_share(compiled) -> float:
    device = {k.func: k.device for k in compiled.kernels}
    return sum(device[f] == "opencl" for f in compiled.funcs) / len(compiled.funcs)


@pytest.mark.parametrize(
    "name", [pytest.param(z, marks=pytest.mark.slow) if z in SLOW else z for z in ZOO]
)
def test_light_zoo_on_opencl(name):
    model = onnx.load(LIGHT / f"light_{name}.onnx")
    inits = {t.name for t in model.graph.initializer}
    feeds = {vi.name: dummy_input(vi) for vi in model.graph.input if vi.name not in inits}
    expected = numpy_helper.to_array(onnx.load_tensor(str(LIGHT / f"light_{name}_output_0.pb")))
    (got,) = run_model(model, feeds, board=BOARD)
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-5)


NETS = {
    "mobilenet_v2": lambda: networks.mobilenet_v2(seed=1),
    "resnet18": lambda: networks.resnet(seed=2, blocks=(2, 2, 2, 2), width=16, size=64),
}


@pytest.mark.parametrize("name", sorted(NETS))
def test_cnns_match_onnxruntime_mostly_on_the_gpu(name):
    model = NETS[name]()
    compiled = compile_model(model, BOARD)
    assert gpu_share(compiled) >= 0.9, [(k.func, k.cpu_reason) for k in compiled.kernels]
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    (want,) = ort_outputs(model, {"input": x})
    (got,) = run_model(model, {"input": x}, board=BOARD)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_bundle_carries_the_program_and_each_nodes_device(tmp_path):
    compiled = compile_model(networks.tiny_cnn(seed=3), BOARD)
    write_bundle_files(tmp_path, compiled, {}, None)
    graph = json.loads((tmp_path / "graph.json").read_text())
    devices = {n["func"]: n.get("device", "cpu") for n in graph["nodes"] if n["op"] == "kernel"}
    program = (tmp_path / "kernels" / "program.cl").read_text()
    registry = (tmp_path / "kernels" / "registry.c").read_text()
    on_gpu = sorted(f for f, d in devices.items() if d == "opencl")
    assert on_gpu and set(devices.values()) <= {"cpu", "opencl"}
    # each GPU kernel is defined in program.cl and has no C file; each CPU one the reverse
    for func, device in devices.items():
        in_program = f"__kernel void {func}(" in program
        assert in_program == (device == "opencl")
        assert (tmp_path / "kernels" / f"{func}.c").exists() == (device == "cpu")
    table = re.findall(r'\{"(k_\w+)", "[^"]*", \{\d+, \d+, \d+\}, \{\d+, \d+, \d+\}\}', registry)
    assert table == on_gpu
    assert "set(PK_OPENCL ON)" in (tmp_path / "bundle.cmake").read_text()
    # the registry's string is program.cl, byte for byte
    literal = registry.split("pk_cl_program_source[] =", 1)[1].split(";\n", 1)[0]
    text = "".join(json.loads(s) for s in re.findall(r'^    (".*")$', literal, re.M))
    assert text == program


def test_cpu_only_board_bundle_has_no_opencl(tmp_path):
    compiled = compile_model(networks.tiny_cnn(seed=3), load_board("host"))
    write_bundle_files(tmp_path, compiled, {}, None)
    assert not (tmp_path / "kernels" / "program.cl").exists()
    assert "pk_cl_" not in (tmp_path / "kernels" / "registry.c").read_text()
    assert "set(PK_OPENCL" not in (tmp_path / "bundle.cmake").read_text()


def test_inspect_plan_shows_placement(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(networks.tiny_cnn(seed=3), path)
    cmd = [sys.executable, "-m", "packager.cli", "inspect", str(path), "--plan"]
    out = subprocess.run([*cmd, "--board", "host-opencl"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert re.search(r"k_0_\w+ +opencl +conv2d", out.stdout)
    assert re.search(r"on the GPU: \d+ of \d+ kernel calls", out.stdout)
    cpu = subprocess.run([*cmd, "--board", "host"], capture_output=True, text=True)
    assert "device" not in cpu.stdout.splitlines()[1] and "on the GPU" not in cpu.stdout
