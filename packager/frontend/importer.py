"""ONNX import: a model file and fixed input shapes to a Graph of library ops.

The steps, in order: load and check the model, fix every input shape, take the
initializers as constants, then walk the nodes in order. A node whose inputs are all
constants (or that only reads shapes, which are static) is evaluated now with onnx's
reference implementation, so shape subgraphs and weight generators disappear. Every
other node goes through its converter, and the outputs' shapes and dtypes come from the
op's own compute, so the shapes the kernels are generated for are the ones checked here.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .. import te
from ..errors import PackagerError, UnsupportedOpsError
from ..graph.ir import Graph, Node, Value
from ..ops.registry import get_op
from ..reference import evaluator
from . import control_flow
from .context import ConvertContext
from .converters.registry import get_converter

ONNX_DTYPES = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.DOUBLE: "float64",
    onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.INT16: "int16",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.UINT16: "uint16",
    onnx.TensorProto.UINT32: "uint32",
    onnx.TensorProto.UINT64: "uint64",
    onnx.TensorProto.BOOL: "bool",
}

# Ops that read only their input's shape: always foldable, shapes being static.
SHAPE_ONLY = {"Shape", "Size"}
# Ops whose output shape is their input's value: supported when the inputs are constants.
VALUE_SHAPED = {
    "ConstantOfShape",
    "Range",
    "Constant",
    "HannWindow",
    "HammingWindow",
    "BlackmanWindow",
}
DEFAULT_DOMAINS = ("", "ai.onnx")
# Element types an initializer may have when only package-time folding reads it (a Cast of
# float16 weights): numpy holds them, the kernels never see them.
FOLD_ONLY_DTYPES = {onnx.TensorProto.FLOAT16: "float16"}


def load_model(path: str) -> onnx.ModelProto:
    """Load and check an ONNX file; any problem is a PackagerError naming the file."""
    if not os.path.isfile(path):
        raise PackagerError(f"{path}: no such file")
    try:
        model = onnx.load(path)
    except Exception as e:  # protobuf raises several types for a corrupt file
        raise PackagerError(f"{path}: not a readable ONNX model ({type(e).__name__}: {e})") from e
    if not model.graph.node and not model.graph.output:
        raise PackagerError(f"{path}: not an ONNX model (empty graph)")
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0]
        raise PackagerError(f"{path}: invalid ONNX model: {first}") from e
    except UnicodeDecodeError as e:  # protobuf keeps a str field's bytes as they were
        raise PackagerError(
            f"{path}: invalid ONNX model: a name or string is not valid UTF-8 ({e.reason} "
            f"at byte {e.start} of {e.object[max(0, e.start - 20) : e.end + 20]!r})"
        ) from e
    return model


def check_names(model: onnx.ModelProto, path: str) -> None:
    """Names go into the bundle and its messages; protobuf hands one that is not valid
    UTF-8 over as bytes, and onnx's checker does not read every name."""
    for what, name in _names(model.graph):
        if not isinstance(name, str):
            raise PackagerError(f"{path}: {what}: the name {name!r} is not valid UTF-8")


def _names(g: onnx.GraphProto):
    for kind, seq in (("input", g.input), ("output", g.output), ("initializer", g.initializer)):
        yield from ((f"graph {kind} {k}", v.name) for k, v in enumerate(seq, 1))
    for k, node in enumerate(g.node, 1):
        where = f"node {k} ({node.op_type})"
        yield where, node.name
        yield from ((f"{where}: input {i}", n) for i, n in enumerate(node.input))
        yield from ((f"{where}: output {i}", n) for i, n in enumerate(node.output))


def check_outputs(model: onnx.ModelProto, path: str) -> None:
    """A bundle's outputs are addressed by name: at least one, each named once."""
    names = [o.name for o in model.graph.output]
    if not names:
        raise PackagerError(f"{path}: the graph has no outputs")
    seen = set()
    for name in names:
        if name in seen:
            raise PackagerError(f"{path}: graph output '{name}' is listed more than once")
        seen.add(name)


def model_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in DEFAULT_DOMAINS:
            return imp.version
    return 1


# The newest ai.onnx opset the converters are tested against: the installed onnx's, whose
# backend node suite (every opset up to it) is the conformance bar (tests/conformance). A
# newer opset may change what an op means, so a model using one is named in a warning (the
# import still goes on).
NEWEST_TESTED_OPSET = onnx.defs.onnx_opset_version()


def warn_new_opset(model: onnx.ModelProto, path: str) -> None:
    opset = model_opset(model)
    if opset > NEWEST_TESTED_OPSET:
        print(
            f"warning: {path}: ai.onnx opset {opset} is newer than the newest the packager "
            f"was tested with ({NEWEST_TESTED_OPSET}); check the results",
            file=sys.stderr,
        )


KERNEL_DTYPES = set(ONNX_DTYPES.values())
# Without a board's memory size a tensor is still bounded: the memory plan adds sizes in
# int64 and the runtime in size_t, which a model's huge dims would overflow.
MAX_TENSOR_BYTES = 1 << 48


def dtype_of(elem_type: int, what: str) -> str:
    if elem_type not in ONNX_DTYPES:
        raise PackagerError(f"{what}: element type {type_name(elem_type)} is not supported")
    return ONNX_DTYPES[elem_type]


def type_name(elem_type: int) -> str:
    """The ONNX name of an element type, or the number when it names none."""
    names = {v: k for k, v in onnx.TensorProto.DataType.items()}
    return names.get(elem_type, f"{elem_type} (not an ONNX element type)")


def check_size(shape, dtype: str, what: str, max_bytes: int | None) -> None:
    """Refuse a tensor with a negative dim, or larger than the board's memory."""
    if any(d < 0 for d in shape):
        raise PackagerError(f"{what}: negative dim in shape {list(shape)}")
    size = math.prod(shape) * np.dtype("bool" if dtype == "bool" else dtype).itemsize
    if size > _limit(max_bytes):
        raise PackagerError(
            f"{what}: {dtype}{list(shape)} takes {size:,} bytes, more than {_memory(max_bytes)}"
        )


def _limit(max_bytes: int | None) -> int:
    return MAX_TENSOR_BYTES if max_bytes is None else max_bytes


def _memory(max_bytes: int | None) -> str:
    whose = "any" if max_bytes is None else "the board's"
    return f"{whose} memory ({_limit(max_bytes):,} bytes)"


def check_initializer_inputs(model: onnx.ModelProto, path: str) -> None:
    """An initializer also listed as a graph input (a default value, in ONNX's terms) is
    taken as a constant: the type and dims the input declares must be the initializer's,
    else other runtimes read the model differently."""
    inits = {t.name: t for t in model.graph.initializer}
    for vi in model.graph.input:
        t = inits.get(vi.name)
        if t is None or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        declared = [d if isinstance(d, int) else None for d in input_dims(vi) or []]
        shape_differs = tt.HasField("shape") and (
            len(declared) != len(t.dims)
            or any(d is not None and d != k for d, k in zip(declared, t.dims, strict=True))
        )
        if tt.elem_type != t.data_type or shape_differs:
            raise PackagerError(
                f"{path}: input '{vi.name}' is declared {type_name(tt.elem_type)}"
                f"{['?' if d is None else d for d in declared]}, but its initializer is "
                f"{type_name(t.data_type)}{list(t.dims)}"
            )


def load_initializer(t: onnx.TensorProto, path: str, max_bytes: int | None) -> Value:
    """An initializer as a constant Value; its declared type, dims and data must agree."""
    what = f"{path}: initializer '{t.name}'"
    if t.data_type not in ONNX_DTYPES and t.data_type not in FOLD_ONLY_DTYPES:
        raise PackagerError(f"{what}: element type {type_name(t.data_type)} is not supported")
    dtype = ONNX_DTYPES.get(t.data_type) or FOLD_ONLY_DTYPES[t.data_type]
    check_size(tuple(t.dims), dtype, what, max_bytes)
    try:
        arr = numpy_helper.to_array(t)
    except Exception as e:  # numpy says a size or type mismatch in several ways
        raise PackagerError(
            f"{what}: its data does not fit dims {list(t.dims)} of type "
            f"{type_name(t.data_type)} ({e})"
        ) from e
    return Value(t.name, tuple(arr.shape), np_to_dtype(arr), arr)


def np_to_dtype(arr: np.ndarray) -> str:
    return "bool" if arr.dtype == np.bool_ else str(arr.dtype)


def input_dims(vi: onnx.ValueInfoProto) -> list | None:
    """An input's declared dims: an int for a fixed dim, else a string for a dynamic one:
    its symbol (``batch``), ``?`` for a dim with neither value nor name, or the value as
    text for a negative one (``-1``, the exporters' other spelling of "dynamic"). None
    when the rank itself is not declared."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [_dim(d) for d in tt.shape.dim]


def _dim(d) -> int | str:
    if d.HasField("dim_value"):
        return d.dim_value if d.dim_value >= 0 else str(d.dim_value)
    return d.dim_param or "?"


def is_dynamic(dims: list | None) -> bool:
    return dims is None or any(not isinstance(d, int) for d in dims)


def dims_text(dims: list | None) -> str:
    return "of unknown rank" if dims is None else f"[{', '.join(map(str, dims))}]"


def graph_input_shapes(
    model: onnx.ModelProto,
    overrides: dict[str, list[int]] | None,
    path: str = "model",
    max_bytes: int | None = None,
) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, dtype) of every runtime input, dynamic dims fixed by ``overrides``.
    Every input left dynamic is named in one error, with the flag that fixes it."""
    overrides = dict(overrides or {})
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    known = [i.name for i in inputs]
    for name in overrides:
        if name not in known:
            raise PackagerError(
                f"{path}: --input-shape names '{name}', which is not an input "
                f"(inputs: {', '.join(known) or 'none'})"
            )
    out, open_dims = {}, {}
    for vi in inputs:
        what = f"{path}: input '{vi.name}'"
        dtype = dtype_of(vi.type.tensor_type.elem_type, what)
        dims = input_dims(vi)
        if vi.name in overrides:
            shape = tuple(overrides[vi.name])
            _check_override(vi.name, shape, dims, path)
        elif is_dynamic(dims):
            open_dims[vi.name] = dims
            continue
        else:
            shape = tuple(dims)
        check_size(shape, dtype, what, max_bytes)
        out[vi.name] = (shape, dtype)
    if open_dims:
        raise PackagerError(_dynamic_message(open_dims, path))
    return out


def _check_override(name: str, shape: tuple, dims: list | None, path: str) -> None:
    if dims is None:
        return  # any rank fits an input whose rank the model leaves open
    fixed = [(k, d) for k, d in enumerate(dims) if isinstance(d, int)]
    if len(shape) != len(dims) or any(shape[k] != d for k, d in fixed):
        raise PackagerError(
            f"{path}: --input-shape {name}={','.join(map(str, shape))} does not "
            f"match the model's dims {dims_text(dims)}"
        )


def _dynamic_message(open_dims: dict[str, list | None], path: str) -> str:
    """One error for all the inputs left dynamic: each with its dims, and the flags."""
    lines = [f"{path}: {len(open_dims)} input(s) have dynamic dims; fix each with --input-shape:"]
    for name, dims in open_dims.items():
        lines.append(f"  input '{name}' has dynamic dims {dims_text(dims)}")
    flags = " ".join(f"--input-shape {n}={_example(d)}" for n, d in open_dims.items())
    lines.append(f"  e.g. {flags}")
    return "\n".join(lines)


def _example(dims: list | None) -> str:
    """The dims with each dynamic one as D0, D1, ...: what the user fills in."""
    if dims is None:
        return "D0,D1,..."
    return ",".join(str(d) if isinstance(d, int) else f"D{k}" for k, d in enumerate(dims))


def freeze_inputs(model: onnx.ModelProto, texts: dict[str, str], path: str = "model"):
    """``model`` with each input named in ``texts`` (``--input-value NAME=VALUE`` or
    ``NAME=FILE.npy``) turned into an initializer holding that value: the input leaves the
    bundle's inputs and whatever reads only it (an If on it) folds at package time.
    Returns the new model and name -> array of the values frozen."""
    if not texts:
        return model, {}
    inits = {t.name for t in model.graph.initializer}
    inputs = {vi.name: vi for vi in model.graph.input if vi.name not in inits}
    frozen = {}
    for name, text in texts.items():
        if name not in inputs:
            raise PackagerError(
                f"{path}: --input-value names '{name}', which is not an input "
                f"(inputs: {', '.join(inputs) or 'none'})"
            )
        frozen[name] = _input_value(inputs[name], text, path)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [vi for vi in out.graph.input if vi.name not in frozen]
    del out.graph.input[:]
    out.graph.input.extend(kept)
    for name, arr in frozen.items():
        out.graph.initializer.append(numpy_helper.from_array(arr, name))
    return out, frozen


def _input_value(vi: onnx.ValueInfoProto, text: str, path: str) -> np.ndarray:
    """The value ``text`` gives input ``vi``: its declared dtype exactly, its fixed dims."""
    what = f"{path}: --input-value {vi.name}"
    dtype = dtype_of(vi.type.tensor_type.elem_type, f"{path}: input '{vi.name}'")
    want = np.dtype("bool" if dtype == "bool" else dtype)
    if text.endswith(".npy"):
        try:
            arr = np.load(text, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise PackagerError(f"{what}: cannot read {text}: {e}") from e
        if arr.dtype != want:
            raise PackagerError(f"{what}: {text} holds {arr.dtype}, the input is {dtype}")
    else:
        arr = _parse_value(text, want, what)
    dims = input_dims(vi)
    if dims is not None:
        if not text.endswith(".npy") and not is_dynamic(dims) and arr.size == math.prod(dims):
            arr = arr.reshape(dims)  # numbers on the command line fill the declared shape
        fixed = [(k, d) for k, d in enumerate(dims) if isinstance(d, int)]
        if arr.ndim != len(dims) or any(arr.shape[k] != d for k, d in fixed):
            raise PackagerError(
                f"{what}: the value has shape {list(arr.shape)}, the input is declared "
                f"{dtype}{dims_text(dims)}"
            )
    return np.array(arr, order="C")  # ascontiguousarray would make a scalar 1-d


def _parse_value(text: str, want: np.dtype, what: str) -> np.ndarray:
    words = [w.strip() for w in text.split(",")]
    try:
        if want.kind == "b":
            table = {"0": False, "1": True, "false": False, "true": True}
            items = [table[w.lower()] for w in words]
        elif want.kind in "iu":
            items = [int(w) for w in words]
        else:
            items = [float(w) for w in words]
        arr = np.array(items, dtype=want)
    except (KeyError, ValueError, OverflowError):
        raise PackagerError(
            f"{what}: {text!r} is not a value of the input's dtype {want.name}"
        ) from None
    if want.kind in "iu" and any(int(a) != b for a, b in zip(arr, items, strict=True)):
        raise PackagerError(f"{what}: {text!r} does not fit the input's dtype {want.name}")
    return arr.reshape(()) if len(items) == 1 else arr


def import_onnx(
    path: str,
    input_shapes: dict[str, list[int]] | None = None,
    model=None,
    max_bytes: int | None = None,
) -> Graph:
    """The Graph of the model at ``path`` (or of ``model`` if given) with fixed shapes.
    ``max_bytes``: the board's memory; a larger tensor is refused before it is computed."""
    model = model if model is not None else load_model(path)
    check_outputs(model, path)
    check_names(model, path)
    warn_new_opset(model, path)
    opset = model_opset(model)
    values: dict[str, Value] = {}
    for t in model.graph.initializer:
        values[t.name] = load_initializer(t, path, max_bytes)
    check_initializer_inputs(model, path)
    inputs = graph_input_shapes(model, input_shapes, path, max_bytes)
    for name, (shape, dtype) in inputs.items():
        values[name] = Value(name, shape, dtype)

    ctx = ConvertContext(values, opset, path)
    nodes: list[Node] = []
    import_nodes(model.graph.node, ctx, nodes, max_bytes)

    outputs = [o.name for o in model.graph.output]
    for o in model.graph.output:
        if o.name not in values:
            raise PackagerError(f"{path}: graph output '{o.name}' is produced by no node")
        check_declared_type(o, values[o.name], path)
    return Graph(model.graph.name or "model", list(inputs), outputs, nodes, values)


def import_nodes(onodes, ctx: ConvertContext, nodes: list[Node], max_bytes: int | None) -> None:
    """Fold or convert ``onodes`` in order, appending library nodes to ``nodes``; an If
    whose condition is known now is replaced by the nodes of the branch it takes."""
    values, path = ctx.values, ctx.model_path
    check_supported(onodes, values, path)
    for onode in onodes:
        flow = onode.op_type if onode.domain in DEFAULT_DOMAINS else ""
        if flow == "If" and values[onode.input[0]].data is None:
            control_flow.runtime_if(ctx, onode, nodes, _importer(max_bytes))
        elif flow == "If":
            inline_if(onode, ctx, nodes, max_bytes)
        elif flow == "Loop":
            control_flow.loop(ctx, onode, nodes, _importer(max_bytes))
        elif flow == "Scan":
            control_flow.scan_as_loop(
                ctx, onode, lambda more: import_nodes(more, ctx, nodes, max_bytes)
            )
        elif is_foldable(onode, values):
            fold(onode, values, ctx.opset, path, max_bytes)
        else:
            convert = get_converter(onode.op_type)
            if convert is None or onode.domain not in DEFAULT_DOMAINS:
                # reached only past an inlined branch whose outputs were not constants
                raise UnsupportedOpsError({onode.op_type: onode.name or onode.output[0]}, path)
            for node in convert(ctx, onode):
                infer_node(node, values, path, max_bytes)
                nodes.append(node)


def _importer(max_bytes: int | None) -> control_flow.Importer:
    return control_flow.Importer(
        import_nodes, load_initializer, frozenset(KERNEL_DTYPES), max_bytes
    )


def inline_if(onode, ctx: ConvertContext, nodes: list[Node], max_bytes: int | None) -> None:
    """An If with a package-time condition: the taken branch's nodes join the graph (its
    references to outer names resolve in the same table of values), the other branch is
    dropped, and the If's outputs become the branch's."""
    cond = ctx.values[onode.input[0]].data
    if cond is None:
        ctx.fail(onode, RUNTIME_IF)
    if np.asarray(cond).size != 1:
        ctx.fail(onode, f"the condition has {np.asarray(cond).size} elements, not one")
    branch = ctx.attr(
        onode, "then_branch" if bool(np.asarray(cond).reshape(-1)[0]) else "else_branch"
    )
    for t in branch.initializer:  # a branch may hold weights of its own
        ctx.values[t.name] = load_initializer(t, ctx.model_path, max_bytes)
    import_nodes(branch.node, ctx, nodes, max_bytes)
    outs = [o.name for o in branch.output]
    if len(outs) != len(onode.output):
        ctx.fail(onode, f"the branch gives {len(outs)} outputs, the node has {len(onode.output)}")
    for inner, outer in zip(outs, onode.output, strict=True):
        if not outer:
            continue
        v = ctx.values.get(inner)
        if v is None:
            ctx.fail(onode, f"branch output '{inner}' is produced by no node")
        if v.is_const:
            ctx.values[outer] = Value(outer, v.shape, v.dtype, v.data)
        else:
            node = ctx.node("identity", onode, [inner], outputs=[outer])
            infer_node(node, ctx.values, ctx.model_path, max_bytes)
            nodes.append(node)


RUNTIME_IF = (
    "its condition is computed at run time from the model's inputs; such an If needs a "
    "runtime control-flow node, which the packager does not support yet (an If whose "
    "condition is a constant, or is computed from shapes and constants only, is folded)"
)


def check_declared_type(vi: onnx.ValueInfoProto, value: Value, path: str) -> None:
    """A graph output's declared element type, when given, must be the computed one: other
    runtimes (the selftest's reference among them) refuse a model where it is not."""
    kind = vi.type.WhichOneof("value")
    if kind not in (None, "tensor_type"):
        raise PackagerError(
            f"{path}: graph output '{vi.name}' is a {kind.replace('_type', '')}, not a tensor: "
            "a bundle's outputs are tensors"
        )
    declared = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
    if declared and ONNX_DTYPES.get(declared) != value.dtype:
        raise PackagerError(
            f"{path}: graph output '{vi.name}' is declared {type_name(declared)}, "
            f"but the model computes {value.dtype}"
        )


def is_foldable(onode: onnx.NodeProto, values: dict[str, Value]) -> bool:
    if onode.op_type in SHAPE_ONLY:
        return True
    present = [i for i in onode.input if i]
    return all(values[i].is_const for i in present) and onode.op_type not in NEVER_FOLD


# Random generators must stay random per run; DequantizeLinear of constant weights stays
# for the quantize pass, which makes integer kernels of it (fold_constants folds the rest).
NEVER_FOLD = {
    "DequantizeLinear",
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
}


def check_supported(onodes, values: dict[str, Value], path: str) -> None:
    """Raise one error listing every op type that can be neither folded nor converted.
    An If is supported when its condition is known at package time (its taken branch is
    checked when it is inlined); one with a runtime condition is named in the list."""
    const = {n for n, v in values.items() if v.is_const}
    missing: dict[str, str] = {}
    runtime_args: list[str] = []  # the runtime inputs of value-shaped ops
    for node in onodes:
        present = [i for i in node.input if i]
        label = node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"
        where = node.name or (node.output[0] if node.output else "?")
        if label == "If" and present and present[0] in const:
            # taken as its branch computes them: checked again as they are converted
            const.update(o for o in node.output if o)
            continue
        if label in CONTROL_FLOW:  # their subgraphs are checked as they are imported
            continue
        folds = node.op_type in SHAPE_ONLY or (
            all(i in const for i in present) and node.op_type not in NEVER_FOLD
        )
        if folds:
            const.update(o for o in node.output if o)
            continue
        if label in VALUE_SHAPED:
            label += f" {VALUE_SHAPED_NOTE}"
            runtime_args += [i for i in present if i not in const]
        if node.domain not in DEFAULT_DOMAINS or get_converter(node.op_type) is None:
            missing.setdefault(label, where)
    if missing:
        only_value_shaped = all(VALUE_SHAPED_NOTE in label for label in missing)
        raise UnsupportedOpsError(missing, path, runtime_args if only_value_shaped else ())


VALUE_SHAPED_NOTE = "with runtime inputs (its output shape must be known at package time)"


# Ops run by the runtime as control-flow nodes over their subgraphs (frontend/control_flow.py).
CONTROL_FLOW = ("If", "Loop", "Scan")


def fold(
    onode: onnx.NodeProto,
    values: dict[str, Value],
    opset: int,
    path: str,
    max_bytes: int | None = None,
) -> None:
    """Evaluate a node now, with onnx's reference implementation of its op."""
    label = onode.name or (onode.output[0] if onode.output else "?")
    what = f"{path}: node '{label}' ({onode.op_type})"
    _check_fold_size(onode, values, what, max_bytes)
    feeds = {}
    for i in onode.input:
        if not i:
            continue
        v = values[i]
        if v.is_const:
            feeds[i] = v.data
        else:  # a shape-only op: any data of the right shape will do
            feeds[i] = np.zeros(v.shape, dtype=np.dtype("bool" if v.dtype == "bool" else v.dtype))
    try:
        outs = evaluator(_one_node_model(onode, feeds, opset)).run(None, feeds)
    except Exception as e:
        reason = "out of memory" if isinstance(e, MemoryError) else e
        raise PackagerError(f"{what}: cannot evaluate at package time: {reason}") from e
    for name, arr in zip(onode.output, outs, strict=False):
        if name:
            arr = np.asarray(arr)
            check_size(arr.shape, np_to_dtype(arr), f"{what}: output '{name}'", max_bytes)
            values[name] = Value(name, tuple(arr.shape), np_to_dtype(arr), arr)


def _check_fold_size(onode, values: dict[str, Value], what: str, max_bytes: int | None) -> None:
    """Ops whose output size is an input's value: refuse a huge one before allocating it."""
    arg = _SIZED_BY_VALUE.get(onode.op_type)
    if arg is None or len(onode.input) <= arg or not onode.input[arg]:
        return
    data = values[onode.input[arg]].data
    if data is None or data.dtype.kind not in "iu":
        return
    count = math.prod(abs(int(d)) for d in data.reshape(-1))
    if count > _limit(max_bytes):
        raise PackagerError(
            f"{what}: input '{onode.input[arg]}' = {data.reshape(-1).tolist()} asks for "
            f"{count:,} elements, more than {_memory(max_bytes)}"
        )


# Op type -> the input whose values multiply to (a bound of) the output's size.
_SIZED_BY_VALUE = {"ConstantOfShape": 0, "Expand": 1, "Tile": 1}


def _one_node_model(onode: onnx.NodeProto, feeds: dict, opset: int) -> onnx.ModelProto:
    """A model of just ``onode``: the evaluator honours the opset of a model, not of a node."""
    ins = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in feeds.items()
    ]
    outs = [helper.make_empty_tensor_value_info(o) for o in onode.output if o]
    graph = helper.make_graph([onode], "fold", ins, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def infer_node(
    node: Node, values: dict[str, Value], path: str, max_bytes: int | None = None
) -> None:
    """Set the Values of ``node``'s outputs from its op's compute."""
    outs = node_compute(node, values, path)
    if len(outs) != len(node.outputs):
        raise PackagerError(
            f"{path}: node '{node.source}': op {node.op} gives {len(outs)} outputs, "
            f"the node has {len(node.outputs)}"
        )
    for name, t in zip(node.outputs, outs, strict=True):
        if name:
            check_size(
                t.shape, t.dtype, f"{path}: node '{node.source}': output '{name}'", max_bytes
            )
            values[name] = Value(name, tuple(t.shape), t.dtype)


def node_compute(node: Node, values: dict[str, Value], path: str = "model") -> list[te.Tensor]:
    """The op's compute on placeholders shaped like the node's inputs."""
    for i in node.inputs:
        if values[i].dtype not in KERNEL_DTYPES:
            raise PackagerError(
                f"{path}: node '{node.source}' ({node.op}): input '{i}' has element type "
                f"{values[i].dtype}, which no kernel takes (supported: "
                f"{', '.join(ONNX_DTYPES.values())})"
            )
    args = [
        te.placeholder(values[i].shape, values[i].dtype, f"in{k}")
        for k, i in enumerate(node.inputs)
    ]
    try:
        return list(get_op(node.op).compute(args, node.attrs))
    except PackagerError:
        raise
    except (ValueError, TypeError, IndexError, KeyError) as e:
        shapes = ", ".join(f"{values[i].dtype}{list(values[i].shape)}" for i in node.inputs)
        raise PackagerError(
            f"{path}: node '{node.source}' ({node.op}): {e} (inputs: {shapes})"
        ) from e
