"""``torch.npu.amp``: autocast, GradScaler and the custom-Function decorators on the npu device
(torch.cuda.amp's names, torch_npu's ``torch_npu.npu.amp.__all__``), and the npu autocast state
functions torch_npu exports from ``torch.npu`` (``autocast_utils.py``).

PyTorch's own autocast runs for the npu through its AutocastPrivateUse1 key; these are the
``torch.amp`` classes and functions bound to ``device_type="npu"``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd"]


class autocast(torch.amp.autocast_mode.autocast):  # noqa: N801 - torch's name
    """``torch.autocast("npu", ...)``; default dtype float16 as on the NPU."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = torch.float16, cache_enabled: bool = True) -> None:
        super().__init__("npu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler("npu", ...)``."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True, **kwargs: Any) -> None:
        super().__init__("npu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)


def custom_fwd(fwd: Callable[..., Any] | None = None, *, cast_inputs: torch.dtype | None = None) -> Any:
    """``@torch.npu.amp.custom_fwd`` / ``@custom_fwd(cast_inputs=torch.float32)`` on a custom
    ``autograd.Function``'s ``forward``: ``torch.amp.custom_fwd(device_type="npu")``. With
    ``cast_inputs``, inside an npu autocast region the floating-point npu tensor arguments are cast
    to it and ``forward`` runs with autocast off; else it runs under the caller's autocast state."""
    if fwd is None:
        return torch.amp.custom_fwd(device_type="npu", cast_inputs=cast_inputs)
    return torch.amp.custom_fwd(fwd, device_type="npu", cast_inputs=cast_inputs)


def custom_bwd(bwd: Callable[..., Any] | None = None) -> Any:
    """``@torch.npu.amp.custom_bwd`` on the Function's ``backward``: it runs with the npu autocast
    state its ``forward`` ran with (``torch.amp.custom_bwd(device_type="npu")``)."""
    if bwd is None:
        return torch.amp.custom_bwd(device_type="npu")
    return torch.amp.custom_bwd(bwd, device_type="npu")


def is_autocast_enabled() -> bool:
    """Whether npu autocast is on in this thread (``torch.is_autocast_enabled("npu")``)."""
    return torch.is_autocast_enabled("npu")


def set_autocast_enabled(enable: bool) -> None:
    """Turn npu autocast on or off in this thread (``torch.set_autocast_enabled("npu", enable)``)."""
    torch.set_autocast_enabled("npu", bool(enable))


def get_autocast_dtype() -> torch.dtype:
    """The dtype npu autocast casts to (``torch.get_autocast_dtype("npu")``)."""
    return torch.get_autocast_dtype("npu")


def set_autocast_dtype(dtype: torch.dtype) -> None:
    """Set the dtype npu autocast casts to (``torch.set_autocast_dtype("npu", dtype)``)."""
    torch.set_autocast_dtype("npu", dtype)
