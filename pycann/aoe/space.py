"""A discrete search space: named axes of ordered values and a legality check.

A point is one value per axis (``Config``, a frozen mapping); neighbours differ in one axis by
one step of its order, which is what the guided search mutates. ``legal()`` enumerates the
points the check accepts, in a fixed order (exhaustive search and tests rely on it).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

Config = tuple[tuple[str, Any], ...]  # ((axis, value), ...) in axis order: hashable, ordered


@dataclass(frozen=True)
class Axis:
    """One tunable parameter: its name and its values, in an order where neighbours are similar."""

    name: str
    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"axis {self.name!r} has no values")


@dataclass(frozen=True)
class Space:
    """Axes plus ``check(config dict) -> None | reason`` (None: legal)."""

    axes: tuple[Axis, ...]
    check: Callable[[dict[str, Any]], str | None] = lambda c: None

    @property
    def size(self) -> int:
        """Points before the legality check."""
        n = 1
        for a in self.axes:
            n *= len(a.values)
        return n

    def make(self, values: dict[str, Any]) -> Config:
        """The ``Config`` of a dict of axis values (every axis named). ``KeyError`` otherwise."""
        return tuple((a.name, values[a.name]) for a in self.axes)

    def is_legal(self, cfg: Config) -> bool:
        return self.check(dict(cfg)) is None

    def legal(self) -> list[Config]:
        """Every legal point, in axis-product order."""
        out = []
        for combo in itertools.product(*(a.values for a in self.axes)):
            cfg = tuple(zip((a.name for a in self.axes), combo))
            if self.is_legal(cfg):
                out.append(cfg)
        return out

    def neighbours(self, cfg: Config) -> Iterator[Config]:
        """Legal points one step away along one axis (both directions)."""
        vals = dict(cfg)
        for a in self.axes:
            i = a.values.index(vals[a.name])
            for j in (i - 1, i + 1):
                if 0 <= j < len(a.values):
                    cand = self.make({**vals, a.name: a.values[j]})
                    if self.is_legal(cand):
                        yield cand


def powers_of_two(lo: int, hi: int) -> tuple[int, ...]:
    """lo, 2lo, 4lo, ... <= hi."""
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v *= 2
    return tuple(out)


def describe(cfg: Config, names: Sequence[str] | None = None) -> str:
    """``bm=128 bn=64 ...`` (all axes, or ``names``)."""
    d = dict(cfg)
    return " ".join(f"{k}={d[k]}" for k in (names or d))
