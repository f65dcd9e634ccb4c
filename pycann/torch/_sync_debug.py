"""torch.npu.set_sync_debug_mode: which npu calls would synchronize on CUDA, and their report.

``SYNCING`` maps an ATen schema name to a predicate ``(info, args, kwargs) -> bool`` (``info``: the
dispatcher's ``_OpInfo`` of the op, for its argument names); the dispatcher (``_dispatch._kernel``)
asks it, for ops that have one, while ``mode`` is 1 (warn) or 2 (error), and calls ``report``.
"""

from __future__ import annotations

import functools
import sys
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import torch

_NPU = "npu"
_OWN = frozenset({__name__, "pycann.torch._dispatch"})  # modules whose frames a warning skips to reach the caller

mode = 0
"""torch.npu.set_sync_debug_mode's: 0 off, 1 warn, 2 error (``report``)."""


def report(name: str) -> None:
    """torch_npu's / torch.cuda's report of a synchronizing call: a UserWarning naming the caller's
    line (mode 1) or a RuntimeError (mode 2), with their message."""
    if mode == 2:
        raise RuntimeError(f"called a synchronizing NPU operation ({name})")
    frame: Any = sys._getframe(1)
    level = 2  # (level 1 is this function: start at its caller)
    while frame is not None and frame.f_globals.get("__name__") in _OWN:  # (the dispatcher's frames too)
        frame, level = frame.f_back, level + 1
    warnings.warn(f"called a synchronizing NPU operation ({name})", UserWarning, stacklevel=level)


def _arg(info: Any, args: Sequence[Any], kwargs: dict[str, Any], name: str, default: Any = None) -> Any:
    i = info.arg_names.index(name)
    return args[i] if i < len(args) else kwargs.get(name, default)


def _is_npu_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and not x.is_cpu and not x.is_meta


def _blocking_host_copy(src: Any, dst_is_npu: bool, non_blocking: Any) -> bool:
    """A copy between npu and host memory that waits for it (CUDA's memcpy_and_sync)."""
    return not non_blocking and isinstance(src, torch.Tensor) and _is_npu_tensor(src) != dst_is_npu


def _to_copy_syncs(info: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    x = args[0]
    dev = kwargs.get("device")
    to_npu_ = _is_npu_tensor(x) if dev is None else torch.device(dev).type == _NPU
    return _blocking_host_copy(x, to_npu_, kwargs.get("non_blocking"))


def _copy_from_syncs(info: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    return _blocking_host_copy(args[0], _is_npu_tensor(_arg(info, args, kwargs, "dst")),
                               _arg(info, args, kwargs, "non_blocking", False))


def _index_syncs(indices: Any) -> tuple[bool, int]:
    """(an index is a host tensor: copied to the device; the number of bool / uint8 mask indices,
    which become ``nonzero``: a data-dependent size)."""
    host, masks = False, 0
    for t in indices or ():
        if isinstance(t, torch.Tensor):
            host = host or t.is_cpu
            masks += t.dtype in (torch.bool, torch.uint8)
    return host, masks


def _index_get_syncs(info: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    host, masks = _index_syncs(_arg(info, args, kwargs, "indices"))
    return host or masks > 0


def _index_put_syncs(info: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    indices = _arg(info, args, kwargs, "indices")
    host, masks = _index_syncs(indices)
    if host:
        return True
    if not masks:
        return False
    # ATen turns one mask and a one-element CPU value into masked_fill_, which needs no sync: on
    # CUDA ``x[mask] = 1.0`` makes its value a CPU scalar, for the npu PyTorch makes it an npu
    # tensor, so ``_setitem`` marks that call (``x[mask] = y``, y an npu tensor, does sync)
    value = _arg(info, args, kwargs, "values")
    single = sum(isinstance(t, torch.Tensor) for t in indices) == 1
    cpu_scalar = isinstance(value, torch.Tensor) and value.numel() == 1 and (
        value.is_cpu or getattr(_sync_tls, "scalar_value", False))
    return not (single and masks == 1 and cpu_scalar and not _arg(info, args, kwargs, "accumulate", False))


_sync_tls = threading.local()
_setitem_wrapped: list[bool] = []


def watch_setitem() -> None:
    """Mark ``t[index] = <Python number>`` on npu tensors for ``_index_put_syncs`` (installed by
    ``set_sync_debug_mode`` when it turns reporting on; once per process)."""
    if _setitem_wrapped:
        return
    _setitem_wrapped.append(True)
    orig = torch.Tensor.__setitem__

    @functools.wraps(orig)
    def __setitem__(self: torch.Tensor, index: Any, value: Any) -> None:  # noqa: N807 - the method's name
        if not mode or isinstance(value, torch.Tensor) or not isinstance(value, (int, float, complex)):
            return orig(self, index, value)
        _sync_tls.scalar_value = True
        try:
            return orig(self, index, value)  # type: ignore[arg-type]
        finally:
            _sync_tls.scalar_value = False

    torch.Tensor.__setitem__ = __setitem__  # type: ignore[method-assign, assignment]


def _always(info: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    return True


# The calls that synchronize on CUDA, so that torch.npu.set_sync_debug_mode reports them as
# torch.cuda's does (its c10::cuda::memcpy_and_sync / stream_synchronize checks): a value read on
# the host (.item(), bool(t), .tolist() through the copy), blocking copies between npu and host
# memory (.cpu(), .npu(), torch.tensor(..., device="npu"), copy_ across them; non_blocking=True
# ones are not), and ops whose result size depends on the data (nonzero, boolean-mask indexing,
# masked_select, unique, bincount, repeat_interleave without output_size).
SYNCING: dict[str, Any] = {
    "aten::_local_scalar_dense": _always,
    "aten::_to_copy": _to_copy_syncs,
    "aten::_copy_from": _copy_from_syncs,
    "aten::_copy_from_and_resize": _copy_from_syncs,
    "aten::nonzero": _always,
    "aten::masked_select": _always,
    "aten::_unique": _always,
    "aten::_unique2": _always,
    "aten::unique_dim": _always,
    "aten::unique_consecutive": _always,
    "aten::unique_dim_consecutive": _always,
    "aten::bincount": _always,
    "aten::equal": _always,
    "aten::repeat_interleave": lambda info, args, kwargs: (
        isinstance(args[0], torch.Tensor) and kwargs.get("output_size") is None
        and "output_size" in info.arg_names and info.arg_names[0] == "repeats"),
    "aten::index": _index_get_syncs,
    "aten::index_put": _index_put_syncs,
    "aten::index_put_": _index_put_syncs,
    "aten::_index_put_impl_": _index_put_syncs,
}
