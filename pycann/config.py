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
PYCANN_OMP_WAIT_POLICY      brief        how the OpenMP workers of the oneDNN and torch kernels wait
                                         between parallel regions: ``brief`` (spin 10000 rounds,
                                         ~0.1-0.25 ms, then sleep, as ONNX Runtime's pool does:
                                         ``GOMP_SPINCOUNT``; a sleeping worker costs ~60-100 us of
                                         wake-up per region on a VM, and a ResNet-50 run has 95),
                                         ``passive`` (sleep at once; wins when other processes keep
                                         the cores busy: bench/RESULTS.md, "Threads"), ``active``
                                         (spin), ``inherit`` (leave ``OMP_WAIT_POLICY`` unset).
                                         Applied just before pycann loads an OpenMP library, unless
                                         the user set ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT``
PYCANN_NUM_THREADS          (all CPUs)   threads of torch and of the OpenMP kernels: exported as
                                         ``OMP_NUM_THREADS`` before libgomp loads, unless the user
                                         set that
PYCANN_OMP_BIND             auto         ``auto``: when the OpenMP team is exactly the CPUs this
                                         process may use, its workers are pinned one per CPU and the
                                         calling thread to the first CPU while a plan runs (set back
                                         after): ``kernels/providers/omp_affinity.py``; ``off``: never
                                         (``on``/``1`` mean auto, ``0`` off). The user's ``OMP_PROC_BIND``/
                                         ``OMP_PLACES``/``GOMP_CPU_AFFINITY`` win
PYCANN_KV_CACHE             auto         ``auto``: on the shape-generic plan a KV cache's
                                         ``present = Concat(past, new)`` appends in place to a buffer
                                         ``present`` is a read-only view of (no copy of the past per
                                         decode step: ``kernels/kv_cache.py``); ``off``: Concat as
                                         written (``on``/``1`` mean auto, ``0`` off)
PYCANN_ADAPTIVE_THREADS     on           ``on``: while other processes keep this process's CPUs busy, a
                                         plan runs on fewer OpenMP threads (a plan bound for that
                                         team, built in the background: ``ge/run/contention.py``);
                                         ``off``: always the full team
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

import numbers
import os
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TypeVar

from pycann.errors import PycannError

__all__ = ["ConfigError", "OMP_WAIT_POLICIES", "PlanBuild", "PlanCacheConfig", "PlanPolicy", "adaptive_threads",
           "apply_omp_num_threads",
           "apply_omp_wait_policy",
           "hccl_check", "kv_cache", "omp_bind", "omp_wait_policy", "user_omp_binding", "parse_bytes", "plan_cache_config", "torch_kernels", "tune_bank_dir"]


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


#: The plan-cache knobs' defaults where their variable is unset (the table above).
DEFAULT_PLAN_CACHE_BYTES = 512 << 20
DEFAULT_PLAN_CACHE_PLANS = 256


def _env_plan_cache_bytes() -> int:
    """``PYCANN_PLAN_CACHE_BYTES``, else ``DEFAULT_PLAN_CACHE_BYTES``. Raises ``ConfigError``."""
    raw = os.environ.get("PYCANN_PLAN_CACHE_BYTES", "").strip()
    return parse_bytes(raw, "PYCANN_PLAN_CACHE_BYTES") if raw else DEFAULT_PLAN_CACHE_BYTES


def _env_plan_cache_plans() -> int:
    """``PYCANN_PLAN_CACHE_PLANS``, else ``DEFAULT_PLAN_CACHE_PLANS``. Raises ``ConfigError``."""
    return _int("PYCANN_PLAN_CACHE_PLANS", DEFAULT_PLAN_CACHE_PLANS, 1)


_E = TypeVar("_E", PlanPolicy, PlanBuild)


def _env_enum(name: str, kind: type[_E], default: _E) -> _E:
    """Variable ``name`` as a member of ``kind`` (lower case), else ``default``. Raises ``ConfigError``."""
    raw = os.environ.get(name, "").strip().lower() or default.value
    try:
        return kind(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected one of {', '.join(m.value for m in kind)}") from None


def _env_plan_policy() -> PlanPolicy:
    """``PYCANN_PLAN_POLICY``, else ``auto``. Raises ``ConfigError``."""
    return _env_enum("PYCANN_PLAN_POLICY", PlanPolicy, PlanPolicy.AUTO)


def _env_plan_build() -> PlanBuild:
    """``PYCANN_PLAN_BUILD``, else ``background``. Raises ``ConfigError``."""
    return _env_enum("PYCANN_PLAN_BUILD", PlanBuild, PlanBuild.BACKGROUND)


@dataclass(frozen=True)
class PlanCacheConfig:
    """Bounds and policy of one model's plan cache (``ge.run.plan_cache.PlanCache``).

    A field not given is read from its environment variable when the object is made (the default of
    the table above where that is unset), so ``PlanCacheConfig()`` is ``plan_cache_config()`` and
    ``PlanCacheConfig(max_plans=2)`` keeps ``PYCANN_PLAN_POLICY`` & co. as the environment says: one
    source of truth. (The fields had fixed defaults: a config built with one field ignored the other
    knobs, ``PYCANN_ADAPTIVE_THREADS=off`` included, while a model loaded without one honoured them.)
    Raises ``ConfigError`` for a bad given value, or a bad variable of a field not given."""

    max_bytes: int = field(default_factory=_env_plan_cache_bytes)
    max_plans: int = field(default_factory=_env_plan_cache_plans)
    policy: PlanPolicy = field(default_factory=_env_plan_policy)
    build: PlanBuild = field(default_factory=_env_plan_build)
    # fewer OpenMP threads while other processes keep the CPUs busy (PYCANN_ADAPTIVE_THREADS)
    adaptive_threads: bool = field(default_factory=lambda: adaptive_threads())

    def __post_init__(self) -> None:
        # ``policy``/``build`` as the environment spells them ("generic", "inline") are taken too: the
        # executor compares members by identity, so a plain "background" ran every build inline and
        # "generic" failed at the first call with an AttributeError
        for name, kind in (("policy", PlanPolicy), ("build", PlanBuild)):
            value = getattr(self, name)
            if isinstance(value, kind):
                continue
            try:
                member = kind(value.strip().lower() if isinstance(value, str) else value)
            except ValueError:
                raise ConfigError(f"PlanCacheConfig({name}={value!r}): expected one of "
                                  f"{', '.join(m.value for m in kind)} (or {kind.__name__})") from None
            object.__setattr__(self, name, member)
        # the bounds: a byte count as the environment spells it ("64K") is taken too; anything else that
        # is not a count (a float, a negative value) is refused here rather than failing later (a "64K"
        # string ran until the summary divided it: TypeError; evictions would have compared it)
        mb = self.max_bytes
        if isinstance(mb, str):
            object.__setattr__(self, "max_bytes", parse_bytes(mb, "PlanCacheConfig(max_bytes)"))
        elif isinstance(mb, bool) or not isinstance(mb, numbers.Integral) or mb < 0:
            raise ConfigError(f"PlanCacheConfig(max_bytes={mb!r}): expected a byte count >= 0 (an int or e.g. '512M')")
        else:
            object.__setattr__(self, "max_bytes", int(mb))
        mp = self.max_plans
        if isinstance(mp, bool) or not isinstance(mp, numbers.Integral) or mp < 1:
            raise ConfigError(f"PlanCacheConfig(max_plans={mp!r}): expected an integer >= 1")
        object.__setattr__(self, "max_plans", int(mp))
        # adaptive_threads as PYCANN_ADAPTIVE_THREADS spells it ("off") too: a plain "off" is truthy, and
        # turned the governor on
        at = self.adaptive_threads
        if isinstance(at, str) and at.strip().lower() in ("on", "off", "1", "0"):
            object.__setattr__(self, "adaptive_threads", at.strip().lower() in ("on", "1"))
        elif not isinstance(at, bool):
            raise ConfigError(f"PlanCacheConfig(adaptive_threads={at!r}): expected True or False (or 'on'/'off')")


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
    return PlanCacheConfig()


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
    # resolved once per (path, HOME): compiles ask once per conv and matmul (ge/compile/tuned.py), and
    # each resolution stats the folder (~65 us a call in a VM: 8 ms of DenseNet-121's 110 ms compile).
    # A folder replaced by a file later fails at the bank's first query instead (``BankError``)
    key = (raw, os.environ.get("HOME", ""))
    hit = _BANK_DIRS.get(key)
    if hit is not None:
        return hit
    path = Path(raw).expanduser() if raw else Path.home() / ".cache" / "pycann" / "aoe"
    if path.exists() and not path.is_dir():
        what = "--op_bank_path" if explicit.strip() else "TUNE_BANK_PATH"
        raise ConfigError(f"{what}={raw!r} is a file; the knowledge bank needs a folder (it holds bank.sqlite)")
    _BANK_DIRS[key] = path
    return path


_BANK_DIRS: dict[tuple[str, str], Path] = {}  # (the chosen path's text, HOME) -> tune_bank_dir's answer


#: Accepted names in ``PYCANN_PROVIDERS``: the kernel providers (``kernels.providers.PROVIDERS``, which a
#: test holds to this list; this module imports nothing of pycann's).
PROVIDER_NAMES = ("numpy", "onednn", "torch")
#: Accepted values of ``PYCANN_OMP_WAIT_POLICY`` (the first is the default).
OMP_WAIT_POLICIES = ("brief", "passive", "active", "inherit")
#: libgomp's spin rounds before a worker sleeps under ``brief`` (its default is 300000). One round is a
#: PAUSE, whose cost varies by CPU: ~24 ns on Zen 5, ~8-10 ns on the AMX Xeon of the twenty-seventh
#: session (10000 rounds spun 80-160 us there, 2000 only 15-20 us). The spin must outlast the gaps between
#: a plan's parallel regions (the Python steps between two kernels) and a region's own imbalance: a worker
#: that finishes its half of a GEMV early waits at the barrier, and if it sleeps there the next region pays
#: a VM wake-up (60-150 us). At 2000 rounds on that Xeon nearly every region paid one (a 768x3072 GEMV 310
#: us back to back against 187 spinning; a LayerNorm after it 112 us against 10), and 10000 gave ResNet-50
#: 35.4 -> 30.6 ms, MobileNetV2 4.8 -> 4.3, GPT-2 decode 1.39x -> 1.26x ORT, with latency beside one busy
#: process unchanged (the thread governor, ``ge/run/contention.py``, runs a one-thread plan there, whose
#: worker has nothing to spin for); bench/RESULTS.md, "A spin that outlasts a region's imbalance". Before the
#: governor existed, 10000 rounds beside a busy process cost ResNet-50 91 ms against 49-58 at 2000 ("Threads"):
#: that is still what a process pays with ``PYCANN_ADAPTIVE_THREADS=off``, where ``passive`` is the choice.
BRIEF_SPINCOUNT = 10000


def omp_wait_policy() -> str:
    """``PYCANN_OMP_WAIT_POLICY`` (default ``brief``), lower case. Raises ``ConfigError`` on other values."""
    raw = os.environ.get("PYCANN_OMP_WAIT_POLICY", "").strip().lower() or OMP_WAIT_POLICIES[0]
    if raw not in OMP_WAIT_POLICIES:
        raise ConfigError(f"PYCANN_OMP_WAIT_POLICY={raw!r}: expected one of {', '.join(OMP_WAIT_POLICIES)}")
    return raw


def user_omp_wait_policy() -> bool:
    """The user set ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` themselves (then pycann never changes either)."""
    return bool(os.environ.get("OMP_WAIT_POLICY", "").strip() or os.environ.get("GOMP_SPINCOUNT", "").strip())


def apply_omp_wait_policy() -> str | None:
    """Set ``OMP_WAIT_POLICY`` from ``PYCANN_OMP_WAIT_POLICY`` unless the user set it; return the value in effect.

    Call it just before loading an OpenMP library (libdnnl's libgomp, torch's bundled one): libgomp reads the
    variable once, when it loads, so a runtime that is loaded already keeps its policy. Spinning workers lose
    badly when other processes keep the cores busy (a spinning thread uses up its CPU share, so the scheduler
    runs the busy neighbour instead while the parallel region waits for that thread at its barrier); ONNX
    Runtime's pool spins briefly, then blocks; ``brief`` does that in libgomp (``GOMP_SPINCOUNT``, returns
    ``"BRIEF"``). Returns None when neither variable is set (``inherit``). Applies
    ``apply_omp_num_threads`` first (libgomp reads ``OMP_NUM_THREADS`` at the same moment).
    """
    apply_omp_num_threads()
    if user_omp_wait_policy():  # the user's own OpenMP settings win
        return os.environ.get("OMP_WAIT_POLICY", "").strip() or None
    policy = omp_wait_policy()
    if policy == "inherit":
        return None
    if policy == "brief":  # libgomp's default policy with a short spin (OMP_WAIT_POLICY stays unset)
        os.environ["GOMP_SPINCOUNT"] = str(BRIEF_SPINCOUNT)
        return "BRIEF"
    os.environ["OMP_WAIT_POLICY"] = policy.upper()
    return policy.upper()

# ------------------------------------------------------------------ the other knobs, one function each
# (read on every call, so tests may flip them with monkeypatch.setenv; each docstring documents its knob)


def _env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def soc_version(default: str) -> str:
    """``PYCANN_SOC_VERSION``: the SoC pycann models (acl, torch.npu, the CPU runtime), else ``default``."""
    return _env("PYCANN_SOC_VERSION", default)


def device_memory() -> int | None:
    """``PYCANN_DEVICE_MEMORY`` (bytes, suffix K/M/G as 1024s, e.g. ``8G``), or None when unset."""
    raw = _env("PYCANN_DEVICE_MEMORY").strip().upper()
    if not raw:
        return None
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(raw[-1], 1)
    return int(float(raw.rstrip("KMG")) * mult)


def keep_freed_memory() -> bool:
    """``PYCANN_KEEP_FREED_MEMORY`` (default on): ``0``/``false``/``no`` leaves glibc's malloc
    trimming as it is (runtime/host_allocator.py)."""
    return _env("PYCANN_KEEP_FREED_MEMORY", "1").strip() not in ("0", "false", "no")


def providers_allowed() -> set[str] | None:
    """``PYCANN_PROVIDERS``: the kernel providers allowed (comma-separated; numpy always), or None (all).
    Raises ``ConfigError`` for a name that is no provider (a misspelt one left numpy alone, silently)."""
    raw = _env("PYCANN_PROVIDERS").strip()
    if not raw:
        return None
    names = {p.strip().lower() for p in raw.split(",") if p.strip()}  # (any case, as the other knobs)
    unknown = sorted(names - set(PROVIDER_NAMES))
    if unknown:
        raise ConfigError(f"PYCANN_PROVIDERS={raw!r}: unknown provider {', '.join(repr(u) for u in unknown)}; "
                          f"expected a comma-separated list of {', '.join(PROVIDER_NAMES)}")
    return names | {"numpy"}


def kernel_selection() -> str:
    """``PYCANN_KERNEL_SELECTION``: ``static``, ``measure`` or ``off`` ('' when unset; the compile
    option ``kernel_selection`` wins, docs/kernels.md). Raises ``ConfigError`` for another value (a
    misspelt mode compiled with the static table, silently)."""
    raw = _env("PYCANN_KERNEL_SELECTION").strip()
    mode = raw.lower()  # (any case, as the other knobs)
    if mode not in ("", "static", "measure", "off"):
        raise ConfigError(f"PYCANN_KERNEL_SELECTION={raw!r}: expected one of static, measure, off")
    return mode


def nan_guard() -> bool:
    """``PYCANN_NAN_GUARD`` (default 1): ``0`` drops the operand checks before fused activations.
    Raises ``ConfigError`` for another value."""
    raw = _env("PYCANN_NAN_GUARD", "1").strip()
    if raw not in ("0", "1", ""):
        raise ConfigError(f"PYCANN_NAN_GUARD={raw!r}: expected 1 (check operands before fused activations, the "
                          "default) or 0 (no checks)")
    return raw != "0"


def num_threads() -> int | None:
    """``PYCANN_NUM_THREADS``: the threads pycann gives torch and its OpenMP kernels (``apply_omp_num_threads``),
    a positive integer; None when unset. Raises ``ConfigError`` for another value."""
    raw = _env("PYCANN_NUM_THREADS").strip()
    if not raw:
        return None
    # (isdigit alone: '²' passes, int() refuses it; libgomp refuses a count past its own limit and runs on)
    if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) <= 1 << 16:
        raise ConfigError(f"PYCANN_NUM_THREADS={raw!r}: expected a positive thread count, e.g. 2 (unset: every CPU "
                          "this process may run on)")
    return int(raw)


def apply_omp_num_threads() -> int | None:
    """Export ``PYCANN_NUM_THREADS`` as ``OMP_NUM_THREADS`` unless the user set ``OMP_NUM_THREADS``; return the
    OpenMP thread count now in the environment (None: neither is set, libgomp uses every CPU it may run on).

    libgomp reads ``OMP_NUM_THREADS`` once, when it loads, as the default team size of every thread; oneDNN
    fixes a primitive's threads from it when the primitive is created (on the plan-builder thread too), so
    ``PYCANN_NUM_THREADS`` must reach it before pycann loads libdnnl (``apply_omp_wait_policy`` calls this).
    Without it, ``PYCANN_NUM_THREADS=1`` held torch to one thread but GE's oneDNN kernels still ran on all.
    """
    user = os.environ.get("OMP_NUM_THREADS", "").strip()
    if user:
        return int(user) if user.isdigit() else None
    n = num_threads()
    if n is not None:
        os.environ["OMP_NUM_THREADS"] = str(n)
    return n


def user_omp_binding() -> bool:
    """The user set ``OMP_PROC_BIND``, ``OMP_PLACES`` or ``GOMP_CPU_AFFINITY`` (then libgomp binds as they
    said and pycann never pins its team: ``kernels/providers/omp_affinity.py``)."""
    return any(os.environ.get(v, "").strip() for v in ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"))


def _auto_or_off(name: str, auto_means: str, off_means: str) -> str:
    """An ``auto|off`` knob: ``auto`` when unset, ``auto``/``on``/``1``; ``off`` for ``off``/``0``;
    ``ConfigError`` naming the variable and both meanings otherwise."""
    raw = _env(name).strip().lower()
    if raw not in ("", "auto", "off", "on", "1", "0"):
        raise ConfigError(f"{name}={raw!r}: expected auto ({auto_means}; also on or 1) or off ({off_means}; also 0)")
    return "off" if raw in ("off", "0") else "auto"


def omp_bind() -> str:
    """``PYCANN_OMP_BIND``: ``auto`` (default, also when unset; ``on`` and ``1`` too) or ``off`` (``0``).
    Raises ``ConfigError``; a model reads it when it loads (``ge/run/executor.Executor``)."""
    return _auto_or_off("PYCANN_OMP_BIND", "pin the OpenMP team while a plan runs, when it is exactly this "
                        "process's CPUs", "never pin")


def kv_cache() -> str:
    """``PYCANN_KV_CACHE``: ``auto`` (default, also when unset; ``on`` and ``1`` too) or ``off`` (``0``).
    Raises ``ConfigError``; read when a model builds its shape-generic plan (``ge/run/executor``)."""
    return _auto_or_off("PYCANN_KV_CACHE", "a KV cache's Concat appends in place to a buffer its present output "
                        "is a view of", "Concat copies")


def adaptive_threads() -> bool:
    """``PYCANN_ADAPTIVE_THREADS``: ``on`` (default, also when unset) or ``off``. Raises ``ConfigError``."""
    raw = _env("PYCANN_ADAPTIVE_THREADS").strip().lower()
    if raw not in ("", "on", "off", "1", "0"):
        raise ConfigError(f"PYCANN_ADAPTIVE_THREADS={raw!r}: expected on (fewer threads while other processes "
                          "keep the CPUs busy) or off")
    return raw not in ("off", "0")


def num_threads_set() -> bool:
    """Whether ``PYCANN_NUM_THREADS`` is set at all (then torch's pool is always resized)."""
    return bool(_env("PYCANN_NUM_THREADS").strip())


def dnnl_lib() -> str:
    """``PYCANN_DNNL_LIB``: a libdnnl.so.3 to load instead of the onednn-cpu-gomp wheel's ('' unset)."""
    return _env("PYCANN_DNNL_LIB").strip()


def dnnl2_lib() -> str:
    """``PYCANN_DNNL2_LIB``: oneDNN v2's libdnnl.so.2 for the Winograd convolutions ('' unset)."""
    return _env("PYCANN_DNNL2_LIB").strip()


def cache_dir() -> Path:
    """``PYCANN_CACHE``: pycann's download cache (oneDNN v2), default ``~/.cache/pycann``."""
    return Path(_env("PYCANN_CACHE").strip() or Path.home() / ".cache" / "pycann")


def proto_cache_dir() -> Path:
    """``PYCANN_CACHE_DIR``/proto: where the Caffe importer compiles its .proto (default under ~/.cache/pycann)."""
    return Path(_env("PYCANN_CACHE_DIR") or Path.home() / ".cache" / "pycann") / "proto"


def model_dir() -> Path:
    """``PYCANN_MODEL_DIR``: the model cache of the tools (default ``~/.cache/pycann/models``)."""
    return Path(_env("PYCANN_MODEL_DIR") or Path.home() / ".cache" / "pycann" / "models")


def custom_opp_path() -> str:
    """``ASCEND_CUSTOM_OPP_PATH`` (CANN's): vendor folders of custom Ascend C ops, ``os.pathsep``-separated."""
    return _env("ASCEND_CUSTOM_OPP_PATH")


def custom_op_soc() -> str:
    """``PYCANN_CUSTOM_OP_SOC``: the SoC the twin runs custom kernels as (default Ascend910B1)."""
    return _env("PYCANN_CUSTOM_OP_SOC", "Ascend910B1")


@dataclass(frozen=True)
class GraphDump:
    """CANN's graph dump variables: ``DUMP_GE_GRAPH`` (1-3, '' off), ``DUMP_GRAPH_LEVEL`` (default 2),
    ``DUMP_GRAPH_PATH`` (default: the working directory)."""

    mode: str
    level: str
    path: str


def graph_dump() -> GraphDump:
    """The graph dump variables, stripped (no validation: ``ge/compile/export.py`` reports bad values)."""
    return GraphDump(_env("DUMP_GE_GRAPH").strip(), _env("DUMP_GRAPH_LEVEL", "2").strip(),
                     _env("DUMP_GRAPH_PATH") or os.getcwd())


def peak_overrides() -> tuple[str | None, str | None]:
    """(``PYCANN_PEAK_GFLOPS``, ``PYCANN_PEAK_GBPS``) as given (None unset): the profiler's roofline peaks."""
    return os.environ.get("PYCANN_PEAK_GFLOPS"), os.environ.get("PYCANN_PEAK_GBPS")


@dataclass(frozen=True)
class ProfileEnv:
    """What ``msprof`` asks a profiled process for: output folder (``PYCANN_PROFILE_DIR``, '' none),
    host API events (``PYCANN_PROFILE_ASCENDCL``), chart (``PYCANN_PROFILE_CHART``), no summary
    on stderr (``PYCANN_PROFILE_QUIET``)."""

    out: str
    api: bool
    chart: bool
    quiet: bool


def profile_env() -> ProfileEnv:
    """The profiler variables (``pycann/profiler/session.py``)."""
    return ProfileEnv(_env("PYCANN_PROFILE_DIR"), _env("PYCANN_PROFILE_ASCENDCL", "on") != "off",
                      _env("PYCANN_PROFILE_CHART", "on") != "off", bool(_env("PYCANN_PROFILE_QUIET")))


def slog_to_stdout() -> bool:
    """``ASCEND_SLOG_PRINT_TO_STDOUT=1`` (CANN's): ACL errors printed on stdout."""
    return _env("ASCEND_SLOG_PRINT_TO_STDOUT") == "1"


def torch_fallback_disabled() -> bool:
    """``TORCH_NPU_FALLBACK_CPU_DISABLE`` (torch_npu's): ``1``/``true``/``on`` forbids CPU fallback."""
    return _env("TORCH_NPU_FALLBACK_CPU_DISABLE", "0").strip().lower() in ("1", "true", "on")


def torch_report() -> str:
    """``PYCANN_TORCH_REPORT``: the torch adaptor's exit report mode ('' default, ``0`` off)."""
    return _env("PYCANN_TORCH_REPORT").strip()


def transfer_to_npu() -> bool:
    """``TORCH_TRANSFER_TO_NPU=1`` (torch_npu's): ``import pycann.torch`` maps ``cuda`` calls to ``npu``."""
    return _env("TORCH_TRANSFER_TO_NPU", "0").strip() == "1"


def flag(name: str) -> bool:
    """A boolean switch variable (set and not blank): HCCL's and torch's on/off knobs."""
    return bool(_env(name).strip())


def launcher_env() -> dict[str, str]:
    """The distributed launcher's variables a process may have been started with (``RANK``,
    ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``RANK_TABLE_FILE``, ``SERVER_ID``,
    ``HCCL_IF_IP``, ``HCCL_SOCKET_IFNAME``, ``GLOO_SOCKET_IFNAME``), those that are set."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "RANK_TABLE_FILE", "SERVER_ID", "HCCL_IF_IP",
             "HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
    return {n: os.environ[n] for n in names if n in os.environ}


def environment() -> dict[str, str]:
    """A copy of the whole environment, for building a child process's (tools that launch
    processes: msprof, hccl-run, pycann-run) or for parsers of a whole family of variables
    (``hccl/env.py``). Knobs themselves get a function above."""
    return dict(os.environ)


def set_environ(name: str, value: str | None) -> None:
    """Set (or with None remove) a variable of this process's environment, for what it starts or
    loads later (pycann-run's ``PYTHONPATH``, gloo's ``GLOO_SOCKET_IFNAME``)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


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
