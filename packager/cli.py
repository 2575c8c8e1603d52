"""The `packager` command: a thin shell over the library.

Exit codes: 0 ok; 2 bad input (the message names the file, node or field); 1 internal error
(or run_bundle crashed); 130 interrupted by SIGINT (Ctrl-C), 143 by SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import traceback
from pathlib import Path

from . import __version__, interrupts
from .cli_args import (
    BOARD_HELP,
    Console,
    add_connection_options,
    add_verify_option,
    input_shapes,
    input_values,
)
from .cli_remote import add_parsers as add_board_parsers
from .errors import PackagerError
from .graph.conv_algorithms import ALGORITHMS
from .safe_paths import check_bundle_output, check_png_file, write_bytes_atomic
from .tune.cli import add_parser as add_tune_parser

EPILOG = """examples:
  packager build model.onnx --board host -o out/model
  packager run out/model --board host --input data=x.npy --output-dir results
  packager build model.onnx --board rpi4 -o out/m && packager deploy out/m --board rpi4
  packager bench out/m --board rpi4 --repeat 50
  packager boards --ping rpi4
  packager inspect model.onnx --input-shape data=1,3,224,224
  packager boards --check my_board.yaml
  packager report out/m -o m.html --profile prof.json --tuning-log tune.jsonl
  packager quantize model.onnx -o model.int8.onnx --calib calib/ --method entropy
"""


def cmd_build(args) -> int:
    from .boards import load_board
    from .package import package

    check_bundle_output(args.output, (args.model,))
    board = load_board(args.board)
    console = Console()
    try:
        out = package(
            args.model,
            board,
            args.output,
            input_shapes(args),
            log=console.log,
            tuning_logs=args.tuning_log,
            conv_algorithm=args.conv_algorithm,
            progress=console.progress,
            verbose=args.verbose,
            use_foreign_records=args.use_foreign_records,
            input_values=input_values(args),
            cpu_only=args.cpu_only,
        )
    finally:
        console.clear()  # an error message must not share the progress line
    print(out)
    return 0


def cmd_run(args) -> int:
    from .cli_remote import cmd_run as run_on_board

    return run_on_board(args)  # the local machine or a board over SSH, alike


def cmd_inspect(args) -> int:
    from .frontend.inspect import inspect_model

    if args.plan or args.plan_png:
        return inspect_plan(args)
    report = inspect_model(args.model, input_shapes(args), input_values(args))
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"model: {args.model} (opset {report['opset']}, {report['nodes']} nodes)")
    for kind in ("inputs", "outputs"):
        print(f"{kind}:")
        for v in report[kind]:
            shape = " (rank not declared)" if v["shape"] is None else v["shape"]
            print(f"  {v['name']}: {v['dtype']}{shape}")
    print("ops:")
    width = max((len(op) for op in report["ops"]), default=2)
    for op, info in report["ops"].items():
        print(f"  {op:<{width}}  {info['count']:>5}  {info['status']}")
    if report["unsupported"]:
        print(f"unsupported: {', '.join(report['unsupported'])}")
    return 0


def inspect_plan(args) -> int:
    from .boards import load_board
    from .frontend.importer import freeze_inputs, load_model
    from .graph import plan_report
    from .graph.passes.place_accel import placement_line
    from .package import compile_model

    if args.plan_png:
        check_png_file(args.plan_png)
    board = load_board(args.board)
    model, _ = freeze_inputs(load_model(args.model), input_values(args), args.model)
    c = compile_model(model, board, input_shapes(args), args.model)
    if args.plan:
        gpu = board.opencl is not None
        devices = gpu or board.accel is not None
        placement = {k.func: (k.device, k.cpu_reason) for k in c.kernels} if devices else None
        if placement is not None:  # a control-flow node calls no kernel ("")
            placement[""] = ("cpu", "subgraphs run on the CPU (OpenCL is for the top graph)")
        print(plan_report.render(c.graph, c.plan, c.funcs, len(c.kernels), placement, gpu))
        if c.placement is not None:  # the accelerator's share, and why the rest is not there
            print(f"\n{placement_line(c.placement)}")
    if args.plan_png:
        write_bytes_atomic(Path(args.plan_png), plan_report.plan_png(c.graph, c.plan))
        print(f"wrote {args.plan_png}")
    return 0


def cmd_report(args) -> int:
    from .report import write_report

    print(write_report(args.bundle, args.output, args.profile, args.tuning_log))
    return 0


def cmd_quantize(args) -> int:
    from .quantize import quantize_file

    s = quantize_file(
        args.model,
        args.output,
        args.calib,
        args.method,
        args.percentile,
        args.activations,
        weight_bits=args.weight_bits,
    )
    ops = ", ".join(f"{n} {op}" for op, n in s.ops.items()) or "no Conv/MatMul/Gemm"
    bits = ", 7-bit" if args.weight_bits == 7 else ""
    print(
        f"quantized {ops} (int8 weights per channel{bits}, {s.biases} int32 biases), "
        f"{s.activations} {args.activations} activations ({args.method})"
    )
    print(args.output)
    return 0


def cmd_boards(args) -> int:
    from .boards import boards_dirs, check_board_file, is_user_board, list_boards, load_board

    if args.ping:
        from .cli_remote import ping

        return ping(args)
    if args.show:
        from .board_facts import show_lines

        print("\n".join(show_lines(load_board(args.show))))
        return 0
    if args.probe:
        from .cli_remote import probe

        return probe(args)
    if args.check:
        board = check_board_file(args.check)
        print(f"{args.check}: ok ({board.name}, {board.arch}, {board.cores} cores)")
        return 0
    boards = list_boards()
    user_dir, shipped_dir = boards_dirs()
    width = max((len(b.name) for b in boards), default=4)
    for b in boards:
        origin = "user" if is_user_board(b) else "shipped"
        replaces = (
            "  (replaces the shipped one)"
            if origin == "user" and (shipped_dir / f"{b.name}.yaml").is_file()
            else ""
        )
        print(f"{b.name:<{width}}  {b.arch:<7}  {origin:<7}  {b.description}{replaces}")
    print(f"\nshipped profiles: {shipped_dir}\nuser profiles:    {user_dir}")
    return 0


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="packager",
        description="Package ONNX models into self-contained C bundles for edge boards.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"packager {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    b = sub.add_parser(
        "build",
        help="package a model for a board",
        description="Package MODEL for BOARD into the bundle directory OUT. OUT must "
        "not exist (it is created, parents too), be an empty directory, or be a bundle "
        "this packager wrote, which is replaced; anything else (a file, a symbolic link, "
        "a non-empty directory that is not a bundle, /, your home, the current directory, "
        "a directory holding MODEL) is refused with exit 2 and left as it is. The bundle "
        "is written to a temporary directory and renamed to OUT at the end: on any error "
        "or interrupt OUT is left untouched.",
    )
    b.add_argument("model", metavar="MODEL.onnx")
    b.add_argument("--board", required=True, help=BOARD_HELP)
    b.add_argument("-o", "--output", required=True, metavar="OUT", help="bundle directory")
    b.add_argument(
        "--input-shape",
        action="append",
        metavar="NAME=D0,D1,...",
        help="fix the shape of an input with dynamic dims (repeatable)",
    )
    b.add_argument(
        "--input-value",
        action="append",
        metavar="NAME=VALUE",
        help="freeze an input to a constant at package time: numbers separated by commas, "
        "or FILE.npy (repeatable); an If on it folds",
    )
    b.add_argument(
        "--tuning-log",
        action="append",
        default=[],
        metavar="FILE",
        help="apply the best record per kernel (besides tuning_logs/BOARD/; repeatable)",
    )
    b.add_argument(
        "--use-foreign-records",
        action="store_true",
        help="apply tuning records measured on another CPU too (a record applies only on "
        "a target with its fingerprint: CPU name, ISA features, vector width, cores, ...)",
    )
    b.add_argument(
        "--conv-algorithm",
        choices=ALGORITHMS,
        help="run every 3x3 stride-1 conv with this algorithm (default: per conv, the "
        "fastest one the tuning records measured, else by shape: winograd_4 from 24x24 "
        "outputs, winograd_2 from 10x10 (at 512 bits from 7x7 where input x output "
        "channels reach 256 x 256), direct below, or under 16 input or 32 output "
        "channels; with ram_mb under 2048, transformed filters add at most 28%% of the "
        "weights). Winograd "
        "does fewer multiplies; its rounding error is up to ~1e-5 of an output's scale "
        "for winograd_4 (direct and winograd_2: ~1e-6)",
    )
    b.add_argument(
        "--cpu-only",
        action="store_true",
        help="run every node on the board's CPU, leaving its GPU and accelerator out: the "
        "baseline to bench beside the accelerated bundle (`packager bench ACCEL CPU` sets "
        "their layers side by side)",
    )
    b.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also list each tunable kernel left with its default schedule, and why",
    )
    b.set_defaults(fn=cmd_build)
    add_tune_parser(sub)

    r = sub.add_parser(
        "run",
        help="build (if needed) and run a bundle on a board",
        description="Check every bundle file against manifest.json's sha256, build the "
        "bundle with CMake if it is not built (or its sources, compiler or flags changed), "
        "run it on the board and print one line per output (dtype, shape, min, max, mean). "
        "Inputs without --input are filled on the board (--fill, --seed; stderr names "
        "them). With --output-dir, each output is also written as DIR/<name>.npy "
        "(characters outside [A-Za-z0-9._-] in the name replaced by '_'). Exit 1 if "
        "run_bundle fails or crashes (the signal is named).",
    )
    r.add_argument("bundle", metavar="OUT", help="bundle directory made by `packager build`")
    r.add_argument("--board", required=True, help=BOARD_HELP)
    r.add_argument(
        "--input",
        action="append",
        metavar="NAME=FILE.npy",
        help="repeatable; an input without one is filled (--fill)",
    )
    r.add_argument(
        "--fill",
        choices=("random", "zeros"),
        help="how inputs without --input are filled: random (default: floats in [-1, 1), "
        "integers in [0, 10), bools 0/1, the same on every board for one --seed) or zeros",
    )
    r.add_argument(
        "--seed", type=int, metavar="N", help="seed of --fill random, 0 to 2^64-1 (default 0)"
    )
    r.add_argument(
        "--top",
        type=int,
        metavar="K",
        help="also print the K largest elements (INDEX=VALUE) of each output that is a "
        "vector of scores (one dimension other than 1)",
    )
    r.add_argument(
        "--output-dir",
        metavar="DIR",
        help="also write each output as DIR/<name>.npy; created if missing; only the "
        "outputs' .npy files are written (each whole, through a temporary name), nothing "
        "else in DIR is touched",
    )
    add_verify_option(r)
    r.add_argument(
        "--repeat",
        type=int,
        default=0,
        metavar="N",
        help="run N times after a warm-up; the last line printed is JSON with median_ms",
    )
    r.add_argument(
        "--profile",
        action="store_true",
        help="with the timing (--repeat, default 20), print a table of the kernels, slowest "
        "first: ops fused, calls, median ms, share, GFLOP/s or GB/s, device",
    )
    r.add_argument(
        "--profile-json",
        metavar="FILE",
        help="--profile, and write the profile as JSON to FILE (docs/bundle-format.md)",
    )
    add_connection_options(r)
    r.set_defaults(fn=cmd_run)
    add_board_parsers(sub)

    i = sub.add_parser(
        "inspect",
        help="show a model's ops, inputs and outputs",
        description="Op histogram with support status, inputs and outputs.",
    )
    i.add_argument("model", metavar="MODEL.onnx")
    i.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...")
    i.add_argument(
        "--input-value",
        action="append",
        metavar="NAME=VALUE",
        help="freeze an input to a constant at package time: numbers separated by commas, "
        "or FILE.npy (repeatable); an If on it folds",
    )
    i.add_argument("--json", action="store_true", help="print the report as JSON")
    i.add_argument(
        "--plan",
        action="store_true",
        help="compile for --board and print the kernels (fused groups) and the memory plan",
    )
    i.add_argument(
        "--plan-png", metavar="FILE", help="draw the memory plan (step x arena offset) as a PNG"
    )
    i.add_argument("--board", default="host", help=f"with --plan: the {BOARD_HELP} (default host)")
    i.set_defaults(fn=cmd_inspect)

    add_report_parser(sub)
    add_quantize_parser(sub)

    bo = sub.add_parser(
        "boards",
        help="list board profiles or check one",
        description="List the board profiles (name, arch, shipped or user, description; "
        "user profiles are read from $PACKAGER_BOARDS_DIR, else "
        "~/.config/packager/boards/, and take precedence over shipped ones of the same "
        "name), or validate a profile file with --check.",
    )
    bo.add_argument("--check", metavar="FILE.yaml", help="validate a board profile file")
    bo.add_argument(
        "--ping",
        metavar="BOARD",
        help="check each device of BOARD: reachable, host key, arch, round-trip time",
    )
    bo.add_argument(
        "--show",
        metavar="BOARD",
        help="print BOARD's profile as resolved, marking values detected on this machine",
    )
    bo.add_argument(
        "--probe",
        metavar="BOARD",
        help="read BOARD's CPU over SSH (/proc/cpuinfo, caches, nproc) into your copy of its "
        "profile (the user boards directory; a shipped profile is never changed)",
    )
    bo.add_argument(
        "--write",
        action="store_true",
        help="with --probe: also change a user profile the packager did not write before",
    )
    add_connection_options(bo)
    bo.set_defaults(fn=cmd_boards)
    return p


def add_report_parser(sub) -> None:
    rp = sub.add_parser(
        "report",
        help="write an HTML page about a bundle: build facts, layer times, memory plan, tuning",
        description="Write one self-contained HTML page (inline CSS and SVG charts, no "
        "scripts, no network) about BUNDLE: the board and build facts from its manifest.json "
        "and graph.json; the per-layer times of --profile as bars, slowest first (kernel, "
        "fused ops, ms, share, GFLOP/s); the memory plan (each arena tensor over the kernel "
        "calls it is alive and its byte range, coloured by op kind, names on hover); and, per "
        "task of the --tuning-log files, the best effective GFLOP/s so far against the trial "
        "number. Needs matplotlib (pip install packager[report]). The page is written whole "
        "(temporary file, then rename); an existing -o is replaced only if it is a report "
        "this command wrote; nothing is written into the bundle.",
    )
    rp.add_argument("bundle", metavar="BUNDLE", help="bundle directory made by `packager build`")
    rp.add_argument("-o", "--output", required=True, metavar="REPORT.html", help="the page")
    rp.add_argument(
        "--profile",
        metavar="PROFILE.json",
        help="per-layer profile of this bundle, as `run_bundle BUNDLE --repeat 20 "
        "--profile-json PROFILE.json` writes it (without it the page says how to get one)",
    )
    rp.add_argument(
        "--tuning-log",
        action="append",
        default=[],
        metavar="LOG",
        help="tuning log (.jsonl from `packager tune`) to draw curves of (repeatable)",
    )
    rp.set_defaults(fn=cmd_report)


QUANTIZE_EPILOG = """calibration data (--calib DIR):
  one input:      DIR/*.npy, one file per sample (or per batch where the batch dimension
                  is symbolic); DIR/<input name>/*.npy also works
  several inputs: DIR/<input name>/*.npy per input; the files of one name across the
                  subdirectories form one sample
  each array has the input's dtype and rank and its size in every fixed dimension

examples:
  packager quantize model.onnx -o model.int8.onnx --calib calib/
  packager quantize model.onnx -o model.int8.onnx --calib calib/ --method percentile \\
      --percentile 99.9 --activations int8
  packager quantize model.onnx -o test.int8.onnx --calib random:16   # testing only
"""


def add_quantize_parser(sub) -> None:
    q = sub.add_parser(
        "quantize",
        help="post-training quantization: a float model to a QDQ int8 model",
        description="Quantize MODEL into a QDQ ONNX model (opset 13 or later): "
        "QuantizeLinear/DequantizeLinear pairs on the activations into and out of each "
        "Conv, MatMul, Gemm and Add (after a Relu or Clip that follows one), int8 weights "
        "with one scale per output channel, int32 biases with scale input_scale * "
        "weight_scale. Batch normalizations after a Conv are folded into it first. The "
        "float model runs on the --calib inputs (in ONNX Runtime when installed, else "
        "onnx's reference evaluator) to find each activation's range. OUTPUT is written "
        "whole (temporary file, then rename) after every check passed; it is never the "
        "input model, and an existing file is replaced only if `packager quantize` wrote it.",
        epilog=QUANTIZE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    q.add_argument("model", metavar="MODEL.onnx")
    q.add_argument("-o", "--output", required=True, metavar="OUTPUT.onnx", help="the QDQ model")
    q.add_argument(
        "--calib",
        required=True,
        metavar="DIR|random:N",
        help="directory of .npy inputs (layout below), or random:N for N random inputs "
        "(standard normal; only for testing: the ranges fit no real data)",
    )
    q.add_argument(
        "--method",
        choices=("minmax", "percentile", "entropy"),
        default="minmax",
        help="activation ranges: minmax (the observed min and max; default), percentile "
        "(clip |x| at --percentile), entropy (the threshold minimising the KL divergence "
        "between the |x| histogram and its quantized form)",
    )
    q.add_argument(
        "--percentile",
        type=float,
        default=99.99,
        metavar="P",
        help="with --method percentile: the share of |x| kept unclipped, in %% (default 99.99)",
    )
    q.add_argument(
        "--activations",
        choices=("uint8", "int8"),
        default="uint8",
        help="uint8: asymmetric, a zero point per tensor (default); int8: symmetric, zero point 0",
    )
    q.add_argument(
        "--weight-bits",
        type=int,
        choices=(8, 7),
        default=8,
        help="8: weights in [-127, 127] (default); 7: in [-63, 63], still stored as int8. "
        "With uint8 activations, 7-bit weights let an AVX2 CPU without VNNI multiply "
        "4 bytes a lane per step (vpmaddubsw, which cannot saturate on them) instead of "
        "2 widened ones; they round each weight twice as coarsely",
    )
    q.set_defaults(fn=cmd_quantize)


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        with interrupts.handled():
            return args.fn(args)
    except PackagerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print("interrupted", file=sys.stderr)
        return 128 + getattr(e, "signum", signal.SIGINT)
    except Exception as e:  # a bug of ours: say so, keep the traceback at hand
        if os.environ.get("PACKAGER_DEBUG"):
            traceback.print_exc()
        print(
            f"internal error: {type(e).__name__}: {e} (PACKAGER_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
