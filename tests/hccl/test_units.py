"""Rank tables, environment, signatures and support tables (no processes)."""

import json
from pathlib import Path

import pytest

from pycann.hccl.constants import Collective, HcclReduceOp, HcclResult, check_dtype
from pycann.hccl.env import read_env, whitelist
from pycann.hccl.errors import HcclError
from pycann.hccl.ranktable import load_rank_table, parse_rank_table
from pycann.hccl.signature import CallSignature, check_alltoallv, find_mismatch

V10 = {"version": "1.0", "server_count": "2", "status": "completed", "server_list": [
    {"server_id": "10.0.0.1", "device": [{"device_id": "0", "device_ip": "192.168.1.8", "rank_id": "0"},
                                         {"device_id": "1", "device_ip": "192.168.1.9", "rank_id": "1"}]},
    {"server_id": "10.0.0.2", "device": [{"device_id": "0", "device_ip": "192.168.2.8", "rank_id": "2"},
                                         {"device_id": "1", "device_ip": "192.168.2.9", "rank_id": "3"}]}]}


def test_rank_table_v1_0() -> None:
    t = parse_rank_table(V10)
    assert t.rank_size == 4 and t.servers == ("10.0.0.1", "10.0.0.2")
    assert [(e.rank_id, e.server_id, e.device_id) for e in t.ranks_on("10.0.0.2")] == [(2, "10.0.0.2", 0),
                                                                                       (3, "10.0.0.2", 1)]
    assert t.master_address() == "10.0.0.1"


def test_rank_table_v1_2_and_2_0_use_host_ip() -> None:
    for version in ("1.2", "2.0"):
        data = {"version": version, "status": "completed", "server_count": "1", "server_list": [
            {"server_id": "node_0", "host_ip": "172.16.0.100", "device": [
                {"device_id": "0", "super_device_id": "0", "device_ip": "192.168.1.6", "rank_id": "0"}]}]}
        t = parse_rank_table(data)
        assert t.version == version and t.master_address() == "172.16.0.100" and t.ranks[0].device_id == 0


def test_rank_table_global_and_legacy() -> None:
    glob = {"version": "1.0", "status": "completed", "server_group_list": [{"group_id": "2", "server_list": [
        {"server_id": "a", "server_ip": "10.1.1.1", "device": [{"device_id": "3", "rank_id": "0"}]}]}]}
    assert parse_rank_table(glob).master_address() == "10.1.1.1"
    legacy = {"status": "completed", "group_count": "1", "group_list": [{"group_name": "hccl_world_group",
              "instance_list": [{"rank_id": "0", "server_id": "10.2.2.2", "devices": [{"device_id": "5"}]},
                                {"rank_id": "1", "server_id": "10.2.2.2", "devices": [{"device_id": "6"}]}]}]}
    t = parse_rank_table(legacy)
    assert t.rank_size == 2 and t.ranks[1].device_id == 6


@pytest.mark.parametrize("patch,needle", [
    ({"status": "initializing"}, "status is 'initializing'"),
    ({"version": "9.9"}, "version '9.9'"),
    ({"server_count": "3"}, "server_count is 3 but server_list has 2"),
    ({"server_list": []}, "server_list is missing or empty"),
])
def test_rank_table_errors(patch: dict, needle: str) -> None:
    with pytest.raises(HcclError, match=needle) as e:
        parse_rank_table({**V10, **patch})
    assert e.value.code is HcclResult.HCCL_E_PARA


def test_rank_table_bad_rank_ids(tmp_path: Path) -> None:
    data = json.loads(json.dumps(V10))
    data["server_list"][1]["device"][0]["rank_id"] = "1"
    p = tmp_path / "t.json"
    p.write_text(json.dumps(data))
    with pytest.raises(HcclError, match="rank_id 1 appears twice"):
        load_rank_table(p)
    with pytest.raises(HcclError) as e:
        load_rank_table(tmp_path / "missing.json")
    assert e.value.code is HcclResult.HCCL_E_OPEN_FILE_FAILURE
    p.write_text("{not json")
    with pytest.raises(HcclError, match="not valid JSON"):
        load_rank_table(p)


def test_master_address_needs_an_ip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    data = {"version": "1.0", "status": "completed", "server_list": [
        {"server_id": "node_0", "device": [{"device_id": "0", "rank_id": "0"}]}]}
    with pytest.raises(HcclError, match="not an IP address"):
        parse_rank_table(data).master_address()
    assert parse_rank_table(data).master_address("10.9.9.9") == "10.9.9.9"


def test_env(tmp_path: Path) -> None:
    e = read_env({"RANK_ID": "3", "RANK_SIZE": "8", "DEVICE_ID": "1", "HCCL_CONNECT_TIMEOUT": "5",
                  "HCCL_EXEC_TIMEOUT": "2.5", "HCCL_IF_IP": "10.0.0.7", "RANK_TABLE_FILE": "/x.json"})
    assert (e.rank_id, e.rank_size, e.device_id, e.connect_timeout, e.exec_timeout, e.if_ip) == \
        (3, 8, 1, 5.0, 2.5, "10.0.0.7")
    assert read_env({}).connect_timeout == 120.0 and read_env({}).exec_timeout is None
    with pytest.raises(HcclError, match="HCCL_EXEC_TIMEOUT='soon'"):
        read_env({"HCCL_EXEC_TIMEOUT": "soon"})
    with pytest.raises(HcclError, match="positive"):
        read_env({"HCCL_CONNECT_TIMEOUT": "0"})
    assert whitelist(read_env({})) is None
    wl = tmp_path / "wl.json"
    wl.write_text(json.dumps({"host_ip": ["10.0.0.1"]}))
    assert whitelist(read_env({"HCCL_WHITELIST_DISABLE": "0", "HCCL_WHITELIST_FILE": str(wl)})) == {"10.0.0.1"}
    with pytest.raises(HcclError, match="needs HCCL_WHITELIST_FILE"):
        whitelist(read_env({"HCCL_WHITELIST_DISABLE": "0"}))


def test_signature_roundtrip_and_mismatch() -> None:
    a = CallSignature(7, Collective.ALL_REDUCE, "float32", 12, (3, 4), int(HcclReduceOp.HCCL_REDUCE_SUM))
    assert CallSignature.decode(a.encode()) == a
    assert a.describe() == "#7 HcclAllReduce(float32[3, 4], count=12, op=sum)"
    same_count = CallSignature(7, Collective.ALL_REDUCE, "float32", 12, (12,), 0)
    assert find_mismatch([a, same_count]) is None  # HCCL counts elements; shapes may differ
    b = CallSignature(7, Collective.BROADCAST, "float32", 12, (12,), root=0)
    msg = find_mismatch([a, b], "g")
    assert msg is not None and "rank 0: #7 HcclAllReduce" in msg and "rank 1: #7 HcclBroadcast" in msg
    with pytest.raises(ValueError):
        CallSignature.decode([0] * 16)
    assert check_alltoallv([[1, 2], [3, 4]], [[1, 3], [2, 4]]) is None
    assert "rank 0 sends 2 elements to rank 1" in check_alltoallv([[1, 2], [3, 4]], [[1, 3], [9, 4]])


def test_support_tables() -> None:
    assert check_dtype(Collective.ALL_REDUCE, "bfloat16") is None
    assert "float64" in check_dtype(Collective.ALL_REDUCE, "float64")
    assert check_dtype(Collective.ALL_GATHER, "float64") is None
    assert check_dtype(Collective.BROADCAST, "complex64") is not None
