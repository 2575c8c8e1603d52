"""The depthwise template (ops/dwconv_schedule.py), which conv_schedule hands depthwise
convs to: numerics against a direct numpy depthwise convolution for its knobs, its
defaults, and its hot loop read back with objdump (vector FMAs, vector guarded loads,
no scalar arithmetic)."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from packager import te
from packager.codegen import build_kernel, codegen_c
from packager.codegen.build import INCLUDE
from packager.lowering import schedule_for
from packager.ops.dwconv_schedule import is_depthwise
from packager.ops.knobs import Config
from packager.ops.registry import ScheduleContext, get_op
from packager.target import CpuTarget

from .test_conv_schedule import conv_group


def dw_reference(x, w, b, stride, pad):
    """Depthwise conv + bias + relu in NCHW: x (C, H, W), w (C, K, K), b (C,)."""
    c, h, wd = x.shape
    k = w.shape[1]
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    out = np.zeros((c, oh, ow), np.float64)
    for kh in range(k):
        for kw in range(k):
            win = xp[:, kh : kh + stride * oh : stride, kw : kw + stride * ow : stride]
            out += win * w[:, kh, kw][:, None, None]
    return np.maximum(out + b[:, None, None], 0)


def run_dw(c, hw, stride, pad, block, knobs, k=3):
    args, out, anchor = conv_group(c, c, hw, k, stride, pad, block=block, groups=c)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((c, *hw)).astype(np.float32)
    w = rng.standard_normal((c, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    blocks = c // block
    xb = x.reshape(blocks, block, *hw).transpose(0, 2, 3, 1)[None]  # (1, C/x, H, W, x)
    wb = w.reshape(blocks, block, k, k).transpose(0, 2, 3, 1)[:, None, :, :, None, :]
    bb = b.reshape(blocks, block)
    sch = schedule_for([out], anchor, knobs=knobs)
    got = np.empty(out.shape, np.float32)
    func = te.lower(sch, [*args, out], "k_dw")
    build_kernel(func)(*(np.ascontiguousarray(a) for a in (xb, wb, bb)), got)
    want = dw_reference(x, w, b, stride, pad)
    want = want.reshape(blocks, block, *want.shape[1:]).transpose(0, 2, 3, 1)[None]
    return got, want, codegen_c(func)


CASES = {
    "s1": dict(c=24, hw=(9, 14), stride=1, pad=1, block=8),
    "s2": dict(c=16, hw=(11, 13), stride=2, pad=1, block=8),
    "s2_even": dict(c=32, hw=(12, 12), stride=2, pad=1, block=8),
    "no_pad": dict(c=16, hw=(7, 9), stride=1, pad=0, block=8),
    "block4": dict(c=12, hw=(8, 10), stride=1, pad=1, block=4),
    "5x5": dict(c=16, hw=(9, 9), stride=1, pad=2, block=8, k=5),
}

KNOBS = [
    {},
    {"pad": "root"},
    {"pad": "inline", "tile_oc": 1, "tile_ow": 1},
    {"pad": "root", "vectorize_oc": False, "parallel": "none"},
    {"pad": "inline", "vectorize_oc": False, "parallel": "n_oc"},
]


@pytest.mark.parametrize("case", sorted(CASES))
def test_depthwise_matches_numpy(case):
    results = [run_dw(**CASES[case], knobs=knobs) for knobs in KNOBS]
    for got, want, _ in results:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


AVX512 = CpuTarget(vector_bits=512, cores=2)


def _space(c, hw, stride, block=8, target=AVX512):
    args, out, anchor = conv_group(c, c, hw, 3, stride, 1, block=block, groups=c)
    op, attrs, tensor = anchor
    cfg = Config()
    get_op(op).schedules["cpu"](ScheduleContext([out], tensor, attrs, cfg, target))
    return cfg


def test_depthwise_defaults():
    cfg = _space(128, (56, 56), 1, block=16)
    assert cfg.as_dict() == {
        "tile_oc": 2,
        "tile_ow": 7,
        "vectorize_oc": True,
        "parallel": "n_oc_oh",
        "pad": "inline",
    }
    assert set(cfg.space["pad"].candidates) == {"root", "inline"}
    # one block: one column tile of up to 14 accumulators
    assert _space(16, (28, 28), 2, block=16).as_dict()["tile_oc"] == 1
    assert _space(16, (28, 28), 1, block=16).as_dict()["tile_ow"] == 14
    # AArch64 has 32 registers too
    neon = CpuTarget(arch="aarch64", vector_bits=128)
    assert _space(16, (28, 28), 1, block=4, target=neon).as_dict()["tile_oc"] == 2


@pytest.mark.parametrize(
    "width, want", [(56, (1, 7)), (112, (1, 7)), (28, (1, 7)), (7, (1, 7)), (12, (1, 6))]
)
def test_depthwise_tile_with_16_registers(width, want):
    """AVX2 and ARMv7 NEON: one block and at most DW_ACC_FEW_REGS columns."""
    for target in (CpuTarget(vector_bits=256), CpuTarget(arch="armv7", vector_bits=128)):
        lanes = target.vector_bits // 32
        cfg = _space(144 // 8 * lanes, (width, width), 1, block=lanes, target=target)
        assert (cfg.as_dict()["tile_oc"], cfg.as_dict()["tile_ow"]) == want


def test_only_depthwise_convs_dispatch_here():
    data = te.placeholder((1, 4, 9, 9, 8), "float32", "in0")
    conv = get_op("conv2d_nchwc").compute
    attrs = {"strides": [1, 1], "pads": [1] * 4}
    dense = conv([data, te.placeholder((4, 4, 3, 3, 8, 8), "float32", "w")], attrs)[0]
    grouped = conv(
        [data, te.placeholder((4, 2, 3, 3, 8, 8), "float32", "w")], {**attrs, "groups": 2}
    )[0]
    dw = conv([data, te.placeholder((4, 1, 3, 3, 1, 8), "float32", "w")], {**attrs, "groups": 32})[
        0
    ]
    assert not is_depthwise(dense) and not is_depthwise(grouped) and is_depthwise(dw)


TOOLCHAINS = {
    "x86_64": (
        "gcc",
        ["-march=haswell"],
        "objdump",
        r"vfmadd\w*ps\s+.*%ymm",
        r"\s(v(?!broadcast)\w+ss)\s",
        8,
    ),
    "aarch64": (
        "aarch64-linux-gnu-gcc",
        ["-mcpu=cortex-a72"],
        "aarch64-linux-gnu-objdump",
        r"fmla\s+v\d+\.4s",
        r"\s(fmadd|fmul|fadd|fmla)\s+s\d+",
        4,
    ),
}


def _dw_source(arch: str, lanes: int, stride: int) -> str:
    args, out, anchor = conv_group(
        8 * lanes, 8 * lanes, (28, 28), 3, stride, 1, block=lanes, groups=8 * lanes
    )
    sch = schedule_for([out], anchor, CpuTarget(arch=arch, vector_bits=32 * lanes, cores=2))
    return codegen_c(te.lower(sch, [*args, out], "k_dw"))


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("arch", sorted(TOOLCHAINS))
def test_depthwise_hot_loop_is_vector_code(arch, stride, tmp_path):
    cc, flags, objdump, fma, scalar, lanes = TOOLCHAINS[arch]
    if not (shutil.which(cc) and shutil.which(objdump)):
        pytest.skip(f"{cc} or {objdump} not installed")
    src, obj = tmp_path / "k.c", tmp_path / "k.o"
    src.write_text(_dw_source(arch, lanes, stride))
    # every loop is vector code, the clip epilogue's per-lane selects too (blends)
    assert "ivdep" not in src.read_text() and "pk_i32x" in src.read_text()
    subprocess.run(
        [
            cc,
            "-O2",
            "-ffp-contract=fast",
            *flags,
            "-I",
            str(INCLUDE),
            "-c",
            str(src),
            "-o",
            str(obj),
        ],
        check=True,
    )
    asm = subprocess.run(
        [objdump, "-d", "--no-show-raw-insn", str(obj)], capture_output=True, text=True, check=True
    ).stdout
    body = asm[asm.index("<k_dw_par0>:") :]
    body = body[: body.index("\n\n")] if "\n\n" in body else body
    # one FMA per accumulator and tap, with guarded loads: AArch64's 2 blocks x 7
    # columns tile, AVX2's 1 x 7 (16 registers)
    assert len(re.findall(fma, body)) >= (14 if arch == "aarch64" else 7)
    assert not re.findall(scalar, body), "scalar float arithmetic in the depthwise kernel"
