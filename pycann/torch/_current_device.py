"""``"npu"`` without an index names the current npu device (``torch.npu.set_device``), as ``"cuda"``
names CUDA's current device.

Factory ops (``torch.empty/zeros/ones/full/randn(..., device="npu")``) reach pycann's kernels with
the index unset and resolve it there (``_memory_ops._index_of``). Conversions do not: ``Tensor.to``,
``torch.tensor``, ``torch.as_tensor``, ``torch.asarray`` and ``Tensor.new_tensor`` fill the index in
C++ from the device guard's ``getDevice()``, and the Python device guard PyTorch offers to
out-of-tree backends (``torch._C._acc.DeviceGuard``) always answers 0 (it cannot be overridden from
Python). Those entry points are wrapped here to name the current device before C++ sees the call.

``install()`` is called when the process has more than one npu device (``PYCANN_DEVICE_COUNT`` /
``LOCAL_WORLD_SIZE``) and again by ``set_device`` for a device other than 0; with one device the
answer is always ``npu:0`` and nothing is wrapped (no cost on ``.to()``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

_NPU = "npu"
_installed = False


def resolve(dev: Any) -> Any:
    """``dev`` with the current npu index filled in when it is ``"npu"`` / ``torch.device("npu")``
    without one; any other value unchanged."""
    if type(dev) is str:
        if dev != _NPU:
            return dev
    elif type(dev) is torch.device:
        if dev.type != _NPU or dev.index is not None:
            return dev
    else:
        return dev
    from pycann.torch.npu import current_device

    return torch.device(_NPU, current_device())


def _wrap_to(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args:
            a = args[0]
            r = resolve(a)
            if r is not a:
                args = (r, *args[1:])
        if kwargs and "device" in kwargs:
            kwargs["device"] = resolve(kwargs["device"])
        return fn(self, *args, **kwargs)

    return to


def _wrap_device_kw(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with its ``device`` keyword resolved (keyword-only in each function wrapped)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if kwargs and "device" in kwargs:
            kwargs["device"] = resolve(kwargs["device"])
        return fn(*args, **kwargs)

    return wrapper


def install() -> None:
    """Wrap the conversion entry points (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    torch.Tensor.to = _wrap_to(torch.Tensor.to)  # type: ignore[method-assign]
    torch.Tensor.new_tensor = _wrap_device_kw(torch.Tensor.new_tensor)  # type: ignore[method-assign]
    torch.tensor = _script_builtin(torch.tensor, _wrap_device_kw(torch.tensor))
    torch.as_tensor = _script_builtin(torch.as_tensor, _wrap_device_kw(torch.as_tensor))
    torch.asarray = _script_builtin(torch.asarray, _wrap_device_kw(torch.asarray))


def _script_builtin(orig: Callable[..., Any], wrapper: Callable[..., Any]) -> Callable[..., Any]:
    """``wrapper``, known to TorchScript as ``orig``'s builtin op (``aten::tensor``, ...).
    TorchScript finds builtins by the function object's identity; the wrapper was unknown to it, so
    ``torch.jit.script`` tried to compile it from source, followed ``__wrapped__`` to the C builtin and
    raised "module, class, method, function ... was expected, got builtin_function_or_method": with
    more than one npu (every rank under torchrun) any scripted code calling ``torch.tensor`` failed,
    ``import torch.distributed.optim`` (ZeroRedundancyOptimizer) included."""
    from torch.jit import _builtins

    op = _builtins._find_builtin(orig)
    if op is not None:
        _builtins._register_builtin(wrapper, op)
    return wrapper
