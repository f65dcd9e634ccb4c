"""Typed run-time knobs read from the environment, in one place.

Each knob is a field of a frozen dataclass with its default; ``plan_cache_config()`` reads the
environment once per call (cheap: a model reads it when it loads), so tests may set variables
with ``monkeypatch.setenv`` before loading a model. A bad value raises ``ConfigError`` naming the
variable, the value and what is accepted, never a silent default.

Knobs (docs/dynamic-shapes.md):

==========================  ===========  =========================================================
variable                    default      meaning
==========================  ===========  =========================================================
PYCANN_PLAN_CACHE_BYTES     512M         bytes the specialised plans of one model may hold (arenas,
                                         per-plan packed weights, folded constants); least recently
                                         used plans are evicted beyond it. Suffixes K, M, G (1024s).
PYCANN_PLAN_CACHE_PLANS     256          at most this many plans per model, whatever their size
PYCANN_DEVICE_COUNT         see meaning  devices of the CPU runtime (acl.rt, torch.npu); unset: 1, or
                                         LOCAL_WORLD_SIZE when a launcher (torchrun, hccl-run) set
                                         it, so each local rank can set_device(LOCAL_RANK)
PYCANN_PLAN_POLICY          auto         ``auto``: the first input signature gets a specialised
                                         plan, later new signatures too when the graph has
                                         convolutions (vision), else they run the shape-generic
                                         plan (decoders: a new past length every step);
                                         ``specialize``: every signature; ``generic``: none
PYCANN_TORCH_KERNELS        host         who computes the elementwise / matmul / softmax ATen ops
                                         on torch's npu device that pycann's op library has:
                                         ``host``: torch's CPU kernels on the host memory (faster:
                                         vectorised, threaded); ``pycann``: pycann's op library
                                         through GE's single-op path (docs/torch.md)
==========================  ===========  =========================================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum

from pycann.errors import PycannError

__all__ = ["ConfigError", "PlanCacheConfig", "PlanPolicy", "parse_bytes", "plan_cache_config", "torch_kernels"]


class ConfigError(PycannError, ValueError):
    """An environment knob with a value pycann cannot use."""


class PlanPolicy(str, Enum):
    """Which input signatures get a plan specialised to their concrete shapes."""

    AUTO = "auto"
    SPECIALIZE = "specialize"
    GENERIC = "generic"


@dataclass(frozen=True)
class PlanCacheConfig:
    """Bounds and policy of one model's plan cache (``ge.executor.PlanCache``)."""

    max_bytes: int = 512 << 20
    max_plans: int = 256
    policy: PlanPolicy = PlanPolicy.AUTO


_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


def parse_bytes(text: str, what: str = "value") -> int:
    """``"512M"`` -> 536870912 (units K/M/G in 1024s, optional B/iB). Raises ``ConfigError``."""
    s = text.strip().upper().replace("_", "")
    num = s.rstrip("KMGIB")
    unit = s[len(num):]
    try:
        n = float(num)
    except ValueError:
        n = -1.0
    if unit not in _UNITS or n < 0:
        raise ConfigError(f"{what}={text!r} is not a byte count; use e.g. 536870912, 512M or 2G")
    return int(n * _UNITS[unit])


def _int(name: str, default: int, lo: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        v = int(raw)
    except ValueError:
        v = lo - 1
    if v < lo:
        raise ConfigError(f"{name}={raw!r}: expected an integer >= {lo}")
    return v


def plan_cache_config() -> PlanCacheConfig:
    """The plan-cache knobs from the environment (defaults where unset). Raises ``ConfigError``."""
    d = PlanCacheConfig()
    raw = os.environ.get("PYCANN_PLAN_CACHE_BYTES", "").strip()
    max_bytes = parse_bytes(raw, "PYCANN_PLAN_CACHE_BYTES") if raw else d.max_bytes
    pol = os.environ.get("PYCANN_PLAN_POLICY", "").strip().lower() or d.policy.value
    try:
        policy = PlanPolicy(pol)
    except ValueError:
        raise ConfigError(f"PYCANN_PLAN_POLICY={pol!r}: expected one of "
                          f"{', '.join(p.value for p in PlanPolicy)}") from None
    return PlanCacheConfig(max_bytes, _int("PYCANN_PLAN_CACHE_PLANS", d.max_plans, 1), policy)


def device_count() -> int:
    """``PYCANN_DEVICE_COUNT``, else ``LOCAL_WORLD_SIZE`` (a launcher's local process count), else 1.
    Raises ``ConfigError`` on a value that is not a positive integer."""
    for name in ("PYCANN_DEVICE_COUNT", "LOCAL_WORLD_SIZE"):
        raw = os.environ.get(name, "").strip()
        if raw:
            try:
                n = int(raw)
            except ValueError:
                raise ConfigError(f"{name}={raw!r}: expected a positive integer") from None
            if n < 1:
                raise ConfigError(f"{name}={raw!r}: expected a positive integer")
            return n
    return 1


def torch_kernels() -> str:
    """``PYCANN_TORCH_KERNELS``: ``"host"`` (default) or ``"pycann"``. Raises ``ConfigError`` on
    another value."""
    raw = os.environ.get("PYCANN_TORCH_KERNELS", "host").strip().lower() or "host"
    if raw not in ("host", "pycann"):
        raise ConfigError(f"PYCANN_TORCH_KERNELS={raw!r}: expected 'host' (torch's CPU kernels on the npu's "
                          "host memory) or 'pycann' (pycann's op library)")
    return raw
