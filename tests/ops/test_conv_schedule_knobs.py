"""The conv2d_nchwc template's knobs: with no config it gives exactly the loop nest it gave
before the reduction, row-tile and loop-order knobs existed (a frozen copy of that
template below, with the defaults changed since: the padded copy in vectors, the
channel lanes unrolled by two, a conv without epilogue summing in a local tile), and
every new knob changes the nest and keeps the answer."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from packager import te
from packager.codegen.c import codegen_c
from packager.lowering import schedule_for
from packager.ops._cpu import find_tagged
from packager.ops.conv_schedule import _default_pad, default_tile, target_tile
from packager.ops.knobs import Config
from packager.ops.registry import ScheduleContext, get_op
from packager.target import CpuTarget
from packager.te.schedule import create_schedule, default_schedule

from .test_conv_schedule import CASES, conv_group, run_group

# --- the template as it was (commit 9899546), kept to pin the defaults ------------------


def _old_schedule(outs, anchor, knobs):
    conv = find_tagged(anchor, "conv")
    out = outs[0]
    if conv is None or len(outs) != 1 or tuple(out.shape) != tuple(conv.shape):
        return default_schedule(outs)
    sch = create_schedule(outs)
    pad = find_tagged(conv, "pad") if conv.op.input_tensors else None
    for st in sch.stages:
        if st.is_output or st.op.reduce_axis or (pad is not None and st.tensor is pad):
            continue
        st.compute_inline()
    cfg = Config(dict(knobs))
    _, out_blocks, _, out_w, block = conv.shape
    oc_def, ow_def = default_tile(out_blocks, out_w)
    oc_tile = cfg.define_split("tile_oc", out_blocks, oc_def, most=4)
    ow_tile = cfg.define_split("tile_ow", out_w, ow_def, most=16)
    vec = cfg.define("vectorize_oc", (True, False), block in (2, 4, 8, 16))
    par = cfg.define("parallel", ("n_oc_oh", "n_oc", "none"), "n_oc_oh")
    pad_at = cfg.define("pad", ("root", "inline"), _default_pad(conv))
    if pad is not None:
        st = sch[pad]
        if pad_at == "inline":
            st.compute_inline()
        else:
            n, cb, h = st.op.axis[:3]
            st.parallel(st.fuse(n, cb, h))
            if len(st.op.axis) == 5:  # since: the copy in vectors
                st.vectorize(st.op.axis[-1])

    def annotate(st, n, obo, oh):
        if par == "n_oc_oh":
            st.parallel(st.fuse(n, obo, oh))
        elif par == "n_oc":
            st.parallel(st.fuse(n, obo))

    if conv is out:
        conv = sch.cache_write(conv, "local")  # since: accumulates in a register tile
    st = sch[out]
    n, ob, oh, ow, oi = st.op.axis
    obo, obi = st.split(ob, oc_tile)
    owo, owi = st.split(ow, ow_tile)
    st.reorder(n, obo, oh, owo, obi, owi, oi)
    annotate(st, n, obo, oh)
    st.unroll(obi)
    st.unroll(owi)
    if vec:
        st.vectorize(oi)
    cst = sch[conv]
    cst.compute_at(st, owo)
    n, ob, oh, ow, oi = cst.op.axis
    cst.reorder(n, oh, *cst.op.reduce_axis, ob, ow, oi)
    cst.unroll(ob)
    cst.unroll(ow)
    if vec:
        cst.vectorize(oi)
    return sch


def _c(sch, args, out) -> str:
    return codegen_c(te.lower(sch, [*args, out], "k"))


def _group(case):
    if case == "no_epilogue":
        data = te.placeholder((1, 2, 6, 9, 8), "float32", "in0")
        weight = te.placeholder((2, 2, 3, 3, 8, 8), "float32", "in1")
        attrs = {"groups": 1, "strides": [1, 1], "pads": [1] * 4}
        conv = get_op("conv2d_nchwc").compute([data, weight], attrs)[0]
        return [data, weight], conv, ("conv2d_nchwc", attrs, conv)
    return conv_group(**CASES[case])


OLD_KNOBS = [
    {},
    {"tile_oc": 1, "tile_ow": 1},
    {"parallel": "none", "pad": "inline", "vectorize_oc": False},
    {"parallel": "n_oc", "pad": "root"},
]


# depthwise convs have a template of their own (ops/dwconv_schedule.py)
DENSE = [c for c in sorted(CASES) if CASES[c].get("groups", 1) == 1]


@pytest.mark.parametrize("case", [*DENSE, "no_epilogue"])
def test_defaults_give_the_old_nest(case):
    args, out, anchor = _group(case)
    # A conv reading plain NCHW now defaults to the window loops outside its channels;
    # a blocked one to two channel lanes per step; at 16 registers a tile whose
    # broadcasts do not fit walks its blocks inside its columns.
    since = {"reduce_order": ("rcb", "kh", "kw")} if args[0].ndim == 4 else {"unroll_rci": 1}
    since["tile_order"] = "oc_ow"
    since["prefetch_weights"] = False  # the next tile's weights (prefetches_next_weights)
    conv = find_tagged(anchor[2], "conv")
    if not any(a.var.name.startswith("rk") and a.extent > 1 for a in conv.op.reduce_axis):
        # a 1x1 conv's tile now keeps its weights in the L1 (pointwise_tile)
        _, blocks, _, width, _ = conv.shape
        since["tile_oc"], since["tile_ow"] = target_tile(CpuTarget(), blocks, width)
    tile = {}
    if args[0].ndim == 4:
        # at 16 registers a plain-input conv defaults to one block (target_tile): the old
        # nest is compared at that tile
        _, blocks, _, width, _ = conv.shape
        tile["tile_oc"], tile["tile_ow"] = target_tile(CpuTarget(), blocks, width, plain=True)
    for knobs in OLD_KNOBS:
        # each schedule on a group of its own: cache_write rewrites the stage it caches
        with te.fresh_names():
            args, out, anchor = _group(case)
        new = _c(schedule_for([out], anchor, knobs={**since, **knobs}), args, out)
        with te.fresh_names():
            args, out, anchor = _group(case)
        assert new == _c(_old_schedule([out], anchor[2], {**tile, **knobs}), args, out), knobs


def test_a_plain_input_conv_walks_its_channels_innermost():
    args, out, anchor = _group("first_7x7_s2")
    assert _space(args, out, anchor)["reduce_order"].default == ("kh", "kw", "rcb")
    args, out, anchor = _group("3x3_s1")
    assert _space(args, out, anchor)["reduce_order"].default == ("rcb", "kh", "kw", "rci")


def test_the_channel_lanes_unroll_by_the_registers_the_isa_has():
    # two lanes a step with 32 vector registers; one with 16, where a second step's
    # weights and broadcasts do not fit beside the accumulators
    args, out, anchor = _group("3x3_s1")
    assert _space(args, out, anchor, 512)["unroll_rci"].default == 2
    assert _space(args, out, anchor, 256)["unroll_rci"].default == 1
    # a 1x1 conv's tile of one block at 256 bits needs no register more: all 8 lanes
    args, out, anchor = conv_group(c=64, oc=64, hw=(14, 14), k=1, stride=1, pad=0)
    space = _space(args, out, anchor, 256)
    assert (space["tile_oc"].default, space["tile_ow"].default) == (1, 14)
    assert space["unroll_rci"].default == 8
    # with two rows the body would pass MAX_UNROLLED (1 x 2 x 14 x 8): one lane
    args, out, anchor = conv_group(c=64, oc=64, hw=(14, 14), k=1, stride=1, pad=0)
    assert _space(args, out, anchor, 256, {"tile_oh": 2})["unroll_rci"].default == 1


def _space(args, out, anchor, vector_bits=256, knobs=None):
    cfg = Config(knobs or {})
    op, attrs, tensor = anchor
    target = CpuTarget(vector_bits=vector_bits, cores=2)
    get_op(op).schedules["cpu"](ScheduleContext([out], tensor, attrs, cfg, target))
    return cfg.space


NEW_KNOBS = [
    {"tile_oh": 2, "tile_ow": 7},
    {"outer_order": "oh_oc", "parallel": "n_oc"},
    {"reduce_order": ("kh", "kw", "rcb", "rci"), "rcb_split": 2},
    {"reduce_order": ("kh", "rcb", "kw", "rci"), "unroll_rci": 2, "unroll_kw": True},
    {"reduce_order": ("rcb", "rci", "kh", "kw"), "rcb_split": 2, "unroll_rci": 2},
    {"rcb_split": 2, "unroll_rci": 4, "tile_oh": 2, "outer_order": "oh_oc", "tile_oc": 1},
]


def test_resnet_shapes_have_large_spaces():
    for c, hw in ((64, 56), (128, 28), (256, 14)):
        args, out, anchor = conv_group(c=c, oc=c, hw=(hw, hw), k=3, stride=1, pad=1)
        space = _space(args, out, anchor)
        assert {"tile_oh", "outer_order", "reduce_order", "rcb_split", "unroll_rci"} <= set(space)
        assert np.prod([len(k.candidates) for k in space.values()]) > 1000


@pytest.mark.parametrize("case", ["3x3_s1", "3x3_s2", "residual", "no_epilogue"])
def test_new_knobs_change_the_nest_and_keep_the_answer(case):
    def fresh():  # a group per schedule: cache_write rewrites the stage it caches
        with te.fresh_names():
            return _group(case)

    space = _space(*fresh())
    args, out, anchor = fresh()
    default = _c(schedule_for([out], anchor, knobs={}), args, out)
    sources = {default}
    want = None
    for knobs in NEW_KNOBS:
        fits = {k: v for k, v in knobs.items() if k in space and v in space[k].candidates}
        args, out, anchor = fresh()
        src = _c(schedule_for([out], anchor, knobs=fits), args, out)
        if fits == knobs:  # (an odd height has no row tile of 2)
            assert src not in sources, knobs  # a different loop nest each time
        sources.add(src)
        knobs = fits
        got, want = run_group(*fresh(), knobs)
        # the reduction order may change: the same sum up to rounding
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_every_reduction_setting_is_a_distinct_nest():
    """The block split and the orders are arranged so no two settings coincide."""
    args, out, anchor = conv_group(**CASES["3x3_s1"])
    space = _space(args, out, anchor)
    names = ("reduce_order", "rcb_split", "unroll_rci")
    seen = set()
    for values in itertools.product(*(space[n].candidates for n in names)):
        knobs = dict(zip(names, values, strict=True))
        seen.add(_c(schedule_for([out], anchor, knobs=knobs), args, out))
    assert len(seen) == np.prod([len(space[n].candidates) for n in names])


def test_a_too_long_unrolled_body_is_refused():
    args, out, anchor = conv_group(**CASES["3x3_s1"])  # default tile: 2 blocks x 7 columns
    schedule_for([out], anchor, knobs={"unroll_rci": 8})  # 112 in a row: fine
    with pytest.raises(ValueError, match="unrolled multiply-adds"):
        schedule_for([out], anchor, knobs={"unroll_rci": 4, "unroll_kw": True})
