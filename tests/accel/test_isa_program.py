"""The instruction encoding and the program file: fields at their documented bits, a
round trip through the file, and malformed files refused."""

import pytest

from packager.accel import isa
from packager.accel.program import AccelConfig, Program, read_programs, write_programs


def test_fields_fill_128_bits_and_sit_where_documented():
    for op, fields in isa.LAYOUTS.items():
        assert sum(bits for _, bits, _ in fields) <= 128, op
    raw = isa.encode({"opcode": isa.LOAD, "push_next": 1, "buffer": isa.INP, "dram_base": 1})
    word = int.from_bytes(raw, "little")
    # opcode bits 0-2, push_next bit 6, buffer bits 7-9, sram_base 10-22, dram_base from 23
    assert word == isa.LOAD | 1 << 6 | isa.INP << 7 | 1 << 23


def test_signed_fields_round_trip_and_range_is_checked():
    insn = {"opcode": isa.ALU, "alu_op": isa.MAX, "use_imm": 1, "imm": -128, "uop_end": 1}
    assert isa.decode(isa.encode(insn))["imm"] == -128
    with pytest.raises(isa.EncodeError, match="imm=40000 does not fit 16 bits"):
        isa.encode(insn | {"imm": 40000})
    with pytest.raises(isa.EncodeError, match="unknown fields"):
        isa.encode({"opcode": isa.FINISH, "imm": 1})
    assert isa.decode_uop(isa.encode_uop(2047, 5, 1023)) == {"acc": 2047, "inp": 5, "wgt": 1023}


def test_program_file_round_trip_and_truncation():
    p = Program(
        "k_3_accel_conv2d",
        3,
        [
            {"opcode": isa.LOAD, "buffer": isa.UOP, "y_size": 1, "x_size": 2, "x_stride": 2},
            {"opcode": isa.FINISH},
        ],
        [(1, 2, 3), (4, 5, 6)],
        [(0, -1)],
    )
    config = AccelConfig(clock_mhz=142.0)
    raw = write_programs([p, Program("k_4", 1, [{"opcode": isa.FINISH}])], config)
    got_config, (q, r) = read_programs(raw)
    assert got_config == config
    assert (q.name, q.n_args, q.uops, q.relocs) == (p.name, 3, p.uops, p.relocs)
    assert [isa.encode(i) for i in q.insns] == [isa.encode(i) for i in p.insns]
    assert r.name == "k_4" and len(r.insns) == 1
    with pytest.raises(ValueError, match="runs past the end"):
        read_programs(raw[:-16])
