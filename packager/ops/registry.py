"""The op library's registry: for each op its compute, pattern kind and schedules.

An op's compute takes te placeholders (one per node input, in order) and the node's
normalized attrs and returns the output tensors. Its pattern kind drives fusion:
elementwise, broadcast, injective, reduction, out_elemwise_fusable (conv, dense,
matmul), opaque.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .. import te
from ..target import CpuTarget

PATTERNS = ("elementwise", "broadcast", "injective", "reduction", "out_elemwise_fusable", "opaque")


@dataclass
class ScheduleContext:
    """What a schedule template sees.

    outs: the kernel's output tensors (for a fused group, the last ops of the group);
    anchor: the tensor of the op the template belongs to (== outs[0] for a lone op; for a
    fused group the conv/matmul/reduction whose epilogue the outputs are); attrs: that
    op's attributes; cfg: the knobs; target: the cpu target (the board's vector width,
    cores, ...; packager/target.py), by default the generic one.
    """

    outs: list
    anchor: object
    attrs: dict
    cfg: object
    target: CpuTarget = field(default_factory=CpuTarget)

    @property
    def lanes(self) -> int:
        """float32 lanes in one vector register."""
        return self.target.lanes


@dataclass
class OpDef:
    name: str
    compute: Callable[[list[te.Tensor], dict], list[te.Tensor]]
    pattern: str
    schedules: dict[str, Callable] = field(default_factory=dict)
    # targets whose template has no knobs: nothing to tune (packager/tune/tasks.py)
    fixed: set[str] = field(default_factory=set)


OPS: dict[str, OpDef] = {}


def register_op(name: str, pattern: str):
    """Decorator: ``@register_op("conv2d", "out_elemwise_fusable")`` on the compute."""
    if pattern not in PATTERNS:
        raise ValueError(f"op {name}: unknown pattern {pattern!r}")

    def deco(fn):
        if name in OPS:
            raise ValueError(f"op {name} registered twice")
        OPS[name] = OpDef(name, fn, pattern)
        return fn

    return deco


def register_schedule(name: str, target: str, tunable: bool = True):
    """Decorator for a schedule template ``fn(ctx: ScheduleContext) -> te.Schedule`` of an
    op; it also schedules fused groups anchored on the op. ``tunable=False``: a template
    without knobs, whose kernels are no tuning tasks."""

    def deco(fn):
        OPS[name].schedules[target] = fn
        if not tunable:
            OPS[name].fixed.add(target)
        return fn

    return deco


def get_op(name: str) -> OpDef:
    _load_all()
    return OPS[name]


def _load_all() -> None:
    from . import _all  # noqa: F401  (imports every op module once, registering them)
