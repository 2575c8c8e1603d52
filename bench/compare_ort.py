"""Bundle latency against ONNX Runtime on the same model, input and thread count.

For each model: package it for the host board, build run_bundle, then alternate rounds
of `run_bundle --repeat N` and N timed ORT runs (same input, intra_op_num_threads set;
ORT in a process of its own too),
so both see the same machine noise; each round starts with the next of them, so none is
always the one that runs right after the other process. Prints each median and the
ratio bundle/ORT (`--stat min`: the fastest runs instead), then in parentheses the
round-by-round ratios: their median, lowest and highest (each round's two sides ran
seconds apart, under the same load).

    python bench/compare_ort.py                    # all models, 1 and 2 threads
    python bench/compare_ort.py --models resnet18 --threads 1 --rounds 5
    python bench/compare_ort.py --models tv_resnet18 tv_mobilenet_v2 --threads 1 2
    python bench/compare_ort.py --models tv_resnet18 --board host-avx2  # AVX2 kernels
    python bench/compare_ort.py --stat min     # fastest run of each side (a loaded machine)
    python bench/compare_ort.py --models resnet18 --threads 1 --ram-mb 512  # small board
    python bench/compare_ort.py --models lstm2 --threads 1 --repeat 200
    python bench/compare_ort.py --models mel_conv mel_stft mel_dft --threads 1 --repeat 200
    python bench/compare_ort.py --models dbnet svtr --threads 1
    python bench/compare_ort.py --models vad --threads 1 --repeat 2000
    python bench/compare_ort.py --models ppocr_det ppocr_rec ppocr_cls --threads 1
    python bench/compare_ort.py --models silero_vad silero_vad_ov --threads 1 --repeat 2000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import networks  # noqa: E402
import ocr_nets  # noqa: E402
import torchvision_nets  # noqa: E402
import vad  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import cpuid_mask  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
import fetch_models  # noqa: E402

from packager.boards import load_board  # noqa: E402
from packager.bundle import write_bundle_files  # noqa: E402
from packager.graph.conv_algorithms import ALGORITHMS  # noqa: E402
from packager.native import CFLAGS, build_run_bundle  # noqa: E402
from packager.package import compile_model  # noqa: E402
from packager.tune.apply import Tuning, log_files  # noqa: E402

# how a side's runs make its figure: per round, then across the rounds
STATS = {"median": statistics.median, "min": min}


def paired(ours: list[float], theirs: list[float]) -> tuple[float, float, float]:
    """(median, lowest, highest) of the ratios ours[r] / theirs[r], round by round: both
    sides of a round ran seconds apart, under the same phase of the machine's load (on a
    shared KVM guest a bundle's runs moved between 30 and 42 ms in phases of seconds to
    minutes), so each ratio compares runs under one load; the range shows how far a
    single round can stray."""
    ratios = sorted(a / b for a, b in zip(ours, theirs, strict=True))
    return statistics.median(ratios), ratios[0], ratios[-1]


LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def light(name: str):
    return lambda: onnx.load(LIGHT / f"light_{name}.onnx")


MODELS = {
    "squeezenet": light("squeezenet"),
    "resnet50": light("resnet50"),
    "inception_v1": light("inception_v1"),
    "inception_v2": light("inception_v2"),
    "shufflenet": light("shufflenet"),
    "densenet121": light("densenet121"),
    "vgg19": light("vgg19"),
    "alexnet": light("bvlc_alexnet"),
    "zfnet512": light("zfnet512"),
    "mobilenet_v2": lambda: networks.mobilenet_v2(width=1.0, size=224, classes=1000),
    "resnet18": lambda: networks.resnet(blocks=(2, 2, 2, 2), width=64, size=224, classes=1000),
    # torchvision's architectures as torch.onnx.export writes them (BN folded, opset 17)
    "tv_resnet18": torchvision_nets.tv_resnet18,
    "tv_mobilenet_v2": torchvision_nets.tv_mobilenet_v2,
    "tv_resnext50": torchvision_nets.tv_resnext50_32x4d,
    # 2-layer LSTM, hidden 128, 16 steps, batch 1 (unrolled: 32 cell kernels a run)
    "lstm2": lambda: networks.lstm_lm(steps=16, hidden=128, layers=2, batch=1, vocab=None),
    # log-mel front ends of 1 s of 16 kHz audio, hop 160: a strided-Conv DFT (n_fft 512,
    # 40 mels), ONNX STFT (n_fft 512, 40 mels) and DFT on gathered frames (n_fft 400, 80 mels)
    "mel_conv": networks.mel_conv,
    "mel_stft": networks.mel_stft,
    "mel_dft": networks.mel_dft,
    # OCR: a DBNet-style detector (MobileNetV3-small backbone, FPN, DB head) at 640x640,
    # the same with ResNet-18, and an SVTR-style recognizer at 48x320 (6625 classes)
    "dbnet": ocr_nets.dbnet,
    "dbnet_r18": lambda: ocr_nets.dbnet(backbone="resnet18"),
    "svtr": ocr_nets.svtr,
    # Silero-style VAD: one 512-sample chunk, the If on sr at run time (16 kHz branch)
    "vad": vad.silero_vad,
}


def real(name: str, frozen=None, **shapes):
    """A real model of scripts/fetch_models.py with its dynamic input dims fixed to
    ``shapes`` and the inputs in ``frozen`` made constants (the VAD's sample rate)."""

    def make():
        from packager.backend import freeze_inputs

        model = onnx.load(fetch_models.model_path(name))
        for vi in model.graph.input:
            if vi.name in shapes:
                for d, n in zip(vi.type.tensor_type.shape.dim, shapes[vi.name], strict=True):
                    d.Clear()
                    d.dim_value = n
        return freeze_inputs(model, frozen) if frozen else model

    return make


SR = {"sr": np.array(16000, np.int64)}
# What ONNX Runtime runs where the bundle's model has inputs frozen: the model as shipped,
# its dims dynamic, given the frozen values as feeds (ORT 1.32 fails on Silero's If once
# sr is an initializer, and on its 8 kHz branch once the dims are fixed).
ORT_MODELS = {
    "silero_vad": (real("silero_vad"), SR),
    "silero_vad_op15": (real("silero_vad_16k_op15"), SR),
}
# Real models that public packages ship (PP-OCR v4 from rapidocr-onnxruntime, Silero VAD
# from silero-vad; scripts/fetch_models.py): the detector at 640x640, the recognizer at
# 48x320, the direction classifier at 48x192, one VAD step of 512 (576) samples
MODELS |= {
    "ppocr_det": real("ppocr_v4_det", x=(1, 3, 640, 640)),
    "ppocr_rec": real("ppocr_v4_rec", x=(1, 3, 48, 320)),
    "ppocr_cls": real("ppocr_cls", x=(1, 3, 48, 192)),
    "silero_vad": real("silero_vad", SR, input=(1, 512), state=(2, 1, 128)),
    "silero_vad_op15": real("silero_vad_16k_op15", SR, input=(1, 512), state=(2, 1, 128)),
    "silero_vad_ov": real("silero_vad_openvino_16k", input=(1, 576), state=(2, 1, 128)),
}

# Models whose inputs are not all float32 noise: their own feeds.
FEEDS = {"vad": vad.vad_feeds}


def input_feeds(model: onnx.ModelProto, name: str = "") -> dict[str, np.ndarray]:
    if name in FEEDS:
        return FEEDS[name]()
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for vi in model.graph.input:
        if vi.name not in inits:
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            feeds[vi.name] = rng.uniform(0, 1, shape).astype(np.float32)
    return feeds


def build_bundle(
    model: onnx.ModelProto,
    workdir: Path,
    tuned: str | None = None,
    algorithm=None,
    ram_mb=None,
    board_name: str = "host",
):
    """(bundle dir, run_bundle) for the local board ``board_name``;
    ``tuned`` applies tuning_logs/<board>/:
    "own", the records of this machine's target only (as `packager build`), "all", those
    measured on other machines too (--use-foreign-records),
    ``algorithm`` forces a conv algorithm (conv_algorithms.ALGORITHMS) where it applies,
    ``ram_mb`` gives the board that much memory (a small one limits Winograd's filters)."""
    board = load_board(board_name)
    board = replace(board, ram_mb=ram_mb) if ram_mb else board
    tuning = Tuning(board, log_files(board.name), use_foreign=tuned == "all") if tuned else None
    compiled = compile_model(model, board, tuning=tuning, conv_algorithm=algorithm)
    bundle = workdir / (
        "bundle_tuned"
        if tuned
        else f"bundle_{algorithm}"
        if algorithm
        else f"bundle_{ram_mb}mb"
        if ram_mb
        else "bundle"
    )
    bundle.mkdir()
    write_bundle_files(bundle, compiled, {}, None)
    exe = build_run_bundle(bundle, cflags=[*CFLAGS, *board.toolchain.cflags])
    return bundle, exe


def time_bundle(
    exe: Path, bundle: Path, inputs: dict[str, str], repeat: int, threads: int, stat="median"
):
    cmd = [str(exe), str(bundle), "--repeat", str(repeat)]
    for name, path in inputs.items():
        cmd += ["--input", f"{name}={path}"]
    env = dict(os.environ, PACKAGER_NUM_THREADS=str(threads))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])[f"{stat}_ms"]


def ort_session(model: onnx.ModelProto, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    model.ir_version = min(model.ir_version, 10)
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def time_ort(sess, feeds, repeat: int, stat="median") -> float:
    sess.run(None, feeds)  # warm-up, as run_bundle does
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return STATS[stat](times)


def time_ort_process(
    model_path: Path, inputs: dict[str, str], repeat: int, threads: int, stat="median"
):
    """ORT's median in a process of its own, as run_bundle's: an idle ORT session left in
    this process made 2-thread bundle runs erratic (MobileNetV2 2.85-5.37 ms, 2.86-3.01
    without it)."""
    cmd = [sys.executable, __file__, "--ort-child", str(model_path), str(threads), str(repeat)]
    cmd += [f"{name}={path}" for name, path in inputs.items()]
    env = dict(os.environ, PK_ORT_ISA=ORT_ISA)
    r = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return json.loads(r.stdout.strip().splitlines()[-1])[f"{stat}_ms"]


# which of its kernels ORT runs: "native" (what it picks for this CPU) or "avx2" (its
# AVX2 ones: the child holds its own CPUID to an AVX2 machine's, cpuid_mask.py)
ORT_ISA = "native"


def ort_child(argv) -> int:
    model_path, threads, repeat, *inputs = argv
    isa = os.environ.get("PK_ORT_ISA", "native")
    if isa == "avx2":
        assert "onnxruntime" not in sys.modules, "onnxruntime was loaded before the hold"
        cpuid_mask.hold_to_avx2()
    elif isa != "native":
        raise SystemExit(f"PK_ORT_ISA={isa}: not native or avx2")
    model = onnx.load(model_path)
    feeds = {}
    for item in inputs:
        name, path = item.split("=", 1)
        feeds[name] = np.load(path)
    sess = ort_session(model, int(threads))
    row = {f"{k}_ms": time_ort(sess, feeds, int(repeat), k) for k in STATS}
    if isa == "avx2":
        row["cpuid_traps"] = cpuid_mask.traps()  # how often ORT asked the held CPUID
    print(json.dumps(row))
    return 0


def settle(seconds: float = 0.3) -> None:
    """Let the other side's worker threads go idle (ORT's pool spins after a run by
    default), so each side starts on a quiet machine."""
    time.sleep(seconds)


def _rounds(p: tuple[float, float, float]) -> str:
    return f"(rounds {p[0]:.2f}, {p[1]:.2f}-{p[2]:.2f})"


def compare(
    name: str,
    threads_list,
    rounds: int,
    repeat: int,
    tuned: str | None = None,
    algorithm=None,
    ram_mb=None,
    stat: str = "median",
    board: str = "host",
) -> list[dict]:
    model = MODELS[name]()
    feeds = input_feeds(model, name)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        bundle, exe = build_bundle(model, Path(d), board_name=board)
        variants = [("bundle", bundle, exe)]
        if tuned:
            variants.append(("tuned", *build_bundle(model, Path(d), tuned=tuned, board_name=board)))
        if algorithm:
            variants.append(
                (algorithm, *build_bundle(model, Path(d), algorithm=algorithm, board_name=board))
            )
        small = f"{ram_mb}mb"
        if ram_mb:
            variants.append((small, *build_bundle(model, Path(d), ram_mb=ram_mb, board_name=board)))
        for label, b, _ in variants:
            print(f"{name} {label}: params.bin {(b / 'params.bin').stat().st_size / 1e6:.1f} MB")
        paths = {}
        for k, (n, a) in enumerate(feeds.items()):
            paths[n] = f"{d}/in{k}.npy"
            np.save(paths[n], a)
        model_path = Path(d) / "model.onnx"
        ort_model, ort_feeds = ORT_MODELS.get(name, (lambda: model, {}))
        onnx.save(ort_model(), model_path)
        ort_paths = dict(paths)
        for n, a in ort_feeds.items():
            ort_paths[n] = f"{d}/ort_{n}.npy"
            np.save(ort_paths[n], a)
        for threads in threads_list:
            runs = [
                (label, lambda b=b, e=e, t=threads: time_bundle(e, b, paths, repeat, t, stat))
                for label, b, e in variants
            ]
            runs.append(
                ("ort", lambda t=threads: time_ort_process(model_path, ort_paths, repeat, t, stat))
            )
            times: dict[str, list[float]] = {label: [] for label, _ in runs}
            for r in range(rounds):
                # interleaved, every variant sees the same noise; each round starts with
                # the next one (whichever runs first after another process measured up
                # to 15% slower at 2 threads)
                for label, run in runs[r % len(runs) :] + runs[: r % len(runs)]:
                    times[label].append(run())
                    settle()
            med = {k: STATS[stat](v) for k, v in times.items()}
            row = {
                "model": name,
                "threads": threads,
                "bundle_ms": med["bundle"],
                "ort_ms": med["ort"],
                "ratio": med["bundle"] / med["ort"],
                "paired": paired(times["bundle"], times["ort"]),
            }
            text = (
                f"{name:<14} {threads:>2}  bundle {med['bundle']:9.2f} ms  "
                f"ort {med['ort']:9.2f} ms  bundle/ort {row['ratio']:6.2f}"
                f" {_rounds(row['paired'])}"
            )
            if tuned:
                row.update(
                    tuned_ms=med["tuned"],
                    tuned_ratio=med["tuned"] / med["ort"],
                    speedup=med["bundle"] / med["tuned"],
                    tuned_paired=paired(times["tuned"], times["ort"]),
                )
                text += (
                    f"  tuned {med['tuned']:9.2f} ms  tuned/ort {row['tuned_ratio']:6.2f}"
                    f" {_rounds(row['tuned_paired'])}  default/tuned {row['speedup']:5.2f}"
                )
            if algorithm:
                row.update({f"{algorithm}_ms": med[algorithm]})
                ratio = med[algorithm] / med["ort"]
                text += f"  {algorithm} {med[algorithm]:9.2f} ms ({algorithm}/ort {ratio:4.2f})"
            if ram_mb:
                row.update({f"{small}_ms": med[small]})
                text += (
                    f"  {small} {med[small]:9.2f} ms ({small}/ort {med[small] / med['ort']:4.2f})"
                )
            rows.append(row)
            print(text, flush=True)
    return rows


def add_ort_isa(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ort-isa",
        choices=["native", "avx2"],
        default="native",
        help="native: ORT runs the kernels it picks for this CPU; avx2: the ones it runs "
        "on an AVX2 machine, its process held to an AVX2 CPU's CPUID (cpuid_mask.py; "
        "Linux x86_64 with CPUID faulting), the peer for --board host-avx2",
    )


def use_ort_isa(p: argparse.ArgumentParser, args) -> None:
    global ORT_ISA
    if args.ort_isa == "avx2" and not cpuid_mask.can_mask():
        p.error("--ort-isa avx2: this CPU or kernel cannot fault CPUID (no cpuid_fault flag)")
    ORT_ISA = args.ort_isa
    print(f"ORT kernels: {ORT_ISA}", flush=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--ort-child"]:
        return ort_child(argv[1:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per model")
    p.add_argument("--repeat", type=int, default=10, help="timed runs per round")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    p.add_argument(
        "--stat",
        choices=list(STATS),
        default="median",
        help="median: of each round's runs, then of the rounds; min: the fastest run of "
        "all (on a machine shared with other work, where medians move 2x between runs)",
    )
    p.add_argument(
        "--tuned",
        nargs="?",
        const="own",
        choices=["own", "all"],
        help="also time a bundle built with the tuning_logs/host/ records: those measured "
        "on this machine's target (own, the default, what `packager build` applies) or all "
        "of them, those of other machines too (all: --use-foreign-records)",
    )
    p.add_argument(
        "--conv-algorithm",
        choices=ALGORITHMS,
        help="also time a bundle whose eligible convs all use this algorithm (direct: "
        "what the untuned rule by shape gains over direct convs)",
    )
    p.add_argument(
        "--ram-mb",
        type=int,
        help="also time a bundle built for the host profile with this ram_mb (under 2048: "
        "Winograd's transformed filters within a budget, conv_algorithms.filter_budget)",
    )
    p.add_argument(
        "--board",
        default="host",
        help="the local board profile to build for (default host): host-avx2 times the "
        "256-bit AVX2 kernels on an AVX-512 machine (ORT still picks its own kernels "
        "unless --ort-isa avx2)",
    )
    add_ort_isa(p)
    args = p.parse_args(argv)
    use_ort_isa(p, args)
    if not load_board(args.board).is_local:
        p.error(f"--board {args.board}: not a local board (it has a connection)")
    rows = []
    for name in args.models:
        rows += compare(
            name,
            args.threads,
            args.rounds,
            args.repeat,
            args.tuned,
            args.conv_algorithm,
            args.ram_mb,
            args.stat,
            args.board,
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
