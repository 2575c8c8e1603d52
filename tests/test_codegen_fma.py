"""The conv template's hot loop compiles to vector FMAs: vfmadd...ps on x86 (AVX2) and
fmla v.4s on aarch64 (cross-compiled), read back with objdump."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from packager import te
from packager.codegen import codegen_c
from packager.codegen.build import INCLUDE
from packager.lowering import schedule_for
from packager.target import CpuTarget
from tests.ops.test_conv_schedule import conv_group

TOOLCHAINS = {
    "x86_64": ("gcc", ["-march=haswell"], "objdump", r"vfmadd\w*ps\s+.*%ymm"),
    "aarch64": (
        "aarch64-linux-gnu-gcc",
        ["-mcpu=cortex-a72"],
        "aarch64-linux-gnu-objdump",
        r"fmla\s+v\d+\.4s",
    ),
}
LANES = {"x86_64": 8, "aarch64": 4}


def conv_kernel_source(lanes: int) -> str:
    """C of a fused 3x3 conv + bias + relu + add in the block of ``lanes`` floats."""
    args, out, anchor = conv_group(64, 64, (14, 14), 3, 1, 1, block=lanes, residual=True)
    sch = schedule_for([out], anchor, CpuTarget(vector_bits=32 * lanes, cores=2))
    return codegen_c(te.lower(sch, [*args, out], "k_conv"))


@pytest.mark.parametrize("arch", sorted(TOOLCHAINS))
def test_conv_hot_loop_has_vector_fma(arch, tmp_path):
    cc, flags, objdump, pattern = TOOLCHAINS[arch]
    if not (shutil.which(cc) and shutil.which(objdump)):
        pytest.skip(f"{cc} or {objdump} not installed")
    src, obj = tmp_path / "k.c", tmp_path / "k.o"
    src.write_text(conv_kernel_source(LANES[arch]))
    subprocess.run(
        [cc, "-O2", *flags, "-I", str(INCLUDE), "-c", str(src), "-o", str(obj)], check=True
    )
    asm = subprocess.run(
        [objdump, "-d", str(obj)], capture_output=True, text=True, check=True
    ).stdout
    fmas = re.findall(pattern, asm)
    # the register tile: one FMA per accumulator (2 blocks x 7 columns) at least
    assert len(fmas) >= 14, f"{len(fmas)} vector FMAs in the conv kernel"
