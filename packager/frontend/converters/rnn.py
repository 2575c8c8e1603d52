"""LSTM, GRU and RNN, unrolled at package time.

A layer becomes: the input projection X W^T of every step and direction as
one gemm (it does not depend on the state); per direction and step one ``rnn_cell``
node (the recurrent product, biases and gate math in one kernel, shared by the steps of a
direction: the step index is a tensor input); then concats gathering Y, Y_h and Y_c,
and transposes for layout=1. Weights may be runtime tensors: the nodes rearranging them
(W reshaped, R transposed) fold away when they are constants.
"""

from __future__ import annotations

import numpy as np

from ...ops.rnn import ACTIVATIONS, GATES
from ._common import check_attrs
from .registry import converter

DEFAULT_ACTS = {"lstm": ["sigmoid", "tanh", "tanh"], "gru": ["sigmoid", "tanh"], "rnn": ["tanh"]}
ATTRS = {
    "activation_alpha",
    "activation_beta",
    "activations",
    "clip",
    "direction",
    "hidden_size",
    "layout",
}
EXTRA_ATTRS = {"lstm": {"input_forget"}, "gru": {"linear_before_reset"}, "rnn": set()}
DIRECTIONS = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}
# ONNX input positions.
X, W, R, B, LENS, H0, C0, P = range(8)


@converter("LSTM", "GRU", "RNN")
def recurrent(ctx, node):
    kind = node.op_type.lower()
    check_attrs(ctx, node, ATTRS | EXTRA_ATTRS[kind])
    direction = ctx.attr(node, "direction", "forward")
    if direction not in DIRECTIONS:
        ctx.fail(node, f"direction '{direction}' is not one of {sorted(DIRECTIONS)}")
    reverse = DIRECTIONS[direction]
    layout = int(ctx.attr(node, "layout", 0))
    if layout not in (0, 1):
        ctx.fail(node, f"layout {layout} is not 0 or 1")
    w, r = ctx.value(node.input[W]).shape, ctx.value(node.input[R]).shape
    num_dir, gates = len(reverse), GATES[kind]
    hidden = r[-1] if len(r) == 3 else 0
    if len(w) != 3 or w[0] != num_dir or tuple(r) != (num_dir, gates * hidden, hidden):
        ctx.fail(node, f"W {list(w)} and R {list(r)} do not fit direction={direction}")
    if int(ctx.attr(node, "hidden_size", hidden)) != hidden:
        ctx.fail(node, f"hidden_size differs from R's {hidden}")
    x_val = ctx.value(node.input[X])
    if len(x_val.shape) != 3:
        ctx.fail(node, f"X must be 3-D, got {list(x_val.shape)}")
    steps, batch = (x_val.shape[1], x_val.shape[0]) if layout else x_val.shape[:2]
    attrs = _cell_attrs(ctx, node, kind, num_dir)
    plan = _Layer(ctx, node, kind, attrs, num_dir, hidden, steps, batch, layout)
    return plan.build(reverse)


def _cell_attrs(ctx, node, kind: str, num_dir: int) -> dict:
    acts = [a.lower() for a in ctx.attr(node, "activations", [])] or DEFAULT_ACTS[kind] * num_dir
    per = len(DEFAULT_ACTS[kind])
    if len(acts) != per * num_dir:
        ctx.fail(node, f"activations has {len(acts)} names, expected {per * num_dir}")
    for a in acts:
        if a not in ACTIVATIONS:
            ctx.fail(node, f"activation '{a}' is not supported (supported: {sorted(ACTIVATIONS)})")
    alphas = iter(float(v) for v in ctx.attr(node, "activation_alpha", []))
    betas = iter(float(v) for v in ctx.attr(node, "activation_beta", []))
    # Each activation that takes alpha (beta) consumes the next value of the list, in
    # the order of the activations (as ONNX Runtime reads them); none left: the default.
    params = [ACTIVATIONS[a][1] for a in acts]
    at_alpha = [next(alphas, None) if "alpha" in p else None for p in params]
    at_beta = [next(betas, None) if "beta" in p else None for p in params]
    clip = ctx.attr(node, "clip")
    return {
        "kind": kind,
        "acts": acts,
        "alphas": at_alpha,
        "betas": at_beta,
        "clip": None if clip is None else float(clip),
        "linear_before_reset": int(ctx.attr(node, "linear_before_reset", 0)),
        "input_forget": int(ctx.attr(node, "input_forget", 0)),
    }


class _Layer:
    """The nodes of one recurrent node, built direction by direction."""

    def __init__(self, ctx, node, kind, attrs, num_dir, hidden, steps, batch, layout):
        self.ctx, self.node, self.kind, self.attrs = ctx, node, kind, attrs
        self.num_dir, self.hidden, self.steps, self.batch = num_dir, hidden, steps, batch
        self.layout = layout
        self.dtype = ctx.value(node.input[X]).dtype
        self.nodes = []

    def out(self, i: int) -> str:
        return self.node.output[i] if i < len(self.node.output) else ""

    def add(self, op, inputs, hint, n_out=1, **attrs) -> list[str]:
        outs = [self.ctx.fresh(hint) for _ in range(n_out)]
        self.nodes.append(self.ctx.node(op, self.node, inputs, outputs=outs, **attrs))
        return outs

    def build(self, reverse):
        xw = self._projection()
        weights = self._weights()
        lens = self._lens()
        h0 = self._initial(H0)
        c0 = self._initial(C0) if self.kind == "lstm" else None
        hs, cs, ys = [], [], []
        for d, rev in enumerate(reverse):
            h, c, y = self._direction(d, rev, xw, weights, lens, h0, c0)
            hs.append(h)
            cs.append(c)
            ys.append(y)
        if self.out(0):
            self._gather(ys, 1, self.out(0), [2, 0, 1, 3], "Y")
        if self.out(1):
            self._gather(hs, 0, self.out(1), [1, 0, 2], "Y_h")
        if self.kind == "lstm" and self.out(2):
            self._gather(cs, 0, self.out(2), [1, 0, 2], "Y_c")
        return self.nodes

    def _projection(self) -> str:
        """(S*B, D*G): every step's X W^T, all directions side by side."""
        node, g = self.node, GATES[self.kind] * self.hidden
        x = node.input[X]
        if self.layout:
            (x,) = self.add("transpose", [x], "x_seq", perm=[1, 0, 2])
        inputs = self.ctx.value(node.input[X]).shape[-1]
        (x2,) = self.add("reshape", [x], "x_rows", shape=[self.steps * self.batch, inputs])
        (w,) = self.add("reshape", [node.input[W]], "W", shape=[self.num_dir * g, inputs])
        (xw,) = self.add("gemm", [x2, w], "xw", trans_b=1)
        return xw

    def _weights(self) -> list[str]:
        """R^T (D, H, G) and the biases (D, 2G), then P (D, 3H) if given (the nodes
        fold when the weights are constants)."""
        ctx, node, g = self.ctx, self.node, GATES[self.kind] * self.hidden
        (rt,) = self.add("transpose", [node.input[R]], "RT", perm=[0, 2, 1])
        if ctx.has_input(node, B):
            bias = node.input[B]
        else:
            bias = ctx.add_const(np.zeros((self.num_dir, 2 * g), self.dtype), "B")
        out = [rt, bias]
        if self.kind == "lstm" and ctx.has_input(node, P):
            out.append(node.input[P])
        return out

    def _lens(self) -> str | None:
        if not self.ctx.has_input(self.node, LENS):
            return None
        name = self.node.input[LENS]
        lens = self.ctx.value(name)
        if lens.data is not None and np.all(np.asarray(lens.data) >= self.steps):
            return None  # every sequence is full: no masking
        if lens.dtype != "int32":
            (name,) = self.add("cast", [name], "lens", dtype="int32")
        return name

    def _initial(self, i: int) -> str:
        """The initial state (D, B, H), or zeros (1, B, H) for every direction."""
        if not self.ctx.has_input(self.node, i):
            return self.ctx.add_const(np.zeros((1, self.batch, self.hidden), self.dtype), "s0")
        name = self.node.input[i]
        if self.layout:
            (name,) = self.add("transpose", [name], "s0", perm=[1, 0, 2])
        return name

    def _direction(self, d, rev, xw, weights, lens, h, c):
        ctx, kind = self.ctx, self.kind
        per = len(DEFAULT_ACTS[kind])
        attrs = dict(self.attrs, dir=d)
        for key in ("acts", "alphas", "betas"):
            attrs[key] = self.attrs[key][d * per : (d + 1) * per]
        with_y = bool(self.out(0))
        attrs.update(with_y=int(with_y), with_lens=int(lens is not None))
        attrs["with_p"] = int(len(weights) > 2)
        extra = weights + ([lens] if lens is not None else [])
        ys = [None] * self.steps
        n_out = 1 + (kind == "lstm") + with_y
        order = range(self.steps - 1, -1, -1) if rev else range(self.steps)
        for t in order:
            step = ctx.add_const(np.array([t], np.int32), "step")
            state = [h] + ([c] if c else [])
            outs = self.add("rnn_cell", [xw, step, *state, *extra], "h", n_out, **attrs)
            h = outs[0]
            c = outs[1] if c else None
            if with_y:
                ys[t] = outs[-1]
        y = None
        if with_y:
            (y,) = self.add("concat", ys, "y", axis=0) if self.steps > 1 else (ys[0],)
        return h, c, y

    def _gather(self, parts, axis, out, perm, hint):
        """Output ``out`` from the directions' ``parts`` joined on ``axis`` (layout 0),
        then transposed by ``perm`` for layout 1."""
        src = parts[0]
        if len(parts) > 1:
            (src,) = self.add("concat", parts, hint, axis=axis)
        op, attrs = ("transpose", {"perm": perm}) if self.layout else ("identity", {})
        self.nodes.append(self.ctx.node(op, self.node, [src], outputs=[out], **attrs))
