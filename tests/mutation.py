"""Seeded random mutations of real models, each built with the CLI in a process of its own.

A mutant is named by its seed alone: ``mutant(seed)`` picks a base model and one to three
mutations from ``MUTATIONS`` with ``random.Random(seed)``, so any result reproduces from
its seed. ``run_mutant`` builds it with ``packager build`` under a wall-clock limit and an
address-space limit, and classifies the outcome:

- ``ok``: exit 0 and the bundle passes its own selftest (``selftest`` when it does not);
- ``refused``: exit 2 with an ``error: ...`` line and no traceback;
- ``internal``: exit 1, any other exit code, a signal, or a traceback on stderr;
- ``hang``: still running at the wall-clock limit.

Used by tests/test_mutants.py and bench/mutants.py.
"""

from __future__ import annotations

import functools
import math
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
TIME_LIMIT_S = 30.0
# The worker's address space: a mutant that allocates past it fails (MemoryError), never
# takes the shared machine's memory. The board below says 1 GiB, so a valid build fits.
ADDRESS_SPACE = 6 << 30
BOARD_MEMORY_MB = 1024
NAME_MARK = "zzMUTANTNAMEzz"  # replaced by invalid UTF-8 of the same length once serialized


# --- base models -----------------------------------------------------------------------------


def _node_model(name, nodes, inputs, outputs, inits=(), opset=13) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _const(name, arr):
    import numpy as np

    return numpy_helper.from_array(np.asarray(arr), name)


def _small_models() -> dict[str, onnx.ModelProto]:
    """Single-op and few-op models over the ops whose templates differ most."""
    import numpy as np

    rng = np.random.default_rng(0)
    w = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return {
        "matmul": _node_model(
            "matmul",
            [
                helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
                helper.make_node("Add", ["y", "b"], ["z"], name="bias"),
            ],
            [_f32("x", [4, 16])],
            [_f32("z", [4, 8])],
            [_const("w", w(16, 8)), _const("b", w(8))],
        ),
        "gemm": _node_model(
            "gemm",
            [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1)],
            [_f32("x", [2, 12])],
            [_f32("y", [2, 6])],
            [_const("w", w(6, 12)), _const("b", w(6))],
        ),
        "depthwise": _node_model(
            "depthwise",
            [
                helper.make_node("Conv", ["x", "w"], ["y"], name="dw", group=8, pads=[1, 1, 1, 1]),
                helper.make_node("Relu", ["y"], ["z"], name="act"),
            ],
            [_f32("x", [1, 8, 10, 10])],
            [_f32("z", [1, 8, 10, 10])],
            [_const("w", w(8, 1, 3, 3))],
        ),
        "reshape": _node_model(
            "reshape",
            [
                helper.make_node("Reshape", ["x", "s"], ["r"], name="flat"),
                helper.make_node("Transpose", ["r"], ["t"], name="tr", perm=[1, 0]),
                helper.make_node("Softmax", ["t"], ["y"], name="sm", axis=1),
            ],
            [_f32("x", [2, 3, 4])],
            [_f32("y", [12, 2])],
            [_const("s", np.array([2, 12], np.int64))],
        ),
        "pool_concat": _node_model(
            "pool_concat",
            [
                helper.make_node(
                    "AveragePool", ["x"], ["a"], name="avg", kernel_shape=[2, 2], strides=[2, 2]
                ),
                helper.make_node(
                    "MaxPool", ["x"], ["m"], name="max", kernel_shape=[2, 2], strides=[2, 2]
                ),
                helper.make_node("Concat", ["a", "m"], ["c"], name="cat", axis=1),
                helper.make_node("ReduceMean", ["c"], ["y"], name="mean", axes=[2, 3]),
            ],
            [_f32("x", [1, 4, 8, 8])],
            [_f32("y", [1, 8, 1, 1])],
        ),
    }


@functools.cache
def base_models() -> dict[str, bytes]:
    """Name -> serialized model: the example CNN, small networks, light ONNX models."""
    sys.path.insert(0, str(ROOT / "examples"))
    import networks

    models = {"tiny_cnn": (ROOT / "examples" / "tiny_cnn.onnx").read_bytes()}
    models["mobilenet_v2"] = networks.mobilenet_v2(width=0.35, size=32, classes=10)
    models["resnet"] = networks.resnet(blocks=(1, 1), width=8, size=32, classes=10)
    models.update(_small_models())
    for name in ("squeezenet", "bvlc_alexnet"):
        path = LIGHT / f"light_{name}.onnx"
        if path.is_file():
            models[name] = path.read_bytes()
    return {k: v if isinstance(v, bytes) else v.SerializeToString() for k, v in models.items()}


# --- mutations -------------------------------------------------------------------------------
# Each takes (model, rng) and changes the model in place; it returns a short description,
# or None when the model has nothing it applies to.

DIMS = (0, -1, -7, 2**40, 2**31, 2**62, 1, 3, 1000, 100003)
OPS = (
    "Conv", "MatMul", "Gemm", "Add", "Mul", "Relu", "MaxPool", "AveragePool", "Reshape",
    "Transpose", "Concat", "Softmax", "BatchNormalization", "GlobalAveragePool", "Flatten",
    "Pad", "Resize", "Gather", "ReduceMean", "Split", "Slice", "Squeeze", "Unsqueeze",
    "Sigmoid", "Clip", "NoSuchOp",
)  # fmt: skip


def _dim(rng) -> int:
    return rng.choice(DIMS) if rng.random() < 0.7 else rng.randint(-3, 1 << 20)


def _value_infos(m):
    return [*m.graph.input, *m.graph.output, *m.graph.value_info]


def mut_value_dim(m, rng):
    vis = [v for v in _value_infos(m) if v.type.tensor_type.shape.dim]
    if not vis:
        return None
    vi = rng.choice(vis)
    dims = vi.type.tensor_type.shape.dim
    k = rng.randrange(len(dims))
    dims[k].dim_value = _dim(rng)
    return f"dim {k} of value '{vi.name}' = {dims[k].dim_value}"


def mut_init_dim(m, rng):
    inits = [t for t in m.graph.initializer if t.dims]
    if not inits:
        return None
    t = rng.choice(inits)
    k = rng.randrange(len(t.dims))
    t.dims[k] = _dim(rng)
    return f"dim {k} of initializer '{t.name}' = {t.dims[k]}"


def mut_init_reshape(m, rng):
    """New data of another shape that agrees with its dims: reaches past the import checks
    into the converters, passes and templates."""
    import numpy as np

    inits = [t for t in m.graph.initializer if t.data_type == TensorProto.FLOAT]
    if not inits:
        return None
    t = rng.choice(inits)
    dims = list(t.dims) or [1]
    k = rng.randrange(len(dims))
    op = rng.randrange(3)
    if op == 0:
        dims[k] = rng.choice((0, 1, 2, dims[k] + 1, dims[k] * 2))
    elif op == 1:
        dims.insert(k, rng.choice((1, 2)))
    elif len(dims) > 1:
        del dims[k]
    if math.prod(dims) > 1 << 22:
        return None
    arr = np.random.default_rng(rng.randrange(1 << 30)).standard_normal(dims)
    t.CopyFrom(numpy_helper.from_array(arr.astype(np.float32), t.name))
    return f"initializer '{t.name}' remade as float32{dims}"


def mut_rank(m, rng):
    vis = [v for v in m.graph.input if v.type.HasField("tensor_type")]
    if not vis:
        return None
    vi = rng.choice(vis)
    shape = vi.type.tensor_type.shape
    if rng.random() < 0.5 and shape.dim:
        del shape.dim[rng.randrange(len(shape.dim))]
        return f"input '{vi.name}' loses a dim"
    shape.dim.add().dim_value = rng.choice((1, 2, 5))
    return f"input '{vi.name}' gains a dim"


def _dtype(rng) -> int:
    return rng.choice((*range(0, 24), 99, 1000)) if rng.random() < 0.9 else rng.randint(-5, 50)


def mut_input_dtype(m, rng):
    vis = [v for v in _value_infos(m) if v.type.HasField("tensor_type")]
    if not vis:
        return None
    vi = rng.choice(vis)
    vi.type.tensor_type.elem_type = _dtype(rng)
    return f"elem_type of '{vi.name}' = {vi.type.tensor_type.elem_type}"


def mut_init_dtype(m, rng):
    if not m.graph.initializer:
        return None
    t = rng.choice(m.graph.initializer)
    t.data_type = _dtype(rng)
    return f"data_type of initializer '{t.name}' = {t.data_type}"


def mut_raw_data(m, rng):
    inits = [t for t in m.graph.initializer if t.raw_data]
    if not inits:
        return None
    t = rng.choice(inits)
    n = len(t.raw_data)
    cut = rng.choice((0, 1, n // 2, n - 1, n + 1, n + 4, 2 * n))
    t.raw_data = (t.raw_data * 3)[:cut]
    return f"raw_data of initializer '{t.name}': {n} -> {cut} bytes"


def mut_float_data(m, rng):
    if not m.graph.initializer:
        return None
    t = rng.choice(m.graph.initializer)
    size = 1
    for d in t.dims:
        size *= d
    count = max(0, size + rng.choice((-size, -1, 1, 7, size)))
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.float_data.extend([0.5] * min(count, 1 << 16))
    return f"float_data of initializer '{t.name}': {len(t.float_data)} values for {size}"


def _names(m):
    """(description, getter, setter) for every name field of the graph."""
    refs = []
    for seq, what in ((m.graph.input, "input"), (m.graph.output, "output")):
        refs += [(f"{what} '{v.name}'", v) for v in seq]
    refs += [(f"initializer '{t.name}'", t) for t in m.graph.initializer]
    return refs


def mut_name(m, rng):
    nodes = list(m.graph.node)
    choice = rng.random()
    all_names = sorted({n for node in nodes for n in (*node.input, *node.output) if n})
    new = rng.choice((NAME_MARK, "", rng.choice(all_names) if all_names else "x"))
    if choice < 0.5 and nodes:
        node = rng.choice(nodes)
        field = node.input if rng.random() < 0.5 and node.input else node.output
        if not field:
            return None
        k = rng.randrange(len(field))
        old, field[k] = field[k], new
        return f"node '{node.name}' {len(field)}-edge '{old}' renamed {new!r}"
    refs = _names(m)
    if not refs:
        return None
    what, obj = rng.choice(refs)
    obj.name = new
    return f"{what} renamed {new!r}"


def mut_node_name(m, rng):
    if not m.graph.node:
        return None
    node = rng.choice(m.graph.node)
    node.name = rng.choice((NAME_MARK, "", m.graph.node[0].name))
    return f"node renamed {node.name!r}"


def _attr_value(rng, attr):
    kind = rng.random()
    if kind < 0.6 and attr.type == onnx.AttributeProto.INT:
        return helper.make_attribute(attr.name, rng.choice((-1, 0, 2**40, -(2**40), 7)))
    if kind < 0.6 and attr.type == onnx.AttributeProto.INTS:
        ints = list(attr.ints)
        op = rng.randrange(4)
        if op == 0 and ints:
            ints[rng.randrange(len(ints))] = rng.choice((-1, 0, 2**40, 2**20, 3))
        elif op == 1:
            ints = ints[: rng.randrange(len(ints) + 1)]
        elif op == 2:
            ints = ints + [rng.choice((0, 1, 2))]
        else:
            ints = [rng.choice((-3, 0, 1, 99)) for _ in ints]
        return helper.make_attribute(attr.name, ints, attr_type=onnx.AttributeProto.INTS)
    wrong = (1.5, "text", [1.0, 2.0], b"\xff\xfe", [2**40], -(2**63))
    return helper.make_attribute(attr.name, rng.choice(wrong))


def mut_attribute(m, rng):
    nodes = [n for n in m.graph.node if n.attribute]
    if not nodes:
        return None
    node = rng.choice(nodes)
    k = rng.randrange(len(node.attribute))
    attr = node.attribute[k]
    if rng.random() < 0.2:
        del node.attribute[k]
        return f"node '{node.name}' loses attribute '{attr.name}'"
    new = _attr_value(rng, attr)
    node.attribute[k].CopyFrom(new)
    return f"node '{node.name}' attribute '{attr.name}' = {helper.get_attribute_value(new)!r}"


def mut_add_attribute(m, rng):
    if not m.graph.node:
        return None
    node = rng.choice(m.graph.node)
    name = rng.choice(("axis", "group", "kernel_shape", "strides", "perm", "pads", "alpha"))
    if any(a.name == name for a in node.attribute):
        return None
    node.attribute.append(helper.make_attribute(name, rng.choice((-1, 3, [1, 2], 2**40))))
    return f"node '{node.name}' gains attribute '{name}'"


def mut_edges(m, rng):
    if not m.graph.node:
        return None
    node = rng.choice(m.graph.node)
    field, what = (node.input, "input") if rng.random() < 0.6 else (node.output, "output")
    op = rng.randrange(4)
    if op == 0 and field:
        del field[rng.randrange(len(field))]
        return f"node '{node.name}' drops an {what}"
    if op == 1 and field:
        field.append(rng.choice(field))
        return f"node '{node.name}' duplicates an {what}"
    if op == 2:
        field.append("")
        return f"node '{node.name}' gains an empty {what}"
    field.append("no_such_value")
    return f"node '{node.name}' gains {what} 'no_such_value'"


def mut_graph_outputs(m, rng):
    op = rng.randrange(4)
    outs = m.graph.output
    if op == 0 and outs:
        outs.append(outs[rng.randrange(len(outs))])
        return "duplicate graph output"
    if op == 1:
        del outs[:]
        return "no graph outputs"
    if op == 2 and m.graph.node:
        inner = rng.choice(m.graph.node)
        if inner.output and inner.output[0]:
            outs.append(helper.make_empty_tensor_value_info(inner.output[0]))
            return f"graph output '{inner.output[0]}' added"
    names = [v.name for v in (*m.graph.input, *m.graph.initializer)]
    if names:
        outs.append(helper.make_empty_tensor_value_info(rng.choice(names)))
        return "an input or initializer as a graph output"
    return None


def mut_op_type(m, rng):
    if not m.graph.node:
        return None
    node = rng.choice(m.graph.node)
    old, node.op_type = node.op_type, rng.choice(OPS)
    return f"node '{node.name}' {old} -> {node.op_type}"


def mut_opset(m, rng):
    version = rng.choice((1, 5, 6, 7, 9, 10, 11, 12, 14, 17, 18, 19, 21, 22, 99, 0))
    for imp in m.opset_import:
        if imp.domain in ("", "ai.onnx"):
            imp.version = version
    return f"opset {version}"


def mut_drop_node(m, rng):
    if len(m.graph.node) < 2:
        return None
    k = rng.randrange(len(m.graph.node))
    del m.graph.node[k]
    return f"node {k} removed"


def mut_drop_init(m, rng):
    if not m.graph.initializer:
        return None
    k = rng.randrange(len(m.graph.initializer))
    name = m.graph.initializer[k].name
    del m.graph.initializer[k]
    return f"initializer '{name}' removed"


MUTATIONS = (
    mut_value_dim,
    mut_value_dim,
    mut_init_dim,
    mut_init_reshape,
    mut_init_reshape,
    mut_rank,
    mut_input_dtype,
    mut_init_dtype,
    mut_raw_data,
    mut_float_data,
    mut_name,
    mut_node_name,
    mut_attribute,
    mut_attribute,
    mut_add_attribute,
    mut_edges,
    mut_graph_outputs,
    mut_op_type,
    mut_opset,
    mut_drop_node,
    mut_drop_init,
)


def _corrupt_bytes(data: bytes, rng) -> tuple[bytes, str]:
    buf = bytearray(data)
    op = rng.randrange(3)
    if op == 0:
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        return bytes(buf), "bytes flipped"
    if op == 1:
        cut = rng.randrange(len(buf))
        return bytes(buf[:cut]), f"file cut at {cut} of {len(buf)} bytes"
    at = rng.randrange(len(buf))
    return bytes(buf[:at]) + bytes(rng.randrange(256) for _ in range(9)) + bytes(buf[at:]), (
        "bytes inserted"
    )


@dataclass
class Mutant:
    seed: int
    base: str
    changes: list[str]
    data: bytes


def mutant(seed: int) -> Mutant:
    """The mutant of ``seed``: a base model with one to three random mutations."""
    rng = random.Random(seed)
    models = base_models()
    base = rng.choice(sorted(models))
    model = onnx.ModelProto.FromString(models[base])
    changes = []
    for _ in range(rng.randint(1, 3)):
        what = rng.choice(MUTATIONS)(model, rng)
        if what:
            changes.append(what)
    data = model.SerializeToString()
    mark = NAME_MARK.encode()
    if mark in data:  # protobuf refuses invalid UTF-8 in a str field; the bytes do not
        data = data.replace(mark, b"\xff\xfe" + mark[2:])
        changes.append("a name made invalid UTF-8")
    if rng.random() < 0.08:
        data, what = _corrupt_bytes(data, rng)
        changes.append(what)
    return Mutant(seed, base, changes, data)


# --- running ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    seed: int
    base: str
    changes: list[str]
    kind: str  # ok, refused, internal, hang, selftest
    code: int | None
    message: str  # the error line of stderr, else its last line

    @property
    def failed(self) -> bool:
        return self.kind not in ("ok", "refused")


def board_file(directory: Path) -> Path:
    """The host profile with a memory size, so that oversized tensors are refused."""
    from packager.boards import schema_keys

    text = (ROOT / "board_profiles" / "host.yaml").read_text()
    text = text.replace("name: host", "name: mutant_host")
    if "ram_mb" in schema_keys():
        text += f"ram_mb: {BOARD_MEMORY_MB}\n"
    path = Path(directory) / "mutant_host.yaml"
    path.write_text(text)
    return path


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_mutant(seed: int, workdir: Path, board: Path, timeout: float = TIME_LIMIT_S) -> Outcome:
    """Build the mutant of ``seed`` with ``packager build`` in a process of its own."""
    m = mutant(seed)
    model = Path(workdir) / f"mutant_{seed}.onnx"
    model.write_bytes(m.data)
    out = Path(workdir) / f"mutant_{seed}"
    cmd = [sys.executable, "-m", "packager.cli", "build", str(model), "--board", str(board)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PACKAGER_DEBUG", None)
    try:
        p = subprocess.run(
            [*cmd, "-o", str(out)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=env,
            cwd=workdir,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        return Outcome(seed, m.base, m.changes, "hang", None, f"still running after {timeout}s")
    lines = p.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    last = errors[0] if errors else lines[-1] if lines else ""
    if p.returncode == 0 and "Traceback" not in p.stderr:
        passed, said = selftest(out, board)
        shutil.rmtree(out, ignore_errors=True)
        return Outcome(seed, m.base, m.changes, "ok" if passed else "selftest", 0, said)
    refused = p.returncode == 2 and errors and "Traceback" not in p.stderr
    kind = "refused" if refused else "internal"
    return Outcome(seed, m.base, m.changes, kind, p.returncode, last or f"exit {p.returncode}")


def selftest(bundle: Path, board: Path) -> tuple[bool, str]:
    """Build the bundle with CMake and run its selftest: (passed, what it printed)."""
    from packager.boards import load_board
    from packager.errors import PackagerError
    from packager.runner import selftest_local

    try:
        p = selftest_local(bundle, load_board(board))
    except PackagerError as e:
        return False, str(e)
    return p.returncode == 0, (p.stdout + p.stderr).strip()[-400:]


def run_many(seeds, jobs: int = 2, timeout: float = TIME_LIMIT_S, workdir=None):
    """Run the mutants of ``seeds`` ``jobs`` at a time; yields each Outcome as it ends."""
    from concurrent.futures import ThreadPoolExecutor

    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="mutants-")
        workdir = tmp.name
    workdir = Path(workdir)
    board = board_file(workdir)
    base_models()  # once, before the threads share it
    try:
        with ThreadPoolExecutor(jobs) as pool:
            yield from pool.map(lambda s: run_mutant(s, workdir, board, timeout), seeds)
    finally:
        if tmp:
            tmp.cleanup()
