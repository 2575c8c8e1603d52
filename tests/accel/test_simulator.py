"""The C simulator through its Python binding: programs built with isa.py and Program run
and are compared to numpy; the C decoder reads back every field Python encodes; the
cycle model, tokens, races and deadlocks behave as docs/accel.md says."""

import numpy as np
import pytest

from packager.accel import isa
from packager.accel.program import UOPS, AccelConfig, Program
from packager.accel.simulator import Simulator, SimulatorError, c_decode

CFG = AccelConfig()
T = 16  # block_in = block_out, batch 1


def test_c_decodes_every_field_python_encodes():
    for op, fields in isa.LAYOUTS.items():
        values = {"opcode": op}
        for k, (name, bits, signed) in enumerate(fields[1:]):
            hi = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
            # distinct per field and using the top bit where the field is wide enough
            values[name] = -((k % hi) + 1) if signed and k % 2 else hi - (k % max(hi, 1))
            if bits == 1:
                values[name] = 1
        raw = isa.encode(values)
        expect = [(name, values[name]) for name, _, _ in fields]
        assert c_decode(raw) == expect, isa.OPCODES
        assert [v for _, v in c_decode(raw)] == [isa.decode(raw)[n] for n, _, _ in fields]


def test_c_refuses_bits_past_the_last_field():
    raw = bytearray(isa.encode({"opcode": isa.FINISH}))
    raw[15] |= 0x80
    assert c_decode(bytes(raw)) == []


def load(buf, sram, dram, y, x, stride=None, **kw):
    return {
        "opcode": isa.LOAD,
        "buffer": buf,
        "sram_base": sram,
        "dram_base": dram,
        "y_size": y,
        "x_size": x,
        "x_stride": x if stride is None else stride,
        **kw,
    }


def store(sram, dram, y, x, stride=None, **kw):
    return load(isa.ACC, sram, dram, y, x, stride, **kw) | {"opcode": isa.STORE}


class Builder:
    """A program with its relocations: ``dma(insn, region)`` adds one."""

    def __init__(self, n_args):
        self.p = Program("k", n_args)

    def add(self, insn, region=None):
        if region is not None:
            self.p.relocs.append((len(self.p.insns), region))
        self.p.insns.append(insn)
        return self

    def finish(self, **flags):
        self.p.insns.append({"opcode": isa.FINISH, **flags})
        return self.p


def gemm_ref(inp, wgt, uops, insn, acc):
    for i0 in range(insn["iter_out"]):
        for i1 in range(insn["iter_in"]):
            for a, x, w in uops[insn["uop_bgn"] : insn["uop_end"]]:
                a += i0 * insn["dst_factor_out"] + i1 * insn["dst_factor_in"]
                x += i0 * insn["src_factor_out"] + i1 * insn["src_factor_in"]
                w += i0 * insn["wgt_factor_out"] + i1 * insn["wgt_factor_in"]
                if insn.get("reset"):
                    acc[a] = 0
                else:
                    acc[a] += wgt[w].astype(np.int32) @ inp[x].astype(np.int32)


def narrow(acc):
    return (acc.astype(np.int64) & 0xFF).astype(np.uint8).view(np.int8)


def test_gemm_with_reset_and_both_loop_levels_matches_numpy():
    rng = np.random.default_rng(1)
    inp = rng.integers(-128, 128, (13, T), dtype=np.int8)
    wgt = rng.integers(-128, 128, (8, T, T), dtype=np.int8)
    out = np.zeros((8, T), np.int8)
    uops = [(0, 0, 0), (1, 1, 1), (0, 2, 2)]
    loops = {
        "iter_out": 2,
        "iter_in": 3,
        "dst_factor_out": 4,
        "dst_factor_in": 1,
        "src_factor_out": 6,
        "src_factor_in": 2,
        "wgt_factor_out": 3,
        "wgt_factor_in": 1,
    }
    reset = {"opcode": isa.GEMM, "reset": 1, "uop_bgn": 0, "uop_end": 2, **loops}
    gemm = reset | {"reset": 0, "uop_end": 3, "pop_prev": 1, "push_next": 1}
    b = Builder(3)
    b.p.uops = uops
    b.add(load(isa.UOP, 0, 0, 1, 3), UOPS)
    b.add(load(isa.INP, 0, 0, 1, 13), 0).add(load(isa.WGT, 0, 0, 1, 8, push_next=1), 1)
    b.add(reset).add(gemm)
    b.add(store(0, 0, 1, 8, pop_prev=1, push_prev=1), 2)
    r = Simulator(CFG, check=True).run(b.finish(pop_next=1), [inp, wgt, out])
    acc = np.full((8, T), 7, np.int32)  # every entry the loops reach is reset first
    gemm_ref(inp, wgt, uops, reset, acc)
    gemm_ref(inp, wgt, uops, gemm, acc)
    np.testing.assert_array_equal(out, narrow(acc))
    assert r.gemm_cycles == 2 * 6 + 3 * 6
    assert r.macs == 3 * 6 * T * T
    assert r.insns == {"LOAD": 3, "STORE": 1, "GEMM": 2, "ALU": 0, "FINISH": 1}
    assert r.load_bytes == {"uop": 12, "wgt": 8 * 256, "inp": 13 * 16, "acc": 0}
    assert r.store_bytes == 8 * 16


def dump_acc(b, sram, n, region):
    """STOREs of the four bytes of n acc tiles (int32) to region, byte k at k * n tiles,
    shifting by 8 between them; tokens order each STORE after the ALU before it."""
    shift = {
        "opcode": isa.ALU,
        "alu_op": isa.SHR,
        "use_imm": 1,
        "imm": 8,
        "uop_bgn": 0,
        "uop_end": 1,
        "iter_out": n,
        "iter_in": 1,
        "dst_factor_out": 1,
    }
    for k in range(4):
        b.add(store(sram, k * n * T, 1, n, pop_prev=1, push_prev=1), region)
        if k < 3:
            b.add(shift | {"pop_next": 1, "push_next": 1})


def undump(raw, n):
    return raw.view(np.uint8).reshape(4, n, T).astype(np.uint32)


def int32_from(raw, n):
    b = undump(raw, n)
    # byte k of a >> 8k (arithmetic) is byte k of a
    return (b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24).view(np.int32)


def wrap(v):
    return (v & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


ALU_REF = {
    isa.MIN: np.minimum,
    isa.MAX: np.maximum,
    isa.ADD: lambda a, b: wrap(a.astype(np.int64) + b),
    isa.MUL: lambda a, b: wrap(a.astype(np.int64) * b),
    isa.MULHI: lambda a, b: ((a.astype(np.int64) * b) >> 32).astype(np.int32),
    isa.SHR: lambda a, b: np.where(
        b >= 0,
        a.astype(np.int64) >> np.clip(b, 0, 31),
        wrap(a.astype(np.int64) << np.clip(-b.astype(np.int64), 0, 31)),
    ).astype(np.int32),
}

EXTREMES = np.array(
    [
        -(2**31),
        2**31 - 1,
        -1,
        0,
        1,
        12345,
        -98765,
        2**30,
        -(2**30),
        255,
        -256,
        77,
        2**31 - 2,
        -(2**31) + 1,
        3,
        -3,
    ],
    np.int32,
)


@pytest.mark.parametrize("op", sorted(ALU_REF))
def test_alu_ops_on_tiles_and_immediates_match_numpy(op):
    a = np.stack([EXTREMES, EXTREMES[::-1]])
    b = np.stack([np.roll(EXTREMES, 3), np.array([-40, -31, -1, 0, 1, 5, 31, 32, 40] + [7] * 7)])
    imm = -7 if op != isa.SHR else 3
    acc = np.concatenate([a, b]).astype(np.int32)  # tiles 0, 1 then sources 2, 3
    raw = np.zeros(4 * 4 * T, np.int8)
    base = {
        "opcode": isa.ALU,
        "alu_op": op,
        "uop_bgn": 0,
        "uop_end": 1,
        "iter_out": 2,
        "iter_in": 1,
        "dst_factor_out": 1,
        "src_factor_out": 1,
    }
    b_ = Builder(2)
    b_.p.uops = [(0, 2, 0)]
    b_.add(load(isa.UOP, 0, 0, 1, 1), UOPS).add(load(isa.ACC, 0, 0, 1, 4), 0)
    b_.add(base | {"push_next": 1})
    dump_acc(b_, 0, 4, 1)
    Simulator(CFG, check=True).run(b_.finish(pop_next=1), [acc.copy(), raw])
    got = int32_from(raw, 4)
    np.testing.assert_array_equal(got[:2], ALU_REF[op](a, b).astype(np.int32))
    np.testing.assert_array_equal(got[2:], b)
    b2 = Builder(2)
    b2.p.uops = [(0, 0, 0)]
    b2.add(load(isa.UOP, 0, 0, 1, 1), UOPS).add(load(isa.ACC, 0, 0, 1, 4), 0)
    b2.add(base | {"use_imm": 1, "imm": imm, "iter_out": 4, "push_next": 1})
    dump_acc(b2, 0, 4, 1)
    Simulator(CFG).run(b2.finish(pop_next=1), [acc.copy(), raw])
    np.testing.assert_array_equal(
        int32_from(raw, 4), ALU_REF[op](acc, np.full_like(acc, imm)).astype(np.int32)
    )


def test_load_pads_inp_with_pad_value_and_others_with_zero_and_follows_strides():
    src = np.arange(1, 1 + 3 * 5 * T, dtype=np.int64).astype(np.int8).reshape(3, 5, T)
    out = np.zeros((4 * 6, T), np.int8)
    # rows 0..1, tiles 1..3 of src (rows 5 tiles apart): 1 pad row above and below, 2 pad
    # tiles left and 1 right; an identity GEMM then copies inp into acc tile by tile
    pads = {"y_pad_0": 1, "y_pad_1": 1, "x_pad_0": 2, "x_pad_1": 1}
    each = {"uop_bgn": 0, "uop_end": 24, "iter_out": 1, "iter_in": 1}
    b = Builder(3)
    b.p.uops = [(t, t, 0) for t in range(24)]
    b.add(load(isa.UOP, 0, 0, 1, 24), UOPS)
    b.add(load(isa.WGT, 0, 0, 1, 1), 2)
    b.add(load(isa.INP, 0, T, 2, 3, stride=5, pad_value=-5, push_next=1, **pads), 0)
    b.add({"opcode": isa.GEMM, "reset": 1, "pop_prev": 1, **each})
    b.add({"opcode": isa.GEMM, "push_next": 1, **each})
    b.add(store(0, 0, 1, 24, pop_prev=1, push_prev=1), 1)
    r = Simulator(CFG, check=True).run(b.finish(pop_next=1), [src, out, np.eye(T, dtype=np.int8)])
    want = np.full((4, 6, T), -5, np.int8)
    want[1:3, 2:5] = src[0:2, 1:4]
    np.testing.assert_array_equal(out.reshape(4, 6, T), want)
    assert r.load_bytes["inp"] == 6 * T

    # acc pads are zeros whatever pad_value says
    acc_src = np.full((1, T), 9, np.int32)
    out = np.zeros((3, T), np.int8)
    b = Builder(2)
    b.add(load(isa.ACC, 0, 0, 1, 1, x_pad_0=1, x_pad_1=1, pad_value=3, push_next=1), 0)
    b.add(store(0, 0, 1, 3, pop_prev=1, push_prev=1), 1)
    Simulator(CFG, check=True).run(b.finish(pop_next=1), [acc_src, out])
    np.testing.assert_array_equal(out[:, 0], [0, 9, 0])


def test_store_narrows_to_low_byte_and_follows_stride():
    acc = np.array([[300, -129, 127, -1] * 4, [256, 255, -256, 128] * 4], np.int32)
    out = np.full((3, T), 1, np.int8)
    b = Builder(2)
    b.add(load(isa.ACC, 0, 0, 1, 2, push_next=1), 0)
    b.add(store(0, 0, 2, 1, stride=2, pop_prev=1, push_prev=1), 1)
    Simulator(CFG, check=True).run(b.finish(pop_next=1), [acc, out])
    np.testing.assert_array_equal(out[0], narrow(acc[0]))
    np.testing.assert_array_equal(out[1], np.ones(T, np.int8))  # skipped by the stride
    np.testing.assert_array_equal(out[2], narrow(acc[1]))


def pipeline(with_token=True):
    """LOAD inp -> identity GEMM -> STORE, the GEMM's wait on the LOAD optional."""
    cfg = AccelConfig(dma_latency_cycles=10, dma_bytes_per_cycle=4.0)
    b = Builder(3)
    b.p.uops = [(0, 0, 0)]
    b.add(load(isa.WGT, 0, 0, 1, 1), 1)  # [0, 74)
    b.add(load(isa.INP, 0, 0, 1, 2, push_next=1), 0)  # [74, 92)
    b.add(load(isa.UOP, 0, 0, 1, 1), UOPS)  # [0, 11)
    b.add(
        {"opcode": isa.GEMM, "reset": 1, "uop_bgn": 0, "uop_end": 1, "iter_out": 1, "iter_in": 1}
    )  # fmt: skip  [11, 16)
    gemm = {
        "opcode": isa.GEMM,
        "uop_bgn": 0,
        "uop_end": 1,
        "iter_out": 1,
        "iter_in": 1,
        "push_next": 1,
        "pop_prev": int(with_token),
    }
    b.add(gemm)  # [92, 97) with the token
    b.add(store(0, 0, 1, 1, pop_prev=1, push_prev=1), 2)  # [97, 111): 10 + 16 / 4
    return cfg, b.finish(pop_next=1)  # [111, 112)


def pipeline_args():
    inp = np.arange(2 * T, dtype=np.int8).reshape(2, T)
    return [inp, np.eye(T, dtype=np.int8)[None], np.zeros((1, T), np.int8)]


def test_cycles_of_a_load_gemm_store_chain_are_the_sum_of_the_model():
    cfg, p = pipeline()
    args = pipeline_args()
    r = Simulator(cfg, check=True).run(p, args)
    np.testing.assert_array_equal(args[2][0], args[0][0])
    assert r.cycles == 112
    assert r.busy == {"load": 74 + 18, "compute": 11 + 5 + 5 + 1, "store": 14}
    # compute: the GEMM waits 92 - 16, FINISH 111 - 97; store waits 97 from 0
    assert r.stall == {"load": 0, "compute": 76 + 14, "store": 97}
    assert r.time_us == pytest.approx(1.12)
    assert r.utilisation == pytest.approx(2 / 112)


def test_a_missing_token_computes_stale_data_and_check_mode_reports_the_race():
    cfg, p = pipeline(with_token=False)
    p.insns[1]["push_next"] = 0  # nothing pops it now
    args = pipeline_args()
    r = Simulator(cfg).run(p, args)
    assert not args[2].any()  # the GEMM ran at cycle 16, before the inp arrived at 92
    assert r.cycles == 92  # FINISH retired at 36; the run lasts until every module is idle
    with pytest.raises(
        SimulatorError,
        match=r"RACE: k: race on wgt\[0\]: instruction 4 \(GEMM, "
        r"compute module\) reads it while instruction 0 \(LOAD, load module\)",
    ):
        Simulator(cfg, check=True).run(p, pipeline_args())


def test_two_independent_pipelines_overlap():
    cfg = AccelConfig(dma_latency_cycles=10, dma_bytes_per_cycle=4.0)
    alu = {
        "opcode": isa.ALU,
        "alu_op": isa.ADD,
        "use_imm": 1,
        "imm": 1,
        "uop_bgn": 0,
        "uop_end": 1,
        "iter_out": 100,
        "iter_in": 1,
        "dst_factor_out": 1,
    }
    b = Builder(2)
    b.p.uops = [(0, 0, 0)]
    b.add(load(isa.INP, 0, 0, 1, 8), 0)  # load: [0, 10 + 32)
    b.add(load(isa.UOP, 0, 0, 1, 1), UOPS)  # compute: [0, 11)
    b.add(alu)  # [11, 115)
    r = Simulator(cfg).run(b.finish(), [np.zeros((8, T), np.int8), np.zeros(1, np.int8)])
    assert r.cycles == 116 < 42 + 11 + 104 + 1
    assert r.busy["load"] == 42 and r.alu_cycles == 100


def test_pop_without_push_is_a_deadlock():
    b = Builder(1)
    b.add(load(isa.INP, 0, 0, 1, 1), 0)
    b.add({"opcode": isa.GEMM, "pop_prev": 1, "uop_end": 0})
    with pytest.raises(
        SimulatorError,
        match=r"DEADLOCK: k: deadlock: instruction 1 \(GEMM\) on "
        "the compute module waits for a token from the load module",
    ):
        Simulator(CFG).run(b.finish(), [np.zeros(T, np.int8)])


@pytest.mark.parametrize(
    "insn, message",
    [
        (
            load(isa.INP, 0, 0, 1, 1, pop_prev=1),
            r"\(LOAD\): field pop_prev=1: the load module has no previous",
        ),
        (store(0, 0, 1, 1, push_next=1), r"instruction 0 \(STORE\): field push_next=1: the store"),
        (store(0, 0, 1, 1, x_pad_1=2), r"\(STORE\): field x_pad_1=2: STORE has no padding"),
        (
            load(isa.INP, 0, 0, 1, 1) | {"opcode": isa.STORE},
            r"buffer=2: STORE writes back only acc",
        ),
        (load(5, 0, 0, 1, 1), r"field buffer=5: not a buffer"),
        (
            load(isa.ACC, 2042, 0, 2, 4),
            r"sram_base=2042: 2042 \+ 2 rows x 4 tiles runs past the acc buffer's depth",
        ),
        ({"opcode": isa.GEMM, "uop_end": 9000}, r"uop_end=9000: past the uop buffer's depth 8192"),
        ({"opcode": isa.ALU, "uop_bgn": 3, "uop_end": 2}, r"field uop_bgn=3: after uop_end=2"),
        ({"opcode": isa.ALU, "alu_op": 7}, r"field alu_op=7: not an ALU operation"),
        (
            load(isa.INP, 0, 4096, 1, 1),
            r"dram_base=0x10001000: its 16 bytes of DMA lie outside every device",
        ),
    ],
)
def test_bad_fields_name_instruction_and_field(insn, message):
    b = Builder(1)
    b.add(insn, 0 if insn["opcode"] in (isa.LOAD, isa.STORE) else None)
    with pytest.raises(SimulatorError, match=message) as e:
        Simulator(CFG).run(b.finish(), [np.zeros(T, np.int8)])
    assert e.value.code == "INSN"


def test_micro_op_index_past_the_buffer_over_the_loops_is_refused():
    b = Builder(0)
    b.p.uops = [(2040, 0, 0)]
    b.add(load(isa.UOP, 0, 0, 1, 1), UOPS)
    b.add(
        {
            "opcode": isa.GEMM,
            "reset": 1,
            "uop_end": 1,
            "iter_out": 3,
            "iter_in": 1,
            "dst_factor_out": 4,
        }
    )
    with pytest.raises(
        SimulatorError,
        match=r"instruction 1 \(GEMM\): micro-op 0's acc index "
        "reaches 2048",
    ):
        Simulator(CFG).run(b.finish(), [])


def test_store_not_ordered_before_finish_is_a_race_in_check_mode():
    b = Builder(1)
    b.add(store(0, 0, 1, 1), 0)
    p = b.finish()
    Simulator(CFG).run(p, [np.zeros(T, np.int8)])
    with pytest.raises(
        SimulatorError,
        match=r"instruction 0 \(STORE, store module\) is not "
        r"ordered before FINISH \(instruction 1\)",
    ):
        Simulator(CFG, check=True).run(p, [np.zeros(T, np.int8)])


def test_a_load_of_padding_only_needs_no_dram_address():
    acc = np.full((2, T), 9, np.int32)
    out = np.ones((2, T), np.int8)
    b = Builder(2)
    b.add(load(isa.ACC, 0, 0, 1, 2), 0)
    b.add(load(isa.ACC, 0, 0, 0, 0, y_pad_0=1, x_pad_0=2, push_next=1))  # no relocation
    b.add(store(0, 0, 1, 2, pop_prev=1, push_prev=1), 1)
    r = Simulator(CFG, check=True).run(b.finish(pop_next=1), [acc, out])
    assert not out.any()
    assert r.load_bytes["acc"] == 2 * T * 4


def test_a_token_never_popped_is_a_race_in_check_mode():
    b = Builder(1)
    b.add(load(isa.INP, 0, 0, 1, 1, push_next=1), 0)
    p = b.finish()
    Simulator(CFG).run(p, [np.zeros(T, np.int8)])
    with pytest.raises(SimulatorError, match="RACE: k: race: 1 token.s. from the load module to "
                       "the compute module are never popped"):  # fmt: skip
        Simulator(CFG, check=True).run(p, [np.zeros(T, np.int8)])
