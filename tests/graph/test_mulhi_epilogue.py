"""The int32 'mulhi' requantize table: the same integers as the int64 epilogue it
replaces, and only where every real channel shifts by 33 or more."""

import numpy as np

from packager import te
from packager.graph.passes.quantize import mulhi_table, narrow_bounds
from packager.ops.quantized import _requantize
from packager.te.evaluator import evaluate


def _rq(rng, n, padded, shift_lo=33):
    rq = np.zeros((7, padded), np.int64)
    rq[1], rq[2] = 1, 1
    for c in range(n):
        s = int(rng.integers(shift_lo, 46))
        lo, hi = (0 if c % 3 == 0 else -(2**62)), 2**62  # a ReLU on every third
        rq[:, c] = (
            rng.integers(2**30, 2**31),
            s,
            1 << (s - 1),
            lo,
            hi,
            0,
            rng.integers(-9999, 9999),
        )
    return narrow_bounds(rq, int(rng.integers(-20, 20)), "int8")


def _epilogue(acc_values, rq, attrs):
    acc = te.placeholder(acc_values.shape, "int32", "acc")
    table = te.placeholder(rq.shape, str(rq.dtype), "rq")
    out = te.compute(acc_values.shape, lambda c, i: _requantize(acc[(c, i)], table, c, attrs))
    return evaluate([out], {acc: acc_values, table: rq})[0]


def test_mulhi_table_gives_the_int64_epilogues_bytes():
    rng = np.random.default_rng(7)
    n, padded = 13, 16
    rq = _rq(rng, n, padded)
    table = mulhi_table(rq, n)
    assert table.dtype == np.int32 and table.shape == (6, padded)
    # per channel, accumulators that span about +-300 output steps
    span = (300 * 2.0 ** rq[1, :padded] / np.maximum(rq[0, :padded], 1)).astype(np.int64)
    acc = np.stack([rng.integers(-r, r + 1, 64) for r in np.minimum(span, 2**30)])
    acc = acc.astype(np.int32)
    acc[0, :4] = [0, 1, -1, 2**24 - 1]
    attrs = {"rq32": True, "y_zp": 0, "out_dtype": "int8"}
    want = _epilogue(acc, rq, attrs)[:n]
    got = _epilogue(acc, table, attrs | {"rq32": "mulhi"})[:n]
    assert np.array_equal(want, got)
    assert len(np.unique(want)) > 100  # the data reach many output values, not only the clamps


def test_a_channel_shifting_less_than_33_keeps_the_int64_table():
    rng = np.random.default_rng(8)
    rq = _rq(rng, 4, 8, shift_lo=31)
    rq[1, 2], rq[2, 2] = 32, 1 << 31
    assert mulhi_table(rq, 4) is None
