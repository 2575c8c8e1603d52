"""Integer convs and denses to the board's accelerator (docs/accel.md, "Placement").

On a board whose profile has an ``accel`` section, each qconv2d / qdense the quantize
pass made becomes accel_conv2d / accel_dense (packager/ops/accel_ops.py) where the
accelerator computes exactly the CPU's bytes:

- groups 1, 4-d (conv) or 2-d (dense) activations, no residual folded into it;
- int8 activations, or uint8 ones rewritten exactly: a uint8 value travels as x - 128
  in int8 with its zero point moved alike, so (x - zp) and every output are unchanged
  (the bias gains 128 * sum(w) where the input is shifted; the output's zero point and
  bounds lose 128 where the output is);
- every channel's requantize shift s >= 33 (the ALU's round constant 2^(s-33));
- acc + bias fits int32 for every input (|x| <= 128), as the accelerator adds in
  int32 lanes (the bound of quantize.narrow_epilogue);
- packager.ops.accel.fits (the compiler's own limits: buffers, tiles) says "".

Anything else stays a CPU node, its reason in ``attrs["accel_reason"]``. Accelerator
nodes read and write (N, C/16, H, W, 16) int8 (the core's block); values stay in that
layout between them and through a qadd (elementwise, so layout-agnostic), and
accel_pack / accel_unpack nodes (packager/ops/accel_layout.py, CPU kernels) convert at
the boundaries, once per value. The weights and the epilogue table are built here, at
package time, from the unpacked int8 weights and the qconv2d's requantize table."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ...ops.quantized import QRANGE
from ...target import AccelTarget
from ..ir import Graph, Node, Value
from ..uses import add_const

ACCEL_OPS = ("accel_conv2d", "accel_dense")
PLACEABLE = ("qconv2d", "qdense")
SHIFT = 128  # a uint8 value travels as x - 128 in int8
MIN_SHIFT = 33  # the ALU's round constant is 2^(s-33)
PACK, UNPACK = "accel_pack", "accel_unpack"


def place_accel(graph: Graph, ctx=None) -> Graph:
    board = ctx.board if ctx is not None else None
    if board is None or board.accel is None:
        return graph
    return _Placer(graph, AccelTarget.of(board)).run()


@dataclass
class Form:
    """What a qconv2d / qdense becomes on the accelerator."""

    op: str
    attrs: dict
    weights: np.ndarray  # the blocked int8 weights
    params: np.ndarray  # (O/BO, 6, BO) int32
    macs: int
    # a conv with few channels reads its input tap-packed (its kernel's columns moved
    # into the channels: accel_layout.accel_tap_pack); the pack's attrs["taps"]
    taps: dict | None = None


# --- one node --------------------------------------------------------------------------


def macs_of(node: Node, values: dict[str, Value]) -> int:
    """Multiply-accumulates of a qconv2d / qdense in the model's layout (real channels);
    an accelerator node carries its own in ``attrs["macs"]``."""
    if "macs" in node.attrs:
        return int(node.attrs["macs"])
    out = values[node.outputs[0]].shape
    if node.op == "qconv2d":
        kh, kw = values[node.inputs[1]].shape[2:4]
        cg = values[node.inputs[0]].shape[1] // int(node.attrs.get("groups", 1))
        return math.prod(out) * cg * kh * kw
    return math.prod(out) * values[node.inputs[0]].shape[-1]


def accel_obstacle(node: Node, values: dict[str, Value], target) -> str:
    """Why ``node`` (a qconv2d / qdense) cannot run on the accelerator ("" when it can)."""
    form = accel_form(node, values, target)
    return form if isinstance(form, str) else ""


def accel_form(node: Node, values: dict[str, Value], target) -> Form | str:
    """The node's accelerator form, or the reason it has none."""
    if node.op not in PLACEABLE:
        return f"{node.op} has no accelerator form"
    if node.attrs.get("out_dtype") == "float32":
        return "its output is float (a dequantize epilogue)"
    if len(node.inputs) > 3:
        return "a residual add is folded into its epilogue"
    if int(node.attrs.get("groups", 1)) != 1:
        return f"grouped conv (groups {node.attrs['groups']})"
    x = values[node.inputs[0]]
    want = 4 if node.op == "qconv2d" else 2
    if len(x.shape) != want:
        return f"{len(x.shape)}-d activations (the accelerator's {node.op} takes {want}-d)"
    if x.shape[0] != target.batch:
        return f"batch {x.shape[0]} (the core's batch is {target.batch})"
    w = _unpacked_weights(node, values)  # (O, C, KH, KW) or (O, K)
    chans = _channels(node, values)
    if chans is None:
        return "its requantize table is not of a known form"
    in_shift = SHIFT if x.dtype == "uint8" else 0
    out_shift = SHIFT if node.attrs["out_dtype"] == "uint8" else 0
    bias, mult, shift, lo, hi = chans
    sums = w.reshape(len(w), -1).astype(np.int64)
    bias = bias + in_shift * sums.sum(1)
    wabs = np.abs(sums).sum(1)
    for c in range(len(w)):
        if shift[c] < MIN_SHIFT:
            return f"requantize shift {shift[c]} < {MIN_SHIFT} (channel {c})"
        if abs(int(bias[c])) + 128 * int(wabs[c]) >= 2**31:
            return f"acc + bias may overflow int32 (channel {c})"
    attrs = {
        "x_zp": int(node.attrs["x_zp"]) - in_shift,
        "y_zp": int(node.attrs["y_zp"]) - out_shift,
    }
    params = _params(bias, mult, shift, lo - out_shift, hi - out_shift, attrs["y_zp"], target)
    x_shape = values[node.inputs[0]].shape
    if node.op == "qconv2d":
        attrs |= {k: node.attrs[k] for k in ("strides", "pads", "dilations") if k in node.attrs}
        taps = _taps(node, w, x_shape, values[node.outputs[0]].shape, target)
        if taps is not None:  # the kernel's columns as channels: a conv of width 1
            w = np.ascontiguousarray(w.transpose(0, 1, 3, 2)).reshape(len(w), -1, w.shape[2], 1)
            attrs |= _tapped_attrs(attrs)
            x_shape = (x_shape[0], w.shape[1], x_shape[2], taps["out_w"])
        attrs |= {"c": w.shape[1], "oc": w.shape[0]}
        form = Form("accel_conv2d", attrs, _block_conv(w, target), params, 0, taps)
    else:
        attrs |= {"k": w.shape[1], "o": w.shape[0]}
        form = Form("accel_dense", attrs, _block_dense(w, target), params, 0)
    form.macs = macs_of(node, values)
    reason = _fits(form, x_shape, target)
    return reason or form


def _taps(node: Node, w: np.ndarray, x_shape, out_shape, target) -> dict | None:
    """How to tap-pack a conv's input (accel_layout.accel_tap_pack) when that takes fewer
    GEMM steps than its own channels: ceil(C*KW/B) blocks per kernel row instead of
    ceil(C/B) per tap (a 3-channel 7x7 stem: 2 instead of 7); else None."""
    _, c, _, kw = w.shape
    b = target.block_in
    if kw == 1 or -(-c * kw // b) >= -(-c // b) * kw:
        return None
    pads = list(node.attrs.get("pads", [0, 0, 0, 0]))
    return {
        "kw": kw,
        "stride": int(list(node.attrs.get("strides", [1, 1]))[1]),
        "dilation": int(list(node.attrs.get("dilations", [1, 1]))[1]),
        "pad": int(pads[1]),
        "out_w": int(out_shape[3]),
        "pad_value": int(node.attrs["x_zp"]),  # the input's zero point, before any shift
    }


def _tapped_attrs(attrs: dict) -> dict:
    """The conv's attrs once its input is tap-packed: width 1, stride 1, no pads across."""
    pads = list(attrs.get("pads", [0, 0, 0, 0]))
    return {
        "strides": [int(list(attrs.get("strides", [1, 1]))[0]), 1],
        "dilations": [int(list(attrs.get("dilations", [1, 1]))[0]), 1],
        "pads": [int(pads[0]), 0, int(pads[2]), 0],
    }


def _fits(form: Form, x_shape, target) -> str:
    """The compiler's own limits (packager.ops.accel.fits); "" where it has none yet:
    then the accelerator's code generator decides at lowering."""
    try:
        from ...ops.accel import fits
    except ImportError:
        return ""
    b = target.block_in
    xb = (x_shape[0], -(-x_shape[1] // b), *x_shape[2:], b)
    return fits(form.op, form.attrs, [xb, form.weights.shape, form.params.shape], target)


def fits_checked() -> bool:
    """Whether placement could ask the compiler's fits (packager.ops.accel)."""
    try:
        from ...ops.accel import fits  # noqa: F401
    except ImportError:
        return False
    return True


def _unpacked_weights(node: Node, values) -> np.ndarray:
    """The real int8 weights, (OC, C, KH, KW) of a qconv2d or (N, K) of a qdense."""
    packed = values[node.inputs[1]].data
    if node.op == "qconv2d":
        nb, ncb, kh, kw, lanes, k4 = packed.shape
        full = packed.transpose(0, 4, 1, 5, 2, 3).reshape(nb * lanes, ncb * k4, kh, kw)
        full = full.astype(np.int8)  # int16 pairs (an x86 CPU without VNNI) hold int8s
        return full[: int(node.attrs["oc"]), : values[node.inputs[0]].shape[1]]
    nb, kb, lanes, k4 = packed.shape
    full = packed.transpose(1, 3, 0, 2).reshape(kb * k4, nb * lanes)  # (K', N')
    return full[: values[node.inputs[0]].shape[-1], : int(node.attrs["n"])].T


def _channels(node: Node, values):
    """Per real channel: bias (acc units, minus x_zp * sum(w)), mult, shift, and the
    output's bounds after the shift with the zero point (within the output type), from
    either form of the requantize table (quantize.py: int64 rows, or the int32 mulhi
    table); None for a table of another form."""
    rq = values[node.inputs[2]].data.astype(np.int64)
    n = int(node.attrs["oc"] if node.op == "qconv2d" else node.attrs["n"])
    if node.attrs.get("rq32") == "mulhi":
        bias, mult, _, sh, lo, hi = rq[:6, :n]
        return bias, mult, sh + 32, lo, hi
    if rq.shape[0] not in (7, 9):
        return None
    if rq.shape[0] == 9:
        return rq[6, :n], rq[0, :n], rq[1, :n], rq[7, :n], rq[8, :n]
    lo, hi = _bounds_after_shift(rq[:, :n], int(node.attrs["y_zp"]), node.attrs["out_dtype"])
    return rq[6, :n], rq[0, :n], rq[1, :n], lo, hi


def _bounds_after_shift(rq: np.ndarray, y_zp: int, out: str):
    """The activation's bounds (rows 3, 4: on the scaled product) moved through the
    rounding shift, plus the zero point, within the output type: a clamp commutes with
    a monotone shift (quantize.narrow_bounds makes the same rows)."""
    q0, q1 = QRANGE[out]
    rnd, shift = rq[2], rq[1]
    lo, hi = ((np.minimum(np.maximum(((b + rnd) >> shift) + y_zp, q0), q1)) for b in rq[3:5])
    return lo, hi


def _params(bias, mult, shift, lo, hi, y_zp: int, target) -> np.ndarray:
    """(O/BO, 6, BO) int32: bias, mult, round, shift, lo, hi per channel; the padded
    channels output the zero point (lo = hi = y_zp), as the CPU's blocks do."""
    bo = target.block_out
    n = len(bias)
    total = -(-n // bo) * bo
    rows = np.zeros((6, total), np.int64)
    rows[:, :] = np.array([0, 1 << 30, 1, 1, y_zp, y_zp])[:, None]
    rows[:, :n] = [bias, mult, 1 << (shift - 33), shift - 32, lo, hi]
    return np.ascontiguousarray(rows.reshape(6, total // bo, bo).transpose(1, 0, 2)).astype(
        np.int32
    )


def _pad_to(a: np.ndarray, axis: int, block: int) -> np.ndarray:
    extra = -a.shape[axis] % block
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, extra)
    return np.pad(a, widths)


def _block_conv(w: np.ndarray, target) -> np.ndarray:
    """(O, C, KH, KW) -> (O/BO, C/BI, KH, KW, BO, BI), zeros past O and C."""
    bo, bi = target.block_out, target.block_in
    full = _pad_to(_pad_to(w, 0, bo), 1, bi)
    o, c, kh, kw = full.shape
    blocks = full.reshape(o // bo, bo, c // bi, bi, kh, kw)
    return np.ascontiguousarray(blocks.transpose(0, 2, 4, 5, 1, 3)).astype(np.int8)


def _block_dense(w: np.ndarray, target) -> np.ndarray:
    """(O, K) -> (O/BO, K/BI, BO, BI), zeros past O and K."""
    bo, bi = target.block_out, target.block_in
    full = _pad_to(_pad_to(w, 0, bo), 1, bi)
    o, k = full.shape
    return np.ascontiguousarray(full.reshape(o // bo, bo, k // bi, bi).transpose(0, 2, 1, 3))


# --- the graph -------------------------------------------------------------------------


class _Placer:
    def __init__(self, graph: Graph, target):
        self.graph, self.target = graph, target
        self.values = dict(graph.values)
        self.nodes: list[Node] = []
        self.native: dict[str, str] = {}  # value -> the blocked value written in its place
        self.packs: dict[str, str] = {}  # a model-layout value -> its packed copy
        self.unpacked: set[str] = set()

    def run(self) -> Graph:
        same = self.target.block_in == self.target.block_out
        for node in self.graph.nodes:
            form = None
            if node.op in PLACEABLE:
                form = accel_form(node, self.values, self.target) if same else (
                    "the core's block_in and block_out differ: its output cannot feed it"
                )  # fmt: skip
            if isinstance(form, Form):
                self.emit_accel(node, form)
            elif isinstance(form, str):
                macs = macs_of(node, self.values)
                attrs = {**node.attrs, "accel_reason": form, "macs": macs}
                self.emit_plain(replace(node, attrs=attrs))
            elif node.op == "qadd" and any(i in self.native for i in node.inputs):
                self.emit_qadd(node)
            else:
                self.emit_plain(node)
        outputs = [self.plain(o) for o in self.graph.outputs]
        return replace(self.graph, nodes=self.nodes, values=self.values, outputs=outputs)

    def emit_plain(self, node: Node) -> None:
        """A CPU node: it reads every value in the model's layout."""
        inputs = [self.plain(i) for i in node.inputs]
        self.nodes.append(replace(node, inputs=inputs) if inputs != node.inputs else node)

    def emit_accel(self, node: Node, form: Form) -> None:
        x = self.blocked(node.inputs[0], form.taps)
        w = add_const(self.values, form.weights, f"{node.outputs[0]}_accel_w")
        p = add_const(self.values, form.params, f"{node.outputs[0]}_accel_p")
        attrs = form.attrs | {"macs": form.macs}
        out = self.blocked_output(node.outputs[0])
        self.nodes.append(Node(form.op, node.name, [x, w, p], [out], attrs, source=node.source))

    def emit_qadd(self, node: Node) -> None:
        """A qadd of blocked operands, computed blocked: the same elementwise integers,
        with the zero point of every uint8 side and of a uint8 output moved by the
        shift."""
        a = dict(node.attrs)
        for side, i in zip(("a", "b"), node.inputs, strict=True):
            if self.values[i].dtype == "uint8":
                a[f"{side}_zp"] = int(a[f"{side}_zp"]) - SHIFT
        if a["out_dtype"] == "uint8":
            a["y_zp"], a["out_dtype"] = int(a["y_zp"]) - SHIFT, "int8"
        inputs = [self.blocked(i) for i in node.inputs]
        out = self.blocked_output(node.outputs[0])
        self.nodes.append(replace(node, inputs=inputs, outputs=[out], attrs=a))

    # --- values in the two layouts ------------------------------------------------------

    def blocked_shape(self, shape) -> tuple[int, ...]:
        b = self.target.block_in
        return (shape[0], -(-shape[1] // b), *shape[2:], b)

    def new_value(self, hint: str, shape) -> str:
        name, k = hint, 0
        while name in self.values:
            k += 1
            name = f"{hint}_{k}"
        self.values[name] = Value(name, tuple(shape), "int8")
        return name

    def blocked_output(self, out: str) -> str:
        """The blocked value a node writes in place of ``out``: ``out`` itself, in the
        model's layout, is made by an unpack where something reads it so."""
        name = self.new_value(f"{out}__accel", self.blocked_shape(self.values[out].shape))
        self.native[out] = name
        return name

    def blocked(self, v: str, taps: dict | None = None) -> str:
        """``v`` in the accelerator's layout, packed (once) where it is not made so;
        with ``taps``, tap-packed for one conv (accel_layout.accel_tap_pack)."""
        if v in self.native and taps is None:
            return self.native[v]
        key = v if taps is None else (v, tuple(sorted(taps.items())))
        if key not in self.packs:
            val = self.values[v]
            shape = val.shape
            if taps is not None:
                shape = (shape[0], shape[1] * taps["kw"], shape[2], taps["out_w"])
            hint = f"{v}__accel" + ("_taps" if taps else "")
            name = self.new_value(hint, self.blocked_shape(shape))
            attrs = {"block": self.target.block_in, "shift": val.dtype == "uint8"}
            attrs |= {"taps": taps} if taps else {}
            what = "accel_tap_pack" if taps else "accel_pack"
            v_plain = self.plain(v) if taps is not None else v
            node = Node(PACK, f"{v}/{what}", [v_plain], [name], attrs, source=v)
            self.nodes.append(node)
            self.packs[key] = name
        return self.packs[key]

    def plain(self, v: str) -> str:
        """``v`` in the model's layout, unpacked (once) where an accelerator node or a
        blocked qadd made it."""
        if v in self.native and v not in self.unpacked:
            val = self.values[v]
            attrs = {"c": val.shape[1], "dtype": val.dtype}
            node = Node(UNPACK, f"{v}/accel_unpack", [self.native[v]], [v], attrs, source=v)
            self.nodes.append(node)
            self.unpacked.add(v)
        return v


def conversions(graph: Graph) -> int:
    """The layout conversion nodes placement added."""
    return sum(n.op in (PACK, UNPACK) for n in graph.nodes)


def placement(graph: Graph) -> dict:
    """What placement decided, from the nodes (fused ones' inner nodes too): accelerator
    nodes and multiply-accumulates, the CPU's convs and denses with each reason counted,
    and the layout conversions."""
    nodes = []
    for node in graph.nodes:
        inner = node.attrs.get("nodes") if node.op == "fused" else None
        nodes += [(n["op"], n["attrs"]) for n in inner] if inner else [(node.op, node.attrs)]
    accel = [a for op, a in nodes if op in ACCEL_OPS]
    cpu = [a for op, a in nodes if op in PLACEABLE and "accel_reason" in a]
    reasons: dict[str, int] = {}
    for a in cpu:
        reasons[a["accel_reason"]] = reasons.get(a["accel_reason"], 0) + 1
    return {
        "accel_nodes": len(accel),
        "nodes": len(accel) + len(cpu),
        "accel_macs": sum(int(a["macs"]) for a in accel),
        "macs": sum(int(a["macs"]) for a in accel + cpu),
        "cpu_reasons": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        "conversions": sum(op in (PACK, UNPACK) for op, _ in nodes),
        "fits_checked": fits_checked(),
    }


def placement_line(p: dict) -> str:
    """The build's line about the accelerator."""
    share = 100.0 * p["accel_macs"] / p["macs"] if p["macs"] else 0.0
    cpu = p["nodes"] - p["accel_nodes"]
    reasons = ", ".join(f"{r} ({n})" for r, n in p["cpu_reasons"].items())
    tail = f"; {cpu} stay on the CPU: {reasons}" if cpu else "; none stay on the CPU"
    return (
        f"accel: {p['accel_nodes']} of {p['nodes']} convs/dense ({share:.1f}% of "
        f"multiply-accumulates){tail}; {p['conversions']} layout conversions"
    )
