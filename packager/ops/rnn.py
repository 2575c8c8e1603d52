"""One time step of a recurrent layer (ONNX LSTM, GRU, RNN): the op ``rnn_cell``.

The frontend unrolls a layer into one input projection for all steps (a gemm: it does
not depend on the state) and one ``rnn_cell`` node per step and direction, which does
the recurrent product h_{t-1} R^T and the gate math in one kernel.

Inputs, in order: ``xw`` (S*B, D*G), the projected inputs X W^T of every step and
direction; ``step`` int32 (1,), the time index t (a tensor, not an attr, so that every
step of a direction shares one kernel); ``h`` (1 or D, B, H) the previous state (the
initial state of all directions at the first step); ``c`` likewise, the previous cell
(LSTM only); ``rt`` (D, H, G), R transposed (gate columns contiguous, so the product
runs in vectors along them); ``b`` (D, 2G), ONNX's biases Wb and Rb; then, when
present: ``p`` (D, 3H) peepholes (LSTM), ``lens`` (B,) int32 sequence lengths.
Runtime weights work as well as constants (the frontend's rearranging nodes fold for
the latter).

Outputs: the new state h (1, B, H); the new cell c (LSTM); and, with ``with_y``, this
step's slice of Y (1, 1, B, H), zero past a sequence's length (where h keeps its value).

attrs: kind (lstm | gru | rnn), dir (the direction's index d), acts (its activation
names, lower case) with alphas and betas (None for the op's default), clip (None or the
bound), linear_before_reset, input_forget, with_p, with_lens, with_y.
"""

from __future__ import annotations

from .. import te
from ..te.schedule import default_schedule, vectorize_innermost
from ._cpu import fallback, lanes_of
from .registry import ScheduleContext, register_op, register_schedule
from .scalar import c
from .unary import UNARY

GATES = {"lstm": 4, "gru": 3, "rnn": 1}


def _affine(x, a):
    return x * c(x, a.get("alpha", 1.0)) + c(x, a.get("beta", 0.0))


def _scaled_tanh(x, a):
    return c(x, a.get("alpha", 1.0)) * _tanh(x * c(x, a.get("beta", 1.0)), a)


# tanh(x) ~ x P(x^2) / Q(x^2) on [-9, 9] (odd/even minimax polynomials; max abs error
# 3.5e-7 in float32): plain arithmetic, so the gate math runs in vectors where the C
# library's tanhf and expf would run one element at a time (they took most of a step).
TANH_P = (
    4.89352455891786e-03,
    6.37261928875436e-04,
    1.48572235717979e-05,
    5.12229709037114e-08,
    -8.60467152213735e-11,
    2.00018790482477e-13,
    -2.76076847742355e-16,
)
TANH_Q = (4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06)
TANH_CLAMP = 9.0


def _poly(x2, coeffs):
    acc = c(x2, coeffs[-1])
    for k in coeffs[-2::-1]:
        acc = acc * x2 + c(x2, k)
    return acc


def _tanh(x, a):
    x = te.min_(te.max_(x, c(x, -TANH_CLAMP)), c(x, TANH_CLAMP))
    x2 = x * x
    return x * _poly(x2, TANH_P) / _poly(x2, TANH_Q)


def _sigmoid(x, a):
    half = c(x, 0.5)
    return half + half * _tanh(x * half, a)


# Activation name (lower case) -> (scalar function, its ONNX attributes alpha, beta).
ACTIVATIONS = {
    "sigmoid": (_sigmoid, ()),
    "tanh": (_tanh, ()),
    "relu": (UNARY["relu"][1], ()),
    "hardsigmoid": (UNARY["hard_sigmoid"][1], ("alpha", "beta")),
    "leakyrelu": (UNARY["leaky_relu"][1], ("alpha",)),
    "thresholdedrelu": (UNARY["thresholded_relu"][1], ("alpha",)),
    "elu": (UNARY["elu"][1], ("alpha",)),
    "softsign": (UNARY["softsign"][1], ()),
    "softplus": (UNARY["softplus"][1], ()),
    "affine": (_affine, ("alpha", "beta")),
    "scaledtanh": (_scaled_tanh, ("alpha", "beta")),
}


def _activation(attrs: dict, k: int):
    """The k-th activation of the node as a function of one scalar expression."""
    name = attrs["acts"][k]
    fn, params = ACTIVATIONS[name]
    given = {"alpha": attrs["alphas"][k], "beta": attrs["betas"][k]}
    a = {p: given[p] for p in params if given[p] is not None}
    return lambda x: fn(x, a)


def _clipped(attrs: dict, x):
    bound = attrs.get("clip")
    if bound is None:
        return x
    return te.min_(te.max_(x, c(x, -bound)), c(x, bound))


def _recurrent(t, attrs, cols: int, col0: int, name: str, scale=None):
    """(B, cols): sum_k h[b, k] * rt[d, k, col0 + j] (h's element scaled by ``scale``)."""
    h, rt, d = t["h"], t["rt"], attrs["dir"]
    k = te.reduce_axis(h.shape[2], "k")

    def f(b, j):
        hv = _state(t, attrs, "h", b, k) if scale is None else scale[b, k]
        return te.sum(hv * rt[d, k, j + col0] if col0 else hv * rt[d, k, j], k)

    return te.compute([h.shape[1], cols], f, name=name, tag="rnn_gates")


@register_op("rnn_cell", "opaque")
def rnn_cell(inputs, attrs):
    kind = attrs["kind"]
    names = ["xw", "step", "h"] + (["c"] if kind == "lstm" else []) + ["rt", "b"]
    names += [n for n in ("p", "lens") if attrs.get(f"with_{n}")]
    if len(inputs) != len(names):
        raise ValueError(f"rnn_cell: {len(inputs)} inputs, expected {names}")
    t = dict(zip(names, inputs, strict=True))
    _, batch, hidden = t["h"].shape
    gates = GATES[kind]
    if t["rt"].shape[1:] != (hidden, gates * hidden):
        raise ValueError(f"rnn_cell: R^T {t['rt'].shape} does not fit hidden size {hidden}")
    new_h, new_c = CELLS[kind](t, attrs, hidden)
    return _outputs(t, attrs, batch, hidden, new_h, new_c)


def _state(t, attrs, name, b, j):
    """Element (b, j) of the previous state ``name`` (h or c) of this direction."""
    s = t[name]
    return s[attrs["dir"] if s.shape[0] > 1 else 0, b, j]


def _x(t, attrs, b, j, rec_bias=True):
    """Projected input of step t, batch b, gate column j of the direction, plus the
    input bias and (unless ``rec_bias`` is false) the recurrent one."""
    d, g = attrs["dir"], t["rt"].shape[2]
    row = te.cast(te.INDEX, t["step"][0]) * t["h"].shape[1] + b
    v = t["xw"][row, j + d * g] if d else t["xw"][row, j]
    v = v + t["b"][d, j]
    return v + t["b"][d, j + g] if rec_bias else v


def _lstm(t, attrs, hidden):
    acc = _recurrent(t, attrs, 4 * hidden, 0, "lstm_gates")
    f_, g_, h_ = (_activation(attrs, k) for k in range(3))
    p = t.get("p")

    def pre(b, j, gate, peep=None):
        col = j + gate * hidden
        v = _x(t, attrs, b, col) + acc[b, col]
        if p is not None and peep is not None:
            v = v + p[attrs["dir"], j + peep[0] * hidden] * peep[1]
        return _clipped(attrs, v)

    def cell(b, j):
        c_prev = _state(t, attrs, "c", b, j)
        i = f_(pre(b, j, 0, (0, c_prev)))
        if attrs.get("input_forget"):
            f = c(i, 1) - i
        else:
            f = f_(pre(b, j, 2, (2, c_prev)))
        return f * c_prev + i * g_(pre(b, j, 3))

    def hid(b, j, ct):
        return f_(pre(b, j, 1, (1, ct))) * h_(ct)

    return hid, cell


def _gru(t, attrs, hidden):
    f_, g_ = _activation(attrs, 0), _activation(attrs, 1)
    lbr = attrs.get("linear_before_reset")
    acc = _recurrent(t, attrs, (3 if lbr else 2) * hidden, 0, "gru_gates")

    def gate(b, j, k):
        col = j + k * hidden
        return f_(_clipped(attrs, _x(t, attrs, b, col) + acc[b, col]))

    if lbr:

        def rec_h(b, j):
            rbh = t["b"][attrs["dir"], j + 5 * hidden]
            return gate(b, j, 1) * (acc[b, j + 2 * hidden] + rbh)

    else:
        rh = te.compute(
            [t["h"].shape[1], hidden],
            lambda b, k: gate(b, k, 1) * _state(t, attrs, "h", b, k),
            name="rh",
            tag="rnn_step",
        )
        acc_h = _recurrent(t, attrs, hidden, 2 * hidden, "gru_hidden", scale=rh)

        def rec_h(b, j):
            return acc_h[b, j]

    def hid(b, j, _):
        x = _x(t, attrs, b, j + 2 * hidden, rec_bias=not lbr)
        cand = g_(_clipped(attrs, x + rec_h(b, j)))
        z = gate(b, j, 0)
        return (c(z, 1) - z) * cand + z * _state(t, attrs, "h", b, j)

    return hid, None


def _rnn(t, attrs, hidden):
    acc = _recurrent(t, attrs, hidden, 0, "rnn_gates")
    f_ = _activation(attrs, 0)

    def hid(b, j, _):
        return f_(_clipped(attrs, _x(t, attrs, b, j) + acc[b, j]))

    return hid, None


CELLS = {"lstm": _lstm, "gru": _gru, "rnn": _rnn}


def _outputs(t, attrs, batch, hidden, hid, cell):
    """h (and c, and this step of Y) of the step, masked by the sequence lengths. The
    new cell and state are stages of their own, so each element is computed once
    whichever outputs read it."""
    lens = t.get("lens")

    def live(b):
        return te.cast(te.INDEX, t["step"][0]) < te.cast(te.INDEX, lens[b])

    def keep(b, new, old):
        return new if lens is None else te.select(live(b), new, old)

    rows = [batch, hidden]
    ct = te.compute(rows, cell, name="cell", tag="rnn_step") if cell else None
    ht = te.compute(rows, lambda b, j: hid(b, j, ct[b, j] if ct else None), tag="rnn_step")
    shape = [1, batch, hidden]
    outs = [te.compute(shape, lambda _, b, j: keep(b, ht[b, j], _state(t, attrs, "h", b, j)))]
    if ct is not None:
        outs.append(
            te.compute(shape, lambda _, b, j: keep(b, ct[b, j], _state(t, attrs, "c", b, j)))
        )
    if attrs.get("with_y"):
        zero = te.const(0, ht.dtype)
        outs.append(te.compute([1, 1, batch, hidden], lambda _, __, b, j: keep(b, ht[b, j], zero)))
    return outs


# Vector accumulators of the recurrent product kept in registers over its k loop: a
# one-row product (batch 1) needs several independent chains to keep the FMA units busy.
ACCUMULATORS = 4


def _cell_cpu(ctx: ScheduleContext) -> te.Schedule:
    """The recurrent products at root, blocks of ACCUMULATORS vectors of gate columns
    accumulated over the whole k loop (R^T's rows are contiguous along the columns);
    the gate math (its own stages: computed once per element) in vectors too."""
    sch = default_schedule(ctx.outs, ctx.target)
    for st in sch.stages:
        if st.is_output:
            continue
        lanes = lanes_of(ctx, st.tensor)
        inner = st.op.axis[-1]
        if lanes < 2 or inner.extent % lanes:
            return fallback(ctx)
        st.compute_root()
        if not st.op.reduce_axis:
            vectorize_innermost(st, ctx.target)
            continue
        b, j = st.op.axis
        vectors = j.extent // lanes
        block = max(a for a in range(1, ACCUMULATORS + 1) if vectors % a == 0)
        jo, ji = st.split(j, lanes * block)
        jc, jl = st.split(ji, lanes)
        (k,) = st.op.reduce_axis
        st.reorder(b, jo, k, jc, jl)
        st.unroll(jc)
        st.vectorize(jl)
    return sch


register_schedule("rnn_cell", "cpu")(_cell_cpu)
