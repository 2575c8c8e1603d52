"""A template's config space: its knobs, recorded by running it once, as one index.

Index i maps to one knob setting by mixed radix over the knobs in the order the template
defines them (the first knob varies slowest). A template whose later knobs depend on
earlier values (a split of what an earlier split left) is handled by the validity
filter: replaying it with the setting must succeed and lower.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..codegen.opencl import check_kernel
from ..ops.knobs import Config, Knob
from ..ops.registry import ScheduleContext, get_op
from ..te.ir import Allocate, PrimFunc
from ..te.visitor import walk_stmts
from .tasks import Task, lower_config

LOCAL_BYTES = 256 * 1024  # stack/local buffers beyond this do not fit a board's cache


@dataclass
class ConfigSpace:
    knobs: list[Knob]

    @property
    def size(self) -> int:
        n = 1
        for k in self.knobs:
            n *= len(k.candidates)
        return n

    def digits(self, index: int) -> list[int]:
        """Candidate position of each knob."""
        out = []
        for k in reversed(self.knobs):
            index, d = divmod(index, len(k.candidates))
            out.append(d)
        return out[::-1]

    def from_digits(self, digits) -> int:
        index = 0
        for k, d in zip(self.knobs, digits, strict=True):
            index = index * len(k.candidates) + d
        return index

    def get(self, index: int) -> dict:
        if not 0 <= index < self.size:
            raise IndexError(f"config {index} outside a space of {self.size}")
        return {
            k.name: k.candidates[d] for k, d in zip(self.knobs, self.digits(index), strict=True)
        }

    def index_of(self, values: dict) -> int | None:
        """The index of a knob setting, or None when it is not in this space."""
        try:
            digits = [k.candidates.index(_norm(values.get(k.name, k.default))) for k in self.knobs]
        except ValueError:
            return None
        return self.from_digits(digits)

    def default_index(self) -> int:
        return self.index_of({})


def _norm(v):
    """JSON gives lists where a template's candidates are tuples."""
    return tuple(_norm(x) for x in v) if isinstance(v, list) else v


def space_of(task: Task) -> ConfigSpace:
    """Run the template once with defaults, recording the knobs it defines."""
    _, outs, (op, attrs, tensor) = task.computes()
    cfg, target = Config(), task.target
    get_op(op).schedules[target.family](ScheduleContext(outs, tensor, attrs, cfg, target))
    return ConfigSpace(list(cfg.space.values()))


def valid(task: Task, values: dict, name: str = "pk_check") -> PrimFunc | None:
    """The lowered candidate, or None when it cannot be valid: the template refuses the
    setting, lowering fails, its local buffers would not fit, or (a GPU kernel) its
    work-group or local memory exceeds the device (codegen.opencl.check_kernel)."""
    try:
        prim = lower_config(task, values, name)
        if task.family == "opencl":
            check_kernel(prim, task.target)
    except Exception:  # any failure of the template or lowering makes the config invalid
        return None
    local = sum(
        s.buffer.size * 8
        for s in walk_stmts(prim.body)
        if isinstance(s, Allocate) and s.buffer.scope == "local"
    )
    return prim if local <= LOCAL_BYTES else None
