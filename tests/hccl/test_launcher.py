"""hccl-run: torchrun's flags, and rank tables that decide what runs on this host."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pycann.hccl.ranktable import parse_rank_table
from pycann.tools.hccl_run import pick_server, split_args, worker_envs
from tests.hccl.spawn import ROOT, WORKERS, free_port

pytest.importorskip("torch")


def _table(servers: list[tuple[str, list[int]]]) -> dict:
    rank = 0
    out = []
    for sid, devs in servers:
        ds = []
        for d in devs:
            ds.append({"device_id": str(d), "device_ip": f"192.168.0.{rank}", "rank_id": str(rank)})
            rank += 1
        out.append({"server_id": sid, "device": ds})
    return {"version": "1.0", "status": "completed", "server_count": str(len(out)), "server_list": out}


def _run(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", **(env or {})}
    e.pop("RANK_TABLE_FILE", None)
    return subprocess.run([sys.executable, "-m", "pycann.tools.hccl_run", *args], env={**e, **(env or {})},
                          capture_output=True, text=True, timeout=120)


def test_split_args_stops_at_the_script() -> None:
    assert split_args(["--nproc_per_node=2", "--master_port", "5", "x.py", "--master_port", "9"]) == \
        (["--nproc_per_node=2", "--master_port", "5"], ["x.py", "--master_port", "9"])
    assert split_args(["-m", "pkg.mod", "-v"]) == (["-m"], ["pkg.mod", "-v"])


def test_worker_envs_follow_the_table() -> None:
    t = parse_rank_table(_table([("10.0.0.1", [0, 1]), ("10.0.0.2", [4, 5])]), "t.json")
    assert pick_server(t, "10.0.0.2") == "10.0.0.2"
    envs = worker_envs(t, "10.0.0.2", None, 1234)
    assert [(e["RANK"], e["LOCAL_RANK"], e["DEVICE_ID"], e["GROUP_RANK"]) for e in envs] == \
        [("2", "0", "4", "1"), ("3", "1", "5", "1")]
    assert envs[0]["MASTER_ADDR"] == "10.0.0.1" and envs[0]["WORLD_SIZE"] == "4" and envs[0]["RANK_SIZE"] == "4"
    with pytest.raises(Exception, match="not in t.json"):
        pick_server(t, "10.9.9.9")


def _table_v2(devices: list[int], addr: str) -> dict:
    return {"version": "2.0", "rank_count": str(len(devices)), "rank_list": [
        {"rank_id": r, "device_id": d, "local_id": d, "level_list": [
            {"net_layer": 0, "net_instance_id": "server0", "net_type": "TOPO_FILE_DESC", "net_attr": "",
             "rank_addr_list": []}],
         "control_plane": {"addr_type": "IPV4", "addr": addr, "listen_port": "60000"}}
        for r, d in enumerate(devices)]}


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_rank_table_launch(tmp_path: Path, version: str) -> None:
    p = tmp_path / "hccl.json"
    table = _table([("127.0.0.1", [3, 7])]) if version == "1.0" else _table_v2([3, 7], "127.0.0.1")
    p.write_text(json.dumps(table))
    r = _run(["--rank_table", str(p), "--master_port", str(free_port()), str(WORKERS / "launched.py"), "tail"])
    assert r.returncode == 0, r.stderr[-3000:]
    lines = sorted(x for x in r.stdout.splitlines() if x.startswith("WORKER"))
    assert len(lines) == 2
    assert "RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 RANK_ID=0 RANK_SIZE=2 DEVICE_ID=3" in lines[0]
    assert "RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 RANK_ID=1 RANK_SIZE=2 DEVICE_ID=7" in lines[1]
    assert all("SUM=1 tail" in x and "MASTER_ADDR=127.0.0.1" in x for x in lines)


def test_malformed_rank_table_is_one_clear_line(tmp_path: Path) -> None:
    p = tmp_path / "hccl.json"
    p.write_text(json.dumps({"version": "2.0", "rank_count": "2", "rank_list": [{"rank_id": 0, "local_id": 0},
                                                                                 {"rank_id": "x", "local_id": 1}]}))
    r = _run(["--rank_table", str(p), "x.py"])
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"{p}: rank_list[1].rank_id 'x' is not an integer" in r.stderr


def test_rank_table_errors(tmp_path: Path) -> None:
    p = tmp_path / "hccl.json"
    p.write_text(json.dumps(_table([("127.0.0.1", [0, 1])])))
    r = _run(["--rank_table", str(p), "--nproc_per_node=4", "x.py"])
    assert r.returncode == 2 and "--nproc_per_node=4 but" in r.stderr and "lists 2 devices" in r.stderr


def test_torchrun_flags_without_a_table() -> None:
    r = _run(["--nproc_per_node=2", "--master_port", str(free_port()), str(WORKERS / "launched.py")])
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("SUM=1") == 2


TORCH_NPU_WORKER = r'''import os
import torch
import torch.distributed as dist
import torch_npu  # noqa: F401  (pycann's, as under pycann-run)
import acl

dist.init_process_group(backend="hccl")
t = torch.full((4,), float(int(os.environ["RANK"]) + 1)).npu()
dist.all_reduce(t)
shim = os.path.dirname(os.path.dirname(torch_npu.__file__))
os.write(1, f"TNPU rank={dist.get_rank()} device={t.device.type} sum={t.cpu().tolist()} acl={acl.__name__}\n"
            f"SHIM {shim}\n".encode())  # one write: the two workers share the pipe
dist.destroy_process_group()
'''


@pytest.mark.parametrize("how", ["rank_table", "nproc_per_node"])
def test_torch_npu_script_runs_unmodified(tmp_path: Path, how: str) -> None:
    # a torch_npu script (as /work/shared/samples/hccl/allreduce.py): `import torch_npu` failed under
    # hccl-run (ModuleNotFoundError), which ran the workers without pycann-run's shims
    script = tmp_path / "tnpu.py"
    script.write_text(TORCH_NPU_WORKER)
    port = str(free_port())
    if how == "rank_table":
        p = tmp_path / "hccl.json"
        p.write_text(json.dumps(_table([("127.0.0.1", [0, 1])])))
        args = ["--rank_table", str(p), "--master_port", port, str(script)]
    else:
        args = ["--nproc_per_node=2", "--master_port", port, str(script)]
    r = _run(args)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = sorted(x for x in r.stdout.splitlines() if x.startswith("TNPU"))
    assert lines == [f"TNPU rank={k} device=npu sum=[3.0, 3.0, 3.0, 3.0] acl=pycann.acl" for k in (0, 1)], r.stdout
    shims = {x.split(" ", 1)[1] for x in r.stdout.splitlines() if x.startswith("SHIM ")}
    assert len(shims) == 1 and Path(next(iter(shims))).name.startswith("pycann-run-")
    assert not Path(next(iter(shims))).exists()  # removed when the launcher ends
