"""Two "hosts": network namespaces joined by a veth pair (addresses made here, inside the sandbox),
one hccl-run per namespace reading the same rank table (version 1.0, then 2.0), its workers
all-reducing CPU and npu tensors across the two. Skipped, with the reason, where namespaces
cannot be made; every process is bounded in time."""

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hccl.spawn import ROOT, WORKERS

pytest.importorskip("torch")


def _sh(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=20)


@pytest.fixture
def two_hosts():
    if shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("needs root and iproute2 for network namespaces")
    tag = f"{os.getpid() % 10000}"
    ns = [f"pchccl{tag}a", f"pchccl{tag}b"]
    veth = [f"pch{tag}a", f"pch{tag}b"]
    net = f"10.231.{random.randint(1, 250)}"
    ips = [f"{net}.1", f"{net}.2"]
    try:
        for n in ns:
            if _sh("ip", "netns", "add", n).returncode != 0:
                pytest.skip("cannot create network namespaces here")
        if _sh("ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1]).returncode != 0:
            pytest.skip("cannot create a veth pair here")
        for n, v, ip in zip(ns, veth, ips):
            for cmd in (("ip", "link", "set", v, "netns", n),
                        ("ip", "netns", "exec", n, "ip", "addr", "add", f"{ip}/24", "dev", v),
                        ("ip", "netns", "exec", n, "ip", "link", "set", v, "up"),
                        ("ip", "netns", "exec", n, "ip", "link", "set", "lo", "up")):
                r = _sh(*cmd)
                if r.returncode != 0:
                    pytest.skip(f"namespace set-up failed: {' '.join(cmd)}: {r.stderr}")
        yield ns, veth, ips
    finally:
        for n in ns:
            _sh("ip", "netns", "del", n)


def _table(version: str, ips: list[str]) -> dict:
    """Ranks 0 and 1 on the first host (devices 0, 1), rank 2 on the second (device 0)."""
    if version == "1.0":
        return {"version": "1.0", "status": "completed", "server_count": "2", "server_list": [
            {"server_id": ips[0], "device": [{"device_id": "0", "rank_id": "0"}, {"device_id": "1", "rank_id": "1"}]},
            {"server_id": ips[1], "device": [{"device_id": "0", "rank_id": "2"}]}]}
    ranks = []
    for rank, (host, local) in enumerate([(0, 0), (0, 1), (1, 0)]):
        ranks.append({"rank_id": rank, "local_id": local, "level_list": [
            {"net_layer": 0, "net_instance_id": f"host{host}", "net_type": "TOPO_FILE_DESC", "net_attr": "",
             "rank_addr_list": [{"addr_type": "IPV4", "addr": ips[host], "ports": ["0/1"]}]}],
            "control_plane": {"addr_type": "IPV4", "addr": ips[host], "listen_port": "29555"}})
    return {"version": "2.0", "rank_count": "3", "rank_list": ranks}


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_rank_table_across_two_hosts(two_hosts, tmp_path: Path, version: str) -> None:
    ns, veth, ips = two_hosts
    p = tmp_path / "hccl.json"
    p.write_text(json.dumps(_table(version, ips)))
    procs = []
    for n, v in zip(ns, veth):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore", "HCCL_SOCKET_IFNAME": v,
               "OMP_NUM_THREADS": "1", "HCCL_CONNECT_TIMEOUT": "90", "HCCL_EXEC_TIMEOUT": "60"}
        env.pop("RANK_TABLE_FILE", None)
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", n, sys.executable, "-m", "pycann.tools.hccl_run", "--rank_table", str(p),
             "--master_port", "29555", str(WORKERS / "launched.py"), "npu"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for pr in procs:
        try:
            o, e = pr.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append((pr.returncode, o, e))
    for rc, _o, e in outs:
        assert rc == 0, e[-3000:]
    lines = sorted(x for _, o, _ in outs for x in o.splitlines() if x.startswith("WORKER"))
    assert len(lines) == 3
    assert all("SUM=3" in x and f"MASTER_ADDR={ips[0]}" in x for x in lines), lines
    assert "RANK=1 LOCAL_RANK=1 WORLD_SIZE=3 RANK_ID=1 RANK_SIZE=3 DEVICE_ID=1" in lines[1]
    assert "RANK=2 LOCAL_RANK=0 WORLD_SIZE=3" in lines[2]
    # npu tensors: float32 sum of arange(1000) * (rank + 1) over ranks 0..2, float16 max of rank + 1
    # over 513 elements, int64 all-gather of rank * 10; results stay on the npu
    f32 = sum(range(1000)) * (1 + 2 + 3)
    for x in lines:
        assert "NPU=npu:0,npu:0,npu:0" in x and f"F32={f32}" in x and f"F16MAX={513 * 3}" in x, x
        assert "GATHER=0,10,20" in x, x
