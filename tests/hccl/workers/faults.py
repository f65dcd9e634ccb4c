"""Fault scenarios: python faults.py MODE. Rank 1 misbehaves; the others report what they saw."""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import pycann.hccl as H

H.register()
r, w, mode = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), sys.argv[1]
t0 = time.monotonic()
T = datetime.timedelta(seconds=float(os.environ.get("T", "3")))
try:
    if mode == "join":  # a store that does not wait for everyone, as torchrun's agent hosts it
        store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), w, r == 0, timeout=T,
                              wait_for_workers=False)
        dist.init_process_group("hccl", store=store, rank=r, world_size=w, timeout=T)
    else:
        dist.init_process_group("hccl", timeout=T)
except RuntimeError as e:
    print(f"INIT-ERROR {time.monotonic() - t0:.2f}: {e}", flush=True)
    os._exit(0)
dist.all_reduce(torch.ones(4))
calls = {
    "op": lambda: dist.all_reduce(torch.ones(4)) if r != 1 else dist.broadcast(torch.ones(4), 0),
    "dtype": lambda: dist.all_reduce(torch.ones(4, dtype=torch.float32 if r != 1 else torch.float16)),
    "shape": lambda: dist.all_reduce(torch.ones(4 if r != 1 else 8)),
    "redop": lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.SUM if r != 1 else dist.ReduceOp.MAX),
    "root": lambda: dist.broadcast(torch.ones(4), 0 if r != 1 else 1),
    "a2av": lambda: dist.all_to_all_single(torch.empty(2 * w), torch.ones(2 * w),
                                           input_split_sizes=[2] * w if r != 1 else [1, 3] + [2] * (w - 2)),
}
if all(m in calls for m in mode.split(",")):  # one or more mismatch cases, in turn, on one group
    for m in mode.split(","):
        t1 = time.monotonic()
        try:
            calls[m]()
            print(f"{m} NO-ERROR", flush=True)
        except RuntimeError as e:
            print(f"{m} ERROR {time.monotonic() - t1:.3f}: " + str(e).replace("\n", " | "), flush=True)
        t = torch.ones(2)
        dist.all_reduce(t)  # a mismatch is caught before data moves: the group still works
        assert t.tolist() == [float(w)] * 2
        print(f"{m} STILL-OK", flush=True)
    dist.destroy_process_group()
    os._exit(0)
if r == 1:
    if mode == "die":
        os._exit(3)
    time.sleep(float(os.environ.get("SLEEP", "8")))
    os._exit(0)
t1 = time.monotonic()
try:
    dist.all_reduce(torch.ones(4))
    print("NO-ERROR", flush=True)
except RuntimeError as e:
    print(f"ERROR {time.monotonic() - t1:.2f}: {e}", flush=True)
try:
    dist.all_reduce(torch.ones(4))
except RuntimeError as e:
    print(f"AFTER {e}", flush=True)
time.sleep(1.5)  # keep rank 0's store up while the others diagnose (a real job would log, then exit)
os._exit(0)
