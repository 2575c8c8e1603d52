"""Control-flow nodes: ``if`` (one of two subgraphs, by a runtime condition) and ``loop``
(a subgraph run while a trip count and a condition allow, carrying values and stacking
scan outputs). They are no kernels: the runtime runs their subgraphs (each compiled like
the main graph, docs/bundle-format.md "Control flow"). The compute only gives the outputs'
shapes and dtypes, as ``attrs["out_types"]`` says, so passes see an opaque node."""

from __future__ import annotations

from .. import te
from .registry import register_op

CONTROL_FLOW_OPS = ("if", "loop")


def _outputs(args, attrs):
    return [
        te.compute(shape, lambda *i, d=dtype: te.const(0, d)) for shape, dtype in attrs["out_types"]
    ]


for _op in CONTROL_FLOW_OPS:
    register_op(_op, "opaque")(_outputs)
