"""``model.npu()`` / ``model.to("npu")`` keep a parameter shared by two modules shared.

``Module._apply`` (behind ``.to``, ``.npu``, ``.cpu``, ``.half``, ...) keeps each Parameter object
and swaps its ``.data`` when ``torch._has_compatible_shallow_copy_type(param, converted)`` holds,
which ATen grants between dense CPU/CUDA/XPU/... tensors but not for PrivateUse1. So moving a
module to the npu made a new Parameter per owner: GPT-2-style tied weights
(``head.weight = wte.weight``) became two parameters, each with half the gradient, and AdamW
stepped them apart (wrong training, silently; on CUDA and torch CPU they stay one tensor).
This wraps ``Module._apply``: after the outermost call, every owner of a parameter that moved to
or from the npu gets the first owner's new Parameter, as the ``.data`` swap would have left them.
(The Parameter objects are still new ones: an optimizer built before ``.npu()`` holds the old
CPU parameters, as PyTorch's docs warn for ``.cuda()``.)
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch

_state = threading.local()
_installed: list[Any] = []


def _retie(owners: list[tuple[torch.nn.Module, str, torch.nn.Parameter]]) -> None:
    """Give every (module, key) whose old parameter is shared the first owner's new one, for
    parameters that moved to or from the npu."""
    first: dict[int, torch.nn.Parameter] = {}
    for mod, key, old in owners:
        new = mod._parameters.get(key)
        if new is None or new is old or "npu" not in (old.device.type, new.device.type):
            continue
        keep = first.setdefault(id(old), new)  # ``owners`` holds ``old``: its id stays its own
        if new is not keep and new.shape == keep.shape:
            mod._parameters[key] = keep


def install() -> None:
    """Wrap ``torch.nn.Module._apply`` (once per process)."""
    if _installed:
        return
    orig = torch.nn.Module._apply

    @functools.wraps(orig)
    def _apply(self: torch.nn.Module, fn: Any, recurse: bool = True) -> Any:
        if getattr(_state, "inside", False):  # a child's call inside the outermost one
            return orig(self, fn, recurse)
        mods = self.modules() if recurse else (self,)
        owners = [(m, k, p) for m in mods for k, p in m._parameters.items() if p is not None]
        _state.inside = True
        try:
            out = orig(self, fn, recurse)
        finally:
            _state.inside = False
        _retie(owners)
        return out

    torch.nn.Module._apply = _apply  # type: ignore[method-assign]
    _installed.append(orig)
