"""One converter per ONNX op: an ONNX node to nodes of the op library.

A converter normalizes attributes (defaults, opset differences, inputs that must be
constants such as Reshape's shape) and returns graph nodes. It does not infer shapes:
the frontend gets them from the op's compute. Constant-only nodes never reach a
converter: the frontend folds them first.
"""

from __future__ import annotations

from collections.abc import Callable

CONVERTERS: dict[str, Callable] = {}


def converter(*op_types: str):
    """Decorator: ``@converter("Relu")``; fn(ctx, node) -> list[Node]."""

    def deco(fn):
        for t in op_types:
            if t in CONVERTERS:
                raise ValueError(f"converter for {t} registered twice")
            CONVERTERS[t] = fn
        return fn

    return deco


def supported_op_types() -> set[str]:
    _load_all()
    return set(CONVERTERS)


def get_converter(op_type: str) -> Callable | None:
    _load_all()
    return CONVERTERS.get(op_type)


def _load_all() -> None:
    from . import _all  # noqa: F401
