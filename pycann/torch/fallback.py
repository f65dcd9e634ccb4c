"""CPU fallback policy and the per-op report, with torch_npu's texts and switch.

torch_npu runs an operator that has no NPU kernel on the CPU and warns once per operator
(``npu_cpu_fallback`` in VariableFallbackKernel.cpp); ``TORCH_NPU_FALLBACK_CPU_DISABLE=1`` turns
that into an error. pycann does the same and also counts every op on the npu device by provider
(``optable.Provider``), so ``report()`` says which ops fell back, how often and what share of the
time on the device they took. The report prints at exit (stderr) when an op fell back, unless
``PYCANN_TORCH_REPORT=0``; ``PYCANN_TORCH_REPORT=1`` prints it even without fallbacks.
"""

from __future__ import annotations

import atexit
import sys
import threading
import warnings
from dataclasses import dataclass

from pycann import config
from pycann.torch.optable import Provider

ENV_DISABLE = "TORCH_NPU_FALLBACK_CPU_DISABLE"
ENV_REPORT = "PYCANN_TORCH_REPORT"


def warning_text(op_name: str) -> str:
    """torch_npu's fallback warning for ATen op ``op_name`` ("aten::xxx")."""
    return (f"Warning: CAUTION: The operator '{op_name}' is not currently supported on the NPU backend "
            "and will fall back to run on the CPU. This may have performance implications. "
            "(function npu_cpu_fallback)")


class FallbackDisabledError(RuntimeError):
    """An op without an npu kernel was called while CPU fallback is disabled."""


@dataclass
class OpStat:
    """Calls and seconds of one ATen op on the npu device."""

    name: str
    provider: Provider
    calls: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class Report:
    """Every op seen on the npu device; ``fallbacks`` are those torch_npu would warn about."""

    ops: tuple[OpStat, ...]
    total_seconds: float

    @property
    def fallbacks(self) -> tuple[OpStat, ...]:
        return tuple(s for s in self.ops if s.provider is Provider.FALLBACK)

    def share(self, op: OpStat | str) -> float:
        """The op's share of all time spent in npu ops (0..1): an ``OpStat`` of ``ops``, or an op's
        name as the table prints it (``"aten::special_i0e.out"``; every provider of that name
        counted). Raises KeyError for a name no npu op had."""
        if isinstance(op, str):
            stats = [s for s in self.ops if s.name == op]
            if not stats:
                raise KeyError(f"no op named {op!r} ran on the npu device (ops: {', '.join(s.name for s in self.ops)})")
            seconds = sum(s.seconds for s in stats)
        else:
            seconds = op.seconds
        return seconds / self.total_seconds if self.total_seconds > 0 else 0.0

    def format(self, only_fallbacks: bool = True) -> str:
        """A table: op, provider, calls, milliseconds, share of npu op time."""
        rows = self.fallbacks if only_fallbacks else self.ops
        title = "CPU fallbacks" if only_fallbacks else "ops on the npu device"
        lines = [f"pycann.torch: {title} ({len(rows)} ops; all npu ops took {self.total_seconds * 1e3:.1f} ms)"]
        if rows:  # (no header over an empty table)
            lines.append(f"  {'op':<48} {'provider':<9} {'calls':>7} {'ms':>10} {'share':>7}")
        for s in sorted(rows, key=lambda s: -s.seconds):
            lines.append(f"  {s.name:<48} {s.provider.value:<9} {s.calls:>7} {s.seconds * 1e3:>10.2f} "
                         f"{100 * self.share(s):>6.1f}%")
        return "\n".join(lines)


_lock = threading.Lock()
_stats: dict[tuple[str, Provider], OpStat] = {}
_warned: set[str] = set()


def fallback_disabled() -> bool:
    """Whether ``TORCH_NPU_FALLBACK_CPU_DISABLE`` forbids CPU fallback (read on every call, as
    torch_npu reads its option, so a test can flip it)."""
    return config.torch_fallback_disabled()


def on_fallback(op_name: str) -> None:
    """Before an op falls back: raise if disabled, else warn once per op."""
    if fallback_disabled():
        raise FallbackDisabledError(
            f"ERR01007 OPS feature not supported. The operator '{op_name}' is not currently supported on "
            f"the NPU backend and {ENV_DISABLE}=1 forbids falling back to the CPU. Unset {ENV_DISABLE} "
            "to run it on the CPU, or avoid the op (pycann.torch.report() lists the ops that fell back).")
    if op_name not in _warned:
        _warned.add(op_name)
        warnings.warn(warning_text(op_name), UserWarning, stacklevel=3)


def stat(op_name: str, provider: Provider) -> OpStat:
    """The counters of ``op_name`` served by ``provider`` (created on first use; the caller
    increments ``calls`` and ``seconds``: the dispatcher keeps them per op)."""
    key = (op_name, provider)
    s = _stats.get(key)
    if s is None:
        with _lock:
            s = _stats.setdefault(key, OpStat(op_name, provider))
    return s


def record(op_name: str, provider: Provider, seconds: float) -> None:
    """Count one call of ``op_name`` served by ``provider``."""
    s = stat(op_name, provider)
    s.calls += 1
    s.seconds += seconds


def report() -> Report:
    """The counts so far (ops with at least one call)."""
    ops = tuple(OpStat(s.name, s.provider, s.calls, s.seconds) for s in list(_stats.values()) if s.calls)
    return Report(ops, sum(s.seconds for s in ops))


def reset() -> None:
    """Zero the counts and forget which ops were warned about."""
    with _lock:
        for s in _stats.values():
            s.calls = 0
            s.seconds = 0.0
        _warned.clear()


def _at_exit() -> None:
    mode = config.torch_report()
    if mode == "0":
        return
    r = report()
    if r.fallbacks or mode == "1":
        print(r.format(only_fallbacks=mode != "1"), file=sys.stderr)


atexit.register(_at_exit)
