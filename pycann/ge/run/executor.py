"""Executor: runs a graph on the CPU device from precompiled execution plans (``ge/run/plan.py``).

``Executor`` specialises the model per concrete input signature (shapes fold into constants,
shape subgraphs disappear; the pass pipeline itself runs once per symbolic signature) and caches the plans in a least-recently-used cache bounded by bytes
(``ge/run/plan_cache.py``); signatures its policy does not specialise run on one shape-generic plan of
the compiled graph (``ge/run/generic_runs.py``; docs/dynamic-shapes.md). A ``Plan`` is a list of typed steps
(``ge/plan_steps.Step``) run by one loop or as generated straight-line code.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from pycann.config import PlanCacheConfig, PlanPolicy, kv_cache, omp_bind
from pycann.errors import PycannError
from pycann.ge.ir import Graph
from pycann.ge.planning.candidates import INPLACE, arena_candidates, inplace_candidates
from pycann.ge.planning.memory import MemoryPlan, plan_memory
from pycann.ge.run import contention, plan_builder, shape_program
from pycann.ge.run.generic_runs import GenericRuns, _pinned_run
from pycann.ge.run.plan import Plan, PlanClosedError
from pycann.ge.run.plan_arena import Arena
from pycann.ge.run.plan_builder import BackgroundBuilder
from pycann.ge.run.plan_cache import CacheStats, PlanCache
from pycann.ge.run.plan_steps import ARENA, NORMAL, SCOPED, Step, StepKind
from pycann.ge.run.team_runs import TeamRuns
from pycann.kernels.providers import background_pack

log = logging.getLogger("pycann.ge.run.executor")

__all__ = ["ARENA", "INPLACE", "NORMAL", "SCOPED", "Arena", "CachedPlan", "Executor", "Plan", "Step", "StepKind",
           "arena_candidates", "inplace_candidates"]
# ops whose graphs gain most from plans specialised per shape (channels-last chains, arenas,
# bound convolutions): with PlanPolicy.AUTO every new signature of such a graph is specialised
_VISION_OPS = frozenset({"Conv", "ConvTranspose", "FusedConv", "FusedConvTranspose"})


Signature = tuple[tuple[tuple[int, ...], str], ...]


class CachedPlan(NamedTuple):
    """A specialised plan with its full memory plan (what ``Executor.plan_for`` returns)."""

    plan: Plan
    memory: MemoryPlan | None

    @property
    def nbytes(self) -> int:
        return self.plan.nbytes

    def close(self) -> None:
        self.plan.close()


_EXECUTORS: weakref.WeakSet[Executor] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # A thread of the parent that held a model's plan lock at the fork (its background builder,
    # mid-build, or another caller building inline) does not exist in the child: the lock stayed
    # taken, so every build there, and wait_builds() without a timeout, waited forever. The child
    # starts with fresh locks (its builders are emptied by plan_builder's own at-fork handler).
    for ex in list(_EXECUTORS):
        ex._lock = threading.Lock()
        ex._generic_lock = threading.Lock()
        ex._cache.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Executor(GenericRuns, TeamRuns):
    """Runs a compiled graph; specialises and caches a ``Plan`` per input signature.

    ``specialize(graph, shapes, values) -> Graph`` is supplied by the compiler (shape
    inference, constant folding, If inlining and dead-code removal with the concrete shapes).
    Scalar integer/bool inputs are *control inputs*: their values join the signature, so a
    model that branches on them (Silero's sample rate) gets one flat plan per value. An input
    that shows more than ``MAX_CONTROL_VALUES`` distinct values stops being one.

    ``config`` bounds the plan cache (bytes, plans) and sets the policy (``PlanPolicy``): which
    new signatures ``run`` specialises and which run on the shape-generic plan, and (``PlanBuild``)
    whether a graph with convolutions builds a new signature's plan in its call or after it, on a
    builder thread (``ge/run/plan_builder.py``) while that call runs generic. With
    ``config.adaptive_threads``, while other processes keep the CPUs busy a specialised signature runs
    on a plan bound for a smaller OpenMP team (``ge/run/contention.py``), built in the background the
    first time and cached beside the full team's under the same signature plus the team; a call on
    the shape-generic plan likewise runs its twin for that team once built. ``plan_for``
    always specialises (gears, tools and tests ask for the plan of given shapes). ``memo``, when
    given, is passed to ``specialize`` as its fourth argument (``specialize.SpecializeMemo``).
    """

    MAX_CONTROL_VALUES = 4
    AUTO_SIGNATURES = 8
    # AUTO on a graph with convolutions: distinct signatures that get their own plans; past them the
    # model takes shapes as a stream (an OCR service's crops) and every signature without a plan runs
    # the shape-generic plan, whose convs are bound per shape (kernels/bind_generic_conv.py): plans for
    # each of 84 interleaved PP-OCR shapes made the resident set 3.4x over 5,040 calls (357 -> 1225
    # MB) for later calls ~10 % faster than the generic plan's (0.49x vs 0.45x ORT's median)
    AUTO_VISION_SIGNATURES = 16
    MAX_QUEUED = 64  # background builds waiting at most; a new signature beyond it just runs generic
    # calls of one signature on the generic plan during which no background build may start (ge/run/
    # plan_builder.hold): a stream of new shapes is not slowed by builds, a shape that keeps coming
    # gets its plan built beside its later calls
    HOLD_CALLS = 8

    def __init__(
        self,
        graph: Graph,
        specialize: Callable[..., Graph] | None = None,
        cache_size: int | None = None,
        config: PlanCacheConfig | None = None,
        memo: Any = None,
    ) -> None:
        self.graph = graph
        self._specialize = specialize
        omp_bind()  # a bad PYCANN_OMP_BIND is reported when the model loads, not at its first call
        self._kv_cache = kv_cache() == "auto"  # (PYCANN_KV_CACHE: read once, a bad value fails the load)
        cfg = config or PlanCacheConfig()
        if cache_size is not None:
            cfg = replace(cfg, max_plans=cache_size)
        self._cache: PlanCache[CachedPlan] = PlanCache(cfg)
        self._lock = threading.Lock()
        self._generic: Plan | None = None
        self._generic_lock = threading.Lock()
        self._generic_failed = False
        self._memo: Any = memo  # (specialize.SpecializeMemo: the executor does not import the compiler)
        # the inputs' named dims (ONNX dim_param): the generic plan reads each from one input and computes
        # the layers' equal shape arithmetic and masks once; a call whose inputs give one name two sizes
        # runs the generic plan made without the names (``_plain``, built at its first such call; only
        # where the executor can specialise)
        self._named = shape_program.input_dim_names(graph) if specialize is not None else {}
        self._name_groups = shape_program.name_groups(graph) if self._named else ()
        self._plain: Plan | None = None
        self._nonzero: tuple[tuple[int, int], ...] = ()  # (input, axis) of names the generic plan assumed not 0
        # graphs whose inputs are all static have one signature: specialise it whatever the policy
        self._static = all(getattr(graph.descs.get(n), "is_static", False) for n in graph.inputs)
        self._vision = is_vision(graph)
        # AUTO on a graph without convolutions: signatures seen once so far (None once more than
        # AUTO_SIGNATURES distinct ones came: a shape per call, e.g. a decoder's past length)
        self._seen: set[Signature] | None = set()
        # AUTO with convolutions: signatures seen so far (None once more than AUTO_VISION_SIGNATURES)
        self._vision_seen: set[Signature] | None = set()
        self._interim_calls: dict[Signature, int] = {}  # calls on the generic plan while a build waits
        # PlanBuild.BACKGROUND: new signatures' plans built off the caller (ge/run/plan_builder.py); the
        # builder holds the executor weakly and a dropped executor's waiting builds go with it
        self._builder = BackgroundBuilder(_weak_build(self), self.MAX_QUEUED)
        weakref.finalize(self, self._builder.drop_waiting).atexit = False
        _EXECUTORS.add(self)
        # control input index -> scalar values seen so far (None once it varies too much to specialise)
        self._control: dict[int, set[Any] | None] = {
            i: set() for i, name in enumerate(graph.inputs) if _is_control(graph.descs.get(name))
        }
        # fewer threads while other processes keep the CPUs busy: a specialised plan and the
        # shape-generic plan each get a twin bound for the smaller team (ge/run/contention.py)
        self._governor = contention.governor() if cfg.adaptive_threads and specialize is not None else None
        self.team_runs = 0
        self._generic_teams: dict[int, Plan] = {}  # the shape-generic plan bound per smaller team
        # called while planning, after kernels packed big constant weights (LoadedModel: drop
        # the mapped .om pages of the originals, so peak RSS does not hold both copies)
        self.release_pages: Callable[[], None] | None = None

    def _signature(self, feeds: Sequence[Any]) -> tuple[Signature, list[int]]:
        """The plan cache key of these feeds (shapes, dtypes, control values) and the indices of
        the control inputs it includes (their values are copied only when a plan is built)."""
        # sequence (list) and empty optional (None) feeds do not specialise: their descs stay as compiled
        sig: list[Any] = [
            (x.shape, x.dtype.str) if isinstance(x, np.ndarray) else ((), type(x).__name__) for x in feeds
        ]
        used: list[int] = []
        for i, seen in self._control.items():
            x = feeds[i] if i < len(feeds) else None
            if not isinstance(x, np.ndarray) or x.size != 1 or seen is None:
                continue
            v = x.item()
            if v not in seen:
                if len(seen) >= self.MAX_CONTROL_VALUES:
                    self._control[i] = None  # varies per call: stop
                    continue
                seen.add(v)
            sig.append(("value", i, v))
            used.append(i)
        return tuple(sig), used

    def _request(self, used: list[int], feeds: Sequence[Any]) -> tuple[
            list[tuple[int, ...] | None], dict[str, np.ndarray]]:
        """(input shapes, control values) of a build: all a plan needs from the feeds."""
        shapes = [tuple(x.shape) if isinstance(x, np.ndarray) else None for x in feeds]
        return shapes, {self.graph.inputs[i]: feeds[i].copy() for i in used}

    def _build(self, sig: Signature, used: list[int], feeds: Sequence[Any], warm_arena: bool = False) -> CachedPlan:
        """Specialise, plan and cache the plan of ``sig`` (lock held by the caller)."""
        return self._build_from(sig, *self._request(used, feeds), warm_arena=warm_arena)

    def _build_from(self, sig: Signature, shapes: list[tuple[int, ...] | None],
                    values: dict[str, np.ndarray], warm_arena: bool = False) -> CachedPlan:
        """``_build`` from the shapes and control values alone (lock held by the caller);
        ``warm_arena``: the plan's first arena is made and faulted in during the build (``Plan``)."""
        hit = self._make(shapes, values, warm_arena)
        self._cache.put(sig, hit)
        return hit

    def _make(self, shapes: list[tuple[int, ...] | None], values: dict[str, np.ndarray],
              warm_arena: bool = False) -> CachedPlan:
        """Specialise and plan these shapes and control values; not cached (``_build_from`` caches it,
        ``_run_new`` once its first run returned)."""
        assert self._specialize is not None
        g = self._specialize(self.graph, shapes, values, self._memo) if self._memo is not None \
            else self._specialize(self.graph, shapes, values)
        arena = plan_memory(g, only=arena_candidates(g), share=inplace_candidates(g))
        plan = Plan(g, memory=arena, release=self.release_pages, warm_arena=warm_arena)
        base = self.graph.initializers
        plan.const_bytes = sum(v.nbytes for k, v in g.initializers.items()
                               if base.get(k) is not v and isinstance(v, np.ndarray))
        return CachedPlan(plan, plan_memory(g))

    def plan_for(self, feeds: Sequence[np.ndarray], *, warm_arena: bool = False,
                 pin: bool = False) -> tuple[Plan, MemoryPlan | None]:
        """The plan specialised for these inputs' shapes and dtypes (built on first use).
        ``warm_arena``: a plan built now makes its first arena during the build, its pages
        written on the packing thread (a static model's load: ``LoadedModel.precompile_static``).
        ``pin``: the plan is never evicted (``PlanCache.pin``; a gear's plan, built at load).
        Not counted as a hit or miss (``stats``: those count calls)."""
        if self._specialize is None:
            return self.generic_plan(), None
        sig, used = self._signature(feeds)
        hit = self._cache.get(sig, count=False)
        if hit is None:
            with self._lock:
                hit = self._cache.peek(sig)
                if hit is None:
                    hit = self._build(sig, used, feeds, warm_arena)
                if pin:  # (under the build lock: no other build's put evicts it before it is pinned)
                    self._cache.pin(sig)
        elif pin:
            self._cache.pin(sig)
        return hit

    def pinned_bytes(self) -> int:
        """Bytes the pinned plans (``plan_for(pin=True)``) hold now."""
        return self._cache.pinned_bytes

    def _specialises(self, sig: Signature) -> bool:
        """Whether signature ``sig`` (no plan cached) gets its own plan now (``PlanPolicy``;
        docs/dynamic-shapes.md). AUTO without convolutions: when it comes a second time, while the
        model has shown at most ``AUTO_SIGNATURES`` distinct signatures."""
        policy = self._cache.config.policy
        if self._static or self._generic_failed or policy is PlanPolicy.SPECIALIZE:
            return True
        if policy is PlanPolicy.GENERIC:
            return False
        if self._vision:
            return self._vision_specialises(sig)
        seen = self._seen
        if seen is None:
            return False
        if sig in seen:
            return True
        seen.add(sig)
        if len(seen) > self.AUTO_SIGNATURES:
            self._seen = None  # a new shape on (nearly) every call: stay generic
        return False

    def _vision_specialises(self, sig: Signature) -> bool:
        """AUTO with convolutions: every signature gets its plan while the model has shown at most
        ``AUTO_VISION_SIGNATURES`` distinct ones; from the next new one on, none does (the builds
        still waiting are dropped) and signatures without a plan run the shape-generic plan."""
        seen = self._vision_seen
        if seen is None:
            return False
        if sig not in seen:
            seen.add(sig)
            if len(seen) > self.AUTO_VISION_SIGNATURES:
                self._vision_seen = None
                dropped = self._builder.drop_waiting()
                log.info("more than %d input signatures: new ones run the shape-generic plan (%d waiting builds "
                         "dropped; PYCANN_PLAN_POLICY=specialize builds every one)", self.AUTO_VISION_SIGNATURES,
                         dropped)
                return False
        # (no lock: a call that read the set before another thread's call tripped it may find the
        # tripping signature in it, the set then over the limit: that one is not specialised either)
        return len(seen) <= self.AUTO_VISION_SIGNATURES

    def run(self, feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run with inputs in graph-input order; returns outputs in graph-output order."""
        if self._specialize is None:
            return _pinned_run(self.generic_plan(), feeds)
        sig, used = self._signature(feeds)
        gov = self._governor
        if gov is None:
            return self._dispatch(sig, used, feeds, None)
        team = self._team()
        token = gov.probe_begin(team is None)  # (None on most runs: no read)
        if token is None:
            return self._dispatch(sig, used, feeds, team)
        try:
            return self._dispatch(sig, used, feeds, team)
        finally:
            gov.probe_end(token)

    def _dispatch(self, sig: Signature, used: list[int], feeds: Sequence[np.ndarray],
                  team: int | None) -> list[np.ndarray]:
        """``run`` after the team is known: a reduced-team plan, the cached plan of ``sig``, the generic
        plan while ``sig``'s is built, or a plan built now."""
        if team is not None:
            outs = self._run_team(sig, used, feeds, team)
            if outs is not None:
                return outs
        # (counted once the call returned: a refused call leaves the counters as they were)
        hit = self._cache.get(sig, count=False)
        if hit is None:
            fresh = self._unseen(sig)
            try:
                outs = self._miss(sig, used, feeds, team)
            except PycannError:
                if fresh:
                    self._unsee(sig)  # a refused signature does not count toward the policy's limits
                raise
            self._cache.count(hit=False)
            return outs
        plan = hit.plan
        made = plan.arenas_made
        try:
            outs = _pinned_run(plan, feeds)
        except PlanClosedError:  # another thread's build evicted it since ``get``: look it up again
            return self.run(feeds)
        self._cache.count(hit=True)
        if plan.arenas_made != made:
            self._cache.refresh_bytes()  # a concurrent run added an arena: re-check the bound
        return outs

    def _miss(self, sig: Signature, used: list[int], feeds: Sequence[np.ndarray],
              team: int | None) -> list[np.ndarray]:
        """A call whose signature has no plan cached: the generic plan, or a plan built now."""
        if not self._specialises(sig):
            if self._vision and self._in_background() and self._holds(sig):
                # (past AUTO_VISION_SIGNATURES: its early calls still hold the builds other models
                # of the process may have waiting, as every new shape's first calls do)
                with plan_builder.hold():
                    return self._run_generic(sig, used, feeds, team)
            return self._run_generic(sig, used, feeds, team)
        if self._in_background() and sig not in self._builder.failed:
            held = self._holds(sig)
            if held:
                with plan_builder.hold():  # no build starts beside this call: it is the one waited on
                    outs = self._run_generic(sig, used, feeds, team)
            else:
                outs = self._run_generic(sig, used, feeds, team)
            if not self._generic_failed:
                # past its held calls it keeps coming (hot): its build starts now even beside other
                # shapes' held calls (else it waited for a pause in new shapes)
                self._builder.submit(sig, *self._request(used, feeds), hot=not held)
            return outs
        return self._run_new(sig, used, feeds)

    def _run_new(self, sig: Signature, used: list[int], feeds: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Build ``sig``'s plan on the caller and run it; the plan is cached only once that first run
        returned (a call its plan refuses, an index out of range, leaves the cache as it was). The
        build lock is held through the first run, so concurrent first calls of ``sig`` build it once."""
        with self._lock:
            hit = self._cache.peek(sig)
            if hit is None:
                new = self._make(*self._request(used, feeds))
                try:
                    outs = _pinned_run(new.plan, feeds)
                except BaseException:
                    new.close()
                    raise
                self._cache.put(sig, new)
                return outs
        plan = hit.plan
        made = plan.arenas_made
        try:
            outs = _pinned_run(plan, feeds)
        except PlanClosedError:
            return self._run_new(sig, used, feeds)
        if plan.arenas_made != made:
            self._cache.refresh_bytes()
        return outs

    def _unseen(self, sig: Signature) -> bool:
        """``sig`` is not yet among the signatures the AUTO policy counts (``_seen``, ``_vision_seen``)."""
        return not ((self._seen is not None and sig in self._seen)
                    or (self._vision_seen is not None and sig in self._vision_seen))

    def _unsee(self, sig: Signature) -> None:
        """Take back the counting of ``sig`` by ``_specialises`` (its call was refused)."""
        for seen in (self._seen, self._vision_seen):
            if seen is not None:
                seen.discard(sig)

    def _holds(self, sig: Signature) -> bool:
        """Whether this call of ``sig`` on the generic plan holds the background builds: its first
        ``HOLD_CALLS`` calls do (counted while its plan is missing; bounded like the queue)."""
        n = self._interim_calls.get(sig, 0)
        if n >= self.HOLD_CALLS:
            return False
        if len(self._interim_calls) >= 16 * self.MAX_QUEUED:
            self._interim_calls.clear()
        self._interim_calls[sig] = n + 1
        return True

    def _build_in_background(self, sig: Any, shapes: list[tuple[int, ...] | None],
                             values: dict[str, np.ndarray]) -> None:
        """The builder thread's build: ``sig``'s plan unless a call built it meanwhile; for
        ``("generic", n)`` the shape-generic plan bound for ``n`` threads (the builder runs with n)."""
        with background_pack.inline():  # (its packing stays on this thread: the caller's runs use the other core)
            if isinstance(sig, tuple) and len(sig) == 2 and sig[0] == "generic":
                with self._generic_lock:
                    if sig[1] not in self._generic_teams:
                        self._generic_teams[sig[1]] = Plan(self._generic_graph(), release=self.release_pages,
                                                           generic_bind=True, interim=self._in_background())
                return
            with self._lock:
                if self._cache.peek(sig) is None:
                    self._build_from(sig, shapes, values)

    def wait_builds(self, timeout: float | None = None) -> bool:
        """Block until the background builds queued so far are done (tests, tools, a service
        warming up on known shapes). Returns False when ``timeout`` (seconds) passed first."""
        return self._builder.wait(timeout)

    def pending_builds(self) -> int:
        """Signatures queued for (or in) a background build now."""
        return self._builder.pending()

    def cache_len(self) -> int:
        """How many specialised plans are cached now."""
        return len(self._cache)

    def stats(self) -> CacheStats:
        """The plan cache's counters (hits, misses, plans built, evictions, bytes held) and the
        runs of the pass pipeline (once per symbolic signature: ``specialize.SpecializeMemo``)."""
        st = replace(self._cache.stats(), team_runs=self.team_runs)
        runs = getattr(self._memo, "pipeline_runs", None)
        return st if runs is None else replace(st, pipelines=int(runs))


def _weak_build(ex: Executor) -> Callable[[Any, list[tuple[int, ...] | None], dict[str, np.ndarray]], None]:
    """``ex._build_in_background`` for its builder thread, holding ``ex`` weakly: a model dropped while
    builds of its new shapes waited (other calls held the builds back) stayed alive, its weights and
    plans with it, and its builder thread waited to build plans for nobody (a model made per request on
    two threads: up to 260 such models and threads at once, ~1.5 GB resident with PP-OCRv4 rec)."""
    ref = weakref.ref(ex)

    def build(sig: Any, shapes: list[tuple[int, ...] | None], values: dict[str, np.ndarray]) -> None:
        live = ref()
        if live is not None:
            live._build_in_background(sig, shapes, values)

    return build


def is_vision(graph: Graph) -> bool:
    """The graph has convolutions: ``PlanPolicy.AUTO`` specialises each of its input signatures."""
    return any(n.op_type in _VISION_OPS for n in graph.nodes)


def _is_control(d: Any) -> bool:
    """A scalar (or one-element) integer/bool input."""
    if d is None or getattr(d, "kind", "tensor") != "tensor" or d.shape is None or d.dtype not in _CONTROL_DTYPES:
        return False
    return all(x == 1 for x in d.shape)


_CONTROL_DTYPES = frozenset({2, 3, 4, 5, 6, 7, 9, 12, 13})
