"""Every collective of the hccl backend, every dtype HCCL supports, checked against the math."""

import datetime
import os
import sys

import torch
import torch.distributed as dist

import pycann.hccl as H

H.register()
r, w = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=20))
assert dist.get_backend() == "hccl"
REDUCE = [torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32]
MOVE = REDUCE + [torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.float64, torch.bool]
if "--few-dtypes" in sys.argv:  # the 4-rank run: one gloo-native type and the ones pycann adapts
    REDUCE, MOVE = [torch.float32, torch.int16], [torch.float32, torch.uint16, torch.bool]
tri = w * (w + 1) // 2

for dt in REDUCE:
    t = torch.full((5,), r + 1, dtype=dt)
    dist.all_reduce(t)
    assert t.tolist() == [tri] * 5, (dt, t)
    for op, want in ((dist.ReduceOp.MAX, w), (dist.ReduceOp.MIN, 1)):
        t = torch.full((3,), r + 1, dtype=dt)
        dist.all_reduce(t, op=op)
        assert t.tolist() == [want] * 3, (dt, op, t)
    t = torch.full((2,), 2, dtype=dt)
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
    assert t.tolist() == [2 ** w] * 2, (dt, t)
    red = torch.full((2,), r + 1, dtype=dt)
    dist.reduce(red, 0)
    assert red.tolist() == ([tri] * 2 if r == 0 else [r + 1] * 2), (dt, red)
    rs = torch.empty(2, dtype=dt)
    dist.reduce_scatter_tensor(rs, torch.arange(2 * w).to(dt))
    assert rs.tolist() == [w * 2 * r, w * (2 * r + 1)], (dt, rs)
    rs2 = torch.empty(2, dtype=dt)
    dist.reduce_scatter(rs2, [torch.full((2,), i + r, dtype=dt) for i in range(w)])
    assert rs2.tolist() == [w * r + w * (w - 1) // 2] * 2, (dt, rs2)

for dt in MOVE:
    src = (torch.arange(4) + 10 * r).to(dt) if dt != torch.bool else torch.tensor([r % 2 == 0, True, False, r == 1])
    ref = [((torch.arange(4) + 10 * i).to(dt) if dt != torch.bool else
            torch.tensor([i % 2 == 0, True, False, i == 1])) for i in range(w)]
    g = [torch.empty(4, dtype=dt) for _ in range(w)]
    dist.all_gather(g, src)
    assert all(torch.equal(a, b) for a, b in zip(g, ref)), (dt, g)
    flat = torch.empty(4 * w, dtype=dt)
    dist.all_gather_into_tensor(flat, src)
    assert torch.equal(flat, torch.cat(ref)), (dt, flat)
    b = src.clone()
    dist.broadcast(b, w - 1)
    assert torch.equal(b, ref[w - 1]), (dt, b)
    x = torch.arange(w * 2).to(dt) if dt != torch.bool else torch.ones(w * 2, dtype=dt)
    y = torch.empty(w * 2, dtype=dt)
    dist.all_to_all_single(y, x)
    want = torch.cat([x[2 * r : 2 * r + 2] for _ in range(w)])
    assert torch.equal(y, want), (dt, y)

# uneven all_to_all (HcclAlltoAllV's shape): rank r sends i+1 rows to rank i
ins = [torch.full((i + 1, 2), float(r)) for i in range(w)]
outs = [torch.empty(r + 1, 2) for _ in range(w)]
dist.all_to_all(outs, ins)
assert [o[:, 0].tolist() for o in outs] == [[float(i)] * (r + 1) for i in range(w)], outs
# all_to_all_single with splits
xs = torch.arange(sum(range(1, w + 1)), dtype=torch.float32) + 100 * r
y = torch.empty(w * (r + 1))
dist.all_to_all_single(y, xs, output_split_sizes=[r + 1] * w, input_split_sizes=list(range(1, w + 1)))
off = sum(range(1, r + 1))
assert y.tolist() == sum([[100.0 * i + off + k for k in range(r + 1)] for i in range(w)], []), y

gl = [torch.empty(2) for _ in range(w)] if r == 0 else None
dist.gather(torch.full((2,), float(r)), gl, 0)
if r == 0:
    assert [x[0].item() for x in gl] == [float(i) for i in range(w)]
sc = torch.empty(2)
dist.scatter(sc, [torch.full((2,), float(i)) for i in range(w)] if r == 0 else None, 0)
assert sc.tolist() == [float(r)] * 2
if r == 0:
    dist.send(torch.arange(3.0), 1)
elif r == 1:
    q = torch.zeros(3)
    dist.recv(q, 0)
    assert q.tolist() == [0.0, 1.0, 2.0]
obj = [None] * w
dist.all_gather_object(obj, {"rank": r})
assert obj == [{"rank": i} for i in range(w)]
work = dist.all_reduce(torch.ones(3), async_op=True)
work.wait()
dist.barrier()

# subgroups: new_group gives an hccl group of its own
sub = dist.new_group([0, 1])
if r < 2:
    t = torch.ones(2)
    dist.all_reduce(t, group=sub)
    assert t.tolist() == [2.0, 2.0]
dist.barrier()
errors = {}
for name, fn in {
    "avg": lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.AVG),
    "f64": lambda: dist.all_reduce(torch.ones(2, dtype=torch.float64)),
    "u16": lambda: dist.all_reduce(torch.ones(2, dtype=torch.uint16)),  # bool / uint8 go as int32 (torch_npu)
    "bor": lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BOR),
}.items():
    try:
        fn()
        errors[name] = "no error"
    except RuntimeError as e:
        errors[name] = str(e)
assert "HCCL_E_NOT_SUPPORT" in errors["avg"] and "AVG" in errors["avg"], errors
assert "float64" in errors["f64"] and "cast to float32" in errors["f64"], errors
assert "uint16" in errors["u16"] and "BOR" in errors["bor"], errors
t = torch.ones(2)
dist.all_reduce(t)  # the group still works after refused calls
assert t.tolist() == [float(w)] * 2
dist.destroy_process_group()
print(f"rank {r}: collectives ok")
