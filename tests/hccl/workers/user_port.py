"""What a torch_npu script ported to pycann's hccl backend does, case by case (``argv[1]``), on npu
tensors (pycann.torch) and CPU tensors, checked against the values torch documents. Prints
``<case> ok``."""

import datetime
import os
import sys

import torch
import torch.distributed as dist

import pycann.hccl  # noqa: F401  (registers "hccl")
import pycann.torch  # noqa: F401  (the npu device)

r, w = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
case = sys.argv[1]
if case == "device_id":  # torch >= 2.3's eager init: the group bound to this rank's device
    assert dist.is_hccl_available()  # type: ignore[attr-defined]  (torch_npu's addition)
    torch.npu.set_device(r)
    dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=20), device_id=torch.device("npu", r))
    x = torch.full((2,), float(r + 1)).npu()
    dist.all_reduce(x)
    assert x.cpu().tolist() == [w * (w + 1) / 2] * 2, x
    sub = dist.new_group(list(range(1, w)))  # a split source is looked up for the bound device
    if r >= 1:
        y = torch.full((2,), float(r)).npu()
        dist.broadcast(y, group_src=w - 2, group=sub)  # group rank w - 2 is global rank w - 1
        assert y.cpu().tolist() == [float(w - 1)] * 2, y
elif case == "reinit":  # destroy and init again on one store, as under torchrun (its agent's store)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), w, r == 0,
                          timeout=datetime.timedelta(seconds=20))
    for i in range(3):
        dist.init_process_group("hccl", store=store, rank=r, world_size=w, timeout=datetime.timedelta(seconds=20))
        x = torch.full((2,), float(r + i)).npu()
        dist.all_reduce(x)
        assert x.cpu().tolist() == [float(sum(range(w)) + w * i)] * 2, (i, x)
        if i < 2:
            dist.destroy_process_group()
elif case == "refusals":  # a short timeout: a peer left waiting would fail with HcclTimeout, not HcclMismatch
    dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=8))
else:
    dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=20))


def on(dev: str, t: torch.Tensor) -> torch.Tensor:
    return t.to(dev)


if case == "bool_uint8":  # torch_npu all-reduces / reduces these as int32
    flags = [[r == i for i in range(w)] + [True, False] for _ in range(1)][0]
    vals = [200 + r, r, 1 + r]  # uint8: 200 + r summed over ranks wraps
    U8 = torch.uint8
    for dev in ("npu", "cpu"):
        b = on(dev, torch.tensor(flags))
        dist.all_reduce(b)  # SUM of bools: a logical or
        assert b.dtype == torch.bool and b.cpu().tolist() == [True] * w + [True, False], (dev, b)
        b = on(dev, torch.tensor(flags))
        dist.all_reduce(b, op=dist.ReduceOp.MIN)  # logical and
        assert b.cpu().tolist() == [w == 1] * w + [True, False], (dev, b)
        b = on(dev, torch.tensor(flags))
        dist.all_reduce(b, op=dist.ReduceOp.MAX)
        assert b.cpu().tolist() == [True] * w + [True, False], (dev, b)
        u = on(dev, torch.tensor(vals, dtype=U8))
        dist.all_reduce(u)
        want = [sum(200 + i for i in range(w)) % 256, sum(range(w)) % 256, sum(1 + i for i in range(w)) % 256]
        assert u.dtype == U8 and u.cpu().tolist() == want, (dev, u, want)
        u = on(dev, torch.tensor(vals, dtype=U8))
        dist.all_reduce(u, op=dist.ReduceOp.PRODUCT)
        prod = [1, 1, 1]
        for i in range(w):
            prod = [p * v for p, v in zip(prod, [200 + i, i, 1 + i])]
        assert u.cpu().tolist() == [p % 256 for p in prod], (dev, u)
        u = on(dev, torch.tensor(vals, dtype=U8))
        dist.all_reduce(u, op=dist.ReduceOp.MAX)
        assert u.cpu().tolist() == [200 + w - 1, w - 1, w], (dev, u)
        u = on(dev, torch.tensor(vals, dtype=U8))
        dist.reduce(u, 1)
        assert u.cpu().tolist() == (want if r == 1 else vals), (dev, u)
        b = on(dev, torch.tensor(flags))
        dist.reduce(b, 0, op=dist.ReduceOp.MIN)
        assert b.cpu().tolist() == ([w == 1] * w + [True, False] if r == 0 else flags), (dev, b)
        nc = on(dev, torch.zeros(2, 3, dtype=U8))
        col = nc[:, 1]  # a strided view: the result lands in the view, the rest untouched
        col.fill_(r + 1)
        dist.all_reduce(col)
        assert nc.cpu().tolist() == [[0, w * (w + 1) // 2, 0]] * 2, (dev, nc)
        work = dist.all_reduce(on(dev, torch.tensor([r == 0])), async_op=True)
        work.wait()
        bs = [on(dev, torch.tensor([r == 0, False])), on(dev, torch.tensor([True, r == 1]))]
        dist.all_reduce_coalesced(bs)
        assert [b.cpu().tolist() for b in bs] == [[True, False], [True, True]], (dev, bs)

if case == "gather_shapes":  # all_gather with outputs shaped unlike the input (NCCL/HCCL count elements)
    x = torch.arange(6.0).view(2, 3) + 10 * r
    want = torch.cat([torch.arange(6.0).view(2, 3) + 10 * i for i in range(w)])
    for dev in ("npu", "cpu"):
        out = on(dev, torch.empty(w, 2, 3))  # the stack form of all_gather_into_tensor
        dist.all_gather_into_tensor(out, on(dev, x))
        assert torch.equal(out.cpu(), want.view(w, 2, 3)), (dev, out)
        out = on(dev, torch.empty(2 * w, 3))  # the concatenation form
        dist.all_gather_into_tensor(out, on(dev, x))
        assert torch.equal(out.cpu(), want), (dev, out)
        outs = [on(dev, torch.empty(3, 2)) for _ in range(w)]
        dist.all_gather(outs, on(dev, x))
        assert [o.cpu().tolist() for o in outs] == [o.view(3, 2).tolist() for o in want.split(2)], (dev, outs)
        flat = [on(dev, torch.empty(6, dtype=torch.int16)) for _ in range(w)]  # a dtype gloo moves as bytes
        dist.all_gather(flat, on(dev, x.to(torch.int16)))
        assert [f.cpu().tolist() for f in flat] == [o.reshape(-1).tolist() for o in want.split(2)], (dev, flat)

if case == "gather_uneven":  # all_gather into a list of different sizes (torch_npu: broadcasts)
    for dev in ("npu", "cpu"):
        outs = [on(dev, torch.empty(i + 1, 2)) for i in range(w)]
        dist.all_gather(outs, on(dev, torch.full((r + 1, 2), float(r))))
        assert [o.cpu().tolist() for o in outs] == [[[float(i)] * 2] * (i + 1) for i in range(w)], (dev, outs)
        outs = [on(dev, torch.empty(2 * i + 1, dtype=torch.int16)) for i in range(w)]
        work = dist.all_gather(outs, on(dev, torch.arange(2 * r + 1, dtype=torch.int16) + 100 * r), async_op=True)
        work.wait()
        assert [o.cpu().tolist() for o in outs] == [list(range(100 * i, 100 * i + 2 * i + 1)) for i in range(w)]
        big = on(dev, torch.zeros(4, w + 1))  # strided outputs (columns) land in their tensor
        cols = [big[: (2 if i == 0 else 4), i] for i in range(w)]
        dist.all_gather(cols, on(dev, torch.full((2 if r == 0 else 4,), float(r + 1))))
        want = [[1.0 if j < 2 else 0.0] + [float(i + 1) for i in range(1, w)] + [0.0] for j in range(4)]
        assert big.cpu().tolist() == want, (dev, big)

if case == "recv_any":  # recv without src: the sender's rank comes back (torch_npu's recvAnysource)
    for dev in ("npu", "cpu"):
        if r == 0:
            got = set()
            for _ in range(w - 1):
                q = on(dev, torch.zeros(3))
                src = dist.recv(q)
                assert q.device.type == dev and q.cpu().tolist() == [float(src)] * 3, (dev, src, q)
                got.add(src)
            assert got == set(range(1, w)), got
        else:
            dist.send(on(dev, torch.full((3,), float(r))), 0)
        # Any-source receives match whichever message arrives first (MPI and gloo alike): rank 1's
        # second send could overtake rank 2's first, so it waits until rank 0 has both floats.
        dist.barrier()
        if r == 0:
            q = on(dev, torch.zeros(2, dtype=torch.int16))
            work = dist.irecv(q)
            work.wait()
            assert q.cpu().tolist() == [7, 7], q
        elif r == 1:
            dist.send(on(dev, torch.full((2,), 7, dtype=torch.int16)), 0)
        dist.barrier()

if case == "gather_scatter_shapes":  # gather / scatter entries of the input's element count, other shape
    for dev in ("npu", "cpu"):
        outs = [on(dev, torch.empty(3, 2)) for _ in range(w)] if r == 0 else None
        dist.gather(on(dev, torch.arange(6.0).view(2, 3) + r), outs, dst=0)
        if outs is not None:
            assert [o.cpu().view(-1).tolist() for o in outs] == [(torch.arange(6.0) + i).tolist() for i in range(w)]
        o = on(dev, torch.empty(3, 2))
        dist.scatter(o, [on(dev, torch.arange(6.0).view(2, 3) + i) for i in range(w)] if r == 1 else None, src=1)
        assert o.cpu().view(-1).tolist() == (torch.arange(6.0) + r).tolist(), (dev, o)

if case == "refusals":  # one rank's arguments are invalid: every rank raises at once, the group stays usable
    from pycann.hccl.errors import HcclError, HcclMismatch

    npu = torch.device("npu")
    calls = {  # what the bad rank does; the others make the valid call
        "f64": lambda bad: dist.all_reduce(torch.ones(2, dtype=torch.float64 if bad else torch.float32, device=npu)),
        "avg": lambda bad: dist.all_reduce(torch.ones(2, device=npu),
                                           op=dist.ReduceOp.AVG if bad else dist.ReduceOp.SUM),
        "ag_out": lambda bad: dist.all_gather_into_tensor(torch.empty(2 * w + bad, device=npu),
                                                          torch.ones(2, device=npu)),
        "rs_in": lambda bad: dist.reduce_scatter_tensor(torch.empty(2, device=npu), torch.ones(2 * w + bad, device=npu)),
        "a2a": lambda bad: dist.all_to_all_single(torch.empty(2 * w + bad, device=npu),
                                                  torch.ones(2 * w + bad, device=npu)),
        "gather": lambda bad: dist.gather(torch.ones(2, device=npu),
                                          [torch.empty(2, device=npu)] * (w - bad) if r == 0 else None, dst=0),
        "scatter": lambda bad: dist.scatter(torch.empty(2, device=npu),
                                            [torch.ones(2 + bad, device=npu)] * w if r == 0 else None, src=0),
        "bcast_root": lambda bad: dist.broadcast(torch.ones(2, device=npu), w + 5 if bad else 0),
        "ag_uneven": lambda bad: dist.all_gather([torch.empty(i + 1, device=npu) for i in range(w)],
                                                 torch.ones(r + 1 + bad, device=npu)),
    }
    for name, call in calls.items():
        culprit = 0 if name in ("gather", "scatter") else w - 1
        try:
            call(r == culprit)
            raise AssertionError(f"{name}: no error on rank {r}")
        except HcclError as e:
            if r == culprit:
                assert not isinstance(e, HcclMismatch), (name, e)
            else:
                named = f"rank {culprit} refused" in str(e) or f"  rank {culprit}: #" in str(e)  # or quoted
                assert isinstance(e, HcclMismatch) and named, (name, e)
        except ValueError as e:  # torch's own check of the root (bcast_root), before the backend
            assert name == "bcast_root" and r == culprit, (name, e)
            dist.broadcast(torch.ones(2, device=npu), 0)  # the culprit makes the call the others wait in
        x = torch.ones(2, device=npu)
        dist.all_reduce(x)
        assert x.cpu().tolist() == [float(w)] * 2, (name, x)

if case == "poll":  # async_op=True, then is_completed() polled instead of wait()
    import time

    def poll(work: dist.Work) -> None:
        deadline = time.monotonic() + 10
        while not work.is_completed():
            assert time.monotonic() < deadline, "is_completed() stayed False"
            time.sleep(0.005)

    for dev in ("npu", "cpu"):
        x = on(dev, torch.full((4,), float(r + 1)))
        poll(dist.all_reduce(x, async_op=True))
        assert x.cpu().tolist() == [w * (w + 1) / 2] * 4, (dev, x)
        s16 = on(dev, torch.full((3,), r + 1, dtype=torch.int16))  # reduced in int32, copied back on completion
        poll(dist.all_reduce(s16, async_op=True))
        assert s16.cpu().tolist() == [w * (w + 1) // 2] * 3, (dev, s16)
        o = on(dev, torch.empty(2))
        poll(dist.reduce_scatter_tensor(o, on(dev, torch.arange(2.0 * w) + r), async_op=True))
        assert o.cpu().tolist() == [w * 2 * r + w * (w - 1) / 2, w * (2 * r + 1) + w * (w - 1) / 2], (dev, o)
        outs = [on(dev, torch.empty(r + 1)) for _ in range(w)]
        poll(dist.all_to_all(outs, [on(dev, torch.full((j + 1,), float(r))) for j in range(w)], async_op=True))
        assert [t.cpu().tolist() for t in outs] == [[float(i)] * (r + 1) for i in range(w)], (dev, outs)
        work = dist.barrier(async_op=True)
        poll(work)
        work.wait()
        o = on(dev, torch.empty(2))  # get_future of a reduce-scatter (gloo's work has none of its own)
        fut = dist.reduce_scatter_tensor(o, on(dev, torch.ones(2 * w)), async_op=True).get_future()
        fut.wait()
        assert o.cpu().tolist() == [float(w)] * 2, (dev, o)

if case == "wait_timeout":  # Work.wait(timeout): raises once it expires (as gloo's), the call goes on
    import time
    from datetime import timedelta

    from pycann.hccl.errors import HcclTimeout

    x = on("npu", torch.full((3,), float(r + 1)))
    if r == 1:
        time.sleep(2.5)  # late: rank 0's wait(timeout=0.3 s) expires first
    work = dist.all_reduce(x, async_op=True)
    if r == 0:
        try:
            work.wait(timeout=timedelta(seconds=0.3))
            raise AssertionError("wait(timeout) returned before the peer arrived")
        except HcclTimeout as e:
            assert "wait(timeout=0.3 s)" in str(e), e
    assert work.wait(timeout=timedelta(seconds=15))
    assert x.cpu().tolist() == [w * (w + 1) / 2] * 3, x

print(f"{case} ok", flush=True)
dist.destroy_process_group()
