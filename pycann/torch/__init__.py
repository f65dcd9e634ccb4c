"""pycann's PyTorch adaptor: an ``npu`` device in PyTorch backed by pycann's CPU device.

``import pycann.torch`` (or ``import torch_npu`` under ``pycann-run``) registers the device through
PyTorch's out-of-tree mechanism, in pure Python:

* PrivateUse1 renamed ``npu`` (``torch.utils.rename_privateuse1_backend``), ``Tensor.npu()`` /
  ``is_npu`` and ``Module.npu()`` (``generate_methods_for_privateuse1_backend``), the device
  module ``torch.npu`` (``pycann.torch.npu``), and PyTorch's Python PrivateUse1 hooks and device
  guard (``torch._C._acc``, what ``torch.utils.backend_registration`` uses for Python backends);
* one boxed kernel for every ATen op on the npu (``_dispatch``; providers in ``optable``, CPU
  fallback warnings and the per-op report in ``fallback``);
* npu memory is host memory: npu tensors are views of host buffers (``_alias``), so moving a
  tensor between cpu and npu is a memcpy and a kernel reads the buffer in place.

``report()`` returns the per-op counts (``Report.format()`` prints them); ``torch.compile(model,
backend="npu")`` lowers FX graphs to GE (``pycann.torch.compile``; registered lazily).
"""

from __future__ import annotations

import torch

from pycann.torch import _dispatch, fallback
from pycann.torch import npu as npu
from pycann.torch.fallback import FallbackDisabledError, Report, report, reset, warning_text
from pycann.torch.optable import Provider

__all__ = ["FallbackDisabledError", "Provider", "Report", "npu", "report", "reset", "warning_text"]

BACKEND = "npu"


class _Hooks(torch._C._acc.PrivateUse1Hooks):  # type: ignore[misc]
    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):  # type: ignore[misc]
    def type_(self) -> object:
        return torch._C._autograd.DeviceType.PrivateUse1


def _register() -> None:
    name = torch._C._get_privateuse1_backend_name()
    if name == BACKEND and hasattr(torch, BACKEND) and getattr(torch.Tensor, "is_npu", None) is not None:
        return  # registered already (e.g. imported under two names)
    if name != "privateuseone" and name != BACKEND:
        raise RuntimeError(f"pycann.torch: PyTorch's PrivateUse1 backend is already named {name!r} by another "
                           "extension; pycann's npu device cannot be registered beside it")
    if name != BACKEND:
        torch.utils.rename_privateuse1_backend(BACKEND)
    torch._register_device_module(BACKEND, npu)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    _dispatch.install()
    from pycann.torch import compile as _compile
    from pycann.torch_vision_hook import ensure_torchvision_importable

    ensure_torchvision_importable()

    _compile.register()


_register()
del fallback

if __import__("os").environ.get("TORCH_TRANSFER_TO_NPU", "0").strip() == "1":
    from pycann.torch import migrate as _migrate

    _migrate.apply()
