"""The accelerator's GEMM core as a tensor intrinsic: what one micro-op iteration of a
GEMM instruction computes for batch 1, ``acc[o] += sum_i int32(inp[i]) * int32(wgt[o][i])``
over one BLOCK_OUT accumulator tile, one BLOCK_IN input tile and one BLOCK_OUT x BLOCK_IN
weight tile. The accel schedules tensorize the innermost (block_out, block_in) loops of
the accumulator stage with it; packager/accel/codegen.py turns each call, with the loops
around it, into GEMM instructions. There is no C: the call never reaches a C generator."""

from __future__ import annotations

import functools

from .. import te
from ..te.tensorize import TensorIntrin


@functools.cache
def gemm_intrin(block_in: int, block_out: int) -> TensorIntrin:
    inp = te.placeholder((block_in,), "int8", "inp")
    wgt = te.placeholder((block_out, block_in), "int8", "wgt")
    i = te.reduce_axis(block_in, "i")
    decl = te.compute(
        (block_out,),
        lambda o: te.sum(te.cast("int32", inp[i]) * te.cast("int32", wgt[(o, i)]), [i]),
        name=f"accel_gemm_{block_out}x{block_in}",
    )
    return TensorIntrin(decl.name, decl, c_def="", isa="accel GEMM")
