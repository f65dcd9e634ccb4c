"""The hccl backend's overhead over raw gloo, measured interleaved in one set of processes.

    python bench/hccl_overhead.py -p 2 [--sizes 8K,64M] [--reps 15] [--npu]

Each rank joins a gloo group and two hccl groups over the same processes (one with the per-call
signature check, one without: ``comm.check = False``), then times all_reduce of the same float32
tensor on the three groups in turn, ``--reps`` times per size, the order rotating every rep, so
that load on the host drifts the same way for all three. ``--npu`` gives the hccl groups npu
tensors (``pycann.torch``) over the same memory. It also times the signature exchange alone (the
one small all-gather the check adds before each collective). Prints medians and minima (ms) and
the median ratios to gloo.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import timedelta

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def size(s: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20}.get(s[-1].upper(), 1)
    return int(s.rstrip("KMkm")) * mult


def rank_main(a: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    import pycann.hccl  # noqa: F401
    from pycann.hccl.constants import Collective, HcclReduceOp

    if a.npu:
        import pycann.torch  # noqa: F401
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    checked = dist.new_group(backend="hccl")
    unchecked = dist.new_group(backend="hccl")
    unchecked.comm.check = False  # type: ignore[attr-defined]
    groups = {"gloo": dist.group.WORLD, "hccl": checked, "hccl, no check": unchecked}
    comm = checked.comm  # type: ignore[attr-defined]
    rank = dist.get_rank()
    for s in a.sizes.split(","):
        t = torch.ones(size(s) // 4)
        tensors = {"gloo": t, "hccl": t.npu() if a.npu else t, "hccl, no check": t.npu() if a.npu else t}
        times: dict[str, list[float]] = {k: [] for k in [*groups, "signature exchange"]}
        for name, g in groups.items():
            dist.all_reduce(tensors[name], group=g)
        names = list(groups)
        for rep in range(a.reps):
            for name in names[rep % 3:] + names[: rep % 3]:
                dist.barrier(group=dist.group.WORLD)
                t0 = time.perf_counter()
                dist.all_reduce(tensors[name], group=groups[name])
                times[name].append(time.perf_counter() - t0)
            dist.barrier(group=dist.group.WORLD)
            t0 = time.perf_counter()
            sig = comm.begin(Collective.ALL_REDUCE, "float32", t.numel(), t.shape, int(HcclReduceOp.HCCL_REDUCE_SUM))
            times["signature exchange"].append(time.perf_counter() - t0)
            comm.done(sig)
        if rank == 0:
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            low = {k: min(v) * 1e3 for k, v in times.items()}
            base = med["gloo"]
            cells = ", ".join(f"{k} {med[k]:.3f} ms (min {low[k]:.3f}, {med[k] / base:.2f}x)" for k in med)
            print(f"{a.p} ranks, {s}{' npu' if a.npu else ''}: {cells}", flush=True)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("-p", type=int, default=2)
    p.add_argument("--sizes", default="8K,64M")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--npu", action="store_true", help="npu tensors (pycann.torch) on the hccl groups")
    a = p.parse_args()
    if "RANK" in os.environ:
        rank_main(a)
        return
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, __file__, *sys.argv[1:]],
                              env={**os.environ, "RANK": str(r), "WORLD_SIZE": str(a.p), "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}) for r in range(a.p)]
    sys.exit(max(q.wait() for q in procs))


if __name__ == "__main__":
    main()
