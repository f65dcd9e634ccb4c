"""HCCL's C-style API: root-info and rank-table communicators, every collective on device buffers."""

import json
from pathlib import Path

import pytest

from tests.hccl.spawn import check_ok, free_port, run_ranks

pytest.importorskip("torch")


def test_root_info_communicator(tmp_path: Path) -> None:
    res = run_ranks("capi.py", 3, "rootinfo", str(tmp_path), env={"HCCL_IF_IP": "127.0.0.1"})
    check_ok(res)
    assert all("capi ok" in r.out for r in res)


def test_rank_table_communicator(tmp_path: Path) -> None:
    table = {"version": "1.0", "server_count": "1", "status": "completed", "server_list": [
        {"server_id": "127.0.0.1", "device": [
            {"device_id": str(i), "device_ip": f"192.168.100.10{i}", "rank_id": str(i)} for i in range(2)]}]}
    path = tmp_path / "hccl.json"
    path.write_text(json.dumps(table))
    res = run_ranks("capi.py", 2, "ranktable", str(path), env={"HCCL_IF_BASE_PORT": str(free_port())})
    check_ok(res)
    assert all("capi ok" in r.out for r in res)
