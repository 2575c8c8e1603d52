"""The graph IR: typed values with static shapes, nodes of the op library, constants."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Value:
    """A tensor of the graph. ``data`` is set for constants (weights, folded values)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    data: np.ndarray | None = None

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def nbytes(self) -> int:
        # Python ints: numpy's int64 product wraps around for a model's huge dims.
        return math.prod(self.shape) * np.dtype(np_dtype(self.dtype)).itemsize


@dataclass
class Node:
    """A call of op ``op`` of the op library (packager/ops) on named values.

    ``source`` is the ONNX node it came from (for error messages).
    """

    op: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict = field(default_factory=dict)
    source: str = ""


@dataclass
class Graph:
    name: str
    inputs: list[str]
    outputs: list[str]
    nodes: list[Node]
    values: dict[str, Value]

    def consts(self) -> list[Value]:
        """Constant values used by nodes or outputs, in first-use order."""
        seen: dict[str, Value] = {}
        for name in [i for n in self.nodes for i in n.inputs] + self.outputs:
            v = self.values[name]
            if v.is_const and name not in seen:
                seen[name] = v
        return list(seen.values())


_NP = {"bool": np.bool_}


def np_dtype(dtype: str) -> np.dtype:
    return np.dtype(_NP.get(dtype, dtype))
