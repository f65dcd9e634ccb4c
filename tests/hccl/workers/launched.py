"""A worker started by hccl-run: prints its environment, all-reduces its rank over hccl.

With the argument ``npu`` it also runs collectives on npu tensors (``pycann.torch``'s device):
an all-reduce of float32 and float16 tensors and an all-gather into an npu tensor, and prints
what came back (the device the results are on, and checksums the test recomputes)."""

import os
import sys

import torch
import torch.distributed as dist

import pycann.hccl  # noqa: F401  (registers "hccl")

dist.init_process_group("hccl")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank)])
dist.all_reduce(t)
extra = []
if "npu" in sys.argv[1:]:
    import pycann.torch  # noqa: F401  (the npu device)

    x = (torch.arange(1000, dtype=torch.float32) * (rank + 1)).npu()
    h = torch.full((513,), rank + 1, dtype=torch.float16).npu()
    dist.all_reduce(x)
    dist.all_reduce(h, op=dist.ReduceOp.MAX)
    g = torch.empty(world, dtype=torch.int64).npu()
    dist.all_gather_into_tensor(g, torch.tensor([rank * 10], dtype=torch.int64).npu())
    extra = [f"NPU={x.device},{h.device},{g.device}", f"F32={int(x.double().sum().item())}",
             f"F16MAX={int(h.double().sum().item())}", f"GATHER={','.join(str(v) for v in g.cpu().tolist())}"]
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "RANK_ID", "RANK_SIZE", "DEVICE_ID", "MASTER_ADDR")
line = " ".join(["WORKER", *(f"{k}={os.environ.get(k, '-')}" for k in keys), f"SUM={t.item():g}", *extra,
                 *sys.argv[1:]])
os.write(1, (line + "\n").encode())  # one write: the workers share the launcher's stdout
dist.destroy_process_group()
