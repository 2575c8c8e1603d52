"""The int8 dot-product intrinsics the integer conv/dense schedules tensorize with.

Each computes ``acc[l] += sum_{k<4} a[k] * w[l][k]`` for the L int32 lanes of one
vector (a: 4 activations, uint8 or int8, broadcast to every lane; w: int8, [L][4]; every
product widened, the sums exact in int32), declared as a TE compute and written in C
with the instructions of one ISA, guarded by the macro the compiler defines for it, over
a scalar loop (a build whose flags lack the ISA still compiles and computes the same).

Which one a target gets (``dot4_intrin``), by the activation type and the profile's
``features`` (the arch where a profile lists none):

  x86, uint8, avx512_vnni, L=16   vpdpbusd zmm (_mm512_dpbusd_epi32): u8 x s8, one instr
  x86, uint8, avx_vnni, L=8       vpdpbusd ymm (_mm256_dpbusd_avx_epi32)
  x86, uint8, weights that fit    vpmaddubsw (u8 x s8 byte pairs to int16) + vpmaddwd with
  (byte_pairs_fit), no VNNI       ones: exact only where every weight pair's 255-fold sum
                                  stays within int16 (7-bit weights always do; 255 * 127
                                  * 2 > 32767 does not), which the quantize pass checks
  x86 otherwise (int8 too)        AVX2: both operands widened to int16
                                  (_mm256_cvtep{u,i}8_epi16) then _mm256_madd_epi16 (exact
                                  int32 pair sums) and a horizontal add (a full conv takes
                                  int16 weight pairs instead: pair_intrin)
  aarch64, int8, asimddp          sdot (vdotq_s32)
  aarch64, int8, no dotprod       smull (vmull_s8) + saddlp (vpaddlq_s16) + addp
  armv7 NEON, int8                vmull.s8 + vpaddl.s16 + vpadd.i32
  ARM, uint8                      both widened to int16 (ushll/sshll), smull.4s +
                                  addp: sdot multiplies signed bytes only, and a uint8
                                  activation minus 128 would need a per-channel
                                  correction (128 * sum(w)) in the bias; quantize with
                                  int8 activations (QuantType.QInt8) to get sdot
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np

from .. import te
from ..target import CpuTarget
from ..te.simplify import simplify
from ..te.tensorize import TensorIntrin

_CT = {"uint8": "uint8_t", "int8": "int8_t", "int16": "int16_t"}
_SHORT = {"uint8": "u8", "int8": "s8"}


def _declare(name: str, a: te.Tensor, w: te.Tensor, a_at) -> te.Tensor:
    """out[l] = sum_k int32(a_at(l, k)) * int32(w[l, k]) over w's (L, K)."""
    lanes, depth = w.shape
    k = te.reduce_axis(depth, "k")
    return te.compute(
        (lanes,),
        lambda j: te.sum(te.cast("int32", a_at(j, k)) * te.cast("int32", w[(j, k)]), [k]),
        name=name,
    )


def declaration(act: str, lanes: int) -> te.Tensor:
    """out[l] = sum_k int32(a[k]) * int32(w[l, k])."""
    a = te.placeholder((4,), act, "a")
    w = te.placeholder((lanes, 4), "int8", "w")
    return _declare(f"dot4_{_SHORT[act]}x{lanes}", a, w, lambda j, k: a[k])


def _keep(v: str) -> str:
    """An empty asm that takes and gives back the vector ``v``: GCC must hold the sum in
    a register there, so it cannot reassociate a tile's unrolled chain of integer adds
    (acc + s1 + s2 + s3 into (s1 + s2) + (s3 + acc)), which kept partial sums live and
    spilled the accumulators to the stack (tv_resnet18's 3x3 int8 convs, Zen 3: the
    kernels ran 5% faster with it, bench/ab_bundles.py). Float FMAs are not reassociated
    without -ffast-math and need none."""
    return f'__asm__("" : "+v"({v}));'


def _avx512_vnni(act: str, lanes: int) -> str:
    return """    int32_t a4;
    __builtin_memcpy(&a4, a, 4);
    __m512i c = _mm512_loadu_si512((const void *)acc);
    c = _mm512_dpbusd_epi32(c, _mm512_set1_epi32(a4), _mm512_loadu_si512((const void *)w));
    _mm512_storeu_si512((void *)acc, c);"""


def _avx_vnni(act: str, lanes: int) -> str:
    return """    int32_t a4;
    __builtin_memcpy(&a4, a, 4);
    __m256i c = _mm256_loadu_si256((const __m256i *)acc);
    c = _mm256_dpbusd_avx_epi32(c, _mm256_set1_epi32(a4),
                                _mm256_loadu_si256((const __m256i *)w));
    _mm256_storeu_si256((__m256i *)acc, c);"""


def _avx2(act: str, lanes: int) -> str:
    widen = "_mm256_cvtepu8_epi16" if act == "uint8" else "_mm256_cvtepi8_epi16"
    # madd of lanes 0-3 (lo) and 4-7 (hi) gives each lane's two pair sums; hadd makes
    # [l0 l1 l4 l5 | l2 l3 l6 l7], the permute puts the 64-bit pairs in order
    return f"""    int32_t a4;
    __builtin_memcpy(&a4, a, 4);
    const __m256i a16 = {widen}(_mm_set1_epi32(a4));
    for (int h = 0; h < {lanes // 8}; ++h) {{
        const __m256i w8 = _mm256_loadu_si256((const __m256i *)(w + 32 * h));
        const __m256i lo =
            _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(w8)), a16);
        const __m256i hi =
            _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(w8, 1)), a16);
        const __m256i s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo, hi), 0xD8);
        __m256i c = _mm256_loadu_si256((const __m256i *)(acc + 8 * h));
        c = _mm256_add_epi32(c, s);
        {_keep("c")}
        _mm256_storeu_si256((__m256i *)(acc + 8 * h), c);
    }}"""


def _avx2_byte_pairs(act: str, lanes: int) -> str:
    # vpmaddubsw: u8 x s8 byte pairs to int16 sums, exact only for weights whose every
    # pair fits (byte_pairs_fit); vpmaddwd with ones then sums a lane's two pairs
    return f"""    int32_t a4;
    __builtin_memcpy(&a4, a, 4);
    const __m256i av = _mm256_set1_epi32(a4);
    for (int h = 0; h < {lanes // 8}; ++h) {{
        const __m256i w8 = _mm256_loadu_si256((const __m256i *)(w + 32 * h));
        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(av, w8), _mm256_set1_epi16(1));
        __m256i c = _mm256_loadu_si256((const __m256i *)(acc + 8 * h));
        c = _mm256_add_epi32(c, s);
        {_keep("c")}
        _mm256_storeu_si256((__m256i *)(acc + 8 * h), c);
    }}"""


def byte_pairs_fit(w: np.ndarray) -> bool:
    """Whether int8 weights packed in quads (last axis 4) multiply any uint8 activations
    exactly with vpmaddubsw: each pair (0, 1) and (2, 3) of a quad sums its positive
    weights to at most 128 and its negative ones to at least -128, so 255 times either
    stays within int16 (255 * 128 = 32640). Weights quantized to 7 bits ([-64, 64],
    onnxruntime's reduce_range, `packager quantize --weight-bits 7`) always fit."""
    pairs = w.reshape(-1, 2).astype(np.int32)
    pos = np.maximum(pairs, 0).sum(1)
    neg = np.minimum(pairs, 0).sum(1)
    return bool(w.shape[-1] == 4 and pos.max(initial=0) <= 128 and neg.min(initial=0) >= -128)


def _sdot(act: str, lanes: int) -> str:
    return """    int32_t a4;
    __builtin_memcpy(&a4, a, 4);
    const int8x16_t av = vreinterpretq_s8_s32(vdupq_n_s32(a4));
    vst1q_s32(acc, vdotq_s32(vld1q_s32(acc), vld1q_s8(w), av));"""


_PAIRS = {  # int32x4 x, y of pair sums -> [x0+x1, x2+x3, y0+y1, y2+y3]
    "aarch64": "vpaddq_s32({x}, {y})",
    "armv7": "vcombine_s32(vpadd_s32(vget_low_s32({x}), vget_high_s32({x})), "
    "vpadd_s32(vget_low_s32({y}), vget_high_s32({y})))",
}


def _neon(arch: str):
    pairs = _PAIRS[arch]

    def body(act: str, lanes: int) -> str:
        head = """    int32_t a4;
    __builtin_memcpy(&a4, a, 4);
    const int8x16_t wv = vld1q_s8(w);
"""
        if act == "int8":
            # s8 x s8 fits int16: 8 products per smull, pairs then lanes summed
            lo, hi = "vpaddlq_s16(p0)", "vpaddlq_s16(p1)"
            return (
                head
                + f"""    const int8x8_t av = vreinterpret_s8_s32(vdup_n_s32(a4));
    const int16x8_t p0 = vmull_s8(vget_low_s8(wv), av);
    const int16x8_t p1 = vmull_s8(vget_high_s8(wv), av);
    const int32x4_t s = {pairs.format(x=lo, y=hi)};
    vst1q_s32(acc, vaddq_s32(vld1q_s32(acc), s));"""
            )
        q01 = pairs.format(x="q0", y="q1")
        q23 = pairs.format(x="q2", y="q3")
        return (
            head
            + f"""    const int16x8_t a16 =
        vreinterpretq_s16_u16(vmovl_u8(vreinterpret_u8_s32(vdup_n_s32(a4))));
    const int16x4_t al = vget_low_s16(a16);
    const int16x8_t wl = vmovl_s8(vget_low_s8(wv));
    const int16x8_t wh = vmovl_s8(vget_high_s8(wv));
    const int32x4_t q0 = vmull_s16(vget_low_s16(wl), al);
    const int32x4_t q1 = vmull_s16(vget_high_s16(wl), al);
    const int32x4_t q2 = vmull_s16(vget_low_s16(wh), al);
    const int32x4_t q3 = vmull_s16(vget_high_s16(wh), al);
    const int32x4_t t01 = {q01};
    const int32x4_t t23 = {q23};
    const int32x4_t s = {pairs.format(x="t01", y="t23")};
    vst1q_s32(acc, vaddq_s32(vld1q_s32(acc), s));"""
        )

    return body


# name, guard macro, header, body(act, lanes), lanes it takes (None: multiples of 8)
_ISAS = {
    "avx512_vnni": ("vpdpbusd zmm", "defined(__AVX512VNNI__)", "immintrin.h", _avx512_vnni),
    "avx_vnni": ("vpdpbusd ymm", "defined(__AVXVNNI__)", "immintrin.h", _avx_vnni),
    "avx2": ("vpmaddwd", "defined(__AVX2__)", "immintrin.h", _avx2),
    "avx2_byte_pairs": ("vpmaddubsw", "defined(__AVX2__)", "immintrin.h", _avx2_byte_pairs),
    "sdot": ("sdot", "defined(__ARM_FEATURE_DOTPROD)", "arm_neon.h", _sdot),
    "neon64": (
        "smull",
        "defined(__aarch64__) && defined(__ARM_NEON)",
        "arm_neon.h",
        _neon("aarch64"),
    ),
    "neon32": (
        "vmull.s8",
        "defined(__ARM_NEON) && !defined(__aarch64__)",
        "arm_neon.h",
        _neon("armv7"),
    ),
}


def _gcc_pragma(line: str) -> str:
    return f"#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC {line}\n#endif\n"


# Pragmas a body brings to its kernel's file (each kernel is a file of its own; GCC
# applies them to every function after them, and still inlines the ones before).
# With 512-bit intrinsics the rest of the kernel (the requantize epilogue) vectorizes
# at that width too: GCC prefers 256-bit vectors by default on these cores.
PRAGMAS = {"avx512_vnni": _gcc_pragma('target("prefer-vector-width=512")')}
PRAGMAS["avx512bw"] = PRAGMAS["avx512f"] = PRAGMAS["avx512_vnni"]


def isa_for(act: str, lanes: int, target: CpuTarget) -> str | None:
    """Which body suits the target (None: only the scalar loop)."""
    feats = set(target.features)
    if target.arch == "x86_64":
        if act == "uint8" and lanes == 16 and "avx512_vnni" in feats:
            return "avx512_vnni"
        if act == "uint8" and lanes == 8 and "avx_vnni" in feats:
            return "avx_vnni"
        return "avx2" if lanes % 8 == 0 else None
    if lanes != 4:
        return None
    if target.arch == "aarch64":
        return "sdot" if act == "int8" and "asimddp" in feats else "neon64"
    if target.arch == "armv7":
        return "neon32"
    return None


def _c_def(
    name: str, act: str, lanes: int, isa: str | None, isas=None, a_at="k", depth=4, wt="int8"
) -> str:
    """The intrinsic's C: ``isas[isa]``'s body under its guard over the scalar loop
    (``a_at``: where lane l's k-th activation lies; ``depth`` products per lane, weights
    of type ``wt``)."""
    scalar = f"""    for (int l = 0; l < {lanes}; ++l) {{
        int32_t s = acc[l];
        for (int k = 0; k < {depth}; ++k)
            s += (int32_t)a[{a_at}] * (int32_t)w[{depth} * l + k];
        acc[l] = s;
    }}"""
    isas = isas or _ISAS
    body = isas[isa][3](act, lanes) if isa else ""
    return _guarded(name, act, wt, isas[isa] if isa else None, isa, body, scalar)


def _guarded(name: str, act: str, wt: str, entry, isa, body: str, scalar: str) -> str:
    """An intrinsic's C function ``name`` (acc, a of ``act``, w of ``wt``): ``body``
    under the guard of its ISA ``entry`` (label, guard, header, ...) with the ISA's
    PRAGMAS, over the ``scalar`` loop; the scalar loop alone without an entry."""
    head = (
        f"static inline void {name}(int32_t *restrict acc, const {_CT[act]} *restrict a,\n"
        f"    const {_CT[wt]} *restrict w) {{"
    )
    if not entry:
        return f"{head}\n{scalar}\n}}"
    _, guard, header = entry[:3]
    return (
        f"#if {guard}\n#include <{header}>\n{PRAGMAS.get(isa, '')}#endif\n{head}\n#if {guard}\n"
        f"{body}\n#else\n{scalar}\n#endif\n}}"
    )


@functools.cache
def _intrin(act: str, lanes: int, isa: str | None) -> TensorIntrin:
    name = f"pk_dot4_{_SHORT[act]}x{lanes}_{isa or 'scalar'}"
    label = _ISAS[isa][0] if isa else "scalar"
    return TensorIntrin(name, declaration(act, lanes), _c_def(name, act, lanes, isa), label)


def dot4_intrin(act: str, lanes: int, target: CpuTarget, byte_pairs: bool = False) -> TensorIntrin:
    """The dot-product intrinsic for ``act`` activations in ``lanes`` int32 lanes;
    ``byte_pairs``: the weights fit vpmaddubsw (byte_pairs_fit), which AVX2 then takes
    for uint8 activations where it has no VNNI."""
    isa = isa_for(act, lanes, target)
    if byte_pairs and isa == "avx2" and act == "uint8":
        isa = "avx2_byte_pairs"
    return _intrin(act, lanes, isa)


# --- depthwise: one multiply-add per lane ----------------------------------------


def mac_declaration(act: str, lanes: int) -> te.Tensor:
    """out[l] = sum_{k<1} int32(a[l]) * int32(w[l, k]): a depthwise tap, L activations
    times L weights, each product widened (k: the conv's one input channel per group)."""
    a = te.placeholder((lanes,), act, "a")
    w = te.placeholder((lanes, 1), "int8", "w")
    return _declare(f"mac_{_SHORT[act]}x{lanes}", a, w, lambda j, k: a[j])


def _mac_x86(width: int):
    """vpmaddwd of the 32-bit widened operands: one of each lane's int16 halves is zero
    (the uint8 activation's, or the weight's masked), so the pair sum is the exact
    product, in one instruction rather than vpmulld's two."""
    p, load, cvt = {
        512: ("_mm512", "_mm_loadu_si128((const __m128i *)({}))", "_mm512_cvtep{}8_epi32"),
        256: ("_mm256", "_mm_loadl_epi64((const __m128i *)({}))", "_mm256_cvtep{}8_epi32"),
    }[width]
    step = width // 32
    si = f"si{width}"

    def body(act: str, lanes: int) -> str:
        a = cvt.format("u" if act == "uint8" else "i") + "(" + load.format("a + n") + ")"
        w = cvt.format("i") + "(" + load.format("w + n") + ")"
        if act == "int8":  # the weight's upper half zero: a_lo * w + a_hi * 0
            w = f"{p}_and_{si}({w}, {p}_set1_epi32(0xFFFF))"
        return f"""    for (int n = 0; n < {lanes}; n += {step}) {{
        __m{width}i c = {p}_loadu_{si}((const void *)(acc + n));
        c = {p}_add_epi32(c, {p}_madd_epi16({a}, {w}));
        {_keep("c")}
        {p}_storeu_{si}((void *)(acc + n), c);
    }}"""

    return body


_MAC_ISAS = {
    "avx512bw": ("vpmaddwd zmm", "defined(__AVX512BW__)", "immintrin.h", _mac_x86(512)),
    "avx2": ("vpmaddwd ymm", "defined(__AVX2__)", "immintrin.h", _mac_x86(256)),
}


def mac_isa_for(lanes: int, target: CpuTarget) -> str | None:
    """The depthwise body for the target, None where only a scalar loop would do (the
    schedule then leaves the lanes to the compiler's vectorizer)."""
    if target.arch != "x86_64":
        return None
    if lanes % 16 == 0 and target.vector_bits >= 512:
        return "avx512bw"
    return "avx2" if lanes % 8 == 0 else None


@functools.cache
def _mac(act: str, lanes: int, isa: str) -> TensorIntrin:
    name = f"pk_mac_{_SHORT[act]}x{lanes}_{isa}"
    entry = _MAC_ISAS[isa]
    scalar = f"""    for (int l = 0; l < {lanes}; ++l) acc[l] += (int32_t)a[l] * (int32_t)w[l];"""
    c_def = _guarded(name, act, "int8", entry, isa, entry[3](act, lanes), scalar)
    return TensorIntrin(name, mac_declaration(act, lanes), c_def, entry[0])


def mac_intrin(act: str, lanes: int, target: CpuTarget) -> TensorIntrin | None:
    """The depthwise multiply-add intrinsic for ``lanes`` int32 lanes, or None."""
    isa = mac_isa_for(lanes, target)
    return _mac(act, lanes, isa) if isa else None


# --- depthwise in quads of taps: one dot-product step per 4 taps ------------------


def dwdot_declaration(act: str, lanes: int) -> te.Tensor:
    """out[l] = sum_k int32(a[k, l]) * int32(w[l, k]): 4 taps of a depthwise conv at
    once (a: the L channels of 4 consecutive input pixels, as the blocked input holds
    them; w: each channel's 4 tap weights together)."""
    a = te.placeholder((4, lanes), act, "a")
    w = te.placeholder((lanes, 4), "int8", "w")
    return _declare(f"dwdot_{_SHORT[act]}x{lanes}", a, w, lambda j, k: a[(k, j)])


# The 4 pixels x L channels the input holds are turned into L channels x 4 taps: the
# 32-bit words holding channels 4i..4i+3 of each pixel are gathered into 128-bit lane i
# (vpermd), then each lane's 4x4 bytes are transposed (vpshufb); the dot product of
# each 32-bit word with the channel's 4 weights is one vpdpbusd (u8 x s8, exact int32).
_TRANSPOSE4 = "0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15"


def _dw_avx512_vnni(act: str, lanes: int) -> str:
    # with AVX512-VBMI (Ice Lake, Zen 4) one vpermb does the whole transpose
    order = ", ".join(str(16 * (p % 4) + p // 4) for p in range(64))
    return f"""#if defined(__AVX512VBMI__)
    static const uint8_t order[64] = {{{order}}};
    const __m512i t =
        _mm512_permutexvar_epi8(_mm512_loadu_si512((const void *)order),
                                _mm512_loadu_si512((const void *)a));
#else
    const __m512i words = _mm512_setr_epi32({_TRANSPOSE4});
    const __m512i bytes = _mm512_broadcast_i32x4(_mm_setr_epi8({_TRANSPOSE4}));
    const __m512i t = _mm512_shuffle_epi8(
        _mm512_permutexvar_epi32(words, _mm512_loadu_si512((const void *)a)), bytes);
#endif
    __m512i c = _mm512_loadu_si512((const void *)acc);
    c = _mm512_dpbusd_epi32(c, t, _mm512_loadu_si512((const void *)w));
    _mm512_storeu_si512((void *)acc, c);"""


def _dw_avx_vnni(act: str, lanes: int) -> str:
    return f"""    const __m256i words = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    const __m256i bytes = _mm256_broadcastsi128_si256(_mm_setr_epi8({_TRANSPOSE4}));
    const __m256i t = _mm256_shuffle_epi8(
        _mm256_permutevar8x32_epi32(_mm256_loadu_si256((const __m256i *)a), words), bytes);
    __m256i c = _mm256_loadu_si256((const __m256i *)acc);
    c = _mm256_dpbusd_avx_epi32(c, t, _mm256_loadu_si256((const __m256i *)w));
    _mm256_storeu_si256((__m256i *)acc, c);"""


def _dw_sdot(act: str, lanes: int) -> str:
    return f"""    static const uint8_t order[16] = {{{_TRANSPOSE4}}};
    const int8x16_t t = vqtbl1q_s8(vld1q_s8(a), vld1q_u8(order));
    vst1q_s32(acc, vdotq_s32(vld1q_s32(acc), t, vld1q_s8(w)));"""


_DW_ISAS = {
    "avx512_vnni": (
        "vpdpbusd zmm",
        "defined(__AVX512VNNI__) && defined(__AVX512BW__)",
        "immintrin.h",
        _dw_avx512_vnni,
    ),
    "avx_vnni": ("vpdpbusd ymm", "defined(__AVXVNNI__)", "immintrin.h", _dw_avx_vnni),
    "sdot": ("sdot", "defined(__ARM_FEATURE_DOTPROD)", "arm_neon.h", _dw_sdot),
}


def dwdot_isa_for(act: str, lanes: int, target: CpuTarget) -> str | None:
    """The ISA whose dot product runs a depthwise conv 4 taps at a time, None where the
    target has none (the conv then takes one multiply-add per tap, ``mac_intrin``).
    The quantize pass packs a depthwise conv's weights in quads of taps only then."""
    isa = isa_for(act, lanes, target)
    return isa if isa in _DW_ISAS else None


@functools.cache
def _dwdot(act: str, lanes: int, isa: str | None) -> TensorIntrin:
    name = f"pk_dwdot_{_SHORT[act]}x{lanes}_{isa or 'scalar'}"
    c_def = _c_def(name, act, lanes, isa, _DW_ISAS, f"{lanes} * k + l")
    label = _DW_ISAS[isa][0] if isa else "scalar"
    return TensorIntrin(name, dwdot_declaration(act, lanes), c_def, label)


def dwdot_intrin(act: str, lanes: int, target: CpuTarget) -> TensorIntrin:
    """The depthwise quad-of-taps intrinsic for ``lanes`` int32 lanes."""
    return _dwdot(act, lanes, dwdot_isa_for(act, lanes, target))


# --- x86 without a dot product: depthwise in pairs of columns ---------------------


def dwpair_declaration(act: str, lanes: int, pairs: int, phases: int, steps: int) -> te.Tensor:
    """out[t, r, l] = sum_{j<steps, k<2} int32(a[2(t+j)+k, l]) * int32(w[r, j, l, k]):
    a depthwise tile of ``pairs`` column pairs, each pair's ``phases`` output columns
    (2 at stride 1, 1 at stride 2), over one kernel row in ``steps`` pairs of taps (a:
    the L channels of 2 * (pairs + steps - 1) consecutive input pixels, as the blocked
    padded input holds them; w: each phase's and step's int16 tap pairs per channel,
    quantize.pack_dw_pairs)."""
    span = 2 * (pairs + steps - 1)
    a = te.placeholder((span, lanes), act, "a")
    w = te.placeholder((phases, steps, lanes, 2), "int16", "w")
    j, k = te.reduce_axis(steps, "j"), te.reduce_axis(2, "k")

    def f(t, r, ln):
        prod = te.cast("int32", a[(2 * (t + j) + k, ln)]) * te.cast("int32", w[(r, j, ln, k)])
        return te.sum(prod, [j, k])

    name = f"dwpair_{_SHORT[act]}x{lanes}_t{pairs}r{phases}s{steps}"
    return te.compute((pairs, phases, lanes), f, name=name)


# A pair of neighbouring pixels' 8 channels (16 bytes, loaded into both 128-bit halves)
# becomes 8 int16 pairs, channel l's two pixels side by side in 32-bit lane l: one
# vpshufb interleaves and zero-extends the uint8 bytes (an index with its top bit set
# writes 0); int8 bytes are interleaved, then sign-extended (vpmovsxbw). vpmaddwd with
# the channel's two tap weights gives each lane's exact 2-product sum. Every pair the
# tile reads is built once and serves each output column it falls in: at stride 1 the
# columns 2t and 2t+1 (weights (k0, k1), (k2, 0) and (0, k0), (k1, k2) for 3 taps), so
# a 3-tap row costs 2 vpmaddwd a column where one tap a step costs 3 widening loads
# and 3 vpmaddwd.
_U8_PAIRS = ", ".join(
    f"{h * 4 + i // 2 + (8 if i % 2 else 0)}, -128" for h in range(2) for i in range(8)
)
_S8_PAIRS = "0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15"


def _dwpair_avx2(act: str, pairs: int, phases: int, steps: int) -> str:
    accs = pairs * phases
    lines = [f"    __m256i c[{accs}];"]
    lines.append(
        f"    for (int i = 0; i < {accs}; ++i) "
        "c[i] = _mm256_loadu_si256((const void *)(acc + 8 * i));"
    )
    if act == "uint8":
        lines.append(f"    const __m256i order = _mm256_setr_epi8({_U8_PAIRS});")
    else:
        lines.append(f"    const __m128i order = _mm_setr_epi8({_S8_PAIRS});")
    for p in range(pairs + steps - 1):
        src = f"_mm_loadu_si128((const void *)(a + {16 * p}))"
        if act == "uint8":
            v = f"_mm256_shuffle_epi8(_mm256_broadcastsi128_si256({src}), order)"
        else:
            v = f"_mm256_cvtepi8_epi16(_mm_shuffle_epi8({src}, order))"
        lines.append(f"    {{ const __m256i v = {v};")
        for j in range(steps):
            t = p - j
            if not 0 <= t < pairs:
                continue
            for r in range(phases):
                wv = f"_mm256_loadu_si256((const void *)(w + {16 * (r * steps + j)}))"
                i = t * phases + r
                lines.append(
                    f"      c[{i}] = _mm256_add_epi32(c[{i}], _mm256_madd_epi16(v, {wv}));"
                )
        lines.append("    }")
    lines.append(
        f"    for (int i = 0; i < {accs}; ++i) _mm256_storeu_si256((void *)(acc + 8 * i), c[i]);"
    )
    return "\n".join(lines)


_DWPAIR_ISAS = {"avx2": ("vpmaddwd ymm", "defined(__AVX2__)", "immintrin.h")}


def dwpair_isa_for(act: str, lanes: int, target: CpuTarget) -> str | None:
    """x86 with 8 lanes and no dot product for a depthwise conv's taps (dwdot_isa_for):
    the AVX2 pair body; None elsewhere. The quantize pass packs a depthwise conv's
    weights in pairs of taps only then."""
    if target.arch != "x86_64" or lanes != 8 or dwdot_isa_for(act, lanes, target):
        return None
    return "avx2"


@functools.cache
def _dwpair(act: str, lanes: int, pairs: int, phases: int, steps: int, isa: str | None):
    decl = dwpair_declaration(act, lanes, pairs, phases, steps)
    name = f"pk_{decl.op.name}_{isa or 'scalar'}"
    scalar = f"""    for (int t = 0; t < {pairs}; ++t)
        for (int r = 0; r < {phases}; ++r)
            for (int l = 0; l < {lanes}; ++l) {{
                int32_t s = acc[({phases} * t + r) * {lanes} + l];
                for (int j = 0; j < {steps}; ++j)
                    for (int k = 0; k < 2; ++k)
                        s += (int32_t)a[(2 * (t + j) + k) * {lanes} + l] *
                             (int32_t)w[((r * {steps} + j) * {lanes} + l) * 2 + k];
                acc[({phases} * t + r) * {lanes} + l] = s;
            }}"""
    entry = _DWPAIR_ISAS.get(isa)
    body = _dwpair_avx2(act, pairs, phases, steps) if entry else ""
    c_def = _guarded(name, act, "int16", entry, isa, body, scalar)
    return TensorIntrin(name, decl, c_def, entry[0] if entry else "scalar")


def dwpair_intrin(
    act: str, lanes: int, pairs: int, phases: int, steps: int, target: CpuTarget
) -> TensorIntrin:
    """The depthwise column-pair intrinsic (dwpair_declaration) for the target."""
    return _dwpair(act, lanes, pairs, phases, steps, dwpair_isa_for(act, lanes, target))


# --- the requantize epilogue: L int32 accumulators to L output bytes ----------------


_VEC = {  # vector bits: (intrinsic prefix, integer type suffix, odd-lane blend)
    512: ("_mm512", "si512", "_mm512_mask_blend_epi32(0xAAAA, even, odd)"),
    256: ("_mm256", "si256", "_mm256_blend_epi32(even, odd, 0xAA)"),
}


def _requant_x86(
    width: int, zp: int, out: str, add: dict | None = None, res: str = "", bounds=None
) -> str:
    """The body: q = the mulhi epilogue of acc (rows p0..p5), clamped within ``out``
    (at the constants ``bounds`` where every channel's rows p4 and p5 are those);
    with ``add`` (quantized._qadd's attrs, int32 form) q then adds the residual ``r``
    (``res`` bytes): s = (q - a_zp) * a_mult + (r - b_zp) * b_mult, clamped at [lo, hi],
    rounded and shifted, plus y_zp, saturated; stored as bytes (vpmovdb, or packs)."""
    p, si, blend = _VEC[width]

    def ld(v: str) -> str:
        return f"{p}_loadu_{si}((const void *){v})"

    def c(v: int) -> str:
        return f"{p}_set1_epi32({_lit(v)})"

    lines = [
        f"    const __m{width}i a = {p}_add_epi32({ld('acc')}, {ld('p0')});",
        f"    const __m{width}i m = {ld('p1')};",
        f"    const __m{width}i even = {p}_srli_epi64({p}_mul_epi32(a, m), 32);",
        f"    const __m{width}i odd = {p}_mul_epi32({p}_srli_epi64(a, 32), {p}_srli_epi64(m, 32));",
        f"    __m{width}i q = {blend};",
        f"    q = {p}_srav_epi32({p}_add_epi32(q, {ld('p2')}), {ld('p3')});",
    ]
    if zp:
        lines.append(f"    q = {p}_add_epi32(q, {c(zp)});")
    lo_v, hi_v = (c(b) for b in bounds) if bounds else (ld("p4"), ld("p5"))
    if width == 512 or tuple(bounds or ()) != QRANGE[out]:
        # (bounds that are the type's own: the packs below saturate there alike)
        lines += [
            f"    q = {p}_max_epi32(q, {lo_v});",
            f"    q = {p}_min_epi32(q, {hi_v});",
        ]
    if add is not None:
        lo, hi = QRANGE[add["out_dtype"]]
        lines += _qadd_lines(width, add, res, "r")
        lines.append(f"    q = {p}_min_epi32({p}_max_epi32(q, {c(lo)}), {c(hi)});")
        out = add["out_dtype"]
    if width == 512:
        lines.append("    _mm_storeu_si128((__m128i *)y, _mm512_cvtepi32_epi8(q));")
    else:
        pack = "_mm_packus_epi16" if out == "uint8" else "_mm_packs_epi16"
        lines += [
            "    /* within the output type after the clamp: the saturating packs keep it */",
            "    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), "
            "_mm256_extracti128_si256(q, 1));",
            f"    _mm_storel_epi64((__m128i *)y, {pack}(w, w));",
        ]
    return "\n".join(lines)


def _qadd_lines(width: int, add: dict, res: str, r: str) -> list[str]:
    """The folded residual add on the clamped q in int32 lanes (quantized._qadd's int32
    form): s = (q - a_zp) * a_mult + (r - b_zp) * b_mult, clamped at [lo, hi], rounded
    and shifted, plus y_zp, into q; ``r`` points at the lanes' residual bytes."""
    p = _VEC[width][0]
    sign = "u" if res == "uint8" else "i"
    load_r = "_mm_loadu_si128" if width == 512 else "_mm_loadl_epi64"

    def c(v: int) -> str:
        return f"{p}_set1_epi32({_lit(v)})"

    return [
        f"    const __m{width}i rv = {p}_cvtep{sign}8_epi32({load_r}((const void *)({r})));",
        f"    __m{width}i s = {p}_add_epi32(",
        f"        {p}_mullo_epi32({p}_sub_epi32(q, {c(add['a_zp'])}), {c(add['a_mult'])}),",
        f"        {p}_mullo_epi32({p}_sub_epi32(rv, {c(add['b_zp'])}), {c(add['b_mult'])}));",
        f"    s = {p}_min_epi32({p}_max_epi32(s, {c(add['lo'])}), {c(add['hi'])});",
        f"    s = {p}_srai_epi32({p}_add_epi32(s, {c(1 << (add['shift'] - 1))}), {add['shift']});",
        f"    q = {p}_add_epi32(s, {c(add['y_zp'])});",
    ]


def _requant_cols_avx2(
    cols: int, zp: int, out: str, add: dict | None = None, res: str = "", bounds=None
) -> str:
    """The body over ``cols`` columns of 8 lanes (acc, y and r one column after
    another): each column's q as _requant_x86's before its clamp, then four columns at
    a time packed to 32 bytes with saturation (vpackssdw twice, one vpackuswb or
    vpacksswb, vpermd to restore the columns' order), clamped there at the bounds
    packed alike, and stored in one move; the last cols % 4 columns one at a time as
    _requant_x86. The same bytes: saturating to the output type and clamping at bounds
    within it commute (both monotone), and a bound outside the type saturates to its
    end. With ``add`` each column is clamped in int32 and adds its residual (_qadd_lines)
    before the packing, whose saturation is then the add's clamp to its type.
    ``bounds``: every channel's p4 and p5 as constants, which need no packing per call,
    and no clamp at all where they are the type's own range (the packs saturate there).
    """
    final = out if add is None else add["out_dtype"]
    pack, lo_op, hi_op = {
        "uint8": ("_mm256_packus_epi16", "_mm256_max_epu8", "_mm256_min_epu8"),
        "int8": ("_mm256_packs_epi16", "_mm256_max_epi8", "_mm256_min_epi8"),
    }[final]
    narrow = "_mm_packus_epi16" if final == "uint8" else "_mm_packs_epi16"

    def ld(v: str) -> str:
        return f"_mm256_loadu_si256((const void *){v})"

    if bounds:
        lo_v, hi_v = (f"_mm256_set1_epi32({_lit(b)})" for b in bounds)
    else:
        lo_v, hi_v = ld("p4"), ld("p5")
    clamp = f"q = _mm256_min_epi32(_mm256_max_epi32(q, {lo_v}), {hi_v});"
    lines = [
        f"const __m256i a = _mm256_add_epi32({ld('(acc + 8 * c)')}, bias);",
        "const __m256i even = _mm256_srli_epi64(_mm256_mul_epi32(a, m), 32);",
        "const __m256i odd = _mm256_mul_epi32(_mm256_srli_epi64(a, 32), m_odd);",
        "__m256i q = _mm256_srav_epi32(",
        "    _mm256_add_epi32(_mm256_blend_epi32(even, odd, 0xAA), rnd), shift);",
    ]
    if zp:
        lines.append(f"q = _mm256_add_epi32(q, _mm256_set1_epi32({_lit(zp)}));")
    if add is not None:
        lines.append(clamp)
        lines += [x[4:] for x in _qadd_lines(256, add, res, "r + 8 * c")]

    def step(indent: str) -> str:
        return f"\n{indent}".join(lines)

    packed = group_clamp = tail_clamp = ""
    # (with ``add``, or bounds that are the type's own, the packs' saturation clamps)
    if bounds and tuple(bounds) != QRANGE[final]:  # the bytes of the constant bounds
        packed = f"""
    const __m256i lo = _mm256_set1_epi8({_byte(bounds[0], final)});
    const __m256i hi = _mm256_set1_epi8({_byte(bounds[1], final)});"""
    elif add is None and not bounds:
        packed = f"""
    const __m256i lo16 = _mm256_packs_epi32({ld("p4")}, {ld("p4")});
    const __m256i hi16 = _mm256_packs_epi32({ld("p5")}, {ld("p5")});
    const __m256i lo = _mm256_permutevar8x32_epi32({pack}(lo16, lo16), order);
    const __m256i hi = _mm256_permutevar8x32_epi32({pack}(hi16, hi16), order);"""
    if packed:
        group_clamp = f"\n        v = {hi_op}({lo_op}(v, lo), hi);"
        tail_clamp = f"\n        {clamp}"
    return f"""    const __m256i m = {ld("p1")}, m_odd = _mm256_srli_epi64(m, 32);
    const __m256i bias = {ld("p0")}, rnd = {ld("p2")}, shift = {ld("p3")};
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);{packed}
    for (int g = 0; g + 4 <= {cols}; g += 4) {{
        __m256i qs[4];
        for (int k = 0; k < 4; ++k) {{
            const int c = g + k;
            {step("            ")}
            qs[k] = q;
        }}
        __m256i v = {pack}(_mm256_packs_epi32(qs[0], qs[1]), _mm256_packs_epi32(qs[2], qs[3]));
        v = _mm256_permutevar8x32_epi32(v, order);{group_clamp}
        _mm256_storeu_si256((void *)(y + 8 * g), v);
    }}
    for (int c = {cols} & ~3; c < {cols}; ++c) {{
        {step("        ")}{tail_clamp}
        const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q),
                                          _mm256_extracti128_si256(q, 1));
        _mm_storel_epi64((__m128i *)(y + 8 * c), {narrow}(w, w));
    }}"""


def _byte(v: int, out: str) -> str:
    """A bound within ``out``'s range as the char argument of _mm256_set1_epi8."""
    lo, hi = QRANGE[out]
    if not lo <= v <= hi:
        raise ValueError(f"requantize bound {v} outside {out}")
    return str(v - 256 if v > 127 else v)


def _lit(v: int) -> str:
    """An int32 C literal (INT32_MIN has none: 2147483648 is a long)."""
    return "(-2147483647 - 1)" if int(v) == -(2**31) else str(int(v))


# the integer types' ranges (packager/ops/quantized.py saturates to them too)
QRANGE = {
    "int8": (-128, 127),
    "uint8": (0, 255),
    "int16": (-32768, 32767),
    "uint16": (0, 65535),
    "int32": (-(2**31), 2**31 - 1),
}
_RQ_ISAS = {  # lanes: (label, guard, header, vector bits, the PRAGMAS key)
    16: ("vpmuldq zmm", "defined(__AVX512F__)", "immintrin.h", 512, "avx512f"),
    8: ("vpmuldq ymm", "defined(__AVX2__)", "immintrin.h", 256, None),
}


def requant_intrin(
    lanes: int, out: str, y_zp: int, target: CpuTarget, expr, add: dict | None = None,
    res: str = "", add_expr=None, cols: int = 1, bounds: tuple[int, int] | None = None,
) -> TensorIntrin | None:  # fmt: skip
    """The requantize epilogue of an ``rq32 == "mulhi"`` table as one call per vector of
    L lanes, None where the target has no body for L: ``expr(acc, prm, y_zp)`` is the
    int32 epilogue (quantized.requantize_mulhi), declared here on placeholders and
    narrowed to ``out``. The multiply is vpmuldq on the even and odd lanes (GCC widens
    both operands to 64-bit lanes and narrows back); the clamped value is stored as
    bytes in one instruction (vpmovdb) or two packs.

    With ``add`` (a folded residual add's qadd attrs, ``add_`` prefix dropped; its int32
    form only) the epilogue goes on with ``add_expr(y, r, add)`` (quantized._qadd) of
    the narrowed value y and the residual r, a vector of ``res`` bytes read beside the
    accumulators.

    ``cols`` > 1 (8 lanes): one call for that many columns of the block, acc, y and r
    (cols, L) one column after another, four columns packed and stored at a time
    (_requant_cols_avx2).

    ``bounds``: (lo, hi), where every channel's rows p4 and p5 hold these (the quantize
    pass's ``y_bounds``): the x86 bodies clamp at them as constants; the C loop reads
    the rows alike."""
    if target.arch != "x86_64" or lanes not in _RQ_ISAS or out not in _CT:
        return None
    need = "avx512f" if lanes == 16 else "avx2"
    if need not in target.features and not (lanes == 16 and target.vector_bits >= 512):
        return None
    if add is not None and (not add.get("i32") or res not in _CT):
        return None
    key = None if add is None else tuple(sorted(add.items()))
    if cols > 1 and lanes != 8:
        raise ValueError(f"requantize over {cols} columns: 8 lanes only")
    if bounds is not None and add is not None:
        raise ValueError("requantize bounds with a folded add: the add clamps on its own")
    bounds = None if bounds is None else (int(bounds[0]), int(bounds[1]))
    return _requant(lanes, out, int(y_zp), expr, key, res, add_expr, cols, bounds)


@functools.cache
def _requant(
    lanes: int, out: str, zp: int, expr, key: tuple | None, res: str, add_expr, cols: int = 1,
    bounds: tuple[int, int] | None = None,
) -> TensorIntrin:  # fmt: skip
    add = None if key is None else dict(key)
    shape = (lanes,) if cols == 1 else (cols, lanes)  # a column's lanes, or cols of them
    acc = te.placeholder(shape, "int32", "acc")
    rows = [te.placeholder((lanes,), "int32", f"p{k}") for k in range(6)]
    r = te.placeholder(shape, res or "int8", "r")

    def value(*i):
        y = te.cast(out, expr(acc[i], lambda k: rows[k][i[-1]], zp))
        return y if add is None else add_expr(y, r[i], add)

    final = out if add is None else add["out_dtype"]
    label, guard, header, width, pragma = _RQ_ISAS[lanes]
    many = "" if cols == 1 else f"c{cols}"
    clamp = "" if bounds is None else f"_b{bounds[0]}_{bounds[1]}"
    name = f"pk_requant_{_SHORT[out]}x{lanes}{many}_zp{zp}{clamp}".replace("-", "m")
    at = "l" if cols == 1 else f"{lanes} * c + l"  # the flat index of lane l (of column c)
    step = f"""        int32_t h = (int32_t)(((int64_t)(acc[{at}] + p0[l]) * (int64_t)p1[l]) >> 32);
        int32_t q = ((h + p2[l]) >> p3[l]) + {zp};
        q = q < p4[l] ? p4[l] : q;
        q = q > p5[l] ? p5[l] : q;"""
    args = ", ".join(f"const int32_t *restrict p{k}" for k in range(6))
    if add is not None:
        name = f"pk_requant_add_{_SHORT[out]}{_SHORT[res]}x{lanes}{many}_{_digest(key, zp)}"
        lo, hi = QRANGE[final]
        step += f"""
        int32_t s = (q - {add["a_zp"]}) * {add["a_mult"]}
                    + ((int32_t)r[{at}] - {add["b_zp"]}) * {add["b_mult"]};
        s = s < {_lit(add["lo"])} ? {_lit(add["lo"])} : s > {add["hi"]} ? {add["hi"]} : s;
        q = ((s + {1 << (add["shift"] - 1)}) >> {add["shift"]}) + {add["y_zp"]};
        q = q < {lo} ? {lo} : q > {hi} ? {hi} : q;"""
        args += f",\n    const {_CT[res]} *restrict r"
    short = f"requant_{_SHORT[out]}x{lanes}{many}" if add is None else name[3:]
    decl = te.compute(shape, lambda *i: simplify(value(*i)), name=short)
    store = f"        y[{at}] = ({_CT[final]})q;"
    scalar = f"    for (int l = 0; l < {lanes}; ++l) {{\n{step}\n{store}\n    }}"
    if cols == 1:
        body = _requant_x86(width, zp, out, add, res, bounds)
    else:
        body = _requant_cols_avx2(cols, zp, out, add, res, bounds)
        scalar = f"    for (int c = 0; c < {cols}; ++c)\n{scalar}"
        label += ", vpermd"
    c_def = (
        f"#if {guard}\n#include <{header}>\n{PRAGMAS.get(pragma, '')}#endif\n"
        f"static inline void {name}({_CT[final]} *restrict y, const int32_t *restrict acc,\n"
        f"    {args}) {{\n#if {guard}\n{body}\n#else\n{scalar}\n#endif\n}}"
    )
    intrin = TensorIntrin(name, decl, c_def, label)
    assert [t.name for t in intrin.inputs] == ["acc", *(f"p{k}" for k in range(6))] + (
        ["r"] if add else []
    ), "the C arguments follow the declaration's reads"
    return intrin


def _digest(key: tuple, zp: int) -> str:
    return hashlib.sha256(repr((key, zp)).encode()).hexdigest()[:10]


# --- x86 without VNNI: int16 pairs, one vpmaddwd per step ---------------------------


def pair_declaration(lanes: int) -> te.Tensor:
    """out[l] = sum_{k<2} int32(a[k]) * int32(w[l, k]): 2 activations (broadcast)
    times each lane's 2 weights, both int16 (the activations widened in the conv's
    padded copy, the weights at package time)."""
    a = te.placeholder((2,), "int16", "a")
    w = te.placeholder((lanes, 2), "int16", "w")
    return _declare(f"pair_s16x{lanes}", a, w, lambda j, k: a[k])


def _pair_x86(width: int, from_memory: bool = False):
    """The activation pair, one 32-bit word of two int16, broadcast to every lane;
    vpmaddwd with the lanes' int16 weight pairs gives each lane's exact 2-product sum;
    one add accumulates it. A step's broadcast is shared by the tile's output blocks.

    ``from_memory``: the pair read as one float (a may_alias type: the buffer holds
    int16), so the broadcast is vbroadcastss from memory. For a kernel wider than 1x1 an
    int32 read let GCC keep the pairs of neighbouring taps in general registers and move
    each to a vector (vmovd + vpbroadcastd): 3 instructions a step where AVX2 has 16
    vector registers. The float read alone still left GCC's predictive commoning the
    same rotation through xmm registers, which the body's hint (_PAIR_HINTS) turns off.
    A 1x1 conv has no such reuse and keeps the int32 read (measured 3-5% faster there)."""
    p, si = {512: ("_mm512", "si512"), 256: ("_mm256", "si256")}[width]
    step = width // 32
    if from_memory:
        load = f"""    typedef float pk_f32_alias __attribute__((may_alias));
    const __m{width}i av = {p}_castps_{si}({p}_set1_ps(*(const pk_f32_alias *)a));"""
    else:
        load = f"""    int32_t pair;
    __builtin_memcpy(&pair, a, 4);
    const __m{width}i av = {p}_set1_epi32(pair);"""

    def body(act: str, lanes: int) -> str:
        return f"""{load}
    for (int n = 0; n < {lanes}; n += {step}) {{
        __m{width}i c = {p}_loadu_{si}((const void *)(acc + n));
        const __m{width}i wv = {p}_loadu_{si}((const void *)(w + 2 * n));
        c = {p}_add_epi32(c, {p}_madd_epi16(wv, av));
        {_keep("c")}
        {p}_storeu_{si}((void *)(acc + n), c);
    }}"""

    return body


_PAIR_ISAS = {
    "avx512bw": ("vpmaddwd zmm", "defined(__AVX512BW__)", "immintrin.h", _pair_x86(512)),
    "avx2": ("vpmaddwd ymm", "defined(__AVX2__)", "immintrin.h", _pair_x86(256)),
    "avx2_taps": ("vpmaddwd ymm", "defined(__AVX2__)", "immintrin.h", _pair_x86(256, True)),
}


def pair_isa_for(act: str, lanes: int, target: CpuTarget) -> str | None:
    """x86 without a dot product for these activations (no VNNI, or int8 activations,
    which vpdpbusd does not take): the int16-pair body, None elsewhere (the quad
    intrinsics: VNNI, sdot, the ARM widening bodies)."""
    if target.arch != "x86_64" or isa_for(act, lanes, target) != "avx2":
        return None
    return _pair_body(lanes, target)


def pair_body_for(lanes: int, target: CpuTarget) -> str | None:
    """The x86 int16-pair body at ``lanes`` whatever dot product the target has (a
    grouped conv whose groups are not whole quads takes pairs even with VNNI)."""
    return _pair_body(lanes, target) if target.arch == "x86_64" else None


def _pair_body(lanes: int, target: CpuTarget) -> str | None:
    if lanes == 16 and "avx512bw" in target.features:
        return "avx512bw"
    return "avx2" if lanes % 8 == 0 else None


# The int16 pairs of a k x k conv: GCC's predictive commoning (GCC 12 runs it at -O2 too)
# sees that a tap's pair is the next column's pair of the tap before, keeps the tile's
# pairs in xmm registers, rotates them with moves and broadcasts each from a register:
# 3 instructions for the one vbroadcastss from memory, in the loop that bounds the
# conv. ResNet-18-style int8 on AVX2 (bench/ab_bundles.py, 4 rounds): 7x7 convs
# 2.13-2.26 -> 1.81-1.93 ms, the stem 2.95 -> 2.33, all kernels 29.4 -> 27.4 ms. The
# fp32 Winograd kernels ran 3-5% slower with it off for the whole bundle, so only the
# kernels calling this body ask for it.
_PAIR_HINTS = {"avx2_taps": frozenset({"no_predictive_commoning"})}


@functools.cache
def _pair(lanes: int, isa: str | None) -> TensorIntrin:
    name = f"pk_pair_s16x{lanes}_{isa or 'scalar'}"
    c_def = _c_def(name, "int16", lanes, isa, _PAIR_ISAS, depth=2, wt="int16")
    label = _PAIR_ISAS[isa][0] if isa else "scalar"
    hints = _PAIR_HINTS.get(isa, frozenset())
    return TensorIntrin(name, pair_declaration(lanes), c_def, label, hints)


def pair_intrin(lanes: int, target: CpuTarget, taps: bool = False) -> TensorIntrin:
    """The int16-pair dot-product intrinsic for ``lanes`` int32 lanes (``taps``: of a
    conv wider than 1x1, whose neighbouring taps share activations)."""
    isa = _pair_body(lanes, target) if target.arch == "x86_64" else None
    return _pair(lanes, "avx2_taps" if isa == "avx2" and taps else isa)
