"""Channel shuffles (Reshape - Transpose - Reshape) as one channel_shuffle op, kept
blocked between blocked convs, against onnx's reference evaluator."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from packager.frontend.importer import import_onnx
from packager.graph.passes.fuse_shuffle import fuse_shuffle
from packager.graph.passes.layout import layout_pass
from packager.graph.pipeline import PassContext

from .test_layout_pass import BOARD_256, Net, check_numbers


def shuffle_model(channels=24, groups=3, perm=(0, 2, 1, 3, 4)):
    """conv relu, a channel shuffle of ``groups``, depthwise conv, conv."""
    n = Net((1, channels, 5, 5))
    y = n.op("Relu", [n.conv("x", channels, channels, k=1)])
    split = n.const(np.array([1, groups, channels // groups, 5, 5]), np.int64)
    back = n.const(np.array([1, channels, 5, 5]), np.int64)
    y = n.op("Reshape", [n.op("Transpose", [n.op("Reshape", [y, split])], perm=list(perm)), back])
    y = n.conv(y, channels, channels, group=channels)
    return n.graph(n.conv(y, channels, 8, k=1))


def passes(model):
    ctx = PassContext(board=BOARD_256)
    return layout_pass(fuse_shuffle(import_onnx("t.onnx", model=model), ctx), ctx)


@pytest.mark.parametrize("channels, groups", [(24, 3), (32, 4), (16, 8)])
def test_shuffle_between_blocked_convs_is_one_blocked_op(channels, groups):
    model = shuffle_model(channels, groups)
    g = passes(model)
    ops = Counter(n.op for n in g.nodes)
    assert ops["channel_shuffle"] == 1 and ops["reshape"] == ops["transpose"] == 0
    (shuffle,) = [n for n in g.nodes if n.op == "channel_shuffle"]
    assert shuffle.attrs == {"groups": groups}
    assert len(g.values[shuffle.inputs[0]].shape) == 5  # the blocked form, no transform
    assert ops["layout_transform"] == 2  # the model's input and output only
    check_numbers(model, g)


def test_other_transposes_are_left_alone():
    model = shuffle_model(perm=(0, 1, 2, 4, 3))
    g = fuse_shuffle(import_onnx("t.onnx", model=model))
    ops = Counter(n.op for n in g.nodes)
    assert ops["channel_shuffle"] == 0 and ops["transpose"] == 1
