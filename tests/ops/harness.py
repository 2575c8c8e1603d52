"""Runs one library op on numpy arrays, for compute-level tests.

``run_op`` goes the real way: default schedule, lowering, C codegen, a shared
library (compiles are cached by source hash). ``run_op_numpy`` interprets the
computes with numpy instead, to tell a compute bug from a lowering bug.
"""

from __future__ import annotations

import numpy as np

from packager import te
from packager.codegen import build_kernel
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
