"""The shape-generic plan of an ``Executor`` (``ge/run/executor.py``): built once per model from the
compiled graph (its shape arithmetic collapsed, named dims read once, KV caches appended in place),
its twins (without the named dims; bound for a smaller OpenMP team), and the runs on it: a call the
generic plan refuses is checked by shape inference and, but under ``PlanPolicy.GENERIC``, specialised
(docs/dynamic-shapes.md). ``GenericRuns`` is a base class of ``Executor``: it holds no state of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pycann.config import ConfigError, PlanBuild, PlanPolicy
from pycann.errors import PycannError
from pycann.ge.ir import Graph
from pycann.ge.run import contention, dedup, kv_alias, shape_program
from pycann.ge.run.plan import Plan
from pycann.ge.run.plan_builder import BackgroundBuilder
from pycann.ge.run.plan_cache import PlanCache
from pycann.kernels.providers import available as providers_available
from pycann.kernels.providers import omp_affinity, openmp

__all__ = ["GenericRuns"]

Signature = tuple[tuple[tuple[int, ...], str], ...]


class GenericRuns:
    """The shape-generic plan's part of ``Executor`` (its attributes are the executor's)."""

    graph: Graph
    _specialize: Callable[..., Graph] | None
    _cache: PlanCache[Any]
    _builder: BackgroundBuilder
    _generic: Plan | None
    _generic_lock: threading.Lock
    _generic_failed: bool
    _generic_teams: dict[int, Plan]
    _plain: Plan | None
    _named: dict[str, tuple[str, int]]
    _name_groups: tuple[tuple[tuple[int, int], ...], ...]
    _nonzero: tuple[tuple[int, int], ...]
    _kv_cache: bool
    _static: bool
    _vision: bool
    team_runs: int
    release_pages: Callable[[], None] | None

    if TYPE_CHECKING:
        def _request(self, used: list[int], feeds: Sequence[Any]) -> tuple[
                list[tuple[int, ...] | None], dict[str, np.ndarray]]: ...

        def _run_new(self, sig: Signature, used: list[int], feeds: Sequence[np.ndarray]) -> list[np.ndarray]: ...

    def generic_plan(self) -> Plan:
        """The plan of the compiled graph as it is: shapes resolved by each kernel at run time
        (no arena, no prepared kernels), built once and shared by every signature."""
        if self._generic is None:
            with self._generic_lock:  # not ``_lock``: a background build may hold that one for long
                if self._generic is None:
                    # constant-weight GEMMs bound once (packed weights, a primitive per row count)
                    # (interim: it serves a new signature only until a builder thread made its plan)
                    self._generic = Plan(self._generic_graph(), release=self.release_pages, generic_bind=True,
                                         interim=self._in_background())
        return self._generic

    def _generic_graph(self, named: bool = True) -> Graph:
        """The graph of the shape-generic plan and of its twins bound for smaller teams: its shape
        arithmetic as one step per value it feeds (ge/run/shape_program.py), reading the inputs' named
        dims from one input and computing equal pure nodes once (ge/run/dedup.py) unless ``named`` is
        False (the plan of calls that break the names), and, unless ``PYCANN_KV_CACHE=off``, its KV
        caches appended in place (ge/run/kv_alias.py)."""
        names = self._named if named else {}
        nonzero: set[str] = set()
        graph, _ = shape_program.collapse(self.graph, names, nonzero)
        if names:
            self._nonzero = tuple((self.graph.inputs.index(self._named[s][0]), self._named[s][1])
                                  for s in sorted(nonzero))
            graph, _ = dedup.merge_equal(graph)
        if self._kv_cache:
            graph, _ = kv_alias.alias(graph)
        return graph

    def prepare_generic(self) -> bool:
        """Build the shape-generic plan now (at model load) when new signatures will run on it:
        policy ``generic``, ``auto`` on a graph without convolutions, or with convolutions and
        background builds; not for all-static graphs. A graph it cannot be built for is left to
        the first call (which then reports or specialises). True when the plan exists now."""
        cfg = self._cache.config
        if self._static or self._specialize is None or cfg.policy is PlanPolicy.SPECIALIZE:
            return False
        if cfg.policy is PlanPolicy.AUTO and self._vision and cfg.build is not PlanBuild.BACKGROUND:
            return False
        try:
            self.generic_plan()
        except Exception:  # noqa: BLE001 - the first call builds it again and reports the error there
            return False
        if self._vision and providers_available("onednn"):
            # the generic plan's pointwise convs share oneDNN's GEMM kernels, generated once per
            # process (~35 ms): here at load, as ORT's session creation does, not in the first call
            from pycann.kernels.providers import onednn_pointwise

            onednn_pointwise.warm()
        return True

    def _run_generic(self, sig: Signature, used: list[int], feeds: Sequence[np.ndarray],
                     team: int | None = None) -> list[np.ndarray]:
        """A run on the shape-generic plan (``sig``, ``used``: the call's signature). Inputs it refuses
        are checked by shape inference (``_refused``: a ``ShapeError`` naming the node is raised where
        the graph cannot take them). Under ``PlanPolicy.GENERIC`` the refusal is raised and nothing is
        specialised. Otherwise the call is specialised: a graph the generic plan cannot run (a kernel
        that needs constant shapes) is specialised from then on, and inputs that the specialised plan
        refuses too raise and leave the generic plan in use. With a smaller ``team`` (busy CPUs), on the
        generic plan bound for that team once the builder thread made it (its primitives per row count
        are created on the caller's team, which the run sets to ``team``)."""
        try:
            outs = self._generic_outputs(feeds, team)
        except ConfigError:
            raise  # a knob with a bad value: not a graph the generic plan cannot run
        except PycannError:
            self._refused(used, feeds)  # (raises when the shapes do not fit the graph)
            if self._cache.config.policy is PlanPolicy.GENERIC:
                raise  # no specialised plan under GENERIC: the generic plan's refusal is the answer
            self._generic_failed = True
            try:
                return self._run_new(sig, used, feeds)
            except PycannError:
                # the specialised plan refuses these inputs too: they do not fit the graph (an index
                # out of range), the generic plan is not at fault and stays in use; else one bad call
                # would have every later new shape build a plan
                self._generic_failed = False
                raise
        self._cache.count_generic()
        return outs

    def _generic_outputs(self, feeds: Sequence[np.ndarray], team: int | None) -> list[np.ndarray]:
        """``_run_generic``'s run itself: the generic plan (or its twin without named dims, or bound for
        ``team``) on ``feeds``."""
        plan = self.generic_plan()
        if (self._name_groups or self._nonzero) \
                and not shape_program.names_agree(self._name_groups, feeds, self._nonzero):
            # the inputs give a name two sizes (valid ONNX: pasts of different lengths per layer), or
            # 0 to one the plan's Reshape targets assumed not 0
            return _pinned_run(self._plain_plan(), feeds)
        if team is not None:
            reduced = self._generic_teams.get(team)
            if reduced is not None:
                outs = _on_team(team, reduced, feeds)
                self.team_runs += 1  # (once it returned: a refused call counts nothing)
                return outs
            if ("generic", team) not in self._builder.failed:
                # hot: built beside held calls, they are the calls it serves (a stream of new shapes
                # on busy CPUs held it off, and ran on the full team, for as long as it lasted)
                self._builder.submit(("generic", team), [], {}, threads=team, hot=True)
        return _pinned_run(plan, feeds)

    def _refused(self, used: list[int], feeds: Sequence[np.ndarray]) -> None:
        """After the generic plan refused ``feeds``: shape inference and folding of the compiled graph for
        their shapes (``Specializer.check``: nothing built, cached or counted) raises the ``ShapeError``
        naming the node that cannot take them; returns when they fit (a fault in the input values, or a
        kernel of the generic plan that needs constant shapes) or where the executor has no check."""
        check = getattr(self._specialize, "check", None)
        if check is not None:
            check(self.graph, *self._request(used, feeds))

    def _plain_plan(self) -> Plan:
        """The shape-generic plan without the named dims' reading (``names_agree`` fails for a call's
        feeds), built at its first use. Such calls used to run a plan specialised for their shapes: a
        plan built per call in a decode loop whose layers' pasts differ in length, twice a step's time."""
        if self._plain is None:
            with self._generic_lock:
                if self._plain is None:
                    self._plain = Plan(self._generic_graph(named=False), release=self.release_pages,
                                       generic_bind=True, interim=self._in_background())
        return self._plain

    def _in_background(self) -> bool:
        """A new signature of this graph runs generic while its plan is built off the caller
        (``PlanBuild.BACKGROUND``: graphs with convolutions under ``auto``, not all-static)."""
        cfg = self._cache.config
        return (cfg.build is PlanBuild.BACKGROUND and cfg.policy is PlanPolicy.AUTO and self._vision
                and not self._static and not self._generic_failed)


def _pinned_run(plan: Plan, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``plan.run(feeds)`` on the full team, pinned one thread per CPU while no other process keeps
    these CPUs busy (``kernels/providers/omp_affinity.py``: on a VM, calls spaced by idle gaps otherwise
    often put the caller and the woken worker on one CPU; ``contention.ThreadGovernor.quiet``). Plans
    with torch kernels run as is (torch's pool could be created inside the run and inherit the one CPU)."""
    if plan.torch_kernels:
        return plan.run(feeds)
    with omp_affinity.pinned_caller(contention.governor().quiet()):
        return plan.run(feeds)


def _on_team(team: int, plan: Plan, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``plan.run(feeds)`` with the calling thread's OpenMP team set to ``team`` (torch's kernels and
    primitives created during the run read it), restored after."""
    full = openmp.max_threads()
    openmp.set_max_threads(team)
    try:
        return plan.run(feeds)
    finally:
        openmp.set_max_threads(full)
