"""The board commands of the CLI (run, deploy, bench, clean, boards --ping): thin shells over
packager.remote.target, which hides whether the board is this machine or devices over SSH."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

from .cli_args import BOARD_HELP, add_connection_options, add_verify_option, log, parse_inputs
from .errors import PackagerError


def open_target(args, board_name: str):
    from .boards import load_board
    from .remote.ssh import Limits
    from .remote.target import open_target as open_

    if args.retries < 0 or args.timeout <= 0 or args.connect_timeout <= 0:
        raise PackagerError("--retries must be >= 0, --timeout and --connect-timeout > 0")
    limits = Limits(
        connect_timeout_s=args.connect_timeout,
        command_timeout_s=args.timeout,
        retries=args.retries,
    )
    return open_(load_board(board_name), limits, args.trust_on_first_use, log)


PROFILE_REPEAT = 20  # runs timed by --profile when --repeat does not say


def cmd_run(args) -> int:
    from .safe_paths import check_output_dir, check_output_file

    inputs = parse_inputs(args.input)
    if args.output_dir is not None:
        check_output_dir(args.output_dir)
    if args.profile_json is not None:
        check_output_file(args.profile_json, "--profile-json")
    profile = args.profile or args.profile_json is not None
    repeat = args.repeat or (PROFILE_REPEAT if profile else 0)
    fill = fill_args(args) + (["--profile"] if profile else [])
    target = open_target(args, args.board)
    try:
        r = target.run(
            Path(args.bundle),
            inputs,
            args.output_dir,
            repeat,
            args.timeout,
            verify=not args.no_verify,
            extra=fill,
            profile_json=args.profile_json,
        )
    finally:
        target.close()
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    killer = killed_by(r.returncode)
    if killer:
        print(f"error: run_bundle was killed by {killer}", file=sys.stderr)
        return 1  # a runtime failure, as any other of run_bundle's
    return r.returncode


def fill_args(args) -> list[str]:
    """run_bundle's --fill, --seed and --top, checked here so that a bad value is refused
    before anything is built or sent."""
    if args.seed is not None and not 0 <= args.seed < 2**64:
        raise PackagerError(f"--seed {args.seed}: expected an integer in [0, 2^64)")
    if args.top is not None and args.top < 1:
        raise PackagerError(f"--top {args.top}: expected an integer >= 1")
    pairs = [("--fill", args.fill), ("--seed", args.seed), ("--top", args.top)]
    return [str(x) for flag, value in pairs if value is not None for x in (flag, value)]


def killed_by(returncode: int) -> str | None:
    """The signal that ended run_bundle: targets report it as a shell does, 128+N
    (run_bundle's own exit codes are small)."""
    if returncode <= 128:
        return None
    try:
        return signal.Signals(returncode - 128).name
    except ValueError:
        return None


def cmd_deploy(args) -> int:
    target = open_target(args, args.board)
    try:
        lines, summary = target.deploy(Path(args.bundle), verify=not args.no_verify)
    finally:
        target.close()
    for line in lines:
        print(f"{line.device}: {line.text}")
    for s in summary:
        log(s)
    if any(line.selftest_failed for line in lines):
        return 3  # as run_bundle --selftest: the bundle gives wrong answers on the board
    return 0 if all(line.ok for line in lines) else 2


def cmd_bench(args) -> int:
    from .layer_compare import pair_bundles
    from .runner import load_manifest

    if args.repeat < 1:
        raise PackagerError(f"--repeat {args.repeat}: expected an integer >= 1")
    bundles = [Path(b) for b in args.bundles]
    manifests = [load_manifest(b) for b in bundles]
    pairs = pair_bundles(manifests)  # accelerated bundles: their counters need the profile
    target = open_target(args, args.board)
    try:
        rows, summary = target.bench(
            bundles,
            args.repeat,
            args.timeout,
            not args.no_verify,
            args.profile or bool(pairs),
        )
    finally:
        target.close()
    for s in summary:
        log(s)
    if args.profile:
        for row in rows:  # run_bundle's table, under a line saying what and where it measured
            print(profile_heading(row))
            print(row["table"])
    for a, c in pairs:
        print(accel_comparison(rows[a], manifests[a], *((rows[c], manifests[c]) if c else ())))
    if any(c is None for _, c in pairs):
        log(
            "the CPU time of the accelerator's layers: bench a bundle of the same model "
            "built with --cpu-only beside it"
        )
    for row in rows:  # one JSON line per bundle: the last line has median_ms, as `run`
        for key in ("profile", "table"):
            row.pop(key, None)
        print(json.dumps(row))
    return 0


def accel_comparison(row: dict, manifest: dict, cpu_row=None, cpu_manifest=None) -> str:
    """The accelerator's layers of one bundle (cycles, time at the profile's clock, GEMM
    utilisation) beside the same layers of its --cpu-only twin as the board's CPU ran
    them; the model's time both ways. Adds ``accel`` to ``row`` (its JSON line)."""
    from .layer_compare import compare, model_estimate, table

    accel = manifest["accel"]
    clock = float(accel["target"]["clock_mhz"])
    cpu_doc = cpu_row["profile"] if cpu_row else None
    rows = compare(row["profile"], clock, cpu_doc)
    estimate = model_estimate(row["profile"], rows)
    row["accel"] = {
        "clock_mhz": clock,
        "cycles": sum(r.cycles for r in rows),
        "accel_ms": round(sum(r.accel_ms for r in rows), 6),
        "model_estimate_ms": round(estimate, 6),
    }
    timer = "the simulator's cycle model" if accel["driver"] == "sim" else "the board's counter"
    head = (
        f"== accelerator layers of {row['profile']['model']} ({row['bundle']}) on "
        f"{row['device']}: board {row['profile']['board']}, cycles from {timer} at "
        f"{clock:g} MHz"
    )
    lines = []
    if cpu_row:
        cpu = next((t for t in cpu_manifest["targets"] if t["family"] == "cpu"), {})
        name = cpu.get("cpu_name") or cpu.get("model") or "cpu"
        head += (
            f"; CPU: the same layers of {cpu_row['bundle']} measured on {cpu_row['device']} "
            f"({name}, {cpu_doc['threads']} thread(s))"
        )
        cpu_total = cpu_doc["total"]["median_ms"]
        lines.append(
            f"model: CPU only {cpu_total:.4f} ms; with the accelerator ~{estimate:.4f} ms "
            f"(CPU kernels as measured, accelerator kernels at {clock:g} MHz): "
            f"{cpu_total / estimate:.2f}x"
        )
    return "\n".join([head + " ==", table(rows, clock), *lines])


def profile_heading(row: dict) -> str:
    """``== model (bundle) on device: board, N threads, median X ms ==`` from the profile."""
    doc = row["profile"]
    where = doc["device"] if doc["device"] != "cpu" else f"{doc['threads']} thread(s)"
    return (
        f"== {doc['model']} ({row['bundle']}) on {row['device']}: board {doc['board']}, "
        f"{where}, median {doc['total']['median_ms']:.4f} ms over {doc['repeat']} runs =="
    )


def cmd_clean(args) -> int:
    target = open_target(args, args.board)
    try:
        lines, ok = target.clean()
    finally:
        target.close()
    for line in lines:
        print(line)
    return 0 if ok else 2


def ping(args) -> int:
    target = open_target(args, args.ping)
    try:
        rows = target.ping()
    finally:
        target.close()
    for r in rows:
        if not r["reachable"]:
            print(f"{r['device']}: UNREACHABLE: {r['error']}")
            continue
        extra = [f"host key {r['host_key']}"] if "host_key" in r else []
        extra += [f"rtt {r['rtt_ms']} ms"] if "rtt_ms" in r else []
        print(f"{r['device']}: reachable, arch {r['arch']}" + "".join(f", {e}" for e in extra))
    return 0 if all(r["reachable"] for r in rows) else 2


def probe(args) -> int:
    """boards --probe: read the board's first device and write the user's copy of its
    profile (packager/board_facts.py says when it may)."""
    from .board_facts import changes, user_copy, write_profile, written_by_packager
    from .board_facts import probe as read_device

    target = open_target(args, args.probe)
    board = target.board
    if board.is_local:
        raise PackagerError(
            f"board {board.name!r} is this machine: say `detect: true` in its profile "
            "(packager boards --show shows what is detected)"
        )
    session = target.sessions[0]
    try:
        values = read_device(session)
    finally:
        target.close()
    diff = changes(board, values)
    path = user_copy(board)
    for key, old, new in diff:
        print(f"  {key}: {_shown(old)} -> {_shown(new)}")
    if not diff:
        print(f"{board.name}: the profile already says what {session.conn.label} reports")
        return 0
    if not written_by_packager(path) and not args.write:
        print(
            f"{path} was not written by the packager: not changed (--write to change it; "
            "only the keys above are rewritten, the rest of the file is kept)"
        )
        return 1
    write_profile(board, values, session.conn.label)
    print(f"wrote {path}")
    return 0


def _shown(value) -> str:
    return "(none)" if value is None else str(value)


def add_parsers(sub) -> None:
    """deploy, bench and clean; `run` and `boards` add their own options with the helpers."""
    d = sub.add_parser(
        "deploy",
        help="copy a bundle to a board over SSH, build it, self-test it there",
        description="Upload OUT to every device of BOARD over SFTP (files whose sha256 "
        "already matches are skipped) into a temporary directory, verify the hashes, build "
        "(cross-compiled on this machine, or on the device if the profile says so), move it "
        "into place, then run `run_bundle --selftest` on the device. A failed deploy never "
        "leaves a bundle that looks complete. Exit 3 if a selftest fails.",
    )
    d.add_argument("bundle", metavar="OUT")
    d.add_argument("--board", required=True, help=BOARD_HELP)
    add_verify_option(d)
    add_connection_options(d)
    d.set_defaults(fn=cmd_deploy)

    b = sub.add_parser(
        "bench",
        help="time bundles on a board (the devices of a pool share the work)",
        description="Run each bundle's selftest, then time --repeat runs of it, on the "
        "board's devices in parallel. Prints one JSON line per bundle (median_ms, min_ms, "
        "mean_ms, repeat, device); stderr says which device did what. With --profile, "
        "first each bundle's per-kernel table as its device measured it.",
    )
    b.add_argument("bundles", nargs="+", metavar="OUT")
    b.add_argument("--board", required=True, help=BOARD_HELP)
    b.add_argument("--repeat", type=int, default=20, metavar="N", help="default 20")
    b.add_argument(
        "--profile",
        action="store_true",
        help="time each kernel too and print its table (run_bundle --profile) per bundle",
    )
    add_verify_option(b)
    add_connection_options(b)
    b.set_defaults(fn=cmd_bench)

    c = sub.add_parser(
        "clean",
        help="remove what the packager deployed on a board's devices",
        description="On every device of BOARD, remove the bundles, partial deploys and run "
        "directories the packager made in connection.workdir, then the workdir itself if "
        "nothing else is in it. Only a workdir the packager created (marked "
        ".packager-workdir) is touched; anything else is refused (exit 2).",
    )
    c.add_argument("--board", required=True, help=BOARD_HELP)
    add_connection_options(c)
    c.set_defaults(fn=cmd_clean)
