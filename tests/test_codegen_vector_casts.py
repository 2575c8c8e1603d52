"""The quantize / dequantize glue of integer models as vector code: lane-wise casts
between float32 and integers (truncating, wrapping as the scalar casts do; none through a
vector under 8 bytes, which GCC emulates), rounding and
other float math lane by lane, loads of a constant stride (a plane-per-channel NCHW
input read into a block of channels), and index selects every lane of a vector decides
alike (a channel concat at a multiple of the block). Each kernel is compared with numpy
and with the same kernel left scalar."""

from __future__ import annotations

import re

import numpy as np
import pytest

from packager import te
from packager.codegen.cstyle import _convert_steps

from .te.helpers import run

rng = np.random.default_rng(0)


def _vector_and_scalar(shape, f, inputs, name, axis=-1):
    """Outputs of ``o = compute(shape, f)`` with axis ``axis`` vectorized and not, and the
    vectorized kernel's C."""
    outs = []
    for vector in (True, False):
        ins = [te.placeholder(a.shape, str(a.dtype), f"x{k}") for k, a in enumerate(inputs)]
        o = te.compute(shape, lambda *i, ins=ins: f(*ins, *i), name="o")
        s = te.create_schedule(o)
        if vector:
            s[o].vectorize(s[o].op.axis[axis])
        (got,), src = run(s, [*ins, o], name + ("" if vector else "_s"), inputs)
        outs.append((got, src))
    (got, src), (scalar, _) = outs
    return got, scalar, src


def _assert_vector(src, lanes, var="o_i1"):
    assert f"/* {var}: {lanes} lanes */" in src, src
    assert "#pragma GCC ivdep" not in src


@pytest.mark.parametrize("lanes", [8, 16])
@pytest.mark.parametrize("dtype,lo,hi", [("uint8", 0, 255), ("int8", -128, 127)])
def test_quantize_is_vector_code(lanes, dtype, lo, hi):
    """q = clamp(round(x / s) + z, lo, hi) as the integer type: round half to even, ties
    on both sides of zero, saturation at both ends."""
    s, z = np.float32(0.5), np.float32(3 if dtype == "uint8" else -2)
    ties = np.array([0.25, 0.75, 1.25, -0.25, -0.75, -1.25, 64.0, -70.0, 200.0, -200.0])
    x = np.concatenate([ties, rng.uniform(-80, 140, 8 * lanes - ties.size)]).astype(np.float32)
    x = x.reshape(-1, lanes)

    def f(t, i, c):
        v = te.call("round", t[i, c] / te.const(s, "float32")) + te.const(z, "float32")
        v = te.min_(te.max_(v, te.const(lo, "float32")), te.const(hi, "float32"))
        return te.cast(dtype, v)

    got, scalar, src = _vector_and_scalar(x.shape, f, [x], f"k_q{lanes}")
    want = np.clip(np.rint(x / s) + z, lo, hi).astype(dtype)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(scalar, want)
    _assert_vector(src, lanes)
    # the float is truncated at 32 bits, then narrowed by halves; rounding is a lane loop
    # in 8 lanes, arithmetic on the bits in 16 (cstyle.RINT_LANE_LOOP_BYTES)
    steps = re.findall(r"__builtin_convertvector\(", src)
    assert len(steps) == 3
    loop = re.search(rf"for \(int pk_l\d+ = 0; pk_l\d+ < {lanes}; \+\+pk_l\d+\) .*nearbyintf", src)
    assert bool(loop) == (lanes == 8) and ("8388608.0f" in src) == (lanes == 16)


def test_round_of_16_lanes_is_nearbyint_bit_for_bit():
    """Round half to even of a 16-lane float32 vector (arithmetic on its bits, no lane
    loop): ties on both sides of zero, the sign of a zero result, the edges of 2^23 and
    2^24, the largest floats, denormals, infinities and NaN, as np.rint gives them."""
    big = np.float32(2**23)
    edges = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, -0.0, 0.0, -0.3]
    edges += [big - 0.5, big - 1.5, -(big - 0.5), big, big + 1, -big, 2**24 + 2, 3.4e38]
    edges += [-3.4e38, 1e-45, -1e-45, 1.2e-38, np.inf, -np.inf, np.nan, -np.nan, 7.5, -7.5]
    x = np.concatenate([edges, rng.uniform(-1e4, 1e4, 64 - len(edges))]).astype(np.float32)
    x = x.reshape(-1, 16)
    got, scalar, src = _vector_and_scalar(
        x.shape, lambda t, i, c: te.call("round", t[i, c]), [x], "k_rint16"
    )
    _assert_vector(src, 16)
    assert "nearbyintf" not in src
    want = np.rint(x)
    for out in (got, scalar):
        np.testing.assert_array_equal(
            out.view(np.uint32) & 0x7FFFFFFF == 0x7FC00000, np.isnan(want)
        )
        keep = ~np.isnan(want)
        np.testing.assert_array_equal(out.view(np.uint32)[keep], want.view(np.uint32)[keep])


@pytest.mark.parametrize("lanes", [8, 16])
def test_dequantize_is_vector_code(lanes):
    """(float(q) - z) * s from uint8 and int8, every value of the type."""
    z, s = 5.0, 0.125
    for dtype in ("uint8", "int8"):
        info = np.iinfo(dtype)
        q = np.arange(info.min, info.max + 1, dtype=np.int64).astype(dtype).reshape(-1, lanes)

        def f(t, i, c):
            v = te.cast("float32", t[i, c]) - te.const(z, "float32")
            return v * te.const(s, "float32")

        got, scalar, src = _vector_and_scalar(q.shape, f, [q], f"k_dq_{dtype}")
        want = (q.astype(np.float32) - np.float32(z)) * np.float32(s)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(scalar, want)
        _assert_vector(src, lanes)


CASTS = [
    ("float32", "int32"),
    ("float32", "int16"),
    ("float32", "uint8"),
    ("float32", "int8"),
    ("int32", "float32"),
    ("uint8", "float32"),
    ("int16", "float32"),
    ("int32", "uint8"),
    ("int32", "int8"),
    ("int32", "int16"),
    ("uint16", "uint8"),
    ("uint8", "int32"),
    ("int8", "int16"),
]


def _values(src: str, dst: str, n: int) -> np.ndarray:
    """``n`` values of ``src``: from a float, ones that fit ``dst`` (a scalar cast of any
    other is undefined); from an integer, its whole range (narrowing wraps)."""
    if src == "float32":
        info = np.iinfo(dst)
        lo, hi = (info.min, info.max) if info.bits <= 16 else (-(2**24), 2**24)
        v = rng.uniform(lo, hi, n)
        v[:4] = [lo + 0.5, hi - 0.5, -0.75 if lo < 0 else 0.75, 0.0]
        return v.astype(np.float32)
    info = np.iinfo(src)
    v = rng.integers(info.min, info.max, n, dtype=np.int64, endpoint=True)
    v[:2] = [info.min, info.max]
    return v.astype(src)


@pytest.mark.parametrize("src,dst", CASTS)
@pytest.mark.parametrize("lanes", [4, 16])
def test_casts_match_the_scalar_cast(src, dst, lanes):
    x = _values(src, dst, 6 * lanes).reshape(-1, lanes)
    got, scalar, code = _vector_and_scalar(
        x.shape, lambda t, i, c: te.cast(dst, t[i, c]), [x], f"k_cast_{src}_{dst}"
    )
    want = x.astype(dst)  # truncation toward zero; integers wrap
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(scalar, want)
    steps = [src, *_convert_steps(src, dst)]
    if lanes * min(np.dtype(dt).itemsize for dt in steps) < 8:  # an emulated vector
        assert "lanes */" not in code and "#pragma GCC ivdep" in code
        return
    _assert_vector(code, lanes)
    assert code.count("__builtin_convertvector(") == len(_convert_steps(src, dst))


def test_convert_steps():
    assert _convert_steps("float32", "uint8") == ["int32", "uint16", "uint8"]
    assert _convert_steps("float32", "int16") == ["int32", "int16"]
    assert _convert_steps("float32", "uint32") == ["uint32"]  # not through int32
    assert _convert_steps("uint8", "float32") == ["int32", "float32"]
    assert _convert_steps("int32", "int8") == ["int16", "int8"]
    assert _convert_steps("uint8", "int32") == ["int32"]


@pytest.mark.parametrize("func", ["round", "floor", "ceil", "trunc", "sqrt", "abs"])
def test_float_math_lane_by_lane(func):
    x = rng.uniform(-9, 9, (5, 8)).astype(np.float32)
    x[0] = [0.5, 1.5, 2.5, -0.5, -1.5, -0.0, 3.0, -7.25]
    if func == "sqrt":
        x = np.abs(x)
    ref = {"round": np.rint, "abs": np.abs}.get(func) or getattr(np, func)
    got, scalar, src = _vector_and_scalar(
        x.shape, lambda t, i, c: te.call(func, t[i, c]) * te.const(2.0, "float32"), [x], f"k_{func}"
    )
    want = ref(x) * np.float32(2)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(scalar, want)
    _assert_vector(src, 8)


def test_strided_loads_fill_a_vector_lane_by_lane():
    """A block of 16 channels from an NCHW tensor: each lane reads its own channel plane,
    H * W floats apart, and the block is one vector."""
    c, h, w = 32, 3, 5
    x = rng.standard_normal((c, h, w)).astype(np.float32)

    def f(t, b, i, j, k):
        return t[b * 16 + k, i, j] * te.const(3.0, "float32")

    got, scalar, src = _vector_and_scalar((2, h, w, 16), f, [x], "k_block")
    want = x.reshape(2, 16, h, w).transpose(0, 2, 3, 1) * np.float32(3)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(scalar, want)
    _assert_vector(src, 16, "o_i3")
    assert re.search(rf"\{{x0\[pk_t\d+\], x0\[pk_t\d+ \+ {h * w}\], ", src)


def _concat(bound):
    """Two NCHW tensors of ``bound`` and 48 - ``bound`` channels into 16-channel blocks."""
    a = rng.standard_normal((bound, 4)).astype(np.float32)
    b = rng.standard_normal((48 - bound, 4)).astype(np.float32)

    def f(ta, tb, blk, j, k):
        ch = blk * 16 + k
        return te.select(ch < bound, ta[ch, j], tb[ch - bound, j])

    got, scalar, src = _vector_and_scalar((3, 4, 16), f, [a, b], f"k_cat{bound}")
    want = np.concatenate([a, b]).reshape(3, 16, 4).transpose(0, 2, 1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(scalar, want)
    return src


def test_concat_at_a_block_boundary_is_one_branch_per_vector():
    src = _concat(32)
    _assert_vector(src, 16, "o_i2")
    assert re.search(r"if \(\(\(?o_i0 \* 16\)? < 32\)\)", src), src


def test_concat_inside_a_block_keeps_the_scalar_loop():
    src = _concat(24)  # the middle block holds channels of both parts
    assert "lanes */" not in src and "#pragma GCC ivdep" in src


@pytest.mark.parametrize("op", ["<", "<=", ">", ">="])
@pytest.mark.parametrize("sign", [1, -1])
@pytest.mark.parametrize("bound", [32, 31, 33])
def test_index_selects_decided_per_vector_where_they_can_be(op, sign, bound):
    """select(+-(16 b + k) OP +-bound, x, -x) over 16-lane blocks: the comparisons the
    lanes of a block always agree on are one branch, the others stay scalar, all
    correct."""
    x = rng.standard_normal((4, 16)).astype(np.float32)
    cmp = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal}

    def f(t, blk, k):
        ch = (blk * 16 + k) * sign
        bnd = te.const(bound * sign, "int64")
        cond = {"<": ch < bnd, "<=": ch <= bnd, ">": ch > bnd, ">=": ch >= bnd}[op]
        return te.select(cond, t[blk, k], -t[blk, k])

    got, scalar, src = _vector_and_scalar(x.shape, f, [x], "k_idx")
    ch = np.arange(64).reshape(4, 16) * sign
    want = np.where(cmp[op](ch, bound * sign), x, -x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(scalar, want)
    # the lanes agree when the first true (or false) channel starts a block
    first = {"<": bound, "<=": bound + 1, ">": bound + 1, ">=": bound}[op]
    if sign < 0:
        first = {"<": bound + 1, "<=": bound, ">": bound, ">=": bound + 1}[op]
    assert ("/* o_i1: 16 lanes */" in src) == (first % 16 == 0)


def test_channel_shuffle_of_blocks_gathers_lane_by_lane():
    """A channel shuffle of 3 groups in (N, C/16, H, W, 16) uint8 blocks: each output lane
    reads its own block and lane (a divide and a remainder of the channel), one vector
    store per pixel."""
    c, g, hw = 48, 3, 5
    x = rng.integers(0, 255, (c // 16, hw, 16), dtype=np.uint8)

    def f(t, b, j, k):
        ch = b * 16 + k
        src = (ch % g) * (c // g) + ch // g
        return t[src // 16, j, src % 16]

    got, scalar, src = _vector_and_scalar((c // 16, hw, 16), f, [x], "k_shuffle")
    flat = x.transpose(0, 2, 1).reshape(c, hw)
    perm = flat.reshape(g, c // g, hw).transpose(1, 0, 2).reshape(c, hw)
    want = perm.reshape(c // 16, 16, hw).transpose(0, 2, 1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(scalar, want)
    _assert_vector(src, 16, "o_i2")
    assert "pk_u8x16 pk_t" in src


def test_concat_with_a_clamped_channel_gathers_and_quantizes_in_vectors():
    """Two NCHW parts (8 + 12 channels) into 16-channel blocks, the last block's extra
    lanes reading the last channel, then relu and quantize: the parts are picked lane by
    lane, the arithmetic is vector code."""
    a = rng.standard_normal((8, 6)).astype(np.float32) * 20
    b = rng.standard_normal((12, 6)).astype(np.float32) * 20

    def f(ta, tb, blk, j, k):
        ch = te.min_(blk * 16 + k, te.const(19, "int64"))
        v = te.select(ch < 8, ta[ch, j], tb[ch - 8, j])
        v = te.max_(v, te.const(0.0, "float32"))
        q = te.call("round", v / te.const(0.25, "float32"))
        return te.cast("uint8", te.min_(q, te.const(255.0, "float32")))

    got, scalar, src = _vector_and_scalar((2, 6, 16), f, [a, b], "k_catq")
    cat = np.concatenate([a, b])[np.minimum(np.arange(32), 19)]
    q = np.minimum(np.rint(np.maximum(cat, 0) / np.float32(0.25)), 255).astype(np.uint8)
    want = q.reshape(2, 16, 6).transpose(0, 2, 1)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(scalar, want)
    _assert_vector(src, 16, "o_i2")
    assert "__builtin_convertvector(" in src and "__builtin_shufflevector(" in src


@pytest.mark.parametrize("vector_bits", [128, 256, 512])
def test_image_quads_quantize_pixels_a_vector(vector_bits):
    """An RGB image into uint8 quads (the int8 layout's input, a channel per byte and the
    fourth repeating the third): the default schedule fuses each row with its quads and
    stores as many bytes a vector as one register holds floats (16 at 512 bits, 8 at
    256: never a float vector wider than a register, which GCC compares lane by lane in
    general registers), the pixels' channels gathered lane by lane; at 128 bits a quad
    of bytes is too short a vector and the loop stays scalar. Bytes equal to the scalar
    quantize's."""
    from packager.ops.quantized import quantize_blocked
    from packager.target import CpuTarget
    from packager.te.schedule import default_schedule

    img = rng.uniform(-2, 2, (1, 3, 4, 12)).astype(np.float32)
    img[0, :, 0, :4] = [[0.0, 0.125, -0.125, 0.375]] * 3  # ties at a scale of 0.25
    scale, zp = np.array(0.25, np.float32), np.array(128, np.uint8)
    ins = [te.placeholder(a.shape, str(a.dtype), f"x{k}") for k, a in enumerate([img, scale, zp])]
    (q,) = quantize_blocked(ins, {"block": 4})
    sch = default_schedule([q], CpuTarget(vector_bits=vector_bits, features=()))
    (got,), src = run(sch, [*ins, q], f"k_quads{vector_bits}", [img, scale, zp])
    want = np.clip(np.rint(img / scale) + 128, 0, 255).astype(np.uint8)
    want = want[:, [0, 1, 2, 2]].transpose(0, 2, 3, 1)[:, None]
    np.testing.assert_array_equal(got, want)
    lanes = vector_bits // 32
    wider = [f"pk_f32x{n}" for n in (8, 16, 32, 64) if n > lanes]
    assert not [w for w in wider if w in src], src
    if lanes > 4:
        assert re.search(rf"/\* \w+: {lanes} lanes \*/", src)
        assert f"pk_u8x{lanes}" in src and "#pragma GCC ivdep" not in src
    else:
        assert "lanes */" not in src


def test_gathered_loads_at_computed_indices_share_their_index_math():
    """Nearest-neighbour reads (an index computed in float from the lane's own position,
    used by two loads): each lane's index is its own scalar code, never a vector temp
    naming the lane variable."""
    x = rng.standard_normal((3, 10)).astype(np.float32)

    def f(t, i, j):
        pos = te.call("floor", te.cast("float32", j) * te.const(0.6, "float32"))
        k0 = te.cast("int64", pos)
        k1 = te.cast("int64", pos + te.const(1.0, "float32"))
        return t[i, te.min_(k0, te.const(9, "int64"))] + t[i, te.min_(k1, te.const(9, "int64"))]

    got, scalar, src = _vector_and_scalar((3, 16), f, [x], "k_nearest")
    k = np.floor(np.arange(16, dtype=np.float32) * np.float32(0.6)).astype(np.int64)
    want = x[:, np.minimum(k, 9)] + x[:, np.minimum(k + 1, 9)]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(scalar, want)
    _assert_vector(src, 16)


@pytest.mark.parametrize("vector_bits", [256, 512])
def test_byte_stores_computed_in_float_take_one_float_register(vector_bits):
    """A quantize of a float row into bytes: the default schedule's vector holds as many
    lanes as a register holds floats (8 at 256 bits, 16 at 512), not as many bytes."""
    from packager.ops.quantized import quantize_linear
    from packager.target import CpuTarget
    from packager.te.schedule import default_schedule

    x = rng.uniform(-40, 40, (2, 64)).astype(np.float32)
    scale, zp = np.array(0.25, np.float32), np.array(3, np.int8)
    ins = [te.placeholder(a.shape, str(a.dtype), f"x{k}") for k, a in enumerate([x, scale, zp])]
    (q,) = quantize_linear(ins, {})
    sch = default_schedule([q], CpuTarget(vector_bits=vector_bits, features=()))
    (got,), src = run(sch, [*ins, q], f"k_qrow{vector_bits}", [x, scale, zp])
    np.testing.assert_array_equal(got, np.clip(np.rint(x / 0.25) + 3, -128, 127).astype(np.int8))
    assert re.search(rf"/\* \w+: {vector_bits // 32} lanes \*/", src), src


@pytest.mark.parametrize("dtype", ["int64", "float64"])
def test_stages_of_64_bit_elements_keep_their_own_lanes(dtype):
    """A stage computing only 64-bit elements has nothing narrower to size its vector
    by: its own lanes (8 at 512 bits), as before the cap."""
    from packager.target import CpuTarget
    from packager.te.schedule import default_schedule

    a = (rng.integers(-1000, 1000, (3, 16)) * 7).astype(dtype)
    b = rng.integers(-1000, 1000, (3, 16)).astype(dtype)
    x, y = te.placeholder(a.shape, dtype, "x"), te.placeholder(b.shape, dtype, "y")
    o = te.compute(a.shape, lambda i, j: x[i, j] * y[i, j] + x[i, j], name="o")
    sch = default_schedule([o], CpuTarget(vector_bits=512, features=()))
    (got,), src = run(sch, [x, y, o], f"k_wide_{dtype}", [a, b])
    np.testing.assert_array_equal(got, a * b + a)
    assert re.search(r"/\* \w+: 8 lanes \*/", src), src
