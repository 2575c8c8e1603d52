"""QDQ chains to integer kernels.

A quantized model (QDQ format) computes in float between DequantizeLinear and
QuantizeLinear nodes. This pass finds

    DQ(x), DQ(w const) -> conv | matmul | gemm (bias: DQ'd int32, or float const)
      -> optional relu / clip -> optional add of another DQ'd tensor -> Q

and replaces it with one integer op (qconv2d, qdense in packager/ops/quantized.py):
int8/uint8 x times int8 weights accumulated in int32, then the requantize epilogue.
A MaxPool between a DQ and a Q of the same scale and zero point pools the integers.
Everything it cannot match stays float with its Q/DQ nodes (which compute exactly as
ONNX says). It runs before constant folding, which would make float weights of DQ(w).

Requantize: the real multiplier M = x_scale * w_scale[c] / y_scale of each output
channel becomes m * 2**-s with m in [2**30, 2**31) (31 significant bits) and the
product is rounded half up: y = (acc * m + 2**(s-1)) >> s. ONNX's float arithmetic
rounds half to even after a float32 multiply; the two differ only where the exact
value lies within about 2**-24 of a half step (a tie or float32's own error), by one
step. docs/quantization.md says more.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ...boards import load_board
from ...ops.int8_intrin import (
    QRANGE,
    byte_pairs_fit,
    dwdot_isa_for,
    dwpair_isa_for,
    pair_body_for,
    pair_isa_for,
)
from ...target import AccelTarget, CpuTarget, Target
from ..ir import Graph, Node
from ..uses import add_const, consumers, producers, scalar_qparams
from .pack_gemm_weights import _block
from .place_accel import accel_obstacle

_BIG = 2**62  # no activation bound
_INT_IN = ("int8", "uint8")


def quantize(graph: Graph, ctx=None) -> Graph:
    lanes = max(_block(ctx), 1) if ctx is not None else 4
    m = _Matcher(graph, lanes, _accel_target(ctx), _cpu_target(ctx))
    for k, node in enumerate(graph.nodes):
        if node.op == "quantize_linear":
            m.try_chain(k)
    for k, node in enumerate(graph.nodes):
        if node.op in ("gemm", "matmul") and k not in m.removed:
            m.try_float_dense(k)
    return m.result()


def _cpu_target(ctx) -> CpuTarget | None:
    """The board's CPU target (its int8 instructions), None without a board."""
    return Target.cpu(ctx.board or load_board("host")) if ctx is not None else None


def _accel_target(ctx):
    """The board's accelerator target, None where it has none."""
    board = ctx.board if ctx is not None else None
    if board is None or board.accel is None:
        return None
    return AccelTarget.of(board)


class _Matcher:
    def __init__(self, graph: Graph, lanes: int, accel=None, cpu: CpuTarget | None = None):
        self.graph = graph
        self.cpu = cpu  # the board's CPU: whether depthwise convs take quads of taps
        self.accel = accel  # the board's accelerator: its convs keep their adds apart
        self.values = dict(graph.values)
        self.lanes = lanes
        self.prod = producers(graph)
        self.cons = consumers(graph)
        self.replaced: dict[int, Node] = {}  # Q node index -> integer node
        self.removed: set[int] = set()

    def result(self) -> Graph:
        nodes = [
            self.replaced.get(k, n) for k, n in enumerate(self.graph.nodes) if k not in self.removed
        ]
        return replace(self.graph, nodes=nodes, values=self.values)

    # --- lookups ----------------------------------------------------------------

    def const(self, name: str):
        v = self.values[name]
        return v.data if v.is_const else None

    def producer(self, name: str, op: str | tuple) -> tuple[int, Node] | None:
        k = self.prod.get(name)
        ops = (op,) if isinstance(op, str) else op
        if k is None or self.graph.nodes[k].op not in ops:
            return None
        return k, self.graph.nodes[k]

    def private(self, name: str) -> bool:
        """Read by one node only and not a graph output: the chain may swallow it."""
        return len(self.cons.get(name, [])) == 1 and name not in self.graph.outputs

    def dq_activation(self, name: str):
        """(int tensor, scale, zp) of a DQ of a non-constant int8/uint8 tensor."""
        hit = self.producer(name, "dequantize_linear")
        if hit is None:
            return None
        node = hit[1]
        x = self.values[node.inputs[0]]
        qp = scalar_qparams(self.values, node)
        if x.is_const or x.dtype not in _INT_IN or qp is None:
            return None
        return x.name, *qp

    def dq_weight(self, name: str, axis: int):
        """(int8 weights, per-channel scales along ``axis``) of a DQ of a constant."""
        hit = self.producer(name, "dequantize_linear")
        if hit is None:
            return None
        node = hit[1]
        w, s, z = (self.const(i) for i in node.inputs)
        if w is None or s is None or z is None or w.dtype != np.int8 or np.any(z != 0):
            return None
        if s.size == 1:
            return w, np.full(w.shape[axis], float(s.reshape(-1)[0]))
        if node.attrs.get("axis", 1) % w.ndim != axis or s.size != w.shape[axis]:
            return None
        return w, s.astype(np.float64).reshape(-1)

    def bias(self, name: str | None, acc_scale: np.ndarray):
        """The bias in accumulator units (int64 per channel), or None if it is not one."""
        real = self.bias_real(name, len(acc_scale))
        return None if real is None else np.round(real / acc_scale).astype(np.int64)

    # --- the chain ----------------------------------------------------------------

    def try_chain(self, qk: int) -> None:
        self.try_conv(qk)
        if qk not in self.replaced:
            self.try_add(qk)
        if qk not in self.replaced:
            self.try_max_pool(qk)

    def try_max_pool(self, qk: int) -> None:
        """DQ(x) -> MaxPool -> Q with the DQ's own scale and zero point: MaxPool of x
        itself. Dequantizing is monotone (scale > 0), so the max commutes with it, the
        padding's -inf becomes the type's lowest value, and Q(DQ(v)) is v."""
        q = self.graph.nodes[qk]
        yq = scalar_qparams(self.values, q)
        hit = self.producer(q.inputs[0], "max_pool")
        if yq is None or hit is None or not self.private(q.inputs[0]):
            return
        pool = hit[1]
        x = self.dq_activation(pool.inputs[0])
        if len(pool.outputs) != 1 or x is None or (x[1], x[2]) != yq:
            return
        if self.values[x[0]].dtype != q.attrs.get("dtype") or yq[0] <= 0:
            return
        self.removed.add(hit[0])
        self.replaced[qk] = replace(pool, name=q.name, inputs=[x[0]], outputs=list(q.outputs))

    def try_add(self, qk: int) -> None:
        """DQ(a) + DQ(b) -> [relu | clip] -> Q of one shape: an integer add, folded into
        the epilogue of the integer conv or dense making a (or b) when nothing else
        reads it."""
        q = self.graph.nodes[qk]
        yq = scalar_qparams(self.values, q)
        if yq is None or q.attrs.get("dtype") not in _INT_IN:
            return
        v, swallowed, act = q.inputs[0], [], None
        hit = self.producer(v, ("relu", "clip"))
        if hit and self.private(v):
            act, v = hit[1], hit[1].inputs[0]
            swallowed.append(hit[0])
        hit = self.producer(v, "add")
        if hit is None or not self.private(v):
            return
        sides = [self.dq_activation(i) for i in hit[1].inputs]
        shape = self.values[v].shape
        if any(s is None or self.values[s[0]].shape != shape for s in sides):
            return
        attrs = add_attrs(sides[0], sides[1], yq, act, q.attrs["dtype"])
        if attrs is None:
            return
        swallowed.append(hit[0])
        self.removed.update(swallowed)
        self.replaced[qk] = self.fold_add(hit[1], sides, yq, act, q) or Node(
            "qadd", q.name, [sides[0][0], sides[1][0]], list(q.outputs), attrs, source=q.source
        )

    def fold_add(self, add: Node, sides, yq, act, q: Node) -> Node | None:
        """The integer conv/dense making one side, with the add in its epilogue (the
        other side its residual input), when the add is its value's only reader."""
        for mine, other in ((0, 1), (1, 0)):
            name = sides[mine][0]
            kq = self.prod.get(name)
            conv = self.replaced.get(kq)
            if conv is None or len(conv.inputs) != 3 or not self.private(name):
                continue
            if self.on_accel(conv):  # the add runs on the CPU, the same bytes
                continue
            if not self.private(add.inputs[mine]):
                continue
            attrs = add_attrs(sides[mine], sides[other], yq, act, q.attrs["dtype"])
            self.removed.update((kq, self.prod[add.inputs[mine]]))  # its Q and DQ
            return replace(
                conv,
                inputs=[*conv.inputs, sides[other][0]],
                outputs=list(q.outputs),
                attrs=conv.attrs | {f"add_{k}": v for k, v in attrs.items()},
            )
        return None

    def on_accel(self, node: Node) -> bool:
        """Whether placement (place_accel) will put ``node`` on the board's accelerator,
        which has no residual input."""
        if self.accel is None:
            return False
        return accel_obstacle(node, self.values, self.accel) == ""

    def try_conv(self, qk: int) -> None:
        q = self.graph.nodes[qk]
        yq = scalar_qparams(self.values, q)
        if yq is None or q.attrs.get("dtype") not in _INT_IN:
            return
        v, swallowed = q.inputs[0], []
        residual = None
        hit = self.producer(v, "add")
        if hit and self.private(v):
            for mine, other in ((0, 1), (1, 0)):
                r = self.dq_activation(hit[1].inputs[other])
                if r is not None and self.producer(
                    hit[1].inputs[mine], ("conv", "matmul", "gemm", "relu", "clip")
                ):
                    residual, v = r, hit[1].inputs[mine]
                    swallowed.append(hit[0])
                    break
            else:
                return
        act = None
        hit = self.producer(v, ("relu", "clip"))
        if hit and self.private(v):
            act = hit[1]
            swallowed.append(hit[0])
            v = hit[1].inputs[0]
        hit = self.producer(v, ("conv", "matmul", "gemm"))
        if hit is None or not self.private(v):
            return
        made = self.anchor(hit[1], yq, q, act, residual)
        if made is None:
            return
        swallowed.append(hit[0])
        self.removed.update(swallowed)
        self.replaced[qk] = made

    def anchor(self, node: Node, yq, q: Node, act, residual) -> Node | None:
        x = self.dq_activation(node.inputs[0])
        if x is None:
            return None
        if node.op == "conv":
            return self.conv(node, x, yq, q, act, residual)
        return self.dense(node, x, yq, q, act, residual)

    def conv(self, node, x, yq, q, act, residual) -> Node | None:
        xv = self.values[x[0]]
        wq = self.dq_weight(node.inputs[1], 0)
        if wq is None or len(xv.shape) != 4:
            return None
        w, ws = wq
        acc_scale = x[1] * ws
        bias = self.bias(node.inputs[2] if len(node.inputs) > 2 else None, acc_scale)
        if bias is None:
            return None
        oc, cg = w.shape[:2]
        # a full conv's channels pad to whole steps (zero weights; the padded input
        # reads x_zp there), or, with few channels (a stem), its kernel rows pack
        groups = int(node.attrs.get("groups", 1))
        pairs, blocks, step = self.conv_steps(x, w, groups)
        packed = None
        if pairs and groups == 1 and self.values[x[0]].dtype == "uint8":
            # weights whose byte pairs cannot saturate vpmaddubsw (7-bit ones) keep
            # their quads: uint8 activations need no widened copy (int8_intrin.py)
            quads, taps = self.pack_conv(node, w, 4, blocks, groups)
            if byte_pairs_fit(quads):
                pairs, packed, taps = False, quads, taps | {"byte_pairs": True}
        if packed is None:
            packed, taps = self.pack_conv(node, w, step, blocks, groups)
        if pairs:  # x86 without a dot product: vpmaddwd of int16 pairs (int8_intrin.py)
            packed = packed.astype(np.int16)
        if self.dw_quads(node, x, w):  # 4 taps a dot-product step (int8_intrin.py)
            packed, taps = pack_dw_int8(w, self.lanes), {"dw_taps": w.shape[3]}
        elif self.dw_pairs(node, x, w):  # x86 without one: int16 pairs of taps
            stride = int((node.attrs.get("strides") or [1, 1])[-1])
            packed, taps = pack_dw_pairs(w, self.lanes, stride), {"dw_pairs": w.shape[3]}
        corr = bias - x[2] * w.reshape(oc, -1).astype(np.int64).sum(1)
        wabs = np.abs(w.reshape(oc, -1).astype(np.int64)).sum(1)
        rq = self.rq_table(acc_scale, corr, yq, act, residual, packed.shape[0] * self.lanes)
        if rq is None:
            return None
        attrs = {
            k: node.attrs[k] for k in ("strides", "dilations", "pads", "groups") if k in node.attrs
        }
        rq, attrs["rq32"] = self.narrowed(rq, wabs, x, yq, q, residual)
        attrs |= shared_bounds(rq, attrs["rq32"], oc)
        # multiply-accumulates, for graph.json's op count (the profile's GOP/s)
        attrs["macs"] = math.prod(self.values[node.outputs[0]].shape) * (w.size // oc)
        attrs |= {"oc": oc, **taps}
        return self.integer_node("qconv2d", q, x, packed, rq, yq, residual, attrs)

    def pack_conv(self, node, w: np.ndarray, step: int, blocks: bool, groups: int):
        """(packed weights, attrs naming the packing) of a conv in steps of ``step``
        input channels."""
        if self.row_packed(node, w, step):  # a kernel row's taps and channels, in steps
            return pack_rows_int8(w, self.lanes, step), {"row_taps": w.shape[3]}
        if blocks:  # each block of L outputs: its groups' inputs, block-diagonal
            return pack_grouped_int8(w, self.lanes, step, groups), {"group_blocks": True}
        return pack_conv_int8(w, self.lanes, step), {}

    def int16_pairs(self, x) -> bool:
        """Whether a full conv's weights go int16, in pairs of input channels: an x86
        target whose dot product does not take these activations (no VNNI, or int8
        ones) multiplies int16 pairs with one vpmaddwd per step."""
        act = self.values[x[0]].dtype
        return self.cpu is not None and pair_isa_for(act, self.lanes, self.cpu) is not None

    def conv_steps(self, x, w: np.ndarray, groups: int) -> tuple[bool, bool, int]:
        """(int16 pairs, grouped in blocks, input channels a step) of a conv's weights:
        quads, or int16 pairs on x86 without a dot product for these activations; a
        grouped conv in blocks where its groups are whole steps, in pairs where they are
        whole pairs but not quads (x86 whatever its dot product); other grouped convs
        min(4, Cg) channels a step (the simple schedule)."""
        pairs = self.int16_pairs(x)
        step = 2 if pairs else 4
        if groups == 1 or self.group_blocks(w, groups, step):
            return pairs, groups > 1, step
        if self.cpu is not None and pair_body_for(self.lanes, self.cpu):
            if self.group_blocks(w, groups, 2):
                return True, True, 2
        return False, False, min(4, w.shape[1])

    def group_blocks(self, w: np.ndarray, groups: int, step: int) -> bool:
        """Whether a grouped conv (not depthwise) runs as a full conv per block of L
        output channels over the input channels of the groups its lanes belong to
        (pack_grouped_int8): a group's inputs are whole steps, so each group starts at
        a step. A block spanning several groups multiplies zeros off the diagonal (as
        many times the work as the most groups a block spans), which the dot-product
        tile still runs far faster than the simple schedule's one product a step."""
        oc, cg = w.shape[:2]
        depthwise = cg == 1 and oc == groups
        return self.cpu is not None and groups > 1 and not depthwise and cg % step == 0

    def row_packed(self, node: Node, w: np.ndarray, step: int) -> bool:
        """Whether a full conv with few input channels (a 3-channel stem) reads a kernel
        row's KW x C taps as one run of consecutive activations, in dot-product steps
        of ``step``: fewer steps than padding C to whole steps at every tap (a 7x7
        stem's row: 11 pairs for 14, 6 quads for 7). Not with an accelerator (it packs
        a stem its own way) nor a dilated row."""
        oc, cg, kh, kw = w.shape
        dilations = list(node.attrs.get("dilations") or [1, 1])
        return (
            self.accel is None
            and int(node.attrs.get("groups", 1)) == 1
            and cg % step != 0
            and dilations[-1] == 1
            and -(-cg * kw // step) < -(-cg // step) * kw
        )

    def dw_quads(self, node: Node, x, w: np.ndarray) -> bool:
        """Whether a depthwise conv runs 4 taps per dot-product step on this target: one
        input and output channel per group, no dilation along the row, and the target's
        dot product takes this activation type at this width."""
        oc, cg = w.shape[:2]
        dilations = list(node.attrs.get("dilations") or [1, 1])
        return (
            self.cpu is not None
            and cg == 1
            and oc == int(node.attrs.get("groups", 1)) > 1
            and dilations[-1] == 1
            and dwdot_isa_for(self.values[x[0]].dtype, self.lanes, self.cpu) is not None
        )

    def dw_pairs(self, node: Node, x, w: np.ndarray) -> bool:
        """Whether a depthwise conv runs its row's taps in int16 pairs, each pair of
        pixels serving the output columns it falls in (int8_intrin.dwpair_intrin): x86
        at 8 lanes without a dot product for these activations, no dilation along the
        row, a row stride of 1 or 2; not with an accelerator."""
        oc, cg = w.shape[:2]
        dilations = list(node.attrs.get("dilations") or [1, 1])
        strides = list(node.attrs.get("strides") or [1, 1])
        return (
            self.cpu is not None
            and self.accel is None
            and cg == 1
            and oc == int(node.attrs.get("groups", 1)) > 1
            and dilations[-1] == 1
            and strides[-1] in (1, 2)
            and dwpair_isa_for(self.values[x[0]].dtype, self.lanes, self.cpu) is not None
        )

    def dense(self, node, x, yq, q, act, residual) -> Node | None:
        weights = self.dense_weights(node)
        if weights is None:
            return None
        wkn, ws = weights
        acc_scale = x[1] * ws
        bias = self.bias(node.inputs[2] if len(node.inputs) > 2 else None, acc_scale)
        if bias is None:
            return None
        k4 = min(4, wkn.shape[0])
        packed = pack_dense_int8(wkn, self.lanes, k4)
        corr = bias - x[2] * wkn.astype(np.int64).sum(0)
        wabs = np.abs(wkn.astype(np.int64)).sum(0)
        rq = self.rq_table(acc_scale, corr, yq, act, residual, packed.shape[0] * self.lanes)
        if rq is None:
            return None
        rq, narrow = self.narrowed(rq, wabs, x, yq, q, residual)
        macs = math.prod(self.values[node.outputs[0]].shape) * wkn.shape[0]
        attrs = {"n": wkn.shape[1], "rq32": narrow, "macs": macs}
        attrs |= shared_bounds(rq, narrow, wkn.shape[1])
        return self.integer_node("qdense", q, x, packed, rq, yq, residual, attrs)

    def try_float_dense(self, k: int) -> None:
        """DQ(x) @ DQ(W) (+ bias) whose float result no QuantizeLinear takes (a
        classifier's last layer): an integer dense with a dequantize epilogue, y =
        float(acc + corr) * x_scale * w_scale + bias, corr = -x_zp * sum(W) exact in
        int32; the weights stay int8 (a quarter of the float bytes)."""
        node = self.graph.nodes[k]
        if self.accel is not None:  # its epilogue requantizes: no float output there
            return
        x = self.dq_activation(node.inputs[0])
        weights = self.dense_weights(node)
        if x is None or weights is None:
            return
        wkn, ws = weights
        acc_scale = x[1] * ws
        bias = self.bias_real(node.inputs[2] if len(node.inputs) > 2 else None, len(ws))
        if bias is None:
            return
        packed = pack_dense_int8(wkn, self.lanes, min(4, wkn.shape[0]))
        padded = packed.shape[0] * self.lanes
        w64 = wkn.astype(np.int64)
        corr = np.zeros(padded, np.int64)
        corr[: len(ws)] = -x[2] * w64.sum(0)
        if np.abs(corr).max(initial=0) + 255 * np.abs(w64).sum(0).max() >= 2**31:
            return  # the int32 sum could overflow
        affine = np.zeros((2, padded), np.float32)
        affine[0, : len(ws)], affine[1, : len(ws)] = acc_scale, bias
        out = node.outputs[0]
        inputs = [
            x[0],
            add_const(self.values, packed, f"{out}_w_int8"),
            add_const(self.values, corr.astype(np.int32), f"{out}_corr"),
            add_const(self.values, affine, f"{out}_dequant"),
        ]
        macs = math.prod(self.values[out].shape) * wkn.shape[0]
        attrs = {"n": wkn.shape[1], "macs": macs, "x_zp": x[2], "out_dtype": "float32"}
        self.replaced[k] = Node("qdense", node.name, inputs, [out], attrs, source=node.source)

    def dense_weights(self, node: Node):
        """(int8 W as (K, N), per-output scales) of a MatMul / Gemm the integer dense
        takes, or None (a Gemm with trans_a, alpha or beta, packed weights, or weights
        that are not a DQ of int8 constants)."""
        if node.op == "gemm" and (
            node.attrs.get("trans_a")
            or node.attrs.get("alpha", 1.0) != 1.0
            or node.attrs.get("beta", 1.0) != 1.0
            or node.attrs.get("b_block")
        ):
            return None
        trans_b = bool(node.attrs.get("trans_b", 0))
        wq = self.dq_weight(node.inputs[1], 0 if trans_b else 1)
        if wq is None or wq[0].ndim != 2:
            return None
        w, ws = wq
        return (w.T if trans_b else w), ws

    def bias_real(self, name: str | None, n: int) -> np.ndarray | None:
        """A dense layer's bias as float64 per output (a float constant or the DQ of
        an int32 one), zeros without one, None when it is neither."""
        if name is None:
            return np.zeros(n)
        raw = self.const(name)
        if raw is not None and raw.dtype == np.float32 and raw.size == n:
            return raw.astype(np.float64).reshape(-1)
        hit = self.producer(name, "dequantize_linear")
        if hit is None:
            return None
        b, s, z = (self.const(i) for i in hit[1].inputs)
        if b is None or s is None or z is None or b.dtype != np.int32 or b.size != n:
            return None
        return ((b.astype(np.float64) - z.astype(np.float64)) * s.astype(np.float64)).reshape(-1)

    def rq_table(self, acc_scale, bias, yq, act, residual, padded: int):
        y_scale = yq[0]
        table = np.zeros((7, padded), np.int64)
        table[1], table[2] = 1, 1  # padded channels: zero output, harmless shift
        for c, a in enumerate(acc_scale):
            fixed = fixed_point(a / y_scale)
            if fixed is None:
                return None
            mult, shift = fixed
            lo, hi = _act_bounds(act, y_scale, shift)
            rmult = round(residual[1] / y_scale * 2**shift) if residual else 0
            table[:, c] = (mult, shift, 1 << (shift - 1), lo, hi, rmult, bias[c])
        return table

    def narrowed(self, rq, wabs, x, yq, q, residual):
        """(rq, whether the epilogue runs in int32 lanes), rq with the rows that needs."""
        out = q.attrs["dtype"]
        if not narrow_epilogue(rq, wabs, self.values[x[0]].dtype, residual):
            return rq, False
        rq = narrow_bounds(rq, int(yq[1]), out)
        table = mulhi_table(rq, len(wabs))
        return (rq, True) if table is None else (table, "mulhi")

    def integer_node(self, op, q, x, packed, rq, yq, residual, attrs) -> Node:
        w_name = add_const(self.values, packed, f"{q.outputs[0]}_w_int8")
        rq_name = add_const(self.values, rq, f"{q.outputs[0]}_requant")
        inputs = [x[0], w_name, rq_name]
        attrs = {**attrs, "x_zp": x[2], "y_zp": yq[1], "out_dtype": q.attrs["dtype"]}
        if residual is not None:
            inputs.append(residual[0])
            attrs["r_zp"] = residual[2]
        return Node(op, q.name, inputs, list(q.outputs), attrs, source=q.source)


def narrow_epilogue(rq: np.ndarray, wabs: np.ndarray, x_dtype: str, residual) -> bool:
    """Whether the requantize epilogue may run in int32 lanes, giving the same bytes:
    acc + bias fits int32 for every input (|x| <= the type's largest magnitude), so does
    its rounded shifted product, and there is no residual to add before the shift. Then
    the clamps at the activation's bounds move after the shift (it is monotone) and join
    the saturation: ``rq`` gains rows 7 and 8, those bounds on the output (its zero point
    included)."""
    if residual is not None:
        return False
    xmax = max(abs(v) for v in QRANGE[x_dtype])
    n = len(wabs)
    mult, shift, rnd, bias = (rq[k, :n].tolist() for k in (0, 1, 2, 6))
    for c in range(n):
        v = abs(bias[c]) + xmax * int(wabs[c])
        if v >= 2**31 or (v * mult[c] + rnd[c]) >> shift[c] >= 2**31 - 256:
            return False
    return True


def narrow_bounds(rq: np.ndarray, y_zp: int, out: str) -> np.ndarray:
    """rq with rows 7 and 8: the activation's bounds after the shift, plus the zero
    point, within the output type (clamp(clamp(t, a, b), q0, q1) is clamp(t, a', b') with
    a', b' = a, b clamped to [q0, q1], for a <= b)."""
    q0, q1 = QRANGE[out]
    rows = np.zeros((2, rq.shape[1]), np.int64)
    for c in range(rq.shape[1]):
        shift, rnd, lo, hi = (int(rq[k, c]) for k in range(1, 5))
        a, b = ((v + rnd) >> shift for v in (lo, hi))
        rows[:, c] = [min(max(t + y_zp, q0), q1) for t in (a, b)]
    return np.concatenate([rq, rows])


def mulhi_table(rq: np.ndarray, n: int) -> np.ndarray | None:
    """The int32 epilogue table of an ``rq32`` epilogue whose real channels (the first
    ``n``) all shift by 33 or more, else None: rows bias, mult, round = 2^(s - 33),
    shift = s - 32, lo, hi (packager/ops/accel_ops.py's layout). Then
    ((acc + bias) * m + 2^(s-1)) >> s is ((mulhi(acc + bias, m) + round) >> shift) in
    int32 lanes: 2^(s-1) is a multiple of 2^32, so adding it commutes with the floor
    division by 2^32 that mulhi ends in. Padded channels get 0s: their output is the
    zero point clamped, discarded."""
    shift = rq[1, :n]
    if n == 0 or shift.min() < 33:
        return None
    table = np.zeros((6, rq.shape[1]), np.int32)
    table[:, :n] = [rq[6, :n], rq[0, :n], 1 << (shift - 33), shift - 32, rq[7, :n], rq[8, :n]]
    table[4, n:], table[5, n:] = rq[7, n:], rq[8, n:]
    return table


def shared_bounds(rq: np.ndarray, narrow, n: int) -> dict:
    """``{"y_bounds": [lo, hi]}`` where a ``mulhi`` table's first ``n`` (real) channels
    all clamp at the same output bounds (rows 4 and 5), as an activation quantized per
    tensor does, else {}: the kernels then clamp at constants (int8_intrin.py)."""
    if narrow != "mulhi" or n == 0:
        return {}
    lo, hi = rq[4, :n], rq[5, :n]
    if (lo != lo[0]).any() or (hi != hi[0]).any():
        return {}
    return {"y_bounds": [int(lo[0]), int(hi[0])]}


def add_attrs(a, b, yq, act: Node | None, dtype: str) -> dict | None:
    """qadd's attrs for a + b ((tensor, scale, zp) each) quantized to ``yq``: both
    multipliers over one shift. The largest shift whose sums fit int32 (|a - a_zp| and
    |b - b_zp| are at most 255, the rounding term adds 2^(shift-1)), so the add runs in
    int32 lanes (attr ``i32``: the larger multiplier keeps 21 or more significant bits
    for any two scales within 2^8 of the output's), else the larger with 31 significant
    bits in int64."""
    ra, rb = a[1] / yq[0], b[1] / yq[0]
    fixed = fixed_point(max(ra, rb))
    if fixed is None:
        return None
    fits = (
        s
        for s in range(min(fixed[1], 30), 0, -1)
        if 255 * (round(ra * 2**s) + round(rb * 2**s)) + 2 ** (s - 1) < 2**31
    )
    s = next(fits, 0)
    i32 = s >= 20
    shift = s if i32 else fixed[1]
    lo, hi = _act_bounds(act, yq[0], shift)
    if i32:
        lo, hi = max(lo, -(2**31)), min(hi, 2**31 - 1)
    return {
        "a_zp": a[2],
        "b_zp": b[2],
        "a_mult": round(ra * 2**shift),
        "b_mult": round(rb * 2**shift),
        "shift": shift,
        "lo": lo,
        "hi": hi,
        "y_zp": yq[1],
        "out_dtype": dtype,
        "i32": i32,
    }


def _act_bounds(act: Node | None, y_scale: float, shift: int) -> tuple[int, int]:
    """The activation's bounds on the scaled product (y units times 2**shift)."""
    if act is None:
        return -_BIG, _BIG
    if act.op == "relu":
        return 0, _BIG
    lo, hi = act.attrs.get("min"), act.attrs.get("max")
    scale = 2**shift / y_scale
    return (
        -_BIG if lo is None else max(-_BIG, round(lo * scale)),
        _BIG if hi is None else min(_BIG, round(hi * scale)),
    )


def fixed_point(real: float) -> tuple[int, int] | None:
    """(m, s) with real ~= m * 2**-s, m in [2**30, 2**31), 1 <= s <= 62; None when the
    multiplier is too large for a right shift (>= 2**30) or not positive."""
    if not real > 0 or not math.isfinite(real):
        return None
    frac, exp = math.frexp(real)  # real = frac * 2**exp, frac in [0.5, 1)
    mult, shift = round(frac * 2**31), 31 - exp
    if mult == 2**31:
        mult, shift = mult // 2, shift - 1
    if shift > 62:
        mult, shift = round(real * 2**62), 62
    if shift < 1:
        return None
    return mult, shift


def pack_conv_int8(w: np.ndarray, lanes: int, k4: int) -> np.ndarray:
    """(OC, Cg, KH, KW) int8 -> (OC'/L, Cg'/k4, KH, KW, L, k4), zeros padding OC and Cg."""
    oc, cg, kh, kw = w.shape
    ocp, cgp = -(-oc // lanes) * lanes, -(-cg // k4) * k4
    full = np.zeros((ocp, cgp, kh, kw), np.int8)
    full[:oc, :cg] = w
    blocks = full.reshape(ocp // lanes, lanes, cgp // k4, k4, kh, kw)
    return np.ascontiguousarray(blocks.transpose(0, 2, 4, 5, 1, 3))


def pack_grouped_int8(w: np.ndarray, lanes: int, step: int, groups: int) -> np.ndarray:
    """Grouped (OC, Cg, KH, KW) int8 -> (OC'/L, S*Cg/step, KH, KW, L, step), S the most
    groups a block of L outputs spans: block ob reads the S*Cg input channels from its
    first group's, output channel o's weights at its own group's place among them,
    zeros elsewhere and for the padded outputs (qconv2d's ``group_blocks``)."""
    oc, cg, kh, kw = w.shape
    mg = oc // groups
    first = [b * lanes // mg for b in range(-(-oc // lanes))]  # each block's first group
    span = max((min(b * lanes + lanes, oc) - 1) // mg - g + 1 for b, g in enumerate(first))
    full = np.zeros((oc, span * cg, kh, kw), np.int8)
    for o in range(oc):
        at = (o // mg - first[o // lanes]) * cg
        full[o, at : at + cg] = w[o]
    return pack_conv_int8(full, lanes, step)


def pack_rows_int8(w: np.ndarray, lanes: int, step: int) -> np.ndarray:
    """(OC, C, KH, KW) int8 -> (OC'/L, 1, KH, ceil(KW*C/step), L, step): each kernel
    row's taps with their channels side by side (index kw*C + c, as the activations of
    a row of the input lie), in steps, zeros padding OC and the last step:
    packed[ob, 0, kh, j, l, k] = w[ob*L + l, (step*j + k) % C, kh, (step*j + k) // C]."""
    oc, c, kh, kw = w.shape
    ocp, n = -(-oc // lanes) * lanes, -(-kw * c // step) * step
    full = np.zeros((ocp, kh, n), np.int8)
    full[:oc, :, : kw * c] = w.transpose(0, 2, 3, 1).reshape(oc, kh, kw * c)
    blocks = full.reshape(ocp // lanes, lanes, kh, n // step, step)
    return np.ascontiguousarray(blocks.transpose(0, 2, 3, 1, 4))[:, None]


def pack_dw_int8(w: np.ndarray, lanes: int) -> np.ndarray:
    """Depthwise (C, 1, KH, KW) int8 -> (C'/L, 1, KH, ceil(KW/4), L, 4): each channel's
    taps along a row in quads, zeros padding C and the last quad:
    packed[ob, 0, kh, j, l, k] = w[ob*L + l, 0, kh, 4j + k]."""
    c, _, kh, kw = w.shape
    cp, kwp = -(-c // lanes) * lanes, -(-kw // 4) * 4
    full = np.zeros((cp, kh, kwp), np.int8)
    full[:c, :, :kw] = w[:, 0]
    blocks = full.reshape(cp // lanes, lanes, kh, kwp // 4, 4)
    return np.ascontiguousarray(blocks.transpose(0, 2, 3, 1, 4))[:, None]


def pack_dw_pairs(w: np.ndarray, lanes: int, stride: int) -> np.ndarray:
    """Depthwise (C, 1, KH, KW) int8 -> (C'/L, 1, KH, R*S, L, 2) int16 for a row stride
    of 1 or 2: R = 2 / stride output phases, each with S steps of 2 taps, zeros padding
    C and taps outside the kernel: packed[ob, 0, kh, r*S + j, l, k] = w[ob*L + l, 0, kh,
    2j + k - stride*r] (quantized._dw_pairs_acc: output column 2p + r reads input
    column 2(p + j) + k at stride 1)."""
    c, _, kh, kw = w.shape
    phases = 2 // stride
    steps = -(-(kw + stride * (phases - 1)) // 2)
    cp = -(-c // lanes) * lanes
    out = np.zeros((cp // lanes, 1, kh, phases * steps, lanes, 2), np.int16)
    for r in range(phases):
        for j in range(steps):
            for k in range(2):
                tap = 2 * j + k - stride * r
                if 0 <= tap < kw:
                    full = np.zeros((cp, kh), np.int16)
                    full[:c] = w[:, 0, :, tap]
                    out[:, 0, :, r * steps + j, :, k] = full.reshape(-1, lanes, kh).transpose(
                        0, 2, 1
                    )
    return out


def pack_dense_int8(w: np.ndarray, lanes: int, k4: int) -> np.ndarray:
    """(K, N) int8 -> (N'/L, K'/k4, L, k4), zeros padding K and N."""
    k, n = w.shape
    kp, np_ = -(-k // k4) * k4, -(-n // lanes) * lanes
    full = np.zeros((kp, np_), np.int8)
    full[:k, :n] = w
    blocks = full.reshape(kp // k4, k4, np_ // lanes, lanes)
    return np.ascontiguousarray(blocks.transpose(2, 0, 3, 1))
