"""Backward passes on every npu device, not only ``npu:0``.

PyTorch's autograd engine gives each device of an accelerator a worker thread and a ready queue,
sized by the device guard's ``deviceCount()``. A device guard written in Python
(``torch._C._acc.DeviceGuard``, the only kind a pure-Python backend can register) reports one
device, so a backward pass touching ``npu:1`` failed an internal assert
(``device_ready_queues_``). pycann's npu ops run synchronously on the calling thread anyway, so
when more than one npu device exists (``torch.npu.device_count() > 1``) backward passes run with
the engine's multithreading off (``torch.autograd.set_multithreading_enabled(False)``): every
node runs on the calling thread, in the engine's usual order. This wraps
``torch.autograd.graph._engine_run_backward`` (the one entry of ``backward()`` and
``torch.autograd.grad``; PyTorch's own tracing patches the same two names).
"""

from __future__ import annotations

from typing import Any

import torch

_installed: list[Any] = []


def install() -> None:
    """Wrap the engine entry (once per process)."""
    if _installed:
        return
    from pycann import config

    orig = torch.autograd.graph._engine_run_backward

    def _engine_run_backward(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
        if config.device_count() > 1:
            with torch.autograd.set_multithreading_enabled(False):
                return orig(t_outputs, *args, **kwargs)
        return orig(t_outputs, *args, **kwargs)

    torch.autograd.graph._engine_run_backward = _engine_run_backward
    torch.autograd._engine_run_backward = _engine_run_backward  # type: ignore[attr-defined]
    _installed.append(orig)
