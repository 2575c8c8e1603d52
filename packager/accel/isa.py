"""The accelerator's instruction set: 128-bit instructions and 32-bit micro-ops, encoded
field by field, least significant bit first (docs/accel.md, "Instructions"). The C
simulator and driver decode exactly these layouts (c_runtime/accel/pk_accel_isa.h); a
test encodes here and decodes there.

An instruction is a dict of its fields (``encode`` fills absent ones with 0) or the
16 little-endian bytes of its 128-bit word."""

from __future__ import annotations

# opcodes
LOAD, STORE, GEMM, ALU, FINISH = range(5)
OPCODES = {"LOAD": LOAD, "STORE": STORE, "GEMM": GEMM, "ALU": ALU, "FINISH": FINISH}

# on-chip buffers (LOAD's and STORE's ``buffer`` field)
UOP, WGT, INP, ACC = range(4)
BUFFERS = {"uop": UOP, "wgt": WGT, "inp": INP, "acc": ACC}

# ALU operations (``alu_op``)
MIN, MAX, ADD, SHR, MUL, MULHI = range(6)
ALU_OPS = {"MIN": MIN, "MAX": MAX, "ADD": ADD, "SHR": SHR, "MUL": MUL, "MULHI": MULHI}

# (name, bits, signed) in order from bit 0; every kind starts with opcode and the four
# dependency flags.
HEAD = (
    ("opcode", 3, False),
    ("pop_prev", 1, False),
    ("pop_next", 1, False),
    ("push_prev", 1, False),
    ("push_next", 1, False),
)
MEMORY = HEAD + (
    ("buffer", 3, False),
    ("sram_base", 13, False),
    ("dram_base", 32, False),
    ("y_size", 16, False),
    ("x_size", 16, False),
    ("x_stride", 16, False),
    ("y_pad_0", 4, False),
    ("y_pad_1", 4, False),
    ("x_pad_0", 4, False),
    ("x_pad_1", 4, False),
    ("pad_value", 8, True),
)
_LOOP = HEAD + (
    ("reset", 1, False),
    ("uop_bgn", 13, False),
    ("uop_end", 14, False),
    ("iter_out", 14, False),
    ("iter_in", 14, False),
    ("dst_factor_out", 11, False),
    ("dst_factor_in", 11, False),
    ("src_factor_out", 11, False),
    ("src_factor_in", 11, False),
)
GEMM_FIELDS = _LOOP + (("wgt_factor_out", 10, False), ("wgt_factor_in", 10, False))
ALU_FIELDS = _LOOP + (("alu_op", 3, False), ("use_imm", 1, False), ("imm", 16, True))
LAYOUTS = {LOAD: MEMORY, STORE: MEMORY, GEMM: GEMM_FIELDS, ALU: ALU_FIELDS, FINISH: HEAD}

# micro-op: indices into the accumulator, input and weight buffers (in tiles); an ALU
# micro-op's ``inp`` field is its source accumulator index.
UOP_FIELDS = (("acc", 11, False), ("inp", 11, False), ("wgt", 10, False))

INSN_BYTES = 16
UOP_BYTES = 4


class EncodeError(ValueError):
    pass


def _pack(fields, values: dict, total: int) -> int:
    unknown = set(values) - {f[0] for f in fields}
    if unknown:
        raise EncodeError(f"unknown fields {sorted(unknown)}")
    word, pos = 0, 0
    for name, bits, signed in fields:
        v = int(values.get(name, 0))
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        if not lo <= v <= hi:
            raise EncodeError(f"field {name}={v} does not fit {bits} bits")
        word |= (v & ((1 << bits) - 1)) << pos
        pos += bits
    assert pos <= total
    return word


def _unpack(fields, word: int) -> dict:
    out, pos = {}, 0
    for name, bits, signed in fields:
        v = (word >> pos) & ((1 << bits) - 1)
        if signed and v >> (bits - 1):
            v -= 1 << bits
        out[name] = v
        pos += bits
    return out


def encode(insn: dict) -> bytes:
    """16 bytes of one instruction (fields as in LAYOUTS for its opcode)."""
    op = int(insn.get("opcode", -1))
    if op not in LAYOUTS:
        raise EncodeError(f"unknown opcode {op}")
    return _pack(LAYOUTS[op], insn, 128).to_bytes(INSN_BYTES, "little")


def decode(raw: bytes) -> dict:
    word = int.from_bytes(raw[:INSN_BYTES], "little")
    op = word & 7
    if op not in LAYOUTS:
        raise EncodeError(f"unknown opcode {op}")
    return _unpack(LAYOUTS[op], word)


def encode_uop(acc: int, inp: int, wgt: int = 0) -> bytes:
    return _pack(UOP_FIELDS, {"acc": acc, "inp": inp, "wgt": wgt}, 32).to_bytes(4, "little")


def decode_uop(raw: bytes) -> dict:
    return _unpack(UOP_FIELDS, int.from_bytes(raw[:UOP_BYTES], "little"))
