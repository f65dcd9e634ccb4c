"""``torch.npu.amp``: autocast and GradScaler on the npu device (torch.cuda.amp's names).

PyTorch's own autocast runs for the npu through its AutocastPrivateUse1 key; these are the
``torch.amp`` classes bound to ``device_type="npu"``.
"""

from __future__ import annotations

from typing import Any

import torch


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
