"""A worker started by hccl-run: prints its environment, all-reduces its rank over hccl."""

import os
import sys

import torch
import torch.distributed as dist

import pycann.hccl  # noqa: F401  (registers "hccl")

dist.init_process_group("hccl")
t = torch.tensor([float(dist.get_rank())])
dist.all_reduce(t)
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "RANK_ID", "RANK_SIZE", "DEVICE_ID", "MASTER_ADDR")
line = " ".join(["WORKER", *(f"{k}={os.environ.get(k, '-')}" for k in keys), f"SUM={t.item():g}", *sys.argv[1:]])
os.write(1, (line + "\n").encode())  # one write: the workers share the launcher's stdout
dist.destroy_process_group()
