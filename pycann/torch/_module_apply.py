"""``model.npu()`` / ``model.to("npu")`` keep the Parameter objects, as ``.cuda()`` does.

``Module._apply`` (behind ``.to``, ``.npu``, ``.cpu``, ``.half``, ...) keeps each Parameter object
and swaps its ``.data`` when ``torch._has_compatible_shallow_copy_type(param, converted)`` holds,
which ATen grants between dense CPU/CUDA/XPU/... tensors but not for PrivateUse1, so moving a
module to the npu made new Parameters, one per owner:

* GPT-2-style tied weights (``head.weight = wte.weight``) became two parameters, each with half
  the gradient, and AdamW stepped them apart (wrong training, silently);
* an optimizer built before ``.npu()`` held the old CPU parameters, so ``step()`` changed nothing
  (on CUDA it trains the model).

This wraps ``Module._apply``: after the outermost call, each parameter that moved to or from the
npu is swapped back into its old object (``torch.utils.swap_tensors``, what PyTorch's
``set_swap_module_params_on_conversion`` does), and every owner gets that one object. Where the
swap is refused (a weak reference to the old tensor, or its autograd graph holding it), the
owners of a shared parameter still get one new Parameter.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import torch

_state = threading.local()
_installed: list[Any] = []


def _retie(owners: list[tuple[torch.nn.Module, str, torch.nn.Parameter]]) -> None:
    """Give every (module, key) the old Parameter object, now holding the converted data, or,
    where the swap is refused, the first owner's new Parameter; for parameters that moved to
    or from the npu."""
    first: dict[int, torch.nn.Parameter] = {}
    for mod, key, old in owners:
        new = mod._parameters.get(key)
        keep = first.get(id(old))  # ``owners`` holds ``old``: its id stays its own
        if new is None or new is old or (keep is None and "npu" not in (old.device.type, new.device.type)):
            continue  # (a swapped ``old`` is on the new device: a later owner finds it in ``first``)
        if keep is None:
            keep = new
            if type(old) is type(new) and old.requires_grad == new.requires_grad:
                try:
                    torch.utils.swap_tensors(old, new)
                    keep = old
                except RuntimeError:
                    pass
            first[id(old)] = keep
        if keep.shape == old.shape:
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
