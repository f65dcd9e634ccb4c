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
    ({"server_list": []}, "server_list must be a non-empty JSON list, but is an empty list"),
    ({"server_list": None}, "server_list must be a non-empty JSON list, but is missing"),
])
def test_rank_table_errors(patch: dict, needle: str) -> None:
    with pytest.raises(HcclError, match=needle) as e:
        parse_rank_table({**V10, **patch})
    assert e.value.code is HcclResult.HCCL_E_PARA


def test_rank_table_device_listed_twice_or_negative() -> None:
    """Two ranks on one device of one server (hccl-run would start both with DEVICE_ID 0), a server
    listed twice, a negative device_id: HCCL_E_PARA naming the device and ranks."""
    data = json.loads(json.dumps(V10))
    data["server_list"][0]["device"][1]["device_id"] = "0"
    with pytest.raises(HcclError, match="device 0 of server 10.0.0.1 is listed for rank 0 and rank 1") as e:
        parse_rank_table(data)
    assert e.value.code is HcclResult.HCCL_E_PARA
    data = json.loads(json.dumps(V10))
    data["server_list"][1]["server_id"] = "10.0.0.1"
    with pytest.raises(HcclError, match="device 0 of server 10.0.0.1 is listed for rank 0 and rank 2"):
        parse_rank_table(data)
    data = json.loads(json.dumps(V10))
    data["server_list"][0]["device"][0]["device_id"] = "-1"
    with pytest.raises(HcclError, match="device_id -1 of rank 0 is negative"):
        parse_rank_table(data)


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
    p.write_text("[" * 100_000 + "]" * 100_000)  # json's RecursionError escaped: a crash, not HCCL_E_PARA
    with pytest.raises(HcclError, match="nests deeper than Python's recursion limit") as e:
        load_rank_table(p)
    assert e.value.code is HcclResult.HCCL_E_PARA


# Version 2.0 as CANN's HCCL tests write it (hicann/hcomm test/.../ranktable_2p.json and
# 1d_2p_mesh_topo/ranktable.json): a flat rank_list, no server_list
V20 = {"version": "2.0", "rank_count": "2", "rank_list": [
    {"rank_id": 0, "local_id": 0, "level_list": [
        {"level": 0, "id": "az0-rack0", "fabric_type": "INNER", "rank_addr_type": "", "rank_addrs": []},
        {"level": 1, "id": "az0", "fabric_type": "CLOS", "rank_addr_type": "EID", "rank_addrs": ["124.112.1.0"]}],
     "control_plane": {"addr_type": "IPV4", "addr": "192.168.100.100", "listen_port": "60001"}},
    {"rank_id": 1, "local_id": 1, "level_list": [
        {"level": 0, "id": "az0-rack0", "fabric_type": "INNER", "rank_addr_type": "", "rank_addrs": []}],
     "control_plane": {"addr_type": "IPV4", "addr": "192.168.100.100", "listen_port": "60002"}}],
    "replace_count": 1, "replace_list": [{"level": 0, "group_id": "az0-rack0", "backup_local_id": 64,
                                          "target_local_id": 1}]}
V20_NET_LAYER = {"version": "2.0", "rank_count": 3, "rank_list": [
    {"rank_id": r, "device_id": d, "local_id": d, "level_list": [
        {"net_layer": 0, "net_instance_id": inst, "net_type": "TOPO_FILE_DESC", "net_attr": "",
         "rank_addr_list": [{"addr_type": "IPV4", "addr": f"223.0.0.{r}", "ports": ["0/2"]}]}]}
    for r, d, inst in [(1, 5, "rack0"), (0, 4, "rack0"), (2, 0, "rack1")]]}


def test_rank_table_v2_0(tmp_path: Path) -> None:
    p = tmp_path / "hccl.json"
    p.write_text(json.dumps(V20))
    t = load_rank_table(p)
    assert t.version == "2.0" and t.rank_size == 2 and t.servers == ("192.168.100.100",)
    assert [(e.rank_id, e.device_id, e.host_ip) for e in t.ranks] == [(0, 0, "192.168.100.100"),
                                                                     (1, 1, "192.168.100.100")]
    assert t.master_address() == "192.168.100.100"


def test_rank_table_v2_0_servers_from_level_0(monkeypatch: pytest.MonkeyPatch) -> None:
    t = parse_rank_table(V20_NET_LAYER)
    assert [(e.rank_id, e.server_id, e.device_id) for e in t.ranks] == [(0, "rack0", 4), (1, "rack0", 5),
                                                                        (2, "rack1", 0)]
    assert t.servers == ("rack0", "rack1")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    with pytest.raises(HcclError, match="not an IP address"):
        t.master_address()
    # no addresses and no levels at all: one implicit server on this host
    bare = parse_rank_table({"version": "2.0", "rank_list": [{"rank_id": 0, "local_id": 0},
                                                             {"rank_id": 1, "device_id": 3}]})
    assert bare.servers == ("localhost",) and bare.ranks[1].device_id == 3
    assert bare.master_address() == "127.0.0.1"


def _v20(**patch: object) -> dict:
    d = json.loads(json.dumps(V20))
    d.update(patch)
    return d


def _v20_rank(i: int, **patch: object) -> dict:
    d = json.loads(json.dumps(V20))
    d["rank_list"][i].update(patch)
    return d


def _v10_server(i: int, **patch: object) -> dict:
    d = json.loads(json.dumps(V10))
    d["server_list"][i].update(patch)
    return d


@pytest.mark.parametrize("data,needle", [
    ([1, 2], "a rank table must be a JSON object, got list"),
    (_v20(rank_count="3"), "rank_count is 3 but rank_list has 2 ranks"),
    (_v20(rank_list=[]), "rank_list must be a non-empty JSON list, but is an empty list"),
    (_v20(rank_list={"rank_id": 0}), "rank_list must be a non-empty JSON list, but is a dict"),
    (_v20(version="1.0"), "rank_list is the layout of version 2.0, but the table says version '1.0'"),
    ({"version": "2.0", "rank_count": "2"}, "a version 2.0 table needs a rank_list"),
    (_v20(rank_list=["r0"], rank_count=1), r"rank_list\[0\] must be a JSON object, got str 'r0'"),
    (_v20_rank(1, rank_id="one"), r"rank_list\[1\].rank_id 'one' is not an integer"),
    (_v20_rank(1, rank_id=0), "rank_id 0 appears twice"),
    (_v20_rank(1, rank_id=5), r"rank_ids \[0, 5\] are not 0..1"),
    (_v20_rank(0, local_id=None), "rank 0 has neither device_id nor local_id"),
    (_v20_rank(0, level_list={"level": 0}), "level_list of rank 0 must be a JSON list"),
    (_v20_rank(1, control_plane="192.168.100.100"), "control_plane of rank 1 must be a JSON object"),
    (_v10_server(1, device={"rank_id": "2"}), "the device list of server 10.0.0.2 must be a JSON list"),
    (_v10_server(0, server_id=""), r"server_list\[0\] has no server_id"),
    (_v10_server(1, device=[{"device_id": "x", "rank_id": "2"}]),
     "device_id of device 0 of server 10.0.0.2 'x' is not an integer"),
    (_v10_server(1, device=[{"device_id": "0"}]), "device 0 of server 10.0.0.2 has no rank_id"),
    ({**V10, "server_count": 1, "server_list": ["10.0.0.1"]}, r"server_list\[0\] must be a JSON object"),
])
def test_rank_table_malformed(data: object, needle: str) -> None:
    with pytest.raises(HcclError, match=needle) as e:
        parse_rank_table(data, "hccl.json")
    assert e.value.code is HcclResult.HCCL_E_PARA
    msg = str(e.value)
    assert "hccl.json" in msg and "\n" not in msg


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
    for bad in ("nan", "inf", "1e20"):  # nan passed and failed in gloo's set_timeout (ValueError), 1e20 overflowed
        with pytest.raises(HcclError, match=f"HCCL_EXEC_TIMEOUT='{bad}' must be a positive number of seconds, "
                                            "at most 1e"):
            read_env({"HCCL_EXEC_TIMEOUT": bad})
    assert read_env({"HCCL_EXEC_TIMEOUT": "1e9"}).exec_timeout == 1e9
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


def test_check_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    from pycann.config import ConfigError
    from pycann.hccl.comm import check_enabled

    monkeypatch.delenv("PYCANN_HCCL_CHECK", raising=False)
    assert check_enabled()
    monkeypatch.setenv("PYCANN_HCCL_CHECK", "0")
    assert not check_enabled()
    monkeypatch.setenv("PYCANN_HCCL_CHECK", "off")
    with pytest.raises(ConfigError, match="PYCANN_HCCL_CHECK='off': expected 0"):
        check_enabled()


def _v10_device(**patch: object) -> dict:
    d = json.loads(json.dumps(V10))
    d["server_list"][1]["device"][1].update(patch)
    return d


def _v20_addr(addr: str, addr_type: str = "IPV4") -> dict:
    d = json.loads(json.dumps(V20_NET_LAYER))
    d["rank_list"][2]["level_list"][0]["rank_addr_list"][0].update(addr=addr, addr_type=addr_type)
    return d


@pytest.mark.parametrize("data,needle", [
    # CANN's rank table docs: device_ip is a regular IPv4 or IPv6 address; device_id is the NPU's
    # physical id, [0, devices of the server - 1]: 8 on a training / A2 server, 16 dies on an A3 (1.2)
    (_v10_device(device_ip="300.1.1.1"), r"device_ip of device 1 \(rank_id 3\) of server 10.0.0.2 '300.1.1.1' is "
                                         "not an IPv4 or IPv6 address"),
    (_v10_device(device_ip="abc"), r"device_ip of device 1 \(rank_id 3\) of server 10.0.0.2 'abc' is not"),
    (_v10_device(device_id="8"), r"device_id 8 of rank 3 \(server 10.0.0.2\) is out of range: a version 1.0 "
                                 r"server has devices 0..7"),
    ({**_v10_device(device_id="16"), "version": "1.2"}, "device_id 16 of rank 3 .* devices 0..15"),
    ({"status": "completed", "group_list": [{"instance_list": [
        {"rank_id": "0", "server_id": "s", "devices": [{"device_id": "0", "device_ip": "1.2.3"}]}]}]},
     r"device_ip of instance 0 \(rank_id 0\) '1.2.3' is not"),
    (_v20_addr("300.1.1.1"), r"level_list\[0\].rank_addr_list\[0\].addr of rank 2 '300.1.1.1' is not an IPv4"),
    (_v20_addr("192.168.1.8", "IPV6"), r"addr of rank 2 '192.168.1.8' is not an IPv6 address"),
    (_v20_rank(1, control_plane={"addr_type": "IPV4", "addr": "abc"}), "control_plane.addr of rank 1 'abc' is not"),
])
def test_rank_table_bad_device_ip_and_id(data: dict, needle: str) -> None:
    with pytest.raises(HcclError, match=needle) as e:
        parse_rank_table(data, "hccl.json")
    assert e.value.code is HcclResult.HCCL_E_PARA and "hccl.json: " in str(e.value)


def test_rank_table_good_addresses_pass() -> None:
    """IPv6 device_ips, an A3 server's device 15, EID (non-IP) 2.0 addresses and a 2.0 rank's
    rack-wide device_id are all valid."""
    t = parse_rank_table({**_v10_device(device_ip="fe80::1", device_id="15"), "version": "1.2"})
    assert (t.ranks[3].device_ip, t.ranks[3].device_id) == ("fe80::1", 15)
    t = parse_rank_table(_v20_addr("000000000000002000100000df001001", "EID"))
    assert t.rank_size == 3
    d = _v20_addr("fe80::2", "IPV6")
    d["rank_list"][0]["device_id"] = 40
    assert parse_rank_table(d).ranks[1].device_id == 40
