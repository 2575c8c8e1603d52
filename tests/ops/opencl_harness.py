"""Running one op (with an optional fused epilogue) through its OpenCL schedule on this
machine's OpenCL device (PoCL here), checked by codegen/opencl.check_kernel, next to the
TE evaluator's result for the same tensors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from packager import te
from packager.boards import load_board
from packager.codegen.opencl import Launch, check_kernel, codegen_opencl
from packager.lowering import schedule_for
from packager.opencl_local import device
from packager.ops.opencl.generic import gpu_default_schedule
from packager.ops.registry import get_op
from packager.target import Target
from packager.te.evaluator import evaluate
from packager.te.passes import insert_barriers

# The rk3399's Mali-T860 as its profile describes it: the limits templates must respect.
MALI = Target.opencl(load_board("rk3399"))


@dataclass
class Result:
    outputs: list[np.ndarray]
    expected: list[np.ndarray]
    source: str
    launch: Launch
    kernel_ms: float


def run_opencl(op, attrs, inputs, post=None, knobs=None, target=MALI, generic=False) -> Result:
    """Compute ``op`` on ``inputs`` (numpy arrays) through its OpenCL template (the generic
    GPU schedule with ``generic``). ``post(out) -> (tensor, {placeholder: array})`` adds a
    fused epilogue; the group's anchor stays ``op``."""
    with te.fresh_names():
        args = [te.placeholder(a.shape, str(a.dtype), f"in{k}") for k, a in enumerate(inputs)]
        outs = list(get_op(op).compute(args, attrs))
        feeds = dict(zip(args, inputs, strict=True))
        anchor = outs[0]
        if post is not None:
            out, extra = post(anchor)
            outs = [out]
            feeds.update(extra)
            args += list(extra)
    if generic:
        sch = gpu_default_schedule(outs, target)
    else:
        sch = schedule_for(outs, (op, attrs, anchor), target, knobs)
    func = insert_barriers(te.lower(sch, args + outs, "k_test"))
    launch = check_kernel(func, target)
    source = codegen_opencl(func)
    arrays = [feeds[a] for a in args] + [np.zeros(o.shape, o.dtype) for o in outs]
    run = device().run(source, "k_test", arrays, len(outs), launch)
    expected = evaluate(outs, feeds)
    return Result(run.outputs, expected, source, launch, run.kernel_ms)


def epilogue(*steps):
    """A fused epilogue from op names applied in turn: "relu", ("clip", lo, hi), or
    ("add", array) (a residual of the output's shape)."""

    def post(t):
        extra = {}
        for k, step in enumerate(steps):
            name = step if isinstance(step, str) else step[0]
            if name == "add":
                arr = step[1]
                r = te.placeholder(arr.shape, str(arr.dtype), f"res{k}")
                extra[r] = arr
                t = get_op("add").compute([t, r], {})[0]
            elif name == "clip":
                t = get_op("clip").compute([t], {"min": step[1], "max": step[2]})[0]
            else:
                t = get_op(name).compute([t], {})[0]
        return t, extra

    return post


def assert_close(res: Result, rel: float = 1e-4) -> None:
    for got, want in zip(res.outputs, res.expected, strict=True):
        scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
        np.testing.assert_allclose(got, want, rtol=0, atol=rel * scale)
