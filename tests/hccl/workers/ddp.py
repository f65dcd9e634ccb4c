"""DDP training over hccl: python ddp.py DEVICE. Every rank also trains a single-process copy on
the whole global batch; the losses and weights must match."""

import datetime
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import pycann.hccl  # noqa: F401

device = sys.argv[1]
if device == "npu":
    import pycann.torch  # noqa: F401  (the npu device)
r, w = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=30))
torch.manual_seed(0)
GLOBAL_BATCH, STEPS = 8, 6
X = torch.randn(STEPS, GLOBAL_BATCH, 10)
Y = torch.randint(0, 3, (STEPS, GLOBAL_BATCH))


def model() -> torch.nn.Module:
    torch.manual_seed(1234 + r)  # different per rank: DDP's initial broadcast must fix it
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


ref = model()
torch.manual_seed(1234)  # the reference starts from rank 0's weights, as DDP makes every rank
ref.load_state_dict(torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).state_dict())
ddp = DDP(model().to(device))
opt = torch.optim.SGD(ddp.parameters(), lr=0.5, momentum=0.9)
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5, momentum=0.9)
lossf = torch.nn.CrossEntropyLoss()
per = GLOBAL_BATCH // w
worst = 0.0
for s in range(STEPS):
    xs, ys = X[s, r * per : (r + 1) * per], Y[s, r * per : (r + 1) * per]
    opt.zero_grad()
    loss = lossf(ddp(xs.to(device)), ys.to(device))
    loss.backward()
    opt.step()
    g = loss.detach().cpu().reshape(1).clone()
    dist.all_reduce(g)
    global_loss = g.item() / w
    ref_opt.zero_grad()
    ref_loss = lossf(ref(X[s]), Y[s])
    ref_loss.backward()
    ref_opt.step()
    worst = max(worst, abs(global_loss - ref_loss.item()))
    assert abs(global_loss - ref_loss.item()) < 1e-5, (s, global_loss, ref_loss.item())
for p, q in zip(ddp.module.parameters(), ref.parameters()):
    assert torch.allclose(p.detach().cpu(), q.detach(), atol=1e-5), (p, q)
    assert p.device.type == device
if r == 0:
    print(f"DDP ok: {STEPS} steps, world {w}, max loss difference to one process {worst:.2e}", flush=True)
dist.destroy_process_group()
