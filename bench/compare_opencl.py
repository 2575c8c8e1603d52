"""Bundle latency on an OpenCL device against OpenCV DNN's OpenCL target and ONNX Runtime.

For each model: package it for the host-opencl board (kernels with a GPU schedule run
through OpenCL, on this machine PoCL's CPU device), build run_bundle, then alternate
rounds of
  - ours:   `run_bundle --repeat N` (whole runs: host<->device copies included),
  - opencv: OpenCV DNN (classic engine, DNN_BACKEND_OPENCV + DNN_TARGET_OPENCL) timing
            N forward() calls (input set each time) in a process of its own,
  - ort:    ONNX Runtime's CPU provider, N runs in a process of its own (the reference),
  - ncnn:   ncnn's Vulkan path (fp32) on the first Vulkan device, here Mesa's lavapipe,
            the model converted from ONNX with pnnx, N extractions in a process of its own,
each round starting with the next engine, so all see the same machine noise. Prints the
machine (CPU, vector ISA, OpenCL device and driver), then per model each engine's median
and the ratios ours/peer. An engine that cannot run is reported with the reason.

PoCL runs work-groups on `--threads` threads (POCL_MAX_PTHREAD_COUNT), lavapipe as many
(LP_NUM_THREADS), OpenCV, ORT, ncnn's CPU side and the bundle's CPU kernels too.

    python bench/compare_opencl.py --setup          # installs the peers first
    python bench/compare_opencl.py --models squeezenet --rounds 5 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import compare_ort  # noqa: E402

from packager.boards import load_board  # noqa: E402
from packager.bundle import write_bundle_files  # noqa: E402
from packager.errors import PackagerError  # noqa: E402
from packager.native import CFLAGS, build_run_bundle  # noqa: E402
from packager.package import compile_model  # noqa: E402

# MobileNetV2 and ResNet-18 as torchvision shapes them (224x224, 1000 classes), and the
# SqueezeNet 1.0 of ONNX's light model zoo (its weights are constants: timing only).
MODELS = {name: compare_ort.MODELS[name] for name in ("mobilenet_v2", "resnet18", "squeezenet")}

BOARD = "host-opencl"
# Left-out peers and why, printed with every run.
LEFT_OUT = {
    "tvm": "TVM's PyPI wheels ship without the OpenCL runtime",
}
ENGINES = ("ours", "opencv", "ort", "ncnn")
# OpenCV's DNN falls back to the CPU, saying so on stderr, when it does not trust the
# OpenCL device; the benchmark refuses such a run rather than time the CPU path.
OPENCV_FALLBACK = "switching to CPU"


# --- setup -------------------------------------------------------------------------


def setup() -> None:
    """Install the peers: OpenCV, ncnn and pnnx into this interpreter's environment (numpy
    held at its version, so the packages already there are not disturbed; pnnx without
    its dependencies, which pull in PyTorch: its converter is a standalone binary) and, as
    root, PoCL, clinfo and Mesa's Vulkan drivers (lavapipe) from Debian."""
    if os.geteuid() == 0 and shutil.which("apt-get"):
        pkgs = ["pocl-opencl-icd", "ocl-icd-libopencl1", "clinfo"]
        pkgs += ["mesa-vulkan-drivers", "libvulkan1"]
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", *pkgs], check=False)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(f"numpy=={np.__version__}\n")
    pip = [sys.executable, "-m", "pip", "install", "-q", "-c", f.name]
    subprocess.run([*pip, "opencv-python-headless"], check=False)
    subprocess.run([*pip, "--no-deps", "ncnn", "pnnx"], check=False)
    os.unlink(f.name)


# --- the machine -------------------------------------------------------------------

ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "asimd", "sve")


def cpu_info() -> tuple[str, list[str]]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^(?:model name|Model)\s*:\s*(.+)$", text, re.M)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.M)
    have = set(flags.group(1).split()) if flags else set()
    return (model.group(1).strip() if model else "unknown"), [f for f in ISA_FLAGS if f in have]


def opencl_device() -> dict[str, str]:
    """The first OpenCL device's name, type, driver and platform, from clinfo (the device
    the bundle's runtime picks where there is no GPU and PACKAGER_OPENCL_DEVICE is unset)."""
    if not shutil.which("clinfo"):
        return {}
    r = subprocess.run(["clinfo"], capture_output=True, text=True)
    info = {}
    for key, field in (
        ("platform", "Platform Name"),
        ("name", "Device Name"),
        ("type", "Device Type"),
        ("driver", "Driver Version"),
        ("version", "Device Version"),
    ):
        m = re.search(rf"^\s*{field}\s+(.+?)\s*$", r.stdout, re.M)
        if m:
            info[key] = m.group(1)
    return info


def engine_env(threads: int, device: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ, PACKAGER_NUM_THREADS=str(threads))
    env["POCL_MAX_PTHREAD_COUNT"] = str(threads)
    env["POCL_CPU_MAX_CU_COUNT"] = str(threads)  # PoCL >= 4 names it so
    env["LP_NUM_THREADS"] = str(threads)  # lavapipe's rasterizer/compute threads
    # OpenCV only looks at GPUs unless told otherwise, and runs its DNN on GPUs only
    if device.get("type", "").upper().startswith("CPU"):
        env.setdefault("OPENCV_OPENCL_DEVICE", ":CPU:")
    env.setdefault("OPENCV_DNN_OPENCL_ALLOW_ALL_DEVICES", "1")
    return env


# --- engines ---------------------------------------------------------------------


class EngineUnavailable(Exception):
    pass


def build_ours(
    model: onnx.ModelProto, workdir: Path, board_name: str = BOARD
) -> tuple[Path, Path, str]:
    """(bundle, run_bundle, placement) for the board (host-opencl unless --board says)."""
    board = load_board(board_name)
    compiled = compile_model(model, board)
    bundle = workdir / "bundle"
    bundle.mkdir()
    write_bundle_files(bundle, compiled, {}, None)
    exe = build_run_bundle(bundle, cflags=[*CFLAGS, *board.toolchain.cflags])
    nodes = [
        n for n in json.loads((bundle / "graph.json").read_text())["nodes"] if n["op"] == "kernel"
    ]
    on_cl = sum(n.get("device") == "opencl" for n in nodes)
    return bundle, exe, f"{on_cl}/{len(nodes)} kernel nodes on opencl"


def run_child(cmd: list[str], env: dict[str, str], seen: dict | None = None) -> float:
    """The median the child prints last; ``seen`` gets the OpenCL device run_bundle names
    on stderr."""
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        lines = (r.stderr.strip() or r.stdout.strip() or f"exit {r.returncode}").splitlines()
        raise EngineUnavailable(lines[-1][:300])
    if OPENCV_FALLBACK in r.stderr:
        raise EngineUnavailable(next(s for s in r.stderr.splitlines() if OPENCV_FALLBACK in s))
    device = re.search(r"^opencl device: (.+)$", r.stderr, re.M)
    if device and seen is not None:
        seen["device"] = device.group(1)
    return json.loads(r.stdout.strip().splitlines()[-1])["median_ms"]


def time_ours(exe: Path, bundle: Path, inputs: dict[str, str], repeat: int, env, seen) -> float:
    cmd = [str(exe), str(bundle), "--repeat", str(repeat)]
    for name, path in inputs.items():
        cmd += ["--input", f"{name}={path}"]
    return run_child(cmd, env, seen)


def time_opencv(model_path: Path, inputs: dict[str, str], repeat: int, threads: int, env):
    cmd = [sys.executable, __file__, "--opencv-child", str(model_path), str(threads)]
    cmd += [str(repeat), *(f"{n}={p}" for n, p in inputs.items())]
    return run_child(cmd, env)


def time_ort(model_path: Path, inputs: dict[str, str], repeat: int, threads: int, env):
    cmd = [sys.executable, str(ROOT / "bench" / "compare_ort.py"), "--ort-child"]
    cmd += [str(model_path), str(threads), str(repeat)]
    cmd += [f"{n}={p}" for n, p in inputs.items()]
    return run_child(cmd, env)


def opencv_net(model_path: str, threads: int):
    import cv2

    cv2.setNumThreads(threads)
    if not cv2.ocl.haveOpenCL():
        raise SystemExit("OpenCV sees no OpenCL runtime")
    cv2.ocl.setUseOpenCL(True)
    # the classic engine: OpenCV 5's new one runs on the CPU only
    engine = getattr(cv2.dnn, "ENGINE_CLASSIC", None)
    args = (model_path,) if engine is None else (model_path, engine)
    net = cv2.dnn.readNetFromONNX(*args)
    net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    net.setPreferableTarget(cv2.dnn.DNN_TARGET_OPENCL)
    return cv2, net


def opencv_child(argv) -> int:
    model_path, threads, repeat, *inputs = argv
    cv2, net = opencv_net(model_path, int(threads))
    feeds = {}
    for item in inputs:
        name, path = item.split("=", 1)
        feeds[name] = np.load(path)

    def forward():
        for name, a in feeds.items():
            net.setInput(a, name)
        return net.forward()

    forward()  # warm-up: builds (and tunes) the OpenCL kernels
    times = []
    for _ in range(int(repeat)):
        t = time.perf_counter()
        forward()
        times.append((time.perf_counter() - t) * 1e3)
    device = cv2.ocl.Device.getDefault().name()
    print(json.dumps({"median_ms": statistics.median(times), "device": device}))
    return 0


def opencv_probe(env) -> str:
    """OpenCV's version and its default OpenCL device, as the child processes see it."""
    code = (
        "import cv2; cv2.ocl.setUseOpenCL(True); d = cv2.ocl.Device.getDefault(); "
        "print(cv2.__version__, cv2.ocl.haveOpenCL(), cv2.ocl.useOpenCL(), d.name(), "
        "d.driverVersion(), sep='|')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise EngineUnavailable(
            "OpenCV not importable (python bench/compare_opencl.py --setup installs "
            f"opencv-python-headless): {r.stderr.strip().splitlines()[-1][:200]}"
        )
    version, have, use, name, driver = r.stdout.strip().split("|")
    if have != "True" or use != "True" or not name:
        raise EngineUnavailable(f"OpenCV {version} finds no usable OpenCL device")
    return f"OpenCV {version}, OpenCL device '{name}' driver {driver}"


def pnnx_binary() -> Path | None:
    """pnnx's converter inside its package, found without importing the package (its
    Python side imports PyTorch)."""
    import importlib.util

    spec = importlib.util.find_spec("pnnx")
    if spec is None or not spec.submodule_search_locations:
        return None
    exe = Path(list(spec.submodule_search_locations)[0]) / "pnnx"
    return exe if exe.exists() else None


def convert_ncnn(model: onnx.ModelProto, workdir: Path) -> tuple[Path, Path]:
    """(param, bin) of the model for ncnn, through pnnx. Graph inputs that are
    initializers (older zoo models list their weights as inputs) are dropped first:
    pnnx takes the graph's inputs for the model's."""
    exe = pnnx_binary()
    if exe is None:
        raise EngineUnavailable("pnnx not installed (--setup installs it)")
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {t.name for t in model.graph.initializer}
    keep = [vi for vi in model.graph.input if vi.name not in inits]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    out = workdir / "ncnn"
    out.mkdir()
    onnx.save(model, out / "model.onnx")
    shapes = ",".join(
        "[" + ",".join(str(d.dim_value) for d in vi.type.tensor_type.shape.dim) + "]" for vi in keep
    )
    r = subprocess.run(
        [str(exe), "model.onnx", f"inputshape={shapes}"], cwd=out, capture_output=True, text=True
    )
    param, weights = out / "model.ncnn.param", out / "model.ncnn.bin"
    if r.returncode != 0 or not param.exists():
        raise EngineUnavailable(f"pnnx failed: {first_error(r.stdout + r.stderr)}")
    return param, weights


def time_ncnn(param: Path, weights: Path, inputs: dict[str, str], repeat: int, threads: int, env):
    cmd = [sys.executable, __file__, "--ncnn-child", str(param), str(weights), str(threads)]
    cmd += [str(repeat), *(f"{n}={p}" for n, p in inputs.items())]
    return run_child(cmd, env)


def ncnn_net(param: str, weights: str, threads: int):
    import ncnn

    if ncnn.get_gpu_count() == 0:
        raise SystemExit("ncnn finds no Vulkan device")
    net = ncnn.Net()
    net.opt.use_vulkan_compute = True
    net.opt.num_threads = threads
    # fp32 throughout, as the other engines (lavapipe's fp16 path also gave NaNs)
    for flag in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic", "use_bf16_storage"):
        setattr(net.opt, flag, False)
    net.load_param(param)
    net.load_model(weights)
    return ncnn, net


def ncnn_child(argv) -> int:
    param, weights, threads, repeat, *inputs = argv
    ncnn, net = ncnn_net(param, weights, int(threads))
    # pnnx names the model's inputs in0, in1, ... in the graph's order, its output out0
    feeds = [np.load(item.split("=", 1)[1]) for item in inputs]

    def forward():
        ex = net.create_extractor()
        for k, a in enumerate(feeds):
            ex.input(f"in{k}", ncnn.Mat(np.ascontiguousarray(a[0])))
        status, out = ex.extract("out0")
        if status != 0:
            raise SystemExit(f"ncnn extract failed: {status}")
        return np.array(out)

    forward()  # warm-up: creates the Vulkan pipelines
    times = []
    for _ in range(int(repeat)):
        t = time.perf_counter()
        forward()
        times.append((time.perf_counter() - t) * 1e3)
    print(json.dumps({"median_ms": statistics.median(times)}))
    return 0


def ncnn_probe(env) -> str:
    code = (
        "import ncnn; n = ncnn.get_gpu_count(); "
        "i = ncnn.get_gpu_info(0) if n else None; "
        "print(ncnn.__version__, n, i.device_name() if i else '', "
        "i.driver_version() if i else '', sep='|')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise EngineUnavailable("ncnn not importable (--setup installs it)")
    version, count, name, driver = r.stdout.strip().splitlines()[-1].split("|")
    if count == "0":
        raise EngineUnavailable(
            f"ncnn {version} finds no Vulkan device (Debian mesa-vulkan-drivers has lavapipe)"
        )
    if pnnx_binary() is None:
        raise EngineUnavailable("pnnx not installed (--setup installs it)")
    return f"ncnn {version}, Vulkan device '{name}' driver {driver}, fp32"


# --- the comparison ----------------------------------------------------------------


def first_error(text: str) -> str:
    """A compiler's first error line, else the message's first line."""
    lines = text.strip().splitlines() or [""]
    return next((s for s in lines if "error" in s.lower()), lines[0])[:300].strip()


def compare(
    name: str, threads: int, rounds: int, repeat: int, env, skip: dict, board: str = BOARD
) -> dict:
    model = MODELS[name]()
    feeds = compare_ort.input_feeds(model)
    row: dict = {"model": name, "threads": threads}
    with tempfile.TemporaryDirectory() as d:
        paths = {}
        for k, (n, a) in enumerate(feeds.items()):
            paths[n] = f"{d}/in{k}.npy"
            np.save(paths[n], a)
        model_path = Path(d) / "model.onnx"
        model.ir_version = min(model.ir_version, 10)
        onnx.save(model, model_path)
        runs = {}
        seen: dict = {}
        try:
            bundle, exe, placement = build_ours(model, Path(d), board)
            row["placement"] = placement
            runs["ours"] = lambda: time_ours(exe, bundle, paths, repeat, env, seen)
        except PackagerError as e:
            row["ours_error"] = f"build failed: {first_error(str(e))}"
        if "opencv" in skip:
            row["opencv_error"] = skip["opencv"]
        else:
            runs["opencv"] = lambda: time_opencv(model_path, paths, repeat, threads, env)
        runs["ort"] = lambda: time_ort(model_path, paths, repeat, threads, env)
        if "ncnn" in skip:
            row["ncnn_error"] = skip["ncnn"]
        else:
            try:
                param, weights = convert_ncnn(model, Path(d))
                runs["ncnn"] = lambda: time_ncnn(param, weights, paths, repeat, threads, env)
            except EngineUnavailable as e:
                row["ncnn_error"] = str(e)
        times: dict[str, list[float]] = {k: [] for k in runs}
        for r in range(rounds):
            order = list(runs)
            for label in order[r % len(order) :] + order[: r % len(order)]:
                if label not in runs:
                    continue  # failed in an earlier round
                try:
                    times[label].append(runs[label]())
                except EngineUnavailable as e:
                    row[f"{label}_error"] = str(e)
                    del runs[label]
                compare_ort.settle()
    if seen.get("device"):
        row["placement"] += f" on '{seen['device']}'"
    for label, ts in times.items():
        if ts and f"{label}_error" not in row:
            row[f"{label}_ms"] = statistics.median(ts)
    for peer in ENGINES[1:]:
        if "ours_ms" in row and f"{peer}_ms" in row:
            row[f"ours/{peer}"] = row["ours_ms"] / row[f"{peer}_ms"]
    return row


def format_row(row: dict) -> str:
    def cell(label):
        ms = row.get(f"{label}_ms")
        return f"{ms:9.2f}" if ms is not None else f"{'n/a':>9}"

    def ratio(peer):
        v = row.get(f"ours/{peer}")
        return f"{v:6.2f}" if v is not None else f"{'n/a':>6}"

    text = (
        f"{row['model']:<13} {row['threads']:>2}  ours {cell('ours')} ms  "
        f"opencv-ocl {cell('opencv')} ms  ort-cpu {cell('ort')} ms  "
        f"ncnn-vk {cell('ncnn')} ms  ours/opencv {ratio('opencv')}  ours/ort {ratio('ort')}  "
        f"ours/ncnn {ratio('ncnn')}"
    )
    if "placement" in row:
        text += f"  ({row['placement']})"
    for label in ENGINES:
        if f"{label}_error" in row:
            text += f"\n    {label}: cannot run: {row[f'{label}_error']}"
    return text


def header(threads: int, env) -> tuple[list[str], dict]:
    model, isa = cpu_info()
    dev = opencl_device()
    lines = [
        f"cpu: {model} ({os.cpu_count()} cores); vector ISA: {' '.join(isa) or 'none found'}",
        (
            f"opencl: {dev.get('name', '?')} ({dev.get('type', '?')}), driver "
            f"{dev.get('driver', '?')}, {dev.get('version', '?')}, platform "
            f"{dev.get('platform', '?')}"
            if dev
            else "opencl: no device found by clinfo"
        ),
        f"threads: {threads} (PoCL, lavapipe, OpenCV, ORT, ncnn, the bundle's CPU kernels)",
    ]
    skip = {}
    try:
        probe = opencv_probe(env)
        if dev.get("name") and dev["name"] not in probe:
            probe += f" -- NOT the device above ({dev['name']})"
        lines.append(f"opencv: {probe}, DNN target OPENCL")
    except EngineUnavailable as e:
        skip["opencv"] = str(e)
        lines.append(f"opencv: cannot run: {e}")
    try:
        lines.append(f"ncnn: {ncnn_probe(env)}")
    except EngineUnavailable as e:
        skip["ncnn"] = str(e)
        lines.append(f"ncnn: cannot run: {e}")
    lines += [f"{peer}: left out: {why}" for peer, why in LEFT_OUT.items()]
    return lines, skip


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--opencv-child"]:
        return opencv_child(argv[1:])
    if argv[:1] == ["--ncnn-child"]:
        return ncnn_child(argv[1:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per model")
    p.add_argument("--repeat", type=int, default=10, help="timed runs per round and engine")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    p.add_argument(
        "--board",
        default=BOARD,
        help="the profile (name or YAML file) bundles are built for: a local board whose "
        "opencl section describes the device run_bundle picks (default host-opencl)",
    )
    p.add_argument(
        "--setup",
        action="store_true",
        help="first install the peers (opencv-python-headless, ncnn and pnnx with pip; "
        "PoCL, clinfo and Mesa's Vulkan drivers with apt-get when root)",
    )
    args = p.parse_args(argv)
    if args.setup:
        setup()
    env = engine_env(args.threads, opencl_device())
    lines, skip = header(args.threads, env)
    print("\n".join(lines), flush=True)
    rows = []
    for name in args.models:
        rows.append(compare(name, args.threads, args.rounds, args.repeat, env, skip, args.board))
        print(format_row(rows[-1]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
