"""Which oneDNN implementation a first convolution (few input channels) runs: measured, not ranked.

oneDNN takes the first implementation in a fixed list that accepts a problem. For the first
convolution of a vision model (3 input channels, a large image) that ranking is often not the
fastest on the CPU at hand: on an AMX Xeon its ``jit:avx512_core`` kernel ran SqueezeNet's
3x3/2 stem in 375 us where its ``jit:avx2`` kernel took 235 (aligned buffers; 730 vs 308 on numpy's,
16 bytes off a cache line), yet won at 16 output channels
(``bench/conv_impls.py``, bench/RESULTS.md). No static rule fits every CPU, so such a conv's
first plan times each implementation oneDNN offers for it, once, on scratch buffers, and keeps
the fastest (AOE's measured kernel choice, done at plan time for the one node per model where it
pays). The choice is remembered per problem kind (weight shape, geometry, post-ops, OpenMP team;
not the image size), so later image sizes of the same conv walk straight to it.

Bounded cost: only a conv with fewer than ``MAX_CHANNELS`` input channels per group is searched
(oneDNN's own "first convolution" class, whose kernels are the ones ranked poorly); a problem of
fewer than ``MIN_FLOPS`` is not (it runs in tens of microseconds: the search, a JIT compile per
candidate, would cost more than it could save, and a shape-generic model would pay it for every
new small image size; nothing is remembered, so a larger image of it is searched); implementations
that keep their JIT code in oneDNN's process-wide store (``onednn_kernel_store.GLOBAL_KERNELS``) and
the reference loops are not candidates, nor oneDNN's gemm convolution (it runs only on the thread that made
it); another implementation replaces the first only when it is ``MARGIN`` times faster, so a near
tie keeps oneDNN's choice (and results that do not depend on timing noise).

Results: every candidate computes the same convolution. oneDNN's ``jit`` kernels of different ISAs
sum in one order (bit-identical outputs, tests/kernels/test_onednn_impl_search.py), so a choice that
timing noise flips between them changes no result.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pycann.kernels.providers import aligned, omp_fork
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers.onednn_kernel_store import GLOBAL_KERNELS

__all__ = ["MARGIN", "MAX_CHANNELS", "MIN_FLOPS", "choices", "fastest", "searched", "thread_bound", "walk_to"]

MAX_CHANNELS = 16  # input channels per group below which oneDNN's jit kernels take their "first conv" path
MIN_FLOPS = 10_000_000  # smaller problems (~50 us at 200 GFLOP/s) keep oneDNN's first choice unsearched
MARGIN = 1.2  # an alternative must run this many times faster than the first choice to replace it
RUNS = 3  # timed runs per candidate, in turns (min), after one warm-up run each
WARM_CUTOFF = 2.0  # a candidate whose warm-up run took this many times the best warm-up is not timed on
# Narrower-vector twins of a kernel family oneDNN also offers with wider ones: never the fastest on
# a CPU that has the wider ISA (bench/conv_impls.py), and each costs a JIT compile to find that out
SKIPPED = ("sse41",)
# oneDNN's gemm convolution (``x64:gemm:jit``) crashed the process (SIGSEGV; not every time: seen
# after the search's own candidates, or an ONNX Runtime session, had run) when executed on another
# thread than the one that made it, as a plan's kernels are (its bf16 twin fails with
# invalid_arguments there, onednn_bf16): never a candidate
THREAD_BOUND = ("gemm",)

# problem kind -> the implementation name chosen for it (``impl_info``)
choices: dict[tuple[Any, ...], str] = {}
searched = [0]  # searches done in this process (tests: a second image size of a kind is not searched)
_lock = omp_fork.fork_safe(threading.Lock())
# problem kind -> set when the search of it running on some thread ends: the first plans of a kind made
# at once (a thread pool's first calls at several image sizes) wait for that one search, instead of each
# timing the candidates beside the others (N times the JIT compiles, and a choice made of the noise)
_running: dict[tuple[Any, ...], threading.Event] = {}
# (a parent's thread searching at a fork is not in the child: its event would never be set there)
omp_fork.renew_in_child(globals(), _running=dict)


def eligible(group: int, in_channels: int, transpose: bool) -> bool:
    """Whether a conv belongs to the class whose implementation is measured: a convolution (not
    grouped: depthwise convs keep ``jit_dw``, onednn_kernel_store) on fewer than ``MAX_CHANNELS``
    input channels."""
    return not transpose and group == 1 and in_channels < MAX_CHANNELS


class _Candidate:
    """One implementation's primitive over the shared scratch buffers, and its weights' buffer."""

    __slots__ = ("name", "prim", "weights", "best_us")

    def __init__(self, pd: capi.PrimitiveDesc, args: list[tuple[int, capi.Memory]]) -> None:
        self.name = pd.impl_info()
        wmd = pd.query_md(capi.QUERY_WEIGHTS_MD)
        self.weights = aligned.empty(wmd.size() // 4 + 1)  # (as the plan's packed weights, oneDNN's)
        self.weights.fill(0.5)
        self.prim = capi.Primitive(pd, [*args, (capi.ARG_WEIGHTS, capi.Memory(wmd, self.weights.ctypes.data))],
                                   keep_pd=False)
        self.best_us = self.run_us()  # the warm-up run (JIT code and scratchpad first touched)

    def run_us(self) -> float:
        t0 = time.perf_counter()
        self.prim.execute()
        return (time.perf_counter() - t0) * 1e6


def _scratch(mds: Sequence[tuple[int, capi.MemoryDesc]]) -> tuple[list[np.ndarray], list[tuple[int, capi.Memory]]]:
    """Buffers of 0.5s (not zero pages, which would all read one cached page) for every argument."""
    bufs, args = [], []
    for arg, md in mds:
        buf = aligned.empty(md.size() // 4 + 1)
        buf.fill(0.5)
        bufs.append(buf)
        args.append((arg, capi.Memory(md, buf.ctypes.data, keep_md=False)))
    return bufs, args


def _search(pd: capi.PrimitiveDesc, make: Callable[[], capi.PrimitiveDesc],
            mds: Sequence[tuple[int, capi.MemoryDesc]]) -> str | None:
    """The name of the implementation measured fastest (None: ``pd``'s own primitive failed)."""
    bufs, args = _scratch(mds)  # (alive until the search returns: the memories point into them)
    try:
        first = _Candidate(pd, args)
    except capi.DnnlError:
        return None  # (the plan makes its own primitive, and raises what oneDNN says there)
    cands, walker, seen = [first], make(), {first.name}
    while True:
        name = walker.impl_info()
        parts = name.split(":")
        if name not in seen and not name.startswith(GLOBAL_KERNELS) and "ref" not in parts \
                and not any(p in SKIPPED for p in parts) and not thread_bound(name):
            seen.add(name)
            try:
                c: _Candidate | None = _Candidate(walker, args)
            except capi.DnnlError:
                c = None  # (oneDNN could not make or run this one here: not a candidate)
            if c is not None and c.best_us < WARM_CUTOFF * min(x.best_us for x in cands):
                cands.append(c)
        if not walker.next_impl():
            break
    if len(cands) > 1:
        # timed in turns, so a disturbance (another process, a frequency change) hits all alike
        for c in cands:
            c.best_us = float("inf")
        for _ in range(RUNS):
            for c in cands:
                c.best_us = min(c.best_us, c.run_us())
    best = min(cands[1:], key=lambda c: c.best_us, default=first)
    return best.name if best.best_us * MARGIN < first.best_us else first.name


def walk_to(make: Callable[[], capi.PrimitiveDesc], name: str) -> capi.PrimitiveDesc | None:
    """A fresh descriptor moved on to implementation ``name``; None when oneDNN no longer offers it."""
    pd = make()
    while pd.impl_info() != name:
        if not pd.next_impl():
            return None
    return pd


def thread_bound(name: str) -> bool:
    """Whether implementation ``name`` (``impl_info``) runs only on the thread that made it (``THREAD_BOUND``)."""
    return any(p in THREAD_BOUND for p in name.split(":"))


def fastest(pd: capi.PrimitiveDesc, make: Callable[[], capi.PrimitiveDesc], kind: tuple[Any, ...],
            mds: Sequence[tuple[int, capi.MemoryDesc]], flops: int) -> capi.PrimitiveDesc:
    """``pd``, or a descriptor of the same problem on the implementation measured fastest for
    ``kind`` (searched now when ``kind`` has no remembered choice and the problem has ``flops`` >=
    ``MIN_FLOPS``).

    ``make`` returns a fresh descriptor of the problem (oneDNN's first implementation);
    ``mds``: (``ARG_*``, descriptor) of every argument but the weights (whose layout each
    implementation picks); ``flops``: 2 x multiply-adds of the problem. Raises ``capi.DnnlError``
    only as ``make`` does."""
    chosen = _choice(pd, make, kind, mds, flops)
    if chosen is None or chosen == pd.impl_info() or chosen.startswith(GLOBAL_KERNELS):
        # (a global-store kernel won at this kind's first plan, that weight's first primitive; a later
        # plan that ``onednn_kernel_store.own_kernels`` moved to a jit kernel stays there)
        return pd
    return walk_to(make, chosen) or pd


def _choice(pd: capi.PrimitiveDesc, make: Callable[[], capi.PrimitiveDesc], kind: tuple[Any, ...],
            mds: Sequence[tuple[int, capi.MemoryDesc]], flops: int) -> str | None:
    """``kind``'s remembered choice; else, for a problem of >= ``MIN_FLOPS``, the one a search
    finds: this thread's, or the one another thread is running (None: no choice)."""
    pending = mine = None
    with _lock:
        chosen = choices.get(kind)
        if chosen is not None or flops < MIN_FLOPS:
            return chosen
        pending = _running.get(kind)
        if pending is None:
            mine = _running[kind] = threading.Event()
    if pending is not None:
        pending.wait()  # another thread's search of this kind: its choice (none if it failed)
        with _lock:
            return choices.get(kind)
    assert mine is not None
    try:
        # (a forked child's forking thread must not run the candidates in its libgomp pool, the
        # parent's: a model loaded there builds its plans on that thread, and the search hung)
        found = omp_fork.run_fresh(_search, pd, make, mds) if omp_fork.stale() else _search(pd, make, mds)
        if found is None:
            return None
        with _lock:
            searched[0] += 1
            # (a kind's choice is set once, so every plan of the kind runs one implementation)
            return choices.setdefault(kind, found)
    finally:
        with _lock:
            if _running.get(kind) is mine:
                del _running[kind]
        mine.set()
