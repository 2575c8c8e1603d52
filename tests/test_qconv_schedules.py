"""The integer conv's CPU schedules beyond the dense tensorized tile: depthwise convs
read a blocked padded input one vector per tap, and a 3-channel stem packs its channels
in quads so it runs on the dot-product intrinsic. Each equals the simple schedule."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from packager.boards import load_board
from packager.codegen import codegen_c
from packager.frontend.importer import import_onnx
from packager.graph.passes.quantize import (
    add_attrs,
    mulhi_table,
    narrow_bounds,
    narrow_epilogue,
    pack_conv_int8,
    pack_dw_int8,
    pack_dw_pairs,
    pack_grouped_int8,
    pack_rows_int8,
    quantize,
    shared_bounds,
)
from packager.graph.pipeline import PassContext
from packager.ops._cpu import find_tagged
from packager.ops.int8_intrin import byte_pairs_fit
from packager.ops.quantized import PLANE_PAD_BYTES
from packager.target import CpuTarget
from tests.ops.harness import haswell_asm, innermost_fma_loop
from tests.test_tensorize import (
    HOST_FLAGS,
    _cpu_flags,
    _host_asm,
    cross_run,
    qconv_case,
    qconv_func,
    run_host,
)


def depthwise_case(act: str, lanes: int, c=20, hw=9, stride=1, seed=0):
    """A padded depthwise qconv2d whose channels are not a multiple of L."""
    rng = np.random.default_rng(seed)
    lo, hi = (0, 256) if act == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, (1, c, hw, hw)).astype(act)
    nb = -(-c // lanes)
    w = rng.integers(-128, 128, (nb, 1, 3, 3, lanes, 1)).astype(np.int8)
    w.reshape(nb * lanes, -1)[c:] = 0  # padded channels: zero weights, as packed
    w = np.ascontiguousarray(w.reshape(nb, lanes, 3, 3).transpose(0, 2, 3, 1))
    w = w.reshape(nb, 1, 3, 3, lanes, 1)
    rq = np.zeros((7, nb * lanes), np.int64)
    rq[0] = rng.integers(2**30, 2**31, rq.shape[1])
    rq[1], rq[2] = 34, 1 << 33
    rq[3], rq[4] = 0, 2**62  # a fused relu
    rq[6] = rng.integers(-5000, 5000, rq.shape[1])
    attrs = dict(
        strides=[stride] * 2, pads=[1] * 4, groups=c, oc=c, x_zp=5, y_zp=-3, out_dtype="int8"
    )
    return [x, w, rq], attrs


@pytest.mark.parametrize("act,lanes,stride", [("uint8", 16, 1), ("int8", 8, 2), ("uint8", 4, 2)])
def test_depthwise_reads_a_blocked_input_and_equals_the_simple_schedule(act, lanes, stride):
    inputs, attrs = depthwise_case(act, lanes, stride=stride)
    target = CpuTarget(vector_bits=32 * lanes, features=())
    func, _ = qconv_func(inputs, attrs, target)
    src = codegen_c(func)
    # the blocked padded copy is a buffer of its own; the tap reads it at the lane index,
    # or (x86, 8 or 16 lanes) passes the block's first lane to one multiply-add call
    mac = re.search(r"pk_mac_\w+\(&qconv_acc\[[^\]]*\], &qconv_pad\[", src)
    assert (lanes >= 8) == (mac is not None), "the multiply-add intrinsic"
    vector = "/* qconv_acc_i4: 4 lanes */" in src and "&qconv_pad[" in src  # widened a block
    scalar = re.search(r"qconv_pad\[[^\]]*qconv_acc_i4\)?\]", src)
    assert mac or vector or scalar, "no blocked input read"
    want = run_host(inputs, attrs, None)
    np.testing.assert_array_equal(run_host(inputs, attrs, target), want)
    assert (want == -3).any() and (want != -3).any()  # the relu bound and real values


@pytest.mark.parametrize(
    "act,lanes,need,reg", [("uint8", 16, "avx512bw", "zmm"), ("int8", 8, "avx2", "ymm")]
)
def test_depthwise_multiply_add_is_bit_exact_on_host(act, lanes, need, reg):
    """The depthwise tap as one vpmaddwd per column: its operands widened to 32 bits
    with one int16 half zero, so the pair sum is the exact product."""
    if need not in _cpu_flags():
        pytest.skip(f"this machine has no {need}")
    inputs, attrs = depthwise_case(act, lanes, stride=1)
    x = inputs[0]  # the extremes, where a wrong widening would show
    x.reshape(-1)[:8] = (0, 255, 255, 0, 1, 255, 0, 2) if act == "uint8" else (-128, 127) * 4
    inputs[1].reshape(-1)[:8] = (-128, 127) * 4
    target = CpuTarget(vector_bits=32 * lanes)
    func, _ = qconv_func(inputs, attrs, target)
    src = codegen_c(func)
    assert re.search(r"pk_mac_\w+\(&qconv_acc", src), "the depthwise tap calls the intrinsic"
    np.testing.assert_array_equal(run_host(inputs, attrs, target), run_host(inputs, attrs, None))
    assert re.search(rf"vpmaddwd\s+%{reg}", _host_asm(src)), f"no {reg} vpmaddwd in the kernel"


def dw_quads_case(act: str, lanes: int, c=20, hw=11, k=3, stride=1, seed=1):
    """The same depthwise conv twice: weights one tap a step (as ``depthwise_case``)
    and in quads of taps (quantize.pack_dw_int8, attr ``dw_taps``)."""
    rng = np.random.default_rng(seed)
    lo, hi = (0, 256) if act == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, (1, c, hw, hw)).astype(act)
    x.reshape(-1)[:8] = (0, hi - 1, hi - 1, lo, 1, hi - 1, lo, 2)  # extremes
    real = rng.integers(-128, 128, (c, 1, k, k)).astype(np.int8)
    real.reshape(-1)[:8] = (-128, 127) * 4
    nb = -(-c // lanes)
    taps = np.zeros((nb * lanes, k, k), np.int8)
    taps[:c] = real[:, 0]
    one = np.ascontiguousarray(taps.reshape(nb, lanes, k, k).transpose(0, 2, 3, 1))
    rq = np.zeros((7, nb * lanes), np.int64)
    rq[0] = rng.integers(2**30, 2**31, rq.shape[1])
    rq[1], rq[2] = 34, 1 << 33
    rq[3], rq[4] = 0, 2**62
    rq[6] = rng.integers(-5000, 5000, rq.shape[1])
    pads = k // 2
    attrs = dict(
        strides=[stride] * 2, pads=[pads] * 4, groups=c, oc=c, x_zp=5, y_zp=-3, out_dtype="int8"
    )
    plain = [x, one.reshape(nb, 1, k, k, lanes, 1), rq]
    quads = [x, pack_dw_int8(real, lanes), rq]
    return plain, quads, attrs


def test_pack_dw_int8_puts_each_rows_taps_in_quads():
    w = np.arange(3 * 5 * 5, dtype=np.int8).reshape(3, 1, 5, 5)
    p = pack_dw_int8(w, 4)
    assert p.shape == (1, 1, 5, 2, 4, 4)  # 3 channels -> 4 lanes, 5 taps -> 2 quads
    for c in range(3):
        for kh in range(5):
            for kw in range(8):
                want = w[c, 0, kh, kw] if kw < 5 else 0
                assert p[0, 0, kh, kw // 4, c, kw % 4] == want
    assert not p[0, :, :, :, 3].any()  # the padded channel


DW_QUADS = [  # act, lanes, stride, k, what the host must have to run it
    ("uint8", 16, 1, 3, "avx512_vnni"),
    ("uint8", 16, 2, 3, "avx512_vnni"),
    ("uint8", 16, 1, 5, "avx512_vnni"),
    ("uint8", 16, 2, 7, "avx512_vnni"),
    ("uint8", 8, 1, 3, None),  # no dot product at 8 lanes without avx_vnni: the C loop
]


@pytest.mark.parametrize("act,lanes,stride,k,need", DW_QUADS)
def test_depthwise_in_quads_of_taps_equals_one_tap_a_step(act, lanes, stride, k, need):
    """4 taps per vpdpbusd (the 4 pixels' channels transposed in registers): the same
    bytes as the one-tap-a-step conv, through the last quad's taps past the kernel
    (zero weights reading the extra padded columns)."""
    if need and need not in _cpu_flags():
        pytest.skip(f"this machine has no {need}")
    plain, quads, attrs = dw_quads_case(act, lanes, k=k, stride=stride)
    target = CpuTarget(vector_bits=32 * lanes, features=(need,) if need else ())
    qattrs = attrs | {"dw_taps": k}
    want = run_host(plain, attrs, None)
    assert (want == -3).any() and (want != -3).any()
    src = codegen_c(qconv_func(quads, qattrs, target)[0])
    assert re.search(r"pk_dwdot_\w+\(&qconv_acc\[[^\]]*\], &qconv_pad\[", src), "no quad call"
    np.testing.assert_array_equal(run_host(quads, qattrs, target), want)
    np.testing.assert_array_equal(run_host(quads, qattrs, None), want)
    if need:
        # vpermb transposes where the compiler has AVX512-VBMI, else vpermd + vpshufb
        for off, insns in ((None, ("vpermb",)), ("vbmi", ("vpermd", "vpshufb"))):
            flags = (*HOST_FLAGS, f"-mno-avx512{off}") if off else HOST_FLAGS
            if off is None and "avx512vbmi" not in _cpu_flags():
                continue
            asm = _host_asm(src, flags)
            for insn in ("vpdpbusd", *insns):
                assert re.search(rf"{insn}\s+.*%zmm", asm), f"no zmm {insn} ({flags})"
            np.testing.assert_array_equal(run_host(quads, qattrs, target, flags), want)
        # the same C without VNNI: the intrinsic's C loop, the same bytes
        flags = (*HOST_FLAGS, "-mno-avx512vnni")
        np.testing.assert_array_equal(run_host(quads, qattrs, target, flags), want)


VNNI = ("avx2", "avx512f", "avx512bw", "avx512_vnni")


def _as_pairs(w4: np.ndarray) -> np.ndarray:
    """Quad-packed weights (OC'/L, C'/4, KH, KW, L, 4) as int16 pairs (OC'/L, C'/2, KH,
    KW, L, 2): quantize.pack_conv_int8(w, L, 2) as int16."""
    nb, ncb, kh, kw, lanes, _ = w4.shape
    full = w4.transpose(0, 4, 1, 5, 2, 3).reshape(nb * lanes, ncb * 4, kh, kw)
    return pack_conv_int8(full, lanes, 2).astype(np.int16)


PAIRS = [  # act, lanes, stride, k, padded, the host's need, the vector register
    ("uint8", 8, 1, 3, True, "avx2", "ymm"),
    ("int8", 8, 2, 3, True, "avx2", "ymm"),
    ("uint8", 8, 1, 1, False, "avx2", "ymm"),
    ("uint8", 16, 1, 3, True, "avx512bw", "zmm"),
    ("int8", 16, 1, 1, False, "avx512bw", "zmm"),
]


@pytest.mark.parametrize("act,lanes,stride,k,padded,need,reg", PAIRS)
def test_int16_pairs_are_bit_exact_with_one_vpmaddwd_a_step(
    act, lanes, stride, k, padded, need, reg
):
    """x86 without a dot product for the activations: weights as int16 pairs, the
    activations widened in the padded copy (made without padding too), one 32-bit
    broadcast and one vpmaddwd per step; the quad conv's bytes, and the intrinsic's C
    loop's without the ISA."""
    if need not in _cpu_flags():
        pytest.skip(f"this machine has no {need}")
    inputs, attrs = qconv_case(act, lanes, k=k, stride=stride)
    attrs["pads"] = [k // 2 if padded else 0] * 4
    x, w, rq = inputs
    pairs = [_blocked(x, lanes, 0), _as_pairs(w), rq]
    battrs = attrs | {"c": x.shape[1]}
    target = CpuTarget(vector_bits=32 * lanes, features=("avx2", need))
    src = codegen_c(qconv_func(pairs, battrs, target)[0])
    assert re.search(r"pk_pair_s16x\d+_\w+\(&qconv_acc\[[^\]]*\], &qconv_pad\[", src)
    # the copy widens the activations, a block at a time
    assert re.search(r"__builtin_convertvector\(pk_t\d+, pk_i16x\d+\)", src)
    want = run_host(inputs, attrs, None)
    np.testing.assert_array_equal(run_host(pairs, battrs, target), want)
    asm = _host_asm(src)
    # ymm with taps: straight from memory (see int8_intrin._pair_x86)
    bcast = "vbroadcastss" if reg == "ymm" and k > 1 else "vpbroadcastd"
    assert re.search(rf"vpmaddwd\s+.*%{reg}", asm) and re.search(rf"{bcast}\s+.*%{reg}", asm)
    if reg == "ymm" and k > 1:  # and never from a register (GCC's predictive commoning)
        assert 'optimize("no-predictive-commoning")' in src
        assert not re.search(r"vbroadcastss\s+%xmm", asm)
    # 16 registers (ymm): the tap loops stay rolled (GCC would unroll and spill them)
    assert src.count("#pragma GCC unroll 1\n") == (2 if reg == "ymm" and k > 1 else 0)
    flags = (*HOST_FLAGS, f"-mno-{need}")
    np.testing.assert_array_equal(run_host(pairs, battrs, target, flags), want)


@pytest.mark.parametrize(
    "k,hw,tile", [(3, 8, (4, 2)), (1, 8, (2, 4)), (1, 7, (2, 7)), (1, 14, (4, 2)), (3, 7, (1, 7))]
)
def test_avx2_pair_tiles_of_kxk_convs_take_more_channel_blocks(k, hw, tile):
    """At 256 bits a pair tile holds 8 accumulators: a k x k conv's takes 4 blocks of
    output channels x 2 columns, a 1x1 conv's 2 x 4 (quantized.PAIR_BUDGET_256). A 1x1
    conv whose row has no such tile (7 columns) takes 2 x 7 (WIDE_PAIR_BUDGET_256), a
    3x3 conv there keeps 1 x 7 (its taps take registers too); a row of 14 keeps 4 x 2."""
    inputs, attrs = qconv_case("uint8", 8, c=8, oc=32, hw=hw, k=k)
    attrs["pads"] = [k // 2] * 4
    x, w, rq = inputs
    pairs = [_blocked(x, 8, 0), _as_pairs(w), rq]
    battrs = attrs | {"c": x.shape[1]}
    target = CpuTarget(vector_bits=256, features=("avx2", "fma"))
    src = codegen_c(qconv_func(pairs, battrs, target)[0])
    loops = re.findall(r"#pragma GCC unroll (\d+)\s+for \(int64_t qconv_acc_i([13]) ", src)
    want = [(i, n) for i, n in (("1", tile[0]), ("3", tile[1])) if n > 1]
    assert sorted({(i, int(n)) for n, i in loops}) == want
    if "avx2" in _cpu_flags():
        np.testing.assert_array_equal(
            run_host(pairs, battrs, target), run_host(inputs, attrs, None)
        )


@pytest.mark.parametrize("hw,want", [(7, True), (16, False)])
def test_an_integer_tile_prefetches_the_next_tiles_weights(hw, want):
    """A 1x1 conv on int16 pairs at 256 bits over 7x7 outputs (at most 14x14:
    weight_prefetch.prefetches_next_weights): before each intrinsic call the tile (two
    blocks x 7 columns on this row: quantized.WIDE_PAIR_BUDGET_256) fetches the next
    tile's weights, 2 blocks x 4 pair steps x 8 lanes x 2 int16s on, and computes what
    the simple schedule does; over 16x16 it fetches nothing ahead."""
    inputs, attrs = qconv_case("uint8", 8, c=8, oc=32, hw=hw, k=1)
    attrs["pads"] = [0] * 4
    x, w, rq = inputs
    pairs = [_blocked(x, 8, 0), _as_pairs(w), rq]
    battrs = attrs | {"c": x.shape[1]}
    target = CpuTarget(vector_bits=256, features=("avx2", "fma"))
    src = codegen_c(qconv_func(pairs, battrs, target)[0])
    lines = [x for x in src.splitlines() if "__builtin_prefetch(" in x]
    assert bool(lines) is want
    assert all(x.endswith(f"+ {2 * 4 * 8 * 2})) * 2u), 0, 2);") for x in lines), lines
    if "avx2" in _cpu_flags():
        np.testing.assert_array_equal(
            run_host(pairs, battrs, target), run_host(inputs, attrs, None)
        )


@pytest.mark.parametrize("hw,tile", [(28, (2, 7)), (4, (4, 4))])
def test_vnni_tiles_take_seven_columns_where_the_row_has_them(hw, tile):
    """At 512 bits a quad tile of 4 blocks x 4 columns becomes 2 x 7 on a row of 28
    (quantized.WIDE_COLS); a row of 4 keeps 4 x 4."""
    inputs, attrs = qconv_case("uint8", 16, c=16, oc=64, hw=hw, k=3)
    target = CpuTarget(vector_bits=512, features=VNNI)
    src = codegen_c(qconv_func(inputs, attrs, target)[0])
    loops = re.findall(r"#pragma GCC unroll (\d+)\s+for \(int64_t qconv_acc_i([13]) ", src)
    assert sorted({(i, int(n)) for n, i in loops}) == [("1", tile[0]), ("3", tile[1])]
    if "avx512_vnni" in _cpu_flags() and hw == 28:
        got = run_host(inputs, attrs, target)
        np.testing.assert_array_equal(got, run_host(inputs, attrs, None))


@pytest.mark.parametrize(
    "feats,bits,act,form",
    [
        (("avx2", "fma"), 256, "uint8", "pairs"),  # AVX2: no dot product
        (("avx2", "avx512f", "avx512bw"), 512, "uint8", "pairs"),  # Skylake-X: no VNNI
        (("avx2", "avx512f", "avx512bw", "avx512_vnni"), 512, "uint8", "quads"),
        (("avx2", "avx512f", "avx512bw", "avx512_vnni"), 512, "int8", "pairs"),  # u8 x s8
    ],
)
def test_quantize_packs_int16_pairs_where_x86_has_no_dot_product(feats, bits, act, form):
    b = replace(load_board("host"), features=feats, vector_bits=bits)
    graph = quantize(import_onnx("c.onnx", model=_qdq_conv(8, act=act)), PassContext(board=b))
    (conv,) = [n for n in graph.nodes if n.op == "qconv2d"]
    w = graph.values[conv.inputs[1]].data
    if form == "pairs":
        assert w.dtype == np.int16 and w.shape[1] == 4 and w.shape[-1] == 2
    else:
        assert w.dtype == np.int8 and w.shape[1] == 2 and w.shape[-1] == 4


@pytest.mark.parametrize(
    "pair,fits",
    [
        ((64, 64), True),  # 255 * 128 = 32640 <= 32767
        ((-64, -64), True),
        ((127, 1), True),
        ((127, -127), True),  # one sign each: 255 * 127 either way
        ((127, 2), False),  # 255 * 129 saturates int16
        ((-65, -64), False),
    ],
)
def test_byte_pairs_fit_bounds_each_pairs_sums_of_one_sign(pair, fits):
    w = np.zeros((2, 1, 3, 3, 8, 4), np.int8)
    w[1, 0, 2, 1, 5, 2:] = pair  # one pair (2, 3) of one quad
    assert byte_pairs_fit(w) is fits
    w[1, 0, 2, 1, 5] = [*pair, 0, 0]  # the quad's other pair
    assert byte_pairs_fit(w) is fits
    assert byte_pairs_fit(np.zeros((2, 4, 1, 1, 8, 2), np.int8)) is False  # not quads


@pytest.mark.parametrize("k,stride,hw", [(3, 1, 9), (1, 1, 9), (3, 2, 9), (3, 1, 7)])
def test_weights_whose_byte_pairs_fit_run_one_vpmaddubsw_a_quad_bit_exact(k, stride, hw):
    """uint8 activations on AVX2 without VNNI, weights whose byte pairs fit (7-bit):
    quads of bytes, no widened copy, vpmaddubsw + vpmaddwd per step; the simple
    schedule's bytes at the extremes (activations 255 against pairs of +-64), and the
    intrinsic's C loop's without the ISA."""
    inputs, attrs = qconv_case("uint8", 8, c=12, oc=20, hw=hw, k=k, stride=stride)
    attrs["pads"] = [k // 2] * 4
    x, w, rq = inputs
    rng = np.random.default_rng(1)
    w[...] = np.where(w != 0, rng.integers(-64, 65, w.shape), 0)
    w[0, 0] = np.where(rng.random(w[0, 0].shape) < 0.5, 64, -64)
    x[:, :, ::2] = 255
    assert byte_pairs_fit(w)
    attrs["byte_pairs"] = True
    target = CpuTarget(vector_bits=256, features=("avx2", "fma"))
    src = codegen_c(qconv_func(inputs, attrs, target)[0])
    assert re.search(r"pk_dot4_u8x8_avx2_byte_pairs\(&qconv_acc\[", src)
    assert re.search(r"uint8_t qconv_pad\[", src)  # the bytes as they are: no widened copy
    want = run_host(inputs, attrs, None)
    if "avx2" not in _cpu_flags():
        pytest.skip("this machine has no avx2")
    np.testing.assert_array_equal(run_host(inputs, attrs, target), want)
    asm = _host_asm(src)
    assert re.search(r"vpmaddubsw\s+.*%ymm", asm) and re.search(r"vpmaddwd\s+.*%ymm", asm)
    np.testing.assert_array_equal(run_host(inputs, attrs, target, (*HOST_FLAGS, "-mno-avx2")), want)


@pytest.mark.parametrize("stride,hw,tile", [(1, 14, [("3", 7)]), (2, 28, [("1", 4), ("3", 2)])])
def test_byte_quads_of_a_stride_1_conv_take_one_block_by_7_columns(stride, hw, tile):
    """A 3x3 conv on byte quads at stride 1 over a 14-wide row: 1 x 7 (its one block
    is no loop), its taps unrolled; at stride 2 (14 columns out) the pair tiles' rule
    stands: 4 x 2, the taps rolled."""
    inputs, attrs = qconv_case("uint8", 8, c=8, oc=32, hw=hw, k=3, stride=stride)
    inputs[1][...] = np.clip(inputs[1], -64, 64)
    attrs["byte_pairs"] = True
    target = CpuTarget(vector_bits=256, features=("avx2", "fma"))
    src = codegen_c(qconv_func(inputs, attrs, target)[0])
    loops = re.findall(r"#pragma GCC unroll (\d+)\s+for \(int64_t qconv_acc_i([13]) ", src)
    assert sorted({(i, int(n)) for n, i in loops}) == tile
    assert src.count("#pragma GCC unroll 1\n") == (0 if stride == 1 else 2)
    if "avx2" in _cpu_flags():
        np.testing.assert_array_equal(
            run_host(inputs, attrs, target), run_host(inputs, attrs, None)
        )


@pytest.mark.parametrize("hw,rolled", [(7, False), (9, True)])
def test_byte_quad_tiles_keep_their_taps_rolled_from_8_accumulators(hw, rolled):
    """A 1 x 7 tile (a 7-wide row) leaves GCC registers to unroll the taps; a 3 x 3 tile
    keeps them rolled, as the int16 pairs' tiles do."""
    inputs, attrs = qconv_case("uint8", 8, c=12, oc=20, hw=hw, k=3)
    inputs[1][...] = np.clip(inputs[1], -64, 64)
    attrs["byte_pairs"] = True
    target = CpuTarget(vector_bits=256, features=("avx2", "fma"))
    src = codegen_c(qconv_func(inputs, attrs, target)[0])
    assert "pk_dot4_u8x8_avx2_byte_pairs(&" in src
    assert src.count("#pragma GCC unroll 1\n") == (2 if rolled else 0)


def test_a_byte_quad_tile_keeps_its_accumulators_in_registers(tmp_path):
    """A 3x3 conv on byte quads over a 14-wide row (1 x 7, taps unrolled), compiled as
    the host profile compiles kernels for 16 vector registers: its tap loop reads the
    activations and weights and touches no stack. Without the asm pin after each add
    (int8_intrin._keep) GCC reassociated the unrolled taps' adds and kept partial sums
    on the stack (tv_resnet18's 56-wide 3x3 convs: 27 vector stores to it)."""
    inputs, attrs = qconv_case("uint8", 8, c=64, oc=8, hw=14, k=3)
    inputs[1][...] = np.clip(inputs[1], -64, 64)
    attrs["byte_pairs"] = True
    attrs["pads"] = [1] * 4
    target = CpuTarget(vector_bits=256, features=("avx2", "fma"))
    src = codegen_c(qconv_func(inputs, attrs, target)[0])
    assert src.count("#pragma GCC unroll 1\n") == 0  # taps unrolled
    loop = innermost_fma_loop(haswell_asm(src, tmp_path), "k_qconv", "vpmaddubsw")
    assert sum(t.startswith("vpmaddubsw") for t in loop) >= 7, loop
    assert not [t for t in loop if "rsp" in t], loop


@pytest.mark.parametrize(
    "wmax,act,form", [(64, "uint8", "quads"), (127, "uint8", "pairs"), (64, "int8", "pairs")]
)
def test_quantize_keeps_byte_quads_where_avx2_weights_fit_vpmaddubsw(wmax, act, form):
    b = replace(load_board("host"), features=("avx2", "fma"), vector_bits=256)
    model = _qdq_conv(8, act=act, wmax=wmax)
    graph = quantize(import_onnx("c.onnx", model=model), PassContext(board=b))
    (conv,) = [n for n in graph.nodes if n.op == "qconv2d"]
    w = graph.values[conv.inputs[1]].data
    if form == "quads":
        assert w.dtype == np.int8 and w.shape[-1] == 4 and conv.attrs["byte_pairs"] is True
    else:
        assert w.dtype == np.int16 and w.shape[-1] == 2 and "byte_pairs" not in conv.attrs


def test_avx_vnni_depthwise_compiles_to_ymm_dot_products():
    """The 8-lane body (AVX-VNNI, e.g. Alder Lake) assembles to ymm vpdpbusd; this
    machine may not run it, the C loop it guards is checked above."""
    plain, quads, attrs = dw_quads_case("uint8", 8)
    target = CpuTarget(vector_bits=256, features=("avx_vnni",))
    src = codegen_c(qconv_func(quads, attrs | {"dw_taps": 3}, target)[0])
    asm = _host_asm(src, ("-O2", "-fPIC", "-std=c99", "-mavx2", "-mavxvnni"))
    assert re.search(r"vpdpbusd\s+.*%ymm", asm) and re.search(r"vpermd\s+.*%ymm", asm)


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_in_quads_runs_on_sdot_under_qemu(stride, tmp_path):
    """Raspberry Pi 5 (dotprod): 4 taps per sdot after a tbl transpose; the bytes of
    the one-tap-a-step conv, run under qemu-aarch64."""
    plain, quads, attrs = dw_quads_case("int8", 4, c=10, stride=stride)
    asm, got = cross_run("rpi5", quads, attrs | {"dw_taps": 3}, tmp_path)
    assert re.search(r"\bsdot\s+v\d+\.4s", asm) and re.search(r"\btbl\s+v\d+\.16b", asm)
    np.testing.assert_array_equal(got, run_host(plain, attrs, None))


@pytest.mark.parametrize("stride,kw", [(1, 3), (2, 3), (1, 5), (2, 5)])
def test_pack_dw_pairs_gives_each_phase_its_taps_in_pairs(stride, kw):
    """packed[ob, 0, kh, r*S + j, l, k] = w[ob*L + l, 0, kh, 2j + k - stride*r] where
    that tap exists, else 0: output column 2p + r (stride 1) or p (stride 2) reads
    input column 2(p + j) + k."""
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (11, 1, 2, kw)).astype(np.int8)
    p = pack_dw_pairs(w, 8, stride)
    phases = 2 // stride
    steps = -(-(kw + stride * (phases - 1)) // 2)
    assert p.dtype == np.int16 and p.shape == (2, 1, 2, phases * steps, 8, 2)
    for c in range(16):
        for kh in range(2):
            for r in range(phases):
                for j in range(steps):
                    for k in range(2):
                        tap = 2 * j + k - stride * r
                        real = c < 11 and 0 <= tap < kw
                        want = w[c, 0, kh, tap] if real else 0
                        assert p[c // 8, 0, kh, r * steps + j, c % 8, k] == want


def dw_pairs_case(act: str, k: int, stride: int, hw: int, c: int = 20):
    """The depthwise conv of ``dw_quads_case`` with its taps one a step and in int16
    pairs per phase (quantize.pack_dw_pairs, attr ``dw_pairs``), 8 lanes."""
    plain, _, attrs = dw_quads_case(act, 8, c=c, hw=hw, k=k, stride=stride)
    nb, _, _, _, lanes, _ = plain[1].shape
    real = plain[1][..., 0].transpose(0, 4, 2, 3, 1).reshape(nb * lanes, 1, k, k)[:c]
    return plain, [plain[0], pack_dw_pairs(real, 8, stride), plain[2]], attrs


DW_PAIRS = [  # act, kernel, stride, side: rows of whole tiles and rows rounded up
    ("uint8", 3, 1, 16),
    ("uint8", 3, 1, 11),  # 11 columns: 6 pairs in tiles of 3
    ("uint8", 3, 1, 14),  # 7 pairs: 2 tiles of 4, the last column computed, not stored
    ("int8", 3, 1, 7),
    ("uint8", 3, 2, 11),
    ("int8", 3, 2, 16),
    ("uint8", 5, 1, 9),
    ("int8", 5, 2, 14),
]


@pytest.mark.parametrize("act,k,stride,hw", DW_PAIRS)
def test_depthwise_in_column_pairs_equals_one_tap_a_step(act, k, stride, hw):
    """x86 without a dot product (AVX2): each pair of neighbouring pixels' channels
    interleaved into int16 pairs once (vpshufb) and multiplied with each phase's tap
    pairs (vpmaddwd): the one-tap-a-step conv's bytes, with the AVX2 body and with its
    C loop, whatever the row's tiles."""
    plain, pairs, attrs = dw_pairs_case(act, k, stride, hw)
    pattrs = attrs | {"dw_pairs": k}
    want = run_host(plain, attrs, None)
    assert (want == -3).any() and (want != -3).any()
    target = CpuTarget(vector_bits=256, features=("avx2", "fma"))
    src = codegen_c(qconv_func(pairs, pattrs, target)[0])
    call = re.search(r"(pk_dwpair_\w+_avx2)\(&qconv_acc\[0\], &qconv_pad\[", src)
    assert call, "no column-pair call"
    assert src.count("#pragma GCC unroll 1\n") == 1  # the kernel rows stay rolled
    np.testing.assert_array_equal(run_host(pairs, pattrs, None), want)
    if "avx2" not in _cpu_flags():
        return
    np.testing.assert_array_equal(run_host(pairs, pattrs, target), want)
    asm = _host_asm(src)
    # uint8: one ymm vpshufb interleaves and zero-extends; int8: xmm, then vpmovsxbw
    build = ("vpshufb", "ymm") if act == "uint8" else ("vpmovsxbw", "ymm")
    assert re.search(r"vpmaddwd\s+.*%ymm", asm) and re.search(r"{}\s+.*%{}".format(*build), asm)
    assert not re.search(r"vpmovzxbd|vpmovsxbd", asm), "a widening load per tap"
    flags = (*HOST_FLAGS, "-mno-avx2")
    np.testing.assert_array_equal(run_host(pairs, pattrs, target, flags), want)


@pytest.mark.parametrize("out_block", [False, True])
def test_depthwise_pairs_read_a_blocked_input_and_write_the_nchw_bytes(out_block):
    """Blocked in (junk past C) and blocked or NCHW out, on a row rounded up to whole
    tiles (14 columns, 2 tiles of 8): the NCHW one-tap-a-step conv's bytes."""
    if "avx2" not in _cpu_flags():
        pytest.skip("this machine has no avx2")
    plain, pairs, attrs = dw_pairs_case("uint8", 3, 1, 14)
    want = run_host(plain, attrs, None)
    x = _blocked(pairs[0], 8, 77)
    battrs = attrs | {"c": pairs[0].shape[1], "out_block": out_block}
    target = CpuTarget(vector_bits=256, features=("avx2", "fma"))
    got = run_host([x, *pairs[1:]], battrs | {"dw_pairs": 3}, target)
    if out_block:
        want = _blocked(want, 8, 0)
        got[:, -1, :, :, 20 - 16 :] = 0  # the channels past oc: not compared
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "c,hw,cores,per_plane",
    [
        (32, 14, 2, True),  # 4 planes of 8 channels share out over 2 cores
        (20, 14, 2, False),  # 3 do not: the copy at root, its rows on the pool
        (20, 14, 1, True),  # one core: any count
        (16, 130, 1, False),  # a 132 x 136 x 8 plane is over PLANE_PAD_BYTES
    ],
)
def test_a_blocked_depthwise_pads_one_plane_at_a_time(c, hw, cores, per_plane):
    """Blocked in and out: the padded copy is one channel block's plane, made in the
    loop over planes just before its rows read it, where the planes share out evenly
    over the cores and one fits PLANE_PAD_BYTES; else the whole copy at root. The
    bytes are the NCHW one-tap-a-step conv's either way."""
    plain, pairs, attrs = dw_pairs_case("uint8", 3, 1, hw, c=c)
    want = _blocked(run_host(plain, attrs, None), 8, 0)
    x = _blocked(pairs[0], 8, 77)
    battrs = attrs | {"c": c, "out_block": True, "dw_pairs": 3}
    target = CpuTarget(vector_bits=256, features=("avx2", "fma"), cores=cores)
    func, out = qconv_func([x, *pairs[1:]], battrs, target)
    pad = find_tagged(out, "pad")
    planes, plane = pad.shape[1], int(np.prod(pad.shape[2:]))
    src = codegen_c(func)
    size = re.search(
        r"qconv_pad(?:\[(\d+)\];| = \(uint8_t\*\)pk_scratch_alloc\(\(size_t\)(\d+))", src
    )
    assert int(size[1] or size[2]) == (plane if per_plane else planes * plane)
    assert (plane > PLANE_PAD_BYTES) == (hw == 130)
    flags = [(*HOST_FLAGS, "-mno-avx2")] + ([HOST_FLAGS] if "avx2" in _cpu_flags() else [])
    for cflags in flags:  # the intrinsics' C loops, and their AVX2 bodies where they run
        got = run_host([x, *pairs[1:]], battrs, target, cflags)
        got[:, -1, :, :, c % 8 or 8 :] = 0  # the channels past oc: not compared
        np.testing.assert_array_equal(got, want)


def grouped_case(act: str, lanes: int, c: int, oc: int, groups: int, k=3, stride=1, seed=2):
    """A padded grouped qconv2d twice: weights packed per group as the simple schedule
    reads them (quads of min(4, Cg) channels) and block-diagonal per block of L outputs
    (quantize.pack_grouped_int8, attr ``group_blocks``)."""
    rng = np.random.default_rng(seed)
    lo, hi = (0, 256) if act == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, (1, c, 9, 9)).astype(act)
    x.reshape(-1)[:8] = (0, hi - 1, hi - 1, lo, 1, hi - 1, lo, 2)  # extremes
    cg = c // groups
    real = rng.integers(-128, 128, (oc, cg, k, k)).astype(np.int8)
    real.reshape(-1)[:8] = (-128, 127) * 4
    rq = np.zeros((7, -(-oc // lanes) * lanes), np.int64)
    rq[0] = rng.integers(2**30, 2**31, rq.shape[1])
    rq[1], rq[2] = 36, 1 << 35
    rq[3], rq[4] = 0, 2**62
    rq[6] = rng.integers(-5000, 5000, rq.shape[1])
    attrs = dict(
        strides=[stride] * 2, pads=[k // 2] * 4, groups=groups, oc=oc, x_zp=7, y_zp=-3,
        out_dtype="int8",
    )  # fmt: skip
    plain = [x, pack_conv_int8(real, lanes, min(4, cg)), rq]
    return plain, real, attrs


GROUPED = [  # act, lanes, C, OC, groups, kernel, stride, x86 needs, int16 pairs
    ("uint8", 16, 64, 64, 2, 3, 1, "avx512_vnni", False),  # 2 blocks a group
    ("uint8", 16, 64, 64, 16, 3, 2, "avx512_vnni", False),  # 4 groups a block
    ("int8", 16, 48, 48, 3, 1, 1, "avx512bw", True),  # ShuffleNet-like 1x1, pairs
    ("uint8", 8, 32, 64, 8, 3, 1, "avx2", True),  # AVX2: 2 groups a block, Cg 4
    ("int8", 8, 24, 24, 3, 3, 2, "avx2", True),
    ("uint8", 16, 48, 72, 4, 1, 1, "avx512_vnni", False),  # 18 outputs a group, 72 outputs
    ("int8", 8, 40, 60, 5, 3, 1, "avx2", True),  # blocks straddling 2 groups unevenly
]


@pytest.mark.parametrize("act,lanes,c,oc,groups,k,stride,need,pairs", GROUPED)
def test_grouped_conv_in_block_diagonal_steps_equals_the_simple_schedule(
    act, lanes, c, oc, groups, k, stride, need, pairs
):
    """Each block of L output channels as a full conv over its groups' input channels
    (zero weights off the diagonal, blocks holding whole groups, parts of one, or
    straddling two): the dot-product tile, not one product a step, and the simple
    schedule's bytes, from an NCHW and a blocked input."""
    plain, real, attrs = grouped_case(act, lanes, c, oc, groups, k, stride)
    want = run_host(plain, attrs, None)
    assert (want == -3).any() and (want != -3).any()
    w = pack_grouped_int8(real, lanes, 2 if pairs else 4, groups)
    w = w.astype(np.int16) if pairs else w
    feats = VNNI if need == "avx512_vnni" else ("avx2", "avx512f", "avx512bw")
    target = CpuTarget(vector_bits=32 * lanes, features=feats if lanes == 16 else ("avx2",))
    gattrs = attrs | {"group_blocks": True}
    src = codegen_c(qconv_func([plain[0], w, plain[2]], gattrs, target)[0])
    name = "pk_pair_" if pairs else "pk_dot4_"
    assert re.search(rf"{name}\w+\(&qconv_acc\[[^\]]*\], &qconv_pad\[", src), "no tile call"
    # the padded copy holds every step the last block's run reads (past C: zero weights)
    step, mg, cg = w.shape[-1], oc // groups, c // groups
    steps = max(-(-c // step), ((w.shape[0] - 1) * lanes // mg) * (cg // step) + w.shape[1])
    side = 9 + 2 * (k // 2)
    size = re.search(r"qconv_pad\[(\d+)\];|\(size_t\)(\d+) \* sizeof\(\w+\)\);", src)
    assert int(size[1] or size[2]) == steps * side * side * step
    for target_ in (target, None):  # the intrinsic's body and the C loop's
        if target_ and need not in _cpu_flags():
            continue
        np.testing.assert_array_equal(run_host([plain[0], w, plain[2]], gattrs, target_), want)
    if need in _cpu_flags():
        xb = _blocked(plain[0], lanes, 99)
        battrs = gattrs | {"c": c}
        np.testing.assert_array_equal(run_host([xb, w, plain[2]], battrs, target), want)


def test_pack_grouped_int8_places_each_output_at_its_groups_inputs():
    w = np.arange(1, 8 * 2 * 1 * 1 + 1, dtype=np.int8).reshape(8, 2, 1, 1)  # 4 groups
    p = pack_grouped_int8(w, 4, 2, 4)  # blocks of 4 outputs: 2 groups each, 4 inputs
    assert p.shape == (2, 2, 1, 1, 4, 2)
    dense = p.transpose(0, 4, 1, 5, 2, 3).reshape(8, 4)  # (OC, the block's inputs)
    for o in range(8):
        at = (o // 2 % 2) * 2  # the group's place among its block's two groups
        want = np.zeros(4, np.int8)
        want[at : at + 2] = w[o, :, 0, 0]
        np.testing.assert_array_equal(dense[o], want)
    # 2 groups of 3 outputs in blocks of 4: block 0 straddles them (outputs 0-2 at the
    # first group's inputs, 3 at the second's), block 1 starts at group 1 (4, 5 real)
    w = np.arange(1, 6 * 2 + 1, dtype=np.int8).reshape(6, 2, 1, 1)
    p = pack_grouped_int8(w, 4, 2, 2)
    assert p.shape == (2, 2, 1, 1, 4, 2)
    dense = p.transpose(0, 4, 1, 5, 2, 3).reshape(8, 4)
    places = [0, 0, 0, 2, 0, 0]
    for o in range(8):
        want = np.zeros(4, np.int8)
        if o < 6:
            want[places[o] : places[o] + 2] = w[o, :, 0, 0]
        np.testing.assert_array_equal(dense[o], want)


@pytest.mark.parametrize(
    "c,groups,feats,bits,blocks",
    [
        (64, 2, VNNI, 512, True),
        (128, 32, VNNI, 512, True),  # ResNeXt 32x4d: Cg 4, 4 groups a block
        (48, 2, VNNI, 512, True),  # 24 outputs a group: blocks straddle groups unevenly
        (24, 12, ("avx2", "fma", "avx_vnni"), 256, True),  # Cg 2: int16 pairs, not quads
        (24, 8, VNNI, 512, False),  # Cg 3
        (24, 12, ("avx2", "fma"), 256, True),  # but whole int16 pairs
    ],
)
def test_quantize_runs_a_grouped_conv_in_blocks_where_they_align(c, groups, feats, bits, blocks):
    b = replace(load_board("host"), features=feats, vector_bits=bits)
    model = _qdq_conv(c, groups=groups, out=c)
    graph = quantize(import_onnx("g.onnx", model=model), PassContext(board=b))
    (conv,) = [n for n in graph.nodes if n.op == "qconv2d"]
    assert bool(conv.attrs.get("group_blocks")) == blocks
    w = graph.values[conv.inputs[1]].data
    if blocks:  # quads where a group's inputs are whole quads, else int16 pairs
        pairs = (c // groups) % 4 != 0 or "avx512_vnni" not in feats and "avx_vnni" not in feats
        assert (w.dtype, w.shape[-1]) == ((np.int16, 2) if pairs else (np.int8, 4))


AVX512 = ("avx2", "avx512f", "avx512bw")


@pytest.mark.parametrize(
    "board,feats,bits,act,form",
    [
        ("host", (*AVX512, "avx512_vnni"), 512, "uint8", "quads"),
        ("host", AVX512, 512, "uint8", "taps"),  # no VNNI, 16 lanes: one tap a step
        ("host", (*AVX512, "avx512_vnni"), 512, "int8", "taps"),  # vpdpbusd: u8 x s8
        ("host", ("avx2", "fma"), 256, "uint8", "pairs"),  # AVX2: no dot product
        ("host", ("avx2", "fma"), 256, "int8", "pairs"),
        ("host", ("avx2", "fma", "avx_vnni"), 256, "uint8", "quads"),
        ("host", ("avx2", "fma", "avx_vnni"), 256, "int8", "pairs"),
        ("rpi5", ("asimd", "asimddp"), None, "int8", "quads"),
        ("rpi5", ("asimd", "asimddp"), None, "uint8", "taps"),  # sdot: signed bytes
        ("rpi4", ("asimd",), None, "int8", "taps"),  # no dot product
    ],
)
def test_quantize_packs_depthwise_taps_by_what_the_board_multiplies(board, feats, bits, act, form):
    b = load_board(board)
    b = replace(b, features=feats, vector_bits=bits or b.vector_bits)
    model = _qdq_conv(8, groups=8, act=act)
    graph = quantize(import_onnx("dw.onnx", model=model), PassContext(board=b))
    (conv,) = [n for n in graph.nodes if n.op == "qconv2d"]
    w = graph.values[conv.inputs[1]].data
    lanes = b.vector_bits // 32
    nb = 8 // lanes or 1
    want = {
        "quads": ("dw_taps", np.int8, (nb, 1, 3, 1, lanes, 4)),
        "pairs": ("dw_pairs", np.int16, (nb, 1, 3, 4, lanes, 2)),  # 2 phases x 2 steps
        "taps": (None, np.int8, (nb, 1, 3, 3, lanes, 1)),
    }[form]
    assert {"dw_taps", "dw_pairs"} & set(conv.attrs) == ({want[0]} if want[0] else set())
    if want[0]:
        assert conv.attrs[want[0]] == 3
    assert w.dtype == want[1] and w.shape == want[2]


@pytest.mark.parametrize("stride,dilation,pairs", [(2, 1, True), (1, 2, False)])
def test_depthwise_pairs_take_row_strides_of_one_or_two_without_dilation(stride, dilation, pairs):
    b = replace(load_board("host"), features=("avx2", "fma"), vector_bits=256)
    model = _qdq_conv(8, groups=8, stride=stride, dilation=dilation)
    graph = quantize(import_onnx("dw.onnx", model=model), PassContext(board=b))
    (conv,) = [n for n in graph.nodes if n.op == "qconv2d"]
    assert ("dw_pairs" in conv.attrs) == pairs
    if pairs:  # stride 2: one phase, 2 steps of taps (k0, k1), (k2, 0)
        assert graph.values[conv.inputs[1]].data.shape == (1, 1, 3, 2, 8, 2)


def _blocked(x: np.ndarray, b: int, fill: int) -> np.ndarray:
    """NCHW -> (N, C/B, H, W, B), the channels past C set to ``fill``."""
    n, c, h, w = x.shape
    out = np.full((n, -(-c // b) * b, h, w), fill, x.dtype)
    out[:, :c] = x
    return np.ascontiguousarray(out.reshape(n, -1, b, h, w).transpose(0, 1, 3, 4, 2))


@pytest.mark.parametrize("kind,k,pads", [("full", 3, 1), ("full", 1, 0), ("depthwise", 3, 1)])
@pytest.mark.parametrize("out_block", [False, True])
def test_blocked_input_and_output_give_the_nchw_bytes(kind, k, pads, out_block):
    """A conv reading its activation blocked (N, C/L, H, W, L) and writing its output
    blocked computes the bytes of the NCHW conv; the padding past C is never read into
    a result (filled with junk here). Without padding the block is read in place, with
    padding through a copy blocked alike, one vector per block."""
    lanes = 16
    if kind == "full":
        inputs, attrs = qconv_case("uint8", lanes, c=20, k=k)
    else:
        inputs, attrs = depthwise_case("uint8", lanes, c=20)
    attrs["pads"] = [pads] * 4
    target = CpuTarget(vector_bits=32 * lanes)
    want = run_host(inputs, attrs, target)
    x = _blocked(inputs[0], lanes, 77)
    battrs = attrs | {"c": inputs[0].shape[1], "out_block": out_block}
    got = run_host([x, *inputs[1:]], battrs, target)
    if out_block:
        want = _blocked(want, lanes, 0)
        past = int(attrs["oc"]) - (want.shape[1] - 1) * lanes
        got[:, -1, :, :, past:] = 0  # the channels past oc: not compared

    np.testing.assert_array_equal(got, want)
    src = codegen_c(qconv_func([x, *inputs[1:]], battrs, target)[0])
    if pads:  # the padded copy moves whole blocks
        assert re.search(r"__builtin_memcpy\(&qconv_pad\[", src), "no vector block copy"
    else:
        assert "qconv_pad" not in src, "a padded copy where the block is read in place"


@pytest.mark.parametrize("c,k,loop", [(24, 1, "rcb 6"), (48, 1, "rcb_i 2"), (48, 3, "rcb_i 2")])
def test_a_blocked_inputs_quad_steps_are_unrolled_per_block(c, k, loop):
    """An 8-lane blocked activation holds 2 byte quads a block: the reduction steps
    over a block are one unrolled loop (a short 1x1 reduction: all of them), so no
    read's address divides the step by the block; the bytes are the NCHW conv's (the simple
    schedule's)."""
    inputs, attrs = qconv_case("uint8", 8, c=c, oc=16, hw=9, k=k)
    inputs[1][...] = np.clip(inputs[1], -64, 64)
    attrs |= {"pads": [k // 2] * 4, "byte_pairs": True}
    target = CpuTarget(vector_bits=256, features=("avx2", "fma"))
    x = _blocked(inputs[0], 8, 77)
    battrs = attrs | {"c": c}
    src = codegen_c(qconv_func([x, *inputs[1:]], battrs, target)[0])
    name, n = loop.split()
    assert re.search(rf"#pragma GCC unroll {n}\s+for \(int64_t {name} = 0; {name} < {n};", src)
    if name == "rcb_i":  # unrolled whole, the constants fold
        assert not re.search(r"rcb(_o)? [/%] ", src), "a read's address divides the step"
    want = run_host(inputs, attrs, None)
    if "avx2" in _cpu_flags():
        np.testing.assert_array_equal(run_host([x, *inputs[1:]], battrs, target), want)
    np.testing.assert_array_equal(
        run_host([x, *inputs[1:]], battrs, target, (*HOST_FLAGS, "-mno-avx2")), want
    )


def _qdq_conv(
    c: int,
    groups: int = 1,
    act: str = "uint8",
    k: int = 3,
    stride: int = 1,
    dilation: int = 1,
    out: int = 8,
    wmax: int = 127,
) -> onnx.ModelProto:
    """Q -> DQ -> Conv k x k (``out`` output channels, ``groups``, same padding,
    ``stride``, ``dilation``) -> Q -> DQ, ``act`` activations, on a (1, c, 8, 8) input;
    weights in [-wmax, wmax]."""
    pad = dilation * (k // 2)
    side = (8 + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    rng = np.random.default_rng(0)
    w = rng.integers(-wmax, wmax + 1, (out, c // groups, k, k)).astype(np.int8)
    zp = np.uint8(128) if act == "uint8" else np.int8(0)
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.full(out, 0.01, np.float32), "ws"),
        numpy_helper.from_array(np.zeros(out, np.int8), "wz"),
        numpy_helper.from_array(np.float32(0.02), "s"),
        numpy_helper.from_array(zp, "z"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
        helper.make_node(
            "Conv",
            ["xd", "wd"],
            ["y"],
            pads=[pad] * 4,
            group=groups,
            strides=[stride] * 2,
            dilations=[dilation] * 2,
        ),
        helper.make_node("QuantizeLinear", ["y", "s", "z"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "s", "z"], ["out"]),
    ]
    g = helper.make_graph(
        nodes,
        "stem",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, out, side, side])],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


def test_three_channel_stem_packs_its_channels_in_quads():
    graph = quantize(import_onnx("stem.onnx", model=_qdq_conv(3)))
    (node,) = [n for n in graph.nodes if n.op == "qconv2d"]
    w = graph.values[node.inputs[1]].data
    assert w.shape[1] == 1 and w.shape[-1] == 4  # one quad, its 4th channel zero
    assert not w[..., 3].any()


@pytest.mark.parametrize(
    "board,feats,act,k,step",
    [
        ("host", VNNI, "uint8", 7, 4),  # a row: 21 products in 6 quads, not 7
        ("host", VNNI, "uint8", 3, None),  # 9 products: 3 quads either way
        ("host", ("avx2", "fma"), "uint8", 3, 2),  # 5 pairs, not 6
        ("rpi4", ("asimd",), "int8", 7, 4),
    ],
)
def test_a_stem_packs_its_kernel_rows_where_that_takes_fewer_steps(board, feats, act, k, step):
    b = load_board(board)
    b = replace(b, features=feats, vector_bits=512 if "avx512f" in feats else b.vector_bits)
    graph = quantize(import_onnx("s.onnx", model=_qdq_conv(3, act=act, k=k)), PassContext(board=b))
    (conv,) = [n for n in graph.nodes if n.op == "qconv2d"]
    w = graph.values[conv.inputs[1]].data
    if step is None:
        assert "row_taps" not in conv.attrs and w.shape[1:4] == (1, k, k)
        return
    assert conv.attrs["row_taps"] == k
    lanes = w.shape[4]
    assert w.shape == (-(-8 // lanes), 1, k, -(-3 * k // step), lanes, step)
    real = numpy_helper.to_array(_qdq_conv(3, act=act, k=k).graph.initializer[0])
    for ob, kh, j, lane, kk in np.ndindex(w.shape[0], k, w.shape[3], lanes, step):
        t, o = step * j + kk, ob * lanes + lane  # product t of the row: tap t // 3, channel t % 3
        want = real[o, t % 3, kh, t // 3] if o < 8 and t < 3 * k else 0
        assert w[ob, 0, kh, j, lane, kk] == want


def _stem_case(act: str, lanes: int, k: int, stride: int, step: int):
    """A 3-channel k x k stem as the channel-padded conv (quads, NCHW input) and as the
    row-packed one (blocked input of 4 lanes, as the graph passes it): inputs, attrs."""
    inputs, attrs = qconv_case(act, lanes, c=3, oc=20, hw=15, k=k, stride=stride)
    attrs["pads"] = [k // 2] * 4
    x, w4, rq = inputs
    nb = w4.shape[0]
    full = w4.transpose(0, 4, 1, 5, 2, 3).reshape(nb * lanes, 4, k, k)[:20, :3]
    rows = pack_rows_int8(full, lanes, step)
    rows = rows.astype(np.int16) if step == 2 else rows
    std = [x, pack_conv_int8(full, lanes, 4), rq]
    return std, attrs, [_blocked(x, 4, 0), rows, rq], attrs | {"c": 3, "row_taps": k}


STEMS = [  # act, lanes, k, stride, step, the host's need, features
    ("uint8", 16, 7, 2, 4, "avx512_vnni", VNNI),
    ("uint8", 8, 3, 2, 2, "avx2", ("avx2", "fma")),
    ("int8", 8, 7, 2, 2, "avx2", ("avx2", "fma")),
    ("uint8", 4, 5, 1, 4, None, ()),
]


@pytest.mark.parametrize("act,lanes,k,stride,step,need,feats", STEMS)
def test_row_packed_stem_gives_the_channel_padded_convs_bytes(
    act, lanes, k, stride, step, need, feats
):
    """A row's KW x 3 products in consecutive steps of the conv's own intrinsic: the
    bytes of the conv that pads the channels to a quad at every tap."""
    std, attrs, rows, rattrs = _stem_case(act, lanes, k, stride, step)
    want = run_host(std, attrs, None)
    assert len(np.unique(want)) > 3
    target = CpuTarget(vector_bits=32 * lanes, features=feats)
    src = codegen_c(qconv_func(rows, rattrs, target)[0])
    if need:
        assert re.search(r"pk_(dot4|pair)_\w+\(&qconv_acc\[[^\]]*\], &qconv_pad\[", src)
    np.testing.assert_array_equal(run_host(rows, rattrs, None), want)
    nchw = [std[0], *rows[1:]]  # the copy reads an NCHW input alike
    nattrs = {k: v for k, v in rattrs.items() if k != "c"}
    np.testing.assert_array_equal(run_host(nchw, nattrs, None), want)
    if need is None or need in _cpu_flags():
        np.testing.assert_array_equal(run_host(rows, rattrs, target), want)


def test_row_packed_stem_runs_on_arm_under_qemu(tmp_path):
    """Raspberry Pi 4 (no dot product): the widening body over a 7x7 stem's rows, run
    under qemu-aarch64, gives the channel-padded conv's bytes."""
    std, attrs, rows, rattrs = _stem_case("int8", 4, 7, 2, 4)
    asm, got = cross_run("rpi4", rows, rattrs, tmp_path)
    assert re.search(r"\bsmull2?\s+v\d+\.", asm)
    np.testing.assert_array_equal(got, run_host(std, attrs, None))


def _with_bounds(case, lo, hi):
    """A case whose activation bounds are ``lo``/``hi`` (on the scaled product)."""
    (x, w, rq), attrs = case
    rq = rq.copy()
    rq[3], rq[4] = lo, hi
    return [x, w, rq], attrs


@pytest.mark.parametrize("kind", ["full", "depthwise"])
@pytest.mark.parametrize("bounds", ["none", "relu", "clip"])
def test_int32_epilogue_gives_the_int64_epilogues_bytes(kind, bounds):
    """rq32: the epilogue in int32 lanes (bounds after the shift, zero point folded)
    writes exactly what the int64 one writes, with saturation and the bounds both hit."""
    case = qconv_case("uint8", 16) if kind == "full" else depthwise_case("uint8", 16)
    shift = int(case[0][2][1, 0])
    lo, hi = {"none": (-(2**62), 2**62), "relu": (0, 2**62), "clip": (0, 40 << shift)}[bounds]
    inputs, attrs = _with_bounds(case, lo, hi)
    x, w, rq = inputs
    wabs = np.abs(w.astype(np.int64)).sum(axis=tuple(range(1, w.ndim)))  # a bound is enough
    assert narrow_epilogue(rq, wabs.repeat(16)[: rq.shape[1]], "uint8", None)
    narrow = [x, w, narrow_bounds(rq, attrs["y_zp"], "int8")]
    target = CpuTarget(vector_bits=512, features=())
    src = codegen_c(qconv_func(narrow, attrs | {"rq32": True}, target)[0])
    assert "int32_t)(((((int64_t)" in src  # the narrow form really is what runs
    want = run_host(inputs, attrs, None)
    got = run_host(narrow, attrs | {"rq32": True}, target)
    np.testing.assert_array_equal(got, want)
    assert (want == -128).any() or bounds != "none"
    assert len(np.unique(want)) > 3


REQUANT = [  # kind, lanes, out, y_zp, what the host must have
    ("full", 16, "int8", -2, "avx512f"),
    ("full", 16, "uint8", 0, "avx512f"),
    ("depthwise", 16, "uint8", 7, "avx512f"),
    ("full", 8, "int8", 0, "avx2"),
    ("depthwise", 8, "uint8", 5, "avx2"),
]


@pytest.mark.parametrize("kind,lanes,out,zp,need", REQUANT)
def test_blocked_mulhi_epilogue_is_one_intrinsic_call_with_the_int64_bytes(
    kind, lanes, out, zp, need
):
    """A blocked output of the int32 'mulhi' epilogue: one pk_requant call per block
    and column (vpmuldq on even and odd lanes, vpmovdb or packs), the bytes the int64
    epilogue writes, the activation's bounds and the type's saturation both hit."""
    if need not in _cpu_flags():
        pytest.skip(f"this machine has no {need}")
    case = qconv_case("uint8", lanes) if kind == "full" else depthwise_case("uint8", lanes)
    inputs, attrs = _with_bounds(case, 0, 2**62) if out == "uint8" else case
    attrs = attrs | {"out_dtype": out, "y_zp": zp}
    x, w, rq = inputs
    oc = attrs["oc"]
    table = mulhi_table(narrow_bounds(rq, zp, out), oc)
    assert table is not None
    blocked = _blocked(x, lanes, 9)
    battrs = attrs | {"c": x.shape[1], "out_block": True}
    feats = (need, "avx2") if need == "avx512f" else (need,)
    target = CpuTarget(vector_bits=32 * lanes, features=feats)
    mattrs = battrs | {"rq32": "mulhi"}
    src = codegen_c(qconv_func([blocked, w, table], mattrs, target)[0])
    assert re.search(r"pk_requant_\w+\(&qconv\[", src), "no epilogue call"
    got = run_host([blocked, w, table], mattrs, target)
    want = _blocked(run_host(inputs, attrs, None), lanes, 0)
    past = oc - (want.shape[1] - 1) * lanes
    got[:, -1, :, :, past:] = 0  # the channels past oc: not compared
    np.testing.assert_array_equal(got, want)
    # without the ISA: the intrinsic's C loop, the same bytes
    plain = run_host([blocked, w, table], mattrs, target, (*HOST_FLAGS, f"-mno-{need}"))
    plain[:, -1, :, :, past:] = 0
    np.testing.assert_array_equal(plain, want)
    vals = want.view(np.uint8) if out == "uint8" else want  # run_host's bytes as out
    lo, hi = (0, 255) if out == "uint8" else (-128, 127)
    assert (vals == hi).any() and len(np.unique(vals)) > 3  # saturated, and values
    assert (vals == (zp if out == "uint8" else lo)).any()  # the ReLU bound / saturation


COLUMNS = [  # kind, kernel, output rows and columns, out, y_zp, columns a call takes
    ("full", 3, 7, "uint8", 5, 7),  # one group of 4 and 3 columns alone
    ("full", 3, 8, "int8", -3, 4),
    ("full", 1, 14, "int8", 0, 7),
    ("depthwise", 3, 8, "uint8", 0, 8),  # two groups of 4
    ("depthwise", 3, 14, "int8", -3, 7),
    ("depthwise", 3, 9, "uint8", 5, 1),  # tiles of 8 over 9 columns: one call a column
]


@pytest.mark.parametrize("kind,k,hw,out,zp,cols", COLUMNS)
def test_avx2_epilogue_packs_four_columns_at_a_time_with_the_int64_bytes(
    kind, k, hw, out, zp, cols
):
    """With 8 lanes and no residual, one pk_requant call takes a tile's columns of a
    block where the row is whole tiles: four columns packed to 32 bytes, clamped there
    and stored in one move (vpermd restores their order), the rest one at a time. The
    bytes are the int64 epilogue's, the bounds and the saturation both hit, and the
    intrinsic's C loop (no AVX2) writes them too."""
    if "avx2" not in _cpu_flags():
        pytest.skip("this machine has no avx2")
    case = (
        qconv_case("uint8", 8, hw=hw, k=k) if kind == "full" else depthwise_case("uint8", 8, hw=hw)
    )
    inputs, attrs = _with_bounds(case, 0, 2**62) if out == "uint8" else case
    attrs = attrs | {"out_dtype": out, "y_zp": zp} | ({"pads": [0] * 4} if k == 1 else {})
    x, w, rq = inputs
    oc = attrs["oc"]
    table = mulhi_table(narrow_bounds(rq, zp, out), oc)
    blocked = [_blocked(x, 8, 9), w, table]
    mattrs = attrs | {"c": x.shape[1], "out_block": True, "rq32": "mulhi"}
    target = CpuTarget(vector_bits=256, features=("avx2",))
    src = codegen_c(qconv_func(blocked, mattrs, target)[0])
    calls = set(re.findall(r"(pk_requant_\w+?)\(&qconv\[", src))
    suffix = f"x8c{cols}_" if cols > 1 else "x8_"
    assert [c for c in calls if suffix in c] == list(calls) and calls, calls
    if cols > 1:
        assert re.search(r"vpermd\s+%ymm", _host_asm(src)), "no column packing"
    want = _blocked(run_host(inputs, attrs, None), 8, 0)
    past = oc - (want.shape[1] - 1) * 8
    for flags in (HOST_FLAGS, (*HOST_FLAGS, "-mno-avx2")):
        got = run_host(blocked, mattrs, target, flags)
        got[:, -1, :, :, past:] = 0  # the channels past oc: not compared
        np.testing.assert_array_equal(got, want)
    vals = want.view(np.uint8) if out == "uint8" else want
    lo, hi = (0, 255) if out == "uint8" else (-128, 127)
    assert (vals == hi).any() and len(np.unique(vals)) > 3  # saturated, and values
    relu = out == "uint8" or kind == "depthwise"  # depthwise_case fuses a ReLU
    assert (vals == (zp if relu else lo)).any()  # the ReLU bound / saturation


SHARED = [  # kind, kernel, output size, out, y_zp, bounds on the product, C that must not be
    ("full", 3, 7, "uint8", 5, "relu", "lo16"),  # 4 columns packed + 3 alone, at zp 5
    ("full", 3, 7, "uint8", 0, "clip", "lo16"),
    ("depthwise", 3, 9, "uint8", 5, "clip", "_loadu_si256((const void *)p4)"),  # 1 a call
    ("full", 3, 8, "int8", -3, "none", "_max_epi"),  # the type's range: no clamp at all
    ("depthwise", 3, 9, "int8", 0, "none", "_max_epi"),
]


@pytest.mark.parametrize("kind,k,hw,out,zp,bounds,absent", SHARED)
def test_avx2_epilogue_clamps_at_shared_bounds_as_constants(kind, k, hw, out, zp, bounds, absent):
    """Where every channel clamps at the same output bounds (``y_bounds``, the quantize
    pass's shared_bounds), the epilogue clamps at them as constants, and not at all
    where they are the type's own range (the saturating packs clamp there): the bytes
    are still the int64 epilogue's, with the bounds hit."""
    if "avx2" not in _cpu_flags():
        pytest.skip("this machine has no avx2")
    case = (
        qconv_case("uint8", 8, hw=hw, k=k) if kind == "full" else depthwise_case("uint8", 8, hw=hw)
    )
    if bounds != "none":
        shift = int(case[0][2][1, 0])
        case = _with_bounds(case, 0, {"relu": 2**62, "clip": 120 << shift}[bounds])
    (x, w, rq), attrs = case
    attrs = attrs | {"out_dtype": out, "y_zp": zp}
    oc = attrs["oc"]
    table = mulhi_table(narrow_bounds(rq, zp, out), oc)
    shared = shared_bounds(table, "mulhi", oc)
    assert shared, "the case's channels clamp alike"
    mattrs = attrs | {"c": x.shape[1], "out_block": True, "rq32": "mulhi"} | shared
    target = CpuTarget(vector_bits=256, features=("avx2",))
    src = codegen_c(qconv_func([_blocked(x, 8, 9), w, table], mattrs, target)[0])
    lo, hi = shared["y_bounds"]
    assert re.search(rf"pk_requant_\w+_b{lo}_{hi}\(&qconv\[".replace("-", "m"), src), src[:2000]
    body = src[src.index("#if defined(__AVX2__)") : src.index("#else")]
    assert absent not in body
    want = _blocked(run_host([x, w, rq], attrs, None), 8, 0)
    past = oc - (want.shape[1] - 1) * 8
    for flags in (HOST_FLAGS, (*HOST_FLAGS, "-mno-avx2")):
        got = run_host([_blocked(x, 8, 9), w, table], mattrs, target, flags)
        got[:, -1, :, :, past:] = 0  # the channels past oc: not compared
        np.testing.assert_array_equal(got, want)
    vals = want.view(np.uint8) if out == "uint8" else want
    assert (vals == (hi if bounds == "clip" else QHI[out])).any()
    assert (vals == lo).any() and len(np.unique(vals)) > 3


def test_shared_bounds_only_where_every_real_channel_clamps_alike():
    table = np.zeros((6, 16), np.int32)
    table[4, :12], table[5, :12] = 3, 200
    table[4, 12:], table[5, 12:] = 0, 9  # padded channels: theirs are discarded
    assert shared_bounds(table, "mulhi", 12) == {"y_bounds": [3, 200]}
    assert shared_bounds(table, "mulhi", 13) == {}
    assert shared_bounds(table, True, 12) == {}  # an int32 epilogue without the table
    table[5, 4] = 199
    assert shared_bounds(table, "mulhi", 12) == {}


QHI = {"uint8": 255, "int8": 127}


RESIDUAL = [  # lanes, out, residual type, conv's zero point, what the host must have
    (16, "int8", "int8", -2, "avx512f"),
    (16, "uint8", "uint8", 0, "avx512f"),
    (8, "uint8", "uint8", 5, "avx2"),
    (8, "int8", "uint8", 0, "avx2"),
]


@pytest.mark.parametrize("lanes,out,res,zp,need", RESIDUAL)
def test_folded_residual_add_is_one_intrinsic_call_with_the_int64_bytes(lanes, out, res, zp, need):
    """A blocked 'mulhi' conv with a residual add folded in (a projection conv of an
    inverted residual block): one pk_requant_add call per block and column, the mulhi
    epilogue then the int32 qadd in registers, the bytes of the int64 epilogue followed
    by the int64 add reading an NCHW residual."""
    if need not in _cpu_flags():
        pytest.skip(f"this machine has no {need}")
    (x, w, rq), attrs = qconv_case("uint8", lanes)
    attrs = attrs | {"out_dtype": out, "y_zp": zp}
    oc = attrs["oc"]
    rng = np.random.default_rng(1)
    lo, hi = (0, 256) if res == "uint8" else (-128, 128)
    r = rng.integers(lo, hi, (1, oc, 7, 7)).astype(res)
    fold = add_attrs(("y", 0.05, zp), ("r", 0.03, 3), (0.06, -7 if out == "int8" else 9), None, out)
    assert fold["i32"]
    attrs |= {f"add_{k}": v for k, v in fold.items()}
    table = mulhi_table(narrow_bounds(rq, zp, out), oc)
    battrs = attrs | {"c": x.shape[1], "out_block": True, "rq32": "mulhi"}
    feats = (need, "avx2") if need == "avx512f" else (need,)
    target = CpuTarget(vector_bits=32 * lanes, features=feats)
    blocked = [_blocked(x, lanes, 9), w, table, _blocked(r, lanes, 0)]
    src = codegen_c(qconv_func(blocked, battrs, target)[0])
    assert re.search(r"pk_requant_add_\w+\(&qconv\[", src), "no epilogue call"
    want = _blocked(run_host([x, w, rq, r], attrs, None), lanes, 0)
    past = oc - (want.shape[1] - 1) * lanes
    for flags in (HOST_FLAGS, (*HOST_FLAGS, f"-mno-{need}")):  # and the C loop
        got = run_host(blocked, battrs, target, flags)
        got[:, -1, :, :, past:] = 0  # the channels past oc: not compared
        np.testing.assert_array_equal(got, want)
    vals = want.view(np.uint8) if out == "uint8" else want
    assert len(np.unique(vals)) > 20 and (vals == (255 if out == "uint8" else 127)).any()


def test_int32_epilogue_is_refused_where_int32_could_overflow():
    rq = np.zeros((7, 16), np.int64)
    rq[0], rq[1], rq[2] = 2**30, 31, 2**30
    wabs = np.full(16, 2**24)  # 255 * 2**24 > 2**31: acc + bias may not fit int32
    assert not narrow_epilogue(rq, wabs, "uint8", None)
    assert narrow_epilogue(rq, wabs // 512, "uint8", None)
    assert not narrow_epilogue(rq, wabs // 512, "uint8", ("r", 0.1, 0))  # a residual
