"""Start N ranks of a worker script as separate processes (torchrun's environment, no torchrun)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Rank:
    rank: int
    rc: int
    out: str
    err: str


def start_ranks(worker: str, n: int, *args: str, env: dict[str, str] | None = None,
                ranks: list[int] | None = None) -> list[tuple[int, subprocess.Popen[str]]]:
    """Start ``workers/<worker>`` as ranks ``ranks`` (default all ``n``) of a world of ``n``."""
    port = free_port()
    procs = []
    for r in ranks if ranks is not None else range(n):
        e = dict(os.environ)
        e.update({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n),
                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
                  "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
                  "PYTHONWARNINGS": "ignore"})
        e.update(env or {})
        procs.append((r, subprocess.Popen([sys.executable, str(WORKERS / worker), *args], env=e,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    return procs


def collect(procs: list[tuple[int, subprocess.Popen[str]]], timeout: float = 90) -> list[Rank]:
    """Wait for ranks started by ``start_ranks``; one killed after ``timeout`` s says so in its ``err``."""
    out = []
    for r, p in procs:
        try:
            o, er = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, er = p.communicate()
            er += f"\n[test harness: rank {r} killed after {timeout} s]"
        out.append(Rank(r, p.returncode, o, er))
    return out


def run_ranks(worker: str, n: int, *args: str, env: dict[str, str] | None = None, timeout: float = 90,
              ranks: list[int] | None = None) -> list[Rank]:
    """Run ``workers/<worker>`` as ranks ``ranks`` (default all ``n``) of a world of ``n``."""
    return collect(start_ranks(worker, n, *args, env=env, ranks=ranks), timeout)


def check_ok(results: list[Rank]) -> None:
    """Every rank exited 0 (an abort at interpreter exit after the success line fails too)."""
    bad = [f"rank {r.rank} rc={r.rc}\n{r.out}\n{r.err[-3000:]}" for r in results if r.rc != 0]
    assert not bad, "\n".join(bad)
