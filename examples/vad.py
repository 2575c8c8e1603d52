"""A Silero-style voice-activity detector built with onnx.helper and seeded random weights.

Inputs: ``input`` (512 samples of audio, float32 [1, 512]), ``state`` (the LSTM's h and c,
float32 [2, 1, 128]) and ``sr`` (the sample rate, an int64 scalar). Outputs: ``output``
(the speech probability, [1, 1]) and ``stateN`` (the new state, fed back with the next
chunk). An ``If`` on ``sr == 16000`` picks one of two sub-models of the same shape:

  STFT front end  reflect pad, Conv1d with a fixed cos/sin basis (stride: the hop), magnitude
  encoder         4 Conv1d blocks (kernel 3) with ReLU, the middle two strided; mean over time
  decoder         one LSTM step (hidden 128) from the state, ReLU, Conv1d 1x1, Sigmoid

The 16 kHz branch frames with a 256-sample window and hop 128, the 8 kHz one with 128 and
hop 64. Package it with the If at run time, or with ``--input-value sr=16000`` to fold it:

    python examples/vad.py -o vad.onnx
    packager build vad.onnx --board host -o out/vad
    packager build vad.onnx --board host -o out/vad16k --input-value sr=16000
"""

from __future__ import annotations

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SAMPLES = 512
HIDDEN = 128
RATES = {16000: (256, 128), 8000: (128, 64)}  # sample rate -> (window, hop)


class _Branch:
    """Nodes and initializers of one sub-model; names carry its prefix."""

    def __init__(self, prefix: str, rng: np.random.Generator):
        self.prefix, self.rng = prefix, rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{self.prefix}{hint}_{self._n}"

    def const(self, data: np.ndarray, hint: str) -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(data), name))
        return name

    def weight(self, shape, hint: str) -> str:
        fan_in = int(np.prod(shape[1:]))
        data = self.rng.standard_normal(shape) * (2.0 / fan_in) ** 0.5
        return self.const(data.astype(np.float32), hint)

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, **attrs))
        return outs[0] if n_out == 1 else outs


def _dft_basis(window: int) -> np.ndarray:
    """[2 * bins, 1, window]: Hann-windowed cos rows, then sin rows (a conv STFT)."""
    bins = window // 2 + 1
    n = np.arange(window)
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * n / window)
    k = np.arange(bins)[:, None]
    cos = np.cos(2 * np.pi * k * n / window) * hann
    sin = -np.sin(2 * np.pi * k * n / window) * hann
    return np.concatenate([cos, sin])[:, None, :].astype(np.float32)


def _sub_model(prefix: str, rate: int, rng: np.random.Generator):
    """The nodes and initializers of one rate's branch; its outputs are ``(prob, state)``."""
    window, hop = RATES[rate]
    bins = window // 2 + 1
    b = _Branch(prefix, rng)
    x = b.op("Reshape", ["input", b.const(np.array([1, 1, SAMPLES], np.int64), "shape")])
    pads = b.const(np.array([0, 0, 0, 0, 0, window // 4], np.int64), "pads")
    x = b.op("Pad", [x, pads], mode="reflect")
    spec = b.op("Conv", [x, b.const(_dft_basis(window), "basis")], strides=[hop])
    re, im = b.op("Split", [spec, b.const(np.array([bins, bins], np.int64), "split")], 2, axis=1)
    power = b.op("Add", [b.op("Mul", [re, re]), b.op("Mul", [im, im])])
    x = b.op("Sqrt", [power])
    for cin, cout, stride in ((bins, 128, 1), (128, 64, 2), (64, 64, 2), (64, 128, 1)):
        w = b.weight((cout, cin, 3), "conv_w")
        bias = b.const(rng.standard_normal(cout).astype(np.float32) * 0.1, "conv_b")
        x = b.op("Relu", [b.op("Conv", [x, w, bias], pads=[1, 1], strides=[stride])])
    x = b.op("ReduceMean", [x], axes=[2], keepdims=0)  # [1, 128]
    x = b.op("Unsqueeze", [x, b.const(np.array([0], np.int64), "axes")])  # [1, 1, 128]
    h0, c0 = b.op("Split", ["state", b.const(np.array([1, 1], np.int64), "hc")], 2, axis=0)
    gates = 4 * HIDDEN
    lstm_w = b.weight((1, gates, 128), "lstm_w")
    lstm_r = b.weight((1, gates, HIDDEN), "lstm_r")
    lstm_b = b.const(rng.standard_normal((1, 2 * gates)).astype(np.float32) * 0.1, "lstm_b")
    _, h, c = b.op("LSTM", [x, lstm_w, lstm_r, lstm_b, "", h0, c0], 3, hidden_size=HIDDEN)
    state = b.op("Concat", [h, c], axis=0)  # [2, 1, 128]
    y = b.op("Reshape", [h, b.const(np.array([1, HIDDEN, 1], np.int64), "col")])
    y = b.op("Relu", [y])
    y = b.op(
        "Conv", [y, b.weight((1, HIDDEN, 1), "head_w"), b.const(np.zeros(1, np.float32), "hb")]
    )
    y = b.op("Sigmoid", [y])
    prob = b.op("Reshape", [y, b.const(np.array([1, 1], np.int64), "out")])
    return b, prob, state


def silero_vad(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    vi = helper.make_tensor_value_info
    branches = []
    for rate in RATES:
        b, prob, state = _sub_model(f"sr{rate // 1000}k/", rate, rng)
        outs = [
            vi(f"sr{rate // 1000}k/output", TensorProto.FLOAT, [1, 1]),
            vi(f"sr{rate // 1000}k/stateN", TensorProto.FLOAT, [2, 1, HIDDEN]),
        ]
        b.nodes += [
            helper.make_node("Identity", [prob], [outs[0].name]),
            helper.make_node("Identity", [state], [outs[1].name]),
        ]
        branches.append(helper.make_graph(b.nodes, f"sr{rate}", [], outs, b.inits))
    nodes = [
        helper.make_node("Equal", ["sr", "sr16k"], ["is16k"]),
        helper.make_node(
            "If",
            ["is16k"],
            ["output", "stateN"],
            then_branch=branches[0],
            else_branch=branches[1],
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "silero_vad",
        [
            vi("input", TensorProto.FLOAT, [1, SAMPLES]),
            vi("state", TensorProto.FLOAT, [2, 1, HIDDEN]),
            vi("sr", TensorProto.INT64, []),
        ],
        [vi("output", TensorProto.FLOAT, [1, 1]), vi("stateN", TensorProto.FLOAT, [2, 1, HIDDEN])],
        [numpy_helper.from_array(np.array(16000, np.int64), "sr16k")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def vad_feeds(seed: int = 0, rate: int = 16000) -> dict[str, np.ndarray]:
    """One chunk of audio-like input, a zero state and the sample rate."""
    rng = np.random.default_rng(seed)
    t = np.arange(SAMPLES) / rate
    audio = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(SAMPLES)
    return {
        "input": audio.astype(np.float32)[None],
        "state": np.zeros((2, 1, HIDDEN), np.float32),
        "sr": np.array(rate, np.int64),
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", default="vad.onnx")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    onnx.save(silero_vad(args.seed), args.output)
    print(args.output)
