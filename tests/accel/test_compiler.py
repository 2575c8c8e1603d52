"""The accelerator compiler end to end: accel_conv2d / accel_dense scheduled for the
accel family, lowered, turned into a Program, and run on the numpy model of the ISA
(packager/accel/reference.py, which also checks tokens and races), bit for bit against
the TE evaluator on the same compute."""

import numpy as np
import pytest

from packager import te
from packager.accel import isa
from packager.accel.codegen import codegen_accel
from packager.accel.reference import AccelRunError, estimate_cycles, run
from packager.errors import PackagerError
from packager.ops.accel import fits
from packager.ops.knobs import Config
from packager.ops.registry import ScheduleContext, get_op
from packager.target import AccelTarget
from packager.te.evaluator import evaluate

TARGET = AccelTarget()


def _tensors(op: str, c: int, o: int, h: int, w: int, k: int):
    if op == "accel_dense":
        return (
            te.placeholder((1, c // 16, 16), "int8", "x"),
            te.placeholder((o // 16, c // 16, 16, 16), "int8", "w"),
            te.placeholder((o // 16, 6, 16), "int32", "p"),
        )
    return (
        te.placeholder((1, c // 16, h, w, 16), "int8", "x"),
        te.placeholder((o // 16, c // 16, k, k, 16, 16), "int8", "w"),
        te.placeholder((o // 16, 6, 16), "int32", "p"),
    )


def _values(shapes, o: int, rng):
    xv, wv = (rng.integers(-128, 128, s).astype(np.int8) for s in shapes[:2])
    pv = np.zeros(shapes[2], np.int32)
    ob = o // 16
    pv[:, 0] = rng.integers(-20000, 20000, (ob, 16))  # bias
    pv[:, 1] = rng.integers(1 << 30, (1 << 31) - 1, (ob, 16))  # mult
    shift = rng.integers(33, 44, (ob, 16))
    pv[:, 2] = 1 << (shift - 33)  # round
    pv[:, 3] = shift - 32
    pv[:, 4] = rng.integers(-128, -60, (ob, 16))  # lo
    pv[:, 5] = rng.integers(40, 128, (ob, 16))  # hi
    return xv, wv, pv


def compile_op(op, c, o, h=1, w=1, k=1, cfg=None, target=TARGET, **attrs):
    """(program, knob values, placeholders, output) of one scheduled op."""
    ins = _tensors(op, c, o, h, w, k)
    (y,) = get_op(op).compute(list(ins), attrs)
    ctx = ScheduleContext([y], y, attrs, Config(dict(cfg or {})), target)
    sch = get_op(op).schedules["accel"](ctx)
    prim = te.lower(sch, [*ins, y], f"{op}_k")
    return codegen_accel(prim, target, 4), ctx.cfg, ins, y


def check(op, c, o, h=1, w=1, k=1, cfg=None, seed=0, **attrs):
    """Compile, run on the model, compare with the evaluator; returns the program."""
    prog, knobs, ins, y = compile_op(op, c, o, h, w, k, cfg, **attrs)
    vals = _values([t.shape for t in ins], o, np.random.default_rng(seed))
    fresh = _tensors(op, c, o, h, w, k)
    (want_t,) = get_op(op).compute(list(fresh), attrs)
    (want,) = evaluate([want_t], dict(zip(fresh, vals, strict=True)))
    out = np.zeros(y.shape, np.int8)
    run(prog, TARGET.config(), [*vals, out])
    assert np.array_equal(out, want), f"{op} c={c} o={o} {h}x{w} k={k} {attrs} {knobs.as_dict()}"
    return prog, knobs


def conv(c, o, hw, k, s, pad, **kw):
    attrs = dict(strides=[s, s], pads=[pad] * 4, x_zp=kw.pop("x_zp", 7), y_zp=kw.pop("y_zp", -3))
    return check("accel_conv2d", c, o, hw, hw, k, **kw, **attrs)


@pytest.mark.parametrize(
    "c,o,hw,k,s,pad",
    [
        (16, 16, 8, 1, 1, 0),  # 1x1
        (32, 48, 7, 1, 1, 0),  # odd size, oc not a power of two
        (16, 32, 8, 3, 1, 1),  # 3x3, padding
        (32, 16, 7, 3, 2, 1),  # stride 2 on an odd size
        (48, 32, 14, 3, 2, 1),
        (16, 16, 9, 3, 1, 0),  # no padding, 3x3
        (16, 16, 8, 5, 1, 2),  # 5x5, two rows of padding
        (256, 64, 7, 3, 1, 1),  # many input channels
        (64, 256, 7, 1, 1, 0),  # many output channels
    ],
)
@pytest.mark.parametrize("vthreads", [1, 2])
def test_conv_is_bit_exact(c, o, hw, k, s, pad, vthreads):
    out = (hw + 2 * pad - k) // s + 1
    if vthreads == 2 and (o // 16) % 2 and out % 2:  # no output axis splits in two
        with pytest.raises(PackagerError, match="fits the buffers with 2 virtual threads"):
            conv(c, o, hw, k, s, pad, cfg={"vthreads": vthreads})
        return
    conv(c, o, hw, k, s, pad, cfg={"vthreads": vthreads})


def test_padding_reads_the_zero_point():
    """Padding is LOAD's pad fields with pad_value = x_zp (a nonzero zero point)."""
    prog, _ = conv(16, 16, 6, 3, 1, 1, x_zp=-77, cfg={"vthreads": 1})
    inp = [i for i in prog.insns if i["opcode"] == isa.LOAD and i["buffer"] == isa.INP]
    assert inp and all(i["pad_value"] == -77 for i in inp)
    assert {(i["y_pad_0"], i["x_pad_0"], i["x_pad_1"]) for i in inp} == {(1, 1, 1)}


# ResNet-18's convolutions (channels, output channels, input size, kernel, stride, pad)
RESNET18 = [
    (64, 64, 56, 3, 1, 1),
    (64, 128, 56, 3, 2, 1),
    (64, 128, 56, 1, 2, 0),
    (128, 128, 28, 3, 1, 1),
    (128, 256, 28, 3, 2, 1),
    (128, 256, 28, 1, 2, 0),
    (256, 256, 14, 3, 1, 1),
    (256, 512, 14, 3, 2, 1),
    (256, 512, 14, 1, 2, 0),
    (512, 512, 7, 3, 1, 1),
]


@pytest.mark.parametrize(
    "shape", RESNET18, ids=lambda s: "c{}o{}_{}x{}k{}s{}".format(*s[:3], s[2], *s[3:5])
)
def test_resnet18_convs_are_bit_exact_and_two_threads_are_faster(shape):
    """Both thread counts exact; on the cycle model two virtual threads take fewer cycles
    (these convs are compute-bound there, so the gain is the hidden load time)."""
    cycles = {}
    for vt in (1, 2):
        prog, knobs = conv(*shape, cfg={"vthreads": vt})
        assert knobs.as_dict()["vthreads"] == vt
        cycles[vt] = estimate_cycles(prog, TARGET.config())["cycles"]
    assert cycles[2] < cycles[1]


@pytest.mark.parametrize("k,o", [(16, 16), (256, 128), (512, 1008), (4096, 64)])
@pytest.mark.parametrize("vthreads", [1, 2])
def test_dense_is_bit_exact(k, o, vthreads):
    try:
        check("accel_dense", k, o, cfg={"vthreads": vthreads}, x_zp=0, y_zp=4)
    except PackagerError as e:
        assert vthreads == 2 and "virtual threads" in str(e)


def test_virtual_threads_use_disjoint_buffers_and_overlap():
    """With two threads, the second thread's loads go to other tiles and are not made
    to wait for the first thread's GEMMs."""
    prog, _ = conv(
        64,
        64,
        14,
        3,
        1,
        1,
        cfg={"vthreads": 2, "tile_oc": 1, "tile_oh": 7, "tile_ow": 14, "tile_ic": 2},
    )
    inp = [i["sram_base"] for i in prog.insns if i["opcode"] == isa.LOAD and i["buffer"] == isa.INP]
    # per thread 2 channel blocks of 9 x 16 padded tiles: thread 0 at 0, thread 1 at 288,
    # the same tiles again for every output tile
    assert sorted(set(inp)) == [0, 144, 288, 432]
    one, _ = conv(
        64,
        64,
        14,
        3,
        1,
        1,
        cfg={"vthreads": 1, "tile_oc": 1, "tile_oh": 7, "tile_ow": 14, "tile_ic": 2},
    )
    c1 = estimate_cycles(one, TARGET.config())
    c2 = estimate_cycles(prog, TARGET.config())
    # one thread: the compute module waits for every load; two: it runs nearly all
    # the time (busy: load, compute, store)
    assert c1["cycles"] - c1["busy"][1] > c1["busy"][0] // 3
    assert c2["cycles"] - c2["busy"][1] < (c1["cycles"] - c1["busy"][1]) // 4


def test_micro_ops_are_folded_and_deduplicated():
    prog, _ = conv(
        32, 32, 8, 3, 1, 1, cfg={"vthreads": 1, "tile_oh": 8, "tile_ow": 8, "tile_oc": 2}
    )
    gemms = [i for i in prog.insns if i["opcode"] == isa.GEMM and not i["reset"]]
    assert all(i["iter_out"] * i["iter_in"] > 1 for i in gemms)
    spans = [
        range(i["uop_bgn"], i["uop_end"]) for i in prog.insns if i["opcode"] in (isa.GEMM, isa.ALU)
    ]
    assert len(spans) >= 20 and len(prog.uops) == len({k for r in spans for k in r})
    # one zeroing GEMM for the 2 x 8 x 8 tiles (8 micro-ops, 2 x 8 iterations); the
    # immediate ADD runs the same 8 micro-ops
    resets = [i for i in prog.insns if i["opcode"] == isa.GEMM and i["reset"]]
    alus = [i for i in prog.insns if i["opcode"] == isa.ALU]
    assert [(i["uop_bgn"], i["uop_end"], i["iter_out"], i["iter_in"]) for i in resets] == [
        (0, 8, 2, 8)
    ]
    assert [(i["uop_bgn"], i["uop_end"]) for i in alus if i["use_imm"]] == [(0, 8)]
    # ADD, MULHI, ADD, SHR, ADD imm, MAX, MIN once per output-channel block: the
    # tile's other loops are folded
    assert [i["alu_op"] for i in alus][:7] == [
        isa.ADD,
        isa.MULHI,
        isa.ADD,
        isa.SHR,
        isa.ADD,
        isa.MAX,
        isa.MIN,
    ]
    assert [i["use_imm"] for i in alus][:7] == [0, 0, 0, 0, 1, 0, 0]
    assert alus[4]["imm"] == -3


def test_tiling_knobs_that_do_not_fit_are_refused():
    with pytest.raises(
        PackagerError,
        match=r"tile_oc=8 .* does not fit: wgt buffer: the tiling needs 1152 tiles, "
        "the accelerator has 1024",
    ):
        conv(256, 128, 7, 3, 1, 1, cfg={"tile_oc": 8, "tile_ic": 16, "vthreads": 1})
    with pytest.raises(PackagerError, match="inp buffer"):
        conv(16, 16, 56, 3, 1, 1, cfg={"tile_oh": 56, "tile_ow": 56, "vthreads": 2})


def test_knob_space_and_defaults_fit():
    _, knobs = conv(64, 64, 14, 3, 1, 1)
    assert set(knobs.space) == {"vthreads", "tile_oc", "tile_oh", "tile_ow", "tile_ic"}
    assert knobs.space["vthreads"].candidates == (1, 2)
    assert knobs.space["tile_oh"].candidates == (1, 2, 7, 14)
    assert knobs.as_dict()["vthreads"] == 2


def test_fits_names_why_a_node_stays_on_the_cpu():
    x, w, p = (1, 4, 14, 14, 16), (4, 4, 3, 3, 16, 16), (4, 6, 16)
    ok = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1]}
    assert fits("accel_conv2d", ok, [x, w, p], TARGET) == ""
    assert "dilation" in fits("accel_conv2d", ok | {"dilations": [2, 2]}, [x, w, p], TARGET)
    assert "batch 2" in fits("accel_conv2d", ok, [(2, *x[1:]), w, p], TARGET)
    assert "LOAD pads at most 15" in fits(
        "accel_conv2d", ok | {"pads": [16] * 4}, [x, w, p], TARGET
    )
    tiny = AccelTarget(wgt_buffer_bytes=1024)  # 4 weight tiles: a 3x3 kernel needs 9
    assert "wgt buffer" in fits("accel_conv2d", ok, [x, w, p], tiny)
    assert fits("accel_dense", {}, [(1, 32, 16), (8, 32, 16, 16), (8, 6, 16)], TARGET) == ""


def test_a_program_without_tokens_races():
    prog, _ = conv(32, 32, 8, 3, 1, 1, cfg={"vthreads": 2})
    for i in prog.insns:
        for f in ("pop_prev", "pop_next", "push_prev", "push_next"):
            i[f] = 0
    vals = _values(
        [(1, 2, 8, 8, 16), (2, 2, 3, 3, 16, 16), (2, 6, 16)], 32, np.random.default_rng(0)
    )
    with pytest.raises(AccelRunError, match="race: insn .* no token between them"):
        run(prog, TARGET.config(), [*vals, np.zeros((1, 2, 8, 8, 16), np.int8)])


def test_a_quantized_resnets_accelerator_programs_are_bit_exact():
    """Every program the accel-sim build of a small quantized ResNet gets, run on the
    model with its node's real packed weights and parameters and random activations,
    gives the bytes of the node's compute."""
    from packager.boards import load_board
    from packager.lowering import node_computes
    from packager.package import compile_model
    from tests.accel.test_place_accel import quantized_resnet

    compiled = compile_model(quantized_resnet("uint8"), load_board("accel-sim"))
    graph, rng, seen = compiled.graph, np.random.default_rng(3), 0
    kernels = {k.func: k for k in compiled.kernels}
    for node, func in zip(graph.nodes, compiled.funcs, strict=True):
        k = kernels.get(func)
        if k is None or k.device != "accel":
            continue
        vals = [graph.values[v] for v in node.inputs]
        feeds = [
            v.data if v.is_const else rng.integers(-128, 128, v.shape).astype(np.int8) for v in vals
        ]
        args, outs, _ = node_computes(node, graph)
        (want,) = evaluate(outs, dict(zip(args, feeds, strict=True)))
        got = np.zeros(want.shape, np.int8)
        run(k.program, compiled.accel.config(), [np.ascontiguousarray(f) for f in feeds] + [got])
        assert np.array_equal(got, want), node.source
        seen += 1
    assert seen == 7


def test_programs_that_overflow_the_micro_op_buffer_are_refused():
    small = AccelTarget(uop_buffer_bytes=64)  # 16 micro-ops
    with pytest.raises(
        PackagerError, match=r"accel_conv2d_k: \d+ micro-ops, the accelerator holds 16"
    ):
        compile_op("accel_conv2d", 32, 32, 8, 8, 3, {"vthreads": 1}, target=small,
                   strides=[1, 1], pads=[1] * 4, x_zp=0, y_zp=0)  # fmt: skip


def test_weights_of_several_output_blocks_for_one_input_block_load_as_rows():
    """tile_ic 1 of 2 with 8 output blocks: the weight tiles lie 2 apart in DRAM, so one
    LOAD of 8 rows of 1 tile, row stride 2."""
    prog, _ = conv(32, 128, 8, 1, 1, 0, cfg={"vthreads": 1, "tile_ic": 1, "tile_oc": 8})
    wgt = [i for i in prog.insns if i["opcode"] == isa.LOAD and i["buffer"] == isa.WGT]
    assert {(i["y_size"], i["x_size"], i["x_stride"]) for i in wgt} == {(8, 1, 2)}


@pytest.mark.parametrize("vthreads", [1, 2])
def test_asymmetric_padding_with_stride(vthreads):
    """pads (top 0, left 1, bottom 1, right 2), stride 2: each LOAD's pads are that
    tile's own border."""
    attrs = dict(strides=[2, 2], pads=[0, 1, 1, 2], x_zp=-5, y_zp=1)
    prog, _ = check("accel_conv2d", 32, 32, 8, 8, 3, cfg={"vthreads": vthreads}, **attrs)
    inp = [i for i in prog.insns if i["opcode"] == isa.LOAD and i["buffer"] == isa.INP]
    assert {i["y_pad_0"] for i in inp} == {0} and {i["x_pad_0"] for i in inp} == {1}
    assert {i["x_pad_1"] for i in inp} == {2}
