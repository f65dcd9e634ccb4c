"""A rank exits 0 however it leaves gloo: collectives on temporaries, futures with Python callbacks
still pending, with or without ``destroy_process_group`` (``Communicator.destroy`` and its exit
hook release the gloo group before Python finalizes)."""

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from pycann.hccl import collectives as C
from pycann.hccl.comm import Communicator
from pycann.hccl.constants import HcclReduceOp
from pycann.hccl.errors import HcclError
from tests.hccl.spawn import check_ok, collect, start_ranks


def test_exit_with_pending_futures_and_callbacks() -> None:
    # Two worlds of each kind at once: before the fix 39 of 40 such worlds had a rank abort at exit.
    worlds = [start_ranks("exit_pending.py", 2, *args) for args in ([], [], ["--destroy"], ["--destroy"])]
    for procs in worlds:
        res = collect(procs, timeout=120)
        check_ok(res)
        assert all(r.out.strip().endswith("exit ok") for r in res), [r.out for r in res]


def _gloo_workers() -> int:
    n = 0
    for t in Path("/proc/self/task").iterdir():
        try:
            n += (t / "comm").read_text().strip() == "pt_gloo_runloop"
        except OSError:  # a thread that exited meanwhile
            pass
    return n


def _named_workers(before: int) -> int:
    """The gloo workers once they have named themselves: each sets its name when it first runs, which on
    a loaded CPU may come after ProcessGroupGloo's constructor returns (30 s at most)."""
    deadline = time.monotonic() + 30
    while (n := _gloo_workers()) <= before and time.monotonic() < deadline:
        time.sleep(0.01)
    return n


def _one_rank() -> Communicator:
    return Communicator(dist.HashStore(), 0, 1, name="exit-test", connect_timeout=10, exec_timeout=10)


def test_destroy_joins_gloo_workers_and_refuses_later_calls() -> None:
    before = _gloo_workers()
    comm = _one_rank()
    assert _named_workers(before) > before
    t = torch.ones(3)
    C.all_reduce(comm, t, HcclReduceOp.HCCL_REDUCE_SUM).wait()
    for _ in range(100):
        C.reduce_scatter(comm, torch.empty(3), t, HcclReduceOp.HCCL_REDUCE_SUM).wait()
    # finished works need no waiting and are not kept (gloo's reduce_scatter work never reports
    # is_completed(): the Pending's own flag says it finished)
    assert comm._drained(0.0) and len(comm._works) <= 64
    comm.destroy()
    assert comm.pg is None and _gloo_workers() == before
    comm.destroy()  # idempotent
    with pytest.raises(HcclError, match="destroyed"):
        C.all_reduce(comm, t, HcclReduceOp.HCCL_REDUCE_SUM)


def test_destroy_inside_a_gloo_callback_leaves_the_release_to_a_later_call() -> None:
    store = dist.HashStore()
    with ThreadPoolExecutor(2) as ex:  # two ranks in this process: gloo connects them concurrently
        c0, c1 = ex.map(lambda r: Communicator(store, r, 2, name="exit-test-2", connect_timeout=10,
                                               exec_timeout=10, check=False), range(2))
    p0 = C.all_reduce(c0, torch.ones(3), HcclReduceOp.HCCL_REDUCE_SUM)
    p0.launched()  # gloo's work exists once the launcher thread has started it (checks off: no exchange)
    assert not p0.work.is_completed()  # rank 1 has not joined yet
    done = p0.work.get_future().then(lambda f: c0.destroy())  # so this runs on gloo's worker thread
    C.all_reduce(c1, torch.ones(3), HcclReduceOp.HCCL_REDUCE_SUM).wait()
    done.wait()
    assert c0.destroyed and c0.pg is not None  # a thread cannot join itself: left for later
    c0.destroy()  # what the exit hook does
    c1.destroy()
    assert c0.pg is None and c1.pg is None
