"""bench/paired_ort.py: a bundle loaded in-process as a shared library, timed call by
call against ONNX Runtime."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from .helpers import bench_module

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _conv_model() -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)
    g = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["y"], name="relu"),
        ],
        "paired",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        [numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_summary_takes_each_pair_against_its_own_peer():
    po = bench_module("paired_ort")
    # a slow phase doubles both calls of the second pair: by medians 20 / 20 = 1.0, by
    # pairs 10/20, 40/20, 20/10 -> 0.5, 2.0, 2.0 (median 2.0)
    row = po.summary([10.0, 40.0, 20.0], [20.0, 20.0, 10.0])
    assert row["ratio_of_medians"] == 1.0 and row["pair_median"] == 2.0
    assert row["bundle_ms"] == 20.0 and row["ort_ms"] == 20.0
    lo, hi = row["pair_quartiles"]
    assert lo < row["pair_median"] <= hi


def test_pairs_alternate_which_side_goes_first():
    po = bench_module("paired_ort")
    order = []
    a, b = po.pairs(lambda: order.append("a"), lambda: order.append("b"), 3)
    assert order == ["a", "b", "b", "a", "a", "b"] and len(a) == len(b) == 3


def test_a_shared_bundle_runs_in_process_as_ort_computes(tmp_path):
    po = bench_module("paired_ort")
    row = po.bench("conv", _conv_model(), 3)
    assert row["pairs"] == 3 and row["max_abs_diff"] < 1e-4
    assert row["bundle_ms"] > 0 and row["ort_ms"] > 0
    assert row["ratio_of_medians"] == pytest.approx(row["bundle_ms"] / row["ort_ms"])


def test_against_a_second_board_rotates_three_sides_and_both_bundles_compute_as_ort():
    po = bench_module("paired_ort")
    order = []
    times = po.rotations(
        [lambda: order.append("a"), lambda: order.append("o"), lambda: order.append("b")], 2
    )
    assert order == ["a", "o", "b", "o", "b", "a"] and [len(t) for t in times] == [2, 2, 2]
    row = po.bench("conv", _conv_model(), 3, board="host", against="host-avx2")
    assert row["against"] == "host-avx2" and row["max_abs_diff"] < 1e-4
    assert row["against_ms"] > 0 and row["board_over_against"] > 0
    lo, hi = row["board_over_against_quartiles"]
    assert lo <= row["board_over_against"] <= hi


def test_the_shared_library_has_the_runtime_api_and_no_main_and_names_a_wrong_input(tmp_path):
    po = bench_module("paired_ort")
    co = po.co
    bundle, _ = co.build_bundle(_conv_model(), tmp_path)
    lib = po.build_shared_library(bundle, cflags=[*po.CFLAGS, "-O2"])
    assert lib.name == "libpk_bundle.so" and lib.parent == bundle / "build"
    dll = ctypes.CDLL(str(lib))
    assert dll.pk_graph_run and dll.pk_graph_load_dir
    with pytest.raises(AttributeError):
        dll.main  # noqa: B018 (run_bundle's tool is left out)
    g = po.SharedBundle(bundle, lib)
    try:
        with pytest.raises(RuntimeError, match="input 'nope'"):
            g.set_inputs({"nope": np.zeros((1, 3, 16, 16), np.float32)})
        with pytest.raises(RuntimeError, match="x"):
            g.set_inputs({"x": np.zeros((1, 3, 8, 8), np.float32)})  # a quarter the bytes
    finally:
        g.close()
    with pytest.raises(RuntimeError, match=str(tmp_path / "missing")):
        po.SharedBundle(tmp_path / "missing", lib)


def test_a_shared_bundle_profiles_its_kernels_and_layers_pair_them_with_ort(tmp_path):
    po = bench_module("paired_ort")
    bundle, _ = po.co.build_bundle(_conv_model(), tmp_path)
    g = po.SharedBundle(bundle, po.build_shared_library(bundle, cflags=[*po.CFLAGS, "-O2"]))
    try:
        kernels = g.kernel_nodes()
        # the conv with its ReLU (named after the Conv), then the blocked result back to
        # NCHW
        assert kernels == {"k_0_conv2d_nchwc_relu": ["conv"], "k_1_layout_transform": ["layout_y"]}
        g.set_inputs({"x": np.ones((1, 3, 16, 16), np.float32)})
        times = g.run_profiled()
        assert set(times) == set(kernels) and all(t > 0 for t in times.values())
    finally:
        g.close()
    lo = bench_module("layers_vs_ort")
    rows, unmatched, whole = lo.compare_paired(_conv_model(), "host", 3)
    assert [r[2] for r in rows] == list(kernels) and unmatched >= 0
    bundle_ms, ort_ms, _, _, ratio = rows[0]
    assert bundle_ms > 0 and ort_ms > 0 and ratio > 0 and whole > 0


def test_rotations_turn_the_order_by_one_each_round():
    po = bench_module("paired_ort")
    order = []
    sides = [lambda k=k: order.append(k) for k in "abc"]
    times = po.rotations(sides, 3)
    assert order == list("abcbcacab") and [len(t) for t in times] == [3, 3, 3]


@pytest.mark.slow
def test_int8_rounds_put_the_int8_bundle_beside_ort_and_our_fp32(tmp_path):
    po = bench_module("paired_ort")
    row = po.bench_int8("tv_mobilenet_v2", 2, 7, size=32)
    assert row["rounds"] == 2 and row["weight_bits"] == 7
    assert min(row["int8_ms"], row["ort_int8_ms"], row["fp32_ms"]) > 0
    assert row["int8_over_ort"] > 0 and row["speedup"] > 0
    lo, hi = row["int8_over_ort_quartiles"]
    assert lo <= row["int8_over_ort"] <= hi


@pytest.mark.skipif(
    not bench_module("cpuid_mask").can_mask(),
    reason="this CPU or kernel cannot fault CPUID (no cpuid_fault)",
)
def test_ort_isa_avx2_holds_the_process_before_ort_loads():
    # in a process of its own: the hold lasts as long as the process
    r = subprocess.run(
        [sys.executable, str(BENCH / "paired_ort.py"), "--models", "vad", "--pairs", "2"]
        + ["--board", "host-avx2", "--ort-isa", "avx2", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert "ORT kernels: avx2" in r.stdout
    row = json.loads(r.stdout.strip().splitlines()[-1])
    assert row["ort_isa"] == "avx2" and row["cpuid_traps"] > 0
    assert row["pairs"] == 2 and row["max_abs_diff"] < 1e-4


def test_ort_isa_refuses_what_it_cannot_hold_to():
    po = bench_module("paired_ort")
    with pytest.raises(SystemExit):
        po.main(["--models", "vad", "--ort-isa", "avx512"])
