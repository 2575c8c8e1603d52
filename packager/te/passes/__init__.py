"""Passes over lowered kernels (PrimFuncs) that a target family needs after lowering."""

from .barriers import insert_barriers

__all__ = ["insert_barriers"]
