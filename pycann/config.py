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
PYCANN_PLAN_POLICY          auto         ``auto``: graphs with convolutions (vision) get a
                                         specialised plan per signature (PYCANN_PLAN_BUILD); other
                                         graphs run the shape-generic plan, and specialise a
                                         signature that comes back while they have shown at most
                                         8 (decoders: a new past length every step stay generic);
                                         ``specialize``: every signature; ``generic``: none
PYCANN_PLAN_BUILD           background   graphs with convolutions under ``auto``: ``background``: a
                                         new signature's call runs the shape-generic plan and its
                                         specialised plan is built after the call on a worker
                                         thread (the next calls of that shape hit it); ``inline``:
                                         the call builds it first
PYCANN_OMP_WAIT             passive      how the OpenMP workers of oneDNN and torch wait between
                                         two kernels: ``passive`` (sleep at once), ``spin``
                                         (libgomp's default, ~300k spins), or a spin count. Applied
                                         before libgomp loads, unless OMP_WAIT_POLICY or
                                         GOMP_SPINCOUNT is set (those win)
==========================  ===========  =========================================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum

from pycann.errors import PycannError

__all__ = ["ConfigError", "PlanBuild", "PlanCacheConfig", "PlanPolicy", "apply_openmp_wait", "openmp_wait_env", "parse_bytes", "plan_cache_config"]


class ConfigError(PycannError, ValueError):
    """An environment knob with a value pycann cannot use."""


class PlanPolicy(str, Enum):
    """Which input signatures get a plan specialised to their concrete shapes."""

    AUTO = "auto"
    SPECIALIZE = "specialize"
    GENERIC = "generic"


class PlanBuild(str, Enum):
    """When a graph with convolutions (``auto``) gets the specialised plan of a new signature."""

    BACKGROUND = "background"  # the call runs the shape-generic plan; the plan is built after it, off the caller
    INLINE = "inline"  # the call builds the plan, then runs it


@dataclass(frozen=True)
class PlanCacheConfig:
    """Bounds and policy of one model's plan cache (``ge.executor.PlanCache``)."""

    max_bytes: int = 512 << 20
    max_plans: int = 256
    policy: PlanPolicy = PlanPolicy.AUTO
    build: PlanBuild = PlanBuild.BACKGROUND


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
    raw_build = os.environ.get("PYCANN_PLAN_BUILD", "").strip().lower() or d.build.value
    try:
        build = PlanBuild(raw_build)
    except ValueError:
        raise ConfigError(f"PYCANN_PLAN_BUILD={raw_build!r}: expected one of "
                          f"{', '.join(b.value for b in PlanBuild)}") from None
    return PlanCacheConfig(max_bytes, _int("PYCANN_PLAN_CACHE_PLANS", d.max_plans, 1), policy, build)


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


def openmp_wait_env() -> dict[str, str]:
    """The OpenMP variables to set before libgomp loads, from ``PYCANN_OMP_WAIT`` (``passive``,
    the default; ``spin``; or a spin count): ``{}`` when the user set ``OMP_WAIT_POLICY`` or
    ``GOMP_SPINCOUNT`` themselves. Raises ``ConfigError`` on another value.

    Why passive: between two oneDNN kernels pycann runs Python (tens of microseconds); libgomp's
    default spin keeps the worker busy through every such gap, which on a shared or oversubscribed
    machine takes the core from the thread doing the work (GPT-2 decode at load 8 on 2 cores:
    ~250 ms of CPU per token spinning vs ~55 ms passive; bench/RESULTS.md)."""
    if os.environ.get("OMP_WAIT_POLICY", "").strip() or os.environ.get("GOMP_SPINCOUNT", "").strip():
        return {}
    raw = os.environ.get("PYCANN_OMP_WAIT", "").strip().lower() or "passive"
    if raw == "passive":
        return {"OMP_WAIT_POLICY": "PASSIVE"}
    if raw == "spin":
        return {}
    if raw.isdigit():
        return {"GOMP_SPINCOUNT": raw}
    raise ConfigError(f"PYCANN_OMP_WAIT={raw!r}: expected passive, spin or a spin count (e.g. 10000)")


def apply_openmp_wait() -> None:
    """Put ``openmp_wait_env()`` into the process environment (``os.environ``: libgomp reads it
    when it loads). Called right before pycann loads libdnnl or imports torch; once libgomp is
    loaded (by pycann or the application) it has no effect on that copy."""
    for k, v in openmp_wait_env().items():
        os.environ.setdefault(k, v)
