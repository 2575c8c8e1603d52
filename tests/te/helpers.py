"""Lower a schedule, generate C, compile, run on numpy arrays."""

from __future__ import annotations

import numpy as np

from packager import te
from packager.codegen import build_kernel, codegen_c


def run(sch, args, name, inputs, cflags=None):
    """Outputs (new arrays) of the kernel for ``inputs``; also returns the C source."""
    func = te.lower(sch, args, name)
    src = codegen_c(func)
    kernel = build_kernel(func) if cflags is None else build_kernel(func, cflags)
    outs = [
        np.zeros(t.shape, dtype=np.bool_ if t.dtype == "bool" else t.dtype)
        for t in args[len(inputs) :]
    ]
    kernel(*[np.ascontiguousarray(a) for a in inputs], *outs)
    return outs, src
