"""What a report shows, read from a bundle directory (manifest.json, graph.json), a
per-layer profile (run_bundle's --profile-json) and tuning logs: plain data, no drawing.

The memory plan is rebuilt from graph.json alone: each arena entry is alive from the kernel
call that writes it to the last one that reads it (steps are kernel calls in order, as in
``inspect --plan``), at its storage's offset.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..errors import PackagerError
from ..graph.ir import np_dtype
from ..safe_paths import is_bundle
from ..tune.log import cost, read_records


@dataclass(frozen=True)
class Bundle:
    path: Path
    manifest: dict
    graph: dict

    @property
    def kernels(self) -> list[dict]:
        """graph.json's kernel nodes, in execution order (index = step)."""
        return [n for n in self.graph["nodes"] if n.get("op") == "kernel"]

    @property
    def model(self) -> str:
        return Path(self.manifest.get("model", {}).get("file", self.path.name)).stem

    @property
    def board(self) -> str:
        return self.manifest.get("board", {}).get("name", "?")

    def ops_of(self, step: int) -> list[str]:
        """The ops fused into kernel call ``step``: graph.json's ``ops`` where recorded,
        else the manifest's stats."""
        node = self.kernels[step]
        if node.get("ops"):
            return list(node["ops"])
        groups = self.manifest.get("stats", {}).get("fused_groups", [])
        return list(groups[step]) if step < len(groups) else [node["func"]]


def load_bundle(path: str | Path) -> Bundle:
    p = Path(path)
    if not is_bundle(p):
        raise PackagerError(
            f"{path}: not a bundle (no manifest.json saying it is a packager bundle); "
            f"give a directory made by `packager build`"
        )
    try:
        graph = json.loads((p / "graph.json").read_text())
    except (OSError, ValueError) as e:
        raise PackagerError(f"{p / 'graph.json'}: cannot read it: {e}") from e
    return Bundle(p, json.loads((p / "manifest.json").read_text()), graph)


def build_facts(b: Bundle) -> list[tuple[str, str]]:
    """(label, value) rows about the board and the build, what the bundle records."""
    m, stats = b.manifest, b.manifest.get("stats", {})
    board = m.get("board", {})
    devices = sorted({n.get("device", "cpu") for n in b.kernels})
    rows = [
        ("model", f"{m.get('model', {}).get('file', '?')} (sha256 {_short(m)})"),
        ("board", f"{board.get('name', '?')} ({board.get('arch', '?')}, cpu {board.get('cpu')})"),
        ("target", _target_facts(m)),
        ("packager version", str(m.get("packager_version", "?"))),
        ("kernels", f"{stats.get('kernels', '?')} distinct, {len(b.kernels)} calls"),
        ("devices", ", ".join(devices)),
        ("params", f"{stats.get('params_bytes', 0):,} bytes"),
        ("arena", f"{b.graph.get('arena_bytes', 0):,} bytes"),
        ("inputs", _io(m.get("inputs", []))),
        ("outputs", _io(m.get("outputs", []))),
        (
            "built",
            str(m.get("built") or m.get("build_date") or "not recorded (builds are reproducible)"),
        ),
        ("tuning applied", _tuning(m)),
    ]
    return rows


def _short(m: dict) -> str:
    return str(m.get("model", {}).get("sha256", "?"))[:12]


def _io(items: list[dict]) -> str:
    return ", ".join(f"{v['name']}: {v['dtype']}{v['shape']}" for v in items) or "-"


def _target_facts(m: dict) -> str:
    """The manifest's target fingerprints where recorded, else those of the board profile
    of that name as it is now (said so: it may have changed since the build)."""
    targets = m.get("targets") or m.get("target")
    if targets:
        items = targets if isinstance(targets, list) else [targets]
        return "; ".join(_compact(t) for t in items)
    from ..boards import load_board
    from ..target import targets_of

    name = m.get("board", {}).get("name", "")
    try:
        now = [t.fingerprint() for t in targets_of(load_board(name))]
    except PackagerError:
        return "not recorded in this bundle (and no board profile named " + repr(name) + ")"
    facts = "; ".join(_compact(t) for t in now)
    return f"{facts} (from the board profile {name} now: the bundle does not record them)"


def _tuning(m: dict) -> str:
    tuning = m.get("tuning")
    if tuning is None:
        return "not recorded in this bundle"
    return _compact(tuning)


def _compact(value) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_compact(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(_compact(v) for v in value) + "]"
    return str(value)


# --- the memory plan -------------------------------------------------------------------


@dataclass(frozen=True)
class PlanTensor:
    name: str  # the writing node's name (with ":k" for its output k > 0)
    func: str
    kind: str  # the first op the writing kernel fuses
    first: int  # steps, inclusive
    last: int
    offset: int  # bytes into the arena
    nbytes: int
    storage: int


def arena_tensors(b: Bundle) -> list[PlanTensor]:
    """Every arena entry of graph.json, in the order written."""
    try:
        return _arena_tensors(b)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise PackagerError(
            f"{b.path / 'graph.json'}: not the graph.json `packager build` writes "
            f"({type(e).__name__}: {e}); rebuild the bundle"
        ) from None


def _arena_tensors(b: Bundle) -> list[PlanTensor]:
    g = b.graph
    nodes, row_ptr, attrs = g["nodes"], g["node_row_ptr"], g["attrs"]
    step_of = {i: s for s, i in enumerate(k for k, n in enumerate(nodes) if n["op"] == "kernel")}
    last_read: dict[int, int] = {}
    for i, node in enumerate(nodes):
        for src, k in node.get("inputs", []):
            entry = row_ptr[src] + k
            last_read[entry] = max(last_read.get(entry, -1), step_of.get(i, -1))
    out = []
    for i, step in step_of.items():
        node = nodes[i]
        for k in range(node.get("num_outputs", 1)):
            entry = row_ptr[i] + k
            sid = attrs["storage_id"][entry]
            storage = g["storage"][sid]
            if storage.get("kind") != "arena":
                continue
            name = node["name"] if k == 0 else f"{node['name']}:{k}"
            nbytes = math.prod(attrs["shape"][entry]) * np_dtype(attrs["dtype"][entry]).itemsize
            last = max(step, last_read.get(entry, step))
            kind = b.ops_of(step)[0]
            out.append(
                PlanTensor(name, node["func"], kind, step, last, storage["offset"], nbytes, sid)
            )
    return out


# --- the per-layer profile (run_bundle --profile-json) ----------------------------------

PROFILE_KEYS = ("func", "median_ms", "share")


def load_profile(path: str | Path, b: Bundle) -> dict:
    """The profile document, checked against the contract and against the bundle (its
    kernels must be the bundle's), rows slowest first."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise PackagerError(f"--profile {path}: cannot read it: {e.strerror}") from e
    except ValueError as e:
        raise PackagerError(f"--profile {path}: not JSON: {e}") from e
    if (
        not isinstance(doc, dict)
        or doc.get("version") != 1
        or not isinstance(doc.get("kernels"), list)
    ):
        raise PackagerError(
            f"--profile {path}: not a version 1 profile (a JSON object with version 1 and a "
            f"kernels list, as `run_bundle --profile-json` writes)"
        )
    funcs = {n["func"] for n in b.kernels}
    for n, row in enumerate(doc["kernels"]):
        missing = [k for k in PROFILE_KEYS if not isinstance(row, dict) or k not in row]
        if missing:
            raise PackagerError(f"--profile {path}: kernels[{n}] lacks {', '.join(missing)}")
        if not all(isinstance(row[k], (int, float)) for k in ("median_ms", "share")):
            raise PackagerError(
                f"--profile {path}: kernels[{n}]: median_ms and share must be numbers"
            )
        if row["func"] not in funcs:
            raise PackagerError(
                f"--profile {path}: kernel {row['func']} is not in {b.path}/graph.json: the "
                f"profile is of another bundle"
            )
    doc["kernels"] = sorted(doc["kernels"], key=lambda r: -float(r["median_ms"]))
    return doc


# --- tuning curves ---------------------------------------------------------------------


@dataclass(frozen=True)
class Curve:
    label: str
    best_gflops: list[float]  # best so far after each trial (nan before the first success)


def tuning_curves(paths: list[str]) -> list[Curve]:
    """Per task of the logs (in order of first appearance), the best effective GFLOP/s
    (the task's nominal flops over the measured time) after each trial."""
    tasks: dict[tuple, list[dict]] = {}
    for path in paths:
        if not Path(path).is_file():
            raise PackagerError(f"--tuning-log {path}: no such file")
        for rec in read_records(path):
            key = (rec["board"]["name"], rec["task"]["key"])
            tasks.setdefault(key, []).append(rec)
    boards = {board for board, _ in tasks}
    curves = []
    for n, ((board, _), recs) in enumerate(tasks.items(), 1):
        best, series = math.nan, []
        for rec in recs:
            seconds = cost(rec)
            if math.isfinite(seconds) and seconds > 0:
                gflops = rec["task"]["flops"] / seconds / 1e9
                best = gflops if math.isnan(best) else max(best, gflops)
            series.append(best)
        label = f"T{n} {task_label(recs[0]['task'])}"
        curves.append(Curve(label + (f" ({board})" if len(boards) > 1 else ""), series))
    return curves


def task_label(task: dict) -> str:
    """The fused ops and the first input's shape, read from the task key when it has the
    tuner's form, else the template's name."""
    try:
        key = json.loads(task["key"])
        head, inputs = key[0], key[1]
        members = head[1] if head[0] == "fused" else [head]
        ops = [m[0] for m in members]
        shape = inputs[0][0]
        if all(isinstance(op, str) for op in ops) and all(isinstance(d, int) for d in shape):
            return f"{'+'.join(ops)} {'x'.join(map(str, shape))}"
    except (ValueError, TypeError, IndexError, KeyError):
        pass
    return str(task.get("template", "?"))
