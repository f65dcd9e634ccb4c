"""Async collectives issued in different orders on the ranks (``argv[1]`` picks the case), checked
against the sums torch documents. Prints ``<case> ok``."""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import pycann.hccl as H
from pycann.hccl.errors import HcclMismatch

H.register()
r, w = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
case = sys.argv[1]
dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=20))
tri = w * (w + 1) / 2
t0 = time.monotonic()
if case == "two_groups":
    # two communicators used in opposite orders: torch_npu enqueues both (one stream each) and
    # neither blocks; pycann's signature exchange blocked each rank in the other group's call
    g1 = dist.new_group(list(range(w)), timeout=datetime.timedelta(seconds=20))
    g2 = dist.new_group(list(range(w)), timeout=datetime.timedelta(seconds=20))
    a, b = torch.full((3,), r + 1.0), torch.full((2,), 10.0 * (r + 1))
    if r % 2 == 0:
        wa = dist.all_reduce(a, group=g1, async_op=True)
        wb = dist.all_reduce(b, group=g2, async_op=True)
    else:
        wb = dist.all_reduce(b, group=g2, async_op=True)
        wa = dist.all_reduce(a, group=g1, async_op=True)
    wb.wait()
    wa.wait()
    assert a.tolist() == [tri] * 3 and b.tolist() == [10 * tri] * 2, (a, b)
    c = torch.full((2,), float(r))  # both groups stay usable, and the world group too
    dist.all_reduce(c, group=g2)
    dist.barrier()
    assert c.tolist() == [w * (w - 1) / 2] * 2, c
elif case == "one_group":
    # opposite orders on one communicator: a clear mismatch naming both calls, at wait()
    a, b = torch.full((3,), r + 1.0), torch.full((2,), r + 10.0)
    first = dist.all_reduce(a, async_op=True) if r == 0 else dist.broadcast(b, 0, async_op=True)
    second = dist.broadcast(b, 0, async_op=True) if r == 0 else dist.all_reduce(a, async_op=True)
    for work in (first, second):
        try:
            work.wait()
            raise AssertionError("no mismatch raised")
        except HcclMismatch as e:
            msg = str(e)
            assert "HcclAllReduce(float32[3], count=3, op=sum)" in msg and "HcclBroadcast(float32[2]" in msg, msg
    assert time.monotonic() - t0 < 10, "the mismatch took a timeout"
    x = torch.ones(2)  # no data moved: the communicator is still usable
    dist.all_reduce(x)
    assert x.tolist() == [float(w)] * 2, x
print(f"{case} ok", flush=True)
dist.destroy_process_group()
