"""The plan cache of one model: specialised plans by input signature, least recently used first
out, bounded by the bytes the plans hold and by a plan count (``pycann.config.PlanCacheConfig``).

A plan's bytes are what it owns beyond the model: its arenas (one per concurrent run), the
constants specialisation folded for its shapes, and the native buffers its bound kernels own
(``plan_bytes`` on a kernel). Packed weights are the model's, shared by every plan
(``kernels.providers.onednn_packed``), so they are not counted here. An evicted plan is closed (its
arenas, bound kernels and oneDNN primitives dropped) and, once enough bytes went, the C heap is
trimmed (``malloc_trim``) so the resident set shrinks rather than holding freed pages.

The newest plan is never evicted, even when it alone exceeds the budget: a call always has a
plan to run (``CacheStats.over_budget`` counts those). Pinned plans (``pin``: a gear model's plans,
built at load) are never evicted either; they count in the bytes held, so other plans make room.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from pycann.config import PlanCacheConfig, plan_cache_config

__all__ = ["CacheStats", "PlanCache", "Sized", "describe", "short_signature", "trim_heap"]

# INFO: a plan built or evicted (``atc --log=info``-style lines for run time: enable with
# ``logging.basicConfig(level=logging.INFO)``)
log = logging.getLogger("pycann.ge.run.plan_cache")

_TRIM_AFTER = 8 << 20  # bytes evicted between two malloc_trim calls (a trim costs ~1 ms)


class Sized(Protocol):
    """What the cache needs from a plan."""

    @property
    def nbytes(self) -> int: ...

    def close(self) -> None: ...


V = TypeVar("V", bound=Sized)


@dataclass(frozen=True)
class CacheStats:
    """Counters of one plan cache, since the model loaded.

    ``hits``/``misses``: calls that found / did not find a specialised plan for their signature;
    ``built``: plans specialised; ``generic_runs``: calls run on the shape-generic plan;
    ``evictions``: plans dropped for the byte or count bound; ``plans``/``bytes_held``: now;
    ``peak_bytes``: most bytes held at once; ``over_budget``: plans kept alone over the budget;
    ``pipelines``: runs of the pass pipeline for this model's plans (once per symbolic signature,
    ``specialize.SpecializeMemo``; -1 where the executor has no memo); ``team_runs``: runs on a plan
    bound for a smaller OpenMP team while other processes kept the CPUs busy (``ge/run/contention.py``)."""

    hits: int
    misses: int
    built: int
    generic_runs: int
    evictions: int
    plans: int
    bytes_held: int
    peak_bytes: int
    max_bytes: int
    max_plans: int
    over_budget: int
    policy: str
    pipelines: int = -1
    team_runs: int = 0  # runs on a plan bound for fewer threads while other processes were busy

    def summary(self) -> str:
        """One line for logs, the profiler and ``atc --mode=6``."""
        return (f"plan cache: {self.plans} plans, {self.bytes_held / 2**20:.1f} of {self.max_bytes / 2**20:.0f} MiB "
                f"(peak {self.peak_bytes / 2**20:.1f}), hits {self.hits}, misses {self.misses}, "
                f"built {self.built}, generic runs {self.generic_runs}, evictions {self.evictions}, "
                f"policy {self.policy}" + (f", pass pipeline runs {self.pipelines}" if self.pipelines >= 0 else "")
                + (f", runs on a smaller team (busy CPUs) {self.team_runs}" if self.team_runs else ""))


class PlanCache(Generic[V]):
    """LRU map signature -> plan, bounded by ``config.max_bytes`` and ``config.max_plans``.

    Thread-safe. ``get`` counts a hit or a miss and refreshes the entry; ``put`` inserts a new
    plan and evicts the least recently used ones beyond the bounds."""

    def __init__(self, config: PlanCacheConfig, on_evict: Callable[[V], None] | None = None) -> None:
        self.config = config
        self._entries: OrderedDict[Hashable, V] = OrderedDict()
        self._bytes: dict[Hashable, int] = {}
        self._pinned: set[Hashable] = set()  # never evicted (``pin``)
        self._lock = threading.Lock()
        self._on_evict = on_evict
        self.hits = self.misses = self.built = self.generic_runs = self.evictions = 0
        self.bytes_held = self.peak_bytes = self.over_budget = 0
        self._evicted_since_trim = 0

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (the parent thread that held it, if any, is not here)."""
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def values(self) -> list[V]:
        """The cached plans, least recently used first."""
        with self._lock:
            return list(self._entries.values())

    def peek(self, key: Hashable) -> V | None:
        """The plan for ``key`` without counting or refreshing it."""
        return self._entries.get(key)

    def get(self, key: Hashable, count: bool = True) -> V | None:
        """The plan for ``key`` (now the most recently used), counted as a hit; None (a miss).
        ``count=False``: neither (a plan asked for outside a call: a load's precompile)."""
        with self._lock:
            v = self._entries.get(key)
            if v is None:
                self.misses += count
                return None
            self._entries.move_to_end(key)
            self.hits += count
            return v

    def pin(self, key: Hashable) -> bool:
        """Keep the plan of ``key`` whatever the bounds (a gear's plan: a gear model's signatures are
        its gears, each built at load; evicting one re-planned that gear on its next call). False when
        no plan of ``key`` is cached."""
        with self._lock:
            if key not in self._entries:
                return False
            self._pinned.add(key)
            return True

    @property
    def pinned_bytes(self) -> int:
        """Bytes the pinned plans hold now."""
        with self._lock:
            return sum(self._bytes.get(k, 0) for k in self._pinned)

    def count(self, hit: bool) -> None:
        """Count a call that looked its plan up with ``get(count=False)`` and then ran: a hit or a
        miss (a call that was refused counts neither)."""
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    def count_generic(self) -> None:
        """Count a call that ran on the shape-generic plan."""
        with self._lock:
            self.generic_runs += 1

    def put(self, key: Hashable, value: V) -> None:
        """Insert a newly built plan; evicts least recently used plans beyond the bounds."""
        evicted: list[V] = []
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes_held -= self._bytes.pop(key, 0)
                evicted.append(old)
            n = int(value.nbytes)
            self._entries[key] = value
            self._bytes[key] = n
            self.bytes_held += n
            self.built += 1
            log.info("[PlanCache] built plan %d for %s: %.2f MiB (%d plans, %.1f MiB held)", self.built,
                     short_signature(key), n / 2**20, len(self._entries), self.bytes_held / 2**20)
            evicted += self._shrink()
            if self.bytes_held > self.config.max_bytes:
                self.over_budget += 1
            self.peak_bytes = max(self.peak_bytes, self.bytes_held)
        self._close(evicted)

    def refresh_bytes(self) -> None:
        """Re-read every plan's bytes (a plan grows an arena per concurrent run) and evict beyond
        the bounds. Called after runs that added an arena."""
        with self._lock:
            for k, v in self._entries.items():
                n = int(v.nbytes)
                self.bytes_held += n - self._bytes[k]
                self._bytes[k] = n
            evicted = self._shrink()
            self.peak_bytes = max(self.peak_bytes, self.bytes_held)
        self._close(evicted)

    def clear(self) -> None:
        """Drop every plan (closing them)."""
        with self._lock:
            evicted = list(self._entries.values())
            self._entries.clear()
            self._bytes.clear()
            self._pinned.clear()
            self.bytes_held = 0
        self._close(evicted)

    def _shrink(self) -> list[V]:
        """Pop least recently used entries beyond the bounds (lock held); keeps the newest one and the
        pinned ones."""
        out: list[V] = []
        cfg = self.config
        while len(self._entries) > 1 and (self.bytes_held > cfg.max_bytes or len(self._entries) > cfg.max_plans):
            newest = next(reversed(self._entries))
            k = next((k for k in self._entries if k not in self._pinned and k != newest), None)
            if k is None:
                break  # only pinned plans (and the newest) are left: they stay, over the bound
            v = self._entries.pop(k)
            self.bytes_held -= self._bytes.pop(k, 0)
            self.evictions += 1
            log.info("[PlanCache] evicted the least recently used plan (%s); %d evictions", short_signature(k), self.evictions)
            out.append(v)
        return out

    def _close(self, evicted: list[V]) -> None:
        if not evicted:
            return
        freed = 0
        for v in evicted:
            freed += int(v.nbytes)
            if self._on_evict is not None:
                self._on_evict(v)
            v.close()
        self._evicted_since_trim += freed
        if self._evicted_since_trim >= _TRIM_AFTER:
            self._evicted_since_trim = 0
            trim_heap()

    def stats(self) -> CacheStats:
        """A snapshot of the counters."""
        cfg = self.config
        return CacheStats(self.hits, self.misses, self.built, self.generic_runs, self.evictions,
                          len(self._entries), self.bytes_held, self.peak_bytes, cfg.max_bytes, cfg.max_plans,
                          self.over_budget, cfg.policy.value)


_libc: ctypes.CDLL | None | bool = False


def trim_heap() -> bool:
    """Return free C-heap pages to the system (glibc ``malloc_trim(0)``); False where the C
    library has no such call (musl, macOS). Freed oneDNN primitives and numpy buffers below the
    mmap threshold otherwise stay in the process's resident set."""
    global _libc
    if _libc is False:
        try:
            lib = ctypes.CDLL(None)  # the process's symbols, the C library's among them (see host_allocator)
            _libc = lib if hasattr(lib, "malloc_trim") else None
        except OSError:
            _libc = None
    if _libc is None or isinstance(_libc, bool):
        return False
    _libc.malloc_trim(0)
    return True


def short_signature(key: Hashable) -> str:
    """A signature as ``[1x3x48x320 float32, ...]`` for log lines."""
    if not isinstance(key, tuple):
        return str(key)
    parts = []
    for e in key:
        if isinstance(e, tuple) and len(e) == 2 and isinstance(e[0], tuple):
            parts.append("x".join(map(str, e[0])) + " " + str(e[1]).lstrip("<|="))
        else:
            parts.append(str(e))
    return "[" + ", ".join(parts) + "]"


def describe(dynamic_inputs: list[str], vision: bool, gears: int = 0) -> str:
    """The ``atc --mode=6`` line about run-time plans for a model whose ``dynamic_inputs`` (names
    with symbolic dims) are listed (``vision``: the graph has convolutions; ``gears``: its number
    of --dynamic_batch_size / image_size / dims gears), with the bounds the environment sets now."""
    cfg = plan_cache_config()
    if not dynamic_inputs:
        return "plan cache: static shapes, one plan"
    if gears:  # (LoadedModel precompiles every gear: ge/run/model.py)
        return f"plan cache: {gears} gears, each gear's plan built at load and kept (never evicted)"
    which = {"specialize": "every input signature gets its own plan",
             "generic": "every input signature runs the shape-generic plan",
             "auto": ("each input signature gets its own plan while the model has shown at most 16 "
                      "(convolutions; built in the background, a new shape's calls run the shape-generic plan "
                      "until it is there; past 16, signatures without a plan stay on the shape-generic plan)"
                      if cfg.build.value == "background" else
                      f"each input signature gets its own plan (convolutions; built {cfg.build.value}) while the "
                      "model has shown at most 16; past them, signatures without a plan stay on the "
                      "shape-generic plan") if vision else
             "new input signatures run the shape-generic plan; one that comes back gets its own plan "
             "while the model has shown at most 8"}[cfg.policy.value]
    return (f"plan cache: dynamic inputs {', '.join(dynamic_inputs)}; policy {cfg.policy.value}: {which}; least "
            f"recently used plans evicted beyond {cfg.max_bytes / 2**20:.0f} MiB or {cfg.max_plans} plans "
            "(PYCANN_PLAN_CACHE_BYTES, PYCANN_PLAN_CACHE_PLANS, PYCANN_PLAN_POLICY, PYCANN_PLAN_BUILD)")
