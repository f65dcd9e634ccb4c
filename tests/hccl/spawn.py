"""Start N ranks of a worker script as separate processes (torchrun's environment, no torchrun)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

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


def run_ranks(worker: str, n: int, *args: str, env: dict[str, str] | None = None, timeout: float = 90,
              ranks: list[int] | None = None) -> list[Rank]:
    """Run ``workers/<worker>`` as ranks ``ranks`` (default all ``n``) of a world of ``n``."""
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


# A known, intermittent defect (session note of 2026-12-04): a rank that finished and printed its
# success line sometimes aborts at interpreter exit ("terminate called without an active exception",
# SIGABRT), most likely a gloo thread that needs the GIL while Python finalises. It is reported as an
# expected failure naming the defect, never as a pass; any other failure, or an abort before the
# success line, still fails the test.
EXIT_ABORT = "terminate called without an active exception"


def _exit_abort_after_success(r: Rank) -> bool:
    return (r.rc == -6 and r.out.strip().endswith("ok") and r.err.strip().endswith(EXIT_ABORT))


def check_ok(results: list[Rank]) -> None:
    bad = [f"rank {r.rank} rc={r.rc}\n{r.out}\n{r.err[-3000:]}" for r in results if r.rc != 0]
    if bad and all(r.rc == 0 or _exit_abort_after_success(r) for r in results):
        pytest.xfail("known defect: a rank aborted at interpreter exit after its collectives succeeded "
                     f"({EXIT_ABORT}); " + "; ".join(b.splitlines()[0] for b in bad))
    assert not bad, "\n".join(bad)
