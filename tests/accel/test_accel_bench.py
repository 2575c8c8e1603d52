"""`packager bench` on an accelerator board: the accelerator's layers (cycles, time at the
profile's clock, GEMM utilisation) beside the same layers of a `--cpu-only` bundle of the
same model as the board's CPU ran them; `build --cpu-only`; integer kernels' op counts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest

from packager.cli import main
from packager.layer_compare import compare, model_estimate, pair_bundles, table
from tests.accel.test_place_accel import quantized_resnet


def _kernel(func, nodes, calls, ms, device="cpu", cycles=None, util=0.5, flops=0.0):
    k = {"func": func, "nodes": nodes, "calls": calls, "median_ms": ms, "device": device}
    k.update(ops=[func.split("_", 2)[-1]], flops=flops)
    if cycles is not None:
        k["accel"] = {"cycles": cycles, "gemm_utilisation": util}
    return k


def test_compare_matches_layers_by_node_and_times_cycles_at_the_clock():
    accel = {
        "kernels": [
            _kernel("k_1_accel_conv2d", ["a", "b"], 2, 9.0, "accel", 50_000, 0.8, 2e6),
            _kernel("k_2_accel_dense", ["d"], 1, 1.0, "accel", 2_000, 0.1, 2e3),
            _kernel("k_0_pack", ["p"], 1, 0.25),
            _kernel("k_3_softmax", ["s"], 1, 0.5),
        ]
    }
    cpu = {
        "kernels": [
            _kernel("k_1_qconv2d", ["a"], 1, 0.3),
            _kernel("k_4_qconv2d", ["b"], 1, 0.2),
            _kernel("k_5_pool", ["x", "y"], 2, 0.8),  # not an accelerator layer
        ]
    }
    rows = compare(accel, 100.0, cpu)
    assert [r.func for r in rows] == ["k_1_accel_conv2d", "k_2_accel_dense"]  # slowest first
    conv, dense = rows
    assert conv.accel_ms == pytest.approx(0.5) and conv.macs == 1e6  # 50,000 cycles at 100 MHz
    assert conv.cpu_ms == pytest.approx(0.5) and conv.cpu_ops == "qconv2d"
    assert dense.cpu_ms is None  # no CPU kernel has node "d": not a guess
    # the accelerated model: CPU kernels as measured (0.75 ms) + accelerator at the clock
    assert model_estimate(accel, rows) == pytest.approx(0.75 + 0.5 + 0.02)
    text = table(rows, 100.0).splitlines()
    assert "ms @100 MHz" in text[0]
    assert re.search(
        r"k_1_accel_conv2d\s+a \(\+1\)\s+1\.00\s+50000\s+0\.5000\s+80\.0%\s+0\.5000\s+1\.00x",
        text[1],
    )
    assert text[2].split()[-2:] == ["-", "-"]
    # total: GEMM utilisation weighted by cycles, no CPU sum while a layer is unmatched
    assert re.search(r"total \(2\)\s+1\.00\s+52000\s+0\.5200\s+77\.3%\s+-\s+-$", text[3])


def test_shared_cpu_kernel_is_divided_per_call():
    accel = {"kernels": [_kernel("k_1_accel_conv2d", ["a"], 1, 1.0, "accel", 1000)]}
    cpu = {"kernels": [_kernel("k_2_qconv2d", ["a", "b", "c"], 3, 0.9)]}
    (row,) = compare(accel, 50.0, cpu)
    assert row.cpu_ms == pytest.approx(0.3) and row.accel_ms == pytest.approx(0.02)


def test_pairs_need_the_same_model_shapes_and_values():
    def m(sha, accel=False, cpu_only=False, shapes=None):
        doc = {"model": {"sha256": sha}, "input_shapes": shapes or {}, "input_values": {}}
        return doc | ({"accel": {}} if accel else {}) | ({"cpu_only": True} if cpu_only else {})

    manifests = [
        m("x", accel=True),
        m("y", cpu_only=True),
        m("x", cpu_only=True, shapes={"in": [1, 3, 8, 8]}),
        m("x", cpu_only=True),
        m("y", accel=True, shapes={"in": [1]}),
        m("z"),
    ]
    assert pair_bundles(manifests) == [(0, 3), (4, None)]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("accel-bench")
    model = tmp / "qr.onnx"
    onnx.save(quantized_resnet("uint8", blocks=(1, 1), width=16, size=32), model)
    out = {}
    for name, extra in (("accel", []), ("cpu", ["--cpu-only"])):
        out[name] = tmp / name
        args = ["build", str(model), "--board", "accel-sim", "-o", str(out[name]), *extra]
        assert main(args) == 0
    return out


def test_cpu_only_bundle_leaves_the_accelerator_out(bundles, capsys):
    manifest = json.loads((bundles["cpu"] / "manifest.json").read_text())
    assert manifest["cpu_only"] is True and "accel" not in manifest
    assert [t["family"] for t in manifest["targets"]] == ["cpu"]
    assert manifest["board"]["name"] == "accel-sim"
    nodes = json.loads((bundles["cpu"] / "graph.json").read_text())["nodes"]
    assert not any(n.get("device") for n in nodes)
    assert not (bundles["cpu"] / "kernels" / "program.accel").exists()
    assert "set(PK_ACCEL" not in (bundles["cpu"] / "bundle.cmake").read_text()
    # integer convs count two ops per multiply-accumulate, on the CPU and the accelerator
    accel_nodes = json.loads((bundles["accel"] / "graph.json").read_text())["nodes"]
    flops = {n["name"]: n["flops"] for n in nodes if n["op"] == "kernel"}
    on_accel = {n["name"]: n["flops"] for n in accel_nodes if n.get("device") == "accel"}
    assert len(on_accel) == 7
    for name, f in on_accel.items():
        assert f > 0 and flops[name] >= f  # the CPU kernel may fuse a dequantize too
    # stem: 16 output channels x 16 x 16 pixels (stride 2) x (3 x 7 x 7) taps per output
    assert on_accel["relu_8_quantized"] == 2 * 16 * 16 * 16 * 147


def test_cpu_only_on_a_board_without_accelerator_says_so(tmp_path, capsys):
    example = Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx"
    assert (
        main(["build", str(example), "--board", "host", "-o", str(tmp_path / "b"), "--cpu-only"])
        == 0
    )
    assert (
        "--cpu-only: board host has no GPU or accelerator, nothing changes"
        in capsys.readouterr().err
    )


def _accel_rows(out: str) -> list[list[str]]:
    lines = out.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("accel kernel"))
    return [line.split() for line in lines[start + 1 :] if line.startswith("k_")]


def test_bench_sets_accelerator_layers_beside_the_cpu(bundles, capsys):
    args = ["bench", str(bundles["accel"]), str(bundles["cpu"]), "--board", "accel-sim"]
    assert main([*args, "--repeat", "3"]) == 0
    out = capsys.readouterr().out
    assert "cycles from the simulator's cycle model at 100 MHz" in out
    assert f"CPU: the same layers of {bundles['cpu']} measured on local" in out
    rows = _accel_rows(out)
    assert len(rows) == 7
    for r in rows:  # cycles at 100 MHz, every layer matched on the CPU
        assert float(r[-4]) == pytest.approx(int(r[-5]) / 1e5, abs=1e-4)
        assert r[-2] != "-" and r[-1].endswith("x")
    assert re.search(r"^model: CPU only [\d.]+ ms; with the accelerator ~[\d.]+ ms", out, re.M)
    last = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [Path(x["bundle"]) for x in last] == [bundles["accel"], bundles["cpu"]]
    a = last[0]["accel"]
    assert a["clock_mhz"] == 100.0 and a["accel_ms"] == pytest.approx(a["cycles"] / 1e5)
    assert a["cycles"] == sum(int(r[-5]) for r in rows) and "accel" not in last[1]


def test_bench_of_the_accelerated_bundle_alone_says_how_to_get_the_cpu_side(bundles, capsys):
    assert main(["bench", str(bundles["accel"]), "--board", "accel-sim", "--repeat", "2"]) == 0
    cap = capsys.readouterr()
    rows = _accel_rows(cap.out)
    assert len(rows) == 7 and all(r[-2:] == ["-", "-"] for r in rows)
    assert "built with --cpu-only beside it" in cap.err
    assert "model: CPU only" not in cap.out
