"""Runs on a smaller OpenMP team while other processes keep the CPUs busy (``ge/run/contention.py``):
which team a run gets, and the plan bound for that team (built by the builder thread beside the
signature's own plan, when the cache has room for both). ``TeamRuns`` is a base class of
``Executor`` (``ge/run/executor.py``): it holds no state of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pycann.ge.run import contention
from pycann.ge.run.generic_runs import _on_team
from pycann.ge.run.plan import PlanClosedError
from pycann.ge.run.plan_builder import BackgroundBuilder
from pycann.ge.run.plan_cache import PlanCache
from pycann.kernels.providers import openmp

__all__ = ["TeamRuns"]

Signature = tuple[tuple[tuple[int, ...], str], ...]


class TeamRuns:
    """The reduced-team part of ``Executor`` (its attributes are the executor's)."""

    _governor: contention.ThreadGovernor | None
    _cache: PlanCache[Any]
    _builder: BackgroundBuilder
    team_runs: int

    if TYPE_CHECKING:
        def _request(self, used: list[int], feeds: Sequence[Any]) -> tuple[
                list[tuple[int, ...] | None], dict[str, np.ndarray]]: ...

    def _team(self) -> int | None:
        """A smaller OpenMP team for this run while other processes keep the CPUs busy, else None."""
        assert self._governor is not None
        available = self._governor.contended()  # (one clock read on a quiet machine: no OpenMP call)
        if available is None:
            return None
        full = openmp.max_threads()
        if not full:
            return None  # no OpenMP runtime loaded: nothing runs on a team
        team = contention.team_for(available, full)
        if team >= full:
            return None
        # each team size gets its own plan (a specialisation and its memory): one thread or a multiple
        # of a quarter of the full team (rounded up), so a drifting load builds at most 4 per signature
        step = -(-full // 4)
        return max(1, team // step * step)

    def _run_team(self, sig: Signature, used: list[int], feeds: Sequence[np.ndarray], team: int) -> list[np.ndarray] | None:
        """Run ``sig`` on its plan bound for ``team`` threads, with the caller's OpenMP team set to it
        for the run (torch's kernels read it per call); None when that plan is not built yet: then it
        is queued for the builder thread (once ``sig``'s own plan exists) and the caller runs as usual."""
        key = (*sig, ("threads", team))
        hit = self._cache.get(key, count=False) if key in self._cache else None
        if hit is None:
            if key not in self._builder.failed and self._room_for_team(sig):
                self._builder.submit(key, *self._request(used, feeds), threads=team)
            return None
        plan = hit.plan
        made = plan.arenas_made
        try:
            outs = _on_team(team, plan, feeds)
        except PlanClosedError:
            return None  # evicted since ``get``: the caller runs as usual (and counts the call)
        # (counted once the run returned: a refused call, an index out of range, counts nothing)
        self._cache.count(hit=True)
        self.team_runs += 1
        if plan.arenas_made != made:
            self._cache.refresh_bytes()  # a concurrent run added an arena: re-check the bound (as ``run``)
        return outs

    def _room_for_team(self, sig: Signature) -> bool:
        """Whether ``sig``'s own plan is cached and the cache has room beside it for a plan of that
        size bound for a smaller team. A reduced plan that pushed out the full team's plan of its
        signature would have it rebuilt when the neighbour stops (a static model's inline, on the
        caller) and evicted again at the next contended spell: a plan build per flip."""
        base = self._cache.peek(sig)
        if base is None:
            return False
        cfg = self._cache.config
        return len(self._cache) < cfg.max_plans and self._cache.bytes_held + base.nbytes <= cfg.max_bytes
