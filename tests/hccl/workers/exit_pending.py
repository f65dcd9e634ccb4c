"""Collectives on temporary tensors, then futures with Python callbacks left pending, then exit at
once (``--destroy``: after ``destroy_process_group``; without it, as a script that never calls it).

Before the fix, gloo's worker threads let go of those tensors and callbacks only after Python had
begun to finalize, and the rank aborted after its success line ("terminate called without an
active exception", or a gloo group destroyed on its own worker thread) in 39 of 40 runs.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist

import pycann.hccl as H

H.register()
r = int(os.environ["RANK"])
dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=30))
for _ in range(3):
    dist.all_reduce(torch.ones(3))  # the tensor's Python object dies while gloo may still hold it
futs = [dist.all_reduce(torch.ones(3), async_op=True).get_future().then(lambda f: f.value()) for _ in range(3)]
if "--destroy" in sys.argv:
    dist.destroy_process_group()
print(f"rank {r}: exit ok")
