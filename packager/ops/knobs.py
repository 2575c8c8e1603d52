"""Knobs: every choice a schedule template makes, named, with its candidates and default.

A template asks its Config for each choice (``cfg.define(...)``) instead of hard-coding
it. With no recorded values every knob takes its default, so the template gives the
default schedule; the tuner replays a template with a recording Config to learn its
space, then with chosen values to build candidates.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The largest split factor a knob offers: no tile is wider, and listing every divisor of
# a huge extent (a model's dim can be 2**40) would take forever.
MAX_SPLIT = 4096


@dataclass(frozen=True)
class Knob:
    name: str
    candidates: tuple
    default: object


@dataclass
class Config:
    """Chosen knob values (name -> value); the space fills in as a template defines knobs."""

    values: dict = field(default_factory=dict)
    space: dict[str, Knob] = field(default_factory=dict)

    def define(self, name: str, candidates, default):
        """Declare a knob and return its value: the chosen one, else the default."""
        candidates = tuple(candidates)
        if default not in candidates:
            candidates = (default, *candidates)
        self.space[name] = Knob(name, candidates, default)
        value = self.values.get(name, default)
        if value not in candidates:
            raise ValueError(f"knob {name}: {value!r} is not one of {candidates}")
        return value

    def define_split(self, name: str, extent: int, default: int, most: int | None = None) -> int:
        """A split factor of ``extent``: one of its divisors (up to ``most``)."""
        top = min(extent, MAX_SPLIT if most is None else most)
        divisors = [d for d in range(1, top + 1) if extent % d == 0]
        best = max((d for d in divisors if d <= default), default=1)
        return self.define(name, divisors, best)

    def as_dict(self) -> dict:
        """The value of every knob defined so far (defaults included)."""
        return {k: self.values.get(k, knob.default) for k, knob in self.space.items()}
