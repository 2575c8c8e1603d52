"""Small real-architecture networks built with onnx.helper and seeded random weights.

Used by the example, the tests and the benchmarks: a tiny CNN, a MobileNetV2-style
network (inverted residuals: 1x1 expand, 3x3 depthwise, 1x1 project, residual adds) and
ResNet-style networks (basic blocks with batch norm and strided downsampling), an LSTM
language model's recurrent body, a BERT-style transformer encoder (embeddings, multi-head
attention with a mask, Gelu FFN) and mel-spectrogram front ends.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class NetBuilder:
    """Accumulates nodes and initializers; every name is unique and deterministic."""

    def __init__(self, seed: int = 0, opset: int = 13):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.opset = opset
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def weight(self, shape, hint: str, scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
        scale = scale if scale is not None else (2.0 / max(fan_in, 1)) ** 0.5
        name = self.name(hint)
        data = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(data, name))
        return name

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=outs[0], **attrs))
        return outs[0] if n_out == 1 else outs

    def conv(self, x: str, cin: int, cout: int, k: int, stride=1, group=1, bias=True) -> str:
        w = self.weight((cout, cin // group, k, k), "w")
        ins = [x, w] + ([self.weight((cout,), "b", 0.1)] if bias else [])
        pad = k // 2
        return self.op(
            "Conv", ins, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, group=group
        )

    def bn(self, x: str, c: int) -> str:
        scale = self.param(1.0 + 0.1 * self.rng.standard_normal(c), "gamma")
        bias = self.param(0.1 * self.rng.standard_normal(c), "beta")
        mean = self.param(0.1 * self.rng.standard_normal(c), "mean")
        var = self.param(0.5 + self.rng.random(c), "var")
        return self.op("BatchNormalization", [x, scale, bias, mean, var], epsilon=1e-5)

    def param_i64(self, data, hint: str) -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(data, np.int64), name))
        return name

    def param(self, data, hint: str) -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(data, np.float32), name))
        return name

    def param_int(self, data, hint: str) -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(data, np.int64), name))
        return name

    def conv_bn(self, x, cin, cout, k, stride=1, group=1, act: str | None = "Relu") -> str:
        y = self.bn(self.conv(x, cin, cout, k, stride, group, bias=False), cout)
        if act == "Relu6":
            lo, hi = self.param(0.0, "lo"), self.param(6.0, "hi")
            return self.op("Clip", [y, lo, hi])
        return self.op(act, [y]) if act else y

    def head(self, x: str, c: int, classes: int) -> str:
        y = self.op("GlobalAveragePool", [x])
        y = self.op("Flatten", [y], axis=1)
        y = self.op(
            "Gemm",
            [y, self.weight((classes, c), "fc"), self.weight((classes,), "fcb", 0.1)],
            transB=1,
        )
        return self.op("Softmax", [y], axis=1)

    def model(self, x: str, shape, y: str, name: str, classes: int) -> onnx.ModelProto:
        return self.finish(name, {x: list(shape)}, {y: [shape[0], classes]})

    def finish(
        self, name: str, inputs: dict, outputs: dict, opset=None, ir_version=8, dtypes=None
    ) -> onnx.ModelProto:
        """The checked model of what was built: ``inputs``/``outputs`` map a name to its
        shape; float32 unless ``dtypes`` names another element type for it."""

        def info(name, shape):
            dtype = (dtypes or {}).get(name, TensorProto.FLOAT)
            return helper.make_tensor_value_info(name, dtype, list(shape))

        graph = helper.make_graph(
            self.nodes,
            name,
            [info(n, s) for n, s in inputs.items()],
            [info(n, s) for n, s in outputs.items()],
            self.inits,
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", opset or self.opset)],
            producer_name="packager-examples",
        )
        model.ir_version = ir_version
        onnx.checker.check_model(model)
        return model


def tiny_cnn(seed: int = 0) -> onnx.ModelProto:
    """conv-bn-relu, max pool, depthwise conv, 1x1 conv, residual add, pool, dense, softmax."""
    b = NetBuilder(seed)
    x = b.conv_bn("input", 3, 8, 3)
    x = b.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    y = b.conv_bn(x, 8, 8, 3, group=8)
    y = b.conv_bn(y, 8, 8, 1, act=None)
    x = b.op("Relu", [b.op("Add", [x, y])])
    return b.model("input", (1, 3, 32, 32), b.head(x, 8, 10), "tiny_cnn", 10)


def mobilenet_v2(seed: int = 0, width: float = 0.5, size: int = 96, classes: int = 100):
    """MobileNetV2-style: stem, inverted residual stages (t, c, n, s), 1x1 head conv."""
    b = NetBuilder(seed)
    ch = lambda c: max(8, int(c * width + 4) // 8 * 8)  # noqa: E731
    stages = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 2, 2),
        (6, 96, 2, 1),
        (6, 160, 2, 2),
        (6, 320, 1, 1),
    ]
    cin = ch(32)
    x = b.conv_bn("input", 3, cin, 3, stride=2, act="Relu6")
    for t, c, n, s in stages:
        cout = ch(c)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            y = b.conv_bn(x, cin, hidden, 1, act="Relu6") if t != 1 else x
            y = b.conv_bn(y, hidden, hidden, 3, stride=stride, group=hidden, act="Relu6")
            y = b.conv_bn(y, hidden, cout, 1, act=None)
            x = b.op("Add", [x, y]) if stride == 1 and cin == cout else y
            cin = cout
    x = b.conv_bn(x, cin, ch(1280), 1, act="Relu6")
    return b.model(
        "input", (1, 3, size, size), b.head(x, ch(1280), classes), "mobilenet_v2", classes
    )


def resnet(
    seed: int = 0,
    blocks=(2, 2, 2, 2),
    width: int = 64,
    size: int = 112,
    classes: int = 100,
    groups: int = 1,
):
    """ResNet-style with basic blocks; blocks=(2, 2, 2, 2) and width 64 is ResNet-18.
    ``groups`` > 1 makes each block's second 3x3 conv a grouped one (ResNeXt-like)."""
    b = NetBuilder(seed)
    x = b.conv_bn("input", 3, width, 7, stride=2)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for stage, n in enumerate(blocks):
        cout = width * 2**stage
        for i in range(n):
            stride = 2 if (i == 0 and stage > 0) else 1
            y = b.conv_bn(x, cin, cout, 3, stride=stride)
            y = b.conv_bn(y, cout, cout, 3, group=groups, act=None)
            short = (
                x if (stride == 1 and cin == cout) else b.conv_bn(x, cin, cout, 1, stride, act=None)
            )
            x = b.op("Relu", [b.op("Add", [y, short])])
            cin = cout
    return b.model("input", (1, 3, size, size), b.head(x, cin, classes), "resnet", classes)


def _layer_norm_decomposed(b: NetBuilder, x: str, d: int) -> str:
    """LayerNorm as exporters without the fused op write it (ReduceMean, Sub, Pow 2, ...)."""
    last = b.param_i64([-1], "axes")
    mean = b.op("ReduceMean", [x, last])
    xc = b.op("Sub", [x, mean])
    var = b.op("ReduceMean", [b.op("Pow", [xc, b.param(2.0, "two")]), last])
    std = b.op("Sqrt", [b.op("Add", [var, b.param(1e-5, "eps")])])
    y = b.op("Div", [xc, std])
    gamma = b.param(1.0 + 0.1 * b.rng.standard_normal(d), "gamma")
    return b.op("Add", [b.op("Mul", [y, gamma]), b.param(0.1 * b.rng.standard_normal(d), "beta")])


def _layer_norm(b: NetBuilder, x: str, d: int, fused: bool) -> str:
    if not fused:
        return _layer_norm_decomposed(b, x, d)
    gamma = b.param(1.0 + 0.1 * b.rng.standard_normal(d), "gamma")
    beta = b.param(0.1 * b.rng.standard_normal(d), "beta")
    return b.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)


def _dense(b: NetBuilder, x: str, cin: int, cout: int) -> str:
    y = b.op("MatMul", [x, b.weight((cin, cout), "w", (1.0 / cin) ** 0.5)])
    return b.op("Add", [y, b.weight((cout,), "b", 0.02)])


def _attention(b: NetBuilder, x: str, bias: str, tokens: int, d: int, heads: int) -> str:
    """Multi-head self-attention as exporters write it: K transposed to (B, H, dh, T) by
    the Transpose before its MatMul, scores scaled, the mask added, Softmax, times V."""
    dh = d // heads
    split = b.param_i64([1, tokens, heads, dh], "split")

    def heads_of(perm):
        return b.op("Transpose", [b.op("Reshape", [_dense(b, x, d, d), split])], perm=perm)

    q, k, v = heads_of([0, 2, 1, 3]), heads_of([0, 2, 3, 1]), heads_of([0, 2, 1, 3])
    s = b.op("Div", [b.op("MatMul", [q, k]), b.param(float(dh) ** 0.5, "scale")])
    p = b.op("Softmax", [b.op("Add", [s, bias])], axis=-1)
    o = b.op("Transpose", [b.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
    merge = b.param_i64([1, tokens, d], "merge")
    return _dense(b, b.op("Reshape", [o, merge]), d, d)


def transformer_encoder(
    seed: int = 0,
    layers: int = 2,
    d: int = 256,
    heads: int = 4,
    tokens: int = 32,
    ffn: int = 1024,
    vocab: int = 1000,
) -> onnx.ModelProto:
    """A BERT-style encoder (opset 20): token and position embeddings (Gather, Add),
    LayerNorm, then per layer multi-head attention with a padding mask and an FFN with
    Gelu, each with a residual add and a LayerNorm after it. Inputs: ``ids`` (int64,
    (1, tokens)) and ``mask`` (float, (1, tokens), 1 = attend); output (1, tokens, d).
    The embedding LayerNorm and the first layer's are written decomposed, the others
    as LayerNormalization ops, as both kinds of export occur."""
    b = NetBuilder(seed, opset=20)
    emb = b.op("Gather", [b.weight((vocab, d), "tok", 0.5), "ids"])
    x = b.op("Add", [emb, b.weight((1, tokens, d), "pos", 0.1)])
    x = _layer_norm(b, x, d, fused=False)
    keep = b.op(
        "Unsqueeze", [b.op("Unsqueeze", ["mask", b.param_i64([1], "ax1")]), b.param_i64([2], "ax2")]
    )
    bias = b.op("Mul", [b.op("Sub", [b.param(1.0, "one"), keep]), b.param(-1e4, "neg")])
    for layer in range(layers):
        a = _attention(b, x, bias, tokens, d, heads)
        x = _layer_norm(b, b.op("Add", [x, a]), d, fused=layer > 0)
        h = b.op("Gelu", [_dense(b, x, d, ffn)])
        x = _layer_norm(b, b.op("Add", [x, _dense(b, h, ffn, d)]), d, fused=layer > 0)
    inputs, ids = {"ids": [1, tokens], "mask": [1, tokens]}, {"ids": TensorProto.INT64}
    outputs = {x: [1, tokens, d]}
    return b.finish("transformer_encoder", inputs, outputs, opset=20, ir_version=9, dtypes=ids)


def transformer_feeds(model: onnx.ModelProto, seed: int = 0, vocab: int = 1000) -> dict:
    """Token ids and a mask whose last quarter is padding, for ``transformer_encoder``."""
    tokens = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    rng = np.random.default_rng(seed)
    mask = np.ones((1, tokens), np.float32)
    mask[:, tokens - tokens // 4 :] = 0
    return {"ids": rng.integers(0, vocab, (1, tokens), dtype=np.int64), "mask": mask}


if __name__ == "__main__":
    import sys
    from pathlib import Path

    out = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "tiny_cnn.onnx")
    onnx.save(tiny_cnn(), out)
    print(out)


def lstm_lm(
    seed: int = 0, steps: int = 16, hidden: int = 128, layers: int = 2, batch: int = 1, vocab=256
) -> onnx.ModelProto:
    """A language model's recurrent body: stacked LSTMs over an embedded token sequence
    (input ``emb``, (steps, batch, hidden): the embedding lookup happens before), then
    the projection to vocabulary logits (steps, batch, vocab); ``vocab=None``: the last
    layer's sequence (steps, batch, hidden) is the output, without the projection."""
    b = NetBuilder(seed)
    x = "emb"
    for _ in range(layers):
        w = b.weight((1, 4 * hidden, hidden), "lstm_w", 0.1)
        r = b.weight((1, 4 * hidden, hidden), "lstm_r", 0.1)
        bias = b.weight((1, 8 * hidden), "lstm_b", 0.1)
        y = b.op("LSTM", [x, w, r, bias], hidden_size=hidden)
        x = b.op("Squeeze", [y, b.param_int([1], "axis")])
    logits = b.op("MatMul", [x, b.weight((hidden, vocab), "proj")]) if vocab else x
    out = [steps, batch, vocab or hidden]
    return b.finish("lstm_lm", {"emb": [steps, batch, hidden]}, {logits: out})


def _mel_filterbank(n_fft: int, mels: int, rate: int) -> np.ndarray:
    """Triangular mel filters on the one-sided DFT bins, (n_fft // 2 + 1, mels)."""
    bins = n_fft // 2 + 1
    mel = np.linspace(0.0, 2595.0 * np.log10(1.0 + rate / 2 / 700.0), mels + 2)
    hz = 700.0 * (10.0 ** (mel / 2595.0) - 1.0)
    freqs = np.linspace(0.0, rate / 2, bins)
    lo, mid, hi = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (freqs[None] - lo) / (mid - lo)
    down = (hi - freqs[None]) / (hi - mid)
    return np.maximum(0.0, np.minimum(up, down)).T.astype(np.float32)


def _hann(n: int) -> np.ndarray:
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)


def _finish_mel(b: NetBuilder, power: str, name: str, samples: int, frames: int, mels: int):
    return b.finish(name, {"audio": [1, samples]}, {power: [1, frames, mels]})


def mel_conv(
    samples: int = 16000, n_fft: int = 512, hop: int = 160, mels: int = 40, rate: int = 16000
) -> onnx.ModelProto:
    """A log-mel front end as torchaudio exports it: reflect padding, the windowed DFT as a
    strided Conv with a fixed cosine/sine basis, real and imaginary parts squared and
    added, the mel filterbank MatMul, a floor and the Log. Input ``audio`` (1, samples);
    output (1, frames, mels)."""
    b = NetBuilder(opset=13)
    bins = n_fft // 2 + 1
    t = np.arange(n_fft)[None] * np.arange(bins)[:, None] * (2 * np.pi / n_fft)
    basis = np.concatenate([np.cos(t), -np.sin(t)]) * _hann(n_fft)[None]
    x = b.op("Unsqueeze", ["audio", b.param_int([1], "axis")])
    pads = b.param_int([0, 0, n_fft // 2, 0, 0, n_fft // 2], "pads")
    x = b.op("Pad", [x, pads], mode="reflect")
    spec = b.op("Conv", [x, b.param(basis[:, None, :], "dft")], strides=[hop])
    re, im = b.op("Split", [spec, b.param_int([bins, bins], "split")], n_out=2, axis=1)
    two = b.param(2.0, "two")
    power = b.op("Add", [b.op("Pow", [re, two]), b.op("Pow", [im, two])])
    power = b.op("Transpose", [power], perm=[0, 2, 1])
    mel = b.op("MatMul", [power, b.param(_mel_filterbank(n_fft, mels, rate), "mel")])
    mel = b.op("Clip", [mel, b.param(1e-10, "floor")])
    frames = samples // hop + 1
    return _finish_mel(b, b.op("Log", [mel]), "mel_conv", samples, frames, mels)


def mel_stft(
    samples: int = 16000, n_fft: int = 512, hop: int = 160, mels: int = 40, rate: int = 16000
) -> onnx.ModelProto:
    """A log-mel front end with ONNX's own STFT (opset 17): a HannWindow, the STFT,
    ReduceSumSquare over the (real, imaginary) axis, MelWeightMatrix and the Log."""
    b = NetBuilder(opset=17)
    x = b.op("Unsqueeze", ["audio", b.param_int([2], "axis")])
    window = b.op("HannWindow", [b.param_int(n_fft, "size")])
    step, length = b.param_int(hop, "step"), b.param_int(n_fft, "length")
    spec = b.op("STFT", [x, step, window, length], onesided=1)
    power = b.op("ReduceSumSquare", [spec], axes=[-1], keepdims=0)
    args = [mels, n_fft, rate, 20.0, rate / 2]
    names = ["mels", "dft", "rate"]
    ins = [b.param_int(v, h) for v, h in zip(args[:3], names, strict=True)]
    ins += [b.param(args[3], "lo"), b.param(args[4], "hi")]
    mel = b.op("MatMul", [power, b.op("MelWeightMatrix", ins)])
    mel = b.op("Add", [mel, b.param(1e-6, "eps")])
    frames = (samples - n_fft) // hop + 1
    return _finish_mel(b, b.op("Log", [mel]), "mel_stft", samples, frames, mels)


def mel_dft(
    samples: int = 16000, n_fft: int = 400, hop: int = 160, mels: int = 80, rate: int = 16000
) -> onnx.ModelProto:
    """A log-mel front end with ONNX's DFT on frames cut by a Gather: the window as a Mul,
    a one-sided DFT (opset 17), Pow 2 and ReduceSum over the complex axis, the mel
    MatMul, a Max floor and the Log."""
    b = NetBuilder(opset=17)
    frames = (samples - n_fft) // hop + 1
    index = np.arange(frames)[:, None] * hop + np.arange(n_fft)[None]
    x = b.op("Gather", ["audio", b.param_int(index, "frames")], axis=1)
    x = b.op("Mul", [x, b.param(_hann(n_fft), "window")])
    x = b.op("Unsqueeze", [x, b.param_int([3], "axis")])
    spec = b.op("DFT", [x], axis=2, onesided=1)
    power = b.op("Pow", [spec, b.param(2.0, "two")])
    power = b.op("ReduceSum", [power, b.param_int([3], "axis")], keepdims=0)
    mel = b.op("MatMul", [power, b.param(_mel_filterbank(n_fft, mels, rate), "mel")])
    mel = b.op("Max", [mel, b.param(1e-10, "floor")])
    return _finish_mel(b, b.op("Log", [mel]), "mel_dft", samples, frames, mels)
