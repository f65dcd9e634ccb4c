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
TUNE_BANK_PATH              see meaning  CANN's variable: the folder of AOE's knowledge bank
                                         (``bank.sqlite``, docs/aoe.md) that ``aoe`` writes and
                                         ``atc`` and the executor read; unset:
                                         ``~/.cache/pycann/aoe``. ``--op_bank_path`` (atc, aoe)
                                         wins over it
PYCANN_OMP_WAIT_POLICY      passive      how the OpenMP workers of the oneDNN and torch kernels wait
                                         between parallel regions: ``passive`` (sleep; wins when other
                                         processes are busy: bench/RESULTS.md), ``active`` (spin),
                                         ``brief`` (spin ~3000 rounds, then sleep, as ONNX Runtime's
                                         pool does: ``GOMP_SPINCOUNT``; wins beside niced load, loses
                                         beside a same-priority one: docs/torch.md),
                                         ``inherit`` (leave ``OMP_WAIT_POLICY`` unset). Applied as
                                         ``OMP_WAIT_POLICY`` just before pycann loads an OpenMP
                                         library, unless the user set ``OMP_WAIT_POLICY`` already
PYCANN_PLAN_BUILD           background   graphs with convolutions under ``auto``: ``background``: a
                                         new signature's call runs the shape-generic plan and its
                                         specialised plan is built after the call on a worker
                                         thread (the next calls of that shape hit it); ``inline``:
                                         the call builds it first
PYCANN_HCCL_CHECK           1            ``0``: no per-call signature exchange before HCCL
                                         collectives (saves one small all-gather a call; mismatched
                                         calls are then no longer detected), docs/hccl.md
PYCANN_TORCH_KERNELS        pycann       who computes the ATen ops on torch's npu device that
                                         pycann's op library has (conv, linear, batch norm,
                                         elementwise, activations, pooling, softmax): ``pycann``:
                                         its kernels, bound once per signature (docs/torch.md);
                                         ``host``: torch's CPU kernels on the same host memory
==========================  ===========  =========================================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from pycann.errors import PycannError

__all__ = ["ConfigError", "OMP_WAIT_POLICIES", "PlanBuild", "PlanCacheConfig", "PlanPolicy", "apply_omp_wait_policy",
           "hccl_check", "omp_wait_policy", "parse_bytes", "plan_cache_config", "torch_kernels", "tune_bank_dir"]


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


def hccl_check() -> bool:
    """``PYCANN_HCCL_CHECK``: ``1`` (default, also when unset) or ``0``. Raises ``ConfigError``."""
    raw = os.environ.get("PYCANN_HCCL_CHECK", "").strip()
    if raw not in ("", "0", "1"):
        raise ConfigError(f"PYCANN_HCCL_CHECK={raw!r}: expected 0 (no per-call signature check) or 1")
    return raw != "0"


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


def tune_bank_dir(explicit: str = "") -> Path:
    """The folder of the AOE knowledge bank: ``explicit`` (``--op_bank_path``), else
    ``TUNE_BANK_PATH`` (CANN's priority: option > variable > default), else ``~/.cache/pycann/aoe``.
    Raises ``ConfigError`` when the chosen path exists and is not a folder."""
    raw = explicit.strip() or os.environ.get("TUNE_BANK_PATH", "").strip()
    path = Path(raw).expanduser() if raw else Path.home() / ".cache" / "pycann" / "aoe"
    if path.exists() and not path.is_dir():
        what = "--op_bank_path" if explicit.strip() else "TUNE_BANK_PATH"
        raise ConfigError(f"{what}={raw!r} is a file; the knowledge bank needs a folder (it holds bank.sqlite)")
    return path
#: Accepted values of ``PYCANN_OMP_WAIT_POLICY`` (the first is the default).
OMP_WAIT_POLICIES = ("passive", "active", "brief", "inherit")
#: libgomp's spin rounds before a worker sleeps under ``brief`` (its default is 300000).
BRIEF_SPINCOUNT = 3000


def omp_wait_policy() -> str:
    """``PYCANN_OMP_WAIT_POLICY`` (default ``passive``), lower case. Raises ``ConfigError`` on other values."""
    raw = os.environ.get("PYCANN_OMP_WAIT_POLICY", "").strip().lower() or OMP_WAIT_POLICIES[0]
    if raw not in OMP_WAIT_POLICIES:
        raise ConfigError(f"PYCANN_OMP_WAIT_POLICY={raw!r}: expected one of {', '.join(OMP_WAIT_POLICIES)}")
    return raw


def apply_omp_wait_policy() -> str | None:
    """Set ``OMP_WAIT_POLICY`` from ``PYCANN_OMP_WAIT_POLICY`` unless the user set it; return the value in effect.

    Call it just before loading an OpenMP library (libdnnl's libgomp, torch's bundled one): libgomp reads the
    variable once, when it loads, so a runtime that is loaded already keeps its policy. Spinning workers lose
    badly when other processes keep the cores busy (a spinning thread uses up its CPU share, so the scheduler
    runs the busy neighbour instead while the parallel region waits for that thread at its barrier); ONNX
    Runtime's pool spins briefly, then blocks; ``brief`` does that in libgomp (``GOMP_SPINCOUNT``, returns
    ``"BRIEF"``). Returns None when neither variable is set (``inherit``).
    """
    user = os.environ.get("OMP_WAIT_POLICY", "").strip()
    if user or os.environ.get("GOMP_SPINCOUNT", "").strip():  # the user's own OpenMP settings win
        return user or None
    policy = omp_wait_policy()
    if policy == "inherit":
        return None
    if policy == "brief":  # libgomp's default policy with a short spin (OMP_WAIT_POLICY stays unset)
        os.environ["GOMP_SPINCOUNT"] = str(BRIEF_SPINCOUNT)
        return "BRIEF"
    os.environ["OMP_WAIT_POLICY"] = policy.upper()
    return policy.upper()
def torch_kernels() -> str:
    """``PYCANN_TORCH_KERNELS``: ``"pycann"`` (default) or ``"host"``. Raises ``ConfigError`` on
    another value."""
    raw = os.environ.get("PYCANN_TORCH_KERNELS", "").strip().lower() or "pycann"
    if raw not in ("host", "pycann"):
        raise ConfigError(f"PYCANN_TORCH_KERNELS={raw!r}: expected 'host' (torch's CPU kernels on the npu's "
                          "host memory) or 'pycann' (pycann's op library)")
    return raw


def int8_kernels() -> bool:
    """``PYCANN_INT8_KERNELS``: False when set to 0 / off / false / no (INT8 layers then run their
    reference kernels: dequantise, float op, quantise); True otherwise (docs/amct.md)."""
    return os.environ.get("PYCANN_INT8_KERNELS", "").strip().lower() not in ("0", "off", "false", "no")
