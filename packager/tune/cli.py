"""The ``packager tune`` subcommand (kept here so cli.py stays a thin shell)."""

from __future__ import annotations

import sys
from pathlib import Path

from ..cli_args import BOARD_HELP, input_shapes
from ..errors import PackagerError
from ..graph.conv_algorithms import ALGORITHMS
from ..safe_paths import check_log_file
from .search import PROPOSERS


def add_parser(sub) -> None:
    t = sub.add_parser(
        "tune",
        help="tune the schedules of a model's kernels on a board",
        description="Extract MODEL's tunable kernels for BOARD and tune the costliest "
        "first, measuring candidates on the board (locally, or over SSH). Every "
        "measurement is appended to the log; running again resumes. Each task ends with "
        "its 3 fastest configs and the default measured again in 3 rounds side by side; "
        "`packager build --tuning-log FILE` runs the config with the lowest median of "
        "those rounds. At the end the model is built with the default and with the tuned "
        "schedules and both run on the board in turns: a kernel whose tuned schedule was "
        "not faster inside the model keeps its default (records with the error "
        "slower_in_model).",
    )
    t.add_argument("model", metavar="MODEL.onnx")
    t.add_argument("--board", required=True, help=BOARD_HELP)
    t.add_argument("--input-shape", action="append", metavar="NAME=D0,D1,...")
    t.add_argument(
        "--trials",
        type=int,
        default=200,
        help="valid measurements per task (200); configs that fail do not count",
    )
    t.add_argument(
        "--max-errors",
        type=int,
        metavar="N",
        help="configs that fail on the board (compile error, crash, wrong answer, "
        "timeout) tried at most per task before it stops (default: as many as --trials); "
        "configs the template refuses on the host are skipped without counting here",
    )
    t.add_argument("--tuner", choices=sorted(PROPOSERS), default="xgb")
    t.add_argument(
        "--early-stopping",
        type=int,
        metavar="K",
        help="stop a task after K trials without improvement",
    )
    t.add_argument("--time-budget", type=float, metavar="MINUTES", help="for the whole run")
    t.add_argument(
        "--log",
        metavar="FILE",
        help="tuning log to append to (default: MODEL.jsonl in tuning_logs/BOARD/ of a "
        "source checkout, else in ~/.local/share/packager/tuning_logs/BOARD/; `packager "
        "build` reads both); never truncated, and refused if it is a directory or a file "
        "that is not a tuning log",
    )
    t.add_argument("--seed", type=int, default=0)
    t.add_argument(
        "--conv-algorithm",
        action="append",
        choices=ALGORITHMS,
        metavar="ALG",
        help="tune only these forms of the 3x3 stride-1 convs (repeatable; default: all of "
        f"{', '.join(ALGORITHMS)}; the build takes the fastest form measured)",
    )
    t.add_argument(
        "--no-model-check",
        action="store_true",
        help="skip the last step: building the model with the default and with the tuned "
        "schedules, running both on the board in turns and keeping the default for every "
        "kernel whose tuned schedule was not faster inside the model",
    )
    t.set_defaults(fn=cmd_tune)


def cmd_tune(args) -> int:
    from ..boards import load_board
    from .run import default_log_path, summary, tune_model
    from .tuner import Options

    if args.trials < 1:
        raise PackagerError("--trials must be at least 1")
    board = load_board(args.board)
    log_path = Path(args.log) if args.log else default_log_path(args.model, board)
    check_log_file(log_path, "--log" if args.log else "tuning log")  # before any work
    opts = Options(trials=args.trials, tuner=args.tuner, early_stopping=args.early_stopping)
    opts.seed = args.seed
    opts.max_errors = args.max_errors
    results = tune_model(
        args.model,
        board,
        opts,
        log_path,
        input_shapes(args),
        args.time_budget,
        algorithms=args.conv_algorithm,
        model_check=not args.no_model_check,
    )
    print(summary(results))
    print(f"log: {log_path}", file=sys.stderr)
    return 0
