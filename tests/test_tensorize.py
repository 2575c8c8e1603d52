"""Stage.tensorize and the int8 dot-product intrinsics: a nest that differs from the
intrinsic's declaration is refused by name; the tensorized integer conv equals the simple
schedule bit for bit on the host (each ISA's C body, compiled for it), and cross-compiled
for the Raspberry Pi profiles its hot loop holds the board's instruction (sdot, smull,
vmull.s8) and its outputs under qemu-user equal the host's."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from packager import te
from packager.codegen import build_kernel, codegen_c
from packager.codegen.build import INCLUDE, SCRATCH, SERIAL_PARALLEL_FOR
from packager.graph.passes.quantize import narrow_bounds
from packager.lowering import schedule_for
from packager.ops.int8_intrin import dot4_intrin
from packager.target import CpuTarget
from packager.te.tensorize import TensorIntrin, TensorizeError
from tests.ops.harness import build

HOST_FLAGS = ("-O2", "-fPIC", "-std=c99", "-march=native")


def _cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    m = re.search(r"^flags\s*:(.*)$", text, re.M)
    return set(m.group(1).split()) if m else set()


def qconv_case(act: str, lanes: int, c=12, oc=20, hw=7, k=3, stride=1, seed=0):
    """Inputs (x, packed w, requantize table) and attrs of a padded qconv2d whose input
    channels are not a multiple of 4 and output channels not a multiple of L."""
    rng = np.random.default_rng(seed)
    lo, hi = (0, 256) if act == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, (1, c, hw, hw)).astype(act)
    w = rng.integers(-128, 128, (-(-oc // lanes), -(-c // 4), k, k, lanes, 4)).astype(np.int8)
    w[:, -1, :, :, :, c % 4 or 4 :] = 0  # channels past c: zero weights, as packed
    rq = np.zeros((7, w.shape[0] * lanes), np.int64)
    rq[0] = rng.integers(2**30, 2**31, rq.shape[1])
    rq[1], rq[2] = 38, 1 << 37
    rq[3], rq[4] = -(2**62), 2**62
    rq[6] = rng.integers(-5000, 5000, rq.shape[1])
    attrs = dict(strides=[stride] * 2, pads=[1] * 4, oc=oc, x_zp=3, y_zp=-2, out_dtype="int8")
    return [x, w, rq], attrs


def qconv_func(inputs, attrs, target: CpuTarget | None):
    phs, outs = build("qconv2d", inputs, attrs)
    if target is None:
        sch = te.default_schedule(outs)
    else:
        sch = schedule_for(outs, ("qconv2d", attrs, outs[0]), target)
    return te.lower(sch, [*phs, *outs], "k_qconv"), outs[0]


def run_host(inputs, attrs, target, cflags=HOST_FLAGS) -> np.ndarray:
    func, out = qconv_func(inputs, attrs, target)
    got = np.empty(out.shape, np.int8)
    build_kernel(func, cflags)(*inputs, got)
    return got


# --- the primitive ------------------------------------------------------------------


def test_mismatched_nest_is_refused_naming_stage_and_operand():
    """A dot product whose activations are 4 apart, not adjacent as declared."""
    a = te.placeholder((16,), "uint8", "act")
    w = te.placeholder((16, 4), "int8", "wt")
    k = te.reduce_axis(4, "k")
    out = te.compute(
        (16,),
        lambda j: te.sum(te.cast("int32", a[k * 4]) * te.cast("int32", w[(j, k)]), [k]),
        name="strided_dot",
    )
    sch = te.create_schedule(out)
    sch[out].reorder(k, out.op.axis[0])  # the reduction outside the lanes, as in a tile
    sch[out].tensorize(k, dot4_intrin("uint8", 16, CpuTarget(vector_bits=512)))
    with pytest.raises(
        TensorizeError,
        match=r"tensorize strided_dot with .*: act is read "
        r"with strides \[0, 4\].*the intrinsic's a with \[0, 1\]",
    ):
        te.lower(sch, [a, w, out], "k")


def _axpb_intrin(k: int) -> TensorIntrin:
    """An elementwise intrinsic: y[l] = a[l] * k + b[l] over 8 int32 lanes."""
    a, b = te.placeholder((8,), "int32", "a"), te.placeholder((8,), "int32", "b")
    decl = te.compute((8,), lambda j: a[j] * te.const(k, "int32") + b[j], name="axpb")
    c_def = f"""static inline void pk_axpb{k}(int32_t *restrict y, const int32_t *restrict a,
    const int32_t *restrict b) {{
    for (int l = 0; l < 8; ++l) y[l] = a[l] * {k} + b[l];
}}"""
    return TensorIntrin(f"pk_axpb{k}", decl, c_def, "scalar")


@pytest.mark.parametrize("k", [3, 4])
def test_elementwise_intrinsic_replaces_the_lane_loop_or_names_the_constant(k):
    """An elementwise stage (an epilogue) tensorizes with an intrinsic declared without
    a reduction; a constant that differs from the declaration's is refused by value."""
    x, y = te.placeholder((5, 8), "int32", "x"), te.placeholder((5, 8), "int32", "y")
    out = te.compute(
        (5, 8), lambda i, j: x[(i, j)] * te.const(3, "int32") + y[(i, j)], name="axpb_out"
    )
    sch = te.create_schedule(out)
    sch[out].tensorize(out.op.axis[1], _axpb_intrin(k))
    if k != 3:
        with pytest.raises(TensorizeError, match="the constant 3 where the intrinsic has 4"):
            te.lower(sch, [x, y, out], "k")
        return
    func = te.lower(sch, [x, y, out], "k_axpb")
    assert re.search(r"pk_axpb3\(&axpb_out\[(\w+)\], &x\[\1\], &y\[\1\]\);", codegen_c(func))
    rng = np.random.default_rng(0)
    xv, yv = (rng.integers(-99, 99, (5, 8)).astype(np.int32) for _ in range(2))
    got = np.empty((5, 8), np.int32)
    build_kernel(func)(xv, yv, got)
    np.testing.assert_array_equal(got, xv * 3 + yv)


def test_an_intrinsics_compiler_hints_reach_the_kernel_that_calls_it():
    """A kernel takes the hints of the intrinsics it calls beside its schedule's own
    (C renders them as pragmas); an intrinsic asking for a hint nobody knows is refused
    when a stage is tensorized with it."""
    x, y = te.placeholder((5, 8), "int32", "x"), te.placeholder((5, 8), "int32", "y")
    out = te.compute(
        (5, 8), lambda i, j: x[(i, j)] * te.const(3, "int32") + y[(i, j)], name="axpb_out"
    )
    plain = _axpb_intrin(3)
    hinted = dataclasses.replace(plain, hints=frozenset({"no_predictive_commoning"}))
    pragma = '#pragma GCC optimize("no-predictive-commoning")'
    for intrin, want in ((plain, frozenset()), (hinted, {"no_predictive_commoning"})):
        sch = te.create_schedule(out)
        sch[out].tensorize(out.op.axis[1], intrin)
        func = te.lower(sch, [x, y, out], "k_axpb")
        assert func.hints == want
        assert (pragma in codegen_c(func)) is bool(want)
    sch = te.create_schedule(out)
    with pytest.raises(ValueError, match=r"pk_axpb3: unknown compiler hints \['fast'\]"):
        sch[out].tensorize(out.op.axis[1], dataclasses.replace(plain, hints=frozenset({"fast"})))


def test_wrong_activation_type_is_refused():
    a = te.placeholder((4,), "int8", "act")
    w = te.placeholder((8, 4), "int8", "wt")
    k = te.reduce_axis(4, "k")
    out = te.compute(
        (8,),
        lambda j: te.sum(te.cast("int32", a[k]) * te.cast("int32", w[(j, k)]), [k]),
        name="sdot8",
    )
    sch = te.create_schedule(out)
    sch[out].reorder(k, out.op.axis[0])
    sch[out].tensorize(k, dot4_intrin("uint8", 8, CpuTarget(vector_bits=256)))
    with pytest.raises(
        TensorizeError, match="tensorize sdot8 .*act is int8, the intrinsic's a is uint8"
    ):
        te.lower(sch, [a, w, out], "k")


# --- host: every x86 body equals the simple schedule -----------------------------------

X86 = [
    ("uint8", 16, ("avx512_vnni",), "vpdpbusd", "avx512_vnni"),
    ("uint8", 8, ("avx_vnni",), "vpdpbusd", "avx_vnni"),
    ("int8", 16, ("avx2",), "vpmaddwd", "avx2"),
    ("uint8", 8, ("avx2",), "vpmaddwd", "avx2"),
]


@pytest.mark.parametrize("act,lanes,feats,insn,need", X86)
def test_tensorized_qconv_is_bit_exact_on_host(act, lanes, feats, insn, need):
    if need not in _cpu_flags():
        pytest.skip(f"this machine has no {need}")
    inputs, attrs = qconv_case(act, lanes)
    target = CpuTarget(vector_bits=32 * lanes, features=feats)
    func, _ = qconv_func(inputs, attrs, target)
    src = codegen_c(func)
    assert re.search(r"pk_dot4_\w+\(&qconv_acc", src), "the conv tile calls the intrinsic"
    want = run_host(inputs, attrs, None)
    got = run_host(inputs, attrs, target)
    np.testing.assert_array_equal(got, want)
    obj_asm = _host_asm(src)
    assert re.search(insn, obj_asm), f"no {insn} in the kernel"


def test_vnni_kernel_requantizes_on_zmm():
    """A kernel tensorized with 512-bit vpdpbusd asks GCC for 512-bit vectors, so the
    int32 requantize epilogue runs on zmm as well (GCC prefers ymm on these cores)."""
    if "avx512_vnni" not in _cpu_flags():
        pytest.skip("this machine has no avx512_vnni")
    inputs, attrs = qconv_case("uint8", 16, oc=32, hw=8, k=1)
    attrs["pads"] = [0] * 4
    inputs[2] = narrow_bounds(inputs[2], attrs["y_zp"], "int8")
    attrs["rq32"] = True  # exact here: |acc| < 2^22, the shifted product < 2^16
    target = CpuTarget(vector_bits=512, features=("avx512_vnni",))
    src = codegen_c(qconv_func(inputs, attrs, target)[0])
    np.testing.assert_array_equal(
        run_host(inputs, attrs, target), run_host(inputs, attrs | {"rq32": False}, None)
    )
    assert re.search(r"vpsravq\s+%zmm", _host_asm(src)), "the epilogue's shift is not on zmm"


def _host_asm(src: str, flags=HOST_FLAGS) -> str:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        c, o = Path(d) / "k.c", Path(d) / "k.o"
        c.write_text(src)
        subprocess.run(["cc", *flags, "-I", str(INCLUDE), "-c", str(c), "-o", str(o)], check=True)
        return subprocess.run(
            ["objdump", "-d", str(o)], capture_output=True, text=True, check=True
        ).stdout


# --- cross builds: the board's instruction, outputs equal under qemu --------------------

ARM = {  # board: (target, cc, flags, objdump, qemu, instruction, act)
    "rpi5": (
        "aarch64",
        ("asimd", "asimddp"),
        "aarch64-linux-gnu-gcc",
        ["-mcpu=cortex-a76"],
        "aarch64-linux-gnu-objdump",
        "qemu-aarch64",
        r"\bsdot\s+v\d+\.4s",
        "int8",
    ),
    "rpi4": (
        "aarch64",
        ("asimd",),
        "aarch64-linux-gnu-gcc",
        ["-mcpu=cortex-a72"],
        "aarch64-linux-gnu-objdump",
        "qemu-aarch64",
        r"\bsmull2?\s+v\d+\.8h",
        "int8",
    ),
    "rpi4-u8": (
        "aarch64",
        ("asimd",),
        "aarch64-linux-gnu-gcc",
        ["-mcpu=cortex-a72"],
        "aarch64-linux-gnu-objdump",
        "qemu-aarch64",
        r"\bsmull2?\s+v\d+\.4s",
        "uint8",
    ),
    "rpi3": (
        "armv7",
        ("neon",),
        "arm-linux-gnueabihf-gcc",
        ["-mcpu=cortex-a53", "-mfpu=neon-fp-armv8", "-mfloat-abi=hard"],
        "arm-linux-gnueabihf-objdump",
        "qemu-arm",
        r"\bvmull\.s8\b",
        "int8",
    ),
}

MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "pk_kernel.h"
int32_t k_qconv(void *const *args);
static void *slurp(const char *path, size_t n) {
    void *p = malloc(n);
    FILE *f = fopen(path, "rb");
    if (!f || fread(p, 1, n, f) != n) exit(3);
    fclose(f);
    return p;
}
int main(int argc, char **argv) {
    void *args[4];
    for (int i = 0; i < 3; ++i) args[i] = slurp(argv[1 + i], (size_t)atol(argv[5 + i]));
    size_t n = (size_t)atol(argv[8]);
    args[3] = malloc(n);
    if (k_qconv(args)) return 4;
    FILE *f = fopen(argv[4], "wb");
    fwrite(args[3], 1, n, f);
    fclose(f);
    return 0;
}
"""


def cross_run(board: str, inputs, attrs, tmp_path) -> tuple[str, np.ndarray]:
    """The qconv2d kernel cross-compiled for ``board`` (an ``ARM`` key): its disassembly
    and its output run under qemu-user (skips where the tools are missing)."""
    arch, feats, cc, flags, objdump, qemu, _, _ = ARM[board]
    for tool in (cc, objdump, qemu):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (bash scripts/setup.sh)")
    target = CpuTarget(arch=arch, vector_bits=128, features=feats)
    func, out = qconv_func(inputs, attrs, target)
    src = tmp_path / "k.c"
    src.write_text(codegen_c(func))
    obj = tmp_path / "k.o"
    common = ["-O2", "-std=c99", *flags, "-I", str(INCLUDE)]
    subprocess.run([cc, *common, "-c", str(src), "-o", str(obj)], check=True)
    asm = subprocess.run(
        [objdump, "-d", str(obj)], capture_output=True, text=True, check=True
    ).stdout
    main = tmp_path / "main.c"
    main.write_text(MAIN)
    exe = tmp_path / "k"
    subprocess.run(
        [
            cc,
            *common,
            "-static",
            str(main),
            str(src),
            str(SERIAL_PARALLEL_FOR),
            str(SCRATCH),
            "-o",
            str(exe),
            "-lm",
        ],
        check=True,
    )
    files = []
    for i, a in enumerate(inputs):
        p = tmp_path / f"in{i}.bin"
        p.write_bytes(np.ascontiguousarray(a).tobytes())
        files.append(str(p))
    n = int(np.prod(out.shape))
    result = tmp_path / "out.bin"
    sizes = [str(np.ascontiguousarray(a).nbytes) for a in inputs]
    subprocess.run([qemu, str(exe), *files, str(result), *sizes, str(n)], check=True, timeout=120)
    return asm, np.frombuffer(result.read_bytes(), np.int8).reshape(out.shape)


@pytest.mark.parametrize("board", sorted(ARM))
def test_cross_compiled_qconv_has_board_instruction_and_matches_host(board, tmp_path):
    insn, act = ARM[board][6:]
    inputs, attrs = qconv_case(act, 4, seed=3)
    asm, got = cross_run(board, inputs, attrs, tmp_path)
    assert len(re.findall(insn, asm)) >= 1, f"no {insn} in the {board} kernel"
    np.testing.assert_array_equal(got, run_host(inputs, attrs, None))
