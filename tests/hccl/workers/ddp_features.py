"""DDP features on npu tensors over hccl: python ddp_features.py SCENARIO.

Each rank trains its half of every global batch under DDP on ``npu:<rank>`` and, beside it, a
single-process CPU model on the whole batch (what DDP must equal: the mean of the ranks' gradients
is the whole batch's gradient); the losses and final weights (buffers too) must match.
Scenarios: ``syncbn`` (``SyncBatchNorm.convert_sync_batchnorm``: batch statistics over both ranks),
``unused`` (``find_unused_parameters=True``, a branch unused on some steps and on one rank),
``static`` (``static_graph=True``), ``fsdp`` (``FullyShardedDataParallel`` with ``NO_SHARD``;
``sync_module_states`` gives every rank rank 0's weights), ``fsdp_offload`` (with ``CPUOffload(offload_params=True)``: ``param.data = cpu_tensor``), ``fsdp_dcp`` (the same with a
``torch.distributed.checkpoint`` save / wipe / load of model and optimizer state mid-run) and ``fsdp_full_shard`` (refused on every
rank with the error that names what is missing, no hang), ``device_mesh`` (``init_device_mesh`` on the hccl group), ``join_unused`` (``join()`` with uneven
inputs and find_unused_parameters, against the same on CPU over gloo).
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import pycann.hccl  # noqa: F401
import pycann.torch  # noqa: F401

scenario = sys.argv[1]
r, w = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.npu.set_device(r)
dev = torch.device("npu", r)
dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=30))
torch.manual_seed(0)
STEPS, BATCH = 5, 8
X = torch.randn(STEPS, BATCH, 10)
Y = torch.randint(0, 3, (STEPS, BATCH))
per = BATCH // w


class Branchy(torch.nn.Module):
    """Two heads; ``c`` is skipped when ``use_c`` is False (an unused parameter for DDP)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(10, 16), torch.nn.Linear(16, 3), torch.nn.Linear(16, 3)

    def forward(self, x: torch.Tensor, use_c: bool = True) -> torch.Tensor:
        h = torch.tanh(self.a(x))
        return self.b(h) + self.c(h) if use_c else self.b(h)


def make(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    if scenario == "syncbn":
        return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                                   torch.nn.Linear(16, 3))
    return Branchy()


def uses_c(step: int, rank: int) -> bool:
    """``unused``: c is unused by every rank on odd steps and by rank 1 on step 2."""
    return scenario != "unused" or (step % 2 == 0 and not (step == 2 and rank == 1))


if scenario == "device_mesh":
    # init_device_mesh over hccl (it reads the group's name, which raised "ProcessGroup name not
    # set"); its group all-reduces as a gloo group does; FSDP2's fully_shard is refused clearly.
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("npu", (w,))
    group = mesh.get_group()
    assert group.group_name and dist.group.WORLD.group_name, (group.group_name, dist.group.WORLD.group_name)
    got = X[0, r].to(dev)
    dist.all_reduce(got, group=group)
    want = X[0, r].clone()
    dist.all_reduce(want, group=dist.new_group(backend="gloo"))
    assert torch.equal(got.cpu(), want), (got, want)
    try:
        sharded = fully_shard(make(1234).to(dev), mesh=mesh)
        sharded(X[0, :per].to(dev)).sum().backward()  # (FSDP2 frees the gathered weights after forward)
    except NotImplementedError as e:
        assert "resizePrivateUse1Bytes" in str(e) and "fully_shard" in str(e), e
        if r == 0:
            print(f"{scenario} ok", flush=True)
    dist.destroy_process_group()
    sys.exit(0)
if scenario == "join_unused":
    # uneven inputs (rank 1 runs out after 3 steps) with find_unused_parameters: DDP's join hook
    # calls the group's one-tensor overload, ProcessGroup.allreduce(tensor). The twin: the same
    # on CPU over a gloo group in this process.
    def train_joined(device: torch.device, group: dist.ProcessGroup) -> tuple[list[float], dict]:
        m = DDP(make(1234 + r).to(device), find_unused_parameters=True, process_group=group)
        o = torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.9)
        out = []
        with m.join():
            for s in range(STEPS if r == 0 else 3):
                o.zero_grad()
                xs, ys = X[s, r * per:(r + 1) * per].to(device), Y[s, r * per:(r + 1) * per].to(device)
                loss = torch.nn.functional.cross_entropy(m(xs, use_c=s % 2 == 0), ys)
                loss.backward()
                o.step()
                out.append(loss.item())
        return out, {k: v.cpu() for k, v in m.module.state_dict().items()}

    got, got_w = train_joined(dev, dist.group.WORLD)
    want, want_w = train_joined(torch.device("cpu"), dist.new_group(backend="gloo"))
    assert max(abs(a - b) for a, b in zip(got, want)) < 1e-5 and len(got) == len(want), (got, want)
    for k in want_w:
        assert torch.allclose(got_w[k], want_w[k], atol=1e-5), (k, (got_w[k] - want_w[k]).abs().max())
    if r == 0:
        print(f"{scenario} ok", flush=True)
    dist.destroy_process_group()
    sys.exit(0)

ref = make(1234)  # rank 0's initial weights, which DDP broadcasts to every rank
local = make(1234 + r)
if scenario == "syncbn":
    local = torch.nn.SyncBatchNorm.convert_sync_batchnorm(local)
if scenario == "fsdp_full_shard":
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardingStrategy

    refused = 0
    for kw in ({"sharding_strategy": ShardingStrategy.FULL_SHARD},
               {"sharding_strategy": ShardingStrategy.NO_SHARD, "mixed_precision": MixedPrecision(torch.float16)}):
        try:
            FSDP(make(1234 + r).to(dev), device_id=dev, **kw)(X[0, :per].to(dev)).sum().backward()
        except NotImplementedError as e:
            assert "resizePrivateUse1Bytes" in str(e) and "NO_SHARD" in str(e) and "param_dtype" in str(e), e
            refused += 1
    if refused == 2:
        print(f"{scenario} ok: refused", flush=True)
    dist.destroy_process_group()
    sys.exit(0)
if scenario in ("fsdp", "fsdp_dcp", "fsdp_offload"):
    from torch.distributed.fsdp import CPUOffload, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    ddp = FSDP(local.to(dev), device_id=dev, sharding_strategy=ShardingStrategy.NO_SHARD, sync_module_states=True,
               cpu_offload=CPUOffload(offload_params=scenario == "fsdp_offload"))
else:
    ddp = DDP(local.to(dev), find_unused_parameters=scenario == "unused", static_graph=scenario == "static")
opt = torch.optim.SGD(ddp.parameters(), lr=0.5, momentum=0.9)
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5, momentum=0.9)
lossf = torch.nn.CrossEntropyLoss()


def run(m: torch.nn.Module, x: torch.Tensor, step: int, rank: int) -> torch.Tensor:
    return m(x) if scenario == "syncbn" else m(x, use_c=uses_c(step, rank))


def checkpoint_round_trip(model: torch.nn.Module, optim: torch.optim.Optimizer) -> None:
    """``torch.distributed.checkpoint`` save, the weights and momenta wiped, load."""
    import shutil
    import tempfile

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = os.path.join(tempfile.gettempdir(), f"pycann_ddp_features_{os.environ['MASTER_PORT']}")
    msd, osd = get_state_dict(model, optim)  # needed the group's default device (hccl's was missing)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
            optim.state[p]["momentum_buffer"].zero_()
    msd, osd = get_state_dict(model, optim)
    sd = {"model": msd, "optim": osd}
    dcp.load(sd, checkpoint_id=path)
    set_state_dict(model, optim, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    dist.barrier()
    if r == 0:
        shutil.rmtree(path, ignore_errors=True)


for s in range(STEPS):
    xs, ys = X[s, r * per:(r + 1) * per], Y[s, r * per:(r + 1) * per]
    opt.zero_grad()
    loss = lossf(run(ddp, xs.to(dev), s, r), ys.to(dev))
    loss.backward()
    opt.step()
    if scenario == "fsdp_dcp" and s == 2:  # a checkpoint round trip: model and optimizer (momentum) state
        checkpoint_round_trip(ddp, opt)
    g = loss.detach().cpu().reshape(1).clone()
    dist.all_reduce(g)
    ref_opt.zero_grad()  # the reference: the ranks' halves run as they ran there, one loss
    ref_loss = sum(lossf(run(ref, X[s, q * per:(q + 1) * per], s, q), Y[s, q * per:(q + 1) * per])
                   for q in range(w)) / w if scenario != "syncbn" else lossf(ref(X[s]), Y[s])
    ref_loss.backward()
    ref_opt.step()
    assert abs(g.item() / w - ref_loss.item()) < 1e-5, (scenario, s, g.item() / w, ref_loss.item())
for (k, p), q in zip(ddp.state_dict().items(), ref.state_dict().values()):
    assert p.device == dev, (k, p.device)  # (FSDP's state dict gathers offloaded weights on the device too)
    assert torch.allclose(p.cpu(), q, atol=2e-5), (scenario, k, (p.cpu() - q).abs().max())
if scenario == "fsdp_offload":
    assert all(t.device.type == "cpu" for t in ddp.parameters()), [t.device for t in ddp.parameters()]
if r == 0:
    print(f"{scenario} ok", flush=True)
dist.destroy_process_group()
