"""Rank tables (``RANK_TABLE_FILE``, ``hccl.json``): which rank runs on which server and device.

Formats read (cann-interfaces.md §8; the 2.0 layout as in the rank tables of CANN's HCCL tests,
``hicann/hcomm`` ``test/.../ranktable*.json``):

* ``"version": "1.0"`` (training series / A2): ``server_list[].device[]`` with ``device_id``,
  ``device_ip``, ``rank_id``; ``server_id`` is the server's address or a unique name.
* ``"version": "1.2"`` (A3 super-pods): the same plus ``host_ip``, ``super_device_id``, ports
  and ``super_pod_list``.
* ``"version": "2.0"``: a flat ``rank_list[]`` (``rank_count`` ranks) of ``rank_id``,
  ``device_id`` (else ``local_id``), ``local_id``, ``level_list[]`` (the rank's network at each
  topology level: ``net_layer``/``net_instance_id``, or ``level``/``id`` in earlier drafts,
  with ``rank_addr_list``) and an optional ``control_plane`` (``addr``, ``listen_port``). There
  is no server list: a rank's server is its ``control_plane.addr`` (the host it is reached
  on), else its level-0 instance id, else one implicit local server. A ``"2.0"`` table written
  with ``server_list`` is read as 1.x.
* A global rank table (``server_group_list[].server_list``) and the legacy template
  (``group_list[].instance_list[]`` with ``devices`` and ``rank_id``).

All values may be strings (as CANN writes them) or numbers. The table must be ``completed``,
its ``rank_id``s must be exactly 0..N-1 and ``server_count`` / ``rank_count`` (if given) must
match. Every malformed field raises ``HcclError(HCCL_E_PARA)`` naming the file, the field and
the rank or server it belongs to.
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from pycann import config
from pycann.hccl.constants import HcclResult
from pycann.hccl.errors import HcclError

VERSIONS = ("1.0", "1.1", "1.2", "2.0")
# device_id is the NPU's physical id on its server, [0, devices per server - 1] (CANN's rank table
# docs): an Atlas training / A2 server has 8 NPUs, an A3 server (version 1.2) 16 dies. A 2.0 table has
# no such bound here: its generators write a rack-wide or global device_id (local_id up to 64 and more).
DEVICES_PER_SERVER = {"1.2": 16}
DEFAULT_DEVICES_PER_SERVER = 8
LOCAL_SERVER = "localhost"  # the server of 2.0 ranks that name neither an address nor a level-0 instance


@dataclass(frozen=True)
class RankEntry:
    """One rank: its server and device."""

    rank_id: int
    server_id: str
    device_id: int
    device_ip: str | None = None
    host_ip: str | None = None


@dataclass(frozen=True)
class RankTable:
    """A parsed rank table; ``ranks`` sorted by ``rank_id``."""

    version: str
    ranks: tuple[RankEntry, ...]
    source: str = ""

    @property
    def rank_size(self) -> int:
        return len(self.ranks)

    @property
    def servers(self) -> tuple[str, ...]:
        """Server ids in order of their first rank."""
        seen: dict[str, None] = {}
        for r in self.ranks:
            seen.setdefault(r.server_id, None)
        return tuple(seen)

    def ranks_on(self, server_id: str) -> tuple[RankEntry, ...]:
        return tuple(r for r in self.ranks if r.server_id == server_id)

    def master_address(self, if_ip: str | None = None) -> str:
        """Where rank 0's rendezvous listens: its ``host_ip`` (2.0: ``control_plane.addr``), else a
        ``server_id`` that is an IP address, else ``MASTER_ADDR`` or ``HCCL_IF_IP``, else loopback
        when every rank is on the implicit local server. Raises ``HcclError(HCCL_E_PARA)``."""
        r0 = self.ranks[0]
        if r0.host_ip:
            return r0.host_ip
        if _is_ip(r0.server_id):
            return r0.server_id
        fallback = config.launcher_env().get("MASTER_ADDR") or if_ip
        if fallback:
            return fallback
        if self.servers == (LOCAL_SERVER,):
            return "127.0.0.1"
        raise HcclError(HcclResult.HCCL_E_PARA,
                        f"{self.source}: rank 0's server_id {r0.server_id!r} is not an IP address and the table has "
                        "no host_ip; set host_ip in the table, or MASTER_ADDR / HCCL_IF_IP to rank 0's address")


def _is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s)
        return True
    except ValueError:
        return False


def _ip(v: Any, what: str, where: str, version: int | None = None) -> str | None:
    """``v`` stripped, or None when absent; raises ``HcclError(HCCL_E_PARA)`` unless it is an IPv4
    or IPv6 address (of ``version`` 4 or 6 when given), as CANN requires of a NIC address."""
    s = _str(v)
    if s is None:
        return None
    try:
        ip = ipaddress.ip_address(s)
    except ValueError:
        ip = None
    if ip is None or (version is not None and ip.version != version):
        kind = f"an IPv{version}" if version is not None else "an IPv4 or IPv6"
        raise _bad(where, f"{what} {s!r} is not {kind} address; write the NIC's address, e.g. "
                          f"{'192.168.1.8' if version != 6 else 'fe80::1'} (hccn_tool -i <device_id> -ip -g shows it)")
    return s


def _int(v: Any, what: str, where: str) -> int:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        raise HcclError(HcclResult.HCCL_E_PARA, f"{where}: {what} {v!r} is not an integer") from None


def _bad(where: str, msg: str) -> HcclError:
    return HcclError(HcclResult.HCCL_E_PARA, f"{where}: {msg}")


def _obj(v: Any, what: str, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _bad(where, f"{what} must be a JSON object, got {type(v).__name__} {str(v)[:40]!r}")
    return v


def _list(v: Any, what: str, where: str, *, empty: bool = True) -> list[Any]:
    if not isinstance(v, list) or (not empty and not v):
        got = "an empty list" if isinstance(v, list) else "missing" if v is None else f"a {type(v).__name__}"
        raise _bad(where, f"{what} must be a {'non-empty ' if not empty else ''}JSON list, but is {got}")
    return v


def _str(v: Any) -> str | None:
    return None if v is None or str(v).strip() == "" else str(v).strip()


def _servers_1x(data: dict[str, Any], source: str) -> list[RankEntry]:
    servers: list[Any] = []
    if "server_group_list" in data:
        for i, g in enumerate(_list(data["server_group_list"], "server_group_list", source, empty=False)):
            servers += _list(_obj(g, f"server_group_list[{i}]", source).get("server_list"),
                             f"server_group_list[{i}].server_list", source)
    else:
        servers = _list(data.get("server_list"), "server_list", source, empty=False)
        if "server_count" in data and _int(data["server_count"], "server_count", source) != len(servers):
            raise _bad(source, f"server_count is {data['server_count']} but server_list has {len(servers)} servers")
    entries = []
    for i, s in enumerate(servers):
        s = _obj(s, f"server_list[{i}]", source)
        sid = _str(s.get("server_id"))
        if sid is None:
            raise _bad(source, f"server_list[{i}] has no server_id")
        for j, d in enumerate(_list(s.get("device", []), f"the device list of server {sid}", source)):
            d = _obj(d, f"device {j} of server {sid}", source)
            if "rank_id" not in d:
                raise _bad(source, f"device {j} of server {sid} has no rank_id")
            entries.append(RankEntry(_int(d["rank_id"], f"rank_id of device {j} of server {sid}", source), sid,
                                     _int(d.get("device_id", 0), f"device_id of device {j} of server {sid}", source),
                                     _ip(d.get("device_ip"), f"device_ip of device {j} (rank_id {d['rank_id']}) of "
                                                             f"server {sid}", source),
                                     _str(s.get("host_ip") or s.get("server_ip"))))
    return entries


def _typed_ip(d: dict[str, Any], what: str, where: str) -> str | None:
    """A 2.0 address object's ``addr``, checked as an IP address when its ``addr_type`` says
    ``IPV4`` / ``IPV6`` (other types, e.g. ``EID``, pass as written)."""
    kind = str(d.get("addr_type", "")).strip().upper()
    if kind in ("IPV4", "IPV6"):
        return _ip(d.get("addr"), what, where, 4 if kind == "IPV4" else 6)
    return _str(d.get("addr"))


def _ranks_2x(data: dict[str, Any], source: str) -> list[RankEntry]:
    ranks = _list(data.get("rank_list"), "rank_list", source, empty=False)
    if "rank_count" in data and _int(data["rank_count"], "rank_count", source) != len(ranks):
        raise _bad(source, f"rank_count is {data['rank_count']} but rank_list has {len(ranks)} ranks")
    entries = []
    for i, r in enumerate(ranks):
        r = _obj(r, f"rank_list[{i}]", source)
        if "rank_id" not in r:
            raise _bad(source, f"rank_list[{i}] has no rank_id")
        rid = _int(r["rank_id"], f"rank_list[{i}].rank_id", source)
        dev = r.get("device_id", r.get("local_id"))
        if dev is None:
            raise _bad(source, f"rank {rid} has neither device_id nor local_id")
        levels = [_obj(lv, f"level_list[{k}] of rank {rid}", source)
                  for k, lv in enumerate(_list(r.get("level_list", []), f"level_list of rank {rid}", source))]
        for k, lv in enumerate(levels):  # the device NIC addresses (1.x's device_ip); EID addresses are not IPs
            for a, ad in enumerate(_list(lv.get("rank_addr_list", []), f"level_list[{k}].rank_addr_list of rank {rid}",
                                         source)):
                _typed_ip(_obj(ad, f"level_list[{k}].rank_addr_list[{a}] of rank {rid}", source),
                          f"level_list[{k}].rank_addr_list[{a}].addr of rank {rid}", source)
        level0 = next((lv for lv in levels if str(lv.get("net_layer", lv.get("level", ""))) == "0"), None)
        inst = _str(level0.get("net_instance_id", level0.get("id"))) if level0 is not None else None
        cp = r.get("control_plane")
        addr = _typed_ip(_obj(cp, f"control_plane of rank {rid}", source), f"control_plane.addr of rank {rid}",
                         source) if cp is not None else None
        entries.append(RankEntry(rid, addr or inst or LOCAL_SERVER,
                                 _int(dev, f"device_id/local_id of rank {rid}", source), None, addr))
    return entries


def parse_rank_table(data: Any, source: str = "<rank table>") -> RankTable:
    """A ``RankTable`` from the decoded JSON (any layout of the module docstring). Raises
    ``HcclError(HCCL_E_PARA)`` naming the field, and the rank or server, that is wrong."""
    data = _obj(data, "a rank table", source)
    status = str(data.get("status", "completed"))
    if status != "completed":
        raise _bad(source, f"status is {status!r}; the table is usable once it is 'completed'")
    version = str(data.get("version", "1.0"))
    entries: list[RankEntry] = []
    if "group_list" in data:  # legacy template
        for gi, g in enumerate(_list(data["group_list"], "group_list", source, empty=False)):
            g = _obj(g, f"group_list[{gi}]", source)
            for ii, inst in enumerate(_list(g.get("instance_list", []), f"group_list[{gi}].instance_list", source)):
                inst = _obj(inst, f"instance_list[{ii}]", source)
                devs = _list(inst.get("devices") or [{}], f"devices of instance {ii}", source)
                dev0 = _obj(devs[0], f"devices[0] of instance {ii}", source)
                entries.append(RankEntry(_int(inst.get("rank_id"), f"rank_id of instance {ii}", source),
                                         str(inst.get("server_id", "")),
                                         _int(dev0.get("device_id", 0), f"device_id of instance {ii}", source),
                                         _ip(dev0.get("device_ip"), f"device_ip of instance {ii} (rank_id "
                                                                    f"{inst.get('rank_id')})", source)))
    else:
        if version not in VERSIONS:
            raise _bad(source, f"version {version!r} is not one pycann reads ({', '.join(VERSIONS)})")
        if "rank_list" in data and "server_list" not in data and "server_group_list" not in data:
            if not version.startswith("2."):
                raise _bad(source, f"rank_list is the layout of version 2.0, but the table says version {version!r}")
            entries = _ranks_2x(data, source)
        elif version.startswith("2.") and "server_list" not in data and "server_group_list" not in data:
            raise _bad(source, "a version 2.0 table needs a rank_list (rank_id, device_id/local_id, level_list)")
        else:
            entries = _servers_1x(data, source)
    if not entries:
        raise _bad(source, "the table lists no ranks")
    entries.sort(key=lambda e: e.rank_id)
    ids = [e.rank_id for e in entries]
    if ids != list(range(len(entries))):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        why = f"rank_id {dup[0]} appears twice" if dup else f"rank_ids {ids} are not 0..{len(ids) - 1}"
        raise _bad(source, why)
    seen: dict[tuple[str, int], int] = {}
    limit = None if "rank_list" in data else DEVICES_PER_SERVER.get(version, DEFAULT_DEVICES_PER_SERVER)
    for e in entries:  # one process per device of a server: a device listed twice would get two ranks
        if e.device_id < 0:
            raise _bad(source, f"device_id {e.device_id} of rank {e.rank_id} is negative")
        if limit is not None and e.device_id >= limit:
            raise _bad(source, f"device_id {e.device_id} of rank {e.rank_id} (server {e.server_id}) is out of range: "
                               f"a version {version} server has devices 0..{limit - 1} (ls /dev/davinci* lists them)")
        other = seen.setdefault((e.server_id, e.device_id), e.rank_id)
        if other != e.rank_id:
            raise _bad(source, f"device {e.device_id} of server {e.server_id} is listed for rank {other} and "
                               f"rank {e.rank_id}; each device of a server holds one rank")
    return RankTable(version, tuple(entries), source)


def load_rank_table(path: str | os.PathLike[str] | None = None) -> RankTable:
    """Read the rank table at ``path`` (default ``RANK_TABLE_FILE``). Raises ``HcclError``:
    ``HCCL_E_OPEN_FILE_FAILURE`` for a missing/unreadable file, ``HCCL_E_PARA`` for bad content."""
    p = os.fspath(path) if path is not None else config.launcher_env().get("RANK_TABLE_FILE", "")
    if not p:
        raise HcclError(HcclResult.HCCL_E_PARA, "no rank table: pass a path or set RANK_TABLE_FILE")
    try:
        with open(p, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise HcclError(HcclResult.HCCL_E_OPEN_FILE_FAILURE, f"cannot read rank table {p}: {e.strerror}") from None
    except ValueError as e:
        raise HcclError(HcclResult.HCCL_E_PARA, f"{p} is not valid JSON: {e}") from None
    except RecursionError:  # json's decoder recurses per nesting level: a damaged file escaped as a crash
        raise HcclError(HcclResult.HCCL_E_PARA, f"{p} is not a rank table: its JSON nests deeper than Python's "
                        f"recursion limit ({sys.getrecursionlimit()}); a rank table nests 4 levels") from None
    return parse_rank_table(data, p)
