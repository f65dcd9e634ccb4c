"""``hccl_test``: CANN's collective benchmark, on pycann's HCCL (docs/hccl.md).

    hccl_test all_reduce_test -b 8K -e 64M -f 2 -p 2 [-d fp32] [-o sum] [-n 20] [-w 5] [-c 1]

As CANN's tool does, it sweeps message sizes from ``-b`` to ``-e`` (times ``-f`` each step),
runs ``-w`` warm-up and ``-n`` timed iterations of the collective on ``-p`` ranks and checks the
result (``-c 1``, the default). ``-p N`` starts N local processes (CANN's hccl_test leaves that
to mpirun); under a launcher (``RANK`` set) it runs as that rank. ``--backend`` picks the
engine: ``hccl`` (torch.distributed's hccl backend, default), ``hccl-c`` (the C-style API on acl
device buffers and a stream) or ``gloo`` (raw gloo, the baseline).

Columns: data size in bytes (the largest buffer, as nccl-tests counts it), the average time of
one collective in microseconds (the slowest rank's), algorithm and bus bandwidth in GB/s
(nccl-tests' factors: all-reduce 2(n-1)/n, all-gather / reduce-scatter / all-to-all (n-1)/n,
broadcast / reduce 1) and the check result.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from pycann import config

TESTS = ("all_reduce_test", "all_gather_test", "reduce_scatter_test", "broadcast_test", "reduce_test",
         "alltoall_test")
DTYPES = {"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "fp16": "float16",
          "fp32": "float32", "bfp16": "bfloat16", "uint8": "uint8", "uint16": "uint16", "uint32": "uint32",
          "uint64": "uint64", "fp64": "float64"}
# CANN's hccl_test: the reducing tests take these, the data-moving ones every type above
REDUCE_DTYPES = ("int8", "int16", "int32", "int64", "fp16", "fp32", "bfp16")
REDUCING_TESTS = ("all_reduce_test", "reduce_scatter_test", "reduce_test")
OPS = ("sum", "prod", "max", "min")
# gloo's algorithm behind each collective, as torch's ProcessGroupGloo runs it
ALGORITHMS = {"all_reduce_test": "gloo ring allreduce", "all_gather_test": "gloo ring allgather",
              "reduce_scatter_test": "gloo reduce_scatter", "broadcast_test": "gloo broadcast",
              "reduce_test": "gloo reduce", "alltoall_test": "gloo alltoall"}


def parse_size(s: str) -> int:
    """``8K`` -> 8192, ``64M``, ``1G``, plain bytes."""
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s.rstrip("KMGB") or 0) * mult)


def bus_factor(test: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor."""
    if test == "all_reduce_test":
        return 2 * (n - 1) / n
    if test in ("all_gather_test", "reduce_scatter_test", "alltoall_test"):
        return (n - 1) / n
    return 1.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hccl_test", description="CANN's hccl_test on pycann's HCCL")
    p.add_argument("test", choices=TESTS)
    p.add_argument("-b", "--minbytes", default="8K")
    p.add_argument("-e", "--maxbytes", default="64M")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0)
    p.add_argument("-i", "--stepbytes", default="0")
    p.add_argument("-p", "--npus", type=int, default=2, help="ranks to start on this host")
    p.add_argument("-d", "--datatype", default="fp32", choices=sorted(DTYPES))
    p.add_argument("-o", "--op", default="sum", choices=OPS)
    p.add_argument("-r", "--root", type=int, default=0)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("-c", "--check", type=int, default=1)
    p.add_argument("--backend", default="hccl", choices=("hccl", "hccl-c", "gloo"))
    return p


def sizes(a: argparse.Namespace) -> list[int]:
    lo, hi, step = parse_size(a.minbytes), parse_size(a.maxbytes), parse_size(a.stepbytes)
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s = s + step if step else int(s * a.stepfactor)
        if a.stepfactor <= 1 and not step:
            break
    return out


@dataclass
class Case:
    """One collective at one size: ``run()`` launches it ``k`` times and waits; ``check()`` says
    whether the last run produced the expected values."""

    run: Callable[[int], None]
    check: Callable[[], bool]


def _expect(op: str, n: int, dtype: str) -> tuple[Callable[[int], float], float]:
    """(value rank r contributes, the reduction over n ranks) for small exact integers."""
    if op == "sum":
        return (lambda r: r + 1), n * (n + 1) / 2
    if op == "prod":
        return (lambda r: 2 if r < 3 else 1), float(2 ** min(n, 3))
    if op == "max":
        return (lambda r: r + 1), float(n)
    return (lambda r: r + 1), 1.0


def torch_case(test: str, nbytes: int, a: argparse.Namespace, rank: int, n: int) -> Case:
    import torch
    import torch.distributed as dist

    dt = getattr(torch, DTYPES[a.datatype])
    es = torch.empty(0, dtype=dt).element_size()
    val, red = _expect(a.op, n, a.datatype)
    op = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
          "min": dist.ReduceOp.MIN}[a.op]
    count = max(n, nbytes // es // n * n)
    if test == "all_reduce_test":
        t = torch.empty(count, dtype=dt)

        def run(k: int) -> None:
            works = []
            for _ in range(k):
                t.fill_(val(rank))
                works.append(dist.all_reduce(t, op=op, async_op=True))
                works[-1].wait()
        return Case(run, lambda: bool((t == red).all()))
    if test == "all_gather_test":
        src, out = torch.full((count // n,), rank + 1, dtype=dt), torch.empty(count, dtype=dt)
        want = torch.arange(1, n + 1).repeat_interleave(count // n).to(dt)  # (torch has no uint16-64 arange)
        def run_g(k: int) -> None:
            for _ in range(k):
                dist.all_gather_into_tensor(out, src)
        return Case(run_g, lambda: torch.equal(out, want))
    if test == "reduce_scatter_test":
        src, out = torch.empty(count, dtype=dt), torch.empty(count // n, dtype=dt)

        def run_rs(k: int) -> None:
            for _ in range(k):
                src.fill_(val(rank))
                dist.reduce_scatter_tensor(out, src, op=op)
        return Case(run_rs, lambda: bool((out == red).all()))
    if test == "broadcast_test":
        t = torch.empty(count, dtype=dt)

        def run_b(k: int) -> None:
            for _ in range(k):
                t.fill_(a.root + 1 if rank == a.root else 0)
                dist.broadcast(t, a.root)
        return Case(run_b, lambda: bool((t == a.root + 1).all()))
    if test == "reduce_test":
        t = torch.empty(count, dtype=dt)

        def run_r(k: int) -> None:
            for _ in range(k):
                t.fill_(val(rank))
                dist.reduce(t, a.root, op=op)
        return Case(run_r, lambda: rank != a.root or bool((t == red).all()))
    src = (torch.arange(n).repeat_interleave(count // n) + 10 * rank).to(dt)  # alltoall
    out = torch.empty(count, dtype=dt)
    want = (rank + 10 * torch.arange(n)).repeat_interleave(count // n).to(dt)
    def run_a(k: int) -> None:
        for _ in range(k):
            dist.all_to_all_single(out, src)
    return Case(run_a, lambda: torch.equal(out, want))


def capi_case(test: str, nbytes: int, a: argparse.Namespace, rank: int, n: int, comm: int, stream: int) -> Case:
    import numpy as np

    import pycann.acl as acl
    from pycann.hccl import api as H
    from pycann.hccl.constants import DTYPE_BY_NAME, HcclReduceOp

    name = DTYPES[a.datatype]
    npdt = np.dtype("uint16") if name == "bfloat16" else np.dtype(name)
    hdt = DTYPE_BY_NAME[name]
    op = {"sum": HcclReduceOp.HCCL_REDUCE_SUM, "prod": HcclReduceOp.HCCL_REDUCE_PROD,
          "max": HcclReduceOp.HCCL_REDUCE_MAX, "min": HcclReduceOp.HCCL_REDUCE_MIN}[a.op]
    val, red = _expect(a.op, n, a.datatype)
    count = max(n, nbytes // npdt.itemsize // n * n)

    def buf(arr: np.ndarray) -> int:
        p, ret = acl.rt.malloc(arr.nbytes, 0)
        assert ret == 0, ret
        acl.rt.memcpy(p, arr.nbytes, acl.util.numpy_to_ptr(arr), arr.nbytes, 1)
        return p

    def read(p: int, k: int) -> np.ndarray:
        out = np.empty(k, npdt)
        acl.rt.memcpy(acl.util.numpy_to_ptr(out), out.nbytes, p, out.nbytes, 2)
        return out

    def values(x: float, k: int) -> np.ndarray:
        import torch

        return torch.full((k,), x, dtype=getattr(torch, name)).view(-1).numpy().view(npdt) \
            if name == "bfloat16" else np.full(k, x, npdt)

    def loop(call: Callable[[], int]) -> Callable[[int], None]:
        def run(k: int) -> None:
            for _ in range(k):
                ret = call()
                assert ret == 0, (ret, H.last_error())
            assert acl.rt.synchronize_stream(stream) == 0, H.last_error()
        return run

    if test == "all_reduce_test":
        s, d = buf(values(val(rank), count)), buf(np.zeros(count, npdt))
        return Case(loop(lambda: H.HcclAllReduce(s, d, count, hdt, op, comm, stream)),
                    lambda: bool((read(d, count) == values(red, count)).all()))
    if test == "all_gather_test":
        s, d = buf(values(rank + 1, count // n)), buf(np.zeros(count, npdt))
        want = np.concatenate([values(r + 1, count // n) for r in range(n)])
        return Case(loop(lambda: H.HcclAllGather(s, d, count // n, hdt, comm, stream)),
                    lambda: bool((read(d, count) == want).all()))
    if test == "reduce_scatter_test":
        s, d = buf(values(val(rank), count)), buf(np.zeros(count // n, npdt))
        return Case(loop(lambda: H.HcclReduceScatter(s, d, count // n, hdt, op, comm, stream)),
                    lambda: bool((read(d, count // n) == values(red, count // n)).all()))
    if test == "broadcast_test":
        b = buf(values(a.root + 1 if rank == a.root else 0, count))
        return Case(loop(lambda: H.HcclBroadcast(b, count, hdt, a.root, comm, stream)),
                    lambda: bool((read(b, count) == values(a.root + 1, count)).all()))
    if test == "reduce_test":
        s, d = buf(values(val(rank), count)), buf(np.zeros(count, npdt))
        return Case(loop(lambda: H.HcclReduce(s, d, count, hdt, op, a.root, comm, stream)),
                    lambda: rank != a.root or bool((read(d, count) == values(red, count)).all()))
    blk = count // n
    src = np.concatenate([values(10 * rank + j, blk) for j in range(n)])
    s, d = buf(src), buf(np.zeros(count, npdt))
    want = np.concatenate([values(10 * i + rank, blk) for i in range(n)])
    return Case(loop(lambda: H.HcclAlltoAll(s, blk, hdt, d, blk, hdt, comm, stream)),
                lambda: bool((read(d, count) == want).all()))


def run_rank(a: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    launcher = config.launcher_env()
    rank, n = int(launcher["RANK"]), int(launcher["WORLD_SIZE"])
    if not 0 <= a.root < n:
        if rank == 0:
            print(f"hccl_test: -r {a.root} is not a rank of the {n} started (0..{n - 1})", file=sys.stderr)
        return 2
    if a.backend == "hccl":
        import pycann.hccl  # noqa: F401  (registers the backend)
    dist.init_process_group("gloo" if a.backend == "gloo" else "hccl" if a.backend == "hccl" else "gloo",
                            timeout=timedelta(seconds=600))
    comm = stream = 0
    if a.backend == "hccl-c":
        import pycann.acl as acl
        from pycann.hccl import api as H

        acl.init()
        acl.rt.set_device(0)
        stream, _ = acl.rt.create_stream()
        info: list[bytes] = [H.HcclGetRootInfo()[0] if rank == 0 else b""]
        dist.broadcast_object_list(info, 0)  # the "any channel" HCCL leaves to the application
        comm, ret = H.HcclCommInitRootInfo(n, info[0], rank)
        assert ret == 0, H.last_error()
    if rank == 0:
        print(f"the minbytes is {parse_size(a.minbytes)}, maxbytes is {parse_size(a.maxbytes)}, iters is {a.iters}, "
              f"warmup_iters is {a.warmup_iters}, ranks {n}, backend {a.backend}, datatype {a.datatype}, op {a.op}")
        print(f"{'data_size(Bytes)':>18} {'aveg_time(us)':>15} {'alg_bw(GB/s)':>13} {'bus_bw(GB/s)':>13} "
              f"{'algorithm':>22} {'check_result':>13}", flush=True)
    failed = False
    for nbytes in sizes(a):
        case = (capi_case(a.test, nbytes, a, rank, n, comm, stream) if a.backend == "hccl-c"
                else torch_case(a.test, nbytes, a, rank, n))
        case.run(a.warmup_iters)
        dist.barrier()
        t0 = time.perf_counter()
        case.run(a.iters)
        mine = torch.tensor([(time.perf_counter() - t0) / max(a.iters, 1)], dtype=torch.float32)  # HCCL has no fp64
        worst = mine.clone()
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        ok = True
        if a.check:
            case.run(1)
            flag = torch.tensor([0 if case.check() else 1], dtype=torch.int32)
            dist.all_reduce(flag)
            ok = int(flag.item()) == 0
        failed |= not ok
        secs = float(worst.item())
        algbw = nbytes / secs / 1e9
        if rank == 0:
            algo = ALGORITHMS[a.test] + (" +sig" if a.backend != "gloo" else "")
            res = ("success" if ok else "fail") if a.check else "NULL"
            print(f"{nbytes:>18} {secs * 1e6:>15.2f} {algbw:>13.4f} {algbw * bus_factor(a.test, n):>13.4f} "
                  f"{algo:>22} {res:>13}", flush=True)
    if a.backend == "hccl-c":
        from pycann.hccl import api as H

        H.HcclCommDestroy(comm)
    dist.destroy_process_group()
    return 1 if failed else 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (spawning ``-p`` ranks unless started by a launcher); exit status 1 if a
    data check failed."""
    args = list(sys.argv[1:] if argv is None else argv)
    prog = os.path.basename(sys.argv[0]) if argv is None else ""
    if prog in TESTS:  # called as all_reduce_test ... (CANN's binary names)
        args = [prog, *args]
    a = _parser().parse_args(args)
    if a.npus < 1 or a.iters < 1 or parse_size(a.minbytes) <= 0:
        print("hccl_test: -p, -n and -b must be positive", file=sys.stderr)
        return 2
    if "RANK" not in config.launcher_env() and not 0 <= a.root < a.npus:
        print(f"hccl_test: -r {a.root} is not a rank of the {a.npus} that -p starts (0..{a.npus - 1})",
              file=sys.stderr)
        return 2
    if a.test in REDUCING_TESTS and a.datatype not in REDUCE_DTYPES:
        print(f"hccl_test: {a.test} does not support -d {a.datatype} (HCCL reduces {', '.join(REDUCE_DTYPES)}; "
              f"broadcast_test, all_gather_test and alltoall_test take every type)", file=sys.stderr)
        return 2
    if "RANK" in config.launcher_env() and "WORLD_SIZE" in config.launcher_env():
        return run_rank(a)
    port = str(_free_port())
    procs = []
    for r in range(a.npus):
        env = {**config.environment(), "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(a.npus),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, "-m", "pycann.tools.hccl_test", *args], env=env))
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    sys.exit(main())
