"""Memory-bound numpy work on the plan's team: a copy or conversion cut in slabs, the caller's thread
taking the first and one helper thread the others.

numpy's copies and conversions release the GIL but run on one core, which reads and writes at
~15-20 GB/s here against ~45-50 GB/s for the two (``bench/machine_limits.py``); oneDNN's primitives
use every OpenMP thread. A kernel whose work is a numpy pass over a large array (a narrowing cast,
a nearest-neighbour upsample) hands all slabs but the first to the helper thread and does the first
itself (PP-OCRv4 det's 96 x 160 x 160 cast to bf16: 0.82 -> 0.46 ms on an idle machine).

The team is ``openmp.team()``: a plan run on a reduced team (another process keeps the cores busy:
``ge.run.contention``) stays on one thread, as does a process without libgomp. The helper thread is
made on first use and again in a forked child (the parent's is not there).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

import numpy as np

from pycann.kernels.providers import openmp

__all__ = ["MIN_ELEMENTS", "cuts", "run", "team"]

MIN_ELEMENTS = 1 << 18  # below: one thread (handing a slab to the helper costs ~20-40 us)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def team(size: int) -> int:
    """How many slabs a pass over ``size`` elements takes: the OpenMP team, 1 below ``MIN_ELEMENTS``."""
    return max(1, openmp.team()) if size >= MIN_ELEMENTS else 1


def cuts(extent: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` nearly equal ranges covering ``range(extent)`` (fewer when ``extent`` is smaller)."""
    parts = max(1, min(parts, extent))
    edges = np.linspace(0, extent, parts + 1).astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def run(parts: Sequence[Callable[[], None]]) -> None:
    """Every part called once: the first on this thread, the others on the helper thread (one
    after the other); returns when all are done, raising the first error."""
    if len(parts) == 1:
        parts[0]()
        return
    pool = _helper()
    futures: list[Future[None]] = []
    inline: list[Callable[[], None]] = []
    for p in parts[1:]:
        try:
            futures.append(pool.submit(p))
        except RuntimeError:  # the executor is shut down (interpreter exit: an atexit handler, a daemon
            inline.append(p)  # thread still running a model): those parts run here
    error: BaseException | None = None
    try:
        parts[0]()
        for p in inline:
            p()
    except BaseException as e:  # noqa: BLE001 - raised below, once every slab ended
        error = e
    wait(futures)  # all of them: a slab still running after the return would write the caller's array
    for f in futures:
        if error is None:
            error = f.exception()
    if error is not None:
        raise error


def _helper() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pycann-slabs")
        return _pool


def _after_fork_in_child() -> None:
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()  # (the parent's worker thread is not in the child)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
