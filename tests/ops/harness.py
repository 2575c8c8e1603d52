"""Runs one library op on numpy arrays, for compute-level tests."""

from __future__ import annotations

import numpy as np

from packager import te
from packager.ops.registry import get_op

from .te_eval import evaluate


def build(op_name: str, inputs: list[np.ndarray], attrs: dict):
    """Placeholders for ``inputs`` and the op's output tensors."""
    phs = [te.placeholder(a.shape, "bool" if a.dtype == np.bool_ else str(a.dtype), f"in{i}")
           for i, a in enumerate(inputs)]
    return phs, get_op(op_name).compute(phs, dict(attrs))


def run_op(op_name: str, inputs: list[np.ndarray], attrs) -> list[np.ndarray]:
    inputs = [np.asarray(a) for a in inputs]
    phs, outs = build(op_name, inputs, attrs)
    return evaluate(outs, dict(zip(phs, inputs)))
