"""The dependency-token pass on hand-made instruction lists, and the numpy model's
token checks."""

import numpy as np
import pytest

from packager.accel import isa
from packager.accel.program import AccelConfig, Program
from packager.accel.reference import AccelRunError, run
from packager.accel.tokens import footprint, insert_tokens

DEPTHS = {isa.UOP: 8192, isa.INP: 2048, isa.WGT: 1024, isa.ACC: 2048}
FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


def load(buf, base, n=4):
    return {
        "opcode": isa.LOAD,
        "buffer": buf,
        "sram_base": base,
        "y_size": 1,
        "x_size": n,
        "x_stride": n,
    }


def gemm(acc, inp, wgt, reset=0):
    return {
        "opcode": isa.GEMM,
        "reset": reset,
        "uop_bgn": 0,
        "uop_end": 1,
        "iter_out": 1,
        "iter_in": 4,
        "dst_factor_in": 1,
        "src_factor_in": 1,
        "wgt_factor_in": 0,
        "_uop": (acc, inp, wgt),
    }


def store(base, n=4):
    return {
        "opcode": isa.STORE,
        "buffer": isa.ACC,
        "sram_base": base,
        "y_size": 1,
        "x_size": n,
        "x_stride": n,
    }


def tokens(insns):
    """Flags set by the pass, as {index: set of flags}; each GEMM gets its own micro-op."""
    uops = []
    for i in insns:
        if "_uop" in i:
            i["uop_bgn"], i["uop_end"] = len(uops), len(uops) + 1
            uops.append(i.pop("_uop"))
    full = [isa.decode(isa.encode(i)) for i in insns]
    insert_tokens(full, uops, DEPTHS)
    return {k: {f for f in FLAGS if i[f]} for k, i in enumerate(full) if any(i[f] for f in FLAGS)}


def test_load_compute_store_chain():
    got = tokens(
        [load(isa.INP, 0), load(isa.WGT, 0), gemm(0, 0, 0), store(0), {"opcode": isa.FINISH}]
    )
    # the GEMM waits for the weights (the later load), the store for the GEMM, the
    # FINISH for the store
    assert got == {
        1: {"push_next"},
        2: {"pop_prev", "push_next"},
        3: {"pop_prev", "push_prev"},
        4: {"pop_next"},
    }


def test_reused_buffer_waits_for_the_compute_that_read_it():
    """Write after read: the second load into the same tiles waits for the GEMM."""
    got = tokens(
        [load(isa.INP, 0), gemm(0, 0, 0), load(isa.INP, 0), gemm(4, 0, 0), {"opcode": isa.FINISH}]
    )
    assert got == {
        0: {"push_next"},
        1: {"pop_prev", "push_prev"},
        2: {"pop_next", "push_next"},
        3: {"pop_prev"},
    }


def test_disjoint_halves_do_not_wait():
    """Two threads' loads into disjoint tiles: the second load waits for nobody, and
    each GEMM for its own load only."""
    got = tokens(
        [load(isa.INP, 0), load(isa.INP, 8), gemm(0, 0, 0), gemm(4, 8, 0), {"opcode": isa.FINISH}]
    )
    assert got == {0: {"push_next"}, 1: {"push_next"}, 2: {"pop_prev"}, 3: {"pop_prev"}}


def test_accumulators_wait_for_the_store_that_reads_them():
    got = tokens([gemm(0, 0, 0, reset=1), store(0), gemm(0, 0, 0, reset=1), {"opcode": isa.FINISH}])
    assert got == {0: {"push_next"}, 1: {"pop_prev", "push_prev"}, 2: {"pop_next"}}


def test_one_token_covers_later_instructions_of_the_same_module():
    got = tokens([load(isa.INP, 0), gemm(0, 0, 0), gemm(4, 1, 0), {"opcode": isa.FINISH}])
    assert got == {0: {"push_next"}, 1: {"pop_prev"}}


def test_footprint_of_a_padded_load_and_a_folded_gemm():
    ld = isa.decode(isa.encode(load(isa.INP, 10, 3) | {"y_size": 2, "y_pad_0": 1, "x_pad_1": 1}))
    assert footprint(ld, []) == ([], [(isa.INP, 10, 10 + 3 * 4 - 1)])
    g = isa.decode(
        isa.encode(
            {
                "opcode": isa.GEMM,
                "uop_bgn": 0,
                "uop_end": 2,
                "iter_out": 3,
                "iter_in": 1,
                "dst_factor_out": 5,
                "src_factor_out": 1,
                "wgt_factor_out": 2,
            }
        )
    )
    reads, writes = footprint(g, [(0, 0, 0), (1, 7, 3)])
    assert reads == [(isa.INP, 0, 9), (isa.WGT, 0, 7), (isa.ACC, 0, 11)] and writes == [
        (isa.ACC, 0, 11)
    ]


CONFIG = AccelConfig()


def _program(insns):
    return Program("p", 0, insns=[isa.decode(isa.encode(i)) for i in insns])


def test_model_refuses_a_pop_without_an_earlier_push():
    prog = _program([{"opcode": isa.GEMM, "pop_prev": 1, "reset": 1}, {"opcode": isa.FINISH}])
    with pytest.raises(
        AccelRunError, match="pop_prev pops the load->compute queue with no earlier push"
    ):
        run(prog, CONFIG, [])


def test_model_refuses_unpopped_tokens_and_a_missing_finish():
    prog = _program([{"opcode": isa.GEMM, "push_next": 1, "reset": 1}, {"opcode": isa.FINISH}])
    with pytest.raises(AccelRunError, match=r"tokens pushed but never popped: \{\(1, 2\): 1\}"):
        run(prog, CONFIG, [])
    with pytest.raises(AccelRunError, match="does not end with FINISH"):
        run(_program([{"opcode": isa.GEMM, "reset": 1}]), CONFIG, [])


def test_model_refuses_a_flag_naming_a_missing_neighbour():
    prog = _program([load(isa.INP, 0) | {"pop_prev": 1}, {"opcode": isa.FINISH}])
    prog.relocs = [(0, 0)]
    with pytest.raises(AccelRunError, match="pop_prev on the load module, which has none"):
        run(prog, CONFIG, [np.zeros(64, np.int8)])


def test_model_finds_a_race_the_tokens_do_not_cover():
    """The GEMM reads tiles the load module writes, with no token: a race."""
    prog = _program(
        [
            load(isa.INP, 0),
            {"opcode": isa.GEMM, "uop_bgn": 0, "uop_end": 1, "iter_out": 1, "iter_in": 1},
            {"opcode": isa.FINISH},
        ]
    )
    prog.uops = [(0, 0, 0)]
    prog.relocs = [(0, 0)]
    with pytest.raises(AccelRunError, match=r"race: insn 1 \(compute\) and insn 0 \(load\)"):
        run(prog, CONFIG, [np.zeros(64, np.int8)])
    insert_tokens(prog.insns, prog.uops, DEPTHS)
    run(prog, CONFIG, [np.zeros(64, np.int8)])
