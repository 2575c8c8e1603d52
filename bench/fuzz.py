"""Fuzz the C runtime with libFuzzer (+ ASAN + UBSAN): graph.json, params.bin, .npy, whole
bundles and the accelerator's kernels/program.accel (c_runtime/fuzz/).

Seed corpora come from real bundles, packaged here from examples/tiny_cnn.onnx and two
examples/networks.py nets; the bundle fuzzer links tiny_cnn's generated kernels. Needs
clang and its fuzzer runtime (scripts/setup.sh installs them).

    python bench/fuzz.py                         # each fuzzer 10 minutes, one at a time
    python bench/fuzz.py --seconds 60 --only graph bundle --work /tmp/fuzz

Crashing inputs are written to WORK/crashes/<fuzzer>/; the script exits 1 if any.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

FUZZERS = ("graph", "params", "npy", "bundle", "accel_program")


def _models(tmp: Path) -> dict[str, Path]:
    import networks
    import onnx

    nets = {
        "mobilenet": networks.mobilenet_v2(seed=1, width=0.25, size=32, classes=10),
        "resnet": networks.resnet(seed=2, blocks=(1, 1), width=8, size=32, classes=10, groups=2),
    }
    paths = {"tiny_cnn": ROOT / "examples" / "tiny_cnn.onnx"}
    paths["control"] = tmp / "control.onnx"
    onnx.save(_control_flow_model(), paths["control"])
    for name, model in nets.items():
        paths[name] = tmp / f"{name}.onnx"
        onnx.save(model, paths[name])
    return paths


def _control_flow_model():
    """A model whose graph is control-flow nodes only (an If on an input, a Loop carrying a
    value and stacking a scan output), so the graph fuzzer reaches their subgraphs with any
    kernel table."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    vi = helper.make_tensor_value_info
    then = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"])], "then", [], [vi("t", T.FLOAT, [4])]
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", T.FLOAT, [4])]
    )
    body = helper.make_graph(
        [
            helper.make_node("Add", ["a", "y"], ["a2"]),
            helper.make_node("Identity", ["c"], ["c2"]),
            helper.make_node("Sigmoid", ["a2"], ["s"]),
        ],
        "body",
        [vi("i", T.INT64, []), vi("c", T.BOOL, []), vi("a", T.FLOAT, [4])],
        [vi("c2", T.BOOL, []), vi("a2", T.FLOAT, [4]), vi("s", T.FLOAT, [4])],
    )
    nodes = [
        helper.make_node("If", ["go"], ["y"], then_branch=then, else_branch=other),
        helper.make_node("Loop", ["m", "", "x"], ["acc", "scan"], body=body),
    ]
    graph = helper.make_graph(
        nodes,
        "control",
        [vi("go", T.BOOL, []), vi("x", T.FLOAT, [4])],
        [vi("acc", T.FLOAT, [4]), vi("scan", T.FLOAT, [3, 4])],
        [numpy_helper.from_array(np.array(3, np.int64), "m")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _npy_payload(path: Path) -> bytes:
    import numpy as np

    return np.ascontiguousarray(np.load(path)).tobytes()


def make_seeds(work: Path) -> Path:
    """Packages the models under WORK/bundles and writes WORK/corpus/<fuzzer>/ seeds;
    returns the directory of tiny_cnn's kernels (what the fuzzers link)."""
    from packager.cli import main

    bundles = work / "bundles"
    corpus = {f: work / "corpus" / f for f in FUZZERS}
    for d in corpus.values():
        d.mkdir(parents=True, exist_ok=True)
    for name, model in _models(work).items():
        out = bundles / name
        if not (out / "graph.json").exists():
            code = main(["build", str(model), "--board", "host", "-o", str(out)])
            if code != 0:
                raise SystemExit(f"fuzz: packaging {name} failed")
        gj = (out / "graph.json").read_bytes()
        params = (out / "params.bin").read_bytes()
        (corpus["graph"] / name).write_bytes(gj)
        (corpus["graph"] / f"{name}.min").write_bytes(json.dumps(json.loads(gj)).encode())
        (corpus["params"] / name).write_bytes(params)
        for npy in sorted((out / "selftest").glob("*.npy")):
            (corpus["npy"] / f"{name}_{npy.name}").write_bytes(npy.read_bytes())
        data = b"".join(_npy_payload(p) for p in sorted((out / "selftest").glob("input_*.npy")))
        sections = struct.pack("<I", len(gj)) + gj + struct.pack("<I", len(params)) + params
        (corpus["bundle"] / name).write_bytes(sections + data)
    for name, raw in _accel_seeds().items():
        (corpus["accel_program"] / name).write_bytes(raw)
    return bundles / "tiny_cnn" / "kernels"


def _accel_seeds() -> dict[str, bytes]:
    """Program files: one GEMM of a 16 x 16 weight tile and a 16-lane input (the node
    fuzz_accel_program checks against), alone and next to a two-row strided copy."""
    from packager.accel import isa
    from packager.accel.program import UOPS, AccelConfig, Program, write_programs

    one = {"y_size": 1, "x_size": 1, "x_stride": 1}
    loop = {"uop_bgn": 0, "uop_end": 1, "iter_out": 1, "iter_in": 1}
    gemm = Program(
        "k_gemm",
        3,
        [
            {"opcode": isa.LOAD, "buffer": isa.UOP, **one},
            {"opcode": isa.LOAD, "buffer": isa.INP, **one},
            {"opcode": isa.LOAD, "buffer": isa.WGT, "push_next": 1, **one},
            {"opcode": isa.GEMM, "reset": 1, **loop},
            {"opcode": isa.GEMM, "pop_prev": 1, "push_next": 1, **loop},
            {"opcode": isa.STORE, "buffer": isa.ACC, "pop_prev": 1, "push_prev": 1, **one},
            {"opcode": isa.FINISH, "pop_next": 1},
        ],
        [(0, 0, 0)],
        [(0, UOPS), (1, 0), (2, 1), (5, 2)],
    )
    copy = Program(
        "k_copy",
        3,
        [
            {"opcode": isa.LOAD, "buffer": isa.ACC, "y_size": 2, "x_size": 1, "x_stride": 0},
            {"opcode": isa.STORE, "buffer": isa.ACC, "y_size": 1, "x_size": 1, "x_stride": 1},
            {"opcode": isa.FINISH},
        ],
        [],
        [(0, 1), (1, 2)],
    )
    config = AccelConfig()
    return {
        "gemm": write_programs([gemm], config),
        "copy": write_programs([copy], config),
        "gemm_copy": write_programs([gemm, copy], config),
    }


def build_fuzzers(build: Path, kernels: Path) -> Path:
    cmake = shutil.which("cmake", path=str(Path(sys.executable).parent)) or "cmake"
    cfg = [
        cmake,
        "-S",
        str(ROOT / "c_runtime"),
        "-B",
        str(build),
        "-DPK_FUZZ=ON",
        "-DPK_BUILD_TESTS=OFF",
        "-DCMAKE_C_COMPILER=clang",
        "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        f"-DPK_FUZZ_KERNELS={kernels}",
    ]
    for cmd in (cfg, [cmake, "--build", str(build), "-j2"]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"fuzz: {' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return build


def run_fuzzer(exe: Path, corpus: Path, crashes: Path, seconds: int) -> dict:
    """Runs one fuzzer on a copy of its corpus; returns {"runs", "crashed", "log"}."""
    crashes.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "corpus"
        shutil.copytree(corpus, work)
        env = {**os.environ, "ASAN_OPTIONS": "allocator_may_return_null=1:detect_leaks=1"}
        r = subprocess.run(
            [
                str(exe),
                str(work),
                f"-max_total_time={seconds}",
                "-rss_limit_mb=2048",
                "-print_final_stats=1",
                f"-artifact_prefix={crashes}/",
            ],
            capture_output=True,
            text=True,
            env=env,
        )
    log = r.stdout + r.stderr
    runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", log)
    return {"runs": int(runs[-1]) if runs else 0, "crashed": r.returncode != 0, "log": log}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=int, default=600, help="per fuzzer")
    ap.add_argument("--only", nargs="*", choices=FUZZERS, default=list(FUZZERS))
    ap.add_argument("--work", type=Path, default=None, help="kept corpora, builds, crashes")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="pk_fuzz_"))
    kernels = make_seeds(work)
    build = build_fuzzers(work / "build", kernels)
    failed = False
    for name in args.only:
        res = run_fuzzer(
            build / f"fuzz_{name}",
            work / "corpus" / name,
            work / "crashes" / name,
            args.seconds,
        )
        print(
            f"fuzz_{name}: {res['runs']} runs in {args.seconds} s: "
            f"{'CRASH' if res['crashed'] else 'no crash'}"
        )
        if res["crashed"]:
            print(res["log"][-4000:])
            failed = True
    print(f"fuzz: work directory {work}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
