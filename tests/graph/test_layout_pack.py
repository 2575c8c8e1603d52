"""Package-time packing of spanned grouped conv weights (layout_pack.py): groups that
split the channel blocks."""

from __future__ import annotations

import numpy as np
import pytest

from packager.graph.passes.layout_pack import (
    pack_spanned_conv_weight,
    span_end,
    span_start,
    spanned_blocks,
)


def spans(oc, groups, block):
    og = cg = oc // groups
    return [
        (span_start(ob, block, og, cg, block), span_end(ob, block, og, cg, block))
        for ob in range(oc // block)
    ]


def test_spans_of_shufflenet_groups():
    # 4 groups of 68 channels in blocks of 16: an output block inside a group reads the
    # 5 blocks its group touches, one straddling two groups the 9 of both
    got = spans(272, 4, 16)
    assert [e - s for s, e in got] == [5, 5, 5, 5, 9, 5, 5, 5, 9, 5, 5, 5, 9, 5, 5, 5, 5]
    assert got[4] == (0, 9) and got[5] == (4, 9) and got[16] == (12, 17)
    assert spanned_blocks(272, 4, 68, 16, 16) == 9


@pytest.mark.parametrize(
    "oc, cg, groups, k, in_block, out_block",
    [(272, 68, 4, 1, 16, 16), (136, 34, 4, 1, 8, 8), (48, 12, 4, 3, 8, 8), (24, 3, 4, 1, 4, 8)],
)
def test_packed_weight_is_the_grouped_conv_over_each_blocks_span(
    oc, cg, groups, k, in_block, out_block
):
    w = np.random.default_rng(0).standard_normal((oc, cg, k, k)).astype(np.float32)
    packed = pack_spanned_conv_weight(w, groups, in_block, out_block)
    span = spanned_blocks(oc, groups, cg, in_block, out_block)
    assert packed.shape == (oc // out_block, span, k, k, in_block, out_block)
    og = oc // groups
    for ob in range(oc // out_block):
        start = span_start(ob, out_block, og, cg, in_block)
        end = span_end(ob, out_block, og, cg, in_block)
        assert end - start <= span and end * in_block <= cg * groups
        # the dense (input channel, output channel) weights of this block's span
        dense = np.zeros((span * in_block, out_block, k, k), np.float32)
        for oi in range(out_block):
            o = ob * out_block + oi
            g = o // og
            lo = g * cg - start * in_block
            assert 0 <= lo and lo + cg <= (end - start) * in_block  # its group, inside
            dense[lo : lo + cg, oi] = w[o]
        want = dense.reshape(span, in_block, out_block, k, k).transpose(0, 3, 4, 1, 2)
        np.testing.assert_array_equal(packed[ob], want)
