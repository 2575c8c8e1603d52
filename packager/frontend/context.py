"""What a converter sees: the values known so far, attributes, constants, new names."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import NeedsConstantError, PackagerError
from ..graph.ir import Node, Value


class ConvertContext:
    def __init__(self, values: dict[str, Value], opset: int, model_path: str = "model"):
        self.values = values
        self.opset = opset
        self.model_path = model_path
        self._counter = 0

    # --- reading the node ---------------------------------------------------

    def value(self, name: str) -> Value:
        return self.values[name]

    def has_input(self, node: onnx.NodeProto, i: int) -> bool:
        return i < len(node.input) and node.input[i] != ""

    def input_value(self, node: onnx.NodeProto, i: int) -> Value | None:
        return self.values[node.input[i]] if self.has_input(node, i) else None

    def const(self, node: onnx.NodeProto, i: int, what: str = "") -> np.ndarray | None:
        """Data of input ``i`` (None if absent); an error if it is not a constant."""
        if not self.has_input(node, i):
            return None
        v = self.values[node.input[i]]
        if v.data is None:
            label = node.name or (node.output[0] if node.output else "?")
            raise NeedsConstantError(
                f"{self.model_path}: node '{label}' ({node.op_type}): input {i} "
                f"({what or node.input[i]}) must be a constant (computed from the model's "
                "weights or shapes), not a runtime tensor",
                node.input[i],
            )
        return v.data

    def attr(self, node: onnx.NodeProto, name: str, default=None):
        """Attribute value as Python data (str decoded, TensorProto as numpy)."""
        for a in node.attribute:
            if a.name == name:
                v = helper.get_attribute_value(a)
                if isinstance(v, bytes):
                    return v.decode()
                if isinstance(v, onnx.TensorProto):
                    return numpy_helper.to_array(v)
                if isinstance(v, list) and v and isinstance(v[0], bytes):
                    return [x.decode() for x in v]
                return v
        return default

    # --- building nodes -----------------------------------------------------

    def fresh(self, hint: str) -> str:
        """A new value name for an intermediate a converter introduces."""
        self._counter += 1
        return f"{hint}__{self._counter}"

    def add_const(self, array: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        arr = np.asarray(array, order="C")
        dtype = "bool" if arr.dtype == np.bool_ else str(arr.dtype)
        self.values[name] = Value(name, tuple(arr.shape), dtype, arr)
        return name

    def node(self, op: str, onnx_node: onnx.NodeProto, inputs, outputs=None, **attrs) -> Node:
        """A library node standing for ``onnx_node`` (outputs default to the ONNX node's)."""
        outs = list(onnx_node.output) if outputs is None else list(outputs)
        return Node(
            op,
            onnx_node.name or outs[0],
            list(inputs),
            outs,
            attrs,
            source=onnx_node.name or onnx_node.op_type,
        )

    def fail(self, node: onnx.NodeProto, message: str):
        label = node.name or (node.output[0] if node.output else "?")
        raise PackagerError(f"{self.model_path}: node '{label}' ({node.op_type}): {message}")
