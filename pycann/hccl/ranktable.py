"""Rank tables (``RANK_TABLE_FILE``, ``hccl.json``): which rank runs on which server and device.

Formats read (cann-interfaces.md §8; Ascend's "ranktable" docs):

* ``"version": "1.0"`` (training series / A2): ``server_list[].device[]`` with ``device_id``,
  ``device_ip``, ``rank_id``; ``server_id`` is the server's address or a unique name.
* ``"version": "1.2"`` (A3 super-pods): the same plus ``host_ip``, ``super_device_id``, ports
  and ``super_pod_list``.
* ``"version": "2.0"``: read with the same ``server_list`` fields (pycann holds no 2.0
  specification of its own; fields it does not use are ignored).
* A global rank table (``server_group_list[].server_list``) and the legacy template
  (``group_list[].instance_list[]`` with ``devices`` and ``rank_id``).

All values may be strings (as CANN writes them) or numbers. The table must be ``completed``,
its ``rank_id``s must be exactly 0..N-1 and ``server_count`` (if given) must match.
"""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import dataclass
from typing import Any

from pycann.hccl.constants import HcclResult
from pycann.hccl.errors import HcclError

VERSIONS = ("1.0", "1.1", "1.2", "2.0")


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
        """Where rank 0's rendezvous listens: its ``host_ip``, else a ``server_id`` that is an IP
        address, else ``MASTER_ADDR`` or ``HCCL_IF_IP``. Raises ``HcclError(HCCL_E_PARA)``."""
        r0 = self.ranks[0]
        if r0.host_ip:
            return r0.host_ip
        if _is_ip(r0.server_id):
            return r0.server_id
        fallback = os.environ.get("MASTER_ADDR") or if_ip
        if fallback:
            return fallback
        raise HcclError(HcclResult.HCCL_E_PARA,
                        f"{self.source}: rank 0's server_id {r0.server_id!r} is not an IP address and the table has "
                        "no host_ip; set host_ip in the table, or MASTER_ADDR / HCCL_IF_IP to rank 0's address")


def _is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s)
        return True
    except ValueError:
        return False


def _int(v: Any, what: str, where: str) -> int:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        raise HcclError(HcclResult.HCCL_E_PARA, f"{where}: {what} {v!r} is not an integer") from None


def _bad(where: str, msg: str) -> HcclError:
    return HcclError(HcclResult.HCCL_E_PARA, f"{where}: {msg}")


def parse_rank_table(data: Any, source: str = "<rank table>") -> RankTable:
    """A ``RankTable`` from the decoded JSON. Raises ``HcclError(HCCL_E_PARA)`` naming the field."""
    if not isinstance(data, dict):
        raise _bad(source, "a rank table is a JSON object")
    status = str(data.get("status", "completed"))
    if status != "completed":
        raise _bad(source, f"status is {status!r}; the table is usable once it is 'completed'")
    version = str(data.get("version", "1.0"))
    entries: list[RankEntry] = []
    if "group_list" in data:  # legacy template
        for g in data["group_list"]:
            for inst in g.get("instance_list", []):
                devs = inst.get("devices") or [{}]
                entries.append(RankEntry(_int(inst.get("rank_id"), "rank_id", source), str(inst.get("server_id", "")),
                                         _int(devs[0].get("device_id", 0), "device_id", source),
                                         devs[0].get("device_ip")))
    else:
        if version not in VERSIONS:
            raise _bad(source, f"version {version!r} is not one pycann reads ({', '.join(VERSIONS)})")
        servers: Any = []
        if "server_group_list" in data:
            for g in data["server_group_list"]:
                servers += list(g.get("server_list", []))
        else:
            servers = data.get("server_list")
            if not isinstance(servers, list) or not servers:
                raise _bad(source, "server_list is missing or empty")
            if "server_count" in data and _int(data["server_count"], "server_count", source) != len(servers):
                raise _bad(source, f"server_count is {data['server_count']} but server_list has {len(servers)} servers")
        for s in servers:
            sid = str(s.get("server_id", ""))
            if not sid:
                raise _bad(source, "a server has no server_id")
            for d in s.get("device", []):
                if "rank_id" not in d:
                    raise _bad(source, f"a device of server {sid} has no rank_id")
                entries.append(RankEntry(_int(d["rank_id"], "rank_id", source), sid,
                                         _int(d.get("device_id", 0), "device_id", source), d.get("device_ip"),
                                         s.get("host_ip") or s.get("server_ip")))
    if not entries:
        raise _bad(source, "the table lists no ranks")
    entries.sort(key=lambda e: e.rank_id)
    ids = [e.rank_id for e in entries]
    if ids != list(range(len(entries))):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        why = f"rank_id {dup[0]} appears twice" if dup else f"rank_ids {ids} are not 0..{len(ids) - 1}"
        raise _bad(source, why)
    return RankTable(version, tuple(entries), source)


def load_rank_table(path: str | os.PathLike[str] | None = None) -> RankTable:
    """Read the rank table at ``path`` (default ``RANK_TABLE_FILE``). Raises ``HcclError``:
    ``HCCL_E_OPEN_FILE_FAILURE`` for a missing/unreadable file, ``HCCL_E_PARA`` for bad content."""
    p = os.fspath(path) if path is not None else os.environ.get("RANK_TABLE_FILE", "")
    if not p:
        raise HcclError(HcclResult.HCCL_E_PARA, "no rank table: pass a path or set RANK_TABLE_FILE")
    try:
        with open(p, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise HcclError(HcclResult.HCCL_E_OPEN_FILE_FAILURE, f"cannot read rank table {p}: {e.strerror}") from None
    except ValueError as e:
        raise HcclError(HcclResult.HCCL_E_PARA, f"{p} is not valid JSON: {e}") from None
    return parse_rank_table(data, p)
