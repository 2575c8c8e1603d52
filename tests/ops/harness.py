"""Runs one library op on numpy arrays, for compute-level tests.

``run_op`` goes the real way: default schedule, lowering, C codegen, a shared
library (compiles are cached by source hash). ``run_op_numpy`` interprets the
computes with numpy instead, to tell a compute bug from a lowering bug.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from packager import te
from packager.codegen import build_kernel
from packager.codegen.build import INCLUDE
from packager.graph.ir import np_dtype
from packager.ops.registry import get_op
from packager.te.evaluator import evaluate


def build(op_name: str, inputs: list[np.ndarray], attrs: dict):
    """Placeholders for ``inputs`` and the op's output tensors."""
    phs = [
        te.placeholder(a.shape, "bool" if a.dtype == np.bool_ else str(a.dtype), f"in{i}")
        for i, a in enumerate(inputs)
    ]
    return phs, get_op(op_name).compute(phs, dict(attrs))


def run_op(op_name: str, inputs: list[np.ndarray], attrs) -> list[np.ndarray]:
    inputs = [np.ascontiguousarray(a) for a in inputs]
    phs, outs = build(op_name, inputs, attrs)
    func = te.lower(te.default_schedule(outs), [*phs, *outs], f"k_{op_name}")
    results = [np.empty(t.shape, np_dtype(t.dtype)) for t in outs]
    build_kernel(func)(*inputs, *results)
    return results


def run_op_numpy(op_name: str, inputs: list[np.ndarray], attrs) -> list[np.ndarray]:
    inputs = [np.asarray(a) for a in inputs]
    phs, outs = build(op_name, inputs, attrs)
    return evaluate(outs, dict(zip(phs, inputs, strict=True)))


def conv_group(op_name: str, args: list, attrs: dict, out_blocks: int, epilogue: str):
    """A conv op on placeholders ``args`` (data, weight) as a fused group makes it:
    ``epilogue`` "none", "relu" (+ bias + ReLU) or "residual" (then + a residual input).
    Returns (args, output, anchor) for lowering.schedule_for."""
    if epilogue == "none":
        out = get_op(op_name).compute(args, attrs)[0]
        return args, out, (op_name, attrs, out)
    block = args[0].shape[-1]
    args = [*args, te.placeholder((out_blocks, block), "float32", f"in{len(args)}")]
    conv = get_op(op_name).compute(args, attrs)[0]
    zero = te.const(0.0, "float32")
    out = te.compute(conv.shape, lambda *i: te.max_(conv[i], zero), name="relu")
    if epilogue == "residual":
        res = te.placeholder(out.shape, "float32", f"in{len(args)}")
        args.append(res)
        prev = out
        out = te.compute(out.shape, lambda *i: prev[i] + res[i], name="add")
    return args, out, (op_name, attrs, conv)


def innermost_fma_loop(asm: str, function: str, op: str = "vfmadd") -> list[str]:
    """The instructions of the shortest loop with vector FMAs (instructions starting
    with ``op``) in ``function`` (objdump -d text): from a backward jump's target to the
    jump."""
    body = asm[asm.index(f"<{function}>:") :]
    following = re.search(r"\n[0-9a-f]+ <\w+>:", body)
    body = body[: following.start()] if following else body
    rows = []
    for line in body.splitlines()[1:]:
        addr, _, text = line.partition(":")
        if text.strip():
            rows.append((int(addr, 16), text.strip()))
    loops = []
    for k, (_, text) in enumerate(rows):
        m = re.match(r"j\w+\s+([0-9a-f]+)\s", text)
        if m and int(m.group(1), 16) <= rows[k][0]:
            start = next(i for i, (a, _) in enumerate(rows) if a == int(m.group(1), 16))
            loop = [t for _, t in rows[start : k + 1]]
            if any(t.startswith(op) for t in loop):
                loops.append(loop)
    return min(loops, key=len)


def haswell_asm(c_source: str, where) -> str:
    """``objdump -d`` of a kernel's C compiled as the host profile compiles kernels, for
    Haswell (AVX2 and FMA, 16 vector registers); skips the test without gcc or objdump."""
    if not (shutil.which("gcc") and shutil.which("objdump")):
        pytest.skip("gcc or objdump not installed")
    src, obj = Path(where) / "k.c", Path(where) / "k.o"
    src.write_text(c_source)
    flags = ["-O3", "-fno-tree-coalesce-vars", "-ffp-contract=fast", "-march=haswell"]
    subprocess.run(["gcc", *flags, "-I", str(INCLUDE), "-c", str(src), "-o", str(obj)], check=True)
    return subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(obj)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
