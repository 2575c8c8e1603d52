"""Compiled programs on the C simulator (packager/accel/simulator.py), in its checking
mode: the bytes of the numpy model, no race, and the cycles the compiler's estimate of
the same cycle model gives."""

import numpy as np
import pytest

from packager.accel import simulator
from packager.accel.reference import estimate_cycles, run
from packager.errors import PackagerError
from tests.accel.test_compiler import RESNET18, TARGET, _values, compile_op

CASES = [
    ("accel_conv2d", (32, 48, 7, 3, 2, 1)),
    ("accel_conv2d", (16, 32, 8, 5, 1, 2)),
    ("accel_conv2d", RESNET18[7]),
    ("accel_conv2d", RESNET18[9]),
    ("accel_dense", (512, 1008, 1, 1, 1, 0)),
    ("accel_dense", (256, 512, 1, 1, 1, 0)),
]


@pytest.mark.parametrize("op, shape", CASES, ids=lambda c: str(c))
@pytest.mark.parametrize("vthreads", [1, 2])
def test_simulator_agrees_with_the_model(op, shape, vthreads):
    c, o, hw, k, s, pad = shape
    attrs = {"x_zp": 3, "y_zp": -1}
    if op == "accel_conv2d":
        attrs |= {"strides": [s, s], "pads": [pad] * 4}
    if (op, shape[1], vthreads) == ("accel_dense", 1008, 2):  # 63 output blocks
        with pytest.raises(PackagerError, match="virtual threads"):
            compile_op(op, c, o, hw, hw, k, {"vthreads": vthreads}, **attrs)
        return
    prog, _, ins, y = compile_op(op, c, o, hw, hw, k, {"vthreads": vthreads}, **attrs)
    vals = _values([t.shape for t in ins], o, np.random.default_rng(0))
    want, got = np.zeros(y.shape, np.int8), np.zeros(y.shape, np.int8)
    run(prog, TARGET.config(), [*vals, want])
    res = simulator.Simulator(TARGET.config(), check=True).run(prog, [*vals, got])
    assert np.array_equal(got, want)
    assert res.cycles == estimate_cycles(prog, TARGET.config())["cycles"]


@pytest.mark.parametrize("shape", [RESNET18[7], RESNET18[9]], ids=str)
def test_two_virtual_threads_cut_the_cycles_of_a_load_heavy_conv(shape):
    """The two ResNet-18 convs whose weights cost the most DMA time: >= 1.5x fewer
    cycles with two threads (the others are compute-bound on this cycle model)."""
    c, o, hw, k, s, pad = shape
    cycles = {}
    for vt in (1, 2):
        prog, _, ins, y = compile_op("accel_conv2d", c, o, hw, hw, k, {"vthreads": vt},
                                     strides=[s, s], pads=[pad] * 4, x_zp=0, y_zp=0)  # fmt: skip
        vals = _values([t.shape for t in ins], o, np.random.default_rng(0))
        res = simulator.Simulator(TARGET.config()).run(prog, [*vals, np.zeros(y.shape, np.int8)])
        cycles[vt] = res.cycles
    assert cycles[1] >= 1.5 * cycles[2]
