"""HCCL's environment variables, read once into a typed ``HcclEnv`` (cann-interfaces.md §8).

CANN's launchers set ``RANK_TABLE_FILE``, ``RANK_ID``, ``RANK_SIZE`` and ``DEVICE_ID``; HCCL reads
``HCCL_CONNECT_TIMEOUT`` (seconds to build the communicator, default 120), ``HCCL_EXEC_TIMEOUT``
(seconds a collective may wait for its peers, default 1800), ``HCCL_IF_IP`` (the host address
the root listens on), ``HCCL_IF_BASE_PORT`` (first port, default 60000) and the whitelist pair
``HCCL_WHITELIST_DISABLE`` / ``HCCL_WHITELIST_FILE``. CANN clamps the timeouts to
[120, 7200] s and [68, 17340] s; pycann accepts any positive number of seconds so that tests
and small jobs can fail fast, and says so in docs/hccl.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pycann import config
from pycann.hccl.constants import HcclResult
from pycann.hccl.errors import HcclError


@dataclass(frozen=True)
class HcclEnv:
    """The HCCL-related environment of this process."""

    rank_table_file: str | None = None
    rank_id: int | None = None
    rank_size: int | None = None
    device_id: int | None = None
    connect_timeout: float = 120.0
    exec_timeout: float | None = None  # None: the caller's (torch's) timeout
    if_ip: str | None = None
    if_base_port: int = 60000
    whitelist_disable: bool = True
    whitelist_file: str | None = None


def _int(env: Mapping[str, str], name: str) -> int | None:
    v = env.get(name, "").strip()
    if not v:
        return None
    try:
        return int(v)
    except ValueError:
        raise HcclError(HcclResult.HCCL_E_PARA, f"{name}={v!r} is not an integer") from None


MAX_SECONDS = 1e9  # ~31 years; 1e20 overflowed torch's conversion to C++ milliseconds, nan raised there too


def _seconds(env: Mapping[str, str], name: str) -> float | None:
    v = env.get(name, "").strip()
    if not v:
        return None
    try:
        s = float(v)
    except ValueError:
        raise HcclError(HcclResult.HCCL_E_PARA, f"{name}={v!r} is not a number of seconds") from None
    # (nan passed `s <= 0`, and it and 1e20 failed later, in gloo's set_timeout: ValueError / OverflowError)
    if not 0 < s <= MAX_SECONDS:
        raise HcclError(HcclResult.HCCL_E_PARA, f"{name}={v!r} must be a positive number of seconds, at most "
                        f"{MAX_SECONDS:g} (CANN clamps it to far less)")
    return s


def read_env(env: Mapping[str, str] | None = None) -> HcclEnv:
    """``HcclEnv`` from ``env`` (default ``os.environ``). Raises ``HcclError(HCCL_E_PARA)`` for a
    value that is not a number, naming the variable."""
    e = config.environment() if env is None else env
    wl = e.get("HCCL_WHITELIST_DISABLE", "1").strip()
    if wl not in ("0", "1"):
        raise HcclError(HcclResult.HCCL_E_PARA, f"HCCL_WHITELIST_DISABLE={wl!r} must be 0 or 1")
    return HcclEnv(
        rank_table_file=e.get("RANK_TABLE_FILE") or None,
        rank_id=_int(e, "RANK_ID"),
        rank_size=_int(e, "RANK_SIZE"),
        device_id=_int(e, "DEVICE_ID"),
        connect_timeout=_seconds(e, "HCCL_CONNECT_TIMEOUT") or 120.0,
        exec_timeout=_seconds(e, "HCCL_EXEC_TIMEOUT"),
        if_ip=e.get("HCCL_IF_IP") or None,
        if_base_port=_int(e, "HCCL_IF_BASE_PORT") or 60000,
        whitelist_disable=wl == "1",
        whitelist_file=e.get("HCCL_WHITELIST_FILE") or None,
    )


def whitelist(env: HcclEnv) -> frozenset[str] | None:
    """The allowed host addresses when the whitelist is on (``HCCL_WHITELIST_DISABLE=0``), else
    ``None``. The file is HCCL's JSON ``{"host_ip": ["10.0.0.1", ...]}``. Raises ``HcclError``."""
    if env.whitelist_disable:
        return None
    import json

    if not env.whitelist_file:
        raise HcclError(HcclResult.HCCL_E_PARA,
                        "HCCL_WHITELIST_DISABLE=0 needs HCCL_WHITELIST_FILE (a JSON file {\"host_ip\": [...]})")
    try:
        with open(env.whitelist_file, encoding="utf-8") as f:
            data = json.load(f)
        ips = data["host_ip"]
    except (OSError, ValueError, KeyError, TypeError) as ex:
        raise HcclError(HcclResult.HCCL_E_OPEN_FILE_FAILURE,
                        f"HCCL_WHITELIST_FILE={env.whitelist_file}: {ex} (expected {{\"host_ip\": [...]}})") from None
    return frozenset(str(ip) for ip in ips)
