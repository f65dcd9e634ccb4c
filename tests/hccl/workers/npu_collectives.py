"""Every collective of the hccl backend on npu tensors (pycann.torch's device), checked against the
math: results land in the caller's npu tensors (zero-copy host views, so nothing is copied back)."""

import datetime
import os

import torch
import torch.distributed as dist

import pycann.hccl  # noqa: F401  (registers "hccl")
import pycann.torch  # noqa: F401  (the npu device)

r, w = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=60))
tri = w * (w + 1) // 2


def npu(t: torch.Tensor) -> torch.Tensor:
    return t.npu()


def host(t: torch.Tensor) -> list:
    assert t.device.type == "npu", t.device
    return t.cpu().tolist()


for dt in (torch.float32, torch.bfloat16, torch.int16, torch.int8):  # gloo-native and adapted types
    t = npu(torch.full((5,), r + 1, dtype=dt))
    dist.all_reduce(t)
    assert host(t) == [tri] * 5, (dt, t)
    t = npu(torch.full((3,), r + 1, dtype=dt))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert host(t) == [w] * 3, (dt, t)
    red = npu(torch.full((2,), r + 1, dtype=dt))
    dist.reduce(red, 0)
    assert host(red) == ([tri] * 2 if r == 0 else [r + 1] * 2), (dt, red)
    rs = npu(torch.empty(2, dtype=dt))
    dist.reduce_scatter_tensor(rs, npu(torch.arange(2 * w).to(dt)))
    assert host(rs) == [w * 2 * r, w * (2 * r + 1)], (dt, rs)
    rs2 = npu(torch.empty(2, dtype=dt))
    dist.reduce_scatter(rs2, [npu(torch.full((2,), i + r, dtype=dt)) for i in range(w)])
    assert host(rs2) == [w * r + w * (w - 1) // 2] * 2, (dt, rs2)

for dt in (torch.float32, torch.uint16, torch.float64):
    src = npu((torch.arange(4) + 10 * r).to(dt))
    ref = [(torch.arange(4) + 10 * i).to(dt).tolist() for i in range(w)]
    g = [npu(torch.empty(4, dtype=dt)) for _ in range(w)]
    dist.all_gather(g, src)
    assert [host(x) for x in g] == ref, (dt, g)
    flat = npu(torch.empty(4 * w, dtype=dt))
    dist.all_gather_into_tensor(flat, src)
    assert host(flat) == sum(ref, []), (dt, flat)
    b = npu((torch.arange(4) + 10 * r).to(dt))
    dist.broadcast(b, w - 1)
    assert host(b) == ref[w - 1], (dt, b)
    x = npu((torch.arange(w * 2) + 100 * r).to(dt))
    y = npu(torch.empty(w * 2, dtype=dt))
    dist.all_to_all_single(y, x)
    assert host(y) == sum([[100 * i + 2 * r, 100 * i + 2 * r + 1] for i in range(w)], []), (dt, y)

ins = [npu(torch.full((i + 1, 2), float(r))) for i in range(w)]
outs = [npu(torch.empty(r + 1, 2)) for _ in range(w)]
dist.all_to_all(outs, ins)
assert [host(o[:, 0].contiguous()) for o in outs] == [[float(i)] * (r + 1) for i in range(w)], outs
gl = [npu(torch.empty(2)) for _ in range(w)] if r == 0 else None
dist.gather(npu(torch.full((2,), float(r))), gl, 0)
if gl is not None:
    assert [host(x) for x in gl] == [[float(i)] * 2 for i in range(w)]
sc = npu(torch.empty(2))
dist.scatter(sc, [npu(torch.full((2,), float(i))) for i in range(w)] if r == 0 else None, 0)
assert host(sc) == [float(r)] * 2
if r == 0:
    dist.send(npu(torch.arange(3.0)), 1)
elif r == 1:
    q = npu(torch.zeros(3))
    dist.recv(q, 0)
    assert host(q) == [0.0, 1.0, 2.0]
a, b = npu(torch.full((3,), float(r + 1))), npu(torch.full((2, 2), float(r)))
dist.all_reduce_coalesced([a, b])  # one flat all-reduce, pieces written back to each npu tensor
assert host(a) == [float(tri)] * 3 and host(b) == [[float(tri - w)] * 2] * 2, (a, b)
s_, q = npu(torch.full((2,), float(r))), npu(torch.empty(2))
for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, s_, (r + 1) % w), dist.P2POp(dist.irecv, q, (r - 1) % w)]):
    req.wait()
assert host(q) == [float((r - 1) % w)] * 2, q
view = npu(torch.zeros(4, 3))[:, 1]  # a strided npu tensor: copied to host and back
view.fill_(float(r + 1))
dist.all_reduce(view)
assert host(view.contiguous()) == [float(tri)] * 4
work = dist.all_reduce(npu(torch.ones(3)), async_op=True)
work.wait()
dist.barrier()
dist.destroy_process_group()
print(f"rank {r}: npu collectives ok")
