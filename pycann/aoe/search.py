"""Search strategies over a ``Space``: exhaustive, and a guided search for a trial budget.

``guided`` is the MetaSchedule recipe cut down to what a few hundred points need: a cheap
``prior`` (an analytic estimate, microseconds to compute) ranks every legal point and the best
ranked are measured first; the rest of the budget goes to an evolutionary local search, which
measures unmeasured neighbours (one axis, one step) of the four best points measured so far, the
one the prior ranks best first, so the prior's errors are corrected by measurement. Without a prior the first phase samples at random
(seeded: the same space, objective and seed give the same trials). A point whose objective
raises counts as a trial with an infinite cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from pycann.aoe.space import Config, Space

Objective = Callable[[Config], float]
Progress = Callable[[int, int, str], None]  # (done, total, note)


@dataclass(frozen=True)
class Trial:
    """One measured point: its cost (us; inf when it failed) and why it failed."""

    config: Config
    cost: float
    error: str = ""


@dataclass
class SearchResult:
    """The best point found and every trial, in order."""

    best: Config
    best_cost: float
    trials: list[Trial] = field(default_factory=list)
    space_points: int = 0  # legal points of the space

    @property
    def n_trials(self) -> int:
        return len(self.trials)


def _measure(objective: Objective, cfg: Config) -> Trial:
    try:
        return Trial(cfg, float(objective(cfg)))
    except (ValueError, RuntimeError) as e:
        return Trial(cfg, math.inf, str(e).splitlines()[0])


def _result(trials: list[Trial], points: int) -> SearchResult:
    ok = [t for t in trials if math.isfinite(t.cost)]
    if not ok:
        raise RuntimeError(f"every one of the {len(trials)} candidates failed; first: {trials[0].error if trials else '-'}")
    best = min(ok, key=lambda t: t.cost)
    return SearchResult(best.config, best.cost, trials, points)


def exhaustive(space: Space, objective: Objective, progress: Progress | None = None) -> SearchResult:
    """Measure every legal point. ``RuntimeError`` if all fail or the space has none."""
    legal = space.legal()
    trials = []
    for i, cfg in enumerate(legal):
        trials.append(_measure(objective, cfg))
        if progress:
            progress(i + 1, len(legal), "exhaustive")
    return _result(trials, len(legal))


def budget_for(points: int, fraction: float = 0.1) -> int:
    """Trials allowed for a space of ``points`` legal points: ``floor(fraction * points)``, at least 1."""
    return max(1, int(fraction * points))


def guided(space: Space, objective: Objective, budget: int, prior: Callable[[Config], float] | None = None,
           seed: int = 0, first_share: float = 0.5, progress: Progress | None = None) -> SearchResult:
    """At most ``budget`` trials: ``first_share`` of them on the prior's best-ranked points (or random
    ones), the rest on neighbours of the best measured points. ``RuntimeError`` if all fail."""
    legal = space.legal()
    if not legal:
        raise RuntimeError("the search space has no legal point")
    budget = max(1, min(budget, len(legal)))
    if prior is not None:
        order = [c for _, _, c in sorted((prior(c), i, c) for i, c in enumerate(legal))]
    else:
        rng = np.random.default_rng(seed)
        order = [legal[i] for i in rng.permutation(len(legal))]
    seen: dict[Config, Trial] = {}
    trials: list[Trial] = []

    def run(cfg: Config, phase: str) -> None:
        t = _measure(objective, cfg)
        seen[cfg] = t
        trials.append(t)
        if progress:
            progress(len(trials), budget, phase)

    for cfg in order[: max(1, int(budget * first_share))]:
        run(cfg, "ranked")
    rest = iter(order)
    rank = {c: i for i, c in enumerate(order)}
    while len(trials) < budget:
        ranked = sorted((t for t in seen.values() if math.isfinite(t.cost)), key=lambda t: t.cost)
        # the children of the four best: the prior's favourite first, then the better parent's
        pool = {n: j for j, t in reversed(list(enumerate(ranked[:4]))) for n in space.neighbours(t.config)
                if n not in seen}
        child = min(pool, key=lambda n: (rank[n] if prior is not None else 0, pool[n], rank[n])) if pool else None
        if child is None:  # the best points' neighbourhoods are measured: next in the prior's order
            child = next((c for c in rest if c not in seen), None)
            if child is None:
                break
        run(child, "evolve")
    return _result(trials, len(legal))
