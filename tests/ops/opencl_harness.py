"""Run one op's OpenCL kernel (its template, or the generic GPU schedule) on this
machine's OpenCL device (PoCL) and compare it with the TE evaluator."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from packager import te
from packager.boards import load_board
from packager.codegen.opencl import Launch, check_kernel, codegen_opencl
from packager.lowering import schedule_for
from packager.opencl_local import device
from packager.ops.registry import get_op
from packager.target import Target
from packager.te.evaluator import evaluate
from packager.te.passes import insert_barriers


@dataclass
class Result:
    outputs: list[np.ndarray]
    expected: list[np.ndarray]  # the TE evaluator's
    source: str
    launch: Launch
    kernel_ms: float


def gpu_target():
    return Target.opencl(load_board("rk3399"))


def run_opencl(op, attrs, inputs, post=None, knobs=None, target=None, generic=False) -> Result:
    """``post(outs, args)``: an epilogue fused after the op (returns the new outputs);
    ``generic``: the generic GPU schedule instead of the op's template."""
    target = target or gpu_target()
    args = [te.placeholder(a.shape, str(a.dtype), f"in{k}") for k, a in enumerate(inputs)]
    outs = list(get_op(op).compute(args, attrs))
    anchor = (None if generic else op, attrs, outs[0])
    if post is not None:
        outs = list(post(outs, args))
    expected = evaluate(outs, dict(zip(args, inputs, strict=True)))
    sch = schedule_for(outs, anchor, target, knobs)
    func = insert_barriers(te.lower(sch, args + outs, "k_test"))
    launch = check_kernel(func, target)
    source = codegen_opencl(func)
    empty = [np.zeros(t.shape, t.dtype) for t in outs]
    run = device().run(source, "k_test", [*inputs, *empty], len(outs), launch)
    return Result(run.outputs, list(expected), source, launch, run.kernel_ms)
