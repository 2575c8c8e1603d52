"""The generic GPU schedule: any op or fused group, one work-item per output element.

Every stage without a reduction is inlined into its readers; a reduction is computed
inside the work-item that reads it (its region for one output element, which is one
value when the reader reads it at its own index). Each output's data axes are fused and
split into work-groups of ``GROUP`` work-items (fewer for small outputs), bound to
``blockIdx.x`` / ``threadIdx.x``; reduction axes run serially inside the work-item.
A group this cannot express (one output read by another, a reduction read by two
stages) fails the GPU kernel check and runs on the CPU.
"""

from __future__ import annotations

from ... import te
from ...target import OpenCLTarget

GROUP = 64  # work-items per work-group: a few SIMD widths on Mali and on PoCL's CPU


def group_size(total: int, target: OpenCLTarget, want: int = GROUP) -> int:
    """Work-items per group for ``total`` items: ``want`` within the device's limits, and
    no more than the items there are."""
    return max(1, min(want, target.max_work_group_size, target.max_work_item_sizes[0], total))


def bind_flat(st, target: OpenCLTarget, want: int = GROUP):
    """Fuse the stage's data leaves (they lead its leaves) and bind them to work-groups
    and work-items along x; returns the work-item leaf."""
    data = [iv for iv in st.leaf_iter_vars if iv.kind == "data"]
    if not data:  # a scalar output: one work-item
        return None
    fused = st.fuse(*data) if len(data) > 1 else data[0]
    outer, inner = st.split(fused, group_size(fused.extent, target, want))
    st.bind(outer, "blockIdx.x")
    st.bind(inner, "threadIdx.x")
    return inner


def gpu_default_schedule(outs, target: OpenCLTarget) -> te.Schedule:
    sch = te.create_schedule(outs)
    for st in sch.stages:
        if not st.is_output and not st.op.reduce_axis:
            st.compute_inline()
    readers = {}
    for st in sch.stages:
        if st.attach_type == "inline":
            continue
        for t in _reads(sch, st):
            readers.setdefault(id(t), []).append(st)
    items = {}
    for st in sch.stages:
        if st.is_output:
            items[id(st)] = bind_flat(st, target)
    for st in sch.stages:
        if st.is_output or not st.op.reduce_axis:
            continue
        users = readers.get(id(st.tensor), [])
        if len(users) == 1 and items.get(id(users[0])) is not None:
            st.compute_at(users[0], items[id(users[0])])
        else:
            bind_flat(st, target)  # at root: fails the kernel check if another nest reads it
    return sch


def _reads(sch: te.Schedule, st) -> list:
    """Tensors of non-inlined stages that ``st`` reads, through its inlined producers."""
    out, seen, stack = [], set(), [st]
    while stack:
        cur = stack.pop()
        for t in cur.op.input_tensors:
            prod = sch.stage_of(t)
            if prod is None or id(t) in seen:
                continue
            seen.add(id(t))
            if prod.attach_type == "inline":
                stack.append(prod)
            else:
                out.append(t)
    return out
