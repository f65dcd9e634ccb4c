"""npu memory statistics (torch.npu.memory_allocated & co, the torch.cuda names).

pycann's npu memory is host memory: every buffer an npu op allocates is counted when it is made
and when its last tensor frees it (``pycann.torch._alias.COUNTERS``), so ``memory_allocated`` is
exact for memory made by npu ops; memory *reserved* equals allocated (torch's CPU allocator
keeps no cache for pycann to report).
"""

from __future__ import annotations

from typing import Any

import torch

from pycann.torch._alias import COUNTERS


def memory_allocated(device: int | str | torch.device | None = None) -> int:
    """Bytes held by live npu tensors (all devices share host memory)."""
    return COUNTERS.allocated


def max_memory_allocated(device: int | str | torch.device | None = None) -> int:
    """The peak of ``memory_allocated`` since start or ``reset_peak_memory_stats``."""
    return COUNTERS.peak


def memory_reserved(device: int | str | torch.device | None = None) -> int:
    """Equal to ``memory_allocated`` (no caching allocator in between)."""
    return COUNTERS.allocated


def max_memory_reserved(device: int | str | torch.device | None = None) -> int:
    """Equal to ``max_memory_allocated``."""
    return COUNTERS.peak


memory_cached = memory_reserved
max_memory_cached = max_memory_reserved


def reset_peak_memory_stats(device: int | str | torch.device | None = None) -> None:
    """Restart the peak from the current allocation."""
    COUNTERS.peak = COUNTERS.allocated


reset_max_memory_allocated = reset_peak_memory_stats


def reset_accumulated_memory_stats(device: int | str | torch.device | None = None) -> None:
    """Zero the allocation / free counts."""
    COUNTERS.allocations = 0
    COUNTERS.frees = 0


def memory_stats(device: int | str | torch.device | None = None) -> dict[str, Any]:
    """torch.cuda.memory_stats' main keys ("allocated_bytes.all.current", ...)."""
    return {
        "allocated_bytes.all.current": COUNTERS.allocated,
        "allocated_bytes.all.peak": COUNTERS.peak,
        "reserved_bytes.all.current": COUNTERS.allocated,
        "reserved_bytes.all.peak": COUNTERS.peak,
        "allocation.all.allocated": COUNTERS.allocations,
        "allocation.all.freed": COUNTERS.frees,
        "num_alloc_retries": 0,
        "num_ooms": 0,
    }


def memory_summary(device: int | str | torch.device | None = None, abbreviated: bool = False) -> str:
    """A short text summary of ``memory_stats``."""
    s = memory_stats(device)
    return "\n".join(f"{k:<32} {v}" for k, v in s.items())


def empty_cache() -> None:
    """Release what the npu device caches: the eager kernels' bound constants (packed conv and
    linear weights, folded batch-norm constants: ``pycann.torch._pycann_ops``) and the fast path's
    recorded calls (``_fastpath``). Tensors themselves are not cached (their memory goes when they
    die). Also the way to make a weight written through an alias PyTorch does not version visible
    to the next call (``p.data.mul_(...)``, a numpy view of the storage): a bound constant is
    otherwise kept while the tensor's ``_version`` and data pointer stay the same (docs/torch.md)."""
    from pycann.torch import _pycann_ops

    _pycann_ops.clear()


def mem_get_info(device: int | str | torch.device | None = None) -> tuple[int, int]:
    """(free, total) bytes of the host memory the npu device computes in."""
    from pycann.runtime.memory import physical_memory

    total = physical_memory()
    return max(0, total - COUNTERS.allocated), total


_fractions: dict[int, float] = {}


def _index(device: int | str | torch.device | None) -> int:
    from pycann.torch import npu

    return npu._device_index(device)


def set_per_process_memory_fraction(fraction: float, device: int | str | torch.device | None = None) -> None:
    """Kept for ``get_per_process_memory_fraction``; host memory is not partitioned, so it limits
    nothing (raises for a bad fraction)."""
    if not 0.0 <= float(fraction) <= 1.0:
        raise ValueError(f"set_per_process_memory_fraction: fraction {fraction} is not in [0, 1]")
    _fractions[_index(device)] = float(fraction)


def get_per_process_memory_fraction(device: int | str | torch.device | None = None) -> float:
    """The fraction ``set_per_process_memory_fraction`` set for the device (1.0 before any)."""
    return _fractions.get(_index(device), 1.0)


def reset_max_memory_cached(device: int | str | torch.device | None = None) -> None:
    """torch.cuda's older name of ``reset_peak_memory_stats`` (torch_npu keeps it)."""
    reset_peak_memory_stats(device)


def get_allocator_backend() -> str:
    """``"native"``: the npu's memory comes from torch's own (CPU) allocator, no pluggable one."""
    return "native"


def ipc_collect() -> None:
    """Nothing to collect: npu tensors are never shared with other processes through IPC handles."""
