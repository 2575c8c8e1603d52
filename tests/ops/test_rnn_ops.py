"""LSTM, GRU and RNN against ONNX Runtime: directions, layout=1, initial states,
peepholes, sequence lengths, activation lists, clip, optional outputs; a 2-layer LSTM
language model; the unrolled graph's kernels (one per direction, shared by the steps)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.errors import PackagerError
from packager.package import compile_model
from tests.helpers import ort_outputs, run_model

pytest.importorskip("onnxruntime")

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _layer(op, *, steps=5, batch=3, inputs=4, hidden=8, num_dir=1, layout=0, seed=0, **kw):
    """A model of one recurrent node; kw: attrs, plus with_bias, with_lens (a list),
    with_h0, with_c0, with_p, outputs (names, "" for an absent one), runtime (names of
    weights fed at run time instead of stored). Returns (model, feeds)."""
    rng = np.random.default_rng(seed)
    g = GATES[op] * hidden
    x_shape = [batch, steps, inputs] if layout else [steps, batch, inputs]
    s_shape = [batch, num_dir, hidden] if layout else [num_dir, batch, hidden]
    arrays = {
        "W": rng.uniform(-0.5, 0.5, (num_dir, g, inputs)),
        "R": rng.uniform(-0.5, 0.5, (num_dir, g, hidden)),
    }
    names = ["X", "W", "R"]
    if kw.pop("with_bias", True):
        arrays["B"] = rng.uniform(-0.5, 0.5, (num_dir, 2 * g))
    names.append("B" if "B" in arrays else "")
    lens = kw.pop("with_lens", None)
    if lens is not None:
        arrays["L"] = np.array(lens, np.int32)
    names.append("L" if lens is not None else "")
    for key, flag in (("H0", "with_h0"), ("C0", "with_c0")):
        if kw.pop(flag, False):
            arrays[key] = rng.uniform(-1, 1, s_shape)
        names.append(key if key in arrays else "")
    if kw.pop("with_p", False):
        arrays["P"] = rng.uniform(-0.5, 0.5, (num_dir, 3 * hidden))
        names.append("P")
    runtime = set(kw.pop("runtime", ()))
    outputs = kw.pop("outputs", ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"])
    while names and names[-1] == "":
        names.pop()
    arrays = {k: (v if k == "L" else v.astype(np.float32)) for k, v in arrays.items()}
    feeds = {"X": rng.uniform(-1, 1, x_shape).astype(np.float32)}
    feeds.update({k: arrays[k] for k in runtime})
    inits = [numpy_helper.from_array(v, k) for k, v in arrays.items() if k not in runtime]
    node = helper.make_node(op, names, outputs, hidden_size=hidden, layout=layout, **kw)
    y_shape = [batch, steps, num_dir, hidden] if layout else [steps, num_dir, batch, hidden]
    shapes = {"Y": y_shape, "Y_h": s_shape, "Y_c": s_shape}
    graph = helper.make_graph(
        [node],
        "rnn",
        [helper.make_tensor_value_info(k, _dtype(v), list(v.shape)) for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outputs if o],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    return model, feeds


def _batchwise(model, feeds):
    """``model`` (one layout-0 recurrent node) as layout 1, with its feeds to match."""
    perm = {"X": (1, 0, 2), "H0": (1, 0, 2), "C0": (1, 0, 2), "Y": (2, 0, 1, 3)}
    perm.update(Y_h=(1, 0, 2), Y_c=(1, 0, 2))
    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    (node,) = g.node
    next(a for a in node.attribute if a.name == "layout").i = 1
    for init in g.initializer:
        if init.name in perm:
            init.CopyFrom(
                numpy_helper.from_array(
                    numpy_helper.to_array(init).transpose(perm[init.name]).copy(), init.name
                )
            )
    for vi in list(g.input) + list(g.output):
        dims = vi.type.tensor_type.shape.dim
        if vi.name in perm:
            old = [d.dim_value for d in dims]
            for d, p in zip(dims, perm[vi.name], strict=True):
                d.dim_value = old[p]
    feeds = {k: v.transpose(perm[k]).copy() if k in perm else v for k, v in feeds.items()}
    return model, feeds


def _dtype(v):
    return TensorProto.INT32 if v.dtype == np.int32 else TensorProto.FLOAT


def _check(model, feeds, atol=1e-5, batchwise=False):
    """The packaged model's outputs against ONNX Runtime's; ``batchwise``: packages
    the model with layout=1 (ONNX Runtime runs only layout 0), transposing its data."""
    onnx.checker.check_model(model)
    want = ort_outputs(model, feeds)
    if batchwise:
        model, feeds = _batchwise(model, feeds)
        perms = {"Y": (2, 0, 1, 3), "Y_h": (1, 0, 2), "Y_c": (1, 0, 2)}
        outs = [o.name for o in model.graph.output]
        want = [w.transpose(perms[n]) for n, w in zip(outs, want, strict=True)]
    got = run_model(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=atol)


def test_lstm_bidirectional_sequence_lens_states_peepholes():
    model, feeds = _layer(
        "LSTM",
        num_dir=2,
        direction="bidirectional",
        with_lens=[5, 2, 3],
        with_h0=True,
        with_c0=True,
        with_p=True,
    )
    _check(model, feeds)


def test_lstm_layout1_runtime_weights_only_y_h():
    model, feeds = _layer(
        "LSTM",
        direction="reverse",
        with_h0=True,
        with_c0=True,
        runtime=("W", "R", "B", "H0", "C0"),
        outputs=["", "Y_h"],
    )
    _check(model, feeds, batchwise=True)


def test_lstm_activation_list_clip_input_forget():
    model, feeds = _layer(
        "LSTM",
        activations=["HardSigmoid", "ScaledTanh", "Softsign"],
        activation_alpha=[0.3, 0.9],
        activation_beta=[0.4, 1.1],
        clip=0.7,
        input_forget=1,
    )
    _check(model, feeds)


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_layout1_bidirectional_lens_linear_before_reset(lbr):
    model, feeds = _layer(
        "GRU",
        num_dir=2,
        direction="bidirectional",
        with_lens=[4, 5, 1],
        with_h0=True,
        linear_before_reset=lbr,
        clip=1.5,
    )
    _check(model, feeds, batchwise=True)


def test_gru_activations():
    model, feeds = _layer(
        "GRU", activations=["Affine", "Elu"], activation_alpha=[0.5, 0.8], activation_beta=[0.2]
    )
    _check(model, feeds)


@pytest.mark.parametrize(
    "acts",
    [["Relu", "LeakyRelu"], ["ThresholdedRelu", "Softplus"], ["Sigmoid", "Tanh"]],
)
def test_rnn_bidirectional_activations(acts):
    model, feeds = _layer(
        "RNN",
        num_dir=2,
        direction="bidirectional",
        activations=acts,
        activation_alpha=[0.1, 0.2],
        with_lens=[3, 5, 5],
        with_h0=True,
    )
    _check(model, feeds)


def _lstm_lm():
    """The 2-layer LSTM language model of the benchmarks (hidden 128, 16 steps) and an
    embedded sequence for it."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import networks

    model = networks.lstm_lm(steps=16, hidden=128, layers=2, batch=1)
    emb = np.random.default_rng(1).uniform(-1, 1, (16, 1, 128)).astype(np.float32)
    return model, {"emb": emb}


def test_two_layer_lstm_language_model():
    model, feeds = _lstm_lm()
    _check(model, feeds, atol=1e-4)


def test_steps_share_one_cell_kernel_per_layer():
    """16 steps x 2 layers call the cell 32 times through two kernels (one per layer:
    their inputs differ in size only if the layers do, so here even one)."""
    model, _ = _lstm_lm()
    compiled = compile_model(model)
    cells = [
        f for n, f in zip(compiled.graph.nodes, compiled.funcs, strict=True) if n.op == "rnn_cell"
    ]
    assert len(cells) == 32
    assert len(set(cells)) == 1


def test_unknown_activation_is_refused_by_name():
    model, _ = _layer("RNN", activations=["Swish"])
    with pytest.raises(PackagerError, match=r"\(RNN\): activation 'swish' is not supported"):
        compile_model(model)


def test_wrong_activation_count_is_refused():
    model, _ = _layer("GRU", activations=["Sigmoid"])
    with pytest.raises(PackagerError, match=r"\(GRU\): activations has 1 names, expected 2"):
        compile_model(model)
