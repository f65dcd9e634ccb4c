"""hccl_test: CANN's benchmark shape, its data check on every backend, the size sweep."""

import os
import subprocess
import sys

import pytest

from pycann.tools.hccl_test import bus_factor, parse_size, sizes
from tests.hccl.spawn import ROOT

pytest.importorskip("torch")


def test_sizes_and_factors() -> None:
    import argparse

    assert parse_size("8K") == 8192 and parse_size("64M") == 64 << 20 and parse_size("100") == 100
    a = argparse.Namespace(minbytes="8K", maxbytes="64M", stepfactor=2.0, stepbytes="0")
    s = sizes(a)
    assert s[0] == 8192 and s[-1] == 64 << 20 and len(s) == 14
    assert bus_factor("all_reduce_test", 4) == 1.5 and bus_factor("all_gather_test", 4) == 0.75
    assert bus_factor("broadcast_test", 4) == 1.0


@pytest.mark.parametrize("test,backend,extra", [
    ("all_reduce_test", "hccl", ["-d", "bfp16"]),
    ("alltoall_test", "hccl-c", ["-d", "int8"]),
    ("reduce_scatter_test", "gloo", ["-o", "max"]),
    ("all_gather_test", "hccl", ["-d", "uint32"]),  # CANN's moving tests take uint8-64 and fp64 too
    ("alltoall_test", "hccl", ["-d", "uint16"]),
    ("broadcast_test", "hccl-c", ["-d", "fp64"]),
])
def test_runs_and_checks(test: str, backend: str, extra: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    for k in ("RANK", "WORLD_SIZE"):
        env.pop(k, None)
    r = subprocess.run([sys.executable, "-m", "pycann.tools.hccl_test", test, "-b", "1K", "-e", "8K", "-f", "8",
                        "-p", "2", "-n", "2", "-w", "1", "--backend", backend, *extra],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    rows = [x.split() for x in r.stdout.splitlines() if x.strip()[:1].isdigit()]
    assert [int(x[0]) for x in rows] == [1024, 8192], r.stdout
    assert all(x[-1] == "success" for x in rows) and all(float(x[1]) > 0 for x in rows), r.stdout


def test_reducing_test_refuses_a_type_hccl_does_not_reduce() -> None:
    r = subprocess.run([sys.executable, "-m", "pycann.tools.hccl_test", "all_reduce_test", "-d", "fp64", "-p", "2"],
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "all_reduce_test does not support -d fp64" in r.stderr, r.stderr


def test_root_outside_the_ranks_is_one_line() -> None:
    """-r 5 with -p 2: one line and exit 2 (a traceback from every rank before)."""
    r = subprocess.run([sys.executable, "-m", "pycann.tools.hccl_test", "broadcast_test", "-r", "5", "-p", "2"],
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "-r 5 is not a rank" in r.stderr and "Traceback" not in r.stderr, r.stderr
